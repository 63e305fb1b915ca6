"""A match actor wired to moto's repositories and the shared doubles (tests/doubles.py), with no supervisor."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from actors.delivery import Delivery
from actors.livework import LiveWork
from actors.match import MatchActor
from actors.ports import ChannelRequests, FixtureSource, MatchStore, PushSender
from actors.settings import MatchActorSettings, OrchestratorSettings
from actors.share import Sharing
from daemon.cricket.settings import EngineSettings
from tests.doubles import FakeSender, ScriptedFeed


def make_match_actor(
    match_id: str,
    repos: MatchStore,
    sender: PushSender | None = None,
    *,
    owner: str = "me",
    epoch: int = 1,
    feed: FixtureSource | None = None,
    channel_requests: ChannelRequests | None = None,
    lease_s: float = 600.0,
    wall_clock: Callable[[], float] = time.time,
    topic: str = "app.test",
    marquee: bool = True,
    on_delivery: Callable[[Delivery], None] | None = None,
    sharing: Sharing | None = None,
    live: LiveWork | None = None,
    **settings: Any,
) -> MatchActor:
    """Routine ticks are not held back after the poll (``routine_after_s`` 0) unless a test asks: the tests
    hand the actor ticks one after another, as fast as it takes them (test_match_routine_hold.py holds). The
    lease is long (ten minutes): a test that ticks the actor by hand takes it once (``take_lease``) and needs no
    renewal loop."""
    settings.setdefault("routine_after_s", 0.0)
    return MatchActor(
        match_id,
        instance_id=owner,
        epoch=epoch,
        repos=repos,
        feed=feed or ScriptedFeed(),
        sender=sender or FakeSender(),
        channel_requests=channel_requests,
        topic=topic,
        marquee=marquee,
        engine_settings=EngineSettings(),
        settings=MatchActorSettings(**settings),
        lease=OrchestratorSettings(lease_s=lease_s, clock_skew_bound_s=min(1.0, lease_s / 10)),
        wall_clock=wall_clock,
        on_delivery=on_delivery,
        sharing=sharing,
        live=live,
    )


async def take_lease(actor: MatchActor) -> None:
    """Take the actor's match lock for it, as its orchestrator would, and prove the actor holds it."""
    await actor.lease.acquire()
    assert actor.lease.held, "another owner holds the match's lock"


def live(actor: MatchActor, display: dict[str, Any] | None = None) -> None:
    """The actor's match as live with a display (as its first live tick leaves it), for the starts."""
    actor.latest.phase = "live"
    actor.latest.display = display or {"neutral": {"title": "A v B", "subtitle": "A need 10", "score": "1/0"}}
    actor.latest.shown.set()
