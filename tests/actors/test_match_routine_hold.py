"""A routine tick waits until ``routine_after_s`` after the leader's fetch; an alerting tick does not wait.

The rule itself (``routine_wait_s``) is pure; the actor is driven over a synthesised tape on moto's server, as
in test_match_alert_intent.py, with a recorder that notes when each push was handed to it."""

from __future__ import annotations

import time
from typing import Any

from actors.match import routine_wait_s
from actors.settings import MatchActorSettings, with_routine_hold_capped
from tests.actors.test_match_alert_intent import _actor, _alerting, _entries, _world
from tests.doubles import FakeSender, update


def test_the_wait_runs_to_the_moment_after_the_fetch_and_never_beyond_it() -> None:
    assert routine_wait_s(100.0, 100.0, 1.0) == 1.0  # fetched just now: the whole hold
    assert abs(routine_wait_s(100.0, 100.4, 1.0) - 0.6) < 1e-9  # what is left of it
    assert routine_wait_s(100.0, 101.0, 1.0) == 0.0  # the moment has come
    assert routine_wait_s(100.0, 130.0, 1.0) == 0.0  # a late tick (a take-over, a slow cache hop)
    assert routine_wait_s(100.0, 90.0, 1.0) == 1.0  # the leader's clock ahead of ours: at most the hold
    assert routine_wait_s(100.0, 100.0, 0.0) == 0.0  # switched off


async def test_routine_ticks_wait_for_the_hold_and_alerting_ticks_go_at_once(repos: Any) -> None:
    tape, match_id = await _world(repos)
    sender = FakeSender()
    hold = 0.3
    actor = await _actor(match_id, repos, sender, "owner-a#1", 1, routine_after_s=hold)
    await actor.audience.refresh()
    routine = alerting = 0
    for n, entry in enumerate(_entries(tape, "update")):
        stale = n == 0  # the first tick comes long after its fetch (a take-over): no wait
        fetched_at = time.time() - (30.0 if stale else 0.0)
        before = len(sender.pushes)
        await actor.handle(update(match_id, tape.fixture_at(entry), fetched_at=fetched_at))
        handed, handed_at = sender.pushes[before:], sender.handed_at[before:]
        if not handed:
            continue
        if _alerting(handed):
            alerting += 1
            assert actor.held_s == 0.0
        elif stale:
            assert actor.held_s == 0.0
        else:
            routine += 1
            assert 0 < actor.held_s <= hold
            # handed over only once the hold had run out (a sleep never ends early; 10 ms for clock slew)
            assert min(handed_at) >= fetched_at + hold - 0.01
        if alerting and routine >= 2:
            break
    assert alerting and routine >= 2


def test_the_hold_is_capped_at_a_share_of_the_fastest_poll_cadence() -> None:
    asked = MatchActorSettings(routine_after_s=1.0)
    assert with_routine_hold_capped(asked, 2.5).routine_after_s == 1.0  # 40% of 2.5 s: as asked
    assert with_routine_hold_capped(asked, 0.5).routine_after_s == 0.2  # a fast poll: 40% of it
    assert with_routine_hold_capped(MatchActorSettings(routine_after_s=0.0), 0.5).routine_after_s == 0.0
    assert with_routine_hold_capped(asked, 0.5).stale_after_s == asked.stale_after_s  # the rest unchanged
