"""One fleet per region, in one process: the feed leader, its fenced cache writes, the followers' cache reader
and the region-wide job leases. Pure decisions first; then instances on moto's DynamoDB server (real clock,
short leases) with the in-memory SportMonks fake, one per instance so each instance's calls are counted."""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import trio

from actors.cache_reader import CacheReader, LeaderSummary, WriteDelay, next_read_in, read_step
from actors.feed import FeedActor, FeedUpdate, PollSummary
from actors.feed_leader import (
    FeedLeadership,
    FeedLease,
    FencedFixtureCache,
    leader_view,
    newer_budget,
    next_attempt_at,
    parse_budget,
    region_calls,
    wanted_matches,
)
from actors.jobs.lease import LeasedJob, NoSchedule
from actors.match import MatchActor
from actors.orchestrator import Orchestrator
from actors.settings import OrchestratorSettings
from daemon.metrics import REGISTRY, SPORTMONKS_REGION_CALLS
from daemon.runtime.supervisor import Supervisor
from daemon.sportmonks.budget import CallBudget
from daemon.sportmonks.client import SportMonksClient
from daemon.sportmonks.settings import FeedSettings, SportMonksSettings
from daemon.store.caches import CachePut
from daemon.store.dynamo import count_calls
from daemon.store.locks import match_lock_key
from tests.actors.match_helpers import make_match_actor
from tests.doubles import FakeSportMonks, SilencedLocks, minimal_fixture

LEASE_S = 1.5
RENEW_S = 0.4
SKEW_S = 0.2

# ------------------------------------------------------------------------------------------------ pure


def test_a_follower_contends_just_after_the_lease_it_saw_runs_out() -> None:
    # nothing seen (or a leader): every renewal period
    assert next_attempt_at(10.0, 3.0, None, 10.5, 1000.5) == 13.0
    # a live leader renews long before its lease runs out: the period comes first
    assert next_attempt_at(10.0, 3.0, 1009.0, 10.5, 1000.5) == 13.0
    # the leader's lease runs out within the period (it stopped renewing): just after the expiry
    assert next_attempt_at(10.0, 3.0, 1001.5, 10.5, 1000.5, margin_s=0.05) == 11.55
    # an expiry already past (a refused attempt raced a renewal): not before a tenth of a period
    assert next_attempt_at(10.0, 3.0, 999.0, 10.5, 1000.5) == 10.3


def test_the_reader_aims_at_the_leaders_next_write() -> None:
    assert next_read_in(2.0, 100.0, 100.5, delay_s=0.25) == 1.75
    # the next poll is late: look again a step (a 25th of a cadence) later
    assert next_read_in(2.0, 100.0, 102.3, delay_s=0.25) == 0.08
    assert next_read_in(2.0, 100.0, 104.0, delay_s=0.25) == 0.08
    # never sooner than a step, even when the aim is now
    assert next_read_in(2.0, 100.0, 101.99, delay_s=0.0) == 0.08
    # no leader polls any more (it died, or is being replaced): every half cadence
    assert next_read_in(2.0, 100.0, 104.3, delay_s=0.25) == 1.0
    assert next_read_in(2.0, None, 100.0) == 1.0
    # a follower reads at its leader's cadence: the same plan, from the same configuration
    fake = FakeSportMonks()
    client = SportMonksClient(SportMonksSettings(api_token="t", base_url=fake.base_url))
    feed = FeedActor(client, FeedSettings(livescores_cadence_s=5.0, marquee_cadence_s=2.5), leading=False)
    assert feed.cadence_for(marquee=True) == 2.5 and feed.cadence_for(marquee=False) == 5.0
    derived = FeedActor(client, FeedSettings(), leading=False)
    assert derived.cadence_for(marquee=True) == derived.cadence_for(marquee=False) == derived.plan.cadence_s


def test_the_write_delay_is_measured_down_to_what_the_leader_takes_now() -> None:
    delay = WriteDelay(samples=3)
    step = read_step(2.5)
    assert delay.estimate(2.5) == 0.25 and delay.describe() is None  # before any poll was seen arriving
    # polls first seen 0.6 s, 0.4 s and 0.5 s after their fetch: aim a step under the smallest
    for seen in (0.6, 0.4, 0.5):
        delay.add(seen)
    assert delay.estimate(2.5) == pytest.approx(0.4 - step) and delay.describe() == 0.4
    # a read at that aim that already finds the poll brings the estimate down a step
    delay.add(0.4 - step)
    assert delay.estimate(2.5) == pytest.approx(0.4 - 2 * step)
    # old samples leave: after a slow spell (the leader's writes take longer) the aim follows it up
    for seen in (1.0, 1.1, 0.9):
        delay.add(seen)
    assert delay.estimate(2.5) == pytest.approx(0.9 - step)
    # a sample under zero (this reader's clock is behind the leader's) counts as zero; never past half a cadence
    delay.add(-0.3)
    assert delay.estimate(2.5) == 0.0
    slow = WriteDelay()
    slow.add(5.0)
    assert slow.estimate(2.5) == 1.25


def test_the_region_budget_is_handed_on_without_counting_twice() -> None:
    clock = [1000.0]
    old = CallBudget(default_limit=10, clock=lambda: clock[0])
    for _ in range(4):
        assert old.try_take("livescores")
        clock[0] += 30
    to_wall = 5000.0  # this process's clock + 5000 = epoch seconds
    record = old.export(to_wall=to_wall)
    assert sum(c for _, c in record["livescores"]) == 4
    assert region_calls(record, clock[0] + to_wall) == {"livescores": 4}
    assert region_calls(record, clock[0] + to_wall + 3600) == {"livescores": 0}
    # the next leader, on another clock, takes the record over; handed back later it does not double
    other = [50.0]
    new = CallBudget(default_limit=10, clock=lambda: other[0])
    new_to_wall = clock[0] + to_wall - other[0]
    new.seed(record, to_wall=new_to_wall, recorded_at=clock[0] + to_wall)
    assert new.used("livescores") == 4 and new.remaining("livescores") == 6
    assert new.try_take("livescores")
    again = new.export(to_wall=new_to_wall)
    old.seed(again, to_wall=to_wall, recorded_at=other[0] + new_to_wall)
    assert old.used("livescores") == 5
    other[0] += 3601
    assert new.used("livescores") == 0  # seeded calls leave the window like real ones


def test_a_new_leader_takes_the_fresher_call_record_of_the_lock_item_and_the_summary() -> None:
    lock_item = {"budget": '{"livescores": [[95.0, 7]]}', "budgetAt": 99.0}
    later = {"budget": {"livescores": [[95.0, 7], [101.0, 2]]}, "budgetAt": 101.5}
    assert newer_budget(lock_item, later) == (later["budget"], 101.5)  # calls since the last renewal count
    assert newer_budget(lock_item, {**later, "budgetAt": 98.0}) == ({"livescores": [[95.0, 7]]}, 99.0)
    assert newer_budget(None, later) == (later["budget"], 101.5)
    assert newer_budget(lock_item, {}) == ({"livescores": [[95.0, 7]]}, 99.0)
    assert newer_budget(lock_item, {"budget": {"livescores": []}, "budgetAt": "soon"}) == (
        {"livescores": [[95.0, 7]]},
        99.0,
    )  # an unreadable summary record is ignored


def test_parse_budget_and_leader_view() -> None:
    assert parse_budget(None) is None
    assert parse_budget({"budget": "not json"}) is None
    item = {
        "lockKey": "feed:eu",
        "owner": "a",
        "epoch": 3,
        "expiresAt": 110.0,
        "acquiredAt": 90.0,
        "lastPollAt": 99.0,
        "budget": '{"livescores": [[95.0, 7]]}',
        "budgetAt": 99.0,
    }
    view = leader_view(item, "b", 100.0)
    assert view["leader"] == "a" and view["epoch"] == 3 and not view["leading"]
    assert view["last_poll_age_s"] == 1.0 and view["region_calls_last_hour"] == {"livescores": 7}
    assert leader_view(item, "a", 111.0)["leader"] is None  # run out: nobody leads now
    assert leader_view(None, "a", 0.0)["leader"] is None


def test_the_leader_polls_every_active_match_of_the_region() -> None:
    active = [
        {"matchId": "1", "status": "active", "leagueId": "5"},
        {"matchId": "2", "status": "active", "leagueId": "3"},
        {"matchId": "3", "status": "ended", "leagueId": "5"},
    ]
    assert wanted_matches(active, [5]) == {"1": True, "2": False}


# ------------------------------------------------------------------------------------------------ on moto


@dataclass
class Member:
    name: str
    fake: FakeSportMonks
    feed: FeedActor
    leadership: FeedLeadership
    reader: CacheReader
    cache: FencedFixtureCache  # where its feed writes while it leads
    scope: trio.CancelScope
    silenced: SilencedLocks  # the lock table as its leadership reaches it


def _member(
    name: str, repos: Any, live: list[dict[str, Any]], **feed_settings: Any
) -> tuple[FakeSportMonks, FeedActor, FeedLeadership, CacheReader, FencedFixtureCache, SilencedLocks]:
    fake = FakeSportMonks()
    fake.live = live  # the same list object: both fakes serve the same live matches
    client = SportMonksClient(
        SportMonksSettings(
            api_token="secret-token", base_url=fake.base_url, max_retries=0, hourly_budget=1_000_000
        ),
        http=httpx.AsyncClient(transport=fake.transport()),
        rng=random.Random(1),
    )
    settings = FeedSettings(
        **{
            "list_endpoints": ["livescores"],
            "livescores_cadence_s": 0.2,
            "marquee_cadence_s": 0.2,
            **feed_settings,
        }
    )
    # wired as the daemon wires them (daemon.runtime.assembly): the feed is built whole
    silenced = SilencedLocks(repos.locks)
    lease = FeedLease(silenced, "eu", name, lease_s=LEASE_S, renew_every_s=RENEW_S, clock_skew_bound_s=SKEW_S)
    summary = LeaderSummary(repos.fixture_cache, region="eu", stale_after_s=2 * LEASE_S)
    cache = FencedFixtureCache(lease, repos)
    feed = FeedActor(client, settings, fixture_cache=cache, leader_summary=summary, leading=False)
    leadership = FeedLeadership(feed=feed, lease=lease, repos=repos)
    reader = CacheReader(feed, repos.fixture_cache, settings, region="eu", summary=summary)
    return fake, feed, leadership, reader, cache, silenced


@asynccontextmanager
async def member(
    nursery: trio.Nursery,
    name: str,
    repos: Any,
    live: list[dict[str, Any]],
    *,
    reader_runs: bool = True,
    **feed_settings: Any,
) -> AsyncIterator[Member]:
    """An instance: feed, leadership and cache reader (``reader_runs=False``: the test calls
    ``reader.read_once`` itself, one read at a time)."""
    fake, feed, leadership, reader, cache, silenced = _member(name, repos, live, **feed_settings)
    scope = trio.CancelScope()

    async def run(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with scope:
            async with trio.open_nursery() as inner:
                await inner.start(feed.run)
                await inner.start(leadership.run)
                if reader_runs:
                    await inner.start(reader.run)
                task_status.started()

    await nursery.start(run)
    yield Member(name, fake, feed, leadership, reader, cache, scope, silenced)
    scope.cancel()


def _silence(m: Member) -> None:
    """The member's leadership gets no more answers to its lease calls, as a paused process or a dead link
    would (its feed and cache writer carry on, so what they try to write past the lease's end is seen
    refused)."""
    m.silenced.silent = True


async def _next_good(channel: trio.MemoryReceiveChannel[FeedUpdate]) -> FeedUpdate:
    while True:
        update = await channel.receive()
        if update.fixture is not None:
            return update


async def test_a_follower_gets_its_fixtures_from_the_leaders_cache_and_calls_sportmonks_never(
    repos: Any,
) -> None:
    live = [minimal_fixture(11, score=1), minimal_fixture(12, score=5)]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            async with member(nursery, "a", repos, live) as a, member(nursery, "b", repos, live) as b:
                assert a.leadership.leading and not b.leadership.leading
                # the leader polls for the region's matches (active-matches) even though none runs on it
                for match_id in ("11", "12"):
                    assert await repos.active_matches.register_active_match(
                        match_id, "b", fields={"leagueId": "3"}
                    )
                u11 = b.feed.subscribe("11", marquee=False)
                u12 = b.feed.subscribe("12", marquee=False)
                first = await _next_good(u11)
                assert first.fixture is not None and first.fixture["runs"][0]["score"] == 1
                assert (await _next_good(u12)).fixture is not None
                live[0] = minimal_fixture(11, score=4)
                while (update := await _next_good(u11)).fixture["runs"][0]["score"] != 4:  # type: ignore[index]
                    pass
                assert update.fetched_at <= time.time()
                assert b.fake.requests == []  # the follower never called SportMonks
                assert a.fake.calls("/livescores")
                # one BatchGetItem per read for both matches: reads, not reads per match
                assert b.reader.reads >= 1 and b.reader.delivered >= 3
                # the reader saw the leader's polls arrive and aims by how long their writes took
                assert b.reader.write_delay.describe() is not None
                assert b.reader.describe()["write_delay_s"] == b.reader.write_delay.describe() >= 0
                assert await b.feed.livescores(max_age_s=5) == [
                    {
                        "id": 11,
                        "status": "1st Innings",
                        "league_id": 3,
                        "starting_at": live[0]["starting_at"],
                        "localteam_id": 1,
                        "visitorteam_id": 39,
                    },
                    {
                        "id": 12,
                        "status": "1st Innings",
                        "league_id": 3,
                        "starting_at": live[1]["starting_at"],
                        "localteam_id": 1,
                        "visitorteam_id": 39,
                    },
                ]
                # the leader goes away: the follower takes the lease and polls on, its subscriber served
                # in process now
                a.scope.cancel()
                with trio.fail_after(LEASE_S + 2 * RENEW_S + 2):
                    while not b.leadership.leading:
                        await trio.sleep(0.05)
                live[0] = minimal_fixture(11, score=9)
                while (update := await _next_good(u11)).fixture["runs"][0]["score"] != 9:  # type: ignore[index]
                    pass
                assert update.source == "livescores" and b.fake.calls("/livescores")
                item = await repos.locks.read("feed:eu")
                assert item["owner"] == "b" and item["epoch"] == 2
                assert parse_budget(item) is not None or b.leadership.lease is not None
                nursery.cancel_scope.cancel()


async def test_a_follower_that_owns_no_match_still_sees_the_leaders_polls(repos: Any) -> None:
    """Readiness judges the region's feed by the leader's newest poll; an engine given no match yet reads the
    leader's summary all the same (one item a read), so it does not answer "not ready" for owning nothing."""
    live = [minimal_fixture(11, score=1)]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            async with member(nursery, "a", repos, live) as a, member(nursery, "b", repos, live) as b:
                assert a.leadership.leading and not b.leadership.leading
                # a match of the region (the leader polls for it), owned by neither
                assert await repos.active_matches.register_active_match("11", "c", fields={"leagueId": "3"})
                assert b.feed.local_subscriptions() == {}
                while b.reader.last_poll_at is None:
                    await trio.sleep(0.05)
                first = b.reader.last_poll_at
                while b.reader.last_poll_at == first:  # and follows each poll after it
                    await trio.sleep(0.05)
                assert b.reader.last_poll_at > first
                assert b.reader.delivered == 0 and b.fake.requests == []
                nursery.cancel_scope.cancel()


async def test_a_leader_whose_lease_ran_out_writes_nothing_and_the_next_takes_over(repos: Any) -> None:
    live = [minimal_fixture(21, score=1)]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            assert await repos.active_matches.register_active_match("21", "x", fields={"leagueId": "3"})
            async with member(nursery, "a", repos, live) as a:
                with trio.fail_after(5):
                    while not (await repos.fixture_cache.batch_get_entries(["21"])):
                        await trio.sleep(0.05)
                # a stops renewing (as if paused): by its own clock the lease runs out, and it stops writing
                lease = a.leadership.lease
                assert lease is not None
                _silence(a)
                with trio.fail_after(LEASE_S + 1):
                    while a.leadership.leading:
                        await trio.sleep(0.05)
                before = (await repos.fixture_cache.batch_get_entries(["21"]))["21"].stamp
                live[0] = minimal_fixture(21, score=7)
                await trio.sleep(0.5)
                after = (await repos.fixture_cache.batch_get_entries(["21"]))["21"]
                assert after.stamp == before and after.fixture()["runs"][0]["score"] == 1
                # another instance takes the lease with a higher epoch; the old lease's writes are refused
                async with member(nursery, "b", repos, live) as b:
                    with trio.fail_after(LEASE_S + 2):
                        while not b.leadership.leading:
                            await trio.sleep(0.05)
                    assert b.leadership.lease is not None and b.leadership.lease.epoch == lease.epoch + 1
                    with trio.fail_after(5):
                        while (await repos.fixture_cache.batch_get_entries(["21"]))[
                            "21"
                        ].epoch != lease.epoch + 1:
                            await trio.sleep(0.05)
                nursery.cancel_scope.cancel()


async def test_a_polls_fixtures_and_its_summary_are_one_transaction(repos: Any) -> None:
    """What one poll changed and the poll's summary cost one DynamoDB call, and a reader that sees the
    summary's ``fetchedAt`` sees every fixture of the poll; past 99 items the summary is in the last
    transaction."""
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            async with member(nursery, "a", repos, []) as a:
                assert a.leadership.leading
                cache = a.cache
                ids = ("31", "32", "33")
                puts = [CachePut(m, minimal_fixture(int(m), score=4), 600.0, 1000.0) for m in ids]
                with count_calls() as calls:
                    await cache.put_poll(puts, PollSummary([{"id": int(m)} for m in ids], 1000.0, {}))
                assert calls.n == 1
                got = await repos.fixture_cache.batch_get_region_stamps(list(ids), "eu")
                assert got.polled_at == 1000.0 and set(got.stamps) == set(ids)
                entries = await repos.fixture_cache.batch_get_entries(list(ids))
                assert {m: e.fixture()["runs"][0]["score"] for m, e in entries.items()} == dict.fromkeys(
                    ids, 4
                )

                many = [CachePut(str(100 + i), minimal_fixture(100 + i), 600.0, 2000.0) for i in range(120)]
                with count_calls() as calls:
                    await cache.put_poll(many, PollSummary([], 2000.0, {}))
                assert calls.n == 2
                got = await repos.fixture_cache.batch_get_region_stamps([p.match_id for p in many], "eu")
                assert got.polled_at == 2000.0 and len(got.stamps) == 120
                nursery.cancel_scope.cancel()


class CountingJob(NoSchedule):
    """A region job (``actors.ports.RegionJob``) that counts its starts and runs until cancelled."""

    def __init__(self) -> None:
        self.starts = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        self.starts += 1
        await trio.sleep_forever()

    def stats(self) -> dict[str, Any]:
        return {"starts": self.starts}


async def test_a_region_job_runs_on_one_instance_at_a_time_and_moves_when_its_holder_stops(
    repos: Any,
) -> None:
    jobs = {name: CountingJob() for name in ("a", "b", "c")}
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
            for name in leased:
                nursery.start_soon(run, name)
            overlap = 0
            deadline = trio.current_time() + 4 * LEASE_S
            holders_seen: list[str] = []
            while trio.current_time() < deadline:
                running = [n for n, job in leased.items() if job.running]
                overlap = max(overlap, len(running))
                if running and (not holders_seen or holders_seen[-1] != running[0]):
                    holders_seen.append(running[0])
                if len(holders_seen) == 1 and trio.current_time() > deadline - 3 * LEASE_S:
                    scopes[holders_seen[0]].cancel()  # the holder stops: another takes the job
                await trio.sleep(0.02)
            assert overlap == 1
            assert len(holders_seen) >= 2
            assert sum(j.starts for j in jobs.values()) == len(holders_seen)
            nursery.cancel_scope.cancel()


async def test_a_job_tied_to_the_feed_leader_runs_only_there(repos: Any) -> None:
    job = CountingJob()
    leads = [False]
    leased = LeasedJob(
        "reference-sync",
        job,
        locks=repos.locks,
        region="eu",
        owner="a",
        lease_s=LEASE_S,
        renew_every_s=RENEW_S,
        clock_skew_bound_s=SKEW_S,
        may_run=lambda: leads[0],
    )
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(leased.run)
            await trio.sleep(3 * RENEW_S)
            assert job.starts == 0
            leads[0] = True
            while not leased.running:
                await trio.sleep(0.05)
            leads[0] = False
            while await repos.locks.get("job:reference-sync:eu") is not None:  # released for the next leader
                await trio.sleep(0.05)
            assert not leased.running
            nursery.cancel_scope.cancel()


# ------------------------------------------------------------------------------------------------ 404 region-wide

NOT_FOUND = {"not_found_max_tries": 3, "not_found_backoff_s": 0.1, "not_found_release_s": 600.0}


def _match_actors(instance_id: str, repos: Any, feed: FeedActor) -> Any:
    def factory(match_id: str, epoch: int, marquee: bool) -> MatchActor:
        return make_match_actor(
            match_id,
            repos,
            owner=instance_id,
            epoch=epoch,
            feed=feed,
            marquee=marquee,
            lease_s=10.0,
            routine_after_s=1.0,
        )

    return factory


async def _feed_state(repos: Any) -> dict[str, Any]:
    got = await repos.fixture_cache.get_livescores_summary_and_state("eu")
    return {} if got is None else got[2]


async def test_a_fixture_the_leader_released_after_404s_is_let_go_on_a_follower_and_not_taken_again(
    repos: Any,
) -> None:
    live = [minimal_fixture(123, score=1)]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            async with (
                member(nursery, "a", repos, live, **NOT_FOUND) as a,
                member(nursery, "b", repos, live, **NOT_FOUND) as b,
            ):
                assert a.leadership.leading and not b.leadership.leading
                orch = Orchestrator(
                    instance_id="b",
                    repos=repos,
                    feed=b.feed,
                    supervisor=Supervisor(nursery, max_restarts=3, window_s=60, backoff_s=0.1),
                    actor_factory=_match_actors("b", repos, b.feed),
                    settings=OrchestratorSettings(),
                )
                await a.feed.livescores()  # as the leader's own orchestrator asks each cycle
                while not await _feed_state(repos):  # that summary is in the cache
                    await trio.sleep(0.05)
                await orch.cycle()
                assert orch.owned == {"123"}, "the follower takes the id the leader's /livescores lists"
                # the id leaves /livescores and SportMonks does not know it: the leader's /fixtures/123 is a 404
                live.clear()
                while "123" not in (await _feed_state(repos))["notFound"]["released"]:
                    await trio.sleep(0.05)
                assert len(a.fake.calls("/fixtures/123")) == 3
                live.append(minimal_fixture(123, score=1))  # the corrupted id is listed again
                # the follower's orchestrator reads the verdict with the summary; its match actor lets go
                while orch.owned:
                    await orch.cycle()
                    await trio.sleep(0.1)
                assert (await repos.active_matches.get_active_match_state("123"))["status"] == "idle"
                assert await repos.locks.get(match_lock_key("123")) is None
                assert b.feed.is_released("123")
                for _ in range(3):  # listed on every cycle, never taken again
                    await orch.cycle()
                    await trio.sleep(0.25)
                assert not orch.owned
                assert (await repos.active_matches.get_active_match_state("123"))["status"] == "idle"
                assert len(a.fake.calls("/fixtures/123")) == 3 and b.fake.requests == []
                nursery.cancel_scope.cancel()


async def test_a_new_leader_spends_only_what_is_left_of_a_404_ids_tries(repos: Any) -> None:
    slow = {**NOT_FOUND, "not_found_backoff_s": 3.0}  # the third try is due 6 s after the second
    live = [minimal_fixture(124, score=1)]
    with trio.fail_after(40):
        async with trio.open_nursery() as nursery:
            async with (
                member(nursery, "a", repos, live, **slow) as a,
                member(nursery, "b", repos, live, **slow) as b,
            ):
                assert await repos.active_matches.register_active_match("124", "c", fields={"leagueId": "3"})
                while not a.feed.stats()["subscribers"]:  # the leader polls for the region's match
                    await trio.sleep(0.05)
                live.clear()
                while (await _feed_state(repos)).get("notFound", {}).get("tries", {}).get("124") != 2:
                    await trio.sleep(0.05)
                a.scope.cancel()  # the leader dies between the second try and the third
                assert len(a.fake.calls("/fixtures/124")) == 2
                while not b.feed.is_released("124"):
                    await trio.sleep(0.05)
                assert b.leadership.leading
                assert len(b.fake.calls("/fixtures/124")) == 1, "the bound is the region's, not each leader's"
                # the verdict is handed on with the new leader's summaries as well
                while "124" not in (await _feed_state(repos))["notFound"]["released"]:
                    await trio.sleep(0.05)
                await trio.sleep(1.0)
                assert len(b.fake.calls("/fixtures/124")) == 1
                nursery.cancel_scope.cancel()


async def test_a_release_reaches_a_followers_match_actor_with_the_next_cache_read(repos: Any) -> None:
    """No orchestrator cycle in between: the verdict rides on the read the cache reader makes each tick."""
    live = [minimal_fixture(125, score=1)]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            async with (
                member(nursery, "a", repos, live, **NOT_FOUND) as a,
                member(nursery, "b", repos, live, reader_runs=False, **NOT_FOUND) as b,
            ):
                assert a.leadership.leading and not b.leadership.leading
                orch = Orchestrator(
                    instance_id="b",
                    repos=repos,
                    feed=b.feed,
                    supervisor=Supervisor(nursery, max_restarts=3, window_s=60, backoff_s=0.1),
                    actor_factory=_match_actors("b", repos, b.feed),
                    settings=OrchestratorSettings(),
                )
                await a.feed.livescores()
                while not await _feed_state(repos):
                    await trio.sleep(0.05)
                await orch.cycle()  # the last cycle: the release must not wait for another
                assert orch.owned == {"125"}
                live.clear()  # the id leaves /livescores and SportMonks answers 404 for it
                while "125" not in (
                    (await repos.fixture_cache.batch_get_region_stamps([], "eu")).not_found or {}
                ).get("released", {}):
                    await trio.sleep(0.05)
                assert len(a.fake.calls("/fixtures/125")) == 3
                await trio.sleep(0.3)
                assert orch.owned == {"125"} and not b.feed.is_released("125"), "nothing told b yet"
                reads = b.reader.reads
                await b.reader.read_once()  # one read: the match actor lets go on it
                while orch.owned:
                    await trio.sleep(0.05)
                assert b.reader.reads == reads + 1 and b.reader.released_by_read == 1
                # the same read brought the leader's heartbeat: its last poll, from the summary
                summary = await repos.fixture_cache.get_livescores_summary("eu")
                assert summary is not None and b.reader.last_poll_at is not None
                assert b.reader.last_poll_at <= summary[1]
                assert b.feed.is_released("125")
                assert (await repos.active_matches.get_active_match_state("125"))["status"] == "idle"
                assert await repos.locks.get(match_lock_key("125")) is None
                await b.reader.read_once()  # the same verdicts again: nothing new released
                assert b.reader.released_by_read == 1
                assert b.fake.requests == []
                nursery.cancel_scope.cancel()


async def test_a_follower_takes_a_silent_leaders_lease_as_it_runs_out_not_a_period_later(repos: Any) -> None:
    live = [minimal_fixture(41, score=1)]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            async with member(nursery, "a", repos, live) as a, member(nursery, "b", repos, live) as b:
                assert a.leadership.leading and not b.leadership.leading
                b.leadership.renew_every_s = 60.0  # b's own period would come far too late
                await trio.sleep(2 * RENEW_S)  # b's next attempts, a period of the old length apart
                # a stops renewing, as if it died: its lease runs out at the expiry b saw
                _silence(a)
                with trio.fail_after(LEASE_S + 10):  # a period of b's would be 60 s
                    while not b.leadership.leading:
                        await trio.sleep(0.05)
                assert b.leadership.lease is not None and b.leadership.lease.epoch == 2
                nursery.cancel_scope.cancel()


async def test_a_new_leaders_first_poll_serves_every_match_of_the_region(repos: Any) -> None:
    """The successor owns match 52 itself and polls for 51 (another instance's): both are written to the
    cache from its very first /livescores answer."""
    live = [minimal_fixture(51, score=1), minimal_fixture(52, score=2)]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            assert await repos.active_matches.register_active_match("51", "c", fields={"leagueId": "3"})
            assert await repos.active_matches.register_active_match("52", "b", fields={"leagueId": "3"})
            async with member(nursery, "a", repos, live) as a, member(nursery, "b", repos, live) as b:
                assert a.leadership.leading and not b.leadership.leading
                b.feed.subscribe("52", marquee=False)
                with trio.fail_after(5):
                    while len(await repos.fixture_cache.batch_get_entries(["51", "52"])) < 2:
                        await trio.sleep(0.05)
                a.scope.cancel()  # the leader goes; b takes the lease
                with trio.fail_after(LEASE_S + 2 * RENEW_S + 2):
                    while True:
                        entries = await repos.fixture_cache.batch_get_entries(["51", "52"])
                        if all(e.epoch == 2 for e in entries.values()):
                            break
                        await trio.sleep(0.05)
                # one poll, one fetch time (the fixtures do not change: neither is written twice)
                assert entries["51"].fetched_at == entries["52"].fetched_at
                assert sorted(e.seq for e in entries.values()) == [1, 2]
                nursery.cancel_scope.cancel()


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_the_fleet_metrics_count_leader_changes_cache_age_at_read_and_the_regions_calls(
    repos: Any,
) -> None:
    live = [minimal_fixture(61, score=1)]
    SPORTMONKS_REGION_CALLS.labels("livescores").set(0)  # a gauge: what earlier tests left is not ours
    changes0 = _sample("sightscreen_feed_leader_changes_total")
    ages0 = _sample("sightscreen_fixture_cache_age_seconds_count")
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            assert await repos.active_matches.register_active_match("61", "b", fields={"leagueId": "3"})
            async with member(nursery, "a", repos, live) as a, member(nursery, "b", repos, live) as b:
                # which one leads is the lease's choice (on a loaded machine it may even change hands):
                # the counter must follow every change the members themselves saw
                def changes() -> int:
                    return a.leadership.became_leader + b.leadership.became_leader

                while not (a.leadership.leading or b.leadership.leading):
                    await trio.sleep(0.05)
                leader, follower = (a, b) if a.leadership.leading else (b, a)
                assert changes() >= 1
                assert _sample("sightscreen_feed_leader_changes_total") - changes0 == changes()
                u61 = follower.feed.subscribe("61", marquee=False)
                await _next_good(u61)  # read from the cache on the follower: its age at read is observed
                assert _sample("sightscreen_fixture_cache_age_seconds_count") - ages0 >= 1
                # the region's calls in the last hour: the leaders' count, renewed with the lease
                while not _sample("sightscreen_sportmonks_region_calls_last_hour", endpoint="livescores"):
                    await trio.sleep(0.05)
                made = len(a.fake.calls("/livescores")) + len(b.fake.calls("/livescores"))
                assert (
                    1
                    <= _sample("sightscreen_sportmonks_region_calls_last_hour", endpoint="livescores")
                    <= made
                )
                leader.scope.cancel()
                while not follower.leadership.leading:
                    await trio.sleep(0.05)
                assert changes() >= 2
                assert _sample("sightscreen_feed_leader_changes_total") - changes0 == changes()
                assert _sample("sightscreen_feed_leader") == 1
                nursery.cancel_scope.cancel()
