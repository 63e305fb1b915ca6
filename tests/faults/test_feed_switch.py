"""The region's feed leader loses its lease just after a wicket's fixture went out in process: no alert twice.

The leader hands each fixture it polls to its own match actors at once and writes it to
``cricket-fixture-cache`` afterwards. Here the match is held (the replay paused) one ball before a wicket
until the cache holds that fixture; then the wicket's ball is posted and the leader's write of the wicket's
fixture is refused for real: just before the write another owner ("a ghost") takes the feed lease in
DynamoDB, so the write's lease ConditionCheck fails and the leader steps down. While the ghost holds the lease
the instance's cache reader serves its match actor what the cache holds: the fixture one ball before the
wicket, older than the actor's state. When the ghost's lease runs out the instance leads again and polls on.

Taken as news, that older fixture looks like a correction withdrawing the wicket (one wicket and one ball
back: within what a correction may do), and the next fresh fixture reports the wicket again: its alert twice
on every device. The match state keeps when the fixture that last changed it was fetched, and a fixture
fetched earlier is skipped. Checked on the APNs server's record: every token got every standing wicket and an
end, and none got any alert twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import trio

from daemon.store.locks import Lease, feed_lock_key
from tests.faults.checks import assert_nothing_lost
from tests.faults.test_owner_death import START_DELAY_S, duplicate_alerts
from tests.harness.fault_rig import FaultRig, aps

pytestmark = pytest.mark.slow

GHOST_LEASE_S = 2.5  # several cache reads (every half cadence) while the ghost holds it


def _runs(fixture: Mapping[str, Any]) -> list[tuple[int, int, int]]:
    rows = fixture.get("runs") or []
    if isinstance(rows, Mapping):
        rows = rows.get("data") or []
    return sorted((int(r["inning"]), int(r.get("score") or 0), int(r.get("wickets") or 0)) for r in rows)


def _wickets(fixture: Mapping[str, Any]) -> int:
    return sum(w for _, _, w in _runs(fixture))


def _next_wicket(rig: FaultRig, after: int) -> int:
    """The first cursor past ``after`` (and one more ball) at which the tape shows one more wicket."""
    tape = rig.replay.tape(rig.match_id)
    for cursor in range(after + 2, len(tape)):
        if _wickets(tape.fixture_at(cursor)) > _wickets(tape.fixture_at(cursor - 1)):
            return cursor
    raise AssertionError("no wicket left on the tape")


async def _steal_feed_lease(rig: FaultRig) -> None:
    """Another owner takes the region's feed lease from the instance (as one would once it ran out)."""
    key = feed_lock_key(rig.daemon.region)
    item = await rig.repos.locks.read(key)
    assert item is not None and item.get("owner") == rig.daemon.owner_id, "the instance leads the feed"
    held = Lease(key, str(item["owner"]), int(item["epoch"]), float(item["expiresAt"]))
    assert await rig.repos.locks.release_fenced(held)
    ghost, _ = await rig.repos.locks.acquire_fenced(key, "ghost#0", GHOST_LEASE_S)
    assert ghost is not None and ghost.epoch == held.epoch + 1


async def test_a_leader_that_steps_down_after_a_wickets_fixture_went_out_alerts_it_once(
    make_rig: Any,
) -> None:
    async with make_rig(seed=1, followers=6, lease_s=3.0, start_delay_wall_s=START_DELAY_S) as rig:
        daemon = rig.daemon
        with trio.fail_after(60):
            while not (daemon.leadership.leading and rig.accepted_updates() >= 1):
                await trio.sleep(0.05)  # the match is live and the instance leads the feed
        rig.replay.pause(rig.match_id)
        wicket = _next_wicket(rig, rig.replay.status()[rig.match_id]["cursor"])
        before = rig.replay.tape(rig.match_id).fixture_at(wicket - 1)
        rig.replay.seek(rig.match_id, wicket - 1)
        cached = rig.repos.fixture_cache.get_cached_fixture
        with trio.fail_after(30):  # the cache holds the fixture one ball before the wicket
            while _runs(await cached(rig.match_id) or {}) != _runs(before):
                await trio.sleep(0.05)

        cache = daemon.feed._cache  # the leader's fenced cache sink
        real_put = cache.put_single_fixture
        stolen = trio.Event()

        async def put_single_fixture(match_id: str, raw_fixture: Mapping[str, Any], **kw: Any) -> None:
            if not stolen.is_set() and match_id == rig.match_id and _wickets(raw_fixture) > _wickets(before):
                stolen.set()  # the wicket's fixture went to the match actor in process; now it is cached
                await _steal_feed_lease(rig)
            await real_put(match_id, raw_fixture, **kw)

        cache.put_single_fixture = put_single_fixture
        rig.replay.seek(rig.match_id, wicket)
        with trio.fail_after(30):
            await stolen.wait()
        with trio.fail_after(30):  # the cache reader served the older fixture; the instance leads again
            while not (daemon.cache_reader.delivered >= 1 and daemon.leadership.leading):
                await trio.sleep(0.05)
        rig.replay.play(rig.match_id)
        await assert_nothing_lost(rig)

        assert daemon.leadership.stepped_down >= 1 and daemon.leadership.became_leader >= 2
        assert cache.refused >= 1, "the wicket's fixture was refused: the cache stayed one ball behind"
        wickets = [r for r in rig.apns.records if r["status"] == 200 and "alert" in aps(r)]
        assert wickets, "the wicket was alerted"
        assert duplicate_alerts(rig) == {}, "an alert shown twice after the feed leader changed"
