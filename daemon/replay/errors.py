"""The replay package's error root: ``ReplayError`` (tapes, the recorder, the replay server). The whole tree of
the daemon's errors is in docs/architecture.md ("Errors")."""

from __future__ import annotations


class ReplayError(Exception):
    """A tape, a recording or a replay request that cannot be used."""
