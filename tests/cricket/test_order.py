"""The content order of fixtures (``daemon.cricket.order``): the rule, its two readers, and the feed's gate.

The gate's properties run over interleavings of two sources reading one synthesised match, one of them behind
the other by some entries (a lagging CDN or replica), answering in any order: what it lets through never goes
back in the match, and it lets the fresh source's news through at once.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.cricket.order import (
    FINAL_PROGRESS,
    Gate,
    InningsMark,
    Stamp,
    compare,
    mark_of_fixture,
    progress_of,
    stamp_of_fixture,
    stamp_of_snapshot,
)
from daemon.cricket.snapshot import snapshot_from_fixture
from daemon.replay.synth import synthesise
from daemon.replay.tape import Tape
from tests.doubles import minimal_fixture


@cache
def tape(seed: int) -> Tape:
    return synthesise("T10", seed=seed, overs=3)


@cache
def fixture(seed: int, cursor: int) -> dict[str, Any]:
    return tape(seed).fixture_at(cursor)


# ---- the rule -------------------------------------------------------------------------------------------
def s(
    at: int | None = 100, ball: int | None = 10, innings: tuple[InningsMark, ...] = (), progress: int = 2
) -> Stamp:
    return Stamp(at, ball, innings, progress)


def test_a_newer_stamp_wins_whatever_the_rest_says() -> None:
    """A correction that takes a wicket or a ball away is stamped when it was made: newer, though less."""
    old = s(100, 10, (InningsMark(1, 30, 40, 3),))
    corrected = s(101, 9, (InningsMark(1, 29, 36, 2),))
    assert compare(old, corrected) == 1 and compare(corrected, old) == -1


def test_at_the_same_stamp_the_newest_ball_then_the_scores_then_progress_decide() -> None:
    assert compare(s(ball=10), s(ball=11)) == 1 and compare(s(ball=11), s(ball=10)) == -1
    up = (InningsMark(1, 31, 41, 3),)
    base = (InningsMark(1, 30, 40, 3),)
    assert compare(s(innings=base), s(innings=up)) == 1
    assert compare(s(innings=up), s(innings=base)) == -1
    mixed = (InningsMark(1, 31, 36, 3),)  # a ball on, runs taken back: a correction decides nothing
    assert compare(s(innings=base), s(innings=mixed)) == 0
    second = (InningsMark(1, 120, 180, 6), InningsMark(2, 0, 0, 0))
    assert compare(s(innings=base), s(innings=second)) == 1
    assert compare(s(progress=2), s(progress=3)) == 1 and compare(s(progress=3), s(progress=2)) == -1
    assert compare(s(), s()) == 0


def test_a_stamped_fixture_is_newer_than_one_with_no_stamp_and_unknowns_are_skipped() -> None:
    assert compare(s(None, None), s(100, None)) == 1 and compare(s(100), s(None)) == -1
    assert compare(s(ball=None), s(ball=5)) == 0  # the balls stripped for a match without the ball feed


@pytest.mark.parametrize(
    ("status", "innings", "board", "expected"),
    [
        ("NS", [], None, 0),
        ("1st Innings", [], None, 2),
        ("1st Innings", [1], 1, 2),
        ("Innings Break", [1], 1, 3),
        ("2nd Innings", [1], 1, 4),  # the status can come before the innings' first row or ball
        ("1st Innings", [1, 2], 2, 4),  # and a ball of the second innings before the status
        ("Tea Break", [1, 2, 3], 3, 6),
        ("Finished", [1, 2], 2, FINAL_PROGRESS),
        ("Aban.", [], None, FINAL_PROGRESS),
    ],
)
def test_progress(status: str, innings: list[int], board: int | None, expected: int) -> None:
    assert progress_of(status, innings, board) == expected


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 5), cursor=st.integers(0, 200))
def test_the_raw_reader_and_the_snapshot_reader_agree(seed: int, cursor: int) -> None:
    """Two readers of one rule: the feed's (raw JSON, before any parsing) and the engine's (a snapshot)."""
    cursor = min(cursor, len(tape(seed)))
    raw = fixture(seed, cursor)
    assert stamp_of_fixture(raw) == stamp_of_snapshot(snapshot_from_fixture(raw))


def test_the_real_fixture_reads_the_same_both_ways(real_fixture_path: Path) -> None:
    real = json.loads(real_fixture_path.read_text())
    stamp = stamp_of_fixture(real)
    assert stamp == stamp_of_snapshot(snapshot_from_fixture(real))
    assert stamp.ball_id == max(b["id"] for b in real["data"]["balls"])
    assert stamp.progress == 4 and [m.inning for m in stamp.innings] == [1, 2]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 5), a=st.integers(0, 200), b=st.integers(0, 200))
def test_along_one_tape_the_order_is_the_order_of_the_entries(seed: int, a: int, b: int) -> None:
    """Whatever the tape does (corrections, deletions, wickets given late), a later cursor is never older."""
    n = len(tape(seed))
    a, b = sorted((min(a, n), min(b, n)))
    order = compare(stamp_of_fixture(fixture(seed, a)), stamp_of_fixture(fixture(seed, b)))
    assert order >= 0
    if fixture(seed, a) != fixture(seed, b):
        assert order == 1


# ---- the gate ---------------------------------------------------------------------------------------------
def test_the_gate_drops_an_older_answer_and_takes_a_newer_one_at_once() -> None:
    gate = Gate()
    verdict, gate = gate.admit(mark_of_fixture(fixture(1, 20)))
    assert verdict == "newer"
    verdict, gate = gate.admit(mark_of_fixture(fixture(1, 18)))
    assert verdict == "behind" and gate.delivered == mark_of_fixture(fixture(1, 20))
    verdict, gate = gate.admit(mark_of_fixture(fixture(1, 21)))
    assert verdict == "newer"
    assert gate.admit(mark_of_fixture(fixture(1, 21)))[0] == "same"


def test_a_status_change_at_the_same_stamp_needs_two_answers_in_a_row() -> None:
    live = fixture(1, 20)
    paused = dict(live, status="Int.")
    gate = Gate().admit(mark_of_fixture(live))[1]
    # two sources taking turns, the second still showing the old status: the change never goes through
    for _ in range(3):
        verdict, gate = gate.admit(mark_of_fixture(paused))
        assert verdict == "unconfirmed"
        verdict, gate = gate.admit(mark_of_fixture(live))
        assert verdict == "same"
    # once both show it
    verdict, gate = gate.admit(mark_of_fixture(paused))
    assert verdict == "unconfirmed"
    verdict, gate = gate.admit(mark_of_fixture(paused))
    assert verdict == "confirmed" and gate.delivered == mark_of_fixture(paused)


def test_a_wrong_final_status_before_the_first_ball_does_not_hold_the_true_answers_behind_it() -> None:
    """Before the first ball nothing is stamped: a burst of wrong "Finished" answers is confirmed like any
    status change, and the true status after it is taken again once two answers agree, not held as behind
    (it would be until the first ball, and a match actor waiting to see the match live would wait for ever)."""
    pre = dict(minimal_fixture(7, status="1st Innings"), runs=[], balls=[])
    wrong = dict(pre, status="Finished")
    assert stamp_of_fixture(pre) == Stamp(None, None, (), 2)
    gate = Gate().admit(mark_of_fixture(pre))[1]
    verdict, gate = gate.admit(mark_of_fixture(wrong))
    assert verdict == "unconfirmed"
    verdict, gate = gate.admit(mark_of_fixture(wrong))
    assert verdict == "confirmed" and gate.delivered == mark_of_fixture(wrong)
    verdict, gate = gate.admit(mark_of_fixture(pre))
    assert verdict == "unconfirmed"
    verdict, gate = gate.admit(mark_of_fixture(pre))
    assert verdict == "confirmed" and gate.delivered == mark_of_fixture(pre)


def test_a_ball_from_the_future_at_the_same_second_waits_and_does_not_outrank_the_true_answer() -> None:
    """The newest ball copied ahead with a new id, same stamp: confirmed only by a second answer, and when it
    is gone the true answer (lower newest id, same stamp) is taken again, not dropped as older."""
    true = fixture(2, 30)
    balls = list(true["balls"])
    fake = dict(balls[-1], id=balls[-1]["id"] + 999, ball=float(balls[-1]["ball"]) + 3)
    forged = dict(true, balls=[*balls, fake])
    gate = Gate().admit(mark_of_fixture(true))[1]
    assert gate.admit(mark_of_fixture(forged))[0] == "unconfirmed"
    gate = gate.admit(mark_of_fixture(forged))[1].admit(mark_of_fixture(forged))[1]
    assert gate.delivered == mark_of_fixture(forged)
    verdict, gate = gate.admit(mark_of_fixture(true))
    assert verdict == "unconfirmed"
    verdict, gate = gate.admit(mark_of_fixture(true))
    assert verdict == "confirmed" and gate.delivered == mark_of_fixture(true)


@st.composite
def two_sources(draw: st.DrawFn) -> tuple[int, list[tuple[int, bool]], int]:
    """(seed, [(fresh cursor, answered by the lagging source)], lag in entries): the fresh source's cursor
    moves on by 0-3 entries a poll; any poll may be answered by the source that is ``lag`` entries behind."""
    seed = draw(st.integers(0, 5))
    lag = draw(st.integers(1, 8))
    steps = draw(st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=5, max_size=120))
    polls, cursor = [], 0
    for step, lagging in steps:
        cursor = min(len(tape(seed)), cursor + step)
        polls.append((cursor, lagging))
    return seed, polls, lag


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(two_sources())
def test_what_the_gate_lets_through_never_goes_back_and_the_news_is_never_held(
    case: tuple[int, list[tuple[int, bool]], int],
) -> None:
    seed, polls, lag = case
    gate = Gate()
    delivered_cursor = -1
    for cursor, lagging in polls:
        shown = max(0, cursor - lag) if lagging else cursor
        verdict, gate = gate.admit(mark_of_fixture(fixture(seed, shown)))
        if verdict in ("newer", "confirmed"):
            # what goes through is never behind what went through before ...
            assert (
                compare(stamp_of_fixture(fixture(seed, max(delivered_cursor, 0))), gate.delivered.stamp) >= 0
            )
            delivered_cursor = max(delivered_cursor, shown)
        if not lagging and verdict != "same":
            # ... and the fresh source's answer always goes through at once (every entry is stamped later)
            assert verdict == "newer", (verdict, shown)
        assert gate.delivered == mark_of_fixture(fixture(seed, delivered_cursor)) or verdict == "same"
