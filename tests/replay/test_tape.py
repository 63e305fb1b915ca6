"""The tape format and the snapshot rebuild, checked against the real 71344 payload (the oracle)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from daemon.replay.tape import (
    SCORES,
    Tape,
    TapeError,
    builtin_tape_path,
    economy,
    load_tape,
    save_tape,
    strike_rate,
    tape_from_fixture,
)


def _real(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())["data"]


def _no_stamp(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "updated_at"} for row in rows]


@pytest.fixture(scope="module")
def real_tape(real_fixture_path: Path) -> Tape:
    return tape_from_fixture(json.loads(real_fixture_path.read_text()), source="71344")


def test_real_fixture_replayed_to_the_end_rebuilds_its_own_runs_batting_and_bowling(
    real_tape: Tape, real_fixture_path: Path
) -> None:
    real = _real(real_fixture_path)
    rebuilt = real_tape.fixture_at(len(real_tape))
    # updated_at of aggregate rows is a posting time, not derived data (runs S1 is stamped 1 s after its ball)
    assert _no_stamp(rebuilt["runs"]) == _no_stamp(real["runs"])
    assert _no_stamp(rebuilt["batting"]) == _no_stamp(real["batting"])
    assert _no_stamp(rebuilt["bowling"]) == _no_stamp(real["bowling"])


def test_real_fixture_balls_and_fixture_fields_come_back_byte_for_byte(
    real_tape: Tape, real_fixture_path: Path
) -> None:
    real = _real(real_fixture_path)
    rebuilt = real_tape.fixture_at(len(real_tape))
    assert rebuilt["balls"] == real["balls"]  # recorded updated_at stamps are kept
    assert list(rebuilt) == list(real)  # same keys in the real order
    for key in real:
        if key not in ("runs", "batting", "bowling"):
            assert rebuilt[key] == real[key], key


def test_wrong_batsmanout_id_on_ball_9_4_is_served_as_is_but_the_scorecard_names_the_batter_at_the_crease(
    real_tape: Tape,
) -> None:
    # spec §9.4: ball 9.4 says 8307 (out since 3.3); the batting table shows 914 out at 9.4
    rebuilt = real_tape.fixture_at(len(real_tape))
    ball = next(b for b in rebuilt["balls"] if b["scoreboard"] == "S1" and b["ball"] == 9.4)
    assert ball["batsmanout_id"] == 8307
    out_at_9_4 = [r["player_id"] for r in rebuilt["batting"] if r["fow_balls"] == 9.4]
    assert out_at_9_4 == [914]


def test_first_innings_scorecard_is_final_by_the_innings_break(
    real_tape: Tape, real_fixture_path: Path
) -> None:
    real = _real(real_fixture_path)
    brk = real_tape.innings_break_index()
    assert brk is not None
    at_break = real_tape.fixture_at(brk)
    assert at_break["status"] == "Innings Break"
    assert at_break["note"] == "Target 183 runs"
    s1 = [r for r in real["batting"] if r["scoreboard"] == "S1"]
    assert _no_stamp(at_break["batting"]) == _no_stamp(s1)
    assert _no_stamp(at_break["runs"]) == _no_stamp(real["runs"][:1])
    assert real_tape.fixture_at(brk - 1)["status"] == "1st Innings"
    assert real_tape.fixture_at(brk + 1)["status"] == "2nd Innings"


def test_every_cursor_totals_equal_the_sum_of_the_visible_balls(real_tape: Tape) -> None:
    for cursor in range(0, len(real_tape) + 1):
        fx = real_tape.fixture_at(cursor, include=["runs", "balls.score"])
        assert len(fx["balls"]) == cursor
        for row in fx["runs"]:
            balls = [b for b in fx["balls"] if b["scoreboard"] == f"S{row['inning']}"]
            total = sum(b["score"]["runs"] + b["score"]["bye"] + b["score"]["leg_bye"] for b in balls)
            assert row["score"] == total
            assert row["wickets"] == sum(b["score"]["is_wicket"] for b in balls)


def test_cursor_zero_is_first_innings_with_no_balls_and_ns_status_can_be_forced(real_tape: Tape) -> None:
    empty = real_tape.fixture_at(0)
    assert empty["status"] == "1st Innings"
    assert empty["balls"] == [] and empty["runs"] == [] and empty["batting"] == []
    assert real_tape.fixture_at(0, status="NS")["status"] == "NS"


def test_includes_are_honoured_in_the_real_key_order(real_tape: Tape) -> None:
    fx = real_tape.fixture_at(10, include=["venue", "balls.batsman", "localteam", "runs"])
    assert [k for k in fx if k in ("localteam", "runs", "balls", "venue")] == [
        "localteam",
        "runs",
        "balls",
        "venue",
    ]
    assert "batting" not in fx and "lineup" not in fx
    bare = real_tape.fixture_at(10, include=[])
    assert "balls" not in bare and bare["id"] == 71344


def test_cursor_outside_the_tape_is_a_clear_error(real_tape: Tape) -> None:
    with pytest.raises(TapeError, match="cursor"):
        real_tape.fixture_at(len(real_tape) + 1)


def _tiny(**over: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "fixture_id": "42",
        "league_id": 5,
        "season_id": 1,
        "type": "T20",
        "starting_at": "2026-01-01T10:00:00Z",
        "localteam": {"id": 1, "name": "A", "code": "A"},
        "visitorteam": {"id": 2, "name": "B", "code": "B"},
        "players": [{"id": i, "fullname": f"P{i}"} for i in (11, 12, 21)],
        "entries": [
            {"op": "ball", "ball": _ball(100, 0.1, 47)},
            {"op": "ball", "ball": _ball(105, 0.2, 69)},
            {"op": "correct", "ball": _ball(100, 0.1, 53)},
            {"op": "delete", "ball_id": 105},
        ],
    }
    raw.update(over)
    return raw


def _ball(ball_id: int, number: float, score_id: int, **kw: Any) -> dict[str, Any]:
    return {
        "id": ball_id,
        "scoreboard": "S1",
        "team_id": 1,
        "ball": number,
        "batsman_one_on_creeze_id": 11,
        "batsman_two_on_creeze_id": 12,
        "batsman_id": 11,
        "bowler_id": 21,
        "score_id": score_id,
        **kw,
    }


def test_corrections_replace_the_ball_and_deletions_withdraw_it() -> None:
    tape = Tape.model_validate(_tiny())
    assert [b["score_id"] for b in tape.fixture_at(2)["balls"]] == [47, 69]
    after_fix = tape.fixture_at(3)
    assert [b["score_id"] for b in after_fix["balls"]] == [53, 69]
    assert after_fix["runs"][0]["score"] == 7
    gone = tape.fixture_at(4)
    assert [b["id"] for b in gone["balls"]] == [100]
    assert gone["runs"][0]["score"] == 6 and gone["runs"][0]["overs"] == 0.1


def test_ball_updated_at_comes_from_the_entry_that_last_changed_it() -> None:
    tape = Tape.model_validate(_tiny())
    times = [1_000.0, 2_000.0, 3_000.0, 4_000.0]
    balls = tape.fixture_at(3, entry_times=times)["balls"]
    assert balls[0]["updated_at"] == "1970-01-01T00:50:00.000000Z"  # corrected by entry 2
    assert balls[1]["updated_at"] == "1970-01-01T00:33:20.000000Z"


def test_a_wicket_is_visible_from_the_entry_that_made_it_stand() -> None:
    no_run, caught = 82, 54
    assert not SCORES[no_run].is_wicket and SCORES[caught].is_wicket
    tape = Tape.model_validate(
        _tiny(
            entries=[
                {"op": "ball", "ball": _ball(100, 0.1, no_run)},
                {"op": "correct", "ball": _ball(100, 0.1, caught, batsmanout_id=11)},  # given late
                {"op": "ball", "ball": _ball(105, 0.2, caught, batsmanout_id=12)},
                {"op": "correct", "ball": _ball(105, 0.2, no_run)},  # overturned
                {"op": "ball", "ball": _ball(110, 0.3, caught, batsmanout_id=12)},
                {"op": "delete", "ball_id": 110},  # withdrawn
                {"op": "ball", "ball": _ball(115, 0.3, caught, batsmanout_id=12)},
                {"op": "ball", "ball": _ball(120, 0.4, no_run)},
            ]
        )
    )
    assert tape.entry_index_of_ball(100) == 0
    assert tape.entry_index_of_wicket(100) == 1
    assert tape.entry_index_of_wicket(105) is None
    assert tape.entry_index_of_wicket(110) is None
    assert tape.entry_index_of_wicket(115) == 6
    assert tape.entry_index_of_wicket(120) is None
    assert tape.entry_index_of_wicket(999) is None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"entries": [{"op": "ball", "ball": _ball(5, 0.1, 9999)}]}, "score_id"),
        (
            {
                "entries": [
                    {"op": "ball", "ball": _ball(5, 0.1, 69)},
                    {"op": "ball", "ball": _ball(5, 0.2, 69)},
                ]
            },
            "already posted",
        ),
        ({"entries": [{"op": "delete", "ball_id": 7}]}, "never posted"),
        ({"entries": [{"op": "ball", "ball": _ball(5, 0.1, 69, bowler_id=999)}]}, "bowler_id"),
        ({"entries": [{"op": "correct"}]}, "needs a `ball`"),
        ({"fixture_id": "abc"}, "fixture_id"),
        ({"type": "Test"}, "type"),
    ],
)
def test_bad_tapes_get_an_error_naming_the_field(tmp_path: Path, change: dict[str, Any], field: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_tiny(**change)))
    with pytest.raises(TapeError, match=field):
        load_tape(path)


def test_unreadable_or_non_json_tape_files_get_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TapeError, match="cannot read"):
        load_tape(tmp_path / "missing.json")
    (tmp_path / "junk.json").write_text("{nope")
    with pytest.raises(TapeError, match="not a JSON tape"):
        load_tape(tmp_path / "junk.json")


def test_tapes_round_trip_through_json_and_gzip(tmp_path: Path, real_tape: Tape) -> None:
    save_tape(real_tape, tmp_path / "t.json")
    save_tape(real_tape, tmp_path / "t.json.gz")
    assert load_tape(tmp_path / "t.json") == real_tape
    assert load_tape(tmp_path / "t.json.gz") == real_tape
    assert json.loads(gzip.decompress((tmp_path / "t.json.gz").read_bytes()))["fixture_id"] == "71344"


def test_builtin_demo_tape_is_shipped_and_unknown_names_list_what_exists() -> None:
    assert builtin_tape_path("t20-demo").name == "t20-demo.json"
    with pytest.raises(TapeError, match="t20-demo"):
        builtin_tape_path("nope")


def test_strike_rate_rounds_half_up_like_the_feed_and_economy_drops_a_trailing_zero() -> None:
    assert strike_rate(5, 8) == 63  # real row: 5 off 8 -> 63
    assert strike_rate(91, 55) == 165
    assert strike_rate(0, 0) == 0
    assert economy(29, 18) == 9.67
    assert economy(36, 24) == 9 and isinstance(economy(36, 24), int)


def test_score_catalogue_flags_follow_the_spec_semantics() -> None:
    assert not SCORES[7].is_legal and SCORES[7].ball  # a no-ball has ball=true but is not legal
    assert SCORES[52].is_wide and SCORES[52].bat_runs == 0
    assert SCORES[8].bat_runs == 1 and SCORES[114].bat_runs == 0 and SCORES[114].team_runs == 2
    assert SCORES[212].is_run_out and not SCORES[54].is_run_out
