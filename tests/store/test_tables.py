"""Table specs, `create_tables` and `check_tables` against the moto server."""

from __future__ import annotations

from daemon.store import TABLE_SPECS, Dynamo, DynamoSettings, check_tables, create_tables
from daemon.store.tables import GsiSpec, KeySpec, TableSpec, compare_table


def test_specs_cover_the_eleven_tables_of_the_data_model():
    assert sorted(TABLE_SPECS) == sorted(
        [
            "cricket-fixtures",
            "live-activities",
            "active-matches",
            "cricket-teams",
            "cricket-team-seasons",
            "cricket-leagues",
            "cricket-devices",
            "cricket-match-follows",
            "cricket-locks",
            "DisplayStateCache",
            "cricket-fixture-cache",
        ]
    )
    gsis = {g.name: (t, g.key) for t, s in TABLE_SPECS.items() for g in s.gsis}
    assert gsis == {
        "leagueCode-startTime-index": ("cricket-fixtures", KeySpec("leagueCode", "startTime")),
        "userId-index": ("live-activities", KeySpec("userId")),
        "leagueId-startingAt-index": ("cricket-fixture-cache", KeySpec("leagueId", "startingAt")),
    }
    assert TABLE_SPECS["live-activities"].key == KeySpec("matchId", "visitorKey")
    assert TABLE_SPECS["cricket-devices"].key == KeySpec("userId", "deviceToken")
    assert TABLE_SPECS["cricket-team-seasons"].key == KeySpec("seasonId", "teamId")
    assert TABLE_SPECS["cricket-locks"].key == KeySpec("lockKey")
    assert TABLE_SPECS["cricket-teams"].ttl_attribute is None
    assert TABLE_SPECS["active-matches"].ttl_attribute == "ttl"


async def test_create_makes_every_table_with_prefix_ttl_and_is_idempotent(moto_server, table_prefix):
    d = Dynamo(DynamoSettings(endpoint_url=moto_server.url, table_prefix=table_prefix))
    created = await create_tables(d)
    assert sorted(created) == sorted(table_prefix + t for t in TABLE_SPECS)
    assert await create_tables(d) == []
    assert await check_tables(d) == []
    ttl = await d.call("cricket-match-follows", "describe_time_to_live")
    assert ttl["TimeToLiveDescription"] == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expiresAt"}
    table = (await d.call("cricket-fixtures", "describe_table"))["Table"]
    assert table["TableName"] == f"{table_prefix}cricket-fixtures"
    assert table["TableStatus"] == "ACTIVE"


async def test_check_names_each_difference(moto_server, table_prefix):
    d = Dynamo(DynamoSettings(endpoint_url=moto_server.url, table_prefix=table_prefix))
    # a wrong live table: locks keyed on lockId, no TTL; fixtures missing its GSI; the rest missing
    await d.call(
        "cricket-locks",
        "create_table",
        KeySchema=[{"AttributeName": "lockId", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "lockId", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    await d.call(
        "cricket-fixtures",
        "create_table",
        KeySchema=[{"AttributeName": "matchId", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "matchId", "AttributeType": "N"}],
        BillingMode="PAY_PER_REQUEST",
    )
    diffs = await check_tables(d)
    text = "\n".join(diffs)
    assert f"{table_prefix}cricket-locks: key is HASH lockId, spec says HASH lockKey" in text
    assert f"{table_prefix}cricket-locks: TTL is DISABLED, spec says enabled on expiresAt" in text
    assert f"{table_prefix}cricket-fixtures: attribute matchId has type N, spec says S" in text
    assert f"{table_prefix}cricket-fixtures: GSI leagueCode-startTime-index is missing" in text
    assert f"{table_prefix}active-matches: table is missing" in text
    # create fills in what is missing but leaves a wrong existing table for a human to fix
    await create_tables(d)
    after = await check_tables(d)
    assert any("cricket-locks: key is HASH lockId" in x for x in after)
    assert not any("table is missing" in x for x in after)


def test_compare_reports_extra_gsi_projection_and_unexpected_ttl():
    spec = TableSpec("t", KeySpec("a"), (GsiSpec("g", KeySpec("b")),))
    live = {
        "KeySchema": [{"AttributeName": "a", "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": "a", "AttributeType": "S"}],
        "GlobalSecondaryIndexes": [
            {
                "IndexName": "g",
                "KeySchema": [{"AttributeName": "b", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            },
            {
                "IndexName": "h",
                "KeySchema": [{"AttributeName": "c", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "ALL"},
            },
        ],
    }
    diffs = compare_table(spec, "p-t", live, {"TimeToLiveStatus": "ENABLED", "AttributeName": "ttl"})
    assert diffs == [
        "p-t: GSI g projects KEYS_ONLY, spec says ALL",
        "p-t: GSI h is not in the spec",
        "p-t: TTL is enabled on ttl, spec says no TTL",
    ]
