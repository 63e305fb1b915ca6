"""The page-decoding benchmark runs and prints its one JSON line (its figures are not asserted; it exits
non-zero if the hook's items differ from botocore's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a benchmark run end to end

ROOT = Path(__file__).resolve().parents[2]


def test_the_page_decoding_bench_prints_both_figures() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "dynamodb_pages.py"), "--items", "300", "--rounds", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["items_per_page"] == 300
    assert result["botocore_ms"] > 0 and result["hook_ms"] > 0 and result["ratio"] > 0
