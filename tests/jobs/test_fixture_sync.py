"""FixtureSyncJob against moto's DynamoDB server and a SportMonks-compatible HTTP server, with the real client.

What must hold: only changed fixtures are written (new ones by BatchWriteItem in 25s, changed ones
by UpdateItem conditioned on existence), pagination is followed, and SportMonks errors never lose the job
its place.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from actors.jobs.fixture_sync import FixtureSyncJob, SyncIncomplete, plan_full_sync
from actors.jobs.settings import FixtureSyncSettings
from daemon.metrics import REGISTRY
from daemon.store.dynamo import count_calls
from tests.doubles import Clock, FakeSportMonks
from tests.jobs.sportmonks_data import make_fixture

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
HOUR = 3600.0


def dynamo_calls(operation: str, table: str = "cricket-fixtures") -> float:
    value = REGISTRY.get_sample_value(
        "sightscreen_dynamodb_calls_total", {"table": table, "operation": operation}
    )
    return value or 0.0


def schedule(
    n: int, *, first_id: int = 1000, start: float = T0 + HOUR, step: float = HOUR / 2
) -> list[dict[str, Any]]:
    return [make_fixture(first_id + i, start + i * step) for i in range(n)]


async def stored(repos: Any, ids: list[str]) -> dict[str, dict[str, Any]]:
    return await repos.fixtures.batch_get_fixtures(ids)


async def test_first_near_sync_creates_every_fixture_in_batches_of_25_following_pagination(
    repos: Any, sm_client: Any, sportmonks: FakeSportMonks
) -> None:
    sportmonks.per_page = 20
    sportmonks.schedule = schedule(60) + [make_fixture(9000, T0 + 5 * 24 * HOUR)]  # the last is outside 48 h
    job = FixtureSyncJob(sm_client, repos, FixtureSyncSettings(include_livescores=False), clock=Clock(T0))
    batches_before = dynamo_calls("BatchWriteItem")

    report = await job.sync_near_window()

    assert (report.created, report.updated, report.unchanged, report.invalid) == (60, 0, 0, 0)
    assert dynamo_calls("BatchWriteItem") - batches_before == 3  # 25 + 25 + 10
    pages = [s.query for s in sportmonks.calls("/fixtures")]
    assert [q.get("page", "1") for q in pages] == ["1", "2", "3"]
    # links.next carries only page=N; the filters and includes must have been re-added to every page
    assert all(q["filter[starts_between]"] == "2027-01-14T20:00:00,2027-01-17T08:00:00" for q in pages)
    assert all(q["include"] == "league" for q in pages)
    items = await stored(repos, [str(1000 + i) for i in range(60)] + ["9000"])
    assert len(items) == 60 and "9000" not in items
    first = items["1000"]
    assert first["leagueCode"] == "T20I" and first["startTime"] == "2027-01-15T09:00:00Z"
    assert first["updatedAt"] == "2027-01-15T08:00:00Z" and first["syncHash"]
    by_league = await repos.fixtures.get_matches_by_date_range(
        "T20I", "2027-01-15T00:00:00Z", "2027-01-15T12:00:00Z"
    )
    assert [f["matchId"] for f in by_league] == [str(1000 + i) for i in range(7)]  # 09:00 ... 12:00


async def test_second_sync_writes_exactly_the_changed_fixtures(
    repos: Any, sm_client: Any, sportmonks: FakeSportMonks
) -> None:
    sportmonks.schedule = schedule(40)
    clock = Clock(T0)
    settings = FixtureSyncSettings(include_livescores=False)
    await FixtureSyncJob(sm_client, repos, settings, clock=clock).sync_near_window()
    # Another writer's attribute on a fixture that will change: an update must keep it.
    assert await repos.fixtures.update_fixture_fields("1003", {"displayState": {"score": "0/0"}})

    sportmonks.schedule[3] = make_fixture(1003, T0 + HOUR + 3 * HOUR / 2, status="Delayed", note="Rain")
    sportmonks.schedule[7] = make_fixture(1007, T0 + 20 * HOUR)  # rescheduled
    sportmonks.schedule.append(make_fixture(2000, T0 + 30 * HOUR))  # new
    clock.now = T0 + 60
    updates, batches = dynamo_calls("UpdateItem"), dynamo_calls("BatchWriteItem")

    # A new job: nothing in memory, so the stored syncHashes decide.
    report = await FixtureSyncJob(sm_client, repos, settings, clock=clock).sync_near_window()

    assert (report.created, report.updated, report.unchanged) == (1, 2, 38)
    assert sorted(report.written) == ["1003", "1007", "2000"]
    assert dynamo_calls("UpdateItem") - updates == 2 and dynamo_calls("BatchWriteItem") - batches == 1
    items = await stored(repos, [str(1000 + i) for i in range(40)] + ["2000"])
    touched = {mid for mid, it in items.items() if it["updatedAt"] == "2027-01-15T08:01:00Z"}
    assert touched == {"1003", "1007", "2000"}
    assert items["1003"]["status"] == "Delayed" and items["1003"]["note"] == "Rain"
    assert items["1003"]["displayState"] == {"score": "0/0"}  # not ours: kept
    assert items["1007"]["startTime"] == "2027-01-16T04:00:00Z"


async def test_unchanged_near_window_costs_no_dynamodb_call_once_hashes_are_in_memory(
    repos: Any, sm_client: Any, sportmonks: FakeSportMonks
) -> None:
    sportmonks.schedule = schedule(30)
    job = FixtureSyncJob(sm_client, repos, FixtureSyncSettings(include_livescores=False), clock=Clock(T0))
    await job.sync_near_window()
    with count_calls() as calls:
        report = await job.sync_near_window()
    assert calls.n == 0
    assert (report.created, report.updated, report.unchanged) == (0, 0, 30)
    sportmonks.schedule[0] = make_fixture(1000, T0 + HOUR, status="1st Innings")
    with count_calls() as calls:
        report = await job.sync_near_window()
    assert report.updated == 1 and calls.n == 2  # one BatchGetItem for the changed one, one UpdateItem


async def test_livescores_copy_wins_and_a_livescores_error_keeps_the_rest(
    repos: Any, sm_client: Any, sportmonks: FakeSportMonks
) -> None:
    sportmonks.schedule = schedule(5)
    sportmonks.live = [
        make_fixture(1000, T0 + HOUR, status="1st Innings"),
        make_fixture(77, T0 - 30 * HOUR, status="Stump Day 2"),
    ]
    job = FixtureSyncJob(sm_client, repos, FixtureSyncSettings(), clock=Clock(T0))
    report = await job.sync_near_window()
    assert report.created == 6
    items = await stored(repos, ["1000", "77"])
    assert items["1000"]["status"] == "1st Innings"  # fresher than the schedule's NS
    assert items["77"]["status"] == "Stump Day 2"  # a Test that started days ago, only in /livescores

    sportmonks.schedule[1] = make_fixture(1001, T0 + 1.5 * HOUR, status="Delayed")
    sportmonks.fail(path="/livescores", status=503)
    with pytest.raises(SyncIncomplete, match="livescores"):
        await job.sync_near_window()
    assert (await stored(repos, ["1001"]))["1001"]["status"] == "Delayed"  # written despite the error


async def test_bad_fixture_is_skipped_with_its_field_named_and_the_rest_written(
    repos: Any, sm_client: Any
) -> None:
    job = FixtureSyncJob(sm_client, repos, FixtureSyncSettings(), clock=Clock(T0))
    bad = dict(make_fixture(5, T0), starting_at="soon")
    report = await job.write_fixtures([bad, make_fixture(6, T0)], what="near")
    assert report.created == 1 and report.invalid == 1
    assert report.errors == ["near[0].starting_at: expected an ISO 8601 timestamp, got 'soon'"]
    assert set(await stored(repos, ["5", "6"])) == {"6"}


async def test_league_code_comes_from_cricket_leagues_when_the_include_is_missing(
    repos: Any, sm_client: Any
) -> None:
    await repos.leagues.put_league(
        {"leagueId": "5", "name": "Big Bash League", "code": "BBL", "active": True}
    )
    job = FixtureSyncJob(sm_client, repos, FixtureSyncSettings(), clock=Clock(T0))
    await job.write_fixtures([make_fixture(8, T0, league_id=5)])
    assert (await stored(repos, ["8"]))["8"]["leagueCode"] == "BBL"


def test_full_sync_plan_covers_the_range_in_day_aligned_chunks_without_overlap() -> None:
    plan = plan_full_sync(T0, FixtureSyncSettings(full_behind_days=2, full_ahead_days=10, full_chunk_days=5))
    ranges = [c.filters()["starts_between"] for c in plan.chunks]
    assert ranges == [
        "2027-01-13T00:00:00,2027-01-17T23:59:59",
        "2027-01-18T00:00:00,2027-01-22T23:59:59",
        "2027-01-23T00:00:00,2027-01-25T23:59:59",
    ]


async def test_full_sync_resumes_at_the_failed_page_chunk_without_refetching_done_chunks(
    repos: Any, sm_client: Any, sportmonks: FakeSportMonks
) -> None:
    sportmonks.per_page = 5
    day = 24 * HOUR
    # 12 fixtures a week for three weeks, starting today (T0 is 08:00 UTC).
    sportmonks.schedule = [make_fixture(100 + i, T0 + i * (21 * day - 9 * HOUR) / 36) for i in range(36)]
    settings = FixtureSyncSettings(full_behind_days=0, full_ahead_days=20, full_chunk_days=7)
    job = FixtureSyncJob(sm_client, repos, settings, clock=Clock(T0))
    plan = plan_full_sync(T0, settings)
    assert len(plan.chunks) == 3
    second = plan.chunks[1].filters()["starts_between"]
    sportmonks.fail(path="/fixtures", status=500, page="2", **{"filter[starts_between]": second})

    assert await job.full_sync_step() is True
    assert await job.full_sync_step() is False  # page 2 of the second chunk failed
    assert job.plan is not None and (job.plan.done, job.plan.failures) == (1, 1)
    assert await job.full_sync_step() is True  # retried: the same chunk again
    assert await job.full_sync_step() is True
    assert job.plan is None and job.full_syncs_completed == 1
    assert job.last_full is not None and job.last_full.created == 36

    per_chunk: dict[str, list[str]] = {}
    for q in (s.query for s in sportmonks.calls("/fixtures")):
        per_chunk.setdefault(q["filter[starts_between]"], []).append(q.get("page", "1"))
    first, third = plan.chunks[0].filters()["starts_between"], plan.chunks[2].filters()["starts_between"]
    assert per_chunk[first] == ["1", "2", "3"]  # fetched once, never again after the failure
    assert per_chunk[second] == ["1", "2", "1", "2", "3"]  # failed at page 2, then the chunk again
    assert per_chunk[third] == ["1", "2", "3"]
    assert len(await stored(repos, [str(100 + i) for i in range(36)])) == 36


async def test_full_sync_reads_stored_hashes_and_repairs_what_memory_would_hide(
    repos: Any, sm_client: Any, sportmonks: FakeSportMonks
) -> None:
    sportmonks.schedule = schedule(3)
    settings = FixtureSyncSettings(include_livescores=False, full_behind_days=0, full_ahead_days=3)
    job = FixtureSyncJob(sm_client, repos, settings, clock=Clock(T0))
    await job.sync_near_window()
    # Someone deletes a fixture behind the job's back; the near sync (memory says unchanged) would not notice.
    await repos.dynamo.call("cricket-fixtures", "delete_item", Key={"matchId": {"S": "1001"}})
    assert (await job.sync_near_window()).created == 0
    report = await job.full_sync()
    assert report.created == 1 and report.written == ["1001"]


async def test_actor_survives_a_sportmonks_outage_and_syncs_once_it_ends(
    repos: Any, sm_client: Any, sportmonks: FakeSportMonks
) -> None:
    sportmonks.schedule = schedule(4)
    outage = sportmonks.fail(path="/fixtures", status=500, times=None)
    settings = FixtureSyncSettings(
        include_livescores=False,
        near_interval_s=0.05,
        backoff_base_s=0.01,
        backoff_max_s=0.02,
        full_behind_days=0,
        full_ahead_days=1,
    )
    job = FixtureSyncJob(sm_client, repos, settings, clock=Clock(T0))
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(job.run)
            while job.near_failures < 3:  # failing, backing off, still alive
                await trio.sleep(0.01)
            assert job.plan is not None and job.plan.failures >= 1  # the full sync is stuck at chunk 0
            outage.times = 0  # SportMonks is back
            while job.full_syncs_completed < 1 or job.near_failures:
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    assert len(await stored(repos, [str(1000 + i) for i in range(4)])) == 4
    errors = REGISTRY.get_sample_value(
        "sightscreen_job_cycles_total", {"job": "fixture_sync_near", "outcome": "error"}
    )
    assert errors and errors >= 3


async def test_syncs_from_the_project_replay_server_like_from_sportmonks(repos: Any) -> None:
    """The demo and end-to-end runs point the daemon at the replay server: the job must work against it."""
    from datetime import UTC, datetime, timedelta

    from daemon.replay.server import ReplayServer
    from daemon.replay.synth import synthesise
    from daemon.sportmonks.client import SportMonksClient
    from daemon.sportmonks.settings import SportMonksSettings

    now = datetime.now(UTC).replace(microsecond=0)
    tapes = [
        synthesise("T20", i, fixture_id=str(900 + i), starting_at=now + timedelta(hours=i)) for i in range(3)
    ]
    server = ReplayServer(tapes, page_size=2)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        client = SportMonksClient(
            SportMonksSettings(base_url=f"http://127.0.0.1:{port}/api/v2.0", api_token="t", max_retries=0)
        )
        try:
            job = FixtureSyncJob(client, repos, FixtureSyncSettings(), clock=lambda: now.timestamp())
            report = await job.sync_near_window()
        finally:
            await client.aclose()
            server.stop()
    assert report.created == 3 and report.invalid == 0
    items = await stored(repos, ["900", "901", "902"])
    assert {it["leagueCode"] for it in items.values()} == {"SRL"}
    assert server.requests_served["fixtures"] == 2  # two pages of two
    # with no feed view of /livescores given, the job made that call itself: three SportMonks calls in all
    assert server.sportmonks_requests() == 3, server.requests_served


async def test_a_chunk_that_keeps_failing_is_skipped_so_the_rest_of_the_full_sync_goes_on(
    repos: Any, sm_client: Any, sportmonks: FakeSportMonks
) -> None:
    day = 24 * HOUR
    sportmonks.schedule = [make_fixture(100 + i, T0 + i * day) for i in range(21)]
    settings = FixtureSyncSettings(
        full_behind_days=0, full_ahead_days=20, full_chunk_days=7, max_chunk_failures=2
    )
    job = FixtureSyncJob(sm_client, repos, settings, clock=Clock(T0))
    second = plan_full_sync(T0, settings).chunks[1].filters()["starts_between"]
    sportmonks.fail(path="/fixtures", status=500, times=None, **{"filter[starts_between]": second})

    results = [await job.full_sync_step() for _ in range(4)]

    assert results == [True, False, False, True]  # the second chunk failed twice, was skipped, the third ran
    assert job.plan is None and job.full_syncs_completed == 1
    assert job.last_full is not None and job.last_full.created == 14
    assert job.last_full.errors == [f"chunk {second}: skipped after 2 failures"]


async def test_actor_keeps_going_when_the_last_chunk_is_skipped(
    repos: Any, sm_client: Any, sportmonks: FakeSportMonks
) -> None:
    sportmonks.schedule = schedule(2)
    settings = FixtureSyncSettings(
        include_livescores=False,
        near_interval_s=0.05,
        backoff_base_s=0.01,
        backoff_max_s=0.02,
        full_behind_days=0,
        full_ahead_days=1,
        max_chunk_failures=2,
    )
    only = plan_full_sync(T0, settings).chunks[-1].filters()["starts_between"]
    sportmonks.fail(path="/fixtures", status=500, times=None, **{"filter[starts_between]": only})
    job = FixtureSyncJob(sm_client, repos, settings, clock=Clock(T0))
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(job.run)
            while job.full_syncs_completed < 1 or job.last_near is None:
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    assert job.last_full is not None and len(job.last_full.errors) == 1
    assert job.near_failures == 0  # the near window kept syncing throughout
    assert len(await stored(repos, ["1000", "1001"])) == 2


async def test_own_livescores_call_is_skipped_when_the_feeds_budget_is_short(
    repos: Any, sportmonks: FakeSportMonks
) -> None:
    from daemon.sportmonks.client import SportMonksClient
    from daemon.sportmonks.settings import SportMonksSettings

    sportmonks.schedule = schedule(2)
    sportmonks.live = [make_fixture(77, T0 - HOUR, status="1st Innings")]
    settings = SportMonksSettings(
        base_url=sportmonks.base_url,
        api_token="test-token",
        max_retries=0,
        endpoint_budgets={"livescores": 100},
    )
    client = SportMonksClient(settings)
    try:
        job = FixtureSyncJob(
            client, repos, FixtureSyncSettings(livescores_budget_reserve=300), clock=Clock(T0)
        )
        report = await job.sync_near_window()
    finally:
        await client.aclose()
    assert report.created == 2 and sportmonks.calls("/livescores") == []


async def test_a_livescores_provider_replaces_the_call(
    repos: Any, sm_client: Any, sportmonks: FakeSportMonks
) -> None:
    """The daemon can hand in the feed's cached /livescores view, so the job costs that endpoint nothing."""
    sportmonks.schedule = schedule(1)
    cached = [make_fixture(77, T0 - 30 * HOUR, status="Stump Day 2")]

    async def from_feed() -> list[dict[str, Any]]:
        return cached

    job = FixtureSyncJob(sm_client, repos, FixtureSyncSettings(), livescores=from_feed, clock=Clock(T0))
    await repos.leagues.put_league({"leagueId": "3", "name": "T20I", "code": "T20I", "active": True})
    report = await job.sync_near_window()
    assert report.created == 2 and sportmonks.calls("/livescores") == []
    assert (await stored(repos, ["77"]))["77"][
        "leagueCode"
    ] == "T20I"  # no league include: code from the table


async def test_a_restarted_run_resumes_the_full_sync_schedule_instead_of_starting_another(
    repos: Any, sm_client: Any, sportmonks: FakeSportMonks
) -> None:
    # a region-wide job is stopped and run again as its lease comes and goes: the full sync (many calls)
    # must not start over each time
    sportmonks.schedule = schedule(3)
    settings = FixtureSyncSettings(include_livescores=False, near_interval_s=3600.0)
    job = FixtureSyncJob(sm_client, repos, settings, clock=Clock(T0))
    for _ in range(3):
        with trio.move_on_after(3.0):
            await job.run()
    assert job.full_syncs_completed == 1
