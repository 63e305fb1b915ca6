"""kill -9 of a match's owner while the match has broadcast channels: the short soak with most followers on
iOS 18 (started on channels by the daemons) and an instance killed every few seconds. No channel is created
twice for a perspective, none is left behind at the end, and no key event is lost on either path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.harness.tools import nginx_installed  # noqa: F401 - a fixture

PROJECT_ROOT = Path(__file__).resolve().parents[2]


# one match of 40 followers, 30 of them on iOS 18, at 600x with two instances
SHORT = ("--matches", "1", "--tokens", "40", "--instances", "2", "--speed", "600", "--cadence", "0.5")
SHORT_TAIL = ("--lease", "3", "--duration", "200", "--session-refresh", "2", "--ios18-share", "0.75")


def _soak(*args: str) -> dict[str, Any]:
    """The soak benchmark's JSON result for the short run with ``args`` added."""
    proc = subprocess.run(
        [
            sys.executable,
            str(PROJECT_ROOT / "bench" / "soak.py"),
            *SHORT,
            *SHORT_TAIL,
            "--drain",
            "20",
            *args,
        ],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=500,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_owner_killed_mid_match_with_channels_creates_none_twice_leaks_none_loses_nothing() -> None:
    result = _soak("--kill-every", "8")
    assert result["matches_ended"] == 1 and result["kills"] >= 1, result
    assert result["channel_phones_started"] == result["channel_phones"] == 30, result
    assert result["broadcasts"] > 0, result
    channels = result["channels"]
    assert channels["created"] == 3, result  # neutral and both teams, once, whoever owned the match
    assert channels["open_at_end"] == 0 and channels["deleted"] == 3, result
    assert result["expected_deliveries"] > 0 and result["lost"] == 0, result
    assert result["duplicate_alerts"] == 0, result


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("nginx_installed")
def test_with_nginx_for_the_per_token_pushes_the_channel_phones_start_from_its_record_and_get_everything() -> (
    None
):
    """The target soak's peers: per-token pushes (push-to-starts included) to nginx, channel management and
    broadcasts to the project's server beside it; the harness starts the iOS 18 phones from nginx's record."""
    result = _soak("--kill-every", "0", "--apns", "nginx")
    assert result["matches_ended"] == 1, result
    assert result["channel_phones_started"] == result["channel_phones"] == 30, result
    assert result["ios18_phones_started_twice"] == 0, result
    assert result["broadcasts"] > 0 and result["channels"]["created"] == result["channels"]["deleted"] == 3
    assert result["expected_deliveries"] > 0 and result["lost"] == 0, result
    assert result["duplicate_alerts"] == 0, result
