"""Ghost fixtures: an id ``/livescores`` listed that answers, yet never shows play. A pure decision.

A corrupted or stale id in ``/livescores`` whose own ``/fixtures/{id}`` answers 404 is released by the feed's
404 rule. This module judges the other kind: the id answers, but its fixture shows no ball, no score and no
change at all, poll after poll (a stale entry stuck in a live status, or a corrupted id naming some other,
unplayed fixture). Left alone it costs a ``/fixtures/{id}`` call every ``off_livescores_cadence_s`` for as
long as anything is subscribed to it, and a match actor for nothing.

Real matches have a pre-ball phase too (the status switched before the first ball, a delayed start, a toss
then rain) and must never be released for it. The rule, applied to each look at a fixture (``judge``):

1. **Play ends the question.** A ball, or a score row with runs, overs or wickets: a real match, whatever else
   the fixture says. So does a final status (``Finished``, ``Aban.``, ...): ending is the end rule's business.
2. **A scheduled match before its start is not judged.** A fixture showing ``NS`` that ``/livescores`` never
   listed (SportMonks lists a match once it leaves ``NS``) was taken from the schedule: a pre-match wait. A
   fixture ``/livescores`` listed, or showing any other status, is judged.
3. **The schedule explains a wait.** A fixture whose ``starting_at`` lies within ``ghost_early_s`` ahead or
   ``ghost_late_s`` behind now is in its pre-ball phase (the toss is made about 30 minutes before the start,
   then the status changes, then rain may hold play for hours): never judged. A fixture without a
   ``starting_at`` cannot be dated and is not judged either.
4. **A change restarts the clock.** What the feed shows of the fixture without play (status, note, toss,
   ``elected``, schedule, result fields, how many lineup and score rows) is fingerprinted; a look that
   differs from the previous one starts the count again: a real match moves (toss posted, status changed).
5. **Released only after persistence.** Unchanged and unexplained for ``ghost_max_tries`` looks spanning at
   least ``ghost_min_s``, the fixture is released. Until then its ``/fixtures/{id}`` polling backs off: the
   period doubles from ``off_livescores_cadence_s`` up to ``ghost_backoff_max_s``, so a ghost costs a
   handful of calls (7 at the defaults) before its release, not 120 an hour.

Why the schedule is not the whole rule: a replayed tape carries its recording's ``starting_at``, so in replay
mode the schedule says nothing about now; there a real match's pre-ball phase is short (one ball's time),
far below ``ghost_min_s``, and rule 4/5 alone keep it. In production the schedule keeps a real match's long
waits (rain before the first ball), and rule 4/5 release a stale or foreign fixture that stays blank.

A released ghost that later shows play in ``/livescores`` is taken again at once (the feed lifts the
release): being wrong here costs a pause, never a match.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from daemon.backoff import backoff_delay

FINAL_STATUSES = frozenset({"Finished", "Aban.", "Cancl.", "Postp."})
NOT_STARTED = frozenset({"NS", ""})
# The fields of a fixture without play that move when a real match moves towards its first ball.
_FINGERPRINT_FIELDS = (
    "status",
    "note",
    "toss_won_team_id",
    "elected",
    "starting_at",
    "winner_team_id",
    "draw_noresult",
    "last_period",
    "rpc_target",
    "rpc_overs",
    "super_over",
    "follow_on",
)
_FINGERPRINT_LISTS = ("lineup", "runs", "batting", "bowling")


@dataclass(frozen=True)
class GhostRule:
    """The rule's settings (``FeedSettings``' ``ghost_*`` fields and the off-livescores cadence)."""

    max_tries: int = 6
    min_s: float = 1200.0
    early_s: float = 3600.0
    late_s: float = 12 * 3600.0
    backoff_s: float = 30.0
    backoff_max_s: float = 600.0


@dataclass(frozen=True)
class Sighting:
    """What one look (a ``/livescores`` entry or a ``/fixtures/{id}`` answer) showed of a fixture."""

    status: str
    played: bool
    starting_at: float | None
    fingerprint: str
    listed: bool  # this look came from (or the fixture is currently in) /livescores


@dataclass(frozen=True)
class Watch:
    """What is remembered of a listed fixture showing no play: since when it has looked the same, how often."""

    since: float
    polls: int
    fingerprint: str
    listed: bool


@dataclass(frozen=True)
class Verdict:
    kind: Literal["play", "waiting", "suspect", "release"]
    reason: str
    retry_in_s: float | None = None  # suspect: the earliest next /fixtures/{id} call


def sighting(fixture: Mapping[str, Any], *, listed: bool) -> Sighting:
    """The look at ``fixture`` (SportMonks JSON, any include set; never raises on odd values)."""
    return Sighting(
        status=str(fixture.get("status") or ""),
        played=played(fixture),
        starting_at=_epoch(fixture.get("starting_at")),
        fingerprint=fingerprint(fixture),
        listed=listed,
    )


def played(fixture: Mapping[str, Any]) -> bool:
    """A ball, or a score row showing runs, overs or wickets."""
    if _rows(fixture.get("balls")):
        return True
    for row in _rows(fixture.get("runs")):
        if isinstance(row, Mapping) and any(_positive(row.get(k)) for k in ("score", "overs", "wickets")):
            return True
    return False


def fingerprint(fixture: Mapping[str, Any]) -> str:
    """A short digest of what a fixture without play shows (see ``_FINGERPRINT_FIELDS``)."""
    shown: dict[str, Any] = {key: fixture.get(key) for key in _FINGERPRINT_FIELDS}
    for key in _FINGERPRINT_LISTS:
        shown[key] = len(_rows(fixture.get(key)))
    raw = json.dumps(shown, sort_keys=True, default=str).encode()
    return hashlib.sha1(raw, usedforsecurity=False).hexdigest()[:16]


def judge(
    watch: Watch | None, look: Sighting, *, now: float, wall: float, rule: GhostRule
) -> tuple[Watch | None, Verdict]:
    """The next watch (None: nothing to remember) and the verdict on one more look (see the module doc).

    ``now`` times the persistence (any steady clock, seconds); ``wall`` is the epoch time the schedule is
    read against."""
    if look.played:
        return None, Verdict("play", "the fixture shows play")
    if look.status in FINAL_STATUSES:
        return None, Verdict("play", f"final status {look.status!r}: the end rule decides")
    listed = look.listed or (watch is not None and watch.listed)
    if not listed and look.status in NOT_STARTED:
        return None, Verdict("waiting", "not started and never listed in /livescores: a scheduled match")
    if look.starting_at is None:
        return None, Verdict("waiting", "no starting_at: the fixture cannot be dated")
    if look.starting_at - rule.early_s <= wall <= look.starting_at + rule.late_s:
        return None, Verdict("waiting", "within its scheduled start's window: a pre-ball phase")
    if watch is None or watch.fingerprint != look.fingerprint:
        watch = Watch(since=now, polls=1, fingerprint=look.fingerprint, listed=listed)
    else:
        watch = Watch(since=watch.since, polls=watch.polls + 1, fingerprint=watch.fingerprint, listed=listed)
    blank_for = now - watch.since
    if watch.polls >= rule.max_tries and blank_for >= rule.min_s:
        return None, Verdict(
            "release",
            f"listed in /livescores yet no play and no change on {watch.polls} looks over {blank_for:.0f} s, "
            f"{_far(look.starting_at, wall)}",
        )
    retry = backoff_delay(watch.polls, base_s=rule.backoff_s, cap_s=rule.backoff_max_s)
    return watch, Verdict("suspect", f"no play and unchanged on {watch.polls} looks", retry_in_s=retry)


def _far(starting_at: float, now: float) -> str:
    hours = (now - starting_at) / 3600
    return f"scheduled {hours:.1f} h ago" if hours >= 0 else f"scheduled {-hours:.1f} h ahead"


def _rows(value: Any) -> list[Any]:
    if isinstance(value, Mapping):  # includes may come wrapped: {"data": [...]}
        value = value.get("data")
    return value if isinstance(value, list) else []


def _positive(value: Any) -> bool:
    try:
        return float(value) > 0
    except (TypeError, ValueError):
        return False


def _epoch(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.timestamp()
