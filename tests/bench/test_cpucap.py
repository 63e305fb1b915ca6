"""The benchmarks' CPU cap: a process added to a ``CpuCap`` is in its cgroup and gets no more CPU than the
cap allows (the kernel's accounting; a loaded machine can only give it less, so the bound is one-sided)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from cpucap import CpuCap, CpuCapUnavailable, controller, quota_us  # noqa: E402

# spins for three seconds of wall clock, then prints the CPU it used
SPIN = "import time\nend = time.time() + 3\nwhile time.time() < end: pass\nprint(time.process_time())"


def test_a_quota_is_the_cores_share_of_the_period_and_never_below_the_kernels_floor() -> None:
    assert quota_us(0.5) == 50_000
    assert quota_us(2.0) == 200_000
    assert quota_us(0.001) == 1000
    with pytest.raises(ValueError, match="above 0 cores"):
        quota_us(0)


def test_a_machine_without_a_writable_cpu_controller_is_told_so(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")  # v2 without cpu, and no v1
    with pytest.raises(CpuCapUnavailable, match="no writable cgroup cpu controller"):
        controller(tmp_path, tmp_path / "cpu")
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert controller(tmp_path, tmp_path / "cpu") == ("v1", tmp_path / "cpu")
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    assert controller(tmp_path, tmp_path / "cpu") == ("v2", tmp_path)


def test_a_capped_process_gets_no_more_cpu_than_its_cap() -> None:
    try:
        cap = CpuCap(0.25, f"sightscreen-test-cap-{os.getpid()}")
    except CpuCapUnavailable as exc:
        pytest.skip(str(exc))
    spin = subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True)
    try:
        cap.add(spin.pid)
        assert cap.holds(spin.pid)
        started = time.monotonic()
        out, _ = spin.communicate(timeout=30)
        wall = time.monotonic() - started
    finally:
        spin.kill()
        spin.wait()
        cap.remove()
    used = float(out)  # its own CPU, as it counted it
    # a quarter of a core over about three seconds, plus what it used before it was moved in
    assert used <= 0.25 * wall + 0.35, f"{used:.2f} s of CPU in {wall:.2f} s under a 0.25-core cap"
