"""A CPU budget per process for benchmarks: a cgroup with a CFS quota, as a container runtime gives a task.

In production each engine is its own task with its own vCPUs (ECS/Fargate enforce a task's CPU with the same
CFS quota), and APNs is Apple's fleet, not a process beside it. On one benchmark machine the engines, the APNs
stand-in and the DynamoDB stand-in all share the same cores, so what a run measures can be the stand-ins'
ceiling rather than the engines'. A ``CpuCap(cores, name)`` holds the processes added to it to ``cores``
CPUs together; one per engine, and the engines run within budgets of their own, as on separate tasks.

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


def controller(v2_root: Path = V2_ROOT, v1_root: Path = V1_ROOT) -> tuple[str, Path]:
    """Which cgroup cpu controller this machine lets us write ("v2" or "v1") and its root."""
    controllers = v2_root / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split() and os.access(v2_root, os.W_OK):
        return "v2", v2_root
    if (v1_root / "cpu.cfs_quota_us").exists() and os.access(v1_root, os.W_OK):
        return "v1", v1_root
    raise CpuCapUnavailable(
        f"no writable cgroup cpu controller: neither cgroup v2 with 'cpu' in {controllers} nor v1 at "
        f"{v1_root} (a CPU cap needs root, or a delegated cgroup)"
    )


class CpuCap:
    """A cgroup holding its processes to ``cores`` CPUs (together): ``add(pid)``, then ``remove()`` once they
    have exited."""

    def __init__(self, cores: float, name: str) -> None:
        self.cores = cores
        self.version, root = controller()
        self.path = root / name
        self.path.mkdir(exist_ok=True)
        quota = quota_us(cores)
        if self.version == "v2":
            try:  # the cpu controller handed down to the root's children (a no-op when it already is)
                (root / "cgroup.subtree_control").write_text("+cpu")
                (self.path / "cpu.max").write_text(f"{quota} {PERIOD_US}")
            except OSError as exc:
                self.path.rmdir()
                raise CpuCapUnavailable(f"cgroup v2 would not give {self.path} a cpu quota: {exc}") from exc
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
