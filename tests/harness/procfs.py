"""A process's figures read from Linux's ``/proc``, for the benchmarks and the harness: its parent, its CPU
seconds. Each reader answers None for a process that is gone (or a system without ``/proc``)."""

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
    """Every process as (pid, parent pid)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(entry)
            if fields is not None:
                yield int(entry), int(fields[1])


def cpu_s(pid: int) -> float | None:
    """User and system CPU seconds the process has used; None when it is gone."""
    fields = stat_fields(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK
