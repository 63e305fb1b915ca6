"""SportMonks data for the jobs' tests: fixtures, teams and the leagues, in the real shapes (the fake that
serves them is ``tests.doubles.FakeSportMonks``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def sm_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.000000Z")


def make_fixture(
    fixture_id: int,
    start: float,
    *,
    league_id: int = 3,
    season_id: int = 1715,
    status: str = "NS",
    localteam_id: int = 1,
    visitorteam_id: int = 39,
    note: str | None = None,
    round_: str = "1st T20I",
) -> dict[str, Any]:
    return {
        "resource": "fixtures",
        "id": fixture_id,
        "league_id": league_id,
        "season_id": season_id,
        "stage_id": 6695,
        "round": round_,
        "localteam_id": localteam_id,
        "visitorteam_id": visitorteam_id,
        "starting_at": sm_time(start),
        "type": "T20I",
        "live": True,
        "status": status,
        "last_period": None,
        "note": note,
        "venue_id": 84,
        "toss_won_team_id": None,
        "winner_team_id": None,
        "draw_noresult": None,
        "total_overs_played": 20,
        "super_over": False,
        "follow_on": False,
    }


LEAGUES = [
    {
        "resource": "leagues",
        "id": 3,
        "season_id": 1715,
        "country_id": 99474,
        "name": "Twenty20 International",
        "code": "T20I",
        "image_path": "https://cdn.sportmonks.com/images/cricket/leagues/3/3.png",
        "type": "phase",
    },
    {
        "resource": "leagues",
        "id": 5,
        "season_id": 1800,
        "country_id": 98,
        "name": "Big Bash League",
        "code": "BBL",
        "image_path": "https://cdn.sportmonks.com/images/cricket/leagues/5/5.png",
        "type": "league",
    },
    {
        "resource": "leagues",
        "id": 10,
        "season_id": 1849,
        "country_id": 146,
        "name": "CSA T20 Challenge",
        "code": "CSA",
        "image_path": "https://cdn.sportmonks.com/images/cricket/leagues/10/10.png",
        "type": "league",
    },
]


def make_team(team_id: int, name: str, code: str) -> dict[str, Any]:
    return {
        "resource": "teams",
        "id": team_id,
        "name": name,
        "code": code,
        "image_path": f"https://cdn.sportmonks.com/images/cricket/teams/{team_id % 32}/{team_id}.png",
        "country_id": 1000 + team_id,
        "national_team": team_id < 100,
    }
