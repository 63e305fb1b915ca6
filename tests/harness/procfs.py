"""A process's figures read from Linux's ``/proc``, for the benchmarks and the harness: its parent and
children, its command line, its CPU seconds (alone or with its children), its peak RSS. Each reader answers
None (or nothing) for a process that is gone, or on a system without ``/proc``."""

from __future__ import annotations

import os
from collections.abc import Iterator

CLK_TCK = os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int | str) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name (which may hold spaces): state, ppid, ...; None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def processes() -> Iterator[tuple[int, int]]:
    """Every process but the zombies (exited, not yet reaped) as (pid, parent pid)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if entry.isdigit():
            fields = stat_fields(entry)
            if fields is not None and fields[0] != "Z":
                yield int(entry), int(fields[1])


def children(pid: int) -> list[int]:
    """The running children of ``pid``."""
    return [child for child, parent in processes() if parent == pid]


def cmdline(pid: int) -> list[bytes] | None:
    """The process's argv; None when it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[:-1]
    except OSError:
        return None


def cpu_s(pid: int) -> float | None:
    """User and system CPU seconds the process has used; None when it is gone."""
    fields = stat_fields(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def tree_cpu_s(pid: int) -> float | None:
    """CPU seconds of the process and its running children (nginx's or dynalite's work is done by theirs);
    None when the process is gone."""
    own = cpu_s(pid)
    if own is None:
        return None
    return own + sum(cpu_s(child) or 0.0 for child in children(pid))


def peak_rss_bytes(pid: int) -> int | None:
    """The process's peak resident set (``VmHWM``) in bytes; None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None
