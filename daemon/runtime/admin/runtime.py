"""The ``runtime`` admin command: what the process holds right now, for telling a leak from a load.

A long-running daemon carries match after match; what one match leaves behind (a task, a descriptor, a
connection, a queued item) is invisible in one match and an OOM kill weeks later. ``runtime`` answers with
the figures that show it, read at the moment of asking:

- ``rss_mb`` and ``peak_rss_mb`` (``VmRSS``, ``VmHWM``) and ``threads`` (``Threads``) from ``/proc/self/status``;
- ``fds``: the open descriptors of ``/proc/self/fd`` by kind (socket, pipe, anon_inode, file, other) and in all;
- ``tasks``: the trio tasks alive, walked from the root task through every nursery, in all and by name (the
  name trio gives a task: its function's qualified name), so a kind of task that only grows stands out;
- ``apns``: the open connections of each APNs pool (push, broadcast when it has its own host, management);
- ``backlogs``: what waits in the process's memory channels and queues (the sender's inboxes and queues per
  lane and its retries, the janitor's inbox, the feed's subscriber channels and pending cache writes);
- with the argument ``objects``: ``objects`` (every object the garbage collector tracks) and
  ``objects_by_type`` (the most common types, by qualified name), so memory that grows with each match
  can be told from the allocator's own growth. Walking the heap takes tens of milliseconds at a daemon's
  size and holds the loop meanwhile: it is asked for, never sampled by default;
- with the argument ``memory``, where the process was started tracing Python's allocations
  (``PYTHONTRACEMALLOC=1``, or ``-X tracemalloc``): ``traced_mb`` and ``traced_peak_mb`` (what Python's
  allocator holds, as traced) and ``traced_by_line`` (the source lines holding the most, as
  ``file:line`` -> ``[KiB, blocks]``), which sees what the collector does not track (strings, bytes, numbers,
  dicts of them); two answers apart in time, subtracted, name the lines whose memory grew. Without tracing it
  says how to start it. A snapshot takes a second or so at a daemon's size and holds the loop meanwhile;
  tracing costs a few times the allocator's time, so it is for a diagnosis, not a service.

Reading ``/proc`` and walking the task tree costs well under a millisecond at a daemon's size; no I/O beyond
``/proc``. Where ``/proc`` is absent (not Linux) the figures read from it are None.
"""

from __future__ import annotations

import gc
import os
import sys
import tracemalloc
from collections import Counter
from collections.abc import Iterable
from typing import Any, Protocol

import trio

from daemon.runtime.admin.protocol import AdminError, Handler, expect_args

# /proc/self/status fields the answer carries (kB values), by answer key
_STATUS_KB = {"VmRSS": "rss_mb", "VmHWM": "peak_rss_mb"}


class RuntimeView(Protocol):
    """What ``runtime`` reads of the running daemon beyond ``/proc`` and trio."""

    def apns_connections(self) -> dict[str, int] | None: ...

    def backlogs(self) -> dict[str, int]: ...


def task_names(root: trio.lowlevel.Task | None = None) -> Counter[str]:
    """Every task alive under ``root`` (default: the run's root task), counted by name."""
    start = root if root is not None else trio.lowlevel.current_root_task()
    names: Counter[str] = Counter()
    if start is None:
        return names
    stack = [start]
    while stack:
        task = stack.pop()
        names[task.name] += 1
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return names


def proc_status(text: str) -> dict[str, Any]:
    """``rss_mb``, ``peak_rss_mb`` and ``threads`` from the text of ``/proc/<pid>/status``."""
    out: dict[str, Any] = {"rss_mb": None, "peak_rss_mb": None, "threads": None}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        fields = value.split()
        if not fields:
            continue
        if name in _STATUS_KB:
            out[_STATUS_KB[name]] = round(int(fields[0]) / 1024, 1)
        elif name == "Threads":
            out["threads"] = int(fields[0])
    return out


def fd_kind(target: str) -> str:
    """What an ``/proc/<pid>/fd`` link points at: socket, pipe, anon_inode (epoll, eventfd...), file, other."""
    for kind in ("socket", "pipe", "anon_inode"):
        if target.startswith(f"{kind}:"):
            return kind
    return "file" if target.startswith("/") else "other"


def open_fds(folder: str = "/proc/self/fd") -> dict[str, int] | None:
    """The process's open descriptors by kind and in all (``total``); None without ``/proc``. The descriptor
    the listing itself holds open is left out."""
    try:
        with os.scandir(folder) as entries:
            own = None
            kinds: Counter[str] = Counter()
            links: list[tuple[str, str]] = []
            for entry in entries:
                try:
                    links.append((entry.name, os.readlink(entry.path)))
                except OSError:  # closed between the listing and the look: it is not open any more
                    continue
            # the listing's own descriptor is the directory being listed
            for name, target in links:
                if target == os.path.realpath(folder) and own is None:
                    own = name
                    continue
                kinds[fd_kind(target)] += 1
    except OSError:
        return None
    return {"total": sum(kinds.values()), **dict(sorted(kinds.items()))}


def object_types(objects: Iterable[object], top: int = 30) -> tuple[int, dict[str, int]]:
    """How many ``objects`` there are, and the ``top`` most common types among them (module-qualified names)."""
    kinds: Counter[str] = Counter()
    for obj in objects:
        kind = type(obj)
        kinds[f"{kind.__module__}.{kind.__qualname__}"] += 1
    return sum(kinds.values()), dict(kinds.most_common(top))


def traced_memory(top: int = 200) -> dict[str, Any]:
    """What tracemalloc sees now (the module doc's ``memory``): the memory traced, its peak, and the ``top``
    source lines holding the most, file names relative to the interpreter's paths where under one."""
    if not tracemalloc.is_tracing():
        return {"traced_mb": None, "why": "not tracing: start the process with PYTHONTRACEMALLOC=1"}
    snapshot = tracemalloc.take_snapshot().filter_traces(
        (
            tracemalloc.Filter(False, tracemalloc.__file__),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
        )
    )
    current, peak = tracemalloc.get_traced_memory()
    roots = sorted({p for p in sys.path if p}, key=len, reverse=True)
    by_line: dict[str, list[float]] = {}
    for stat in snapshot.statistics("lineno")[:top]:
        frame = stat.traceback[0]
        name = next((frame.filename[len(r) + 1 :] for r in roots if frame.filename.startswith(r + "/")), None)
        by_line[f"{name or frame.filename}:{frame.lineno}"] = [round(stat.size / 1024, 1), stat.count]
    return {
        "traced_mb": round(current / 2**20, 2),
        "traced_peak_mb": round(peak / 2**20, 2),
        "traced_by_line": by_line,
    }


def runtime_report(
    view: RuntimeView,
    *,
    status_path: str = "/proc/self/status",
    objects: bool = False,
    memory: bool = False,
) -> dict[str, Any]:
    """The ``runtime`` answer (see the module doc); with ``objects``, the heap's objects by type; with
    ``memory``, the allocations tracemalloc traces by source line."""
    try:
        with open(status_path, encoding="ascii", errors="replace") as f:
            status = proc_status(f.read())
    except OSError:
        status = proc_status("")
    names = task_names()
    return {
        "pid": os.getpid(),
        **status,
        "fds": open_fds(),
        "tasks": sum(names.values()),
        "tasks_by_name": dict(names.most_common()),
        "apns": view.apns_connections(),
        "backlogs": view.backlogs(),
        **(_objects() if objects else {}),
        **(traced_memory() if memory else {}),
    }


def _objects() -> dict[str, Any]:
    total, by_type = object_types(gc.get_objects())
    return {"objects": total, "objects_by_type": by_type}


def runtime_handlers(view: RuntimeView) -> dict[str, Handler]:
    """The ``runtime`` command over ``view``."""

    async def runtime(args: list[str]) -> Any:
        """Memory, descriptors, threads, trio tasks, APNs connections and queue backlogs of this process; with
        ``objects``, the heap's objects by type too; with ``memory``, the allocations traced by source line
        (the process started with PYTHONTRACEMALLOC=1)."""
        given = expect_args("runtime", args, optional=("objects", "memory"))
        if len(given) > 1 or not set(given) <= {"objects", "memory"}:
            raise AdminError("usage: runtime [objects | memory]")
        return runtime_report(view, objects="objects" in given, memory="memory" in given)

    return {"runtime": runtime}
