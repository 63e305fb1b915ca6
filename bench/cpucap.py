"""A CPU budget per process for benchmarks: a cgroup with a CFS quota, as a container runtime gives a task.

In production each engine is its own task with its own vCPUs (ECS/Fargate enforce a task's CPU with the same
CFS quota), and APNs is Apple's fleet, not a process beside it. On one benchmark machine the engines, the APNs
stand-in and the DynamoDB stand-in all share the same cores, so what a run measures can be the stand-ins'
ceiling rather than the engines'. ``CpuCap(cores)`` holds processes to ``cores`` CPUs each cap, so the
engines run within a budget of their own, as they would on separate tasks.

Needs a writable cpu controller: cgroup v2 (``cpu.max`` under ``/sys/fs/cgroup``, with ``cpu`` in its
``cgroup.controllers``) or v1 (``cpu.cfs_quota_us`` under ``/sys/fs/cgroup/cpu``), usually as root. Raises
``CpuCapUnavailable`` saying which was looked for when there is neither.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

V2_ROOT = Path("/sys/fs/cgroup")
V1_ROOT = Path("/sys/fs/cgroup/cpu")
PERIOD_US = 100_000


class CpuCapUnavailable(RuntimeError):
    """No writable cgroup cpu controller on this machine."""


def quota_us(cores: float, period_us: int = PERIOD_US) -> int:
    """The CFS quota of ``cores`` CPUs per ``period_us`` (at least the kernel's 1 ms floor)."""
    if cores <= 0:
        raise ValueError(f"a CPU cap must be above 0 cores, not {cores}")
    return max(1000, int(round(cores * period_us)))


def _controller() -> tuple[str, Path]:
    controllers = V2_ROOT / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split() and os.access(V2_ROOT, os.W_OK):
        return "v2", V2_ROOT
    if (V1_ROOT / "cpu.cfs_quota_us").exists() and os.access(V1_ROOT, os.W_OK):
        return "v1", V1_ROOT
    raise CpuCapUnavailable(
        f"no writable cgroup cpu controller: neither cgroup v2 with 'cpu' in {controllers} nor v1 at "
        f"{V1_ROOT} (a CPU cap needs root, or a delegated cgroup)"
    )


class CpuCap:
    """A cgroup holding its processes to ``cores`` CPUs (together): ``add(pid)``, then ``remove()`` once they
    have exited."""

    def __init__(self, cores: float, name: str) -> None:
        self.cores = cores
        self.version, root = _controller()
        self.path = root / name
        self.path.mkdir(exist_ok=True)
        quota = quota_us(cores)
        if self.version == "v2":
            (self.path / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        else:
            (self.path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (self.path / "cpu.cfs_quota_us").write_text(str(quota))

    def add(self, pid: int) -> None:
        """Move a process (every thread of it) into the cgroup; its later threads and children follow."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def holds(self, pid: int) -> bool:
        return str(pid) in (self.path / "cgroup.procs").read_text().split()

    def remove(self, timeout: float = 10.0) -> None:
        """Remove the cgroup once its processes are gone (the kernel refuses while one is in it)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
