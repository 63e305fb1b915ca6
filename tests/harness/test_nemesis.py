"""The nemesis's schedule (pure): seeded, every kind once before any twice, one fault at a time, each on an
engine where it has one; and the window a missing key event is charged to. The nemesis runs against a region
in ``bench/season.py`` (``tests/bench/test_season.py``)."""

from __future__ import annotations

import pytest

from tests.harness.nemesis import KINDS, Fault, Outcome, plan, window_holding


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    one = plan(7, span_s=900.0, engines=2)
    assert one == plan(7, span_s=900.0, engines=2)
    assert one != plan(8, span_s=900.0, engines=2)


def test_a_season_long_enough_sees_every_kind_and_none_twice_before_all_once() -> None:
    schedule = plan(3, span_s=900.0, engines=2)
    kinds = [f.kind for f in schedule]
    assert set(kinds[: len(KINDS)]) == set(KINDS)
    assert len(kinds) > len(KINDS)


def test_faults_come_one_after_another_within_the_span_each_on_an_engine_where_it_has_one() -> None:
    schedule = plan(11, span_s=600.0, engines=3)
    for before, after in zip(schedule, schedule[1:], strict=False):
        assert after.at_s >= before.at_s + before.duration_s
    assert all(f.at_s + f.duration_s <= 600.0 for f in schedule)
    for fault in schedule:
        on_engine = KINDS[fault.kind][0] == "engine"
        assert (fault.slot is not None) == on_engine
        assert fault.slot is None or 0 <= fault.slot < 3
        assert (fault.offset_s != 0.0) == (fault.kind == "clock_skew")


def test_a_plan_needs_an_engine() -> None:
    with pytest.raises(ValueError, match="engines"):
        plan(1, span_s=100.0, engines=0)


def test_a_moment_is_charged_to_the_latest_fault_whose_window_and_lease_after_hold_it() -> None:
    first = Outcome(10.0, "kill9", 0, 1.0, cleared_at_s=12.0)
    second = Outcome(20.0, "apns_500", None, 3.0, cleared_at_s=23.0)
    assert window_holding([first, second], 15.0, after_s=10.0) is first
    assert window_holding([first, second], 21.0, after_s=10.0) is second
    assert window_holding([first, second], 40.0, after_s=10.0) is None
    assert window_holding([first, second], 5.0, after_s=10.0) is None


def test_a_fault_is_ok_when_healthy_within_its_bound_nothing_lost_and_a_sigterm_exits_0() -> None:
    ok = Outcome(1.0, "sigterm", 0, 1.0, degraded=True, healthy_after_s=3.0, health_bound_s=10.0, exit_code=0)
    assert ok.ok and ok.as_dict()["outcome"] == "ok"
    assert not Outcome(
        1.0, "sigterm", 0, 1.0, degraded=True, healthy_after_s=3.0, health_bound_s=10.0, exit_code=1
    ).ok
    # a cut DynamoDB link must show in readiness while it lasts; a slow APNs link need not
    assert not Outcome(1.0, "dynamodb_cut", 0, 5.0, healthy_after_s=0.1, health_bound_s=10.0).ok
    assert Outcome(1.0, "dynamodb_cut", 0, 5.0, degraded=True, healthy_after_s=0.1, health_bound_s=10.0).ok
    assert Outcome(1.0, "apns_slow", 0, 5.0, healthy_after_s=0.1, health_bound_s=10.0).ok
    assert not Outcome(1.0, "apns_500", None, 1.0, healthy_after_s=None, health_bound_s=10.0).ok
    assert not Outcome(1.0, "apns_500", None, 1.0, healthy_after_s=1.0, health_bound_s=10.0, lost=1).ok
    assert Fault(1.0, "kill9", 0, 1.0).offset_s == 0.0
