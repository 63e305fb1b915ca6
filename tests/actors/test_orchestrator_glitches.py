"""The orchestrator against moto's server: a match ended wrongly is taken again while SportMonks shows it live;
an id the feed released after repeated 404s is not taken; an ended match SportMonks no longer shows live stays
ended; an ended match's follows are removed once its end has stood ``follows_grace_s``, never while the feed
shows it live."""

from __future__ import annotations

import time
from typing import Any

import trio

from actors.orchestrator import Orchestrator
from actors.settings import OrchestratorSettings
from daemon.runtime.supervisor import Supervisor
from tests.doubles import LiveFeedDouble


class IdleActor:
    """A match actor that only holds on (the orchestrator's decisions are what is tested)."""

    def __init__(self, match_id: str, epoch: int) -> None:
        self.match_id = match_id
        self.epoch = epoch

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep_forever()


async def _orchestrator(
    nursery: trio.Nursery, repos: Any, feed: LiveFeedDouble, **settings: Any
) -> tuple[Orchestrator, list[Any]]:
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
        settings=OrchestratorSettings(**({"lease_s": 30} | settings)),
    )
    return orch, started


async def _ended(repos: Any, match_id: str, *, ago_s: float = 0.0) -> None:
    assert await repos.active_matches.register_active_match(match_id, "earlier")
    await repos.active_matches.update_match_state(match_id, "earlier", 1, {"matchPhase": "completed"})
    assert await repos.active_matches.deactivate_match(match_id, "earlier", 1, now=time.time() - ago_s)


async def test_an_ended_match_that_sportmonks_shows_live_is_taken_again_with_its_state(repos: Any) -> None:
    await _ended(repos, "71")
    feed = LiveFeedDouble()
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
    feed = LiveFeedDouble()
    feed.live = [{"id": 72, "status": "Finished", "league_id": 3}]
    async with trio.open_nursery() as nursery:
        orch, started = await _orchestrator(nursery, repos, feed)
        await orch.cycle(full=True)
        assert orch.owned == set() and started == []
        assert (await repos.active_matches.get_active_match_state("72"))["status"] == "ended"
        nursery.cancel_scope.cancel()


async def test_a_released_id_is_not_taken_even_though_livescores_lists_it(repos: Any) -> None:
    feed = LiveFeedDouble()
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
    feed = LiveFeedDouble()
    feed.released = {"124"}
    async with trio.open_nursery() as nursery:
        orch, started = await _orchestrator(nursery, repos, feed)
        await orch.cycle(full=True)
        assert orch.owned == set() and started == []
        nursery.cancel_scope.cancel()


async def _follow(repos: Any, match_id: str, *users: str) -> None:
    for user in users:
        await repos.follows.follow_match(match_id, user, "7", 4_000_000_000)


async def _followers(repos: Any, match_id: str) -> set[str]:
    return {f["userId"] for f in await repos.follows.get_followers_for_match(match_id)}


async def test_an_ended_matchs_follows_are_removed_only_once_its_end_has_stood_the_grace(repos: Any) -> None:
    await _ended(repos, "81", ago_s=600)  # within the 30-min grace
    await _ended(repos, "82", ago_s=3600)  # past it
    await _ended(repos, "83", ago_s=3600)  # past it, but SportMonks shows it in play
    for match_id in ("81", "82", "83"):
        await _follow(repos, match_id, "u1", "u2")
    feed = LiveFeedDouble()
    feed.live = [{"id": 83, "status": "2nd Innings", "league_id": 3}]
    feed.released = {"83"}  # not taken here, so the test sees the sweep's decision alone
    async with trio.open_nursery() as nursery:
        orch, started = await _orchestrator(nursery, repos, feed, follows_grace_s=1800)
        await orch.cycle(full=True)
        assert await _followers(repos, "81") == {"u1", "u2"}
        assert await _followers(repos, "82") == set()
        assert await _followers(repos, "83") == {"u1", "u2"}  # live again: it may be taken back
        marked = await repos.active_matches.get_active_match_state("82")
        assert marked["status"] == "ended" and marked["followsRemovedAt"]
        await orch.cycle(full=False)  # the sweep runs on full cycles only
        await _follow(repos, "82", "u3")  # followed after the removal: left alone, the record says done
        await orch.cycle(full=True)
        assert await _followers(repos, "82") == {"u3"}
        assert started == []
        assert await repos.locks.acquire("match:82", "someone-else", 10)  # the sweep released the lock
        nursery.cancel_scope.cancel()


async def test_a_reopened_match_keeps_its_follows_and_is_swept_again_after_its_next_end(repos: Any) -> None:
    await _ended(repos, "91", ago_s=3600)
    await _follow(repos, "91", "u1")
    feed = LiveFeedDouble()
    feed.live = [{"id": 91, "status": "1st Innings", "league_id": 3}]
    async with trio.open_nursery() as nursery:
        orch, started = await _orchestrator(nursery, repos, feed, follows_grace_s=1800)
        await orch.cycle(full=True)
        assert orch.owned == {"91"} and await _followers(repos, "91") == {"u1"}
        item = await repos.active_matches.get_active_match_state("91")
        assert item["status"] == "active" and "followsRemovedAt" not in item
        nursery.cancel_scope.cancel()
    # Its real end, long ago by now: the sweep removes the follows this time.
    assert await repos.active_matches.deactivate_match("91", "me", 2, now=time.time() - 3600)
    feed.live = []
    async with trio.open_nursery() as nursery:
        orch, _ = await _orchestrator(nursery, repos, feed, follows_grace_s=1800)
        await orch.cycle(full=True)
        assert await _followers(repos, "91") == set()
        nursery.cancel_scope.cancel()
