"""The actors' error root: ``ActorError``. The whole tree of the daemon's errors is in docs/architecture.md
("Errors")."""

from __future__ import annotations


class ActorError(Exception):
    """An actor cannot go on as it was: its lease is gone, a part it needs is unavailable, its input or its
    cycle is incomplete."""
