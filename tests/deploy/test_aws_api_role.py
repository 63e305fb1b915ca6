"""The API role as the region's template runs it: a ``sightscreen run`` process with ``roles = ["api"]`` and
the API role's own credentials, driven over HTTP through every route its OpenAPI document lists.

What it is for beyond the API's own tests: the test DynamoDB records every permission this process needs
(``tests/harness/aws_peer.py``), and the policy gate holds the template's ApiTaskRole to exactly that
(``tests/harness/aws_policy_gate.py``). A route the tour does not take would be a route whose DynamoDB calls
the policy was never checked against, so the test fails when the API gains a route the tour does not know.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from daemon.demo.issuer import LocalIssuer
from daemon.replay.synth import synthesise
from daemon.store import Dynamo, DynamoSettings, Repositories, create_tables
from daemon.store.codec import iso
from tests.harness.api_process import ApiProcess
from tests.harness.seed import seed_match

pytestmark = pytest.mark.slow


def _route(path: str, params: dict[str, str]) -> str:
    """The OpenAPI path template a concrete path was made from."""
    for name, value in params.items():
        path = path.replace(f"/{value}", f"/{{{name}}}", 1)
    return path


async def test_the_api_role_answers_every_route_from_its_own_process(
    tmp_path: Path, sock_dir: Path, moto_server: Any, table_prefix: str
) -> None:
    dynamo = Dynamo(DynamoSettings(endpoint_url=moto_server.url, table_prefix=table_prefix))
    await create_tables(dynamo)
    repos = Repositories(dynamo)
    tape = synthesise("T20", seed=7)
    # Seeded (tests/harness/seed.py): the tour takes each route once, on a world the engine would have made
    # (a league, its teams and a fixture; a device and a session to read back); the engine's own doors from
    # empty tables are tests/e2e/test_region_from_empty.py's.
    starts_at = time.time() + 3600
    seeded = await seed_match(
        repos,
        tape,
        starts_at=starts_at,
        followers=2,
        league_name="Tour",
        league_code="TOUR",
        devices=True,
        sessions=True,
    )
    match_id, league_id = seeded.match_id, seeded.league_id
    team_id, other_team = str(tape.localteam.id), str(tape.visitorteam.id)
    await repos.team_seasons.write_season_team_records(
        [{"seasonId": "5001", "teamId": team_id}, {"seasonId": "5001", "teamId": other_team}]
    )
    # the match's broadcast channel, as its owner creates it at the start (the engine's, seeded here)
    channel = "dHN1LMUT8eIXOOaqdvUt5HwhDrIJCxT7AAAAAAAAAAA="
    assert await repos.fixtures.swap_broadcast_channels(match_id, None, {"neutral": channel})

    with LocalIssuer().serve() as issuer:
        api = ApiProcess(
            tmp_path,
            dynamodb_url=moto_server.url,
            table_prefix=table_prefix,
            issuer=issuer,
            sock_dir=sock_dir,
        ).start()
        user = {"Authorization": f"Bearer {issuer.mint('tour-user')}"}
        admin = {"Authorization": f"Bearer {issuer.mint('tour-admin', groups=['admin'])}"}
        taken: set[tuple[str, str]] = set()
        try:
            async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
                await api.wait_ready(http)
                listed = {
                    (method.upper(), path)
                    for path, methods in (await http.get("/openapi.json")).json()["paths"].items()
                    for method in methods
                }

                # (method, path, expected status, the path's parameters, query, body, as admin)
                match, league = f"/matches/{match_id}", f"/leagues/{league_id}"
                follow, activity = f"/user/follow/{match_id}", f"/user/activity/{match_id}"
                on_match, on_league = {"matchId": match_id}, {"leagueId": league_id}
                schedule = {
                    "from": iso(starts_at - 60, timespec="seconds"),
                    "to": iso(starts_at + 60, timespec="seconds"),
                }
                steps: list[tuple[str, str, int, dict[str, str], dict[str, str], Any, bool]] = [
                    ("GET", "/healthz", 200, {}, {}, None, False),
                    ("GET", "/readyz", 200, {}, {}, None, False),
                    ("GET", "/matches", 200, {}, {"league": "TOUR"}, None, False),
                    ("GET", "/matches", 200, {}, {"league": "TOUR", **schedule}, None, False),
                    ("GET", "/matches", 200, {}, {"ids": match_id, "include": "raw"}, None, False),
                    (
                        "GET",
                        "/matches",
                        200,
                        {},
                        {"league": "TOUR", "from": "2020-01-01T00:00:00Z"},
                        None,
                        False,
                    ),
                    ("GET", match, 200, on_match, {}, None, False),
                    (
                        "GET",
                        f"{match}/display",
                        404,
                        on_match,
                        {},
                        None,
                        False,
                    ),  # no tick yet: nothing cached
                    ("GET", "/teams", 200, {}, {}, None, False),
                    ("GET", f"/teams/{team_id}", 200, {"teamId": team_id}, {}, None, False),
                    ("PATCH", f"/teams/{team_id}", 200, {"teamId": team_id}, {}, {"code": "TR"}, True),
                    ("GET", "/seasons/5001/teams", 200, {"seasonId": "5001"}, {}, None, False),
                    ("GET", "/leagues", 200, {}, {}, None, False),
                    ("GET", league, 200, on_league, {}, None, False),
                    ("PATCH", league, 200, on_league, {}, {"active": True}, True),
                    (
                        "POST",
                        "/user/device",
                        200,
                        {},
                        {},
                        {
                            "deviceToken": "ab" * 32,
                            "platform": "ios",
                            "osVersion": "17.4",
                            "appVersion": "1.0",
                        },
                        False,
                    ),
                    ("GET", "/user/device", 200, {}, {}, None, False),
                    (
                        "PUT",
                        "/user/device/push-to-start",
                        200,
                        {},
                        {},
                        {"pushToStartToken": "cd" * 32},
                        False,
                    ),
                    ("POST", follow, 201, on_match, {}, {"teamId": team_id}, False),
                    ("GET", follow, 200, on_match, {}, None, False),
                    ("PATCH", follow, 200, on_match, {}, {"teamId": other_team}, False),
                    (
                        "POST",
                        activity,
                        201,
                        on_match,
                        {},
                        {"deviceId": "d1", "updateToken": "ef" * 32},
                        False,
                    ),
                    (
                        "PATCH",
                        activity,
                        200,
                        on_match,
                        {},
                        {"deviceId": "d1", "updateToken": "01" * 32},
                        False,
                    ),
                    (
                        "POST",
                        f"{activity}/channel",
                        201,
                        on_match,
                        {},
                        {"deviceId": "d2", "channelId": channel},
                        False,
                    ),
                    ("GET", "/user/activities", 200, {}, {}, None, False),
                    ("DELETE", activity, 200, on_match, {"deviceId": "d1"}, None, False),
                    ("DELETE", follow, 200, on_match, {}, None, False),
                    ("DELETE", "/user/device", 200, {}, {}, None, False),
                    ("DELETE", league, 200, on_league, {}, None, True),
                ]
                for method, path, expect, ids, params, body, as_admin in steps:
                    headers = {} if path in ("/healthz", "/readyz") else admin if as_admin else user
                    resp = await http.request(method, path, params=params, json=body, headers=headers)
                    assert resp.status_code == expect, f"{method} {path}: {resp.status_code} {resp.text}"
                    if "from" in params:  # the league's schedule lists the match
                        assert [m["matchId"] for m in resp.json()["matches"]] == [match_id], resp.text
                    taken.add((method, _route(path, ids)))
            assert await api.stop() == 0, api.log_tail()
        finally:
            if api.proc is not None and api.proc.poll() is None:
                api.proc.kill()
                api.proc.wait()
            dynamo.close()
    untaken = listed - taken
    assert not untaken, (
        f"the tour does not take {sorted(untaken)}: add them, so the API role's policy covers them"
    )
