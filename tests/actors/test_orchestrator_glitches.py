"""The orchestrator against moto's server: a match ended wrongly is taken again while SportMonks shows it live;
an id the feed released after repeated 404s is not taken; an ended match SportMonks no longer shows live stays
ended."""

from __future__ import annotations

from typing import Any

import trio

from actors.orchestrator import Orchestrator
from actors.settings import OrchestratorSettings
from daemon.supervisor import Supervisor


class FakeFeed:
    """What the orchestrator asks of the feed: ``livescores`` and ``is_released``."""

    def __init__(self) -> None:
        self.live: list[dict[str, Any]] = []
        self.released: set[str] = set()

    async def livescores(self, *, max_age_s: float | None = None) -> list[dict[str, Any]]:
        return list(self.live)

    def is_released(self, match_id: str) -> bool:
        return match_id in self.released


class IdleActor:
    """A match actor that only holds on (the orchestrator's decisions are what is tested)."""

    def __init__(self, match_id: str, epoch: int) -> None:
        self.match_id = match_id
        self.epoch = epoch

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep_forever()


async def _orchestrator(nursery: trio.Nursery, repos: Any, feed: FakeFeed) -> tuple[Orchestrator, list[Any]]:
    started: list[IdleActor] = []

    def factory(match_id: str, epoch: int, marquee: bool) -> IdleActor:
        actor = IdleActor(match_id, epoch)
        started.append(actor)
        return actor

    supervisor = Supervisor(nursery, max_restarts=3, window_s=60, backoff_s=0.1)
    orch = Orchestrator(
        instance_id="me",
        repos=repos,
        feed=feed,
        supervisor=supervisor,
        actor_factory=factory,
        settings=OrchestratorSettings(lease_s=30),
    )
    return orch, started


async def _ended(repos: Any, match_id: str) -> None:
    assert await repos.active_matches.register_active_match(match_id, "earlier")
    await repos.active_matches.update_match_state(match_id, "earlier", 1, {"matchPhase": "completed"})
    assert await repos.active_matches.deactivate_match(match_id, "earlier", 1)


async def test_an_ended_match_that_sportmonks_shows_live_is_taken_again_with_its_state(repos: Any) -> None:
    await _ended(repos, "71")
    feed = FakeFeed()
    feed.live = [{"id": 71, "status": "2nd Innings", "league_id": 3}]
    async with trio.open_nursery() as nursery:
        orch, started = await _orchestrator(nursery, repos, feed)
        await orch.cycle(full=True)
        assert orch.owned == {"71"} and [a.epoch for a in started] == [2]
        item = await repos.active_matches.get_active_match_state("71")
        assert item["status"] == "active" and item["instanceId"] == "me" and item["ownerEpoch"] == 2
        assert item["matchPhase"] == "completed" and "ttl" not in item  # the engine's state is kept
        nursery.cancel_scope.cancel()


async def test_an_ended_match_sportmonks_lists_as_finished_stays_ended(repos: Any) -> None:
    await _ended(repos, "72")
    feed = FakeFeed()
    feed.live = [{"id": 72, "status": "Finished", "league_id": 3}]
    async with trio.open_nursery() as nursery:
        orch, started = await _orchestrator(nursery, repos, feed)
        await orch.cycle(full=True)
        assert orch.owned == set() and started == []
        assert (await repos.active_matches.get_active_match_state("72"))["status"] == "ended"
        nursery.cancel_scope.cancel()


async def test_a_released_id_is_not_taken_even_though_livescores_lists_it(repos: Any) -> None:
    feed = FakeFeed()
    feed.live = [{"id": 123, "status": "1st Innings"}, {"id": 73, "status": "1st Innings"}]
    feed.released = {"123"}
    async with trio.open_nursery() as nursery:
        orch, started = await _orchestrator(nursery, repos, feed)
        await orch.cycle(full=True)
        assert orch.owned == {"73"}
        assert await repos.active_matches.get_active_match_state("123") is None
        feed.released.clear()  # not_found_release_s later
        await orch.cycle(full=True)
        assert orch.owned == {"73", "123"}
        nursery.cancel_scope.cancel()


async def test_a_released_match_is_idled_and_may_be_registered_again(repos: Any) -> None:
    repo = repos.active_matches
    assert await repo.register_active_match("74", "me")
    assert not await repo.release_match("74", "other", 1)  # fenced
    assert await repo.release_match("74", "me", 1, ttl_s=60)
    item = await repo.get_active_match_state("74")
    assert item["status"] == "idle" and item["ttl"] > 0
    assert await repo.reopen_ended_match("74", "me") is None  # idle is not ended
    assert await repo.register_active_match("74", "someone")


async def test_a_released_id_is_not_taken_from_any_source(repos: Any) -> None:
    assert await repos.active_matches.register_active_match("124", "someone-gone")  # an active record
    feed = FakeFeed()
    feed.released = {"124"}
    async with trio.open_nursery() as nursery:
        orch, started = await _orchestrator(nursery, repos, feed)
        await orch.cycle(full=True)
        assert orch.owned == set() and started == []
        nursery.cancel_scope.cancel()
