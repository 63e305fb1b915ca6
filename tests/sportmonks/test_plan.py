"""The feed's plan (``daemon.sportmonks.plan``): the cadence a SportMonks plan allows, the pacer that keeps
each endpoint within its hour, and which endpoint each poll goes to."""

from __future__ import annotations

import math
from bisect import bisect_left

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.sportmonks.plan import WINDOW_S, Pacer, PlanError, next_poll, plan_feed

STANDARD = {"livescores": 2000, "fixtures": 2000}


def plan(**kw: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = {
        "limits": STANDARD,
        "reserved": {"fixtures": 120},
        "endpoints": ("livescores", "fixtures"),
        "headroom": 0.01,
        "fastest_cadence_s": 0.5,
        "slowest_cadence_s": 2.5,
    }
    args.update(kw)
    return plan_feed(**args)  # type: ignore[arg-type]


def test_the_standard_plan_read_from_both_endpoints_polls_every_0_94_s() -> None:
    p = plan()
    assert p.live_calls == {"livescores": 1980.0, "fixtures": pytest.approx(1861.2)}
    assert p.cadence_s == pytest.approx(3600 / (1980 + 1861.2)) and not p.configured
    assert p.planned("livescores") + p.planned("fixtures") == pytest.approx(WINDOW_S / p.cadence_s)
    one = plan(endpoints=("livescores",))
    assert one.cadence_s == pytest.approx(3600 / 1980)  # 1.82 s: half the polls


def test_a_derived_cadence_is_bounded_below_and_a_plan_too_slow_is_refused() -> None:
    assert plan(limits={"livescores": 100_000, "fixtures": 100_000}).cadence_s == 0.5
    with pytest.raises(PlanError, match="slowest_cadence_s = 2.5 s"):
        plan(endpoints=("livescores",), limits={"livescores": 1000, "fixtures": 2000})
    with pytest.raises(PlanError, match="no calls are left"):
        plan(reserved={"livescores": 2000, "fixtures": 2000})
    # an endpoint the reserve leaves nothing of is not read from; the other carries the polls
    p = plan(reserved={"fixtures": 2000}, slowest_cadence_s=5.0)
    assert p.endpoints == ("livescores",)


def test_a_configured_cadence_is_checked_against_the_budgets_only() -> None:
    assert plan(configured_s=5.0).cadence_s == 5.0  # slower than slowest_cadence_s: the operator's choice
    with pytest.raises(PlanError, match="faster than the plan allows"):
        plan(configured_s=0.5)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.floats(min_value=0, max_value=7200, allow_nan=False), max_size=300),
    st.sampled_from([0.5, 1.0, 1.8, 3.6]),
)
def test_whatever_the_calls_an_hour_never_holds_more_than_the_pace_allows(
    others: list[float], interval: float
) -> None:
    """Calls taken only when the pacer says so, beside calls made anyway (another job's, budgeted apart as the
    plan's reserved calls), never put more than an hour's pace plus the tolerance of their own into any
    hour, and the others only add what they are: a call made anyway counts against the pace of the calls
    after it (it is noted), but one at the end of an hour cannot take back the paced calls before it."""
    pacer = Pacer({"e": interval})
    calls: list[float] = []
    paced: list[float] = []
    events = sorted([(t, "other") for t in others])
    t, i = 0.0, 0
    while t < 7200:
        while i < len(events) and events[i][0] <= t:
            pacer.note("e", events[i][0])
            calls.append(events[i][0])
            i += 1
        ready = pacer.ready_at("e")
        if ready <= t:
            pacer.note("e", t)
            calls.append(t)
            paced.append(t)
            t += 0.1
        else:
            t = max(t + 0.1, ready)
    calls.sort()
    others = sorted(others)
    feed_only_bound = WINDOW_S / interval + pacer.tolerance + 1
    for start in calls:
        in_hour = bisect_left(calls, start + WINDOW_S) - bisect_left(calls, start)
        paced_in_hour = bisect_left(paced, start + WINDOW_S) - bisect_left(paced, start)
        others_in_hour = bisect_left(others, start + WINDOW_S) - bisect_left(others, start)
        assert paced_in_hour <= feed_only_bound, (start, paced_in_hour)
        assert in_hour <= feed_only_bound + others_in_hour, (start, in_hour)


def test_calls_made_anyway_early_in_an_hour_are_taken_from_its_pace() -> None:
    # Two calls of another job at the start: the pacer's own calls in that hour make room for them.
    # (The property above found the other side: two at the very end of an hour come on top of it.)
    interval = 3.6
    pacer = Pacer({"e": interval})
    calls = [0.0, 0.0]
    for at in calls:
        pacer.note("e", at)
    t = 0.0
    while t < WINDOW_S:
        ready = pacer.ready_at("e")
        if ready <= t:
            pacer.note("e", t)
            calls.append(t)
            t += 0.1
        else:
            t = max(t + 0.1, ready)
    assert len(calls) <= WINDOW_S / interval + pacer.tolerance + 1


def test_the_polls_take_turns_in_proportion_and_skip_a_resting_endpoint() -> None:
    shares = {"livescores": 1980.0, "fixtures": 1861.0}
    made = {"livescores": 0, "fixtures": 0}
    for n in range(3841):
        endpoint, at = next_poll(
            now=float(n),
            last_poll_at=float(n) - 1,
            cadence_s=1.0,
            endpoints=shares,
            ready_at={},
            resting_until={},
            shares=shares,
            made=made,
        )
        assert endpoint is not None and at == n
        made[endpoint] += 1
    assert made == {"livescores": 1980, "fixtures": 1861}
    endpoint, _ = next_poll(
        now=0.0,
        last_poll_at=-1.0,
        cadence_s=1.0,
        endpoints=shares,
        ready_at={},
        resting_until={"livescores": 60.0},
        shares=shares,
        made={},
    )
    assert endpoint == "fixtures"
    none, back = next_poll(
        now=0.0,
        last_poll_at=-1.0,
        cadence_s=1.0,
        endpoints=shares,
        ready_at={},
        resting_until={"livescores": 60.0, "fixtures": 30.0},
        shares=shares,
        made={},
    )
    assert none is None and back == 30.0
    # a paced endpoint waits for its pace; the other goes first
    endpoint, at = next_poll(
        now=0.0,
        last_poll_at=-5.0,
        cadence_s=1.0,
        endpoints=shares,
        ready_at={"livescores": 4.0, "fixtures": -math.inf},
        resting_until={},
        shares=shares,
        made={},
    )
    assert (endpoint, at) == ("fixtures", 0.0)
