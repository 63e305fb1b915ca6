"""Region-wide leases (``feed:{region}``, ``job:{name}:{region}``) and the feed leader's fenced cache writes,
against moto's server: epochs, takeover, and a former leader's writes refused."""

from __future__ import annotations

import time
from typing import Any

from daemon.store.caches import CacheEntry, CachePut, FenceLost
from daemon.store.dynamo import count_calls
from daemon.store.locks import Lease, feed_lock_key, job_lock_key, lease_holds, lease_is_free

FIXTURE = {
    "id": 501,
    "league_id": 3,
    "starting_at": "2026-12-03T10:00:00.000000Z",
    "status": "1st Innings",
    "runs": [{"score": 12.5}],
}


def test_lease_decisions_are_pure() -> None:
    lease = Lease("feed:eu", "a", 3, 100.0)
    item = {"owner": "a", "epoch": 3, "expiresAt": 100.0}
    assert lease_holds(item, lease, 99.9)
    assert not lease_holds(item, lease, 100.0)  # run out: a paused leader's clock says so on waking
    assert not lease_holds({**item, "epoch": 4}, lease, 50.0)  # taken over, even if it names us
    assert not lease_holds({**item, "owner": "b"}, lease, 50.0)
    assert not lease_holds(None, lease, 50.0)
    assert lease_is_free(None, 0.0)
    assert lease_is_free(item, 100.5)
    assert not lease_is_free(item, 99.0)
    assert feed_lock_key("eu") == "feed:eu"
    assert job_lock_key("fixture-sync", "eu") == "job:fixture-sync:eu"


async def test_acquire_bumps_the_epoch_only_for_a_new_holder(repos: Any) -> None:
    locks = repos.locks
    key = feed_lock_key("eu")
    t = time.time()
    first, _ = await locks.acquire_fenced(key, "a", 5, now=t)
    assert first is not None and first.epoch == 1
    refused, seen = await locks.acquire_fenced(key, "b", 5, now=t + 1)
    assert refused is None and seen is not None and seen["owner"] == "a" and seen["epoch"] == 1
    again, _ = await locks.acquire_fenced(key, "a", 5, now=t + 1)  # a lost-response retry of ours
    assert again is not None and again.epoch == 1
    renewed = await locks.extend_fenced(first, 5, now=t + 2, fields={"lastPollAt": t + 2})
    assert renewed is not None and renewed.expires_at == t + 7
    taken, _ = await locks.acquire_fenced(key, "b", 5, now=t + 8)  # a's lease ran out
    assert taken is not None and taken.epoch == 2 and taken.owner == "b"
    assert await locks.extend_fenced(first, 5, now=t + 9) is None  # a cannot renew b's lease
    item = await locks.read(key)
    assert item is not None and item["owner"] == "b" and item["lastPollAt"] == t + 2


async def test_fenced_cache_writes_need_the_lease(repos: Any) -> None:
    locks, cache = repos.locks, repos.fixture_cache
    key = feed_lock_key("eu")
    t = time.time()
    lease, _ = await locks.acquire_fenced(key, "a", 30, now=t)
    assert lease is not None
    put = CachePut("501", FIXTURE, ttl_s=600, seq=1, fetched_at=t)
    n = await cache.put_fixtures_fenced([put], lambda: locks.lease_condition(lease), lease.epoch)
    assert n == 1
    entries = await cache.batch_get_entries(["501", "999"])
    assert set(entries) == {"501"}
    entry: CacheEntry = entries["501"]
    assert entry.stamp == (1, 1) and entry.fetched_at == t and entry.fixture() == FIXTURE
    assert await cache.batch_get_stamps(["501", "999"]) == {"501": (1, 1, t)}  # the stamps alone
    # the lease as the holder's clock sees it after a pause past its end: refused, nothing written
    later = {**FIXTURE, "status": "2nd Innings"}
    stale = CachePut("501", later, ttl_s=600, seq=2, fetched_at=t + 40)
    try:
        await cache.put_fixtures_fenced(
            [stale], lambda: locks.lease_condition(lease, now=t + 31), lease.epoch
        )
    except FenceLost:
        pass
    else:
        raise AssertionError("a write past the lease's end went through")
    # another instance took the lease: the old holder's write is refused even by a clock that lags
    taken, _ = await locks.acquire_fenced(key, "b", 30, now=t + 31)
    assert taken is not None and taken.epoch == 2
    try:
        await cache.put_fixtures_fenced([stale], lambda: locks.lease_condition(lease, now=t + 1), lease.epoch)
    except FenceLost:
        pass
    else:
        raise AssertionError("a deposed leader's write went through")
    assert (await cache.batch_get_entries(["501"]))["501"].fixture() == FIXTURE
    ok = await cache.put_fixtures_fenced(
        [CachePut("501", later, ttl_s=600, seq=1, fetched_at=t + 41)],
        lambda: locks.lease_condition(taken, now=t + 32),
        taken.epoch,
    )
    assert ok == 1
    entry = (await cache.batch_get_entries(["501"]))["501"]
    assert entry.stamp == (2, 1) and entry.fixture()["status"] == "2nd Innings"


async def test_livescores_summary_round_trip(repos: Any) -> None:
    locks, cache = repos.locks, repos.fixture_cache
    t = time.time()
    lease, _ = await locks.acquire_fenced(feed_lock_key("eu"), "a", 30, now=t)
    assert lease is not None
    summary = [{"id": 501, "status": "1st Innings", "league_id": 3}]
    await cache.put_livescores_summary(
        "eu", summary, t, lambda: locks.lease_condition(lease), lease.epoch, ttl_s=60
    )
    got = await cache.get_livescores_summary("eu")
    assert got == (summary, t)
    assert await cache.get_livescores_summary("us") is None


async def test_the_leaders_feed_state_rides_with_the_summary_and_a_bad_one_is_ignored(repos: Any) -> None:
    locks, cache = repos.locks, repos.fixture_cache
    t = time.time()
    lease, _ = await locks.acquire_fenced(feed_lock_key("eu"), "a", 30, now=t)
    assert lease is not None
    summary = [{"id": 502, "status": "1st Innings", "league_id": 3}]
    state = {"budget": {"livescores": [[t, 4]]}, "budgetAt": t, "notFound": {"released": {"123": t + 600}}}
    await cache.put_livescores_summary(
        "eu", summary, t, lambda: locks.lease_condition(lease), lease.epoch, ttl_s=60, state=state
    )
    assert await cache.get_livescores_summary_and_state("eu") == (summary, t, state)
    assert await cache.get_livescores_summary("eu") == (summary, t)
    await cache.put_livescores_summary(
        "eu", summary, t, lambda: locks.lease_condition(lease), lease.epoch, ttl_s=60
    )
    assert await cache.get_livescores_summary_and_state("eu") == (summary, t, {})
    await repos.dynamo.call(
        cache.logical,
        "update_item",
        TableName=repos.dynamo.table(cache.logical),
        Key={"matchId": {"S": "livescores:eu"}},
        UpdateExpression="SET feedState = :s",
        ExpressionAttributeValues={":s": {"S": "[not json"}},
    )
    assert await cache.get_livescores_summary_and_state("eu") == (summary, t, {})  # the summary still served
    assert await cache.get_livescores_summary_and_state("us") is None


async def test_a_followers_stamp_read_carries_the_leaders_404_verdicts_in_the_same_batch(repos: Any) -> None:
    locks, cache = repos.locks, repos.fixture_cache
    t = time.time()
    lease, _ = await locks.acquire_fenced(feed_lock_key("eu"), "a", 30, now=t)
    assert lease is not None
    await cache.put_fixtures_fenced(
        [CachePut("501", FIXTURE, ttl_s=600, seq=3, fetched_at=t)],
        lambda: locks.lease_condition(lease),
        lease.epoch,
    )
    # no summary yet: the stamps alone, no verdicts
    got = await cache.batch_get_region_stamps(["501"], "eu")
    assert got.stamps == {"501": (1, 3, t)} and got.not_found is None and got.polled_at is None
    not_found = {"released": {"123": t + 600}, "tries": {"124": 2}}
    state = {"budget": {"livescores": [[t, 4]]}, "budgetAt": t, "notFound": not_found}
    await cache.put_livescores_summary(
        "eu", [], t, lambda: locks.lease_condition(lease), lease.epoch, ttl_s=60, state=state
    )
    with count_calls() as calls:
        got = await cache.batch_get_region_stamps(["501", "999"], "eu")
    assert calls.n == 1  # one BatchGetItem for the stamps and the verdicts
    assert got.stamps == {"501": (1, 3, t)}  # the summary item is not taken for a match
    assert got.not_found == not_found and got.polled_at == t  # and the poll it marks
    assert (await cache.batch_get_region_stamps([], "eu")).not_found == not_found  # verdicts alone
    assert (await cache.batch_get_region_stamps(["501"], "us")).not_found is None  # another region's
    # an unreadable verdict attribute is ignored (logged); the stamps are still served
    await repos.dynamo.call(
        cache.logical,
        "update_item",
        TableName=repos.dynamo.table(cache.logical),
        Key={"matchId": {"S": "livescores:eu"}},
        UpdateExpression="SET feedNotFound = :s",
        ExpressionAttributeValues={":s": {"S": "[not json"}},
    )
    got = await cache.batch_get_region_stamps(["501"], "eu")
    assert got.stamps == {"501": (1, 3, t)} and got.not_found is None
