"""``sightscreen tape ...`` and ``sightscreen replay serve``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from daemon import logs
from daemon.cli import main
from daemon.commands.replay import parse_start_at, start_delay_for
from daemon.replay.synth import synthesise
from daemon.replay.tape import load_tape, tape_to_json

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    # the commands configure logging onto the (captured, then closed) stderr: undo it for later tests
    yield
    logs.reset()


def test_tape_synth_writes_the_same_tape_as_the_library(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "odi.json.gz"
    assert main(["tape", "synth", "--format", "ODI", "--seed", "4", "-o", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["fixture_id"] == synthesise("ODI", 4).fixture_id and summary["status_at_end"] == "Finished"
    assert tape_to_json(load_tape(out)) == tape_to_json(synthesise("ODI", 4))


def test_tape_from_fixture_and_info(
    tmp_path: Path, real_fixture_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "71344.json"
    assert main(["tape", "from-fixture", str(real_fixture_path), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["tape", "info", str(out)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["fixture_id"] == "71344" and info["entries"] == 135 and info["status_at_end"] == "2nd Innings"
    assert main(["tape", "info", "t20-demo"]) == 0  # built-in tapes by name
    assert json.loads(capsys.readouterr().out)["status_at_end"] == "Finished"


def test_tape_commands_report_bad_input_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "x.json").write_text('{"data": {"id": 1}}')
    assert main(["tape", "from-fixture", str(tmp_path / "x.json"), "-o", str(tmp_path / "o.json")]) == 2
    assert "balls" in capsys.readouterr().err
    assert main(["tape", "info", str(tmp_path / "nope.json")]) == 2
    assert "not a built-in tape" in capsys.readouterr().err
    assert main(["replay", "serve", "--tape", str(tmp_path / "nope.json")]) == 2


def test_replay_serve_prints_its_port_as_one_json_line_and_stops_on_request(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "daemon.cli",
            "replay",
            "serve",
            "--tape",
            "t20-demo",
            "--port",
            "0",
            "--speed",
            "50",
        ],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = json.loads(proc.stdout.readline())
        info = line["replay"]
        assert info["host"] == "127.0.0.1" and info["fixtures"] == [synthesise("T20", 364).fixture_id]
        base = f"http://127.0.0.1:{info['port']}"
        assert httpx.get(f"{base}/livescores", timeout=5).status_code == 200
        assert httpx.post(f"{base}/replay/stop", timeout=5).json()["stopping"] is True
        assert proc.wait(timeout=10) == 0
        assert proc.stdout.read() == ""  # logs go to stderr; stdout is only the JSON line
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_replay_serve_starts_the_tape_at_the_time_given_on_its_command_line(tmp_path: Path) -> None:
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=14)
    stamp = start.strftime("%Y-%m-%dT%H:%M:%SZ")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "daemon.cli",
            "replay",
            "serve",
            "--tape",
            "t20-demo",
            "--port",
            "0",
            "--start-at",
            stamp,
        ],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())["replay"]
        base = f"http://127.0.0.1:{info['port']}"
        fixture_id = info["fixtures"][0]
        fixture = httpx.get(f"{base}/fixtures/{fixture_id}", timeout=5).json()["data"]
        assert fixture["starting_at"].startswith(start.strftime("%Y-%m-%dT%H:%M:%S"))
        assert fixture["status"] == "NS"  # not started: the first ball is 14 minutes away
        status = httpx.get(f"{base}/replay/status", timeout=5).json()
        served = status["fixtures"][0] if isinstance(status.get("fixtures"), list) else status
        assert stamp[:16] in json.dumps(served)  # the server's own view of when it starts
        assert httpx.post(f"{base}/replay/stop", timeout=5).json()["stopping"] is True
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_start_at_is_parsed_strictly_and_turned_into_the_servers_start_delay() -> None:
    when = parse_start_at("2026-12-04T00:15:00Z")
    assert when == datetime(2026, 12, 4, 0, 15, tzinfo=UTC)
    assert parse_start_at("2026-12-04T00:15:00") == when  # no offset means UTC
    assert start_delay_for(when, when.timestamp() - 60, speed=10) == 600.0  # match seconds
    assert start_delay_for(when, when.timestamp() + 5, speed=1) == 0.0
    with pytest.raises(ValueError, match="--start-at"):
        parse_start_at("tomorrow")
    assert main(["replay", "serve", "--tape", "t20-demo", "--start-at", "tomorrow"]) == 2
