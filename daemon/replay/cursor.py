"""The replay cursor: which entries of a tape are visible at a given wall-clock time (pure, no I/O).

Owns the clock arithmetic of replay mode and nothing else: no tape contents, no HTTP. There is no timer
that moves a cursor; the position is a function of the wall clock (spec platform-docs §15):

- *Match time* (virtual milliseconds since the first ball could be bowled) runs at ``speed`` times the
  wall clock while playing and stands still while paused. Every control (pause, play, speed, seek)
  re-anchors: it records (wall time, match time) and the clock continues from there, so a change never
  makes the cursor jump.
- Entry ``i`` becomes visible at match time ``offsets_ms[i]`` (the tape's own gaps between entries, drawn from
  real matches for a synthesised tape; ``(i + 1) * ms_per_ball`` for a tape without them), plus the innings
  break for every entry from the first ball of the second innings on. So the cursor holds at the break index
  for ``innings_break_s`` of match time (``innings_break_s / speed`` of wall time), during which the fixture
  shows ``Innings Break``; afterwards it resumes where it stopped (the break is not skipped).
- Before the match starts (``start_delay_s`` of match time after the replay began) the cursor is 0 and
  the fixture is ``NS``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

MAX_SPEED = 1_000_000.0
"""The fastest replay: a 3.5-hour match in about 13 ms. Far faster makes match time overflow (``1e308``
times the wall clock is infinite), after which no cursor can be computed."""


def check_speed(speed: float) -> float:
    """``speed`` when it is a number in (0, MAX_SPEED]; else ValueError saying so."""
    if isinstance(speed, bool) or not isinstance(speed, int | float) or not (0 < speed <= MAX_SPEED):
        raise ValueError(f"speed must be a number greater than 0 and at most {MAX_SPEED:g}, got {speed!r}")
    return float(speed)


class Paced(Protocol):
    """What the clock reads of a tape: its length, its pace and gaps, and where its innings break is."""

    ms_per_ball: float

    def __len__(self) -> int: ...

    def entry_offsets_ms(self, ms_per_ball: float | None = None) -> list[float]: ...

    def innings_break_index(self) -> int | None: ...


@dataclass
class ReplayClock:
    """The cursor of one fixture. Mutable on purpose: only the replay server that owns it touches it."""

    total: int  # entries on the tape
    ms_per_ball: float  # the mean gap between entries (the pace a tape without gaps of its own is read at)
    break_index: int | None  # first entry of the 2nd innings; None for a one-innings tape
    break_ms: float
    starts_at: float  # wall time (seconds) the first ball could be bowled
    speed: float = 1.0
    paused: bool = False
    anchor_wall: float = 0.0
    anchor_ms: float = 0.0  # match time at anchor_wall
    offsets_ms: Sequence[float] | None = None  # when each entry falls due, before the break; None: uniform
    _due: list[float] = field(default_factory=list, repr=False)  # when each entry falls due, break included

    def __post_init__(self) -> None:
        if self.ms_per_ball <= 0:
            raise ValueError(f"ms_per_ball must be > 0, got {self.ms_per_ball}")
        check_speed(self.speed)
        offsets = (
            [(i + 1) * self.ms_per_ball for i in range(self.total)]
            if self.offsets_ms is None
            else [float(x) for x in self.offsets_ms]
        )
        if len(offsets) != self.total:
            raise ValueError(f"offsets_ms: {len(offsets)} offsets for {self.total} entries")
        if any(b < a for a, b in zip(offsets, offsets[1:], strict=False)) or (offsets and offsets[0] < 0):
            raise ValueError("offsets_ms: must be >= 0 and never decrease")
        self._due = [
            at + (self.break_ms if self.break_index is not None and i >= self.break_index else 0.0)
            for i, at in enumerate(offsets)
        ]
        self.offsets_ms = None  # read once: the due times are the clock's from here on
        self.anchor_wall = self.starts_at

    @classmethod
    def for_tape(
        cls,
        tape: Paced,
        *,
        starts_at: float,
        break_ms: float,
        ms_per_ball: float | None = None,
        speed: float = 1.0,
    ) -> ReplayClock:
        """The clock of ``tape``: its entries at their own gaps, scaled to ``ms_per_ball`` when given."""
        return cls(
            total=len(tape),
            ms_per_ball=ms_per_ball or tape.ms_per_ball,
            break_index=tape.innings_break_index(),
            break_ms=break_ms,
            starts_at=starts_at,
            speed=speed,
            offsets_ms=tape.entry_offsets_ms(ms_per_ball),
        )

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
        return self._due[index]

    def cursor_at_ms(self, ms: float) -> int:
        """How many entries are visible at match time ``ms``."""
        # a hair of slack so a cursor computed from due_ms() of an entry always includes that entry
        return bisect_right(self._due, ms + 1e-6)

    def cursor(self, now: float) -> int:
        return self.cursor_at_ms(self.match_ms(now))

    def finished(self, now: float) -> bool:
        return self.cursor(now) >= self.total

    def in_break(self, now: float) -> bool:
        """True while the cursor is held at the innings break."""
        if self.break_index is None or self.break_index == 0:
            return False
        ms = self.match_ms(now)
        return self.cursor_at_ms(ms) == self.break_index and ms >= self._due[self.break_index - 1]

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
        later entry keeps its wall time."""
        ms = self.match_ms(now)
        self.total += 1
        if self.break_index is not None and index <= self.break_index:
            self.break_index += 1
        # due now, or with the entry it goes before when that one is already due (a stalled feed)
        self._due.insert(index, min(ms, self._due[index]) if index < len(self._due) else ms)
