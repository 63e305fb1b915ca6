"""SportMonks faults, served by the replay server (``ReplayServer.inject``) while the daemon follows a match.

Each test lets the match get under way, injects the fault, lets it clear and checks the whole outcome: the
daemon stayed up, the circuit breaker did what it is configured to do, the persisted state is the tape's final
one, and every seeded Live Activity session got every standing wicket and an end.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.doubles import sample
from tests.faults.checks import SHORT_OVERS, assert_nothing_lost, first_updates

pytestmark = pytest.mark.slow


def _restarts() -> float:
    return sample("sightscreen_actor_restarts_total", {"actor": "match"})


async def test_a_5xx_storm_opens_the_breaker_then_everything_missed_is_delivered(make_rig: Any) -> None:
    # Three failed attempts open the breaker; eight 503s in a row (one call's two attempts, then trial calls
    # after each 1 s cooldown) keep the feed dark for several seconds of match play.
    config = {"sportmonks": {"max_retries": 1, "breaker_failure_threshold": 3, "breaker_cooldown_s": 1.0}}
    async with make_rig(seed=2, overs=SHORT_OVERS, extra=config) as rig:
        breaker = rig.daemon.client.breaker
        await rig.wait_for(first_updates(rig, 6), 60, "the match under way")
        opened_before = breaker.opened_count
        rig.replay.inject("5xx", status=503, count=8)
        await rig.wait_for(lambda: breaker.opened_count > opened_before, 30, "the breaker to open")
        assert rig.daemon.feed.stats()["breaker"] in ("open", "half_open")
        await rig.wait_for(lambda: not rig.replay.faults(), 60, "every scripted 503 served")
        assert breaker.opened_count - opened_before >= 2, "each failed half-open trial re-opened the breaker"
        await assert_nothing_lost(rig)
        assert breaker.state == "closed", "a successful call after the storm closes the breaker"
        assert rig.daemon.client.calls["livescores"].get("skipped_breaker", 0) > 0, (
            "the open breaker refused calls"
        )


def _summed(rig: Any, outcome: str) -> int:
    """The client's calls with ``outcome`` over both live endpoints (the feed reads them in turn)."""
    return sum(per.get(outcome, 0) for per in rig.daemon.client.calls.values())


def _failovers(rig: Any) -> int:
    return sum(per.get("failover", 0) for per in rig.daemon.feed.polls.values())


async def test_429_with_retry_after_moves_the_poll_to_the_other_endpoint_and_nothing_is_lost(
    make_rig: Any,
) -> None:
    async with make_rig(
        seed=3, overs=SHORT_OVERS, extra={"sportmonks": {"breaker_failure_threshold": 50}}
    ) as rig:
        await rig.wait_for(first_updates(rig, 6), 60, "the match under way")
        fault = rig.replay.inject("429", retry_after=1, count=3)
        await assert_nothing_lost(rig)
        hits = {f["id"]: f for f in rig.replay.faults()}
        assert fault not in hits, "every scripted 429 was served (the fault expired)"
        assert _summed(rig, "error") >= 3, f"each 429 was an answer of its own: {rig.daemon.client.calls}"
        assert _failovers(rig) >= 1, (
            f"a refused poll went to the other endpoint at once: {rig.daemon.feed.polls}"
        )
        assert rig.daemon.client.breaker.opened_count == 0, "3 failures stay under the configured threshold"


async def test_responses_held_past_the_deadline_time_out_and_go_to_the_other_endpoint(make_rig: Any) -> None:
    config = {"sportmonks": {"timeout_s": 0.5}, "feed": {"poll_timeout_s": 0.5}}
    async with make_rig(seed=4, overs=SHORT_OVERS, extra=config) as rig:
        await rig.wait_for(first_updates(rig, 6), 60, "the match under way")
        rig.replay.inject("timeout", hold_s=2.0, count=4)
        await assert_nothing_lost(rig)
        timed_out = _summed(rig, "retry") + _summed(rig, "error")
        assert timed_out >= 4, f"the held answers timed out: {rig.daemon.client.calls}"
        assert _failovers(rig) >= 1, f"a timed-out poll went to the other endpoint: {rig.daemon.feed.polls}"


@pytest.mark.parametrize(
    ("mode", "params"),
    [
        ("truncated", {}),
        ("malformed", {}),
        ("missing_field", {"field": "runs"}),
        ("wrong_type", {"field": "status", "value": 42}),
        ("wrong_type", {"field": "balls.score_id", "value": "six"}),
    ],
    ids=["truncated", "malformed", "missing-runs", "status-not-a-string", "ball-score-id-not-a-number"],
)
async def test_bad_bodies_are_skipped_without_a_crash_and_nothing_is_lost(
    make_rig: Any, mode: str, params: dict[str, Any]
) -> None:
    async with make_rig(seed=5, overs=SHORT_OVERS) as rig:
        await rig.wait_for(first_updates(rig, 6), 60, "the match under way")
        restarts = _restarts()
        rig.replay.inject(mode, endpoint="livescores", count=4, **params)
        await assert_nothing_lost(rig)
        assert not rig.replay.faults(), "every bad body was served"
        assert _restarts() == restarts, "bad input is skipped for the tick, never a crash of the match actor"


async def test_a_stalled_feed_catches_up_in_a_burst_and_nothing_is_lost(make_rig: Any) -> None:
    async with make_rig(seed=1, overs=SHORT_OVERS) as rig:
        await rig.wait_for(lambda: bool(rig.served_wickets()), 60, "the first wicket served")
        before = rig.served_wickets()
        rig.replay.inject("stall", duration_s=4.0)
        await trio.sleep(4.5)
        assert len(rig.served_wickets()) > len(before), "wickets fell while the feed was frozen"
        await assert_nothing_lost(rig)


async def test_a_wicket_corrected_away_after_it_was_served_leaves_the_state_whole(make_rig: Any) -> None:
    async with make_rig(seed=7, overs=SHORT_OVERS) as rig:
        await rig.wait_for(lambda: bool(rig.served_wickets()), 60, "a wicket served")
        await rig.wait_for(lambda: not rig.missing_wickets_so_far(), 30, "the wicket delivered")
        wicket_ball = rig.newest_wicket_ball()
        rig.replay.inject("correct_ball", ball_id=wicket_ball, score_id=rig.dot_score_id())
        await assert_nothing_lost(rig)


async def test_a_ball_deleted_after_it_was_served_leaves_the_state_whole(make_rig: Any) -> None:
    async with make_rig(seed=10, overs=SHORT_OVERS) as rig:
        await rig.wait_for(first_updates(rig, 9), 60, "the match under way")
        rig.replay.inject("delete_ball")
        await trio.sleep(1.0)
        rig.replay.inject("delete_ball")
        await assert_nothing_lost(rig)
