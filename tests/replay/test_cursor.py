"""The replay cursor is a pure function of the wall clock, the speed and the controls."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.replay.cursor import ReplayClock

MPB = 1000.0  # 1 s a ball at speed 1


def clock(**kw: object) -> ReplayClock:
    args: dict[str, object] = {
        "total": 20,
        "ms_per_ball": MPB,
        "break_index": 10,
        "break_ms": 5000.0,
        "starts_at": 100.0,
    }
    args.update(kw)
    return ReplayClock(**args)  # type: ignore[arg-type]


def test_nothing_is_visible_before_the_start_and_one_entry_per_ball_after() -> None:
    c = clock()
    assert not c.started(99.0) and c.cursor(99.0) == 0
    assert c.cursor(100.0) == 0
    assert c.cursor(100.999) == 0
    assert c.cursor(101.0) == 1
    assert c.cursor(105.5) == 5


def test_speed_scales_the_clock() -> None:
    c = clock(speed=4.0)
    assert c.cursor(101.0) == 4


def test_cursor_holds_at_the_innings_break_then_resumes_without_skipping() -> None:
    c = clock()
    assert c.cursor(110.0) == 10  # the last first-innings entry is out
    assert c.in_break(110.0) and c.in_break(115.9)
    assert c.cursor(115.9) == 10
    assert c.cursor(116.0) == 11  # first ball of the 2nd innings, one ball + the break later
    assert not c.in_break(116.0)
    assert c.cursor(200.0) == 20 and c.finished(200.0)


def test_break_is_scaled_by_speed() -> None:
    c = clock(speed=10.0, break_ms=60_000.0)  # a minute of match time = 6 s of wall time at 10x
    assert c.cursor(101.0) == 10
    assert c.cursor(106.9) == 10
    assert c.cursor(107.1) == 11


def test_pause_freezes_the_cursor_and_play_continues_from_there() -> None:
    c = clock()
    c.pause(103.5)
    assert c.cursor(150.0) == 3
    c.play(150.0)
    assert c.cursor(150.4) == 3
    assert c.cursor(150.5) == 4  # the half ball left at the pause is kept


def test_speed_change_reanchors_without_a_jump() -> None:
    c = clock()
    c.set_speed(10.0, 104.0)
    assert c.cursor(104.0) == 4
    assert c.cursor(104.1) == 5
    with pytest.raises(ValueError, match="speed"):
        c.set_speed(0, 105.0)


def test_seek_shows_exactly_the_first_n_entries_and_play_goes_on_from_there() -> None:
    c = clock()
    c.seek(15, 102.0)
    assert c.cursor(102.0) == 15
    assert c.cursor(103.0) == 16
    c.seek(3, 103.0)
    assert c.cursor(103.0) == 3
    c.seek(0, 103.0)
    assert c.cursor(103.0) == 0 and c.cursor(104.0) == 1
    with pytest.raises(ValueError, match="entry"):
        c.seek(21, 103.0)


def test_seek_before_the_start_starts_the_match() -> None:
    c = clock()
    c.seek(5, 50.0)
    assert c.started(50.0) and c.cursor(50.0) == 5


def test_wall_time_of_an_entry_is_when_it_fell_due() -> None:
    c = clock(speed=2.0)
    assert c.wall_time_of(0, 200.0) == pytest.approx(100.5)
    assert c.wall_time_of(3, 200.0) == pytest.approx(102.0)
    c.seek(8, 103.0)
    assert c.wall_time_of(5, 103.0) == 103.0  # jumped over by the seek: visible at the seek


def test_inserting_an_entry_shows_it_at_once_and_keeps_later_entries_on_time() -> None:
    c = clock()
    assert c.cursor(104.5) == 4
    c.insert(4, 104.5)
    assert c.total == 21 and c.break_index == 11
    assert c.cursor(104.5) == 5
    assert c.cursor(105.0) == 6  # the entry due at 105 s is still due at 105 s
    assert c.cursor(111.0) == 11 and c.cursor(115.9) == 11  # the break still ends at 116 s
    assert c.cursor(116.0) == 12


def test_one_innings_tape_has_no_break() -> None:
    c = clock(break_index=None, total=5)
    assert c.cursor(200.0) == 5 and not c.in_break(200.0)


@settings(max_examples=200, deadline=None)
@given(
    speed=st.floats(0.1, 1000),
    break_ms=st.floats(0, 100_000),
    steps=st.lists(
        st.tuples(st.floats(0, 50), st.sampled_from(["none", "pause", "play", "speed"]), st.floats(0.1, 500)),
        max_size=30,
    ),
)
def test_without_seeks_the_cursor_never_goes_back_and_never_passes_the_tape(
    speed: float, break_ms: float, steps: list[tuple[float, str, float]]
) -> None:
    c = clock(speed=speed, break_ms=break_ms)
    now, last = 100.0, 0
    for gap, action, x in steps:
        now += gap
        cursor = c.cursor(now)
        assert last <= cursor <= c.total
        last = cursor
        if action == "pause":
            c.pause(now)
        elif action == "play":
            c.play(now)
        elif action == "speed":
            c.set_speed(x, now)
        assert c.cursor(now) == cursor  # a control never moves the cursor by itself
