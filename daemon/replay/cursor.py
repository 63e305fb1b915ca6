"""The replay cursor: which entries of a tape are visible at a given wall-clock time (pure, no I/O).

Owns the clock arithmetic of replay mode and nothing else: no tape contents, no HTTP. There is no timer
that moves a cursor; the position is a function of the wall clock (spec platform-docs §15):

- *Match time* (virtual milliseconds since the first ball could be bowled) runs at ``speed`` times the
  wall clock while playing and stands still while paused. Every control (pause, play, speed, seek)
  re-anchors: it records (wall time, match time) and the clock continues from there, so a change never
  makes the cursor jump.
- Entry ``i`` becomes visible at match time ``(i + 1) * ms_per_ball``, plus the innings break for every
  entry from the first ball of the second innings on. So the cursor holds at the break index for
  ``innings_break_s`` of match time (``innings_break_s / speed`` of wall time), during which the fixture
  shows ``Innings Break``; afterwards it resumes where it stopped (the break is not skipped).
- Before the match starts (``start_delay_s`` of match time after the replay began) the cursor is 0 and
  the fixture is ``NS``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_SPEED = 1_000_000.0
"""The fastest replay: a 3.5-hour match in about 13 ms. Far faster makes match time overflow (``1e308``
times the wall clock is infinite), after which no cursor can be computed."""


def check_speed(speed: float) -> float:
    """``speed`` when it is a number in (0, MAX_SPEED]; else ValueError saying so."""
    if isinstance(speed, bool) or not isinstance(speed, int | float) or not (0 < speed <= MAX_SPEED):
        raise ValueError(f"speed must be a number greater than 0 and at most {MAX_SPEED:g}, got {speed!r}")
    return float(speed)


@dataclass
class ReplayClock:
    """The cursor of one fixture. Mutable on purpose: only the replay server that owns it touches it."""

    total: int  # entries on the tape
    ms_per_ball: float
    break_index: int | None  # first entry of the 2nd innings; None for a one-innings tape
    break_ms: float
    starts_at: float  # wall time (seconds) the first ball could be bowled
    speed: float = 1.0
    paused: bool = False
    anchor_wall: float = 0.0
    anchor_ms: float = 0.0  # match time at anchor_wall

    def __post_init__(self) -> None:
        if self.ms_per_ball <= 0:
            raise ValueError(f"ms_per_ball must be > 0, got {self.ms_per_ball}")
        check_speed(self.speed)
        self.anchor_wall = self.starts_at

    # --- reading -----------------------------------------------------------------------------------------

    def started(self, now: float) -> bool:
        return now >= self.starts_at or self.anchor_ms > 0

    def match_ms(self, now: float) -> float:
        """Match time at wall time ``now`` (0 before the start)."""
        if self.paused:
            return self.anchor_ms
        since = now - max(self.anchor_wall, self.starts_at)
        return self.anchor_ms + max(0.0, since) * 1000.0 * self.speed

    def due_ms(self, index: int) -> float:
        """Match time at which entry ``index`` becomes visible."""
        extra = self.break_ms if self.break_index is not None and index >= self.break_index else 0.0
        return (index + 1) * self.ms_per_ball + extra

    def cursor_at_ms(self, ms: float) -> int:
        """How many entries are visible at match time ``ms``."""
        # a hair of slack so a cursor computed from due_ms() of an entry always includes that entry
        ticks = math.floor(ms / self.ms_per_ball + 1e-9)
        if self.break_index is None:
            return max(0, min(self.total, ticks))
        before = max(0, min(self.break_index, ticks))
        after_ticks = math.floor((ms - self.break_ms) / self.ms_per_ball + 1e-9)
        after = max(0, min(self.total, after_ticks) - self.break_index)
        return min(self.total, before + after)

    def cursor(self, now: float) -> int:
        return self.cursor_at_ms(self.match_ms(now))

    def finished(self, now: float) -> bool:
        return self.cursor(now) >= self.total

    def in_break(self, now: float) -> bool:
        """True while the cursor is held at the innings break."""
        if self.break_index is None:
            return False
        ms = self.match_ms(now)
        return self.cursor_at_ms(ms) == self.break_index and ms >= self.break_index * self.ms_per_ball

    def wall_time_of(self, index: int, now: float) -> float:
        """When entry ``index`` became visible, for an entry that became visible since the last re-anchor.

        An entry that was already due at the anchor (a seek jumped over it) became visible at the anchor.
        """
        start = max(self.anchor_wall, self.starts_at)
        due = self.due_ms(index)
        if self.paused or due <= self.anchor_ms:
            return min(start, now)
        return min(now, start + (due - self.anchor_ms) / (1000.0 * self.speed))

    # --- controls (callers bring the cursor up to date *before* calling these) --------------------------

    def _reanchor(self, now: float) -> None:
        self.anchor_ms = self.match_ms(now)
        self.anchor_wall = max(now, self.starts_at) if self.anchor_ms == 0 else now

    def pause(self, now: float) -> None:
        self._reanchor(now)
        self.paused = True

    def play(self, now: float) -> None:
        self._reanchor(now)
        self.paused = False

    def set_speed(self, speed: float, now: float) -> None:
        check_speed(speed)
        self._reanchor(now)
        self.speed = speed

    def seek(self, cursor: int, now: float) -> None:
        """Make exactly the first ``cursor`` entries visible (a seek into the innings break lands at its start)."""
        if not 0 <= cursor <= self.total:
            raise ValueError(f"entry must be within 0..{self.total}, got {cursor}")
        self.anchor_ms = 0.0 if cursor == 0 else self.due_ms(cursor - 1)
        self.anchor_wall = now
        if now < self.starts_at:
            self.starts_at = now  # seeking starts the match

    def insert(self, index: int, now: float) -> None:
        """A new entry was inserted at ``index`` (= the current cursor) and must show at once, while every
        later entry keeps its wall time: shift the clock by one ball."""
        ms = self.match_ms(now)
        self.total += 1
        if self.break_index is not None and index <= self.break_index:
            self.break_index += 1
        self.anchor_ms = max(ms + self.ms_per_ball, self.due_ms(index))
        self.anchor_wall = now
