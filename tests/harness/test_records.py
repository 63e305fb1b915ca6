"""How an alert shown twice is told from two alerts: the rule the soak and the fault checks share."""

from __future__ import annotations

from tests.harness.records import alerts_shown_twice


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
