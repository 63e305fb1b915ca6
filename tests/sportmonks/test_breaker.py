"""The circuit breaker state machine, driven by a hand-held clock."""

from __future__ import annotations

import pytest

from daemon.sportmonks.breaker import CircuitBreaker
from daemon.sportmonks.errors import BreakerOpen
from tests.doubles import Clock


def make(threshold: int = 3, cooldown: float = 30.0) -> tuple[CircuitBreaker, Clock, list[str]]:
    clock = Clock(1000.0)
    changes: list[str] = []
    breaker = CircuitBreaker(
        failure_threshold=threshold, cooldown_s=cooldown, clock=clock, on_change=changes.append
    )
    return breaker, clock, changes


def test_stays_closed_below_the_threshold_and_success_resets_the_streak() -> None:
    breaker, _, _ = make(threshold=3)
    breaker.record_failure()
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    breaker.record_failure()
    assert breaker.state == "closed"
    assert breaker.before_call() is False


def test_opens_after_n_consecutive_failures_and_refuses_calls() -> None:
    breaker, clock, changes = make(threshold=3, cooldown=30)
    for _ in range(3):
        breaker.before_call()
        breaker.record_failure()
    assert breaker.state == "open"
    assert changes == ["open"]
    clock.now += 10
    with pytest.raises(BreakerOpen) as info:
        breaker.before_call()
    assert info.value.retry_in == pytest.approx(20.0)


def test_half_opens_after_the_cooldown_and_lets_exactly_one_trial_through() -> None:
    breaker, clock, _ = make(threshold=1, cooldown=30)
    breaker.record_failure()
    clock.now += 29.9
    assert breaker.state == "open"
    clock.now += 0.1
    assert breaker.state == "half_open"
    assert breaker.before_call() is True
    with pytest.raises(BreakerOpen):
        breaker.before_call()


def test_successful_trial_closes_it() -> None:
    breaker, clock, changes = make(threshold=1, cooldown=5)
    breaker.record_failure()
    clock.now += 5
    assert breaker.before_call() is True
    breaker.record_success()
    assert breaker.state == "closed"
    assert changes == ["open", "half_open", "closed"]
    assert breaker.before_call() is False


def test_failed_trial_reopens_it_for_a_fresh_cooldown() -> None:
    breaker, clock, changes = make(threshold=2, cooldown=10)
    breaker.record_failure()
    breaker.record_failure()
    clock.now += 10
    breaker.before_call()
    breaker.record_failure()
    assert breaker.state == "open"
    assert changes == ["open", "half_open", "open"]
    clock.now += 9
    assert breaker.state == "open"
    clock.now += 1
    assert breaker.state == "half_open"


def test_abandoned_trial_frees_the_slot_for_the_next_caller() -> None:
    breaker, clock, _ = make(threshold=1, cooldown=1)
    breaker.record_failure()
    clock.now += 1
    assert breaker.before_call() is True
    breaker.abandon_trial()
    assert breaker.before_call() is True


def test_late_failure_while_open_keeps_the_original_cooldown() -> None:
    breaker, clock, _ = make(threshold=1, cooldown=10)
    breaker.record_failure()
    clock.now += 8
    breaker.record_failure()  # a call admitted before it opened, failing late
    clock.now += 2
    assert breaker.state == "half_open"
