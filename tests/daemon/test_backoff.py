"""The one retry delay (``daemon.backoff``): doubling from the base, capped, jittered by a fraction."""

from __future__ import annotations

import random

import pytest

from daemon.backoff import backoff_delay


def test_without_jitter_the_delay_doubles_from_the_base_and_is_capped() -> None:
    assert [backoff_delay(n, base_s=5, cap_s=60) for n in range(7)] == [0, 5, 10, 20, 40, 60, 60]


def test_no_retry_yet_means_no_wait() -> None:
    assert backoff_delay(0, base_s=1.0, cap_s=30.0, jitter=1.0) == 0.0
    assert backoff_delay(-3, base_s=1.0, cap_s=30.0) == 0.0


def test_a_long_failure_streak_stays_at_the_cap_without_overflowing() -> None:
    assert backoff_delay(10_000, base_s=0.05, cap_s=2.0) == 2.0
    assert backoff_delay(10**9, base_s=1e300, cap_s=7.0, jitter=0.5, rng=random.Random(1)) <= 7.0


@pytest.mark.parametrize("jitter", [0.5, 1.0, 0.2])
def test_jitter_draws_within_its_fraction_of_each_ceiling(jitter: float) -> None:
    rng = random.Random(7)
    for retry, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (10, 30.0)]:
        delays = [backoff_delay(retry, base_s=1.0, cap_s=30.0, jitter=jitter, rng=rng) for _ in range(200)]
        assert all((1 - jitter) * ceiling <= d <= ceiling for d in delays)
        assert len(set(delays)) > 100, "jittered delays differ from call to call"
        assert min(delays) < (1 - jitter / 2) * ceiling < max(delays), "they spread over the whole range"


def test_the_same_random_source_gives_the_same_schedule() -> None:
    def schedule(seed: int) -> list[float]:
        rng = random.Random(seed)
        return [backoff_delay(n, base_s=0.5, cap_s=4.0, jitter=0.5, rng=rng) for n in range(1, 8)]

    assert schedule(3) == schedule(3)
    assert schedule(3) != schedule(4)


def test_a_jitter_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="jitter"):
        backoff_delay(1, base_s=1.0, cap_s=2.0, jitter=1.5)
