"""What the match actor hands out and stops on: ``LeaseLost``, the tick's ``Delivery`` report, the sessions it
holds in memory and what a broadcast carries back. A module of its own so that the actor's parts
(``actors.match``, ``actors.match_starts``) and their callers share them without importing each other."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from actors.janitor import TokenRef
from daemon.store.dynamo import StoreError


def tick_timings(
    *, since_fetch_s: float, at_start_s: float, tick_s: float, started: float, marks: dict[str, float]
) -> dict[str, float]:
    """Where a key event's time went, for the ``key_event_tick`` log line: from the leader's fetch to the
    tick done, to the tick's start (the cache hop and the queue), the tick itself, and from its start to each
    mark (``persisted``: the alert intent written; ``answer``: the first answer the actor took, which for a
    fan-out is after its whole hand-off, watermark writes included, however early APNs answered)."""
    out = {"since_fetch_s": since_fetch_s, "at_start_s": at_start_s, "tick_s": tick_s}
    out.update({f"{name}_s": at - started for name, at in marks.items()})
    return {k: round(v, 3) for k, v in out.items()}


class LeaseLost(Exception):
    """This instance no longer owns the match: stop at once, push nothing more. Not a crash."""


# DynamoDB failing past botocore's own retries (throttled, unreachable). Without DynamoDB the actor can neither
# prove its lease nor persist a tick, so it stops as if the lease were lost: its lock (if still its own) is
# released and the orchestrator takes the match again at its next takeover check, once DynamoDB answers,
# from the persisted state. Treating it as a crash would spend the supervisor's restart budget in seconds and
# quarantine the match for minutes.
STORE_UNAVAILABLE: tuple[type[BaseException], ...] = (BotoCoreError, ClientError, StoreError)


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


@dataclass(frozen=True, slots=True)
class Session:
    visitor_key: str
    user_id: str
    token: str
    ref: TokenRef  # what its pushes carry back (built once, not once per push)
    channel: str = ""  # a channel session's broadcast channel (then ``token`` is empty)


@dataclass(frozen=True, slots=True)
class ChannelRef:
    """What a broadcast carries back: the perspective and the channel it went to."""

    perspective: str
    channel_id: str
