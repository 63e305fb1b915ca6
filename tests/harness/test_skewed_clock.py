"""The skewed wall clock the region rig gives an engine (``tests/harness/skewed_clock``): ``time.time`` runs
ahead or behind by the file's offset, changed while the process runs; the monotonic clock does not move."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.harness.region import SKEWED_CLOCK
from tests.harness.skewed_clock.sitecustomize import read_offset

PROBE = """
import time
wall, mono = time.time(), time.monotonic()
print(round(wall - REAL(), 1), flush=True)
input()
time.sleep(1.1)
print(round(time.time() - REAL(), 1), round(time.time_ns() / 1e9 - REAL(), 1), flush=True)
"""


def test_a_clock_file_reads_as_seconds_ahead_or_behind() -> None:
    assert read_offset("+3.000s\n") == 3.0
    assert read_offset("-2.5s") == -2.5
    assert read_offset("") == 0.0


def test_an_engines_wall_clock_follows_its_clock_file_and_sleep_still_works(tmp_path: Path) -> None:
    clock = tmp_path / "clock"
    clock.write_text("+3.000s\n")
    # the real wall clock, read beside the skewed one: the clock_gettime behind time.time, not time.time
    probe = PROBE.replace("REAL()", "__import__('datetime').datetime.now().timestamp()")
    env = dict(
        os.environ,
        PYTHONPATH=str(SKEWED_CLOCK),
        SIGHTSCREEN_CLOCK_OFFSET_FILE=str(clock),
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", probe], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert float(proc.stdout.readline()) == 3.0
    clock.write_text("-2.000s\n")  # read again within a second
    proc.stdin.write("\n")
    proc.stdin.flush()
    out, _ = proc.communicate(timeout=30)
    assert [float(x) for x in out.split()] == [-2.0, -2.0]
    assert proc.returncode == 0
