"""Write coalescing: concurrent requests' writes leave together, up to a batch at a time.

When a match starts, push-to-start reaches every follower within seconds and every iPhone registers its
Live Activity session at once: thousands of single-item writes, each costing a DynamoDB call (about a
millisecond of botocore CPU). ``Coalescer.submit`` lets the writes that arrive while others are in flight
leave as one batch (``max_batch`` items, one BatchWriteItem), so a burst costs a call per batch instead of
a call per request. Nothing waits for a timer: an idle API writes each request at once (a batch of one);
batches form only from requests that queued behind writes already in flight.

No background task: the first requests to find fewer than ``parallel`` writes in flight write
themselves (leaders); a leader's batch takes the longest-waiting requests with its own, and when it is done
it hands the lead to the next waiting request, so no request writes for others for longer than one batch.
Every request returns when its own item is written, with what the write said of it (the write answers one
result per item, in order), or raises the batch's error (nothing is reported written that was not). A request cancelled while waiting (a client gone) still has its item written: the
wait is shielded, bounded by the store's own timeouts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Generic, TypeVar

import trio

T = TypeVar("T")
R = TypeVar("R")


class _Slot(Generic[T, R]):
    __slots__ = ("done", "error", "item", "lead", "result")

    def __init__(self, item: T) -> None:
        self.item = item
        self.done = trio.Event()
        self.lead = False
        self.error: BaseException | None = None
        self.result: R | None = None


class Coalescer(Generic[T, R]):
    def __init__(
        self,
        write: Callable[[list[T]], Awaitable[Sequence[R]]],
        *,
        max_batch: int = 25,
        parallel: int = 4,
    ) -> None:
        if max_batch < 1 or parallel < 1:
            raise ValueError("max_batch and parallel must be >= 1")
        self._write = write
        self.max_batch = max_batch
        self.parallel = parallel
        self._pending: deque[_Slot[T, R]] = deque()
        self._leaders = 0
        self.batches = 0
        self.items = 0

    async def submit(self, item: T) -> R | None:
        """Write ``item`` with others that arrive meanwhile; the write's result for it."""
        slot: _Slot[T, R] = _Slot(item)
        with trio.CancelScope(shield=True):
            self._pending.append(slot)
            if self._leaders < self.parallel:
                self._leaders += 1
                slot.lead = True
            else:
                await slot.done.wait()
            if slot.lead:
                await self._flush(slot)
        if slot.error is not None:
            raise slot.error
        return slot.result

    async def _flush(self, own: _Slot[T, R]) -> None:
        batch = [self._pending.popleft() for _ in range(min(self.max_batch, len(self._pending)))]
        if own not in batch:  # the leader's own slot is always at the head; kept exact regardless
            batch.append(own)
            self._pending.remove(own)
        error: BaseException | None = None
        try:
            results = list(await self._write([s.item for s in batch]))
            for s, result in zip(batch, results, strict=False):
                s.result = result
            self.batches += 1
            self.items += len(batch)
        except Exception as exc:  # every request of the batch gets the error
            error = exc
        for s in batch:
            s.error = error
            if s is not own:
                s.done.set()
        if self._pending:
            successor = self._pending[0]
            successor.lead = True
            successor.done.set()
        else:
            self._leaders -= 1


class KeyedLock(Generic[T]):
    """One lock per key, held only while used: ``hold(key)`` takes turns with the others holding that key
    (one user's registrations for one match, one after another), keys apart run side by side."""

    def __init__(self) -> None:
        self._locks: dict[T, tuple[trio.Lock, int]] = {}

    def __len__(self) -> int:
        return len(self._locks)

    @asynccontextmanager
    async def hold(self, key: T) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = trio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)
