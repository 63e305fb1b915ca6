from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from daemon.cricket.engine import process_tick
from daemon.cricket.settings import EngineSettings
from daemon.cricket.snapshot import snapshot_from_fixture
from tests.cricket.fixture_builder import truncated

KEYS = {
    "matchId",
    "phase",
    "perspective",
    "battingPerspective",
    "sentiment",
    "title",
    "subtitle",
    "status",
    "teams",
    "score",
    "overs",
    "battingCode",
    "runRate",
    "target",
    "equation",
    "requiredRate",
    "batters",
    "bowler",
    "thisOver",
    "event",
    "eventType",
    "result",
    "toss",
}


@pytest.fixture(scope="module")
def raw(real_fixture_path: Path) -> dict[str, Any]:
    return json.loads(real_fixture_path.read_text())["data"]


# These tests are about what a phase looks like: a final status is believed on the first tick (the end's
# confirmation has its own tests in test_confirm.py).
AT_ONCE = EngineSettings(confirm_polls=1, confirm_s=0)


def display(fixture: dict[str, Any]) -> dict[str, dict[str, Any]]:
    snap = snapshot_from_fixture(fixture)
    return dict(process_tick(None, snap, now=0.0, marquee=True, settings=AT_ONCE).display)


def test_live_chase_shows_every_string_the_app_needs(raw: dict[str, Any]) -> None:
    neutral = display(raw)["neutral"]
    assert set(neutral) == KEYS
    assert (neutral["score"], neutral["overs"], neutral["runRate"]) == ("10/0", "1.2", "RR 7.50")
    assert (neutral["target"], neutral["equation"], neutral["requiredRate"]) == (
        "Target 183",
        "PAK need 173 off 112",
        "RRR 9.27",
    )
    assert neutral["batters"] == [
        {"name": "S Farhan", "line": "5 (5)", "onStrike": False},
        {"name": "F Zaman", "line": "4 (3)", "onStrike": True},  # a four keeps the strike
    ]
    assert neutral["bowler"] == {"name": "D Chameera", "line": "0-4 (0.2)"}
    assert neutral["thisOver"] == ["0", "4"]
    assert neutral["toss"] == "SL won the toss and chose to bat"
    assert neutral["teams"][0]["code"] == "PAK" and neutral["teams"][1]["innings"] == ["182/8 (20)"]
    assert neutral["result"] is None and neutral["phase"] == "live"


def test_each_supported_team_sees_its_side_first(raw: dict[str, Any]) -> None:
    shown = display(raw)
    assert set(shown) == {"1", "39", "neutral"}
    sl, pak = shown["39"], shown["1"]
    assert [t["code"] for t in sl["teams"]] == ["SL", "PAK"] and sl["title"] == "SL v PAK"
    assert (
        sl["battingPerspective"] == "supported_bowling" and pak["battingPerspective"] == "supported_batting"
    )
    assert sl["score"] == pak["score"] == "10/0"  # the same match, reordered


def test_strike_rotates_on_an_odd_run_and_at_the_end_of_an_over(raw: dict[str, Any]) -> None:
    # after S1 0.1 (Udara takes one): Kusal Mendis on strike
    first = display(truncated(raw, 1))["neutral"]
    assert [b["onStrike"] for b in first["batters"]] == [False, True]
    # after S2 0.6 (Farhan's dot ends the over): Zaman faces the next over
    end_of_over = display(truncated(raw, 133))["neutral"]
    assert {b["name"]: b["onStrike"] for b in end_of_over["batters"]} == {"S Farhan": False, "F Zaman": True}


def test_innings_break_and_completed_phases(raw: dict[str, Any]) -> None:
    s1 = sum(1 for b in raw["balls"] if b["scoreboard"] == "S1")
    brk = display(truncated(raw, s1, status="Innings Break"))["neutral"]
    assert brk["phase"] == "innings_break" and brk["subtitle"] == "Innings break · PAK need 183 to win"
    assert brk["batters"] == [] and brk["bowler"] is None
    done = copy.deepcopy(raw)
    done.update(status="Finished", winner_team_id=39, note="Sri Lanka won by 12 runs")
    final = display(done)["neutral"]
    assert (
        final["phase"] == "completed" and final["result"] == final["subtitle"] == "Sri Lanka won by 12 runs"
    )
    abandoned = copy.deepcopy(raw)
    abandoned.update(status="Aban.", note="Target 183 runs")
    assert display(abandoned)["neutral"]["result"] == "Match abandoned"


def test_result_is_derived_when_the_feed_has_no_note(raw: dict[str, Any]) -> None:
    done = copy.deepcopy(raw)
    done.update(status="Finished", winner_team_id=1, note=None)
    assert display(done)["neutral"]["result"] == "Pakistan won by 10 wickets"
    done.update(winner_team_id=39)
    assert display(done)["neutral"]["result"] == "Sri Lanka won by 172 runs"


def test_pre_match_shows_the_toss_and_no_score(raw: dict[str, Any]) -> None:
    pre = display(truncated(raw, 0, status="NS"))["neutral"]
    assert (
        pre["phase"] == "pre" and pre["score"] == "" and pre["subtitle"] == "SL won the toss and chose to bat"
    )
    assert pre["runRate"] is None and pre["batters"] == [] and pre["thisOver"] == []
