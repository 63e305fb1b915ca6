"""A short season through ``bench/season.py`` as it runs on the command line: matches in a row on the same
engines, the nemesis's faults among them, and the season's own judgement (what it prints as its last line).
The full season (30 matches, 6 at once, 2 engines) is a benchmark: docs/performance.md has its figures."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.tools import nginx

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _season(*args: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "season.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.skipif(nginx() is None, reason="nginx (nginx-light) is not installed and cannot be")
@pytest.mark.skipif(shutil.which("node") is None, reason="dynalite needs Node.js (node >= 20 and npm)")
def test_a_short_season_with_the_nemesis_loses_nothing_and_leaves_nothing_behind() -> None:
    # seed 1's first faults: a GOAWAY, an APNs blackhole and a DynamoDB cut on engine 0, dead connections
    result = _season(
        "--matches",
        "3",
        "--concurrent",
        "2",
        "--instances",
        "2",
        "--nemesis",
        "1",
        "--idle-s",
        "15",
        "--speed",
        "400",
    )
    criteria = result["criteria"]
    assert isinstance(criteria, dict)
    # three matches are too few for the RSS criterion (its warm-up is the 5th match): every other holds
    assert {k: v for k, v in criteria.items() if not v} == {"rss_growth_after_warmup_within_10pct": False}
    assert result["finished"] == 3 and result["lost"] == 0 and result["duplicate_alerts"] == 0
    faults = result["faults"]
    assert isinstance(faults, list) and faults, "the nemesis did nothing"
    assert all(f["outcome"] == "ok" for f in faults), faults
