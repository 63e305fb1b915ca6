"""ReferenceSyncJob (leagues, teams, team-seasons) against moto's server and the fake SportMonks server."""

from __future__ import annotations

from typing import Any

import trio

from actors.jobs.reference_sync import LeagueDirectory, ReferenceSyncJob
from actors.jobs.settings import ReferenceSyncSettings
from daemon.store.dynamo import count_calls
from tests.doubles import FakeSportMonks
from tests.jobs.sportmonks_data import make_team

T0 = 1_800_000_000.0


def season(season_id: int, league_id: int, team_ids: list[int]) -> dict[str, Any]:
    return {
        "resource": "seasons",
        "id": season_id,
        "league_id": league_id,
        "name": "2026",
        "code": "2026",
        "teams": [make_team(t, f"Team {t}", f"T{t}") for t in team_ids],
    }


def setup_sportmonks(fake: FakeSportMonks) -> None:
    fake.per_page = 10
    fake.teams = [make_team(t, f"Team {t}", f"T{t}") for t in range(1, 31)]  # three pages
    fake.seasons = {
        1715: season(1715, 3, [1, 2, 3]),
        1800: season(1800, 5, [4, 5]),
        1849: season(1849, 10, [6]),
    }


async def test_first_sync_creates_leagues_teams_and_the_team_seasons_of_active_leagues(
    repos: Any, sm_client: Any, sportmonks: FakeSportMonks
) -> None:
    setup_sportmonks(sportmonks)
    job = ReferenceSyncJob(
        sm_client, repos, ReferenceSyncSettings(active_league_ids=[3, 5]), clock=lambda: T0
    )

    reports = await job.sync_all()

    assert reports["leagues"].created == 3 and reports["teams"].created == 30
    leagues = {lg["leagueId"]: lg for lg in await repos.leagues.get_all_leagues()}
    assert {k: v["active"] for k, v in leagues.items()} == {"3": True, "5": True, "10": False}
    assert leagues["3"]["code"] == "T20I" and leagues["3"]["currentSeasonId"] == "1715"
    assert len(await repos.teams.get_all_teams()) == 30
    assert [s.query.get("page", "1") for s in sportmonks.calls("/teams")] == ["1", "2", "3"]
    # Only the active leagues' current seasons were asked for.
    assert sorted(s.path for s in sportmonks.calls("/seasons/")) == [
        "/seasons/1715",
        "/seasons/1800",
    ]
    rows = await repos.team_seasons.get_teams_for_season("1715")
    assert sorted(r["teamId"] for r in rows) == ["1", "2", "3"] and rows[0]["leagueId"] == "3"
    assert await repos.team_seasons.get_teams_for_season("1849") == []


async def test_resync_writes_only_changes_and_never_overwrites_what_admins_own(
    repos: Any, sm_client: Any, sportmonks: FakeSportMonks
) -> None:
    setup_sportmonks(sportmonks)
    await ReferenceSyncJob(
        sm_client, repos, ReferenceSyncSettings(active_league_ids=[3]), clock=lambda: T0
    ).sync_all()
    # Admin edits: league 10 activated, league 3 deactivated, a team's colour added.
    assert await repos.leagues.update_league_fields("10", {"active": True})
    assert await repos.leagues.update_league_fields("3", {"active": False})
    assert await repos.teams.update_team_fields("7", {"colour": "#00ff00"})
    # SportMonks changes: a league renamed, a team recoded, a new team in a season.
    sportmonks.leagues[2] = dict(sportmonks.leagues[2], name="CSA T20 Challenge 2027")
    sportmonks.teams[6] = make_team(7, "Team 7", "SEVEN")
    sportmonks.seasons[1849] = season(1849, 10, [6, 8])

    job = ReferenceSyncJob(
        sm_client, repos, ReferenceSyncSettings(active_league_ids=[3]), clock=lambda: T0 + 86400
    )
    reports = await job.sync_all()

    assert (reports["leagues"].created, reports["leagues"].updated, reports["leagues"].unchanged) == (0, 1, 2)
    assert (reports["teams"].created, reports["teams"].updated, reports["teams"].unchanged) == (0, 1, 29)
    assert reports["teams"].written == ["7"]
    leagues = {lg["leagueId"]: lg for lg in await repos.leagues.get_all_leagues()}
    assert leagues["10"]["active"] is True and leagues["10"]["name"] == "CSA T20 Challenge 2027"
    assert leagues["3"]["active"] is False  # the admin's choice stands
    team = await repos.teams.get_team("7")
    assert team is not None and team["code"] == "SEVEN" and team["colour"] == "#00ff00"
    # Now league 10 is the only active one: its season is synced, the new team included.
    assert set(reports) == {"leagues", "teams", "season:1849"}
    assert reports["season:1849"].created == 2
    assert sorted(r["teamId"] for r in await repos.team_seasons.get_teams_for_season("1849")) == ["6", "8"]


async def test_a_failed_step_is_retried_alone_and_the_cycle_resumes_where_it_stopped(
    repos: Any, sm_client: Any, sportmonks: FakeSportMonks
) -> None:
    setup_sportmonks(sportmonks)
    sportmonks.fail(path="/seasons/1800", status=500)
    job = ReferenceSyncJob(
        sm_client, repos, ReferenceSyncSettings(active_league_ids=[3, 5]), clock=lambda: T0
    )
    job.start_cycle()
    outcomes = []
    while job.pending:
        head = job.pending[0]
        outcomes.append((head, await job.step()))
    assert outcomes == [
        (("leagues", ""), True),
        (("teams", ""), True),
        (("seasons", ""), True),
        (("season", "1715"), True),
        (("season", "1800"), False),  # failed: stays at the head of the queue
        (("season", "1800"), True),
    ]
    assert (
        len(sportmonks.calls("/leagues")) == 1 and len(sportmonks.calls("/teams")) == 3
    )  # not fetched again
    assert job.cycles_completed == 1
    assert sorted(r["teamId"] for r in await repos.team_seasons.get_teams_for_season("1800")) == ["4", "5"]


async def test_actor_backs_off_through_errors_and_completes_its_cycle(
    repos: Any, sm_client: Any, sportmonks: FakeSportMonks
) -> None:
    setup_sportmonks(sportmonks)
    sportmonks.fail(path="/teams", status=503, times=3)
    settings = ReferenceSyncSettings(active_league_ids=[3], backoff_base_s=0.01, backoff_max_s=0.02)
    job = ReferenceSyncJob(sm_client, repos, settings, clock=lambda: T0)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(job.run)
            while job.cycles_completed < 1:
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    assert [s.status for s in sportmonks.calls("/teams")][:4] == [503, 503, 503, 200]
    assert len(await repos.teams.get_all_teams()) == 30


async def test_league_directory_reads_the_table_once_per_max_age(repos: Any) -> None:
    await repos.leagues.put_league({"leagueId": "3", "code": "T20I", "name": "T20I", "active": True})
    await repos.leagues.put_league(
        {"leagueId": "5", "code": "BBL", "name": "BBL", "active": False, "currentSeasonId": "1800"}
    )
    now = [0.0]
    directory = LeagueDirectory(repos.leagues, max_age_s=600, now=lambda: now[0])
    assert await directory.active_codes() == ["T20I"]
    with count_calls() as calls:
        assert await directory.active_codes() == ["T20I"]
        assert await directory.codes() == {"3": "T20I", "5": "BBL"}
        assert await directory.codes() == {"3": "T20I", "5": "BBL"}
    assert calls.n == 1  # the second active read was cached; codes read once
    assert await repos.leagues.update_league_fields("5", {"active": True})
    assert await directory.active_codes() == ["T20I"]  # still cached
    now[0] = 601
    assert await directory.active_codes() == ["BBL", "T20I"]
    assert await directory.active_season_ids() == ["1800"]


async def test_a_step_that_keeps_failing_is_left_for_the_next_cycle(
    repos: Any, sm_client: Any, sportmonks: FakeSportMonks
) -> None:
    setup_sportmonks(sportmonks)
    sportmonks.fail(path="/seasons/1715", status=500, times=None)
    settings = ReferenceSyncSettings(active_league_ids=[3, 5], max_step_failures=2)
    job = ReferenceSyncJob(sm_client, repos, settings, clock=lambda: T0)
    job.start_cycle()
    while job.pending:
        await job.step()
    assert job.skipped_steps == [("season", "1715")]
    assert job.cycles_completed == 1
    assert len(sportmonks.calls("/seasons/1715")) == 2
    assert sorted(r["teamId"] for r in await repos.team_seasons.get_teams_for_season("1800")) == ["4", "5"]


async def test_syncs_reference_data_from_the_project_replay_server(repos: Any) -> None:
    """The demo points the daemon at the replay server, which serves /teams, /leagues and /seasons from tapes."""
    from daemon.replay.server import ReplayServer
    from daemon.replay.synth import synthesise
    from daemon.sportmonks.client import SportMonksClient
    from daemon.sportmonks.settings import SportMonksSettings

    tapes = [synthesise("T20", i, fixture_id=str(900 + i)) for i in range(2)]
    server = ReplayServer(tapes)
    league_id = int(tapes[0].league.id)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        client = SportMonksClient(
            SportMonksSettings(base_url=f"http://127.0.0.1:{port}/api/v2.0", api_token="t", max_retries=0)
        )
        try:
            job = ReferenceSyncJob(
                client, repos, ReferenceSyncSettings(active_league_ids=[league_id]), clock=lambda: T0
            )
            reports = await job.sync_all()
        finally:
            await client.aclose()
            server.stop()
    assert reports["leagues"].created >= 1 and reports["teams"].created >= 2
    season_id = str(tapes[0].season.id)
    assert f"season:{season_id}" in reports  # the active league's current season
    rows = await repos.team_seasons.get_teams_for_season(season_id)
    assert {r["teamId"] for r in rows} >= {str(tapes[0].localteam.id), str(tapes[0].visitorteam.id)}
