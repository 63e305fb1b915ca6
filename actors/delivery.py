"""``Delivery``: one hand-off of a match's pushes (a tick, an end, a round of push-to-starts) as the demo and
the admin socket show it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Delivery:
    """One tick's hand-off, as the demo and the admin socket show it."""

    match_id: str
    kind: str  # "update" | "end" | "start"
    over: str
    score: str
    event: str | None
    event_types: tuple[str, ...]
    priority: int
    tokens: int
    accepted: int
    rejected: int
    failed: int
    at: float = field(default_factory=time.time)
    broadcasts: int = 0  # one per perspective with channel sessions (``tokens`` counts the per-device pushes)
    channel_sessions: int = 0  # devices the broadcasts were for

    @classmethod
    def of(cls, match_id: str, kind: str, display: Any, fields: dict[str, Any], **more: Any) -> Delivery:
        """A tick's report (``fields`` and ``more``: the outcome counts and the rest), its over and score from
        the neutral display."""
        neutral = (display or {}).get("neutral") or {}
        over, score = str(neutral.get("overs", "")), str(neutral.get("score", ""))
        return cls(match_id=match_id, kind=kind, over=over, score=score, **fields, **more)
