"""The ``runtime`` admin command (``daemon/runtime/admin/runtime.py``): the process's memory, descriptors,
threads and trio tasks as they are at the moment of asking, so a task or a socket left behind shows."""

from __future__ import annotations

import os
import socket
import tracemalloc
from typing import Any

import trio

from daemon.runtime.admin.protocol import AdminError
from daemon.runtime.admin.runtime import (
    fd_kind,
    object_types,
    open_fds,
    proc_status,
    runtime_handlers,
    task_names,
)


class View:
    def apns_connections(self) -> dict[str, int] | None:
        return {"push": 1, "broadcast": 1}

    def backlogs(self) -> dict[str, int]:
        return {"janitor_inbox": 0}


def test_the_status_file_gives_memory_in_mb_and_threads() -> None:
    text = "Name:\tpython\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t7\n"
    assert proc_status(text) == {"rss_mb": 100.0, "peak_rss_mb": 200.0, "threads": 7}
    assert proc_status("") == {"rss_mb": None, "peak_rss_mb": None, "threads": None}


def test_descriptors_are_counted_by_what_they_point_at() -> None:
    assert fd_kind("socket:[1234]") == "socket"
    assert fd_kind("pipe:[99]") == "pipe"
    assert fd_kind("anon_inode:[eventpoll]") == "anon_inode"
    assert fd_kind("/var/log/x.log") == "file"
    assert fd_kind("net:[4026531840]") == "other"


def test_a_socket_opened_and_closed_shows_in_the_count_and_leaves_it() -> None:
    before = open_fds()
    assert before is not None, "this test runs on Linux, where /proc exists"
    sock = socket.socket()
    try:
        during = open_fds()
        assert during is not None
        assert during["socket"] == before.get("socket", 0) + 1
        assert during["total"] == before["total"] + 1
    finally:
        sock.close()
    assert open_fds() == before
    assert open_fds("/no/such/proc") is None


async def test_tasks_are_walked_through_every_nursery_and_counted_by_name() -> None:
    async def parked() -> None:
        await trio.sleep_forever()

    async def parent(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as inner:
            for _ in range(3):
                inner.start_soon(parked)
            task_status.started()

    before = task_names()
    async with trio.open_nursery() as nursery:
        await nursery.start(parent)
        during = task_names()
        nursery.cancel_scope.cancel()
    grown = during - before
    assert sum(1 for name in grown.elements() if name.endswith("parked")) == 3  # two nurseries down
    assert sum(1 for name in grown.elements() if name.endswith("parent")) == 1
    assert task_names() == before  # gone once their nursery closed


def grow() -> list[str]:
    return [str(i).zfill(200) for i in range(100_000)]  # the line GROW_LINE names


GROW_LINE = grow.__code__.co_firstlineno + 1


async def test_runtime_objects_counts_the_heap_by_type_only_when_asked() -> None:
    runtime = runtime_handlers(View())["runtime"]
    assert "objects" not in await runtime([])
    kept = [View() for _ in range(200_000)]  # more than any other type: it leads the list
    answer = await runtime(["objects"])
    assert answer["objects"] >= sum(answer["objects_by_type"].values())
    assert answer["objects_by_type"][f"{View.__module__}.{View.__qualname__}"] >= len(kept)
    assert object_types([1, 2, "a"], top=1) == (3, {"builtins.int": 2})
    for wrong in (["everything"], ["objects", "memory"], ["memory", "memory"]):
        try:
            await runtime(wrong)
        except AdminError as exc:
            assert "usage: runtime [objects | memory]" in str(exc)
        else:
            raise AssertionError(f"runtime took {wrong}")


async def test_runtime_memory_names_the_lines_holding_memory_when_tracing_and_says_how_when_not() -> None:
    runtime = runtime_handlers(View())["runtime"]
    assert not tracemalloc.is_tracing()
    untraced = await runtime(["memory"])
    assert untraced["traced_mb"] is None and "PYTHONTRACEMALLOC=1" in untraced["why"]
    tracemalloc.start()
    try:
        kept = grow()  # 20 MB of strings: not tracked by the collector, seen here
        answer = await runtime(["memory"])
    finally:
        tracemalloc.stop()
    assert answer["traced_mb"] >= 20 and answer["traced_peak_mb"] >= answer["traced_mb"]
    line, (kib, blocks) = next(iter(answer["traced_by_line"].items()))
    assert line.endswith(f"runtime/test_admin_runtime.py:{GROW_LINE}"), f"the line holding the most: {line}"
    assert not line.startswith("/"), "a file under the interpreter's paths is named relative to it"
    assert kib >= 20 * 1024 and blocks >= len(kept)


async def test_the_runtime_command_answers_with_every_figure_and_refuses_arguments() -> None:
    runtime = runtime_handlers(View())["runtime"]
    answer = await runtime([])
    assert answer["pid"] == os.getpid()
    assert answer["rss_mb"] > 0 and answer["threads"] >= 1
    assert answer["fds"]["total"] >= 3
    assert answer["tasks"] == sum(answer["tasks_by_name"].values()) >= 1
    assert answer["apns"] == {"push": 1, "broadcast": 1}
    assert answer["backlogs"] == {"janitor_inbox": 0}
    try:
        await runtime(["now", "later"])
    except AdminError as exc:
        assert "usage: runtime" in str(exc)
    else:
        raise AssertionError("runtime took an argument")
