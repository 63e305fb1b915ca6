"""The fan-out CPU benchmark runs end to end and prints its one-line JSON result (figures are not asserted):
a real match actor's balls through the sender to nginx, every push accepted, and the stage breakdown when
profiled."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.slow,  # a benchmark run end to end
    pytest.mark.skipif(
        shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists(), reason="nginx absent"
    ),
]

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "fanout_cpu.py"


def run_bench(*args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(BENCH), *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_every_push_of_every_ball_is_accepted_and_its_cpu_counted() -> None:
    result = run_bench("--tokens", "300", "--balls", "2")
    assert result["balls_measured"] == 2 and result["pushes"] == 600
    assert result["every_token_once_per_ball"] and result["failed_or_rejected"] == 0
    assert result["cpu_us_per_push"] > 0 and len(result["cpu_us_per_push_by_ball"]) == 2
    assert result["code"]["modules_from_this_checkout"]


def test_against_the_recording_nginx_each_token_is_recorded_once_per_ball() -> None:
    result = run_bench("--tokens", "200", "--balls", "2", "--record")
    assert result["peer"] == "nginx recording every push"
    assert result["every_token_once_per_ball"] and result["apns_requests_accepted"] == 600  # with the warm-up


def test_the_profile_shares_the_cpu_out_among_the_stages() -> None:
    result = run_bench("--tokens", "200", "--balls", "1", "--profile")
    shares = result["profile"]["share"]
    assert abs(sum(shares.values()) - 1.0) < 0.01
    assert (
        shares["HPACK and request framing"] > 0 and shares["response parsing (frames, HPACK, h2 state)"] > 0
    )


def test_a_hot_matchs_balls_go_through_its_shards_and_reach_each_token_once() -> None:
    """``--shared``: the owner publishes each ball and delivers every shard itself; nginx records each token
    once per ball, and the last tick's shards account for every push."""
    result = run_bench("--tokens", "300", "--balls", "2", "--record", "--shared")
    assert result["shared"] and result["every_token_once_per_ball"]
    last = result["share_last"]["tick"]
    assert last["shards"] >= 1 and last["pushes"] == 300 and last["accepted"] == 300
