"""The tick report and the key event's timings (pure)."""

from __future__ import annotations

from actors.delivery import Delivery
from actors.match import tick_timings


def test_a_key_events_timings_are_measured_from_the_ticks_start_and_rounded() -> None:
    got = tick_timings(
        since_fetch_s=2.34567,
        at_start_s=0.5,
        tick_s=1.84567,
        started=100.0,
        marks={"persisted": 100.2, "answer": 100.4501},
    )
    assert got == {
        "since_fetch_s": 2.346,
        "at_start_s": 0.5,
        "tick_s": 1.846,
        "persisted_s": 0.2,
        "answer_s": 0.45,
    }
    assert tick_timings(since_fetch_s=1, at_start_s=0, tick_s=1, started=5.0, marks={}) == {
        "since_fetch_s": 1,
        "at_start_s": 0,
        "tick_s": 1,
    }


def test_a_delivery_takes_its_over_and_score_from_the_neutral_display() -> None:
    display = {"neutral": {"overs": "12.3", "score": "101/2"}, "7": {"overs": "x", "score": "y"}}
    counts = {"accepted": 9, "rejected": 1, "failed": 0}
    d = Delivery.of("42", "update", display, counts, event=None, event_types=(), priority=5, tokens=10)
    assert (d.over, d.score, d.accepted, d.rejected, d.tokens) == ("12.3", "101/2", 9, 1, 10)
    empty = Delivery.of("42", "end", None, counts, event=None, event_types=(), priority=10, tokens=0)
    assert (empty.over, empty.score) == ("", "")
