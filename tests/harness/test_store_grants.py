"""The policy gate's static half (``tests/harness/store_grants.py``): every repository method's DynamoDB
permissions read from the store's source, each role's declared calls checked against its code, and the
template's role policies against what those calls need; so a path no test drives cannot hide a missing grant.

The first test is the gate itself, on the real template and the real source. The others show what it catches:
each grant a fresh region lacked (removed again from a copy of the template), a repository method no role may
call, a role's code calling a method its declaration lacks, a stale declaration, and its readings of the
source checked on the methods whose needs are least obvious.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.harness.aws_stack import TASK_ROLES, load_template
from tests.harness.dynamodb_iam import Permission
from tests.harness.store_grants import (
    ROLE_CALLS,
    STORE,
    StoreReader,
    StoreSource,
    call_sites,
    check,
    repository_attributes,
    role_sites,
    store_permissions,
    template_grants,
)


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


@pytest.fixture(scope="module")
def source() -> StoreSource:
    return StoreSource()


@pytest.fixture(scope="module")
def reader(source: StoreSource) -> StoreReader:
    return StoreReader(source)


@pytest.fixture(scope="module")
def sites(source: StoreSource) -> dict[str, dict[str, list[str]]]:
    """Where the engine's and the API's code name each repository method, read once."""
    return role_sites(source.public_methods())


def test_the_template_grants_every_permission_each_roles_repository_calls_need() -> None:
    grants, loose = template_grants(load_template())
    assert loose == []
    assert check(grants) == []


def _without(template: dict[str, Any], role: str, sid: str, action: str) -> dict[str, Any]:
    """A copy of the template whose ``role`` policy statement ``sid`` no longer grants ``action`` (the
    statement goes when it granted nothing else)."""
    out = copy.deepcopy(template)
    policies = out["Resources"][TASK_ROLES[role]]["Properties"]["Policies"]
    statements = next(p["PolicyDocument"]["Statement"] for p in policies if p["PolicyName"] == "dynamodb")
    statement = next(s for s in statements if s.get("Sid") == sid)
    assert f"dynamodb:{action}" in statement["Action"], f"{sid} does not grant {action}: nothing to remove"
    statement["Action"] = [a for a in statement["Action"] if a != f"dynamodb:{action}"]
    if not statement["Action"]:
        statements.remove(statement)
    return out


# The grants a region deployed from the template lacked (each a path only an empty region takes): the role,
# the statement, the action, and the repository method whose call production would have refused.
MISSING_ON_DAY_ONE = [
    (
        "engine",
        "FixturesTable",
        "BatchWriteItem",
        "FixtureRepository.batch_write_fixtures",
        "cricket-fixtures",
    ),
    ("engine", "LeaguesTable", "PutItem", "LeagueRepository.put_league", "cricket-leagues"),
    ("engine", "TeamsTable", "BatchWriteItem", "TeamRepository.batch_write_teams", "cricket-teams"),
    (
        "engine",
        "TeamSeasonsTable",
        "BatchWriteItem",
        "TeamSeasonRepository.write_season_team_records",
        "cricket-team-seasons",
    ),
    ("engine", "DevicesTable", "BatchGetItem", "DeviceRepository.get_devices_of_users", "cricket-devices"),
    ("engine", "DevicesTable", "UpdateItem", "DeviceRepository.clear_push_to_start_token", "cricket-devices"),
    ("engine", "DevicesTable", "DeleteItem", "DeviceRepository.delete_device", "cricket-devices"),
    (
        "api",
        "FixturesTableLeaguecodeStarttimeIndex",
        "Query",
        "FixtureRepository.get_matches_by_date_range",
        "cricket-fixtures/index/leagueCode-startTime-index",
    ),
]


@pytest.mark.parametrize(
    ("role", "sid", "action", "method", "where"),
    MISSING_ON_DAY_ONE,
    ids=[f"{c[0]}-{c[3]}" for c in MISSING_ON_DAY_ONE],
)
def test_a_grant_taken_from_a_copy_of_the_template_fails_naming_the_call_that_needs_it(
    role: str,
    sid: str,
    action: str,
    method: str,
    where: str,
    template: dict[str, Any],
    reader: StoreReader,
    sites: dict[str, dict[str, list[str]]],
) -> None:
    grants, _ = template_grants(_without(template, role, sid, action))
    problems = check(grants, reader=reader, sites=sites)
    wanted = f"{role} calls {method}, which needs dynamodb:{action} on {where}: {TASK_ROLES[role]} does not grant it"
    assert wanted in problems, problems
    # and nothing else: the gate names exactly what is missing (a method issuing it twice is named twice)
    assert all(f"dynamodb:{action} on {where}" in p for p in problems), problems


def _source_with(module: str, old: str, new: str) -> StoreSource:
    texts = {p.name: p.read_text() for p in sorted(STORE.glob("*.py"))}
    assert old in texts[module]
    texts[module] = texts[module].replace(old, new, 1)
    return StoreSource(sources=texts)


def test_a_repository_method_no_role_may_call_fails_the_gate(
    template: dict[str, Any], sites: dict[str, dict[str, list[str]]]
) -> None:
    source = _source_with(
        "fixtures.py",
        "    async def get_fixture(",
        "    async def purge_fixtures(self, match_ids: list[str]) -> int:\n"
        "        return await self._batch_delete((m,) for m in match_ids)\n\n"
        "    async def get_fixture(",
    )
    grants, _ = template_grants(template)
    problems = check(grants, reader=StoreReader(source), sites=sites)
    assert any(
        p.startswith("FixtureRepository.purge_fixtures issues dynamodb:BatchWriteItem on cricket-fixtures")
        and "no role may call it" in p
        for p in problems
    ), problems


def test_a_roles_code_calling_an_undeclared_method_or_a_stale_declaration_fails_the_gate(
    template: dict[str, Any], source: StoreSource, reader: StoreReader
) -> None:
    public = source.public_methods()
    attributes = repository_attributes()
    api_code = {
        "daemon/api/routes.py": (
            "async def forget(api, user, token):\n"
            "    found = {}.get(token)  # a dict's get: no repository call\n"
            "    await api.repos.locks.get('health:probe')\n"
            "    await api.repos.devices.clear_push_to_start_token(user, token)\n"
        )
    }
    sites = {"api": call_sites(public, api_code, attributes), "engine": {}}
    assert set(sites["api"]) == {"LockRepository.get", "DeviceRepository.clear_push_to_start_token"}
    grants, _ = template_grants(template)
    problems = check(
        grants, declared={"api": ROLE_CALLS["api"], "engine": frozenset()}, sites=sites, reader=reader
    )
    assert (
        "api: its code calls DeviceRepository.clear_push_to_start_token (daemon/api/routes.py:4) but "
        "ROLE_CALLS does not declare it"
    ) in problems
    assert (
        "api: ROLE_CALLS declares MatchFollowRepository.follow_match but its code never calls it" in problems
    )


def test_the_reading_follows_helpers_indexes_transactions_and_conditional_reads(source: StoreSource) -> None:
    needs = store_permissions(source)
    devices = "cricket-devices"
    # a registration reads its tokens' claims in a batch, then writes one transaction: each of its items
    # needs its own action
    assert needs["DeviceRepository.register_device"] == {
        Permission("BatchGetItem", devices),
        Permission("GetItem", devices),
        Permission("Query", devices),
        Permission("PutItem", devices),
        Permission("UpdateItem", devices),
        Permission("DeleteItem", devices),
    }
    # the devices a follow names are read in batches, the rest one Query each
    assert needs["DeviceRepository.get_devices_of_users"] == {
        Permission("BatchGetItem", devices),
        Permission("Query", devices),
    }
    # a Query on an index needs the index; one on the table, the table
    assert needs["FixtureRepository.get_matches_by_date_range"] == {
        Permission("Query", "cricket-fixtures", "leagueCode-startTime-index")
    }
    # an index named in a dict the call spreads (``**kwargs`` built in the method) is followed too
    assert needs["LiveActivityRepository.get_user_la_sessions_page"] == {
        Permission("Query", "live-activities", "userId-index")
    }
    assert needs["MatchFollowRepository.get_followers_for_match"] == {
        Permission("Query", "cricket-match-follows")
    }
    # the feed leader's writes carry the lease's ConditionCheck, built by the locks
    assert (
        Permission("ConditionCheckItem", "cricket-locks")
        in needs["FixtureCacheRepository.put_fixtures_fenced"]
    )
    # a put without a condition never reads the item back; a conditional one may (a peer that ignores
    # ReturnValuesOnConditionCheckFailure)
    assert needs["LeagueRepository.put_league"] == {Permission("PutItem", "cricket-leagues")}
    assert needs["LockRepository.acquire"] == {
        Permission("PutItem", "cricket-locks"),
        Permission("GetItem", "cricket-locks"),
    }


def test_a_registry_entry_the_source_no_longer_bears_out_fails_the_gate() -> None:
    source = _source_with(
        "base.py",
        "return False, await self._get(*self._key_of(item), consistent=True)",
        "return False, None",
    )
    problems = StoreReader(source).check_registries()
    assert problems == ["ONLY_WITH Repository._put_or_old -> _get (with condition): not in the source"]
