"""The throughput benchmark runs end to end and prints its one-line JSON result (figures are not asserted)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # a benchmark run end to end

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "apns_throughput.py"
FIELDS = {"pushes", "seconds", "pushes_per_s", "p50_ms", "p99_ms", "failed"}


def run_bench(*args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(BENCH), *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    result = json.loads(last)
    assert FIELDS <= result.keys()
    return result


def test_bench_against_the_project_apns_server_delivers_every_push() -> None:
    result = run_bench("--spawn-server", "apns", "-n", "300", "--connections", "2")
    assert result["pushes"] == 300 and result["failed"] == 0
    assert result["client"] == "sightscreen" and result["connections"] == 2
    assert result["seconds"] > 0 and result["p50_ms"] <= result["p99_ms"]


@pytest.mark.skipif(
    importlib.util.find_spec("aioapns") is None, reason="aioapns (optional bench dependency) absent"
)
def test_bench_drives_aioapns_through_the_same_server() -> None:
    result = run_bench("--spawn-server", "apns", "-n", "100", "--client", "aioapns")
    assert result["client"] == "aioapns" and result["pushes"] == 100 and result["failed"] == 0


@pytest.mark.skipif(
    importlib.util.find_spec("aioapns") is None, reason="aioapns (optional bench dependency) absent"
)
def test_bench_compare_runs_both_clients_and_reports_the_ratio() -> None:
    result = run_bench("--spawn-server", "apns", "-n", "100", "--compare")
    assert result["client"] == "sightscreen" and result["failed"] == 0
    assert isinstance(result["vs_aioapns"], float) and result["vs_aioapns"] > 0


@pytest.mark.skipif(
    shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists(), reason="nginx absent"
)
def test_bench_works_against_any_http2_server_that_answers_200() -> None:
    result = run_bench("--spawn-server", "nginx", "-n", "300")
    assert result["pushes"] == 300 and result["failed"] == 0


def test_bench_without_a_server_says_what_to_give() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "-n", "1"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "--url or --spawn-server" in proc.stderr


@pytest.mark.skipif(
    shutil.which("h2load") is None
    or (shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists()),
    reason="h2load (nghttp2-client) or nginx absent",
)
def test_bench_runs_h2load_with_the_same_request_on_the_same_nginx() -> None:
    result = run_bench("--spawn-server", "nginx", "-n", "300", "--h2load")
    assert result["failed"] == 0 and result["vs_h2load"] > 0
    assert result["h2load_cpu_us_per_request"] > 0 and result["client_cpu_us_per_push"] > 0


def test_bench_hands_pushes_over_as_the_fan_out_does() -> None:
    # 2,500: more than two send_many batches, the last one short
    result = run_bench("--spawn-server", "apns", "-n", "2500", "--hand-over", "many")
    assert result["pushes"] == 2500 and result["failed"] == 0
