from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from daemon.cricket.snapshot import SnapshotError, format_overs, overs_to_balls, snapshot_from_fixture
from tests.cricket.fixture_builder import base_fixture, make_ball, rebuild


@pytest.fixture(scope="module")
def real(real_fixture_path: Path) -> dict[str, Any]:
    return json.loads(real_fixture_path.read_text())


def test_real_fixture_reads_as_the_scorecard_says(real: dict[str, Any]) -> None:
    snap = snapshot_from_fixture(real)  # the {"data": ...} envelope is accepted
    assert snap.fixture_id == "71344"
    assert (snap.status, snap.phase) == ("2nd Innings", "live")
    assert [(i.scoreboard, i.team_id, i.score, i.overs) for i in snap.innings] == [
        ("S1", "39", "182/8", "20"),
        ("S2", "1", "10/0", "1.2"),
    ]
    assert snap.target == 183
    assert snap.balls_per_innings == 120
    assert len(snap.balls) == 135
    assert [b.id for b in snap.balls] == sorted(b.id for b in snap.balls)
    assert (snap.localteam.code, snap.visitorteam.code) == ("PAK", "SL")
    assert snap.updated_at is not None and snap.current_scoreboard == "S2"


def test_two_players_with_one_short_name_get_their_full_names(real: dict[str, Any]) -> None:
    snap = snapshot_from_fixture(real)
    assert snap.name("166") == "Kusal Mendis"
    assert snap.name("914") == "Kamindu Mendis"
    assert snap.name("21906") == "L Udara"


def test_dismissed_batter_comes_from_the_batting_table_when_batsmanout_id_is_wrong(
    real: dict[str, Any],
) -> None:
    snap = snapshot_from_fixture(real)
    ball = next(b for b in snap.balls if b.scoreboard == "S1" and b.over == "9.4")
    raw = next(b for b in real["data"]["balls"] if b["id"] == ball.id)
    assert raw["batsmanout_id"] == 8307  # the feed names a batter already out at 3.3
    assert ball.out_id == "914"


def test_wrong_batsmanout_id_without_a_table_falls_back_to_the_striker(real: dict[str, Any]) -> None:
    raw = copy.deepcopy(real["data"])
    raw["batting"] = []
    snap = snapshot_from_fixture(raw)
    ball = next(b for b in snap.balls if b.scoreboard == "S1" and b.over == "9.4")
    assert ball.out_id == "914"


def test_extras_follow_the_feed_semantics(real: dict[str, Any]) -> None:
    snap = snapshot_from_fixture(real)
    s1 = snap.balls_in("S1")
    noball_bye = next(b for b in s1 if b.score_name == "1 No Ball + 1 Bye")
    assert (noball_bye.legal, noball_bye.bat_runs, noball_bye.team_runs, noball_bye.runs) == (False, 0, 2, 1)
    five_wides = next(b for b in s1 if b.score_name == "5 Wides")
    assert (five_wides.legal, five_wides.wide, five_wides.faced, five_wides.bat_runs) == (
        False,
        True,
        False,
        0,
    )
    byes = next(b for b in s1 if b.score_name == "4 Byes")
    assert (byes.four, byes.bat_runs, byes.team_runs, byes.runs) == (False, 0, 4, 0)
    # the scorecard rebuilt from the balls equals the feed's totals
    assert sum(b.team_runs for b in s1) == 182
    assert sum(1 for b in s1 if b.legal) == 120


def test_includes_wrapped_in_data_are_accepted(real: dict[str, Any]) -> None:
    raw = copy.deepcopy(real["data"])
    for key in ("balls", "runs", "batting", "bowling", "lineup", "localteam"):
        raw[key] = {"data": raw[key]}
    snap = snapshot_from_fixture(raw)
    assert len(snap.balls) == 135 and snap.localteam.name == "Pakistan"


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda f: f["balls"][3].pop("score"), "balls[3].score"),
        (lambda f: f["balls"][5]["score"].update(runs="x"), "balls[5].score.runs"),
        (lambda f: f["runs"][0].update(score="a lot"), "runs[0].score"),
        (lambda f: f["runs"][1].update(overs=-2), "runs[1].overs"),
        (lambda f: f.update(status=7), "status"),
        (lambda f: f.update(balls="many"), "balls"),
        (lambda f: f["batting"][2].pop("player_id"), "batting[2].player_id"),
        (lambda f: f["balls"][7].update(ball=3.0), "balls[7].ball"),
        (lambda f: f["balls"][9].update(id=f["balls"][8]["id"]), "balls[9].id"),
        (lambda f: f.pop("id"), "id"),
    ],
)
def test_malformed_input_raises_an_error_naming_the_field(
    real: dict[str, Any], mutate: Any, field: str
) -> None:
    raw = copy.deepcopy(real["data"])
    mutate(raw)
    with pytest.raises(SnapshotError) as caught:
        snapshot_from_fixture(raw)
    assert caught.value.field == field
    assert field in str(caught.value)


@pytest.mark.parametrize(
    ("status", "with_play", "phase"),
    [
        ("NS", False, "pre"),
        ("1st Innings", True, "live"),
        ("2nd Innings", True, "live"),
        ("Innings Break", True, "innings_break"),
        ("Finished", True, "completed"),
        ("Aban.", False, "abandoned"),
        ("Cancl.", False, "abandoned"),
        ("Postp.", False, "abandoned"),
        ("Delayed", False, "pre"),
        ("Delayed", True, "live"),
        ("Tea Break", True, "live"),
        ("Something New", True, "live"),
    ],
)
def test_status_maps_to_the_display_phase(status: str, with_play: bool, phase: str) -> None:
    fx = base_fixture(players=[(11, "Ann", "One"), (12, "Bob", "Two"), (21, "Cy", "Three")])
    if with_play:
        fx = rebuild(fx, [make_ball(1, "0.1", "1", batsman=11, bowler=21, crease=(11, 12))])
    fx["status"] = status
    assert snapshot_from_fixture(fx).phase == phase


def test_overs_are_read_as_overs_and_balls_not_decimals() -> None:
    assert overs_to_balls(18.4) == 112
    assert overs_to_balls(20) == 120
    assert overs_to_balls(0.2) == 2
    assert format_overs(112) == "18.4" and format_overs(120) == "20" and format_overs(0) == "0"


def test_a_fixture_without_balls_is_a_score_only_snapshot(real: dict[str, Any]) -> None:
    raw = copy.deepcopy(real["data"])
    del raw["balls"]
    snap = snapshot_from_fixture(raw)
    assert snap.balls == () and snap.current_scoreboard == "S2" and snap.innings[1].score == "10/0"
