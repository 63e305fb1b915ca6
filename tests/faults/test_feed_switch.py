"""The feed's source changes just after a wicket's fixture went out in process: no alert twice.

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

The same on a take-over: the owner, leading the feed, is cut off right after the wicket's first accepted alert
and before its cache write of the wicket's fixture; a ghost holds the feed lease, so the successor, resuming
from its predecessor's state (the wicket reported), is first served the cache's older fixture.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
import trio

from daemon.store.caches import CachePut
from daemon.store.codec import to_attr
from daemon.store.locks import feed_lock_key
from daemon.store.tables import LOCKS
from tests.faults.checks import assert_nothing_lost
from tests.faults.test_owner_death import (
    _die_and_be_succeeded,
    _wicket_alert,
    duplicate_alerts,
)
from tests.harness.fault_rig import FaultRig, aps

pytestmark = pytest.mark.slow

GHOST_LEASE_S = 2.5  # several cache reads (every half cadence) while the ghost holds it
# a successor takes the match once the dead owner's 3 s lease ran out: the ghost holds the feed past that
GHOST_LEASE_AT_TAKEOVER_S = 8.0


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


async def _steal_feed_lease(rig: FaultRig, owner: str, lease_s: float = GHOST_LEASE_S) -> None:
    """Another owner takes the region's feed lease from ``owner`` with a new epoch, as one would once the lease
    ran out: one conditional write, so neither ``owner`` nor a new instance can slip in between."""
    locks = rig.repos.locks
    key = feed_lock_key(rig.daemon.region)
    item = await locks.read(key)
    assert item is not None and item.get("owner") == owner, "the instance leads the feed"
    now = time.time()
    await locks.dynamo.call(
        LOCKS,
        "update_item",
        Key={"lockKey": to_attr(key)},
        UpdateExpression="SET #owner = :ghost, #exp = :exp, #acq = :now ADD #ep :one",
        ConditionExpression="#owner = :owner AND #ep = :ep",
        ExpressionAttributeNames={
            "#owner": "owner",
            "#exp": "expiresAt",
            "#acq": "acquiredAt",
            "#ep": "epoch",
        },
        ExpressionAttributeValues={
            ":ghost": to_attr("ghost#0"),
            ":owner": to_attr(owner),
            ":ep": to_attr(int(item["epoch"])),
            ":exp": to_attr(now + lease_s),
            ":now": to_attr(now),
            ":one": to_attr(1),
        },
    )


async def _hold_before_a_wicket(rig: FaultRig) -> tuple[int, dict[str, Any]]:
    """Once the match is live and the instance leads the feed: the replay paused one ball before the next
    wicket until the cache holds that fixture. Returns the wicket's cursor and the fixture before it."""
    daemon = rig.daemon

    def under_way() -> bool:
        status = rig.replay.status()[rig.match_id]
        return bool(status["started"] and status["cursor"] >= 1)

    with trio.fail_after(60):
        while not (daemon.leadership.leading and under_way() and rig.accepted_updates() >= 2):
            await trio.sleep(0.05)
    rig.replay.pause(rig.match_id)
    wicket = _next_wicket(rig, rig.replay.status()[rig.match_id]["cursor"])
    before = rig.replay.tape(rig.match_id).fixture_at(wicket - 1)
    rig.replay.seek(rig.match_id, wicket - 1)
    cached = rig.repos.fixture_cache.get_cached_fixture
    with trio.fail_after(30):
        while _runs(await cached(rig.match_id) or {}) != _runs(before):
            await trio.sleep(0.05)
    return wicket, before


def _carries_wicket(puts: Sequence[CachePut], match_id: str, before: Mapping[str, Any]) -> bool:
    """Whether a poll's cache write carries the match's fixture with a wicket more than ``before``."""
    return any(p.match_id == match_id and _wickets(p.fixture) > _wickets(before) for p in puts)


async def test_a_leader_that_steps_down_after_a_wickets_fixture_went_out_alerts_it_once(
    make_rig: Any,
) -> None:
    async with make_rig(seed=1, followers=6, lease_s=3.0) as rig:
        daemon = rig.daemon
        wicket, before = await _hold_before_a_wicket(rig)
        cache = daemon.fixture_cache  # the leader's fenced cache sink
        real_put = cache.put_poll
        stolen = trio.Event()

        async def put_poll(puts: Sequence[CachePut], summary: Any) -> None:
            if not stolen.is_set() and _carries_wicket(puts, rig.match_id, before):
                stolen.set()  # the wicket's fixture went to the match actor in process; now it is cached
                await _steal_feed_lease(rig, daemon.owner_id)
            await real_put(puts, summary)

        cache.put_poll = put_poll
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


async def test_a_successor_served_an_older_fixture_than_its_predecessors_state_alerts_nothing_twice(
    make_rig: Any,
) -> None:
    async with make_rig(seed=1, followers=6, lease_s=3.0) as rig:
        wicket, before = await _hold_before_a_wicket(rig)
        owner = rig.daemon.owner_id
        cache = rig.daemon.fixture_cache
        real_put = cache.put_poll
        held = trio.Event()

        def alerted() -> bool:
            return any(
                r["status"] == 200 and r.get("token") in rig.tokens and _wicket_alert(r)
                for r in rig.apns.records
            )

        async def put_poll(puts: Sequence[CachePut], summary: Any) -> None:
            if not held.is_set() and _carries_wicket(puts, rig.match_id, before):
                held.set()  # the wicket's fixture is not cached before the owner is cut off at its first alert
                while not alerted():
                    await trio.sleep(0.01)
            await real_put(puts, summary)

        async def ghost_takes_the_feed() -> None:
            """As the owner is cut off, a ghost takes its feed lease: the successor starts as a follower. The
            match stays at the wicket until the successor leads and has cached the wicket's fixture again
            (so its first fresh fixture is the wicket's own), then plays on."""
            while not alerted():
                await trio.sleep(0.01)
            await _steal_feed_lease(rig, owner, GHOST_LEASE_AT_TAKEOVER_S)
            at_wicket = _runs(rig.replay.tape(rig.match_id).fixture_at(wicket))
            cached = rig.repos.fixture_cache.get_cached_fixture
            while not (
                rig.daemon.owner_id != owner
                and rig.daemon.leadership.leading
                and _runs(await cached(rig.match_id) or {}) == at_wicket
            ):
                await trio.sleep(0.05)
            rig.replay.play(rig.match_id)

        cache.put_poll = put_poll
        rig.replay.seek(rig.match_id, wicket)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ghost_takes_the_feed)
            await _die_and_be_succeeded(rig, _wicket_alert, "a wicket's fan-out, the cache one ball behind")
        assert held.is_set(), "the wicket's cache write was held back until its first alert"
        assert rig.daemon.cache_reader.delivered >= 1, "the successor was served from the cache first"
