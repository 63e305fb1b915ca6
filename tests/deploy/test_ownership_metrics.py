"""The ownership metrics the alert rules join across instances, exported by the orchestrator over real
DynamoDB tables (moto): ``sightscreen_match_owner_epoch`` (one series per owned match, valued at its epoch),
``sightscreen_match_wanted`` (the matches a full cycle found should be processed) and
``sightscreen_takeovers_total``.

Two orchestrators with different instance ids share the tables; the metrics registry is the process's, so
the test reads it after each step rather than per instance. The match actor is a stand-in that waits to be
stopped: what is under test is the orchestrator's bookkeeping, not the match.
"""

from __future__ import annotations

from typing import Any

import trio

from actors.settings import OrchestratorSettings
from daemon import metrics
from daemon.runtime.supervisor import Supervisor
from tests.doubles import LiveFeedDouble

MATCH = "880001"


class _IdleActor:
    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep_forever()


def _sample(name: str, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, labels)


def _orchestrator(instance_id: str, repos: Any, feed: LiveFeedDouble, supervisor: Supervisor) -> Any:
    from actors.orchestrator import Orchestrator

    return Orchestrator(
        instance_id=instance_id,
        repos=repos,
        feed=feed,
        supervisor=supervisor,
        actor_factory=lambda match_id, epoch, marquee: _IdleActor(),  # type: ignore[arg-type,return-value]
        settings=OrchestratorSettings(lease_s=10.0),
    )


async def test_owned_matches_export_their_epoch_and_a_takeover_bumps_it_and_counts(repos: Any) -> None:
    feed = LiveFeedDouble([{"id": int(MATCH), "status": "1st Innings", "league_id": 5}])
    takeovers_before = _sample("sightscreen_takeovers_total") or 0.0
    async with trio.open_nursery() as nursery:
        supervisor = Supervisor(nursery, max_restarts=3, window_s=60.0, backoff_s=0.01)
        first = _orchestrator("instance-a", repos, feed, supervisor)
        await first.cycle(full=True)
        assert first.owned == {MATCH}
        assert _sample("sightscreen_match_owner_epoch", match_id=MATCH) == 1.0
        assert _sample("sightscreen_match_wanted", match_id=MATCH) == 1.0
        assert _sample("sightscreen_takeovers_total") == takeovers_before, (
            "a fresh registration is no takeover"
        )

        # instance-a lets the match go (its lock is released on exit): the series disappears with it
        await supervisor.stop_and_wait(f"match:{MATCH}")
        assert _sample("sightscreen_match_owner_epoch", match_id=MATCH) is None

        # instance-b finds the record still active with a's id: it claims it, a new epoch
        second = _orchestrator("instance-b", repos, feed, supervisor)
        await second.cycle(full=True)
        assert second.owned == {MATCH}
        assert _sample("sightscreen_match_owner_epoch", match_id=MATCH) == 2.0
        assert _sample("sightscreen_takeovers_total") == takeovers_before + 1
        await supervisor.stop_and_wait(f"match:{MATCH}")
        nursery.cancel_scope.cancel()


async def test_wanted_is_exactly_the_last_full_cycles_set(repos: Any) -> None:
    feed = LiveFeedDouble([{"id": 880002, "status": "1st Innings"}, {"id": 880003, "status": "Finished"}])
    async with trio.open_nursery() as nursery:
        supervisor = Supervisor(nursery, max_restarts=3, window_s=60.0, backoff_s=0.01)
        orch = _orchestrator("instance-c", repos, feed, supervisor)
        metrics.MATCH_WANTED.labels("stale-match").set(1)  # from an earlier cycle: must not survive the next
        await orch.cycle(full=True)
        assert _sample("sightscreen_match_wanted", match_id="880002") == 1.0
        assert _sample("sightscreen_match_wanted", match_id="880003") is None, (
            "a finished match is not wanted"
        )
        assert _sample("sightscreen_match_wanted", match_id="stale-match") is None

        # the match leaves /livescores: the next full cycle forgets it as wanted even while it is still owned
        feed.live = []
        await orch.cycle(full=True)
        wanted = {
            s.labels["match_id"]
            for m in metrics.REGISTRY.collect()
            if m.name == "sightscreen_match_wanted"
            for s in m.samples
        }
        assert wanted == {"880002"}, "still active in active-matches, so still wanted"
        await supervisor.stop_and_wait("match:880002")
        nursery.cancel_scope.cancel()


class _TickingActor:
    """Exports what a running match actor exports: its ticks, tick durations, channels, sessions by path."""

    def __init__(self, match_id: str) -> None:
        self.match_id = match_id

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        metrics.TICKS.labels(self.match_id).inc()
        metrics.TICK_DURATION.labels(self.match_id).observe(0.01)
        metrics.CHANNELS.labels(self.match_id).set(3)
        metrics.SESSIONS_BY_PATH.labels(self.match_id, "token").set(5)
        metrics.SESSIONS_BY_PATH.labels(self.match_id, "channel").set(4)
        task_status.started()
        await trio.sleep_forever()


def _series_of(match_id: str) -> list[str]:
    return sorted(
        s.name for m in metrics.REGISTRY.collect() for s in m.samples if s.labels.get("match_id") == match_id
    )


async def test_a_match_that_leaves_the_instance_leaves_none_of_its_series_behind(repos: Any) -> None:
    """A process carries a season of matches: each one's per-match series go when its actor exits, or the
    registry (and every scrape) grows by a dozen series a match for as long as the process runs."""
    match_id = "880009"
    feed = LiveFeedDouble([{"id": int(match_id), "status": "1st Innings", "league_id": 5}])
    from actors.orchestrator import Orchestrator

    async with trio.open_nursery() as nursery:
        supervisor = Supervisor(nursery, max_restarts=3, window_s=60.0, backoff_s=0.01)
        orch = Orchestrator(
            instance_id="instance-d",
            repos=repos,
            feed=feed,
            supervisor=supervisor,
            actor_factory=lambda m, epoch, marquee: _TickingActor(m),  # type: ignore[arg-type,return-value]
            settings=OrchestratorSettings(lease_s=10.0),
        )
        await orch.cycle(full=True)
        assert orch.owned == {match_id}
        assert "sightscreen_ticks_total" in _series_of(match_id)
        assert "sightscreen_sessions_by_path" in _series_of(match_id)
        await supervisor.stop_and_wait(f"match:{match_id}")
        # wanted follows the feed (refilled by every full cycle), not the actor
        left = [name for name in _series_of(match_id) if name != "sightscreen_match_wanted"]
        assert left == [], left
        nursery.cancel_scope.cancel()
