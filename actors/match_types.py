"""What the match actor hands out and stops on: ``LeaseLost``, the tick's ``Delivery`` report, the sessions it
holds in memory, what a broadcast carries back, and the small timing rules of its loops. A module of its own
so that the actor's parts (``actors.match``, ``actors.match_starts``) and their callers share them without
importing each other."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

import trio
from botocore.exceptions import BotoCoreError, ClientError

from actors.janitor import TokenRef
from daemon.store.dynamo import StoreError

REFRESH_FIRST_SPREAD = (0.5, 1.0)  # the first re-read after the load: anywhere in the second half
REFRESH_SPREAD = (0.85, 1.15)  # every later one: within 15% of the interval either side


def refresh_pause(interval_s: float, *, first: bool, u: float | None = None) -> float:
    """The pause before a match's next session re-read: ``interval_s`` spread by ``u`` (uniform in [0, 1),
    drawn when not given). Matches taken together (a round of fixtures starting at the same minute, an
    instance taking a dead one's matches) would otherwise re-read their sessions at the same moments, every
    interval: at 10,000 sessions a match that is half a second of the instance's CPU and a burst of reads on
    the table, and a wicket fanned out then waits behind all of them."""
    low, high = REFRESH_FIRST_SPREAD if first else REFRESH_SPREAD
    draw = random.random() if u is None else u
    return interval_s * (low + (high - low) * draw)


def routine_wait_s(fetched_at: float, now: float, after_s: float) -> float:
    """How long a routine tick (no alert) still waits before its pushes: until ``after_s`` after the feed
    leader fetched it (wall clock, ``fetched_at``), never longer than ``after_s`` (another host's clock may
    be ahead) and not at all once that moment has passed (a late tick: a cache hop, a take-over)."""
    return min(max(0.0, fetched_at + after_s - now), after_s)


async def routine_hold(fetched_at: float, now: float, after_s: float) -> float:
    """Wait ``routine_wait_s``; the seconds waited.

    Why: a poll carries the new balls of every match of the region at once, so a wicket's fan-out and
    another match's routine update start together, often on other instances of the same host, and share
    its CPU and the APNs peer. Held back, routine updates go out once the poll's key events are out."""
    wait = routine_wait_s(fetched_at, now, after_s)
    if wait > 0:
        await trio.sleep(wait)
    return wait


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
