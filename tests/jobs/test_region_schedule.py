"""A region-wide job's schedule moves with its lease: the next holder carries on where the region was (no
second full fixture sync, no near-window sync before it is due) instead of starting over. On moto's
DynamoDB server and the fake SportMonks server, with the real client."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import trio

from actors.jobs.fixture_sync import FixtureSyncJob, plan_full_sync
from actors.jobs.lease import LeasedJob
from actors.jobs.reference_sync import ReferenceSyncJob
from actors.jobs.settings import FixtureSyncSettings, ReferenceSyncSettings
from tests.doubles import FakeSportMonks
from tests.jobs.sportmonks_data import make_fixture

SETTINGS = FixtureSyncSettings(include_livescores=False, full_behind_days=0, full_ahead_days=14)
LEASE_S, RENEW_S, SKEW_S = 1.5, 0.3, 0.2


def test_a_fixture_sync_schedule_round_trips_through_wall_clock_time() -> None:
    async def main() -> None:
        now = time.time()
        a = FixtureSyncJob(None, _Repos(), SETTINGS)  # type: ignore[arg-type]
        a.adopt_schedule({"nearAt": now + 30, "fullAt": now + 6 * 3600, "plan": {"at": now, "done": 1}})
        assert a.plan is not None and a.plan.done == 1
        state = json.loads(json.dumps(a.schedule_state()))
        assert state["nearAt"] == pytest.approx(now + 30, abs=0.5)
        assert state["fullAt"] == pytest.approx(now + 6 * 3600, abs=0.5)
        b = FixtureSyncJob(None, _Repos(), SETTINGS)  # type: ignore[arg-type]
        b.adopt_schedule(state)
        assert b.plan is not None and b.plan.done == 1 and b.plan.chunks == a.plan.chunks
        again = b.schedule_state()
        assert again["nearAt"] == pytest.approx(state["nearAt"], abs=0.5)
        assert again["fullAt"] == pytest.approx(state["fullAt"], abs=0.5)
        # a finished plan is not handed on; the holder that had begun one drops it
        a.plan = None
        b.adopt_schedule(json.loads(json.dumps(a.schedule_state())))
        assert b.plan is None

    trio.run(main)


def test_a_reference_sync_schedule_round_trips_with_the_cycle_in_progress() -> None:
    async def main() -> None:
        a = ReferenceSyncJob(None, _Repos(), ReferenceSyncSettings())  # type: ignore[arg-type]
        day = time.time() + 86400
        a.adopt_schedule({"cycleAt": day, "pending": [["teams", ""], ["seasons", ""]]})  # leagues done
        b = ReferenceSyncJob(None, _Repos(), ReferenceSyncSettings())  # type: ignore[arg-type]
        b.adopt_schedule(json.loads(json.dumps(a.schedule_state())))
        assert b.pending == [("teams", ""), ("seasons", "")]
        assert b.schedule_state()["cycleAt"] == pytest.approx(day, abs=0.5)

    trio.run(main)


class _Repos:
    fixtures = leagues = None


async def _job_state(repos: Any) -> dict[str, Any] | None:
    item = await repos.locks.read("job:fixture-sync:eu")
    return None if not item or not item.get("jobState") else json.loads(item["jobState"])


async def test_the_next_holder_of_the_fixture_sync_does_not_sync_everything_again(
    repos: Any, sm_client: Any, sportmonks: FakeSportMonks
) -> None:
    sportmonks.schedule = [make_fixture(7000 + i, time.time() + 3600 * (i + 1)) for i in range(5)]
    jobs = {name: FixtureSyncJob(sm_client, repos, SETTINGS) for name in ("a", "b")}
    leased = {
        name: LeasedJob(
            "fixture-sync",
            job,
            locks=repos.locks,
            region="eu",
            owner=name,
            lease_s=LEASE_S,
            renew_every_s=RENEW_S,
            clock_skew_bound_s=SKEW_S,
        )
        for name, job in jobs.items()
    }
    scopes = {name: trio.CancelScope() for name in leased}

    async def run(name: str) -> None:
        with scopes[name]:
            await leased[name].run()

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "a")
            # a syncs the near window and the whole plan, and its renewals carry where it is
            while not (
                (state := await _job_state(repos)) and state["fullAt"] is not None and state["plan"] is None
            ):
                await trio.sleep(0.05)
            assert jobs["a"].full_syncs_completed == 1
            calls = len(sportmonks.calls("/fixtures"))
            assert calls == 1 + len(plan_full_sync(time.time(), SETTINGS).chunks)
            scopes["a"].cancel()  # a goes (its lease is released); b takes the job
            nursery.start_soon(run, "b")
            while not leased["b"].running:
                await trio.sleep(0.05)
            assert leased["b"].adopted == 1
            await trio.sleep(5 * RENEW_S)
            assert len(sportmonks.calls("/fixtures")) == calls, "the region's syncs were done already"
            assert jobs["b"].full_syncs_completed == 0 and jobs["b"].plan is None
            nursery.cancel_scope.cancel()


async def test_an_unreadable_job_state_is_ignored_and_the_job_runs_on_its_own_schedule(
    repos: Any, sm_client: Any, sportmonks: FakeSportMonks
) -> None:
    lease, _ = await repos.locks.acquire_fenced("job:fixture-sync:eu", "x", 0.01)
    assert lease is not None
    await repos.locks.extend_fenced(lease, 0.01, fields={"jobState": "[not json"})
    await trio.sleep(0.05)
    job = FixtureSyncJob(sm_client, repos, SETTINGS)
    leased = LeasedJob(
        "fixture-sync",
        job,
        locks=repos.locks,
        region="eu",
        owner="a",
        lease_s=LEASE_S,
        renew_every_s=RENEW_S,
        clock_skew_bound_s=SKEW_S,
    )
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(leased.run)
            while not sportmonks.calls("/fixtures"):  # the near window at once, as a first start does
                await trio.sleep(0.05)
            assert leased.running and leased.adopted == 0
            nursery.cancel_scope.cancel()
