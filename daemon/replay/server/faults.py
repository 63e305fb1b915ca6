"""Fault injection for the replay server: what each fault does to a response, and to the feed itself.

Response faults (``5xx``, ``429``, ``timeout``, ``disconnect``, ``truncated``, ``malformed``,
``missing_field``, ``wrong_type``, and the valid-but-wrong data SportMonks sends now and then:
``wrong_status``, ``changed_id``, ``implausible``, ``huge_body``) sit in a ``FaultList`` and apply to the next ``count`` requests, or for
``duration_s`` seconds, on one endpoint or all. ``ghost`` lists an extra fixture (``fixture_id``, a new id) in
the live lists (``/livescores`` and the ``/fixtures`` live list, or only ``endpoint``'s, as a stale status
would show in both) for its ``count`` answers or ``duration_s``: a fixture that answers but shows nothing (no ball,
no score row, no toss; status ``value``, default ``1st Innings``; ``starting_at`` default 30 days before the
injection), which ``/fixtures/{id}`` serves from the injection until the faults are cleared, as SportMonks
would serve a stale or foreign fixture a corrupted id named. ``lag`` makes one endpoint (``endpoint``) answer
with the fixtures as they were ``lag_s`` ago (a CDN or replica behind the other endpoint) for its ``count``
answers or ``duration_s``. Feed faults apply at once: ``correct_ball`` / ``delete_ball`` insert an entry that
re-sends or withdraws a served ball; ``stall`` freezes the feed, which then catches up in one burst.
``future_ball`` adds to each answer (or ``fixture_id``'s) the newest ball copied ``value`` overs ahead (3 by
default) with a new id and a catch; ``unlisted`` leaves ``fixture_id`` out of ``endpoint``'s live list (all
live lists without one) while the match goes on.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from daemon.replay.server.http import ReplayRequestError, Response, encode_json, error_body, error_response
from daemon.replay.server.state import ServedMatch
from daemon.replay.tape import SCORES, TapeEntry

FaultMode = Literal[
    "5xx",
    "429",
    "timeout",
    "disconnect",
    "truncated",
    "malformed",
    "missing_field",
    "wrong_type",
    "wrong_status",
    "changed_id",
    "implausible",
    "huge_body",
    "ghost",
    "correct_ball",
    "delete_ball",
    "stall",
    "lag",
    "future_ball",
    "unlisted",
]
FEED_CHANGES = ("correct_ball", "delete_ball")
# Faults answered instead of the real response (the request is not served at all).
REPLACING = ("5xx", "429", "disconnect")


class FaultSpec(BaseModel):
    """A fault as it arrives over HTTP (``POST /replay/faults``) or through ``inject``."""

    model_config = ConfigDict(extra="forbid")

    mode: FaultMode
    endpoint: Literal["livescores", "fixture", "fixtures", "teams", "leagues", "seasons", "scores"] | None = (
        None
    )
    count: int | None = Field(default=None, ge=1, description="apply to this many requests, then expire")
    duration_s: float | None = Field(default=None, gt=0, description="apply for this long (server clock)")
    status: int = Field(default=500, ge=500, le=599, description="5xx: the status to answer")
    retry_after: int = Field(default=30, ge=0, description="429: the Retry-After header, seconds")
    hold_s: float = Field(default=30.0, ge=0, description="timeout: how long to hold the response")
    field: str | None = Field(
        default=None, description="missing_field/wrong_type: dotted path inside each fixture"
    )
    value: Any = Field(
        default=None, description="wrong_type: the value to put there (default: a wrong-typed one)"
    )
    size_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1,
        le=1024**3,
        description="huge_body: bytes of padding added to the body",
    )
    fixture_id: str | None = Field(
        default=None,
        description="the fixture a feed change, stall or wrong_status/changed_id/implausible "
        "applies to (default: every fixture)",
    )
    ball_id: int | None = None
    score_id: int | None = None
    starting_at: str | None = Field(
        default=None, description="ghost: the fixture's starting_at (default: 30 days before the injection)"
    )
    lag_s: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="lag: the endpoint answers with the fixtures as they were this many seconds ago",
    )


@dataclass
class Fault:
    id: int
    spec: FaultSpec
    remaining: int | None
    until: float | None
    hits: int = 0

    def active(self, now: float) -> bool:
        return (self.remaining is None or self.remaining > 0) and (self.until is None or now < self.until)

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            **self.spec.model_dump(exclude_none=True),
            "remaining": self.remaining,
            "until": self.until,
            "hits": self.hits,
        }


class FaultList:
    """The response faults in force; expired ones are dropped whenever the list is read."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []

    def add(self, fault_id: int, spec: FaultSpec, now: float) -> None:
        if spec.mode in ("missing_field", "wrong_type") and not spec.field:
            raise ReplayRequestError(f"fault field: required for {spec.mode}")
        until = None if spec.duration_s is None else now + spec.duration_s
        self._faults.append(Fault(fault_id, spec, spec.count, until))

    def clear(self) -> None:
        self._faults.clear()

    def describe(self, now: float) -> list[dict[str, Any]]:
        self._faults = [f for f in self._faults if f.active(now)]
        return [f.describe() for f in self._faults]

    def take(self, endpoint: str, now: float) -> FaultSpec | None:
        """The first fault in force on ``endpoint``, counted as one use."""
        self._faults = [f for f in self._faults if f.active(now)]
        for fault in self._faults:
            if fault.spec.mode in ("ghost", "lag", "unlisted"):
                continue  # not a change to a response: see listed_ghosts, lag_for, unlisted
            if fault.spec.endpoint in (None, endpoint):
                fault.hits += 1
                if fault.remaining is not None:
                    fault.remaining -= 1
                return fault.spec
        return None

    def unlisted(self, endpoint: str, now: float) -> set[str]:
        """The fixtures an ``unlisted`` fault in force leaves out of ``endpoint``'s live list (each fault
        counted as one use)."""
        self._faults = [f for f in self._faults if f.active(now)]
        out: set[str] = set()
        for fault in self._faults:
            if fault.spec.mode == "unlisted" and fault.spec.endpoint in (None, endpoint):
                fault.hits += 1
                if fault.remaining is not None:
                    fault.remaining -= 1
                out.add(str(fault.spec.fixture_id))
        return out

    def lag_for(self, endpoint: str, now: float) -> float:
        """How far behind ``endpoint`` answers now (the greatest ``lag`` in force on it, 0 without one);
        each ``lag`` fault in force is counted as one use."""
        self._faults = [f for f in self._faults if f.active(now)]
        lag = 0.0
        for fault in self._faults:
            if fault.spec.mode == "lag" and fault.spec.endpoint in (None, endpoint):
                fault.hits += 1
                if fault.remaining is not None:
                    fault.remaining -= 1
                lag = max(lag, fault.spec.lag_s)
        return lag

    def listed_ghosts(self, endpoint: str, now: float) -> list[FaultSpec]:
        """The ``ghost`` faults in force on ``endpoint``'s live list (``livescores`` or ``fixtures``), each
        counted as one use (one live list answer listing it)."""
        self._faults = [f for f in self._faults if f.active(now)]
        out = []
        for fault in self._faults:
            if fault.spec.mode == "ghost" and fault.spec.endpoint in (None, endpoint):
                fault.hits += 1
                if fault.remaining is not None:
                    fault.remaining -= 1
                out.append(fault.spec)
        return out


def ghost_fixture(base: dict[str, Any], spec: FaultSpec, starting_at: str) -> dict[str, Any]:
    """``base`` (a served fixture before its first ball) as the ghost ``spec`` names: its own id, status and
    schedule, and nothing shown (no toss, note, result, ball or score row)."""
    blank = dict(base)
    blank.update(
        id=int(spec.fixture_id) if spec.fixture_id and spec.fixture_id.isdigit() else spec.fixture_id,
        status=spec.value if isinstance(spec.value, str) else "1st Innings",
        starting_at=spec.starting_at or starting_at,
        note=None,
        toss_won_team_id=None,
        elected=None,
        winner_team_id=None,
        draw_noresult=None,
    )
    for key in ("balls", "runs", "batting", "bowling"):
        if key in blank:
            blank[key] = []
    for key in ("tosswon", "winnerteam"):
        if key in blank:
            blank[key] = None
    return blank


def too_many_attempts(retry_after_s: float) -> Response:
    """SportMonks' answer past the plan's hourly calls."""
    return Response(
        429,
        error_body("Too Many Attempts.", 429),
        [("content-type", "application/json"), ("retry-after", str(max(1, math.ceil(retry_after_s))))],
    )


def fault_response(spec: FaultSpec) -> Response:
    """The answer given instead of the real one for a ``REPLACING`` fault."""
    if spec.mode == "disconnect":
        return Response(0, disconnect=True)
    if spec.mode == "429":
        return too_many_attempts(spec.retry_after)
    return error_response("Server Error", spec.status)


def apply_body_fault(spec: FaultSpec, response: Response) -> Response:
    """The real response, held, cut, corrupted or with a field removed or retyped as ``spec`` says."""
    body = response.body
    if spec.mode == "timeout":
        response.hold_s = spec.hold_s
    elif spec.mode == "truncated":
        response.body = body[: max(1, len(body) // 2)]
    elif spec.mode == "malformed":
        response.body = body.replace(b'"data":', b'"data"::', 1)
    elif spec.mode in ("missing_field", "wrong_type") and spec.field:
        doc = json.loads(body)
        items = doc["data"] if isinstance(doc["data"], list) else [doc["data"]]
        for item in items:
            _mutate(item, spec.field.split("."), spec.mode, spec.value)
        response.body = encode_json(doc)
    elif spec.mode in WRONG_DATA:
        default_field, default_value = WRONG_DATA[spec.mode]
        path = (spec.field or default_field).split(".")
        value = default_value if spec.value is None else spec.value
        doc = json.loads(body)
        items = doc["data"] if isinstance(doc["data"], list) else [doc["data"]]
        for item in items:
            if spec.fixture_id is None or str(item.get("id")) == str(spec.fixture_id):
                _mutate(item, path, "wrong_type", value)
        response.body = encode_json(doc)
    elif spec.mode == "huge_body":
        response.body = body + b" " * spec.size_bytes  # still valid JSON, only enormous
    elif spec.mode == "future_ball":
        doc = json.loads(body)
        items = doc["data"] if isinstance(doc["data"], list) else [doc["data"]]
        for item in items:
            if spec.fixture_id is None or str(item.get("id")) == str(spec.fixture_id):
                _add_future_ball(item, overs_ahead=float(spec.value) if spec.value is not None else 3.0)
        response.body = encode_json(doc)
    return response


CAUGHT = SCORES[54]  # "Catch Out": the wicket a ball from the future shows


def _add_future_ball(fixture: dict[str, Any], *, overs_ahead: float) -> None:
    """The newest ball copied ``overs_ahead`` overs on, made a catch, with a new id (a glitch SportMonks was
    seen to serve for a few seconds); nothing else of the fixture changes."""
    balls = fixture.get("balls")
    if not isinstance(balls, list) or not balls:
        return
    newest = max(balls, key=lambda b: int(b["id"]))
    fake = json.loads(json.dumps(newest))
    fake["id"] = int(newest["id"]) + 1_000_000
    fake["ball"] = round(float(newest["ball"]) + overs_ahead, 1)
    fake["score_id"] = CAUGHT.id
    fake["batsmanout_id"] = newest.get("batsman_id")
    if isinstance(fake.get("score"), dict):  # the same fields the answer carries for its scores
        caught = CAUGHT.to_json()
        fake["score"] = {k: caught.get(k) for k in fake["score"]}
    balls.append(fake)


# Valid but wrong data: the field each mode sets in every (or the chosen) fixture, and the value by default.
WRONG_DATA: dict[str, tuple[str, Any]] = {
    "wrong_status": ("status", "Finished"),  # a final status while the match goes on
    "changed_id": ("id", 123),  # a corrupted fixture id
    "implausible": ("runs.score", -5),  # a total cricket cannot produce (value 10**40, field runs.overs...)
}


def change_feed(m: ServedMatch, spec: FaultSpec, now: float) -> tuple[str, int]:
    """Correct or delete a ball that was already served: a new entry at the cursor, visible at once.

    Returns the entry's op and the ball it changed.
    """
    m.advance(now)
    visible = {b.ball.id: b.ball for b in m.tape.scorecard_at(m.cursor).balls}
    if not visible:
        raise ReplayRequestError(f"fixture {m.tape.fixture_id}: no ball has been served yet")
    ball_id = spec.ball_id if spec.ball_id is not None else max(visible)
    if ball_id not in visible:
        raise ReplayRequestError(
            f"ball_id: {ball_id} is not currently served for fixture {m.tape.fixture_id}"
        )
    if spec.mode == "delete_ball":
        entry = TapeEntry(op="delete", ball_id=ball_id)
    else:
        ball = visible[ball_id]
        score_id = spec.score_id if spec.score_id is not None else other_score(ball.score_id)
        if score_id not in m.tape.score_catalogue():
            raise ReplayRequestError(f"score_id: {score_id} is not in the score catalogue")
        entry = TapeEntry(
            op="correct",
            ball=ball.model_copy(update={"score_id": score_id}),
            ball_id=None,
            updated_at=None,
        )
    at = m.cursor
    entries = [*m.tape.entries[:at], entry, *m.tape.entries[at:]]
    m.tape = m.tape.model_copy(update={"entries": entries})
    m.visible_at.insert(at, now)
    m.first_seen.insert(at, now)
    if at <= len(m.first_polled):
        m.first_polled.insert(at, None)  # not yet got by any request
    m.polled_upto = min(m.polled_upto, at)
    m.clock.insert(at, now)
    m.cursor = at + 1
    m.invalidate()
    return entry.op, ball_id


def stall(matches: list[ServedMatch], duration_s: float, now: float) -> None:
    """Freeze the feed of ``matches`` for ``duration_s``: what becomes due meanwhile appears at the end."""
    for m in matches:
        m.advance(now)
        m.stall_until = now + duration_s


def other_score(score_id: int) -> int:
    """A plausible correction of ``score_id`` (the kinds the real feed makes: FOUR <-> SIX, a run more...)."""
    swaps = {47: 53, 53: 47, 82: 69, 69: 70, 70: 69, 71: 70, 54: 82, 79: 82, 17: 52, 52: 17, 4: 69, 1: 69}
    return swaps.get(score_id, 82 if score_id != 82 else 69)


def _mutate(obj: Any, path: list[str], mode: str, value: Any) -> None:
    if isinstance(obj, list):
        for item in obj:
            _mutate(item, path, mode, value)
        return
    if not isinstance(obj, dict) or path[0] not in obj:
        return
    if len(path) > 1:
        _mutate(obj[path[0]], path[1:], mode, value)
    elif mode == "missing_field":
        del obj[path[0]]
    else:
        current = obj[path[0]]
        obj[path[0]] = value if value is not None else (12345 if isinstance(current, str) else "wrong")
