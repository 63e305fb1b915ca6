"""cricket-fixtures: get, batch get/write past the limits, GSI date range, conditional updates, archive."""

from __future__ import annotations

import pytest

from daemon.store import Repositories
from tests.store import faults

T0 = 1_800_000_000.0


def _fixture(i: int, league: str = "IPL", day: int = 1, **extra):
    return {
        "matchId": str(1000 + i),
        "leagueCode": league,
        "startTime": f"2027-04-{day:02d}T14:00:00Z",
        "live": False,
        "displayState": {"score": "0/0", "rr": 0.0},
        **extra,
    }


async def test_batch_write_and_batch_get_past_the_limits(repos: Repositories):
    fx = repos.fixtures
    hook = faults.unprocessed_batches(fx.dynamo.client, calls=0)  # observe sizes only
    await fx.batch_write_fixtures([_fixture(i) for i in range(140)])
    assert hook.sizes == [25] * 5 + [15]
    hook.sizes.clear()
    got = await fx.batch_get_fixtures([str(1000 + i) for i in range(140)] + ["missing", "1000"])
    assert hook.sizes == [100, 41]  # duplicates sent once
    assert len(got) == 140 and got["1005"]["displayState"] == {"score": "0/0", "rr": 0}


async def test_batch_write_with_a_repeated_key_keeps_the_last(repos: Repositories):
    await repos.fixtures.batch_write_fixtures([_fixture(1, live=False), _fixture(1, live=True)])
    assert (await repos.fixtures.get_fixture("1001"))["live"] is True


async def test_batch_write_refuses_a_non_string_gsi_key_naming_the_item(repos: Repositories):
    with pytest.raises(ValueError, match=r"items\[1\].startTime"):
        await repos.fixtures.batch_write_fixtures([_fixture(1), {**_fixture(2), "startTime": 17}])
    with pytest.raises(ValueError, match="matchId"):
        await repos.fixtures.batch_write_fixtures([{"leagueCode": "IPL"}])


async def test_matches_by_date_range_uses_the_gsi_sorted_and_paginated(repos: Repositories):
    fx = repos.fixtures
    await fx.batch_write_fixtures(
        [_fixture(i, day=1 + i) for i in range(10)] + [_fixture(50, league="BBL", day=3)]
    )
    faults.page_size(fx.dynamo.client, 3)
    got = await fx.get_matches_by_date_range("IPL", "2027-04-03T00:00:00Z", "2027-04-08T23:59:59Z")
    assert [g["startTime"][:10] for g in got] == [f"2027-04-{d:02d}" for d in range(3, 9)]


async def test_fixture_ttl_is_honoured_on_every_read(repos: Repositories):
    fx = repos.fixtures
    await fx.batch_write_fixtures([_fixture(1, ttl=int(T0)), _fixture(2)])
    assert await fx.get_fixture("1001", now=T0 + 1) is None
    assert set(await fx.batch_get_fixtures(["1001", "1002"], now=T0 + 1)) == {"1002"}
    got = await fx.get_matches_by_date_range("IPL", "2027", "2028", now=T0 + 1)
    assert [g["matchId"] for g in got] == ["1002"]


async def test_update_fields_only_on_existing_fixture_and_archive(repos: Repositories):
    fx = repos.fixtures
    assert await fx.update_fixture_fields("1001", {"live": True}) is False
    assert await fx.archive_fixture("1001") is False
    await fx.batch_write_fixtures([_fixture(1)])
    assert await fx.update_fixture_fields("1001", {"live": True, "liveUpdatedAt": "x", "displayState": None})
    got = await fx.get_fixture("1001")
    assert got["live"] is True and got["liveUpdatedAt"] == "x" and "displayState" not in got
    assert await fx.archive_fixture("1001", now=T0) is True
    got = await fx.get_fixture("1001")
    assert got["archivedAt"] == "2027-01-15T08:00:00.000Z" and "liveUpdatedAt" not in got
    with pytest.raises(ValueError, match="matchId"):
        await fx.update_fixture_fields("1001", {"matchId": "1002"})


async def test_broadcast_channels_are_claimed_and_swapped_only_while_the_record_and_claim_are_as_seen(
    repos: Repositories,
):
    fx = repos.fixtures
    await fx.batch_write_fixtures([_fixture(1)])
    mid = "1001"
    mine, theirs = {"id": "c0ffee", "epoch": 2}, {"id": "beef", "epoch": 2}
    assert await fx.claim_broadcast_channels(mid, None, mine)
    assert not await fx.swap_broadcast_channels(mid, None, {"neutral": "n1"}, claim=theirs)  # not our claim
    first = {"neutral": "n1", "9005": "a1", "9003": "b1"}
    assert await fx.swap_broadcast_channels(mid, None, first, claim=mine)
    stored = await fx.get_fixture(mid)
    assert stored["broadcastChannels"] == first and "broadcastChannelsClaim" not in stored
    assert not await fx.swap_broadcast_channels(mid, None, {"neutral": "x"})  # a record is there now
    # the record as seen (in any order) lets a change through; one entry more, less or different does not
    assert not await fx.claim_broadcast_channels(mid, {"neutral": "n1", "9005": "a1"}, mine)
    assert not await fx.claim_broadcast_channels(mid, {**first, "9003": "b2"}, mine)
    assert not await fx.claim_broadcast_channels(mid, {**first, "extra": "e"}, mine)
    assert await fx.claim_broadcast_channels(mid, dict(reversed(list(first.items()))), mine)
    second = {**first, "9003": "b2"}
    assert not await fx.swap_broadcast_channels(mid, first, second, claim=theirs)
    assert await fx.swap_broadcast_channels(mid, first, second, claim=mine)
    assert (await fx.get_fixture(mid))["broadcastChannels"] == second
    assert await fx.swap_broadcast_channels(mid, second, None)  # removed after the end
    assert "broadcastChannels" not in await fx.get_fixture(mid)
    assert not await fx.claim_broadcast_channels("404", None, mine)  # no such fixture
