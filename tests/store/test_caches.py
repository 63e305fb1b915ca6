"""DisplayStateCache and cricket-fixture-cache (compressed raw fixtures, GSI by league, TTL)."""

from __future__ import annotations

import json
import random

import pytest

from daemon.store import Repositories
from daemon.store.caches import decode_raw_fixture, encode_raw_fixture

T0 = 1_800_000_000.0


async def test_display_state_cache_per_team_with_client_side_ttl(repos: Repositories):
    dc = repos.display_cache
    state = {
        "score": "154/3",
        "overs": "17.2 ov",
        "rr": "RR 8.91",
        "batters": [{"name": "V Kohli", "runs": 72}],
    }
    await dc.set_cached_display_state("71344", "10", state, ttl_s=60, now=T0)
    await dc.set_cached_display_state("71344", "11", {"score": "x"}, ttl_s=60, now=T0)
    assert await dc.get_cached_display_state("71344", "10", now=T0 + 59) == state
    assert await dc.get_cached_display_state("71344", "11", now=T0 + 59) == {"score": "x"}
    assert await dc.get_cached_display_state("71344", "10", now=T0 + 61) is None
    raw = await dc.dynamo.call("DisplayStateCache", "get_item", Key={"matchId": {"S": "DISPLAY#71344#10"}})
    assert raw["Item"]["ttl"] == {"N": str(int(T0 + 60))}


def _raw(i: int, league: int = 3, **extra):
    return {
        "id": 70000 + i,
        "league_id": league,
        "starting_at": f"2026-10-{i + 1:02d}T13:00:00.000000Z",
        "note": "x",
        "rr": 8.91,
        **extra,
    }


async def test_real_fixture_round_trips_exactly_and_compressed(repos: Repositories, real_fixture_path):
    raw = json.loads(real_fixture_path.read_text())["data"]
    fc = repos.fixture_cache
    await fc.put_single_fixture(
        str(raw["id"]), raw, league_id=str(raw["league_id"]), starting_at=raw["starting_at"], ttl_s=30, now=T0
    )
    assert await fc.get_cached_fixture(str(raw["id"]), now=T0 + 1) == raw
    item = await fc.dynamo.call("cricket-fixture-cache", "get_item", Key={"matchId": {"S": "71344"}})
    assert "B" in item["Item"]["rawFixture"] and len(item["Item"]["rawFixture"]["B"]) < 100_000
    assert await fc.get_cached_fixture("71344", now=T0 + 31) is None


async def test_batch_put_and_reads_by_league_all_and_batch_get(repos: Repositories):
    fc = repos.fixture_cache
    raws = [_raw(i) for i in range(28)] + [_raw(40, league=5)]
    n = await fc.batch_put_fixtures(raws, ttl_s=lambda r: 10 if r["id"] % 2 else 1000, now=T0)
    assert n == 29
    by_league = await fc.get_fixtures_by_league("3", now=T0 + 100)
    assert [r["id"] for r in by_league] == [70000 + i for i in range(0, 28, 2)]  # sorted by startingAt
    assert len(await fc.get_all_cached_fixtures(now=T0 + 1)) == 29
    assert len(await fc.get_all_cached_fixtures(now=T0 + 100)) == 15
    got = await fc.batch_get_cached_fixtures([str(70000 + i) for i in range(28)], now=T0 + 100)
    assert sorted(got) == sorted(str(70000 + i) for i in range(0, 28, 2))
    assert got["70002"] == _raw(2)


async def test_batch_put_refuses_a_fixture_without_id(repos: Repositories):
    with pytest.raises(ValueError, match=r"items\[1\].id: missing"):
        await repos.fixture_cache.batch_put_fixtures([_raw(1), {"league_id": 3}], ttl_s=10)


async def test_batch_put_accepts_envelopes_with_their_own_ttl(repos: Repositories):
    fc = repos.fixture_cache
    await fc.batch_put_fixtures(
        [
            {
                "matchId": "5",
                "rawFixture": {"id": 5, "x": 0.5},
                "leagueId": "3",
                "startingAt": "2026",
                "ttl_s": 5,
            },
            _raw(1),
        ],
        now=T0,
    )
    assert await fc.get_cached_fixture("5", now=T0 + 4) == {"id": 5, "x": 0.5}
    assert await fc.get_cached_fixture("5", now=T0 + 6) is None
    assert await fc.get_cached_fixture("70001", now=T0 + 3599) == _raw(1)  # the default TTL, an hour
    assert [r["id"] for r in await fc.get_fixtures_by_league("3", now=T0)] == [5, 70001]


def test_encoding_refuses_oversized_and_nan():
    incompressible = random.Random(1).randbytes(500_000).hex()
    with pytest.raises(ValueError, match="rawFixture of match 9: .* exceeds"):
        encode_raw_fixture({"blob": incompressible}, "9")
    with pytest.raises(ValueError):
        encode_raw_fixture({"x": float("nan")})
    assert decode_raw_fixture({"rawFixture": encode_raw_fixture({"a": [1.5]})}) == {"a": [1.5]}
