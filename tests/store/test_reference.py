"""cricket-teams, cricket-team-seasons, cricket-leagues: every access pattern of the data model."""

from __future__ import annotations

from daemon.store import Repositories, count_calls
from tests.store import faults


async def test_teams(repos: Repositories):
    t = repos.teams
    await t.batch_write_teams([{"teamId": str(i), "name": f"Team {i}", "code": f"T{i}"} for i in range(30)])
    assert (await t.get_team("7"))["code"] == "T7"
    assert await t.get_team("404") is None
    faults.page_size(t.dynamo.client, 7)
    assert len(await t.get_all_teams()) == 30
    assert await t.update_team_fields("7", {"imageUrl": "https://img/7.png"}) is True
    assert await t.update_team_fields("404", {"imageUrl": "x"}) is False
    assert (await t.get_team("7"))["imageUrl"] == "https://img/7.png"


async def test_team_seasons(repos: Repositories):
    ts = repos.team_seasons
    await ts.write_season_team_records(
        [
            {"seasonId": "708", "teamId": str(i), "leagueId": "1", "stats": {"won": i, "nrr": 0.25}}
            for i in range(8)
        ]
        + [{"seasonId": "709", "teamId": "1", "leagueId": "1"}]
    )
    got = await ts.get_teams_for_season("708")
    assert sorted(int(x["teamId"]) for x in got) == list(range(8))
    assert next(x for x in got if x["teamId"] == "3")["stats"] == {"won": 3, "nrr": 0.25}


async def test_leagues(repos: Repositories):
    lg = repos.leagues
    await lg.put_league({"leagueId": "1", "name": "IPL", "code": "IPL", "active": True})
    await lg.put_league({"leagueId": "2", "name": "BBL", "code": "BBL", "active": False})
    await lg.put_league({"leagueId": "3", "name": "T20I", "code": "T20I", "active": True})
    assert (await lg.get_league("1"))["name"] == "IPL"
    assert len(await lg.get_all_leagues()) == 3
    assert sorted(x["leagueId"] for x in await lg.get_active_leagues()) == ["1", "3"]
    assert await lg.update_league_fields("2", {"active": True}) is True
    assert await lg.update_league_fields("9", {"active": True}) is False
    assert len(await lg.get_active_leagues()) == 3
    assert (await lg.delete_league("2"))["name"] == "BBL"
    assert await lg.delete_league("2") is None
    assert await lg.get_league("2") is None


async def test_scan_follows_real_one_megabyte_pages(repos: Repositories):
    # no forced Limit here: 12 items of ~120 KB make the server itself cut the scan at 1 MB
    blob = "x" * 120_000
    await repos.teams.batch_write_teams([{"teamId": str(i), "blob": blob} for i in range(12)])
    with count_calls() as c:
        teams = await repos.teams.get_all_teams()
    assert sorted(int(t["teamId"]) for t in teams) == list(range(12))
    assert c.n >= 2
