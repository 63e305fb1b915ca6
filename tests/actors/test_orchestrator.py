"""The orchestrator against moto's server: where live matches come from, lock and fence on taking one,
takeover of a dead owner's match, quarantine after repeated crashes, the match limit and drain.

Match actors are stand-ins (the supervisor only needs ``run``); everything the orchestrator reads and writes
goes through the real repositories on the session's moto server."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
import trio

from actors.lease import LeaseLost
from actors.orchestrator import Orchestrator
from actors.settings import OrchestratorSettings
from daemon.runtime.supervisor import Supervisor
from daemon.store import Dynamo, DynamoSettings, Repositories, create_tables
from daemon.store.local import MotoServer
from daemon.store.locks import match_lock_key
from tests.doubles import LiveFeedDouble

ME = "instance-me"


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class StandIn:
    """A match actor stand-in: ready at once, then does what its script says (run forever by default)."""

    def __init__(self, match_id: str, epoch: int, marquee: bool, behaviour: str) -> None:
        self.match_id = match_id
        self.epoch = epoch
        self.marquee = marquee
        self.behaviour = behaviour
        self.stop = trio.Event()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        if self.behaviour == "crash":
            raise RuntimeError("actor bug")
        if self.behaviour == "lease_lost":
            await self.stop.wait()
            raise LeaseLost("lost")
        await trio.sleep_forever()


class World:
    def __init__(self, repos: Any, nursery: trio.Nursery) -> None:
        self.repos = repos
        self.nursery = nursery
        self.feed = LiveFeedDouble()
        self.supervisor = Supervisor(nursery, max_restarts=1, window_s=60, backoff_s=0)
        self.started: list[StandIn] = []
        self.behaviour: dict[str, str] = {}

    def factory(self, match_id: str, epoch: int, marquee: bool) -> Any:
        actor = StandIn(match_id, epoch, marquee, self.behaviour.get(match_id, "run"))
        self.started.append(actor)
        return actor

    def orchestrator(self, **kwargs: Any) -> Orchestrator:
        settings = kwargs.pop("settings", OrchestratorSettings(lease_s=30))
        return Orchestrator(
            instance_id=ME,
            repos=self.repos,
            feed=self.feed,
            supervisor=self.supervisor,
            actor_factory=self.factory,
            settings=settings,
            **kwargs,
        )

    async def exit_handled(self, match_id: str) -> None:
        """Wait until the match's actor is gone and its lock released (the orchestrator's exit hook ran)."""
        with trio.fail_after(10):
            while f"match:{match_id}" in self.supervisor or await self.lock_owner(match_id) is not None:
                await trio.sleep(0.01)

    async def lock_owner(self, match_id: str) -> str | None:
        lock = await self.repos.locks.get(match_lock_key(match_id))
        return None if lock is None else str(lock["owner"])


@pytest.fixture
async def world(repos: Any) -> AsyncIterator[World]:
    async with trio.open_nursery() as nursery:
        yield World(repos, nursery)
        nursery.cancel_scope.cancel()


async def test_a_live_match_on_livescores_is_locked_registered_and_started(world: World) -> None:
    world.feed.live = [
        {"id": 11, "league_id": 3, "status": "1st Innings"},
        {"id": 12, "league_id": 3, "status": "Finished"},
        {"id": 13, "league_id": 4, "status": "NS"},
    ]
    orch = world.orchestrator(marquee_leagues=[3])
    await orch.cycle()
    assert orch.owned == {"11"}
    assert [(a.match_id, a.epoch, a.marquee) for a in world.started] == [("11", 1, True)]
    record = await world.repos.active_matches.get_active_match_state("11")
    assert record["instanceId"] == ME and record["ownerEpoch"] == 1 and record["leagueId"] == "3"
    assert await world.lock_owner("11") == ME
    assert await world.repos.active_matches.get_active_match_state("12") is None
    assert await world.lock_owner("12") is None


async def test_fixtures_of_active_leagues_in_progress_or_about_to_start_are_taken(world: World) -> None:
    now = time.time()
    await world.repos.leagues.put_league({"leagueId": "5", "code": "T20I", "active": True})
    await world.repos.leagues.put_league({"leagueId": "6", "code": "OFF", "active": False})
    fixtures = [
        ("21", "T20I", now - 3600, "2nd Innings", {}),  # in progress
        ("22", "T20I", now + 300, "NS", {}),  # starts within prestart_s
        ("23", "T20I", now + 7200, "NS", {}),  # too far ahead
        ("24", "T20I", now - 1800, "1st Innings", {"archivedAt": iso(now - 60)}),  # left livescores
        ("25", "T20I", now - 7200, "Finished", {}),
        ("26", "OFF", now - 600, "1st Innings", {}),  # league not active
    ]
    await world.repos.fixtures.batch_write_fixtures(
        [
            {
                "matchId": m,
                "leagueCode": code,
                "leagueId": "5",
                "startTime": iso(start),
                "status": status,
                **extra,
            }
            for m, code, start, status, extra in fixtures
        ]
    )
    orch = world.orchestrator(settings=OrchestratorSettings(lease_s=30, prestart_s=900))
    await orch.cycle()
    assert orch.owned == {"21", "22"}


async def test_a_match_locked_by_a_live_owner_is_left_alone(world: World) -> None:
    assert await world.repos.locks.acquire(match_lock_key("31"), "other", 60)
    world.feed.live = [{"id": 31, "league_id": 3, "status": "1st Innings"}]
    orch = world.orchestrator()
    await orch.cycle()
    assert orch.owned == set() and world.started == []
    assert await world.lock_owner("31") == "other"
    assert await world.repos.active_matches.get_active_match_state("31") is None


async def test_a_dead_owners_match_is_claimed_with_a_higher_epoch(world: World) -> None:
    repos = world.repos
    assert await repos.active_matches.register_active_match("41", "dead", fields={"leagueId": "3"})
    assert await repos.locks.acquire(match_lock_key("41"), "dead", 5, now=time.time() - 60)  # long expired
    orch = world.orchestrator()
    await orch.cycle(full=False)  # the takeover check reads active-matches only
    assert orch.owned == {"41"}
    record = await repos.active_matches.get_active_match_state("41")
    assert record["instanceId"] == ME and record["ownerEpoch"] == 2
    assert [(a.match_id, a.epoch) for a in world.started] == [("41", 2)]
    assert await world.lock_owner("41") == ME


async def test_an_ended_match_is_not_taken_and_its_lock_is_released(world: World) -> None:
    repos = world.repos
    assert await repos.active_matches.register_active_match("51", "old")
    assert await repos.active_matches.deactivate_match("51", "old", 1)
    world.feed.live = [{"id": 51, "league_id": 3, "status": "2nd Innings"}]
    orch = world.orchestrator()
    assert await orch.try_take("51", "3") is False
    assert orch.owned == set() and world.started == []
    assert await world.lock_owner("51") is None


async def test_no_more_than_max_matches_are_taken(world: World) -> None:
    world.feed.live = [{"id": 60 + i, "league_id": 3, "status": "1st Innings"} for i in range(5)]
    orch = world.orchestrator(settings=OrchestratorSettings(lease_s=30, max_matches=2))
    await orch.cycle()
    assert len(orch.owned) == 2
    taken = await world.repos.active_matches.get_all_active_matches()
    assert sorted(item["matchId"] for item in taken) == sorted(orch.owned)


async def test_an_actor_that_loses_its_lease_gives_the_match_back(world: World) -> None:
    world.behaviour["71"] = "lease_lost"
    world.feed.live = [{"id": 71, "league_id": 3, "status": "1st Innings"}]
    orch = world.orchestrator()
    await orch.cycle()
    assert orch.owned == {"71"}
    world.started[0].stop.set()
    await world.exit_handled("71")
    assert orch.owned == set()
    assert len(world.started) == 1  # a lost lease is a normal exit: no restart


async def test_a_match_whose_actor_keeps_crashing_is_quarantined(world: World) -> None:
    world.behaviour["81"] = "crash"
    world.feed.live = [{"id": 81, "league_id": 3, "status": "1st Innings"}]
    orch = world.orchestrator(quarantine_s=600)
    await orch.cycle()
    await world.exit_handled("81")
    assert len(world.started) == 2  # the first run and the one restart the supervisor allows
    assert orch.owned == set()
    await orch.cycle()
    assert len(world.started) == 2 and orch.owned == set()  # quarantined here


async def test_drain_hands_every_match_over_and_takes_no_more(world: World) -> None:
    world.feed.live = [
        {"id": 91, "league_id": 3, "status": "1st Innings"},
        {"id": 92, "league_id": 3, "status": "1st Innings"},
    ]
    orch = world.orchestrator()
    await orch.cycle()
    assert orch.owned == {"91", "92"}
    await orch.drain()
    assert orch.owned == set()
    assert await world.lock_owner("91") is None and await world.lock_owner("92") is None
    world.feed.live.append({"id": 93, "league_id": 3, "status": "1st Innings"})
    await orch.cycle()
    assert orch.owned == set() and len(world.started) == 2


async def test_start_up_recovers_active_matches_before_reporting_ready(world: World) -> None:
    assert await world.repos.active_matches.register_active_match("101", "crashed-earlier")
    world.feed.fail = True  # SportMonks down at start-up: active-matches alone is enough
    orch = world.orchestrator()
    await world.nursery.start(orch.run)
    assert orch.owned == {"101"}
    assert orch.cycles == 1 and orch.last_cycle_error is None


async def test_a_failing_cycle_is_recorded_and_the_loop_goes_on(
    world: World, moto_server: MotoServer, table_prefix: str
) -> None:
    # A Dynamo whose tables do not exist yet: every read fails the way an unreachable DynamoDB does.
    settings = DynamoSettings(
        endpoint_url=moto_server.url, table_prefix=f"{table_prefix}down-", max_attempts=1
    )
    client = Dynamo(settings)
    try:
        world.repos = Repositories(client)
        orch = world.orchestrator()
        await world.nursery.start(orch.run)
        assert orch.cycles == 0 and orch.owned == set()
        assert "ResourceNotFoundException" in (orch.last_cycle_error or "")
        await create_tables(client)  # DynamoDB is back
        assert await world.repos.active_matches.register_active_match("111", "crashed-earlier")
        orch.poke()
        with trio.fail_after(10):
            while orch.cycles == 0:  # the first cycle that got through
                await trio.sleep(0.01)
        assert orch.owned == {"111"} and orch.last_cycle_error is None
    finally:
        client.close()
