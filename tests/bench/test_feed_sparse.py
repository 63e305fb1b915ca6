"""The sparse-answer benchmark runs end to end and prints its one-line JSON result (figures are not asserted,
only that a sparse answer is the smaller)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a benchmark run end to end

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "feed_sparse.py"


@pytest.mark.parametrize("endpoint", ["livescores", "fixtures"])
def test_the_sparse_answer_benchmark_runs_and_reports_both_shapes(endpoint: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--matches", "2", "--polls", "2", "--endpoint", endpoint],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["whole"]["matches"] == result["sparse"]["matches"] == 2
    assert result["sparse"]["bytes_per_poll"] < result["whole"]["bytes_per_poll"]
    assert set(result["sparse"]["cpu_ms_per_poll"]) == {
        "call_decode_check_every_fixture",
        "call_decode_check_unchanged_skipped",
        "order_marks",
        "snapshots",
    }


def test_bad_arguments_are_refused() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--matches", "0"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "--matches" in proc.stderr
