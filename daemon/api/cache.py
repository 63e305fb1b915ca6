"""A small in-memory cache with a lifetime per entry and one load at a time per key.

The API serves display states and the team and league scans from memory for a short time: during a live
match every open app polls the same few ``DISPLAY#`` keys, and while one read of a key is in flight the
other requests for it wait for that read instead of making their own (one DynamoDB call per key per
lifetime, whatever the request rate). A failed load is not cached; its waiters each try once themselves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

import trio

V = TypeVar("V")


class _Pending:
    __slots__ = ("done", "ok", "value")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.ok = False
        self.value: Any = None


class TtlCache(Generic[V]):
    def __init__(
        self, ttl_s: float, *, max_entries: int = 10_000, clock: Callable[[], float] = trio.current_time
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.clock = clock
        self.loads = 0
        self.hits = 0
        self._values: dict[Hashable, tuple[float, V]] = {}
        self._pending: dict[Hashable, _Pending] = {}

    def invalidate(self, key: Hashable | None = None) -> None:
        if key is None:
            self._values.clear()
        else:
            self._values.pop(key, None)

    async def get(self, key: Hashable, load: Callable[[], Awaitable[V]]) -> V:
        if self.ttl_s <= 0:
            self.loads += 1
            return await load()
        now = self.clock()
        entry = self._values.get(key)
        if entry is not None and entry[0] > now:
            self.hits += 1
            return entry[1]
        pending = self._pending.get(key)
        if pending is not None:
            await pending.done.wait()
            if pending.ok:
                self.hits += 1
                value: V = pending.value
                return value
            self.loads += 1
            return await load()
        pending = self._pending[key] = _Pending()
        try:
            self.loads += 1
            value = await load()
            pending.ok, pending.value = True, value
            if len(self._values) >= self.max_entries:
                self._evict(now)
            self._values[key] = (self.clock() + self.ttl_s, value)
            return value
        finally:
            del self._pending[key]
            pending.done.set()

    def _evict(self, now: float) -> None:
        for k in [k for k, (exp, _) in self._values.items() if exp <= now]:
            del self._values[k]
        while len(self._values) >= self.max_entries:
            del self._values[next(iter(self._values))]
