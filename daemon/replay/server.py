"""The SportMonks-compatible replay server: tapes served as ``/livescores``, ``/fixtures/{id}`` and ``/fixtures``.

Owns the HTTP side of replay mode (trio + h11, HTTP/1.1 keep-alive, bounded requests), the per-fixture
clock (see ``cursor.ReplayClock``), the controls (play, pause, seek, speed, stop) in-process and over
HTTP, and the fault modes of issue 10. It must not know about the daemon: the daemon talks to it exactly as
to SportMonks, with only the base URL changed. What a fixture looks like at a cursor is ``tape.py``'s job.

Paths are served both at the root and under ``/api/v2.0`` (the production base path). Data endpoints:
``GET /livescores`` (not paginated; fixtures that started and are not finished), ``GET /fixtures/{id}``,
``GET /fixtures`` (Laravel pagination, ``links`` carry only ``page=N`` as the real API does); each honours
``include`` (comma-separated, dotted sub-includes), ``filter[field]=a,b`` (any-of; ``starts_between``),
``sort`` (``-`` for descending) and accepts ``api_token`` (checked only when the server was given one).
Ball ``updated_at`` is the wall time the entry became visible here.

Control endpoints (no token): ``GET /replay/status``; ``POST /replay/play|pause[?fixture_id=]``;
``POST /replay/seek?fixture_id=&entry=N`` (first N entries visible) or ``&ball_id=B`` (up to that ball);
``POST /replay/speed?x=[&fixture_id=]``; ``POST /replay/stop`` (the server shuts down);
``GET|POST|DELETE /replay/faults`` (list, inject one fault from a JSON object, clear all).

Faults (``inject``), each for ``count`` requests or ``duration_s`` seconds (or until cleared), on one
endpoint (``livescores``, ``fixture``, ``fixtures``) or all: ``5xx`` (``status``), ``429`` (``retry_after``),
``timeout`` (hold the response ``hold_s`` seconds, then answer), ``disconnect`` (close without answering),
``truncated`` (JSON cut in half), ``malformed`` (invalid JSON, full length), ``missing_field`` /
``wrong_type`` (``field``, a dotted path inside each fixture, e.g. ``status`` or ``balls.score_id``;
``value`` for wrong_type). ``correct_ball`` / ``delete_ball`` change the feed at once: a served ball
(``ball_id``, default the newest) of ``fixture_id`` is re-sent with another ``score_id`` or withdrawn.
``stall`` freezes the feed of ``fixture_id`` (default: all) for ``duration_s`` while the match goes on,
then everything missed appears at once (the catch-up bursts of spec §7).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

import h11
import trio
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from daemon.logs import get_logger
from daemon.replay.cursor import ReplayClock
from daemon.replay.tape import FIXTURE_INCLUDES, SCORES, Scorecard, Tape, TapeEntry, iso

log = get_logger("daemon.replay.server")

API_PREFIX = "/api/v2.0"
ENDPOINTS = ("livescores", "fixture", "fixtures", "teams", "leagues", "seasons", "scores")
REFERENCE_INCLUDES: dict[str, set[str]] = {
    "teams": {"squad"},
    "leagues": {"season", "seasons"},
    "seasons": {"league", "teams", "fixtures"},
    "scores": set(),
}
# Includes SportMonks knows but tapes do not model: answered empty rather than refused.
UNMODELLED_INCLUDES: dict[str, Callable[[], Any]] = {
    "scoreboards": list,
    "manofmatch": lambda: None,
    "manofseries": lambda: None,
    "firstumpire": lambda: None,
    "secondumpire": lambda: None,
    "tvumpire": lambda: None,
    "referee": lambda: None,
}
FILTERABLE = {
    "id",
    "league_id",
    "season_id",
    "stage_id",
    "round",
    "type",
    "status",
    "localteam_id",
    "visitorteam_id",
    "venue_id",
    "winner_team_id",
}
NOT_LIVE = {"NS", "Finished", "Aban.", "Cancl.", "Postp."}
# A request head larger than this is refused (h11 answers 431-style); 16 KiB is what nginx allows per
# header buffer by default and far above any SportMonks query this daemon sends.
MAX_HEAD_BYTES = 16 * 1024
MAX_BODY_BYTES = 64 * 1024  # only fault specs arrive with a body
IDLE_TIMEOUT_S = 60.0
CACHE_PER_FIXTURE = 16
_BALLS_SENTINEL = "\x00balls\x00"
_BALLS_SENTINEL_JSON = b'"\\u0000balls\\u0000"'
FaultMode = Literal[
    "5xx",
    "429",
    "timeout",
    "disconnect",
    "truncated",
    "malformed",
    "missing_field",
    "wrong_type",
    "correct_ball",
    "delete_ball",
    "stall",
]


class ReplayRequestError(ValueError):
    """A bad control or data request; becomes a 4xx with this message."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


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
    fixture_id: str | None = None
    ball_id: int | None = None
    score_id: int | None = None


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


@dataclass
class _Match:
    tape: Tape
    clock: ReplayClock
    visible_at: list[float | None]  # when each entry last became visible (ball updated_at)
    first_seen: list[float | None]  # when each entry first became visible (lag measurement)
    cursor: int = 0
    version: int = 0  # bumped whenever already-served output can change (seek back, inserted entries)
    cache: dict[tuple[Any, ...], tuple[bytes, str]] = field(default_factory=dict)
    ball_cache: dict[int, dict[str, Any]] = field(default_factory=dict)  # entry index -> ball object
    ball_bytes: dict[int, bytes] = field(default_factory=dict)  # id(ball object) -> its JSON
    stall_until: float = 0.0  # wall time a "stall" fault ends (the feed then catches up at once)
    card: Scorecard | None = None  # the scorecard at `cursor`, shared by every include set
    card_version: int = -1

    def invalidate(self) -> None:
        """Already-rendered output may be wrong now (seek back, an inserted entry)."""
        self.version += 1
        self.cache.clear()
        self.ball_cache.clear()
        self.ball_bytes.clear()


@dataclass
class _Response:
    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    hold_s: float = 0.0
    disconnect: bool = False
    stop_after: bool = False


def encode_json(value: Any) -> bytes:
    """Compact JSON with ``/`` escaped as ``\\/`` as SportMonks (PHP json_encode) does; ``/`` only occurs
    inside strings, so a plain replace is exact."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).replace("/", "\\/").encode()


def _error_body(message: str, status: int) -> bytes:
    # The real error shape is undocumented (spec §4); clients only rely on "non-2xx or no `data`".
    return encode_json({"message": message, "error": {"message": message, "code": status}})


class ReplayServer:
    """Serves tapes like SportMonks; controllable in-process and over HTTP. See the module docstring.

    ``speed`` multiplies match time; ``ms_per_ball`` (default: each tape's own) is the gap between entries
    at speed 1; ``innings_break_s`` and ``start_delay_s`` are match time too (wall time = value / speed).
    ``clock`` (wall seconds) is injectable so the cursor can be tested without sleeping.
    """

    def __init__(
        self,
        tapes: Iterable[Tape],
        *,
        speed: float = 1.0,
        ms_per_ball: float | None = None,
        innings_break_s: float = 1200.0,
        start_delay_s: float = 0.0,
        clock: Callable[[], float] = time.time,
        api_token: str | None = None,
        page_size: int = 100,
    ) -> None:
        if not (speed > 0 and math.isfinite(speed)):
            raise ValueError(f"speed must be a positive number, got {speed}")
        if ms_per_ball is not None and ms_per_ball <= 0:
            raise ValueError(f"ms_per_ball must be > 0, got {ms_per_ball}")
        if innings_break_s < 0 or start_delay_s < 0:
            raise ValueError("innings_break_s and start_delay_s must be >= 0")
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.clock = clock
        self.speed = speed
        self.ms_per_ball = ms_per_ball
        self.innings_break_s = innings_break_s
        self.start_delay_s = start_delay_s
        self.api_token = api_token
        self.page_size = page_size
        self.host: str | None = None
        self.port: int | None = None
        self._matches: dict[str, _Match] = {}
        self._faults: list[Fault] = []
        self._fault_seq = 0
        self._stop_requested = False
        self._stop_event: trio.Event | None = None
        self.requests_served: dict[str, int] = dict.fromkeys((*ENDPOINTS, "control"), 0)
        for tape in tapes:
            self.add_tape(tape)

    # ------------------------------------------------------------------------------------------ tapes

    def add_tape(self, tape: Tape, *, start_delay_s: float | None = None) -> None:
        """Start serving ``tape``; its match starts ``start_delay_s`` (match time; default: the server's)
        from now."""
        if tape.fixture_id in self._matches:
            raise ValueError(f"fixture {tape.fixture_id} is already being served")
        if start_delay_s is None:
            start_delay_s = self.start_delay_s
        elif not (start_delay_s >= 0 and math.isfinite(start_delay_s)):
            raise ValueError(f"start_delay_s: must be a finite number >= 0, got {start_delay_s}")
        now = self.clock()
        clock = ReplayClock(
            total=len(tape),
            ms_per_ball=self.ms_per_ball or tape.ms_per_ball,
            break_index=tape.innings_break_index(),
            break_ms=self.innings_break_s * 1000.0,
            starts_at=now + start_delay_s / self.speed,
            speed=self.speed,
        )
        n = len(tape)
        self._matches[tape.fixture_id] = _Match(tape, clock, [None] * n, [None] * n)

    @property
    def fixture_ids(self) -> list[str]:
        return list(self._matches)

    def tape(self, fixture_id: str | int) -> Tape:
        return self._match(fixture_id).tape

    def _match(self, fixture_id: str | int | None) -> _Match:
        if fixture_id is None:
            if len(self._matches) == 1:
                return next(iter(self._matches.values()))
            raise ReplayRequestError("fixture_id is required when several fixtures are served")
        match = self._matches.get(str(fixture_id))
        if match is None:
            raise ReplayRequestError(f"fixture_id {fixture_id} is not served here", status=404)
        return match

    def _selected(self, fixture_id: str | int | None) -> list[_Match]:
        return list(self._matches.values()) if fixture_id is None else [self._match(fixture_id)]

    def _advance(self, m: _Match, now: float) -> None:
        """Bring the served cursor up to the clock, stamping each newly visible entry with its due time."""
        if now < m.stall_until:
            return  # the feed is stalled: nothing new until it catches up in one burst
        target = m.clock.cursor(now)
        for i in range(m.cursor, target):
            t = max(m.clock.wall_time_of(i, now), m.stall_until)
            m.visible_at[i] = t
            if m.first_seen[i] is None:
                m.first_seen[i] = t
        if target > m.cursor:
            m.cursor = target

    # ------------------------------------------------------------------------------------------ controls

    def play(self, fixture_id: str | int | None = None, *, speed: float | None = None) -> None:
        now = self.clock()
        for m in self._selected(fixture_id):
            self._advance(m, now)
            m.clock.play(now)
            if speed is not None:
                m.clock.set_speed(speed, now)

    def pause(self, fixture_id: str | int | None = None) -> None:
        now = self.clock()
        for m in self._selected(fixture_id):
            self._advance(m, now)
            m.clock.pause(now)

    def set_speed(self, x: float, fixture_id: str | int | None = None) -> None:
        if not (x > 0 and math.isfinite(x)):
            raise ReplayRequestError(f"speed: must be a positive number, got {x}")
        now = self.clock()
        if fixture_id is None:
            self.speed = x
        for m in self._selected(fixture_id):
            self._advance(m, now)
            m.clock.set_speed(x, now)

    def seek(
        self, fixture_id: str | int | None, entry_index: int | None = None, *, ball_id: int | None = None
    ) -> None:
        """Make exactly the first ``entry_index`` entries visible (or every entry up to the one posting
        ``ball_id``); play continues from there at the current speed unless paused."""
        m = self._match(fixture_id)
        if (entry_index is None) == (ball_id is None):
            raise ReplayRequestError("seek: give exactly one of entry and ball_id")
        if ball_id is not None:
            index = m.tape.entry_index_of_ball(ball_id)
            if index is None:
                raise ReplayRequestError(
                    f"ball_id: {ball_id} is not on the tape of fixture {m.tape.fixture_id}"
                )
            entry_index = index + 1
        assert entry_index is not None
        if not 0 <= entry_index <= len(m.tape):
            raise ReplayRequestError(f"entry: must be within 0..{len(m.tape)}, got {entry_index}")
        now = self.clock()
        self._advance(m, now)
        m.stall_until = 0.0  # an explicit seek ends a stall
        m.clock.seek(entry_index, now)
        if entry_index < m.cursor:
            for i in range(entry_index, m.cursor):
                m.visible_at[i] = None
            m.cursor = entry_index
            m.invalidate()
        self._advance(m, now)

    def stop(self) -> None:
        """Shut the HTTP server down (``serve`` returns)."""
        self._stop_requested = True
        if self._stop_event is not None:
            self._stop_event.set()

    def status(self) -> dict[str, dict[str, Any]]:
        """Per fixture: cursor, total, status, started_at, ms_per_ball, speed, paused, finished, ..."""
        now = self.clock()
        out: dict[str, dict[str, Any]] = {}
        for fid, m in self._matches.items():
            self._advance(m, now)
            started = m.clock.started(now)
            status = self._fixture_status(m, now)
            out[fid] = {
                "fixture_id": fid,
                "cursor": m.cursor,
                "total": len(m.tape),
                "status": status,
                "started": started,
                "started_at": iso(datetime.fromtimestamp(m.clock.starts_at, UTC)),
                "ms_per_ball": m.clock.ms_per_ball,
                "speed": m.clock.speed,
                "paused": m.clock.paused,
                "finished": m.cursor >= len(m.tape),
                "innings_break": m.clock.in_break(now),
                "break_index": m.clock.break_index,
                "in_livescores": started and status not in NOT_LIVE,
            }
        return out

    def ball_served_at(self, fixture_id: str | int, entry_index: int) -> float | None:
        """Wall time (server clock) entry ``entry_index`` first became visible; None if it has not yet."""
        m = self._match(fixture_id)
        self._advance(m, self.clock())
        if not 0 <= entry_index < len(m.first_seen):
            return None
        return m.first_seen[entry_index]

    def ball_id_served_at(self, fixture_id: str | int, ball_id: int) -> float | None:
        """Wall time the delivery ``ball_id`` was first posted here."""
        index = self._match(fixture_id).tape.entry_index_of_ball(ball_id)
        return None if index is None else self.ball_served_at(fixture_id, index)

    # ------------------------------------------------------------------------------------------ faults

    def inject(
        self,
        mode: str,
        *,
        endpoint: str | None = None,
        count: int | None = None,
        duration_s: float | None = None,
        **params: Any,
    ) -> int:
        """Add a fault (see the module docstring); returns its id. Feed changes apply at once."""
        try:
            spec = FaultSpec(mode=mode, endpoint=endpoint, count=count, duration_s=duration_s, **params)  # type: ignore[arg-type]
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ReplayRequestError(f"fault {'.'.join(map(str, first['loc']))}: {first['msg']}") from exc
        return self._inject(spec)

    def _inject(self, spec: FaultSpec) -> int:
        self._fault_seq += 1
        if spec.mode in ("correct_ball", "delete_ball"):
            self._change_feed(spec)
            return self._fault_seq
        if spec.mode == "stall":
            if spec.duration_s is None:
                raise ReplayRequestError("fault duration_s: required for stall")
            now = self.clock()
            for m in self._selected(spec.fixture_id):
                self._advance(m, now)
                m.stall_until = now + spec.duration_s
            log.info("replay_feed_stalled", fixture_id=spec.fixture_id, duration_s=spec.duration_s)
            return self._fault_seq
        if spec.mode in ("missing_field", "wrong_type") and not spec.field:
            raise ReplayRequestError(f"fault field: required for {spec.mode}")
        until = None if spec.duration_s is None else self.clock() + spec.duration_s
        self._faults.append(Fault(self._fault_seq, spec, spec.count, until))
        log.info("replay_fault_injected", fault=spec.mode, endpoint=spec.endpoint, count=spec.count)
        return self._fault_seq

    def clear_faults(self) -> None:
        self._faults.clear()

    def faults(self) -> list[dict[str, Any]]:
        now = self.clock()
        self._faults = [f for f in self._faults if f.active(now)]
        return [f.describe() for f in self._faults]

    def _take_fault(self, endpoint: str) -> FaultSpec | None:
        now = self.clock()
        self._faults = [f for f in self._faults if f.active(now)]
        for fault in self._faults:
            if fault.spec.endpoint in (None, endpoint):
                fault.hits += 1
                if fault.remaining is not None:
                    fault.remaining -= 1
                return fault.spec
        return None

    def _change_feed(self, spec: FaultSpec) -> None:
        """Correct or delete a ball that was already served: a new entry at the cursor, visible at once."""
        m = self._match(spec.fixture_id)
        now = self.clock()
        self._advance(m, now)
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
            score_id = spec.score_id if spec.score_id is not None else _other_score(ball.score_id)
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
        m.clock.insert(at, now)
        m.cursor = at + 1
        m.invalidate()
        log.info("replay_feed_changed", fixture_id=m.tape.fixture_id, op=entry.op, ball_id=ball_id)

    # ------------------------------------------------------------------------------------------ rendering

    def _fixture_status(self, m: _Match, now: float) -> str:
        if not m.clock.started(now):
            return "NS"
        return self._fixture_bytes(m, now, frozenset())[1]

    def _fixture_bytes(self, m: _Match, now: float, include: frozenset[str]) -> tuple[bytes, str]:
        """The encoded fixture object and its status, cached per (cursor, include)."""
        self._advance(m, now)
        forced = None if m.clock.started(now) else "NS"
        key = (m.cursor, forced, include, m.version)
        cached = m.cache.get(key)
        if cached is None:
            times = m.visible_at
            data = m.tape.fixture_at(
                m.cursor,
                status=forced,
                include=[name for name in include if name not in UNMODELLED_INCLUDES],
                now=datetime.fromtimestamp(now, UTC),
                entry_times=lambda i: times[i] or now,
                ball_cache=m.ball_cache,
                scorecard=self._scorecard(m),
            )
            for name in include & UNMODELLED_INCLUDES.keys():
                data[name] = UNMODELLED_INCLUDES[name]()
            cached = (self._encode_fixture(m, data), data["status"])
            if len(m.cache) >= CACHE_PER_FIXTURE:
                m.cache.pop(next(iter(m.cache)))
            m.cache[key] = cached
        return cached

    @staticmethod
    def _scorecard(m: _Match) -> Scorecard:
        if m.card is None or m.card.cursor != m.cursor or m.card_version != m.version:
            m.card, m.card_version = m.tape.scorecard_at(m.cursor), m.version
        return m.card

    @staticmethod
    def _encode_fixture(m: _Match, data: dict[str, Any]) -> bytes:
        """Encode a fixture, reusing each ball's bytes: balls are most of the payload and never change once
        visible, so only the rest is encoded per cursor."""
        balls = data.get("balls")
        if not balls:
            return encode_json(data)
        data["balls"] = _BALLS_SENTINEL
        parts = []
        for ball in balls:
            raw = m.ball_bytes.get(id(ball))  # ball objects live in m.ball_cache until invalidate()
            if raw is None:
                raw = m.ball_bytes[id(ball)] = encode_json(ball)
            parts.append(raw)
        encoded = encode_json(data)
        data["balls"] = balls
        return encoded.replace(_BALLS_SENTINEL_JSON, b"[" + b",".join(parts) + b"]", 1)

    def fixture(self, fixture_id: str | int, include: Iterable[str] | None = None) -> dict[str, Any]:
        """The fixture as ``/fixtures/{id}`` serves it now (in-process convenience)."""
        m = self._match(fixture_id)
        wanted = frozenset(FIXTURE_INCLUDES) if include is None else _parse_include(",".join(include))
        raw, _ = self._fixture_bytes(m, self.clock(), wanted)
        data: dict[str, Any] = json.loads(raw)
        return data

    # ------------------------------------------------------------------------------------------ HTTP routing

    async def handle(self, method: str, target: str, body: bytes = b"", host: str = "localhost") -> _Response:
        """Answer one request (the HTTP layer calls this; tests may too)."""
        try:
            return await self._route(method, target, body, host)
        except ReplayRequestError as exc:
            return _Response(
                exc.status, _error_body(str(exc), exc.status), [("content-type", "application/json")]
            )
        except Exception:
            # a bug here must cost one request, never the server (and every test or demo riding on it)
            log.exception("replay_request_failed", method=method, target=target.split("?", 1)[0])
            return _Response(
                500, _error_body("replay server error", 500), [("content-type", "application/json")]
            )

    async def _route(self, method: str, target: str, body: bytes, host: str) -> _Response:
        parts = urlsplit(target)
        path = parts.path.rstrip("/") or "/"
        prefix = ""
        if path == API_PREFIX or path.startswith(API_PREFIX + "/"):
            prefix, path = API_PREFIX, path[len(API_PREFIX) :] or "/"
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        segments = [s for s in path.split("/") if s]
        if segments[:1] == ["replay"]:
            self.requests_served["control"] += 1
            return self._control(method, segments[1:], query, body)
        endpoint = _endpoint_of(segments)
        if endpoint is None:
            raise ReplayRequestError(f"no route for {path}", status=404)
        if method != "GET":
            raise ReplayRequestError(f"{method} is not allowed on {path}", status=405)
        if self.api_token is not None and query.get("api_token") != self.api_token:
            raise ReplayRequestError("Unauthenticated.", status=401)
        self.requests_served[endpoint] = self.requests_served.get(endpoint, 0) + 1
        fault = self._take_fault(endpoint)
        if fault is not None and fault.mode in ("5xx", "429", "disconnect"):
            return _fault_response(fault)
        now = self.clock()
        if endpoint in ("fixture", "livescores", "fixtures"):
            include = _parse_include(query.get("include", ""))
            if endpoint == "fixture":
                body_out = self._one_fixture(segments[1], include, now)
            elif endpoint == "livescores":
                body_out = self._livescores(query, include, now)
            else:
                rows = self._filtered(query, now)
                items = [self._fixture_bytes(m, now, include)[0] for m, _ in rows]
                body_out = self._page(items, query, host, prefix + path)
        else:
            body_out = self._reference(endpoint, segments, query, host, prefix + path, now)
        response = _Response(200, body_out, [("content-type", "application/json")])
        if fault is not None:
            response = _apply_body_fault(fault, response)
        return response

    # --- reference data: what the tapes know about teams, leagues, seasons and the score catalogue ------

    def _reference(
        self, endpoint: str, segments: list[str], query: dict[str, str], host: str, path: str, now: float
    ) -> bytes:
        kind = segments[0]
        allowed = REFERENCE_INCLUDES[kind]
        include = {
            item.strip().split(".", 1)[0] for item in query.get("include", "").split(",") if item.strip()
        }
        unknown = include - allowed
        if unknown:
            raise ReplayRequestError(f"include: {kind} cannot include {', '.join(sorted(unknown))}")
        objects = self._reference_objects(kind, include, now)
        if len(segments) == 2:
            obj = objects.get(segments[1])
            if obj is None:
                raise ReplayRequestError(
                    f"No query results for model [{kind[:-1].title()}] {segments[1]}", 404
                )
            return b'{"data":' + encode_json(obj) + b"}"
        return self._page([encode_json(o) for o in objects.values()], query, host, path)

    def _reference_objects(self, kind: str, include: set[str], now: float) -> dict[str, dict[str, Any]]:
        tapes = [m.tape for m in self._matches.values()]
        out: dict[str, dict[str, Any]] = {}
        if kind == "scores":
            for tape in tapes:
                for score in tape.score_catalogue().values():
                    out.setdefault(str(score.id), score.to_json())
            if not out:
                out = {str(sid): score.to_json() for sid, score in SCORES.items()}
            return dict(sorted(out.items(), key=lambda kv: int(kv[0])))
        for tape in tapes:
            league = _league_json(tape)
            season = _season_json(tape)
            teams = [tape.localteam.to_json("teams"), tape.visitorteam.to_json("teams")]
            if kind == "teams":
                for team in teams:
                    obj = out.setdefault(str(team["id"]), team)
                    if "squad" in include:
                        players, _ = tape.json_tables()
                        squad = obj.setdefault("squad", [])
                        known = {p["id"] for p in squad}
                        squad.extend(
                            dict(players[e.player_id])
                            for e in tape.lineups
                            if e.team_id == team["id"] and e.player_id not in known
                        )
            elif kind == "leagues":
                obj = out.setdefault(str(league["id"]), league)
                if "seasons" in include:
                    seasons = obj.setdefault("seasons", [])
                    if season["id"] not in {x["id"] for x in seasons}:
                        seasons.append(season)
                if "season" in include and league.get("season_id") in (None, season["id"]):
                    obj["season"] = season  # the league's current season
            else:  # seasons
                obj = out.setdefault(str(season["id"]), season)
                if "league" in include:
                    obj["league"] = league
                if "teams" in include:
                    have = obj.setdefault("teams", [])
                    have.extend(t for t in teams if t["id"] not in {x["id"] for x in have})
                if "fixtures" in include:
                    m = self._matches[tape.fixture_id]
                    obj.setdefault("fixtures", []).append(
                        json.loads(self._fixture_bytes(m, now, frozenset())[0])
                    )
        return dict(sorted(out.items(), key=lambda kv: int(kv[0])))

    def _one_fixture(self, raw_id: str, include: frozenset[str], now: float) -> bytes:
        m = self._matches.get(raw_id)
        if m is None:
            raise ReplayRequestError(f"No query results for model [Fixture] {raw_id}", status=404)
        data, _ = self._fixture_bytes(m, now, include)
        return b'{"data":' + data + b"}"

    def _filtered(self, query: dict[str, str], now: float) -> list[tuple[_Match, dict[str, Any]]]:
        """(match, base fixture fields) for every fixture passing ``filter[...]``, sorted by ``sort``."""
        filters: dict[str, list[str]] = {}
        for key, value in query.items():
            if key.startswith("filter[") and key.endswith("]"):
                name = key[7:-1]
                if name not in FILTERABLE and name != "starts_between":
                    raise ReplayRequestError(
                        f"filter[{name}] is not supported (try {', '.join(sorted(FILTERABLE))})"
                    )
                filters[name] = [v.strip() for v in value.split(",")]
        rows = []
        for m in self._matches.values():
            base = json.loads(self._fixture_bytes(m, now, frozenset())[0])
            if all(_passes(base, name, values) for name, values in filters.items()):
                rows.append((m, base))
        sort = query.get("sort")
        if sort:
            for key in reversed(sort.split(",")):
                desc, name = key.startswith("-"), key.lstrip("-")
                if name not in FILTERABLE and name not in ("starting_at", "updated_at"):
                    raise ReplayRequestError(f"sort: cannot sort by {name!r}")
                rows.sort(key=partial(_row_sort_key, name), reverse=desc)
        return rows

    def _livescores(self, query: dict[str, str], include: frozenset[str], now: float) -> bytes:
        parts = []
        for m, base in self._filtered(query, now):
            if base["status"] in NOT_LIVE:  # not started yet, or finished: only /fixtures has it (spec §3)
                continue
            parts.append(self._fixture_bytes(m, now, include)[0])
        return b'{"data":[' + b",".join(parts) + b"]}"

    def _page(self, items: list[bytes], query: dict[str, str], host: str, path: str) -> bytes:
        """A Laravel paginator page of already-encoded items (``page``, ``per_page`` = page_size)."""
        raw_page = query.get("page", "1")
        if not raw_page.isdigit() or int(raw_page) < 1:
            raise ReplayRequestError(f"page: must be a positive integer, got {raw_page!r}")
        page = int(raw_page)
        total = len(items)
        last_page = max(1, math.ceil(total / self.page_size))
        chunk = items[(page - 1) * self.page_size : page * self.page_size]
        body = b",".join(chunk)
        base_url = f"http://{host}{path}"

        def link(n: int | None) -> str | None:
            return None if n is None else f"{base_url}?page={n}"  # only page=N, as the real API (spec §9.10)

        first_index = (page - 1) * self.page_size + 1 if chunk else None
        meta = {
            "current_page": page,
            "from": first_index,
            "last_page": last_page,
            "links": [
                {"url": link(n), "label": str(n), "active": n == page} for n in range(1, last_page + 1)
            ],
            "path": base_url,
            "per_page": self.page_size,
            "to": (first_index + len(chunk) - 1) if first_index else None,
            "total": total,
        }
        links = {
            "first": link(1),
            "last": link(last_page),
            "prev": link(page - 1) if page > 1 else None,
            "next": link(page + 1) if page < last_page else None,
        }
        return (
            b'{"data":[' + body + b'],"links":' + encode_json(links) + b',"meta":' + encode_json(meta) + b"}"
        )

    def _control(self, method: str, segments: list[str], query: dict[str, str], body: bytes) -> _Response:
        action = segments[0] if segments else ""
        allowed = {
            "status": {"GET"},
            "play": {"POST"},
            "pause": {"POST"},
            "stop": {"POST"},
            "seek": {"POST"},
            "speed": {"POST"},
            "faults": {"GET", "POST", "DELETE"},
        }
        if action not in allowed or len(segments) > 1:
            raise ReplayRequestError(
                f"no replay control {'/'.join(segments)!r} (have: {', '.join(allowed)})", 404
            )
        if method not in allowed[action]:
            raise ReplayRequestError(f"{method} is not allowed on /replay/{action}", status=405)
        fixture_id = query.get("fixture_id") or None
        stop_after = False
        if action == "play":
            self.play(fixture_id, speed=_number(query, "speed") if "speed" in query else None)
        elif action == "pause":
            self.pause(fixture_id)
        elif action == "stop":
            stop_after = True
        elif action == "speed":
            if "x" not in query:
                raise ReplayRequestError("speed: the query parameter x is required")
            self.set_speed(_number(query, "x"), fixture_id)
        elif action == "seek":
            entry = _integer(query, "entry") if "entry" in query else None
            ball_id = _integer(query, "ball_id") if "ball_id" in query else None
            self.seek(fixture_id, entry, ball_id=ball_id)
        elif action == "faults":
            if method == "DELETE":
                self.clear_faults()
            elif method == "POST":
                try:
                    spec = FaultSpec.model_validate_json(body or b"{}")
                except ValidationError as exc:
                    first = exc.errors()[0]
                    where = ".".join(map(str, first["loc"])) or "body"
                    raise ReplayRequestError(f"fault {where}: {first['msg']}") from exc
                fault_id = self._inject(spec)
                return _json_response({"id": fault_id, "faults": self.faults()})
            return _json_response({"faults": self.faults()})
        response = _json_response(
            {"fixtures": self.status(), "faults": self.faults(), "stopping": stop_after}
        )
        response.stop_after = stop_after
        return response

    # ------------------------------------------------------------------------------------------ HTTP server

    async def serve(
        self, host: str = "127.0.0.1", port: int = 0, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on (host, port) until ``stop()``; ``task_status.started(port)`` with the bound port."""
        listeners = await trio.open_tcp_listeners(port, host=host)
        self.host, self.port = host, listeners[0].socket.getsockname()[1]
        self._stop_event = trio.Event()
        if self._stop_requested:
            self._stop_event.set()
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._connection, listeners)
            log.info("replay_serving", host=host, port=self.port, fixtures=self.fixture_ids)
            task_status.started(self.port)
            await self._stop_event.wait()
            nursery.cancel_scope.cancel()

    async def _connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        try:
            while True:
                request, body = await self._read_request(conn, stream)
                if request is None:
                    return
                host = next((v.decode("latin-1") for k, v in request.headers if k == b"host"), "localhost")
                response = await self.handle(
                    request.method.decode("ascii", "replace"), request.target.decode("latin-1"), body, host
                )
                if response.hold_s:
                    await trio.sleep(response.hold_s)
                if response.disconnect:
                    return
                await self._send(conn, stream, response)
                if response.stop_after:
                    self.stop()
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except h11.RemoteProtocolError as exc:
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                status = exc.error_status_hint if 400 <= exc.error_status_hint < 500 else 400
                with _quiet():
                    await self._send(
                        conn, stream, _Response(status, _error_body(f"bad request: {exc}", status))
                    )
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            with _quiet():
                await stream.aclose()

    async def _read_request(
        self, conn: h11.Connection, stream: trio.SocketStream
    ) -> tuple[h11.Request | None, bytes]:
        request: h11.Request | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                with trio.move_on_after(IDLE_TIMEOUT_S) as idle:
                    data = await stream.receive_some(65536)
                if idle.cancelled_caught:
                    return None, b""
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                # h11 bounds a head only while it is incomplete; one that arrived whole is checked here
                size = len(event.target) + sum(len(k) + len(v) + 4 for k, v in event.headers)
                if size > MAX_HEAD_BYTES:
                    msg = f"request head over {MAX_HEAD_BYTES} bytes"
                    await self._send(
                        conn, stream, _Response(431, _error_body(msg, 431), [("connection", "close")])
                    )
                    return None, b""
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_BODY_BYTES:
                    msg = f"request body over {MAX_BODY_BYTES} bytes"
                    await self._send(
                        conn, stream, _Response(413, _error_body(msg, 413), [("connection", "close")])
                    )
                    return None, b""
            elif isinstance(event, h11.EndOfMessage):
                return request, bytes(body)
            else:  # ConnectionClosed or PAUSED
                return None, b""

    async def _send(self, conn: h11.Connection, stream: trio.SocketStream, response: _Response) -> None:
        headers = [
            ("server", "sightscreen-replay"),
            ("content-length", str(len(response.body))),
            *response.headers,
        ]
        if not any(k == "content-type" for k, _ in response.headers):
            headers.append(("content-type", "application/json"))
        out = conn.send(h11.Response(status_code=response.status, headers=headers))
        out += conn.send(h11.Data(data=response.body))
        out += conn.send(h11.EndOfMessage())
        await stream.send_all(out)


class _quiet:
    """Swallow the errors of writing to / closing a peer that already left."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return exc_type is not None and issubclass(
            exc_type, trio.BrokenResourceError | trio.ClosedResourceError | h11.LocalProtocolError
        )


def _json_response(value: Any) -> _Response:
    return _Response(200, encode_json(value), [("content-type", "application/json")])


def _number(query: dict[str, str], name: str) -> float:
    try:
        value = float(query[name])
    except ValueError:
        raise ReplayRequestError(f"{name}: not a number: {query[name]!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise ReplayRequestError(f"{name}: must be a positive number, got {query[name]!r}")
    return value


def _integer(query: dict[str, str], name: str) -> int:
    raw = query[name]
    if not raw.lstrip("-").isdigit():
        raise ReplayRequestError(f"{name}: not an integer: {raw!r}")
    return int(raw)


def _endpoint_of(segments: list[str]) -> str | None:
    """The endpoint a data path belongs to (the name faults and counters use), None if not served."""
    if segments == ["livescores"]:
        return "livescores"
    if segments == ["fixtures"]:
        return "fixtures"
    if len(segments) == 2 and segments[0] == "fixtures":
        return "fixture"
    if 1 <= len(segments) <= 2 and segments[0] in REFERENCE_INCLUDES:
        return segments[0]
    return None


def _league_json(tape: Tape) -> dict[str, Any]:
    if tape.league is not None:
        return tape.league.to_json("leagues")
    return {
        "resource": "leagues",
        "id": tape.league_id,
        "season_id": tape.season_id,
        "name": f"League {tape.league_id}",
    }


def _season_json(tape: Tape) -> dict[str, Any]:
    if tape.season is not None:
        season = tape.season.to_json("seasons")
        if season.get("league_id") is None:
            season["league_id"] = tape.league_id
        return season
    return {
        "resource": "seasons",
        "id": tape.season_id,
        "league_id": tape.league_id,
        "name": str(tape.season_id),
    }


def _row_sort_key(name: str, row: tuple[_Match, dict[str, Any]]) -> tuple[int, float, str]:
    return _sort_key(row[1].get(name))


def _sort_key(value: Any) -> tuple[int, float, str]:
    if value is None:
        return (2, 0.0, "")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def _parse_include(raw: str) -> frozenset[str]:
    names = set()
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        top = item.split(".", 1)[0]
        if top not in FIXTURE_INCLUDES and top not in UNMODELLED_INCLUDES:
            raise ReplayRequestError(f"include: unknown relation {item!r}")
        names.add(top)
    return frozenset(names)


def _passes(base: dict[str, Any], name: str, values: list[str]) -> bool:
    if name == "starts_between":
        if len(values) != 2:
            raise ReplayRequestError("filter[starts_between]: needs two dates separated by a comma")
        start = _as_dt(values[0], end=False)
        end = _as_dt(values[1], end=True)
        at = datetime.fromisoformat(base["starting_at"].replace("Z", "+00:00"))
        return start <= at <= end
    value = base.get(name)
    return str(value) in values or (isinstance(value, bool) and str(value).lower() in values)


def _as_dt(raw: str, *, end: bool) -> datetime:
    try:
        if len(raw) == 10:  # a date: the whole day
            day = datetime.fromisoformat(raw).replace(tzinfo=UTC)
            return day.replace(hour=23, minute=59, second=59, microsecond=999999) if end else day
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ReplayRequestError(f"filter[starts_between]: not a date or datetime: {raw!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _fault_response(spec: FaultSpec) -> _Response:
    if spec.mode == "disconnect":
        return _Response(0, disconnect=True)
    if spec.mode == "429":
        return _Response(
            429,
            _error_body("Too Many Attempts.", 429),
            [("content-type", "application/json"), ("retry-after", str(spec.retry_after))],
        )
    return _Response(
        spec.status, _error_body("Server Error", spec.status), [("content-type", "application/json")]
    )


def _apply_body_fault(spec: FaultSpec, response: _Response) -> _Response:
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
    return response


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


def _other_score(score_id: int) -> int:
    """A plausible correction of ``score_id`` (the kinds the real feed makes: FOUR <-> SIX, a run more...)."""
    swaps = {47: 53, 53: 47, 82: 69, 69: 70, 70: 69, 71: 70, 54: 82, 79: 82, 17: 52, 52: 17, 4: 69, 1: 69}
    return swaps.get(score_id, 82 if score_id != 82 else 69)


__all__ = ["ENDPOINTS", "FaultSpec", "ReplayRequestError", "ReplayServer", "encode_json"]
