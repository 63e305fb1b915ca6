"""The garbage-collector settings: threshold, pause timing, the frozen start-up heap, and what ``status`` shows."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from daemon.config import ConfigError, InstanceSettings, load_config
from daemon.runtime import gctune


@pytest.fixture
def restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)
    gc.unfreeze()


def test_configure_sets_the_young_threshold_and_times_every_collection(restore_gc: None) -> None:
    monitor = gctune.configure(123_456)
    assert gc.get_threshold()[0] == 123_456
    before = list(monitor.collections)
    gc.collect(0)
    gc.collect()
    assert monitor.collections[0] == before[0] + 1
    assert monitor.collections[2] == before[2] + 1
    assert monitor.longest_s > 0.0
    cycle: list[object] = []
    cycle.append(cycle)  # only the collector can free this
    del cycle
    freed = sum(monitor.collected)
    gc.collect()
    assert sum(monitor.collected) >= freed + 1
    assert gctune.configure(0) is monitor  # one monitor per process; 0 leaves the threshold alone
    assert gc.get_threshold()[0] == 123_456
    snap = gctune.snapshot()
    assert snap is not None and snap["thresholds"][0] == 123_456
    assert snap["collections"]["2"] == monitor.collections[2]


def test_the_pause_histogram_is_fed_by_generation(restore_gc: None) -> None:
    from daemon.metrics import REGISTRY

    gctune.configure(0)

    def count() -> float:
        return REGISTRY.get_sample_value("sightscreen_gc_pause_seconds_count", {"generation": "2"}) or 0.0

    before = count()
    gc.collect()
    assert count() == before + 1


async def test_the_sweep_frees_cycles_between_collections(restore_gc: None) -> None:
    gctune.configure(10_000_000)  # the collector would not run on its own here
    box = Box(None)
    box.value = box  # a cycle: reference counting alone never frees it
    alive = weakref.ref(box)
    del box
    assert alive() is not None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gctune.sweep, 0.01)
        with trio.fail_after(5):
            while alive() is not None:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()


async def test_every_full_every_s_the_sweep_collects_the_oldest_generation_too(restore_gc: None) -> None:
    monitor = gctune.configure(10_000_000)
    box = Box(None)
    box.value = box
    alive = weakref.ref(box)
    gc.collect(1)  # alive at a young collection (a response in flight): promoted to the oldest generation
    del box  # now garbage in the oldest generation, which young collections never look at
    gc.collect(1)
    assert alive() is not None
    before = monitor.collections[2]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gctune.sweep, 0.01, 0.05)
        with trio.fail_after(5):
            while alive() is not None:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert monitor.collections[2] > before


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not gctune.release_free_memory(), reason="the C library has no malloc_trim (not glibc)")
async def test_the_full_sweep_hands_freed_memory_back_to_the_system(restore_gc: None) -> None:
    """Objects over 512 bytes live in the C allocator, which keeps the pages they freed: without a trim a
    process keeps the RSS of its busiest moment for good."""
    gctune.configure(10_000_000)
    gctune.release_free_memory()
    blocks = [bytes(2048) + bytes([i % 256]) for i in range(60_000)]  # ~120 MB, each its own malloc block
    kept = blocks[-1]  # the heap's top stays in use: freeing the rest alone cannot shrink it
    busiest = _rss_mb()
    del blocks
    assert _rss_mb() > busiest - 20, "freed, and still held by the allocator"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gctune.sweep, 0.01, 0.02)
        with trio.fail_after(5):
            while _rss_mb() > busiest - 80:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert kept


class Box:
    def __init__(self, value: object) -> None:
        self.value = value


def test_freezing_the_startup_heap_hides_it_from_later_collections(restore_gc: None) -> None:
    frozen = gctune.freeze_startup_heap()
    assert frozen > 1000  # at least the modules loaded for this test
    # A frozen object can still be freed by reference counting (another thread dropping its last
    # reference), which takes it out of the count; nothing enters the count but a freeze.
    assert frozen - 100 <= gc.get_freeze_count() <= frozen
    survivors = [[i] for i in range(1000)]
    assert len(gc.get_objects()) < frozen  # a full walk no longer sees them
    del survivors


def test_the_threshold_is_checked_like_every_other_key(tmp_path: Path) -> None:
    assert InstanceSettings().gc_young_threshold == 1_000_000
    assert InstanceSettings().gc_freeze_at_ready is True
    path = tmp_path / "bad.toml"
    path.write_text("[instance]\ngc_young_threshold = -1\n")
    with pytest.raises(ConfigError, match="gc_young_threshold"):
        load_config(path, env={})


ARENAS_PROBE = """
import ctypes, ctypes.util, os, re, sys, tempfile, threading
from daemon.runtime import gctune

capped = gctune.limit_malloc_arenas(int(sys.argv[1]))
hold = []
together = threading.Barrier(12)
def allocate():
    hold.append([bytes(1024) for _ in range(2000)])  # C-allocator blocks, from this thread's arena
    together.wait()  # every thread alive at once: none hands its arena on to the next
threads = [threading.Thread(target=allocate) for _ in range(12)]
for t in threads:
    t.start()
for t in threads:
    t.join()
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
libc.fopen.restype = ctypes.c_void_p
libc.malloc_info.argtypes = (ctypes.c_int, ctypes.c_void_p)
libc.fclose.argtypes = (ctypes.c_void_p,)
path = tempfile.mktemp()
f = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, f)
libc.fclose(f)
with open(path) as info:
    print(capped, len(re.findall(r'<heap nr="', info.read())))
os.unlink(path)
"""


def _arenas_with(cap: int) -> tuple[str, int]:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run(
        [sys.executable, "-c", ARENAS_PROBE, str(cap)], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(not gctune.release_free_memory(), reason="the C library is not glibc (no malloc arenas)")
def test_the_arena_cap_keeps_every_thread_on_the_arenas_it_allows() -> None:
    """Twelve threads allocating: glibc's own rule gives them arenas of their own (up to 8 per core), the cap
    keeps them on one or two (glibc's malloc_info lists each arena as a heap)."""
    assert _arenas_with(1) == ("True", 1)
    capped, two = _arenas_with(2)
    assert capped == "True" and two <= 2
    uncapped, arenas = _arenas_with(0)
    assert uncapped == "False" and arenas > 2, "without the cap the threads made arenas of their own"


def test_the_arena_cap_is_checked_like_every_other_key() -> None:
    assert InstanceSettings().malloc_arenas == 2
    with pytest.raises(ValueError):
        InstanceSettings(malloc_arenas=-1)
