"""A match actor wired to whatever repositories and sender a test gives it (no feed, no supervisor)."""

from __future__ import annotations

from typing import Any

from actors.match import MatchActor
from actors.settings import MatchActorSettings, OrchestratorSettings
from daemon.cricket.settings import EngineSettings


def make_match_actor(match_id: str, repos: Any, sender: Any = None, **settings: Any) -> MatchActor:
    """Routine ticks are not held back after the poll (``routine_after_s`` 0) unless a test asks: the tests
    hand the actor ticks one after another, as fast as it takes them (test_match_routine_hold.py holds)."""
    settings.setdefault("routine_after_s", 0.0)
    return MatchActor(
        match_id,
        instance_id="me",
        epoch=1,
        repos=repos,
        feed=None,
        sender=sender,
        topic="app.test",
        marquee=True,
        engine_settings=EngineSettings(),
        settings=MatchActorSettings(**settings),
        lease=OrchestratorSettings(),
    )
