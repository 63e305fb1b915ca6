"""The hourly call budget: a sliding window per endpoint that is never exceeded, even under a burst."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from daemon.sportmonks.budget import CallBudget
from daemon.sportmonks.errors import BudgetExhausted
from tests.doubles import Clock


def test_counts_per_endpoint_and_refuses_past_the_limit() -> None:
    clock = Clock()
    budget = CallBudget(default_limit=3, limits={"teams": 1}, clock=clock)
    assert [budget.try_take("livescores") for _ in range(4)] == [True, True, True, False]
    assert budget.try_take("teams") is True
    assert budget.try_take("teams") is False
    assert budget.remaining("livescores") == 0
    assert budget.remaining("fixtures") == 3


def test_window_slides_slot_by_slot() -> None:
    clock = Clock()
    budget = CallBudget(default_limit=2, clock=clock)
    budget.try_take("fixtures")
    clock.now = 100.0
    budget.try_take("fixtures")
    clock.now = 3599.0
    assert budget.wait_time("fixtures") == pytest.approx(1.0)
    clock.now = 3600.0
    assert budget.remaining("fixtures") == 1
    assert budget.wait_time("fixtures") == 0
    budget.try_take("fixtures")
    assert budget.wait_time("fixtures") == pytest.approx(100.0)


def test_no_sliding_hour_ever_holds_more_than_the_limit() -> None:
    """Any fixed one-hour window SportMonks might use sees at most the limit from us."""
    clock = Clock()
    budget = CallBudget(default_limit=5, clock=clock)
    taken: list[float] = []
    for step in range(2000):
        clock.now = step * 7.3
        if budget.try_take("livescores"):
            taken.append(clock.now)
    assert taken
    for start in taken:
        assert sum(1 for t in taken if start <= t < start + 3600) <= 5


def test_block_until_refuses_calls_until_the_server_said() -> None:
    clock = Clock()
    budget = CallBudget(default_limit=100, clock=clock)
    budget.block_until("livescores", 50.0)
    assert budget.remaining("livescores") == 0
    assert budget.wait_time("livescores") == pytest.approx(50.0)
    clock.now = 50.0
    assert budget.try_take("livescores")


async def test_burst_of_callers_never_exceeds_the_budget_and_the_rest_are_skipped() -> None:
    budget = CallBudget(default_limit=10, clock=trio.current_time)
    granted: list[int] = []
    skipped: list[int] = []

    async def caller(i: int) -> None:
        try:
            await budget.acquire("fixtures", max_wait=0)
        except BudgetExhausted:
            skipped.append(i)
        else:
            granted.append(i)

    async with trio.open_nursery() as nursery:
        for i in range(100):
            nursery.start_soon(caller, i)
    assert len(granted) == 10
    assert len(skipped) == 90
    assert budget.snapshot()["fixtures"]["skipped"] == 90


async def test_waiting_callers_get_slots_as_they_free_and_never_overshoot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget = CallBudget(default_limit=4, clock=trio.current_time, window_s=60.0)
    times: list[float] = []
    exhausted: list[BudgetExhausted] = []

    async def caller(max_wait: float) -> None:
        try:
            await budget.acquire("livescores", max_wait=max_wait)
            times.append(trio.current_time())
        except BudgetExhausted as exc:
            exhausted.append(exc)

    async with trio.open_nursery() as nursery:
        for _ in range(8):
            nursery.start_soon(caller, 120.0)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(caller, 10.0)  # cannot get a slot within 10 s: skipped at once, not after 10 s
    assert len(times) == 8
    assert len(exhausted) == 1 and exhausted[0].retry_in == pytest.approx(60.0)
    for start in times:
        assert sum(1 for t in times if start <= t < start + 60.0) <= 4
    assert budget.snapshot()["livescores"]["delayed"] == 4


@given(
    limit=st.integers(min_value=1, max_value=20),
    gaps=st.lists(st.floats(min_value=0.0, max_value=900.0), min_size=1, max_size=200),
)
def test_property_any_hour_holds_at_most_the_limit(limit: int, gaps: list[float]) -> None:
    clock = Clock()
    budget = CallBudget(default_limit=limit, clock=clock)
    taken: list[float] = []
    for gap in gaps:
        clock.now += gap
        if budget.try_take("fixtures"):
            taken.append(clock.now)
        else:
            # refused only when the last hour really is full
            assert sum(1 for t in taken if t > clock.now - 3600) == limit
    for start in taken:
        assert sum(1 for t in taken if start <= t < start + 3600) <= limit
