from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from daemon.cli import main as sightscreen
from daemon.replay.synth import synthesise
from daemon.replay.tape import save_tape


@pytest.fixture(scope="module")
def tape_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tapes") / "t10.json.gz"
    save_tape(synthesise("T10", 7), path)
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict[str, object]]]:
    code = sightscreen(["events", *args])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return code, lines


def test_events_prints_one_line_per_pushed_event_then_the_counts(
    capsys: pytest.CaptureFixture[str], tape_file: Path
) -> None:
    code, lines = run(capsys, str(tape_file), "--cadence", "10", "--marquee")
    assert code == 0
    *events, summary = lines
    assert summary["counts"] == dict(Counter(e["type"] for e in events))
    assert summary["polls"] > len(events) > 0
    assert {"ball", "over", "type", "subject", "priority", "alert", "text"} == set(events[0])
    assert events[-1]["type"] == "match_end" and events[-1]["priority"] == 1
    wicket = next(e for e in events if e["type"] == "wicket")
    assert wicket["alert"] and wicket["ball"] is not None  # alert-worthy, and tied to its ball
    assert any(e["type"] in ("four", "six") for e in events)


def test_without_marquee_only_score_events_are_printed(
    capsys: pytest.CaptureFixture[str], tape_file: Path
) -> None:
    code, lines = run(capsys, str(tape_file), "--cadence", "5")
    assert code == 0
    kinds = set(lines[-1]["counts"])  # type: ignore[arg-type]
    assert kinds and not kinds & {"four", "six", "maiden", "hattrick", "on_hattrick", "consecutive_sixes"}
    assert all(e["ball"] is None for e in lines[:-1])


def test_the_same_wickets_are_reported_at_any_cadence(
    capsys: pytest.CaptureFixture[str], tape_file: Path
) -> None:
    subjects = []
    for cadence in ("2.5", "60", "600"):
        _, lines = run(capsys, str(tape_file), "--cadence", cadence, "--marquee")
        subjects.append(sorted(e["subject"] for e in lines[:-1] if e["type"] == "wicket"))
    assert subjects[0] == subjects[1] == subjects[2]


def test_a_missing_tape_is_a_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert sightscreen(["events", str(tmp_path / "nope.json")]) == 2
    assert "nope.json" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sightscreen(["events", str(tmp_path / "nope.json"), "--cadence", "0"])
