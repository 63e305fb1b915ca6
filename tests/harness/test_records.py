"""The rules the soak and the fault checks share: how an alert shown twice is told from two alerts, and what
a phone showed in the order iOS applies updates (withdrawn balls, status flips)."""

from __future__ import annotations

from typing import Any

from tests.harness.records import ShownOrder, alerts_shown_twice, innings_balls


def test_one_event_alerted_once_is_not_a_duplicate() -> None:
    assert alerts_shown_twice([("wicket", "S1:9", "101", 1), ("wicket", "S1:8", "140", 2)]) == []


def test_a_repeat_with_the_same_stamp_is_one_showing() -> None:
    assert alerts_shown_twice([("wicket", "S1:9", "101", 1), ("wicket", "S1:9", "101", 1)]) == []


def test_the_same_ball_alerted_at_two_stamps_is_shown_twice() -> None:
    assert alerts_shown_twice([("wicket", "S1:9", "101", 1), ("wicket", "S1:9", "101", 2)]) == [
        ("wicket", "S1:9")
    ]


def test_an_overturned_catch_and_the_batters_later_dismissal_are_two_alerts() -> None:
    assert alerts_shown_twice([("wicket", "S2:4", "120", 1), ("wicket", "S2:4", "141", 5)]) == []


def test_an_alert_without_a_ball_counts_against_the_one_with_a_ball() -> None:
    # what a stale fixture taken as a correction did: the wicket withdrawn, then known again from the count
    assert alerts_shown_twice([("wicket", "S1:9", "101", 1), ("wicket", "S1:9", None, 3)]) == [
        ("wicket", "S1:9")
    ]
    assert alerts_shown_twice([("innings_end", "S1", None, 1), ("innings_end", "S1", None, 4)]) == [
        ("innings_end", "S1")
    ]


def test_three_showings_of_two_dismissals_are_one_too_many() -> None:
    alerts = [("wicket", "S2:4", "120", 1), ("wicket", "S2:4", "141", 5), ("wicket", "S2:4", "141", 6)]
    assert alerts_shown_twice(alerts) == [("wicket", "S2:4")]


def state(phase: str, *innings: str, team: str = "1") -> dict[str, Any]:
    return {"phase": phase, "teams": [{"id": team, "innings": list(innings)}, {"id": "2", "innings": []}]}


def test_innings_lines_are_read_as_legal_balls() -> None:
    assert innings_balls(state("live", "182/8 (20)", "12/0 (1.4)")) == {("1", 0): 120, ("1", 1): 10}
    assert innings_balls({"teams": [{"id": "1", "innings": ["?"]}]}) == {}


def test_a_ball_shown_then_gone_counts_once_and_going_on_counts_nothing() -> None:
    order = ShownOrder()
    order.see("t", 1, state("live", "10/0 (1.2)"))
    order.see("t", 2, state("live", "14/0 (1.3)"))
    order.see("t", 3, state("live", "10/0 (1.2)"))  # withdrawn
    order.see("t", 4, state("live", "14/0 (1.3)"))
    assert order.withdrawn == {"t": 1} and order.flipped == set()


def test_an_older_update_is_dropped_as_the_phone_drops_it() -> None:
    order = ShownOrder()
    order.see("t", 5, state("live", "14/0 (1.3)"))
    order.see("t", 4, state("live", "10/0 (1.2)"))  # older: never shown
    assert order.withdrawn == {}


def test_a_break_then_live_goes_on_and_an_end_then_live_goes_back() -> None:
    order = ShownOrder()
    for at, phase in enumerate(["pre", "live", "innings_break", "live", "completed"]):
        order.see("ok", at, state(phase))
    for at, phase in enumerate(["live", "completed", "live"]):
        order.see("flip", at, state(phase))
    assert order.flipped == {"flip"}
