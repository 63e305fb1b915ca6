"""The recorder, run against the project's own replay server as the "real API"."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import trio

from daemon.replay.record import RecordError, diff_balls, read_token, record
from daemon.replay.server import ReplayServer
from daemon.replay.synth import synthesise
from daemon.replay.tape import Tape, load_tape

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _no_stamp(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k not in ("updated_at", "id")} for row in rows]


def _raw_ball(ball_id: int, score_id: int, **kw: Any) -> dict[str, Any]:
    return {
        "resource": "balls",
        "id": ball_id,
        "fixture_id": 1,
        "team_id": 1,
        "ball": 0.1,
        "scoreboard": "S1",
        "batsman_one_on_creeze_id": 11,
        "batsman_two_on_creeze_id": 12,
        "batsman_id": 11,
        "bowler_id": 21,
        "batsmanout_id": None,
        "catchstump_id": None,
        "runout_by_id": None,
        "score_id": score_id,
        "updated_at": "2026-01-01T10:00:00.000000Z",
        **kw,
    }


def test_diff_turns_new_changed_and_vanished_balls_into_entries() -> None:
    entries, state = diff_balls({}, [_raw_ball(2, 69), _raw_ball(1, 47)], now=NOW)
    assert [(e["op"], e["ball"]["id"]) for e in entries] == [("ball", 1), ("ball", 2)]
    entries, state = diff_balls(state, [_raw_ball(1, 53), _raw_ball(3, 82)], now=NOW)
    assert [(e["op"], e.get("ball", {}).get("id", e.get("ball_id"))) for e in entries] == [
        ("correct", 1),
        ("ball", 3),
        ("delete", 2),
    ]
    assert entries[-1]["updated_at"] == "2026-01-01T00:00:00.000000Z"  # a deletion is stamped when seen
    assert set(state) == {1, 3}


def test_diff_of_a_malformed_ball_raises_and_changes_nothing() -> None:
    state = diff_balls({}, [_raw_ball(1, 47)], now=NOW)[1]
    bad = _raw_ball(2, "four")
    with pytest.raises(ValueError, match="score_id"):
        diff_balls(state, [_raw_ball(1, 47), bad], now=NOW)
    assert set(state) == {1}


def test_token_comes_from_the_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIGHTSCREEN_SPORTMONKS_TOKEN", "from-env")
    assert read_token(None) == "from-env"
    (tmp_path / "tok").write_text("from-file\n")
    assert read_token(str(tmp_path / "tok")) == "from-file"
    with pytest.raises(RecordError, match="cannot read"):
        read_token(str(tmp_path / "missing"))


async def _serve(nursery: trio.Nursery, tape: Tape, **kw: Any) -> tuple[ReplayServer, str]:
    server = ReplayServer(
        [tape], ms_per_ball=kw.pop("ms_per_ball", 4.0), innings_break_s=0.0, api_token="tok", **kw
    )
    port = await nursery.start(server.serve)
    return server, f"http://127.0.0.1:{port}/api/v2.0"


async def test_recording_a_replayed_match_reproduces_its_scorecard_and_result(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    source = synthesise("T10", 5)
    server, base = await _serve(nursery, source)
    out = tmp_path / "rec.json"
    server.inject("5xx", endpoint="fixture", count=2)  # the recorder rides out transient errors
    with trio.fail_after(30):
        outcome = await record(source.fixture_id, out, base_url=base, token="tok", interval_s=0.01)
    assert outcome.finished and outcome.status == "Finished"
    recorded = load_tape(out)
    want = source.fixture_at(len(source))
    got = recorded.fixture_at(len(recorded))
    for key in ("runs", "batting", "bowling"):
        assert _no_stamp(got[key]) == _no_stamp(want[key])
    assert got["status"] == "Finished" and got["note"] == want["note"]
    assert got["winner_team_id"] == want["winner_team_id"]
    assert [b["id"] for b in got["balls"]] == [b["id"] for b in want["balls"]]
    assert recorded.lineups == source.lineups and recorded.toss == source.toss


async def test_recording_resumes_after_an_interruption(nursery: trio.Nursery, tmp_path: Path) -> None:
    source = synthesise("T10", 6)
    server, base = await _serve(nursery, source, ms_per_ball=10.0)
    server.seek(
        source.fixture_id, 20
    )  # held part-way, so the first recording is cut off however slow the host
    server.pause()
    out = tmp_path / "rec.json.gz"
    first = await record(source.fixture_id, out, base_url=base, token="tok", interval_s=0.05, max_polls=5)
    assert not first.finished and first.entries > 0
    partial = len(load_tape(out))
    server.play()
    with trio.fail_after(30):
        second = await record(source.fixture_id, out, base_url=base, token="tok", interval_s=0.01)
    assert second.finished and second.entries > partial
    recorded = load_tape(out)
    got = recorded.fixture_at(len(recorded))
    assert _no_stamp(got["runs"]) == _no_stamp(source.fixture_at(len(source))["runs"])


async def test_recording_captures_a_correction_and_a_deletion_made_after_serving(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    source = synthesise("T20", 9)
    server, base = await _serve(nursery, source, ms_per_ball=60_000.0)
    server.seek(source.fixture_id, 30)
    server.pause()
    out = tmp_path / "rec.json"
    await record(source.fixture_id, out, base_url=base, token="tok", interval_s=0.01, max_polls=1)
    served = server.fixture(source.fixture_id, ["balls"])["balls"]
    server.inject("correct_ball", fixture_id=source.fixture_id, ball_id=served[-1]["id"], score_id=53)
    server.inject("delete_ball", fixture_id=source.fixture_id, ball_id=served[-2]["id"])
    await record(source.fixture_id, out, base_url=base, token="tok", interval_s=0.01, max_polls=1)
    ops = [(e.op, e.target_id) for e in load_tape(out).entries[-2:]]
    assert ops == [("correct", served[-1]["id"]), ("delete", served[-2]["id"])]


async def test_bad_token_or_unknown_fixture_stops_the_recording(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    source = synthesise("T10", 7)
    server, base = await _serve(nursery, source)
    with pytest.raises(RecordError, match="401"):
        await record(source.fixture_id, tmp_path / "a.json", base_url=base, token="wrong", interval_s=0.01)
    with pytest.raises(RecordError, match="404"):
        await record("12345", tmp_path / "b.json", base_url=base, token="tok", interval_s=0.01)


async def test_resuming_into_another_fixtures_tape_is_refused(nursery: trio.Nursery, tmp_path: Path) -> None:
    source = synthesise("T10", 8)
    server, base = await _serve(nursery, source)
    out = tmp_path / "rec.json"
    await record(source.fixture_id, out, base_url=base, token="tok", interval_s=0.01, max_polls=1)
    with pytest.raises(RecordError, match="not 999"):
        await record("999", out, base_url=base, token="tok", interval_s=0.01, max_polls=1)
