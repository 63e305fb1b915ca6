"""``sightscreen ctl watch``: the screen is a pure function of two samples, tested here without I/O; the loop
is checked against a socket nobody serves (plain lines vs ANSI clear). The run against a live daemon is in
tests/deploy/test_live_observability.py."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from daemon.commands import ctl
from daemon.commands.watch import CLEAR, Sample, push_rates, render, run

NOW = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC


def _sample(at: float, *, accepted: int, rejected: int = 0, failed: int = 0, **over: Any) -> Sample:
    values: dict[str, Any] = dict(
        status={
            "instance_id": "i-1",
            "owner": "i-1#a1b2c3",
            "version": "1.2.3",
            "uptime_s": 3725.0,
            "draining": False,
        },
        matches=[
            {
                "match_id": "71344",
                "owner": "i-1#a1b2c3",
                "epoch": 3,
                "phase": "innings2",
                "status": "active",
                "last_tick_at": "2027-01-15T07:59:58Z",
                "lag_s": 0.4321,
                "tokens": 12000,
                "ticks": 99,
            },
            {
                "match_id": "70001",
                "owner": "i-1#99ffee",
                "epoch": 1,
                "phase": "innings1",
                "status": "active",
                "last_tick_at": "2027-01-15T07:59:59Z",
            },
        ],
        apns={
            "connections": 2,
            "streams_in_flight": 7,
            "latency_ms": {"p50": 3.1, "p99": 9.8},
            "pushes": {"accepted": accepted, "rejected": rejected, "failed": failed},
        },
        feed={
            "breaker": "closed",
            "budget": {
                "livescores": {"limit": 2000, "used": 1500, "remaining": 500, "delayed": 0, "skipped": 0},
                "fixtures": {"limit": 2000, "used": 2000, "remaining": 0, "delayed": 3, "skipped": 7},
            },
        },
    )
    values.update(over)
    return Sample(at, **values)


def test_the_screen_lists_only_owned_matches_with_phase_last_tick_lag_and_tokens() -> None:
    screen = render(_sample(10.0, accepted=5), None, now=NOW)
    assert "i-1" in screen and "v1.2.3" in screen and "up 1h02m" in screen
    assert "Owned matches: 1" in screen
    row = next(line for line in screen.splitlines() if "71344" in line)
    assert "innings2" in row and "2s ago" in row and "0.43s" in row and "12,000" in row
    assert "70001" not in screen, "a match another instance owns is not listed as ours"
    assert "+1 active match(es) owned elsewhere" in screen
    assert "2027-01-15 08:00:00 UTC" in screen


def test_pushes_per_second_come_from_the_difference_between_two_refreshes() -> None:
    first = _sample(10.0, accepted=100, rejected=2, failed=0)
    second = _sample(12.0, accepted=160, rejected=6, failed=1)
    assert push_rates(second, first) == {"accepted": 30.0, "rejected": 2.0, "failed": 0.5}
    assert "Pushes/s: accepted 30.0  rejected 2.0  failed 0.5" in render(second, first, now=NOW)
    assert "measuring" in render(first, None, now=NOW), "one sample cannot give a rate"
    restarted = _sample(14.0, accepted=3)
    assert push_rates(restarted, second) == {"accepted": 0.0, "rejected": 0.0, "failed": 0.0}


def test_the_budget_left_is_shown_per_endpoint_with_its_share_and_skips() -> None:
    screen = render(_sample(1.0, accepted=0), None, now=NOW)
    livescores = next(line for line in screen.splitlines() if "livescores" in line)
    assert "500" in livescores and "2,000" in livescores and "25%" in livescores
    fixtures = next(line for line in screen.splitlines() if "fixtures" in line)
    assert "0%" in fixtures and "7 skipped" in fixtures
    assert "breaker closed" in screen and "frozen" not in screen
    opened = _sample(1.0, accepted=0, feed={"breaker": "open", "budget": {}})
    assert "breaker open  <- scores frozen" in render(opened, None, now=NOW)


def test_a_daemon_that_does_not_answer_is_said_so_and_long_lines_are_cut() -> None:
    screen = render(Sample(1.0, error="no admin socket at /x"), None, now=NOW)
    assert "daemon not answering: no admin socket at /x" in screen
    narrow = render(_sample(1.0, accepted=0), None, now=NOW, width=30)
    assert all(len(line) <= 30 for line in narrow.splitlines())


def test_the_loop_prints_plain_frames_off_a_terminal_and_clears_the_screen_on_one(tmp_path: Path) -> None:
    missing = str(tmp_path / "nobody.sock")
    plain = io.StringIO()
    assert run(missing, interval_s=0.01, count=2, out=plain, tty=False) == ctl.EXIT_UNREACHABLE
    assert "\x1b" not in plain.getvalue()
    assert plain.getvalue().count("daemon not answering") == 2
    screen = io.StringIO()
    run(missing, interval_s=0.01, count=1, out=screen, tty=True)
    assert screen.getvalue().startswith(CLEAR)


def test_ctl_watch_refuses_a_bad_count(capsys: Any) -> None:
    try:
        ctl.main(["--socket", "/nonexistent.sock", "watch", "--count", "0"])
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError("--count 0 was accepted")
    assert "--count must be >= 1" in capsys.readouterr().err
