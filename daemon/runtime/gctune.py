"""The garbage collector, set for a process whose unit of work is a 10,000-push fan-out.

CPython collects its youngest generation every 700 net allocations of container objects. A fan-out
allocates tens of thousands of them at once (the pushes, their HTTP/2 streams, their results) and they all
live until the fan-out is answered, a second or two: so every one of those collections finds them alive,
promotes them, and after a few fan-outs the promoted objects trigger a full collection that walks the
whole heap (every session of every owned match, every loaded module). On a model of an instance owning 7
matches of 10,000 sessions (``python bench/gc_fanout.py``) that is most of the process's time; with a
young-generation threshold of 100,000 and the start-up heap frozen, the collector's share is negligible. A hot
match's 100,000-push fan-out keeps more than 100,000 objects alive: at 100,000 it still met a few
collections per fan-out, each walking and promoting them (3-4 µs a push in ``bench/fanout_cpu.py``), so the
default is 1,000,000.

So the daemon raises that threshold (``instance.gc_young_threshold``: most of a fan-out's objects are
freed by reference counting before a collection ever sees them; cycles still get collected, a little
later) and, once it is up, freezes what start-up built (modules, botocore's service models, the
configuration: ``gc.freeze``) so that a full collection no longer walks it. Every collection's pause is
measured (``sightscreen_gc_pause_seconds`` by generation) and reported by ``status``.

The price of a high threshold: the collector seldom runs on its own, and garbage that only it can free
waits. Some of it is heavy: an httpx response is a reference cycle that holds its body (a SportMonks
``/livescores`` with every ball of every live match), so the peak RSS grows by tens of megabytes. So
``sweep`` collects the young generations every ``instance.gc_sweep_s`` (10 s): a walk of the
objects allocated since, a few milliseconds, that frees what cycles there are while they are young. That
is not enough: garbage that was still alive at a young collection (a response in flight) has been moved to
the oldest generation, which CPython collects only once it has grown by a quarter, and with few young
collections that is seldom, and RSS keeps growing. So every
``instance.gc_full_every_s`` (60 s) the sweep is a full collection: a walk of the heap start-up did not
leave frozen (the sessions and followers of the owned matches), tens of milliseconds a minute.

Freeing is not returning: what Python frees outside its own small-object arenas (fixture bodies, JSON,
HTTP responses: anything over 512 bytes) goes back to the C allocator, which keeps the pages, so a process
that carries match after match keeps the RSS of its busiest moment for good. After each full collection the
sweep asks glibc to hand its free pages back to the system (``malloc_trim(0)``, every thread's arena; a
millisecond or two), so RSS follows what the process holds, and a leak shows as one. Where the C library has
no ``malloc_trim`` (not glibc) nothing is asked.

Trimming hands back whole free pages; it cannot hand back a page that holds one live allocation. glibc gives
every thread that allocates an arena of its own (up to eight per core), and the DynamoDB worker threads
(botocore's requests and responses) come and go through trio's thread cache, so a season's allocations end
up spread over a dozen arenas whose pages are each partly used, and RSS grows from match to match while the
memory Python holds does not (``bench/season.py --tracemalloc`` tells the two apart; docs/performance.md has
the figures). So the daemon caps the arenas at start (``instance.malloc_arenas``, 2; ``limit_malloc_arenas``: glibc's
``mallopt(M_ARENA_MAX)``, before any worker thread exists): the threads share two arenas, whose free pages
are reused instead of left beside others'.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import math
import time
from collections.abc import Callable
from typing import Any

import trio

from daemon.metrics import GC_PAUSE

_GENERATIONS = ("0", "1", "2")


class GcMonitor:
    """Times every collection (a ``gc.callbacks`` hook); one per process, installed by ``configure``."""

    def __init__(self) -> None:
        self._started = 0.0
        self._observe = [GC_PAUSE.labels(generation=g).observe for g in _GENERATIONS]
        self.collections = [0, 0, 0]
        self.collected = [0, 0, 0]  # unreachable objects freed: garbage reference counting could not free
        self.pause_s = [0.0, 0.0, 0.0]
        self.longest_s = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        pause = time.perf_counter() - self._started
        generation = min(int(info.get("generation", 2)), 2)
        self.collections[generation] += 1
        self.collected[generation] += int(info.get("collected", 0))
        self.pause_s[generation] += pause
        self.longest_s = max(self.longest_s, pause)
        self._observe[generation](pause)

    def snapshot(self) -> dict[str, Any]:
        return {
            "thresholds": list(gc.get_threshold()),
            "frozen_objects": gc.get_freeze_count(),
            "collections": dict(zip(_GENERATIONS, self.collections, strict=True)),
            "collected": dict(zip(_GENERATIONS, self.collected, strict=True)),
            "pause_s": {g: round(s, 3) for g, s in zip(_GENERATIONS, self.pause_s, strict=True)},
            "longest_pause_s": round(self.longest_s, 4),
        }


_monitor: GcMonitor | None = None


def configure(young_threshold: int) -> GcMonitor:
    """Set the young generation's threshold (0 keeps CPython's own) and time every collection from now on.
    Idempotent: a second call changes the threshold and keeps the one monitor."""
    global _monitor
    if young_threshold:
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(young_threshold, older, oldest)
    if _monitor is None:
        _monitor = GcMonitor()
        gc.callbacks.append(_monitor)
    return _monitor


def freeze_startup_heap() -> int:
    """Collect once, then move every object alive now out of the collector's sight (``gc.freeze``): start-up
    garbage is gone and what start-up built stays without being walked again. Returns how many are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


async def sweep(every_s: float, full_every_s: float = 0.0) -> None:
    """Collect the two young generations every ``every_s`` seconds, and every generation once
    ``full_every_s`` has passed since the last full sweep (0: never), forever (a task of the daemon)."""
    next_full = trio.current_time() + full_every_s if full_every_s else math.inf
    while True:
        await trio.sleep(every_s)
        if trio.current_time() >= next_full:
            gc.collect()
            release_free_memory()
            next_full = trio.current_time() + full_every_s
        else:
            gc.collect(1)


def _glibc(name: str) -> Callable[..., int] | None:
    """The C library's function ``name``; None where there is no C library to load or it has no such
    function (not glibc)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        function: Callable[..., int] = getattr(libc, name)
    except (OSError, AttributeError):
        return None
    return function


_TRIM = _glibc("malloc_trim")
M_ARENA_MAX = -8  # glibc's mallopt parameter number (malloc.h)


def limit_malloc_arenas(arenas: int) -> bool:
    """Cap glibc's malloc arenas at ``arenas`` (``mallopt(M_ARENA_MAX, arenas)``; see the module doc); False
    where nothing was set: ``arenas`` 0, or a C library without ``mallopt`` (not glibc), or one refusing it."""
    mallopt = _glibc("mallopt") if arenas > 0 else None
    return mallopt is not None and bool(mallopt(M_ARENA_MAX, arenas))


def release_free_memory() -> bool:
    """Hand the C allocator's free pages back to the system (glibc's ``malloc_trim(0)``); False where the C
    library has none. See the module doc."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


def snapshot() -> dict[str, Any] | None:
    """What ``status`` shows: thresholds, frozen objects, collections and their pauses (None if not set)."""
    return _monitor.snapshot() if _monitor is not None else None
