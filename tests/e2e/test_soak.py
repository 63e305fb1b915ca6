"""The short soak: a few matches, a few thousand tokens, several instances, one kill -9 or more.

It runs ``bench/soak.py`` exactly as an operator would and reads its last line. The long soak (20 matches,
200,000 tokens, kills every 60 s) is run by hand; its figures are in docs/performance.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(1000)
def test_short_soak_with_kills_loses_nothing_and_shows_no_alert_twice() -> None:
    # The run's directory (each daemon's log) is kept, to be read when the test fails, and removed when it
    # passes. Not under pytest's tmp_path: the daemons' admin sockets live in it, and a Unix socket's path
    # takes at most 107 bytes.
    keep = Path(tempfile.mkdtemp(prefix="soak-"))
    proc = subprocess.run(
        [
            sys.executable,
            str(PROJECT_ROOT / "bench" / "soak.py"),
            "--matches",
            "2",
            "--tokens",
            "2000",
            "--instances",
            "2",
            "--speed",
            "300",
            "--kill-every",
            "30",
            "--cadence",
            "0.5",
            "--lease",
            "5",
            "--duration",
            "600",  # both matches end in about 100 s on a quiet machine; the rest is room for a loaded one
            "--keep-workdir",
        ],
        cwd=PROJECT_ROOT,
        env={**os.environ, "TMPDIR": str(keep)},
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert proc.returncode == 0, (f"logs in {keep}", proc.stderr[-3000:])
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    where = f"logs in {keep}"
    assert result["matches_ended"] == 2, (where, result)
    assert result["kills"] >= 1, (where, result)
    assert result["expected_deliveries"] > 0
    assert result["lost"] == 0, (where, result["lost_events"], result["lost_by_path"])
    assert result["duplicate_alerts"] == 0, (where, result)
    assert result["key_events_delivered_to_every_token"] == result["key_events_in_tapes"]
    shutil.rmtree(keep, ignore_errors=True)  # passed: nothing to read
