"""Declarative specs of the eleven DynamoDB tables, and the create/check operations on them.

Owns the schema: key attributes and their types, the GSIs, the TTL attribute, the billing mode. It is the
single source the repositories (key names), ``sightscreen tables create|check`` and the test fixtures use.
It does not read or write items.

Source: the data-model seed (``seeds/000``). Readings where the seed is silent or inconsistent:
- every key attribute is a String (SportMonks ids are stored as strings; ISO times sort as strings);
- GSIs project ALL attributes (their readers want whole items) and tables are PAY_PER_REQUEST;
- ``live-activities``' sort key ``userId#deviceId`` is the attribute ``visitorKey`` holding that composite;
- TTL attributes: ``ttl`` wherever the seed lists a ``ttl`` number (fixtures, devices, live-activities,
  active-matches, DisplayStateCache, fixture-cache); ``expiresAt`` on ``cricket-match-follows`` (the seed:
  "expiresAt ... DynamoDB TTL automatically cleans up follow records") and on ``cricket-locks`` (the seed:
  "expiresAt (epoch timestamp for auto-release)", a safety net for crashed holders; the acquire condition
  already treats an expired lock as free, so TTL deletion only removes garbage);
- ``DisplayStateCache`` keeps its seed name (no ``cricket-`` prefix); its key attribute is ``matchId``,
  holding ``DISPLAY#{matchId}#{teamId}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import trio
from botocore.exceptions import ClientError

from daemon.backoff import backoff_delay
from daemon.logs import get_logger
from daemon.store.dynamo import Dynamo

log = get_logger("daemon.store")


@dataclass(frozen=True)
class KeySpec:
    hash_key: str
    range_key: str | None = None

    def attributes(self) -> tuple[str, ...]:
        return (self.hash_key,) if self.range_key is None else (self.hash_key, self.range_key)

    def schema(self) -> list[dict[str, str]]:
        out = [{"AttributeName": self.hash_key, "KeyType": "HASH"}]
        if self.range_key is not None:
            out.append({"AttributeName": self.range_key, "KeyType": "RANGE"})
        return out


@dataclass(frozen=True)
class GsiSpec:
    name: str
    key: KeySpec
    projection: str = "ALL"


@dataclass(frozen=True)
class TableSpec:
    logical: str
    key: KeySpec
    gsis: tuple[GsiSpec, ...] = ()
    ttl_attribute: str | None = None
    # every key attribute is a string in this data model; kept explicit so `check` can compare types
    attribute_types: dict[str, str] = field(default_factory=dict)

    def attribute_type(self, name: str) -> str:
        return self.attribute_types.get(name, "S")

    def key_attributes(self) -> list[str]:
        names: list[str] = list(self.key.attributes())
        for gsi in self.gsis:
            for a in gsi.key.attributes():
                if a not in names:
                    names.append(a)
        return names

    def create_params(self, physical_name: str) -> dict[str, Any]:
        params: dict[str, Any] = {
            "TableName": physical_name,
            "KeySchema": self.key.schema(),
            "AttributeDefinitions": [
                {"AttributeName": a, "AttributeType": self.attribute_type(a)} for a in self.key_attributes()
            ],
            "BillingMode": "PAY_PER_REQUEST",
        }
        if self.gsis:
            params["GlobalSecondaryIndexes"] = [
                {
                    "IndexName": g.name,
                    "KeySchema": g.key.schema(),
                    "Projection": {"ProjectionType": g.projection},
                }
                for g in self.gsis
            ]
        return params


def _spec(
    logical: str,
    hash_key: str,
    range_key: str | None = None,
    *,
    gsis: tuple[GsiSpec, ...] = (),
    ttl: str | None = None,
) -> tuple[str, TableSpec]:
    return logical, TableSpec(logical, KeySpec(hash_key, range_key), gsis, ttl)


FIXTURES = "cricket-fixtures"
LIVE_ACTIVITIES = "live-activities"
ACTIVE_MATCHES = "active-matches"
TEAMS = "cricket-teams"
TEAM_SEASONS = "cricket-team-seasons"
LEAGUES = "cricket-leagues"
DEVICES = "cricket-devices"
MATCH_FOLLOWS = "cricket-match-follows"
LOCKS = "cricket-locks"
DISPLAY_STATE_CACHE = "DisplayStateCache"
FIXTURE_CACHE = "cricket-fixture-cache"

FIXTURES_BY_LEAGUE_INDEX = "leagueCode-startTime-index"
LIVE_ACTIVITIES_BY_USER_INDEX = "userId-index"
FIXTURE_CACHE_BY_LEAGUE_INDEX = "leagueId-startingAt-index"

TABLE_SPECS: dict[str, TableSpec] = dict(
    [
        _spec(
            FIXTURES,
            "matchId",
            gsis=(GsiSpec(FIXTURES_BY_LEAGUE_INDEX, KeySpec("leagueCode", "startTime")),),
            ttl="ttl",
        ),
        _spec(
            LIVE_ACTIVITIES,
            "matchId",
            "visitorKey",
            gsis=(GsiSpec(LIVE_ACTIVITIES_BY_USER_INDEX, KeySpec("userId")),),
            ttl="ttl",
        ),
        _spec(ACTIVE_MATCHES, "matchId", ttl="ttl"),
        _spec(TEAMS, "teamId"),
        _spec(TEAM_SEASONS, "seasonId", "teamId"),
        _spec(LEAGUES, "leagueId"),
        _spec(DEVICES, "userId", "deviceToken", ttl="ttl"),
        _spec(MATCH_FOLLOWS, "matchId", "userId", ttl="expiresAt"),
        _spec(LOCKS, "lockKey", ttl="expiresAt"),
        _spec(DISPLAY_STATE_CACHE, "matchId", ttl="ttl"),
        _spec(
            FIXTURE_CACHE,
            "matchId",
            gsis=(GsiSpec(FIXTURE_CACHE_BY_LEAGUE_INDEX, KeySpec("leagueId", "startingAt")),),
            ttl="ttl",
        ),
    ]
)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


async def _describe(dynamo: Dynamo, logical: str) -> dict[str, Any] | None:
    try:
        resp = await dynamo.call(logical, "describe_table")
    except ClientError as exc:
        if _code(exc) == "ResourceNotFoundException":
            return None
        raise
    return dict(resp["Table"])


async def _ttl_description(dynamo: Dynamo, logical: str) -> dict[str, Any]:
    resp = await dynamo.call(logical, "describe_time_to_live")
    return dict(resp.get("TimeToLiveDescription", {}))


def _table_ready(table: dict[str, Any]) -> bool:
    if table.get("TableStatus") != "ACTIVE":
        return False
    return all(g.get("IndexStatus", "ACTIVE") == "ACTIVE" for g in table.get("GlobalSecondaryIndexes", []))


async def _wait_active(dynamo: Dynamo, logical: str, timeout_s: float) -> None:
    looks = 0
    with trio.fail_after(timeout_s):
        while True:
            table = await _describe(dynamo, logical)
            if table is not None and _table_ready(table):
                return
            looks += 1
            await trio.sleep(backoff_delay(looks, base_s=0.05, cap_s=2.0))


async def create_tables(
    dynamo: Dynamo, specs: dict[str, TableSpec] | None = None, *, timeout_s: float = 300.0
) -> list[str]:
    """Create every missing table, wait until all are active, enable TTL where the spec has it.

    Idempotent: existing tables are left as they are (``check_tables`` reports how they differ).
    Returns the physical names created. A TTL already enabled on another attribute is left alone
    (DynamoDB allows one TTL attribute per table and no change within an hour); ``check`` reports it.
    """
    specs = TABLE_SPECS if specs is None else specs
    created: list[str] = []

    async def ensure(logical: str, spec: TableSpec) -> None:
        # CreateTable first: on a fresh account (and in every test) that saves a DescribeTable per table;
        # an existing table answers ResourceInUseException and is then described instead
        table: dict[str, Any] | None
        new = False
        try:
            resp = await dynamo.call(logical, "create_table", **spec.create_params(dynamo.table(logical)))
            table = dict(resp["TableDescription"])
            created.append(dynamo.table(logical))
            new = True
        except ClientError as exc:
            if _code(exc) != "ResourceInUseException":
                raise
            table = await _describe(dynamo, logical)
        if table is None or not _table_ready(table):
            await _wait_active(dynamo, logical, timeout_s)
        if spec.ttl_attribute is None:
            return
        if not new:
            desc = await _ttl_description(dynamo, logical)
            if desc.get("TimeToLiveStatus") in ("ENABLED", "ENABLING"):
                return
        try:
            await dynamo.call(
                logical,
                "update_time_to_live",
                TimeToLiveSpecification={"Enabled": True, "AttributeName": spec.ttl_attribute},
            )
        except ClientError as exc:
            # dynalite (a local peer the soak benchmark can use) has no TTL API. Nothing depends on TTL
            # deletion - every read filters expired items - so a peer without it is usable; say so.
            if _code(exc) != "UnknownOperationException":
                raise
            log.warning("dynamodb_ttl_unsupported", table=logical, attribute=spec.ttl_attribute)

    # tables are independent: create them side by side (each call still runs in a worker thread)
    async with trio.open_nursery() as nursery:
        for logical, spec in specs.items():
            nursery.start_soon(ensure, logical, spec)
    return sorted(created)


def _key_schema(schema: list[dict[str, str]]) -> tuple[str | None, str | None]:
    hash_key = next((k["AttributeName"] for k in schema if k["KeyType"] == "HASH"), None)
    range_key = next((k["AttributeName"] for k in schema if k["KeyType"] == "RANGE"), None)
    return hash_key, range_key


def _fmt_key(hash_key: str | None, range_key: str | None) -> str:
    return f"HASH {hash_key}" + (f", RANGE {range_key}" if range_key else "")


def compare_table(spec: TableSpec, name: str, table: dict[str, Any] | None, ttl: dict[str, Any]) -> list[str]:
    """Differences between one live table (DescribeTable + DescribeTimeToLive output) and its spec. Pure."""
    if table is None:
        return [f"{name}: table is missing"]
    diffs: list[str] = []
    types = {a["AttributeName"]: a["AttributeType"] for a in table.get("AttributeDefinitions", [])}

    want = (spec.key.hash_key, spec.key.range_key)
    have = _key_schema(table.get("KeySchema", []))
    if want != have:
        diffs.append(f"{name}: key is {_fmt_key(*have)}, spec says {_fmt_key(*want)}")
    for attr in spec.key_attributes():
        if attr in types and types[attr] != spec.attribute_type(attr):
            diffs.append(
                f"{name}: attribute {attr} has type {types[attr]}, spec says {spec.attribute_type(attr)}"
            )

    live_gsis = {g["IndexName"]: g for g in table.get("GlobalSecondaryIndexes", [])}
    for gsi in spec.gsis:
        live = live_gsis.pop(gsi.name, None)
        if live is None:
            diffs.append(f"{name}: GSI {gsi.name} is missing")
            continue
        have_g = _key_schema(live.get("KeySchema", []))
        want_g = (gsi.key.hash_key, gsi.key.range_key)
        if have_g != want_g:
            diffs.append(f"{name}: GSI {gsi.name} key is {_fmt_key(*have_g)}, spec says {_fmt_key(*want_g)}")
        projection = live.get("Projection", {}).get("ProjectionType")
        if projection != gsi.projection:
            diffs.append(f"{name}: GSI {gsi.name} projects {projection}, spec says {gsi.projection}")
    for extra in sorted(live_gsis):
        diffs.append(f"{name}: GSI {extra} is not in the spec")

    status = ttl.get("TimeToLiveStatus", "DISABLED")
    enabled = status in ("ENABLED", "ENABLING")
    ttl_attr = ttl.get("AttributeName")
    if spec.ttl_attribute is None:
        if enabled:
            diffs.append(f"{name}: TTL is enabled on {ttl_attr}, spec says no TTL")
    elif not enabled:
        diffs.append(f"{name}: TTL is {status}, spec says enabled on {spec.ttl_attribute}")
    elif ttl_attr != spec.ttl_attribute:
        diffs.append(f"{name}: TTL attribute is {ttl_attr}, spec says {spec.ttl_attribute}")
    return diffs


async def check_tables(dynamo: Dynamo, specs: dict[str, TableSpec] | None = None) -> list[str]:
    """Human-readable differences between the live tables and the specs; ``[]`` when they all match."""
    specs = TABLE_SPECS if specs is None else specs
    diffs: list[str] = []
    for logical, spec in specs.items():
        table = await _describe(dynamo, logical)
        ttl = await _ttl_description(dynamo, logical) if table is not None else {}
        diffs.extend(compare_table(spec, dynamo.table(logical), table, ttl))
    return diffs
