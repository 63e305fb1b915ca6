"""The engine's error root: ``EngineError`` (a ``ValueError``: every engine error is bad input, refused with a
clear message). The whole tree of the daemon's errors is in docs/architecture.md ("Errors")."""

from __future__ import annotations


class EngineError(ValueError):
    """Input the match engine refuses: a snapshot, a persisted state, an intent, a payload or its own event
    table that does not hold together."""
