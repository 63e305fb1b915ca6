"""Self-healing: followers without an active Live Activity get a push-to-start, rate-limited per device.

The match actor runs against the real repositories on moto's server; the sender is a recorder that answers
every push as APNs would have accepted it.
"""

from __future__ import annotations

import time
from typing import Any

import trio

from actors.feed import FeedUpdate
from actors.match import MatchActor
from daemon.apns.types import Push, PushResult
from daemon.replay.synth import synthesise
from tests.actors.match_helpers import make_match_actor


class AcceptingSender:
    def __init__(self) -> None:
        self.pushes: list[Push] = []

    async def send(self, push: Push) -> None:
        self.pushes.append(push)
        assert push.reply_to is not None
        await push.reply_to.send(PushResult(push, "accepted", 200, None, None, 1, 0.0))

    async def send_many(self, pushes: list[Push]) -> None:
        for push in pushes:
            await self.send(push)


def _actor(repos: Any, sender: AcceptingSender, **settings: Any) -> MatchActor:
    actor = make_match_actor("500", repos, sender, **settings)
    actor._lease_until = trio.current_time() + 60  # as if the lease had just been renewed
    actor.phase = "live"
    actor._last_display = {"neutral": {"title": "A v B", "subtitle": "A need 10", "score": "1/0"}}
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
    sender = AcceptingSender()
    actor = _actor(repos, sender, push_to_start_min_interval_s=600)
    await actor.refresh_sessions()
    assert await actor.heal() == 1
    (push,) = sender.pushes
    assert push.token == "b" * 64 and push.kind == "start" and push.priority == 10
    assert b'"event":"start"' in push.payload and b'"attributes-type"' in push.payload
    assert await actor.heal() == 0  # the same device is not started again within the interval
    assert len(sender.pushes) == 1


async def test_a_suspended_session_is_healed_once_the_interval_has_passed(repos: Any) -> None:
    await _seed(repos)
    await repos.live_activities.suspend_la_session("500", "u2#dev")  # its token was rejected by APNs
    sender = AcceptingSender()
    actor = _actor(repos, sender, push_to_start_min_interval_s=0)
    await actor.refresh_sessions()
    assert "u2#dev" not in actor.sessions
    assert await actor.heal() == 2
    assert sorted(p.token for p in sender.pushes) == ["b" * 64, "d" * 64]


async def test_no_push_to_start_before_the_match_is_live(repos: Any) -> None:
    await _seed(repos)
    sender = AcceptingSender()
    actor = _actor(repos, sender)
    actor.phase = "pre"
    await actor.refresh_sessions()
    assert await actor.heal() == 0 and sender.pushes == []


async def test_followers_get_their_push_to_start_as_the_match_goes_live_not_at_the_next_heal_round(
    repos: Any,
) -> None:
    tape = synthesise("T10", seed=3)
    match_id = str(tape.fixture_id)
    assert await repos.active_matches.register_active_match(match_id, "me")
    await repos.follows.follow_match(match_id, "u1", None, 4_000_000_000, device_token="a" * 64)
    await repos.devices.register_device("u1", "a" * 64, os_version="17.5", push_to_start_token="b" * 64)
    sender = AcceptingSender()
    # a heal round an hour apart: only the match going live can have started the follower
    actor = make_match_actor(match_id, repos, sender, heal_every_s=3600, push_to_start_min_interval_s=600)
    actor._lease_until = trio.current_time() + 3600
    actor._fence.until = actor._lease_until
    await actor.refresh_sessions()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor._heal_loop)
        await actor._on_update(
            FeedUpdate(match_id, dict(tape.fixture_at(0), status="NS"), time.time(), "x", True)
        )
        assert actor.phase == "pre"
        await actor._on_update(FeedUpdate(match_id, tape.fixture_at(1), time.time(), "x", True))
        assert actor.phase == "live"
        with trio.fail_after(60):  # a guard against a hang, not a measure: the round is an hour away
            while not sender.pushes:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    (push,) = sender.pushes
    assert push.token == "b" * 64 and push.kind == "start"
