"""Event-loop stalls: when the trio loop has not run for a while, every thread's Python stack on stderr.

The loop beats (``StallWatchdog.beat``) once per turn of the daemon's loop monitor; a thread of the
watchdog's own looks every ``poll_s`` and, once the loop has not beaten for ``bound_s`` of the time it saw
pass itself, writes every thread's stack (``faulthandler.dump_traceback``), once per stall. Two rules make it
safe in a process that carries a season:

- the stacks are written by a Python thread, holding the GIL: the other threads stand still at a bytecode
  boundary while their frames are read. faulthandler's own timer (``dump_traceback_later``) writes them from
  a C thread without the GIL while the others run; a process paused past its timeout (SIGSTOP, a frozen VM)
  wakes with the timer expired and every thread moving at once, and that dump raced them: an engine stopped
  for 9 s answered nothing for minutes afterwards and crashed on SIGTERM. The price: a stall inside C code
  that holds the GIL is dumped only once it lets go (it is still measured and logged then);
- only staleness the watchdog saw pass counts (``StallClock``): a pause of the whole process stops the
  watchdog too, so when it wakes (its own look far later than ``poll_s``) it starts counting afresh and a
  pause alone is never taken for a stall.
"""

from __future__ import annotations

import faulthandler
import threading
import time
from typing import IO


class StallClock:
    """When a stall's dump is due, from the loop's last beat and the watchdog's own looks (pure)."""

    def __init__(self, bound_s: float, poll_s: float) -> None:
        if bound_s <= 0 or poll_s <= 0:
            raise ValueError(f"bound_s and poll_s must be > 0, got {bound_s!r}, {poll_s!r}")
        self.bound_s = bound_s
        self.max_gap_s = 3 * poll_s  # a look this much later than the last: the watchdog did not run either
        self._last_look: float | None = None
        self._counting_from = 0.0
        self._dumped_for: float | None = None

    def due(self, now: float, beat_at: float) -> bool:
        """Whether to write the stacks now: the loop last beat at ``beat_at`` and has not since, for
        ``bound_s`` of the time this watchdog saw pass; once per stall (per beat)."""
        if self._last_look is None or now - self._last_look > self.max_gap_s:
            self._counting_from = now  # the first look, or the first after a pause of the whole process
        self._last_look = now
        stale_for = now - max(beat_at, self._counting_from)
        if stale_for < self.bound_s or self._dumped_for == beat_at:
            return False
        self._dumped_for = beat_at
        return True


class StallWatchdog:
    """The thread that writes every thread's stack to ``file`` when the loop stalls (see the module doc)."""

    def __init__(self, bound_s: float, file: IO[str], *, poll_s: float = 0.25) -> None:
        self.clock = StallClock(bound_s, poll_s)
        self.file = file
        self.poll_s = poll_s
        self.beat_at = time.monotonic()
        self.dumps = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stall-watchdog", daemon=True)

    def start(self) -> StallWatchdog:
        self.file.fileno()  # faulthandler writes to a file descriptor: refuse a file without one now
        self._thread.start()
        return self

    def beat(self) -> None:
        self.beat_at = time.monotonic()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            if self.clock.due(time.monotonic(), self.beat_at):
                try:
                    faulthandler.dump_traceback(file=self.file, all_threads=True)
                    self.dumps += 1
                except (OSError, ValueError):  # stderr gone: nothing to write to
                    return
