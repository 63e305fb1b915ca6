"""Self-healing: followers without an active Live Activity get a push-to-start, rate-limited per device.

The match actor runs against the real repositories on moto's server; the sender is a recorder that answers
every push as APNs would have accepted it.
"""

from __future__ import annotations

import time
from typing import Any

import trio

from actors.match import MatchActor
from daemon.apns.types import Push
from daemon.replay.synth import synthesise
from tests.actors.match_helpers import live, make_match_actor, take_lease
from tests.doubles import DyingClaims, FakeSender, WithLocks, update


async def _actor(repos: Any, sender: FakeSender, **settings: Any) -> MatchActor:
    actor = make_match_actor("500", repos, sender, **settings)
    await take_lease(actor)
    live(actor)
    return actor


async def _seed(repos: Any) -> None:
    for user in ("u1", "u2", "u3"):
        await repos.follows.follow_match("500", user, "7", 4_000_000_000)
    await repos.devices.register_device("u1", "a" * 64, push_to_start_token="b" * 64)
    await repos.devices.register_device("u2", "c" * 64, push_to_start_token="d" * 64)
    await repos.devices.register_device("u3", "e" * 64)  # no push-to-start token: nothing to send
    await repos.live_activities.register_la_session("500", "u2", "dev", "f" * 64)  # u2 already has one


async def test_followers_without_a_session_get_one_push_to_start_then_are_rate_limited(repos: Any) -> None:
    await _seed(repos)
    sender = FakeSender()
    actor = await _actor(repos, sender, push_to_start_min_interval_s=600)
    await actor.audience.refresh()
    assert await actor.starts.heal() == 1
    (push,) = sender.pushes
    assert push.token == "b" * 64 and push.kind == "start" and push.priority == 10
    assert b'"event":"start"' in push.payload and b'"attributes-type"' in push.payload
    assert await actor.starts.heal() == 0  # the same device is not started again within the interval
    assert len(sender.pushes) == 1


async def test_a_suspended_session_is_healed_once_the_interval_has_passed(repos: Any) -> None:
    await _seed(repos)
    await repos.live_activities.suspend_la_session("500", "u2#dev")  # its token was rejected by APNs
    sender = FakeSender()
    actor = await _actor(repos, sender, push_to_start_min_interval_s=0)
    await actor.audience.refresh()
    assert "u2#dev" not in actor.audience.sessions
    assert await actor.starts.heal() == 2
    assert sorted(p.token for p in sender.pushes) == ["b" * 64, "d" * 64]


async def test_no_push_to_start_before_the_match_is_live(repos: Any) -> None:
    await _seed(repos)
    sender = FakeSender()
    actor = await _actor(repos, sender)
    actor.latest.phase = "pre"
    await actor.audience.refresh()
    assert await actor.starts.heal() == 0 and sender.pushes == []


async def test_followers_get_their_push_to_start_as_the_match_goes_live_not_at_the_next_heal_round(
    repos: Any,
) -> None:
    tape = synthesise("T10", seed=3)
    match_id = str(tape.fixture_id)
    assert await repos.active_matches.register_active_match(match_id, "me")
    await repos.follows.follow_match(match_id, "u1", None, 4_000_000_000, device_token="a" * 64)
    await repos.devices.register_device("u1", "a" * 64, os_version="17.5", push_to_start_token="b" * 64)
    sender = FakeSender()
    # a heal round an hour apart: only the match going live can have started the follower
    actor = make_match_actor(match_id, repos, sender, heal_every_s=3600, push_to_start_min_interval_s=600)
    await take_lease(actor)
    await actor.audience.refresh()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.starts.loop)
        await actor.handle(update(match_id, dict(tape.fixture_at(0), status="NS")))
        assert actor.phase == "pre"
        await actor.handle(update(match_id, tape.fixture_at(1)))
        assert actor.phase == "live"
        with trio.fail_after(60):  # a guard against a hang, not a measure: the round is an hour away
            while not sender.pushes:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    (push,) = sender.pushes
    assert push.token == "b" * 64 and push.kind == "start"


async def test_a_follower_claimed_by_an_owner_that_died_before_sending_is_started_within_a_lease(
    repos: Any,
) -> None:
    """The claim is held for a lease before the send and for the whole interval only once APNs accepted the
    start: an owner killed between its claim and its send holds nobody up past its lease."""
    await _seed(repos)
    died = trio.CancelScope()
    sender = FakeSender()
    first = await _actor(WithLocks(repos, DyingClaims(repos.locks, died)), sender, lease_s=10.0)
    await first.audience.refresh()
    with died:
        await first.starts.heal()
    assert died.cancelled_caught and sender.pushes == [], "it died between its claims and its starts"
    await first.lease.release()

    def successor(after_s: float) -> MatchActor:
        return make_match_actor(
            "500", repos, FakeSender(), owner="next", lease_s=10.0, wall_clock=lambda: time.time() + after_s
        )

    early = successor(5.0)
    await take_lease(early)
    live(early)
    await early.audience.refresh()
    assert await early.starts.heal() == 0, "within the dead owner's lease its claim still stands"
    await early.lease.release()
    late = successor(11.0)
    await take_lease(late)
    live(late)
    await late.audience.refresh()
    assert await late.starts.heal() == 1, "a lease later the follower is started"


async def test_a_start_apns_accepted_holds_its_claim_for_the_whole_interval(repos: Any) -> None:
    await _seed(repos)
    first = await _actor(repos, FakeSender(), lease_s=10.0, push_to_start_min_interval_s=600)
    await first.audience.refresh()
    assert await first.starts.heal() == 1
    await first.lease.release()
    later = make_match_actor(
        "500", repos, FakeSender(), owner="next", lease_s=10.0, wall_clock=lambda: time.time() + 300
    )
    await take_lease(later)
    live(later)
    await later.audience.refresh()
    assert await later.starts.heal() == 0, "delivered: nobody starts it again within the interval"


async def test_an_owner_killed_once_its_starts_are_on_their_way_holds_their_claims_for_the_interval(
    repos: Any,
) -> None:
    """The claims are held for the interval before the starts go: an owner that dies with them handed to the
    sender (perhaps sent) leaves nobody started twice."""
    await _seed(repos)
    died = trio.CancelScope()

    async def die(push: Push) -> None:
        died.cancel()
        await trio.sleep_forever()

    first = await _actor(repos, FakeSender(before_each=die), lease_s=10.0, push_to_start_min_interval_s=600)
    await first.audience.refresh()
    with died:
        await first.starts.heal()
    await first.lease.release()
    later = make_match_actor(
        "500", repos, FakeSender(), owner="next", lease_s=10.0, wall_clock=lambda: time.time() + 120
    )
    await take_lease(later)
    live(later)
    await later.audience.refresh()
    assert await later.starts.heal() == 0
