"""LiveWork: the live fan-outs in progress on this instance, so that background jobs give way to them.

Owns a count of push rounds in progress and the event that fires when the last one ends. Match actors
wrap each round of pushes to their sessions in ``fanout()``; a background job calls ``give_way(job, max_wait_s)``
before each unit of its own work and, while a fan-out is in progress, waits for it to end - at most
``max_wait_s``, so that a job still moves under continuous live load.

Why: a wicket's 10,000 Live Activity updates are the product; a prematch follower is two DynamoDB calls of
its own (claim and confirmation) of 1.1-1.2 ms of CPU each in botocore's worker threads
(``bench/dynamodb_call_cost.py``), which hold the GIL the sender's event loop needs, so a job working
through thousands of followers beside live matches lengthens every wicket's fan-out (docs/performance.md:
the target soak with and without the prematch job).
A fan-out lasts about a second; the job loses that second, the wicket does not wait behind the job.

Key events among them: a match actor marks its alerting fan-outs (``key_event()``), and the instance's share
worker, which delivers shards of other engines' hot matches, gives way to them (``give_way_to_key_events``)
before it takes a shard and before each alerting chunk: this instance's own matches' key events go before its
help to another's.

Between fan-outs the job is paced (``Pace``) while this instance runs live matches (``matches()``): its
DynamoDB calls and their CPU would otherwise run flat out beside every tick's reads and writes, and a
catch-up of many followers would stretch the next fan-out as much as one running beside it.

No I/O, no clock of its own: trio's. Shared by the actors of one process only (no state crosses instances).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import trio

from daemon.metrics import BACKGROUND_GAVE_WAY, LIVE_FANOUTS


class LiveWork:
    def __init__(self, matches: Callable[[], int] = lambda: 0) -> None:
        self.matches = matches  # match actors running on this instance
        self._active = 0
        self._idle = trio.Event()
        self._idle.set()
        self.fanouts = 0  # fan-outs begun, for introspection and tests
        self._key_events = 0
        self._no_key_event = trio.Event()
        self._no_key_event.set()

    @property
    def active(self) -> int:
        """Fan-outs in progress now."""
        return self._active

    @contextmanager
    def fanout(self) -> Iterator[None]:
        """Mark a live fan-out in progress for the duration of the block (nestable, any number at once)."""
        if self._active == 0:
            self._idle = trio.Event()
        self._active += 1
        self.fanouts += 1
        LIVE_FANOUTS.set(self._active)
        try:
            yield
        finally:
            self._active -= 1
            LIVE_FANOUTS.set(self._active)
            if self._active == 0:
                self._idle.set()

    @property
    def key_events(self) -> int:
        """Alerting fan-outs (key events) of this instance's own matches in progress now."""
        return self._key_events

    @contextmanager
    def key_event(self) -> Iterator[None]:
        """Mark an alerting fan-out of one of this instance's matches for the duration of the block."""
        if self._key_events == 0:
            self._no_key_event = trio.Event()
        self._key_events += 1
        try:
            yield
        finally:
            self._key_events -= 1
            if self._key_events == 0:
                self._no_key_event.set()

    async def give_way_to_key_events(self, job: str) -> float:
        """Wait while one of this instance's own key events is being fanned out (however long: help to
        another engine's match goes after this instance's own key events); the seconds waited. Always a
        checkpoint."""
        if self._key_events == 0:
            await trio.lowlevel.checkpoint()
            return 0.0
        started = trio.current_time()
        await self._no_key_event.wait()
        waited = trio.current_time() - started
        BACKGROUND_GAVE_WAY.labels(job).inc(waited)
        return waited

    async def give_way(self, job: str, max_wait_s: float) -> float:
        """Wait while a fan-out is in progress, at most ``max_wait_s`` (0: never wait); the seconds waited.

        Always a checkpoint, so a job that calls it in a loop lets the live tasks run."""
        if self._active == 0 or max_wait_s <= 0:
            await trio.lowlevel.checkpoint()
            return 0.0
        started = trio.current_time()
        with trio.move_on_after(max_wait_s):
            await self._idle.wait()
        waited = trio.current_time() - started
        BACKGROUND_GAVE_WAY.labels(job).inc(waited)
        return waited


class Pace:
    """At most ``rate`` units of background work a second, in bursts of at most ``burst``, while ``active()``
    holds (0: never waits). ``take()`` before each unit; safe for concurrent callers: each reserves its own
    slot on one schedule (a virtual-time token bucket), so N tasks together still go at ``rate``."""

    def __init__(self, rate: float, *, burst: float = 1.0, active: Callable[[], bool] = lambda: True) -> None:
        if rate < 0 or burst < 1:
            raise ValueError(f"Pace: rate must be >= 0 and burst >= 1, got {rate!r}, {burst!r}")
        self.rate = rate
        self.burst = burst
        self._active = active
        self._next = -math.inf  # when the next unit may start, in trio time

    async def take(self) -> float:
        """Wait for this unit's slot; the seconds waited."""
        if self.rate <= 0 or not self._active():
            await trio.lowlevel.checkpoint()
            return 0.0
        now = trio.current_time()
        at = max(self._next, now - (self.burst - 1) / self.rate)
        self._next = at + 1 / self.rate
        if at <= now:
            await trio.lowlevel.checkpoint()
            return 0.0
        await trio.sleep_until(at)
        return at - now
