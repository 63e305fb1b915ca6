"""SportMonks JSON -> table items: shapes, the sync hash, and clear errors naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actors.jobs.convert import (
    ConversionError,
    convert_all,
    epoch_of,
    fixture_item,
    fixture_update,
    iso_utc,
    league_item,
    team_item,
    team_season_items,
)
from tests.jobs.sportmonks_data import LEAGUES, make_fixture, make_team


def test_real_fixture_becomes_an_item_with_string_ids_and_sortable_start(real_fixture_path: Path) -> None:
    raw = json.loads(real_fixture_path.read_text())["data"]
    item = fixture_item(raw)
    assert item["matchId"] == "71344"
    assert item["leagueId"] == "3" and item["leagueCode"] == "T20I"  # code from the league include
    assert item["startTime"] == "2026-10-09T13:00:00Z"
    assert item["status"] == "2nd Innings"
    assert (item["localteamId"], item["visitorteamId"], item["venueId"]) == ("1", "39", "84")
    assert item["round"] == "1st T20I" and item["type"] == "T20I" and item["live"] is True
    assert item["note"] == "Target 183 runs" and item["winnerTeamId"] is None
    assert len(item["syncHash"]) == 20
    assert "balls" not in item and "runs" not in item


def test_fixture_list_excerpt_converts(shared_data: Path) -> None:
    path = (
        shared_data / "sportmonks" / "fixtures-list-season-708-ipl2021-match1-excerpt-chainlink-readme.json"
    )
    raws = json.loads(path.read_text())["data"]
    items, errors = convert_all(raws, fixture_item, what="fixtures", league_codes={"1": "IPL"})
    assert errors == []
    assert items[0]["matchId"] == "24915" and items[0]["leagueCode"] == "IPL"  # code from the map
    assert items[0]["winnerTeamId"] == "8" and items[0]["status"] == "Finished"


def test_start_time_sorts_as_text_across_formats() -> None:
    a = fixture_item(make_fixture(1, 1_800_000_000))
    b = dict(make_fixture(2, 0), starting_at="2027-01-15T08:00:01+00:00")
    c = dict(make_fixture(3, 0), starting_at="2027-01-15 09:00:00")  # no zone: SportMonks times are UTC
    starts = [a["startTime"], fixture_item(b)["startTime"], fixture_item(c)["startTime"]]
    assert starts == ["2027-01-15T08:00:00Z", "2027-01-15T08:00:01Z", "2027-01-15T09:00:00Z"]
    assert epoch_of(a["startTime"]) == 1_800_000_000
    assert iso_utc(1_800_000_000) == a["startTime"]


def test_sync_hash_changes_with_synced_fields_only() -> None:
    base = fixture_item(make_fixture(7, 1_800_000_000))
    same = fixture_item(dict(make_fixture(7, 1_800_000_000), toss_won_team_id=39, updated_at="x"))
    moved = fixture_item(make_fixture(7, 1_800_000_600))
    noted = fixture_item(make_fixture(7, 1_800_000_000, note="Toss delayed"))
    assert same["syncHash"] == base["syncHash"]  # fields we do not store do not count
    assert moved["syncHash"] != base["syncHash"]
    assert noted["syncHash"] != base["syncHash"]


def test_fixture_update_holds_only_changed_fields_and_never_nulls_the_gsi_key() -> None:
    old = dict(fixture_item(make_fixture(7, 1_800_000_000)), displayState={"x": 1})
    new = fixture_item(make_fixture(7, 1_800_000_000, status="1st Innings", note="Pakistan elected to bat"))
    assert fixture_update(new, old) == {
        "status": "1st Innings",
        "note": "Pakistan elected to bat",
        "syncHash": new["syncHash"],
    }
    no_code = {k: v for k, v in new.items() if k != "leagueCode"}  # league code unknown this time
    assert "leagueCode" not in fixture_update(no_code, old)


def test_league_code_missing_everywhere_leaves_item_out_of_the_gsi() -> None:
    item = fixture_item(make_fixture(7, 1_800_000_000))
    assert "leagueCode" not in item
    assert fixture_item(make_fixture(7, 1_800_000_000), league_codes={"3": "T20I"})["leagueCode"] == "T20I"


def test_retention_sets_ttl_from_start_time() -> None:
    item = fixture_item(make_fixture(7, 1_800_000_000), retention_days=30)
    assert item["ttl"] == 1_800_000_000 + 30 * 86400


@pytest.mark.parametrize(
    ("patch", "path"),
    [
        ({"starting_at": "tomorrow"}, "fixtures[0].starting_at"),
        ({"starting_at": None}, "fixtures[0].starting_at"),
        ({"id": None}, "fixtures[0].id"),
        ({"id": "abc"}, "fixtures[0].id"),
        ({"league_id": True}, "fixtures[0].league_id"),
        ({"status": 3}, "fixtures[0].status"),
        ({"live": "yes"}, "fixtures[0].live"),
        ({"league": {"code": 5}}, "fixtures[0].league.code"),
    ],
)
def test_bad_fixture_field_is_named_in_the_error(patch: dict[str, object], path: str) -> None:
    raw = dict(make_fixture(7, 1_800_000_000), **patch)
    items, errors = convert_all([raw, make_fixture(8, 1_800_000_000)], fixture_item, what="fixtures")
    assert [it["matchId"] for it in items] == ["8"]  # the good one is not lost
    assert len(errors) == 1 and errors[0].path == path
    assert str(errors[0]).startswith(path + ": ")


def test_non_object_fixture_is_an_error_not_a_crash() -> None:
    with pytest.raises(ConversionError, match=r"fixture: expected an object, got list"):
        fixture_item([1, 2])


def test_team_league_and_season_items() -> None:
    team = team_item(make_team(39, "Sri Lanka", "SL"))
    assert team["teamId"] == "39" and team["name"] == "Sri Lanka" and team["code"] == "SL"
    assert team["imageUrl"].endswith("/teams/7/39.png") and team["nationalTeam"] is True
    league = league_item(LEAGUES[0])
    assert league["leagueId"] == "3" and league["code"] == "T20I" and league["currentSeasonId"] == "1715"
    assert "active" not in league  # admins own it
    season = {
        "resource": "seasons",
        "id": 1715,
        "league_id": 3,
        "name": "2026",
        "teams": [make_team(1, "Pakistan", "PAK"), make_team(39, "Sri Lanka", "SL")],
    }
    rows = team_season_items(season)
    assert [(r["seasonId"], r["teamId"], r["leagueId"]) for r in rows] == [
        ("1715", "1", "3"),
        ("1715", "39", "3"),
    ]
    wrapped = dict(season, teams={"data": season["teams"]})  # includes may come {data: [...]}-wrapped
    assert [r["teamId"] for r in team_season_items(wrapped)] == ["1", "39"]


def test_bad_league_and_season_fields_are_named() -> None:
    with pytest.raises(ConversionError, match=r"^league\.code: missing$"):
        league_item(dict(LEAGUES[0], code=None))
    with pytest.raises(ConversionError, match=r"^season\.teams\[1\]\.id: missing$"):
        team_season_items({"id": 1, "teams": [make_team(1, "A", "A"), {"name": "B"}]})
