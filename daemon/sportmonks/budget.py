"""The hourly SportMonks call budget, per endpoint (entity): never exceeded.

Owns the record of calls made in the last hour per endpoint; it does no HTTP and no logging. SportMonks allows
about 2,000 calls per entity per hour, in a window that starts at the first call (spec §4). We cannot see where
that window starts, so the budget is a **sliding** window: at most ``limit`` calls in any 3,600 s interval.
Any fixed one-hour window the server uses is contained in some sliding interval, so it never sees more than
``limit`` calls from us either.

Under a burst, ``acquire`` waits for a slot when one frees within ``max_wait`` seconds, and otherwise raises
``BudgetExhausted`` at once (it never sleeps in vain): callers that can wait (sync jobs) pass a wait, callers on
a cadence (the feed) pass 0 and simply skip the tick. The final check and the record happen with no await in
between, so concurrent trio tasks cannot overshoot the limit.

A 429 with a long ``Retry-After`` tells us the server's window is full whatever our count says; ``block_until``
refuses calls to that endpoint until then.

In a fleet the budget is the region's: only the feed leader calls SportMonks, and it hands its record on
through the lease (``export`` at each renewal, ``seed`` by the next leader), so a leader change neither
forgets the hour's calls nor counts them twice.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping

import trio

from daemon.sportmonks.errors import BudgetExhausted

WINDOW_S = 3600.0


class CallBudget:
    def __init__(
        self,
        *,
        default_limit: int,
        limits: Mapping[str, int] | None = None,
        clock: Callable[[], float],
        window_s: float = WINDOW_S,
        on_change: Callable[[str, int], None] | None = None,
    ) -> None:
        if default_limit < 1:
            raise ValueError("default_limit must be >= 1")
        self.default_limit = default_limit
        self.limits = dict(limits or {})
        self.window_s = window_s
        self._clock = clock
        self._on_change = on_change
        self._calls: dict[str, deque[float]] = {}
        self._blocked_until: dict[str, float] = {}
        # told of every call recorded (endpoint, clock time): the feed's pacer spaces its polls by them
        self.listeners: list[Callable[[str, float], None]] = []
        self.delayed: dict[str, int] = {}
        self.skipped: dict[str, int] = {}

    def limit(self, endpoint: str) -> int:
        return self.limits.get(endpoint, self.default_limit)

    def _prune(self, endpoint: str, now: float) -> deque[float]:
        calls = self._calls.setdefault(endpoint, deque())
        while calls and calls[0] <= now - self.window_s:
            calls.popleft()
        return calls

    def remaining(self, endpoint: str) -> int:
        """Calls still allowed for ``endpoint`` in the sliding hour ending now (0 while blocked by a 429)."""
        now = self._clock()
        if self._blocked_until.get(endpoint, 0.0) > now:
            return 0
        return max(0, self.limit(endpoint) - len(self._prune(endpoint, now)))

    def used(self, endpoint: str) -> int:
        return len(self._prune(endpoint, self._clock()))

    def wait_time(self, endpoint: str) -> float:
        """Seconds until a call to ``endpoint`` fits (0 when it fits now)."""
        now = self._clock()
        blocked = max(0.0, self._blocked_until.get(endpoint, 0.0) - now)
        calls = self._prune(endpoint, now)
        over = len(calls) - self.limit(endpoint)
        if over < 0:
            return blocked
        # The (over+1)-th oldest call must leave the window before there is room again.
        return max(blocked, calls[over] + self.window_s - now)

    def try_take(self, endpoint: str) -> bool:
        """Record a call now if it fits; never waits."""
        if self.wait_time(endpoint) > 0:
            return False
        now = self._clock()
        self._calls[endpoint].append(now)
        for listener in self.listeners:
            listener(endpoint, now)
        if self._on_change is not None:
            self._on_change(endpoint, self.remaining(endpoint))
        return True

    async def wait_for_room(self, endpoint: str, *, max_wait: float = 0.0) -> bool:
        """Wait until a call to ``endpoint`` fits, up to ``max_wait`` s; else raise ``BudgetExhausted``.

        Does not take the slot (the caller takes it with ``try_take`` once it really sends, with no await in
        between). Returns True when it had to wait, so the caller can count a delayed call.
        """
        deadline = self._clock() + max(0.0, max_wait)
        waited = False
        while True:
            wait = self.wait_time(endpoint)
            if wait <= 0:
                if waited:
                    self.delayed[endpoint] = self.delayed.get(endpoint, 0) + 1
                return waited
            if self._clock() + wait > deadline:
                self.skipped[endpoint] = self.skipped.get(endpoint, 0) + 1
                raise BudgetExhausted(endpoint, wait)
            waited = True
            await trio.sleep(wait)

    async def acquire(self, endpoint: str, *, max_wait: float = 0.0) -> bool:
        """Wait for room (bounded, see ``wait_for_room``) and take the slot. Returns True when it waited."""
        waited = await self.wait_for_room(endpoint, max_wait=max_wait)
        # No await between the last check in wait_for_room and this record: the limit holds under any
        # interleaving of trio tasks.
        if not self.try_take(endpoint):  # pragma: no cover - impossible without an await in between
            raise BudgetExhausted(endpoint, self.wait_time(endpoint))
        return waited

    def block_until(self, endpoint: str, when: float) -> None:
        """Refuse calls to ``endpoint`` until clock time ``when`` (server said its window is full)."""
        self._blocked_until[endpoint] = max(when, self._blocked_until.get(endpoint, 0.0))
        if self._on_change is not None:
            self._on_change(endpoint, 0)

    def snapshot(self) -> dict[str, dict[str, int]]:
        """Per endpoint: limit, used, remaining, delayed and skipped counts (for the admin socket)."""
        names = set(self._calls) | set(self.limits) | set(self.skipped) | set(self._blocked_until)
        return {
            name: {
                "limit": self.limit(name),
                "used": self.used(name),
                "remaining": self.remaining(name),
                "delayed": self.delayed.get(name, 0),
                "skipped": self.skipped.get(name, 0),
            }
            for name in sorted(names)
        }

    def export(self, *, to_wall: float, bucket_s: float = 60.0) -> dict[str, list[list[float]]]:
        """The calls in the window per endpoint, as ``[[wall time of the bucket's last call, count], ...]``
        (buckets of ``bucket_s``; ``to_wall`` converts this budget's clock to epoch seconds). Small enough
        to ride on a lease renewal; a bucket keeps its last call's time, so a seeded call leaves the window
        no earlier than the real one did."""
        out: dict[str, list[list[float]]] = {}
        now = self._clock()
        for endpoint in list(self._calls):
            buckets: dict[int, list[float]] = {}
            for t in self._prune(endpoint, now):
                b = buckets.setdefault(int(t // bucket_s), [0.0, 0.0])
                b[0] = max(b[0], round(t + to_wall, 3))
                b[1] += 1
            if buckets:
                out[endpoint] = [buckets[k] for k in sorted(buckets)]
        return out

    def seed(self, record: Mapping[str, list[list[float]]], *, to_wall: float, recorded_at: float) -> None:
        """Take over a region's record (``export``'s shape, ``recorded_at`` its wall time): the calls it
        lists replace ours up to then, ours made since are kept."""
        cutoff = recorded_at - to_wall
        for endpoint, buckets in record.items():
            mine = [t for t in self._calls.get(endpoint, ()) if t > cutoff]
            seeded: list[float] = []
            for wall, count in buckets:
                seeded.extend([float(wall) - to_wall] * int(count))
            self._calls[endpoint] = deque(sorted(seeded + mine))
            if self._on_change is not None:
                self._on_change(endpoint, self.remaining(endpoint))
