"""The per-user token bucket (pure, the clock passed in)."""

from __future__ import annotations

import pytest

from daemon.api.ratelimit import RateLimiter


def test_a_new_user_gets_the_whole_burst_then_is_refused_with_the_wait_until_a_token_is_back() -> None:
    rl = RateLimiter(rate_per_s=2.0, burst=3)
    assert [rl.take("u", 100.0).allowed for _ in range(3)] == [True, True, True]
    refused = rl.take("u", 100.0)
    assert not refused.allowed
    assert refused.retry_after_s == pytest.approx(0.5)
    assert refused.retry_after_header() == "1"


def test_tokens_come_back_at_the_rate_and_never_above_the_burst() -> None:
    rl = RateLimiter(rate_per_s=2.0, burst=3)
    for _ in range(3):
        rl.take("u", 0.0)
    assert rl.take("u", 0.5).allowed  # one token back after 0.5 s
    assert not rl.take("u", 0.5).allowed
    # a long pause refills to the burst, not beyond
    assert [rl.take("u", 1000.0).allowed for _ in range(4)] == [True, True, True, False]


def test_users_have_separate_buckets() -> None:
    rl = RateLimiter(rate_per_s=1.0, burst=1)
    assert rl.take("a", 0.0).allowed
    assert not rl.take("a", 0.0).allowed
    assert rl.take("b", 0.0).allowed


def test_memory_stays_bounded_dropping_refilled_buckets_first() -> None:
    rl = RateLimiter(rate_per_s=1.0, burst=2, max_users=100)
    for i in range(100):
        rl.take(f"old{i}", 0.0)
    rl.take("busy", 9.0)
    rl.take("busy", 9.0)
    for i in range(50):
        rl.take(f"new{i}", 10.0)
    assert len(rl) <= 100
    # the busy user's empty bucket survived the pruning: still refused
    assert not rl.take("busy", 9.0).allowed


@pytest.mark.parametrize("rate,burst", [(0.0, 1), (float("inf"), 1), (float("nan"), 1), (1.0, 0)])
def test_bad_parameters_are_refused(rate: float, burst: int) -> None:
    with pytest.raises(ValueError):
        RateLimiter(rate, burst)
