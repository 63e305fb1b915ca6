"""``ReplayServer``: the served fixtures, their controls, request routing and the listener.

The package docstring lists the endpoints, controls and faults. This module ties the parts together:
``state`` (one served fixture), ``query`` (SportMonks' query rules), ``faults`` and ``http`` (the wire).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import trio
from pydantic import ValidationError

from daemon.logs import get_logger
from daemon.replay.cursor import ReplayClock, check_speed
from daemon.replay.server import faults as fault_rules
from daemon.replay.server import query as q
from daemon.replay.server.faults import FaultList, FaultSpec
from daemon.replay.server.http import (
    ReplayRequestError,
    Response,
    encode_json,
    error_response,
    json_response,
    serve_connection,
)
from daemon.replay.server.state import ServedMatch
from daemon.replay.tape import FIXTURE_INCLUDES, Tape, iso

log = get_logger("daemon.replay.server")

_CONTROLS: dict[str, set[str]] = {
    "status": {"GET"},
    "play": {"POST"},
    "pause": {"POST"},
    "stop": {"POST"},
    "seek": {"POST"},
    "speed": {"POST"},
    "faults": {"GET", "POST", "DELETE"},
}


class ReplayServer:
    """Serves tapes like SportMonks; controllable in-process and over HTTP. See the package docstring.

    ``speed`` multiplies match time; ``ms_per_ball`` (default: each tape's own) is the mean gap between entries
    at speed 1 (a tape's own gaps are scaled to it); ``innings_break_s`` and ``start_delay_s`` are match time too (wall time = value / speed).
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
        hourly_budget: int | None = None,
        endpoint_budgets: Mapping[str, int] | None = None,
        budget_window_s: float = 3600.0,
    ) -> None:
        check_speed(speed)
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
        self._matches: dict[str, ServedMatch] = {}
        self._faults = FaultList()
        self._ghosts: dict[str, tuple[FaultSpec, str]] = {}  # ghost id -> its fault and default starting_at
        self._fault_seq = 0
        self._stop_requested = False
        self._stop_event: trio.Event | None = None
        self.requests_served: dict[str, int] = dict.fromkeys((*q.ENDPOINTS, "control"), 0)
        self.budget = PlanBudget(hourly_budget, endpoint_budgets or {}, window_s=budget_window_s)
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
        clock = ReplayClock.for_tape(
            tape,
            ms_per_ball=self.ms_per_ball,
            break_ms=self.innings_break_s * 1000.0,
            starts_at=now + start_delay_s / self.speed,
            speed=self.speed,
        )
        self._matches[tape.fixture_id] = ServedMatch.of(tape, clock)

    @property
    def fixture_ids(self) -> list[str]:
        return list(self._matches)

    def tape(self, fixture_id: str | int) -> Tape:
        return self._match(fixture_id).tape

    def _match(self, fixture_id: str | int | None) -> ServedMatch:
        if fixture_id is None:
            if len(self._matches) == 1:
                return next(iter(self._matches.values()))
            raise ReplayRequestError("fixture_id is required when several fixtures are served")
        match = self._matches.get(str(fixture_id))
        if match is None:
            raise ReplayRequestError(f"fixture_id {fixture_id} is not served here", status=404)
        return match

    def _selected(self, fixture_id: str | int | None) -> list[ServedMatch]:
        return list(self._matches.values()) if fixture_id is None else [self._match(fixture_id)]

    # ------------------------------------------------------------------------------------------ controls

    def play(self, fixture_id: str | int | None = None, *, speed: float | None = None) -> None:
        if speed is not None:
            _request_speed(speed)
        now = self.clock()
        for m in self._selected(fixture_id):
            m.advance(now)
            m.clock.play(now)
            if speed is not None:
                m.clock.set_speed(speed, now)

    def pause(self, fixture_id: str | int | None = None) -> None:
        now = self.clock()
        for m in self._selected(fixture_id):
            m.advance(now)
            m.clock.pause(now)

    def set_speed(self, x: float, fixture_id: str | int | None = None) -> None:
        _request_speed(x)
        now = self.clock()
        if fixture_id is None:
            self.speed = x
        for m in self._selected(fixture_id):
            m.advance(now)
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
        m.advance(now)
        m.stall_until = 0.0  # an explicit seek ends a stall
        m.clock.seek(entry_index, now)
        if entry_index < m.cursor:
            for i in range(entry_index, m.cursor):
                m.visible_at[i] = None
            m.cursor = entry_index
            m.invalidate()
        m.advance(now)

    def stop(self) -> None:
        """Shut the HTTP server down (``serve`` returns)."""
        self._stop_requested = True
        if self._stop_event is not None:
            self._stop_event.set()

    def calls(self) -> dict[str, Any]:
        """SportMonks calls per entity (the unit the hourly limit counts: ``/fixtures/{id}`` and ``/fixtures``
        are one) since the start: answered, refused with a 429 past the plan, the limit and the current
        window's count; and the requests per endpoint as served."""
        return {
            "by_entity": self.budget.describe(self.clock()),
            "by_endpoint": {k: v for k, v in self.requests_served.items() if k != "control" and v},
        }

    def sportmonks_requests(self) -> int:
        """SportMonks requests answered so far, every endpoint together (the control requests aside)."""
        return sum(n for endpoint, n in self.requests_served.items() if endpoint != "control")

    def status(self) -> dict[str, dict[str, Any]]:
        """Per fixture: cursor, total, status, started_at, ms_per_ball, speed, paused, finished, ..."""
        now = self.clock()
        out: dict[str, dict[str, Any]] = {}
        for fid, m in self._matches.items():
            m.advance(now)
            started = m.clock.started(now)
            status = m.status(now)
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
                "in_livescores": started and status not in q.NOT_LIVE,
            }
        return out

    def ball_served_at(self, fixture_id: str | int, entry_index: int) -> float | None:
        """Wall time (server clock) entry ``entry_index`` first became visible; None if it has not yet."""
        m = self._match(fixture_id)
        m.advance(self.clock())
        if not 0 <= entry_index < len(m.first_seen):
            return None
        return m.first_seen[entry_index]

    def ball_polled_at(self, fixture_id: str | int, entry_index: int) -> float | None:
        """Wall time (server clock) a request first got entry ``entry_index`` (``/livescores`` or
        ``/fixtures/{id}``); None if none has yet."""
        m = self._match(fixture_id)
        if not 0 <= entry_index < len(m.first_polled):
            return None
        return m.first_polled[entry_index]

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
        """Add a fault (see the package docstring); returns its id. Feed changes apply at once."""
        try:
            spec = FaultSpec(mode=mode, endpoint=endpoint, count=count, duration_s=duration_s, **params)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ReplayRequestError(f"fault {'.'.join(map(str, first['loc']))}: {first['msg']}") from exc
        return self._inject(spec)

    def _inject(self, spec: FaultSpec) -> int:
        self._fault_seq += 1
        now = self.clock()
        if spec.mode in fault_rules.FEED_CHANGES:
            m = self._match(spec.fixture_id)
            op, ball_id = fault_rules.change_feed(m, spec, now)
            log.info("replay_feed_changed", fixture_id=m.tape.fixture_id, op=op, ball_id=ball_id)
        elif spec.mode == "ghost":
            ghost_id = spec.fixture_id or ""
            if not ghost_id.isdigit() or ghost_id in self._matches:
                raise ReplayRequestError("fault fixture_id: ghost needs a numeric id that is not served here")
            if not self._matches:
                raise ReplayRequestError("fault ghost: no fixture is served to shape it on")
            self._ghosts[ghost_id] = (spec, iso(datetime.fromtimestamp(now - 30 * 86400, UTC)))
            self._faults.add(self._fault_seq, spec, now)
            log.info("replay_ghost_listed", fixture_id=ghost_id, count=spec.count, duration_s=spec.duration_s)
        elif spec.mode == "unlisted":
            self._match(spec.fixture_id)  # a served fixture, or a clear error
            if spec.fixture_id is None:
                raise ReplayRequestError("fault fixture_id: unlisted needs the fixture to leave out")
            self._faults.add(self._fault_seq, spec, now)
            log.info("replay_fixture_unlisted", fixture_id=spec.fixture_id, endpoint=spec.endpoint)
        elif spec.mode == "lag":
            if spec.endpoint is None:
                raise ReplayRequestError("fault endpoint: lag needs the endpoint that lags")
            self._faults.add(self._fault_seq, spec, now)
            log.info(
                "replay_endpoint_lags", endpoint=spec.endpoint, lag_s=spec.lag_s, duration_s=spec.duration_s
            )
        elif spec.mode == "stall":
            if spec.duration_s is None:
                raise ReplayRequestError("fault duration_s: required for stall")
            fault_rules.stall(self._selected(spec.fixture_id), spec.duration_s, now)
            log.info("replay_feed_stalled", fixture_id=spec.fixture_id, duration_s=spec.duration_s)
        else:
            self._faults.add(self._fault_seq, spec, now)
            log.info("replay_fault_injected", fault=spec.mode, endpoint=spec.endpoint, count=spec.count)
        return self._fault_seq

    def clear_faults(self) -> None:
        self._faults.clear()
        self._ghosts.clear()

    def faults(self) -> list[dict[str, Any]]:
        return self._faults.describe(self.clock())

    # ------------------------------------------------------------------------------------------ data

    def fixture(self, fixture_id: str | int, include: Iterable[str] | None = None) -> dict[str, Any]:
        """The fixture as ``/fixtures/{id}`` serves it now (in-process convenience)."""
        m = self._match(fixture_id)
        wanted = frozenset(FIXTURE_INCLUDES) if include is None else q.parse_include(",".join(include))
        raw, _ = m.fixture_bytes(self.clock(), wanted)
        data: dict[str, Any] = json.loads(raw)
        return data

    def _one_fixture(self, raw_id: str, shape: _Shape, now: float) -> bytes:
        m = self._matches.get(raw_id)
        if m is None and raw_id in self._ghosts:
            return b'{"data":' + self._ghost_bytes(raw_id, shape.include, now) + b"}"
        if m is None:
            raise ReplayRequestError(f"No query results for model [Fixture] {raw_id}", status=404)
        return b'{"data":' + self._served(m, shape, now) + b"}"

    def _served(self, m: ServedMatch, shape: _Shape, now: float) -> bytes:
        """One fixture as an answer of ``shape`` carries it, its first polls noted."""
        data, _ = m.fixture_bytes(
            now, shape.include, fields=shape.fields, relations=shape.relations, lag_s=shape.lag_s
        )
        m.note_polled(now, upto=m.view(now, shape.lag_s)[0])
        return data

    def _filtered(
        self, query: dict[str, str], now: float, lag_s: float = 0.0
    ) -> list[tuple[ServedMatch, dict[str, Any]]]:
        """(match, base fixture fields) for every fixture passing ``filter[...]``, sorted by ``sort``."""
        filters = q.parse_filters(query)
        rows = []
        for m in self._matches.values():
            base = json.loads(m.fixture_bytes(now, frozenset(), lag_s=lag_s)[0])
            if q.passes(base, filters):
                rows.append((m, base))
        q.sort_rows(rows, query)
        return rows

    def _livescores(self, query: dict[str, str], shape: _Shape, now: float) -> bytes:
        parts = []
        unlisted = self._faults.unlisted("livescores", now)
        for m, base in self._filtered(query, now, shape.lag_s):
            if base["status"] in q.NOT_LIVE:  # not started yet, or finished: only /fixtures has it (spec §3)
                continue
            if m.tape.fixture_id in unlisted:
                continue
            parts.append(self._served(m, shape, now))
        for spec in self._faults.listed_ghosts("livescores", now):
            parts.append(self._ghost_bytes(str(spec.fixture_id), shape.include, now))
        return b'{"data":[' + b",".join(parts) + b"]}"

    def _ghost_bytes(self, ghost_id: str, include: frozenset[str], now: float) -> bytes:
        """The ghost fixture ``ghost_id`` (see ``faults``), shaped on the first served tape before its start."""
        spec, starting_at = self._ghosts[ghost_id]
        tape = next(iter(self._matches.values())).tape
        base = tape.fixture_at(
            0,
            status="1st Innings",
            include=[name for name in include if name not in q.UNMODELLED_INCLUDES],
            now=datetime.fromtimestamp(now, UTC),
        )
        return encode_json(fault_rules.ghost_fixture(base, spec, starting_at))

    def _reference(
        self, segments: list[str], query: dict[str, str], host: str, path: str, now: float
    ) -> bytes:
        """Teams, leagues, seasons and the score catalogue, as far as the served tapes know them."""
        kind = segments[0]
        include = q.reference_include(kind, query.get("include", ""))

        def fixture_of(tape: Tape) -> dict[str, Any]:
            served: dict[str, Any] = json.loads(
                self._matches[tape.fixture_id].fixture_bytes(now, frozenset())[0]
            )
            return served

        tapes = [m.tape for m in self._matches.values()]
        objects = q.reference_objects(tapes, kind, include, fixture_of)
        if len(segments) == 2:
            obj = objects.get(segments[1])
            if obj is None:
                raise ReplayRequestError(
                    f"No query results for model [{kind[:-1].title()}] {segments[1]}", 404
                )
            return b'{"data":' + encode_json(obj) + b"}"
        return q.page([encode_json(o) for o in objects.values()], query, host, path, self.page_size)

    # ------------------------------------------------------------------------------------------ routing

    async def handle(self, method: str, target: str, body: bytes = b"", host: str = "localhost") -> Response:
        """Answer one request (the HTTP layer calls this; tests may too)."""
        try:
            return self._route(method, target, body, host)
        except ReplayRequestError as exc:
            return error_response(str(exc), exc.status)
        except Exception:
            # a bug here must cost one request, never the server (and every test or demo riding on it)
            log.exception("replay_request_failed", method=method, target=target.split("?", 1)[0])
            return error_response("replay server error", 500)

    def _route(self, method: str, target: str, body: bytes, host: str) -> Response:
        parts = urlsplit(target)
        path = parts.path.rstrip("/") or "/"
        prefix = ""
        if path == q.API_PREFIX or path.startswith(q.API_PREFIX + "/"):
            prefix, path = q.API_PREFIX, path[len(q.API_PREFIX) :] or "/"
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        segments = [s for s in path.split("/") if s]
        if segments[:1] == ["replay"]:
            self.requests_served["control"] += 1
            return self._control(method, segments[1:], query, body)
        endpoint = q.endpoint_of(segments)
        if endpoint is None:
            raise ReplayRequestError(f"no route for {path}", status=404)
        if method != "GET":
            raise ReplayRequestError(f"{method} is not allowed on {path}", status=405)
        if self.api_token is not None and query.get("api_token") != self.api_token:
            raise ReplayRequestError("Unauthenticated.", status=401)
        now = self.clock()
        refused = self.budget.take(q.entity_of(endpoint), now)
        if (
            refused is not None
        ):  # past the plan's hourly calls: SportMonks answers 429 until the window resets
            return fault_rules.too_many_attempts(refused)
        self.requests_served[endpoint] = self.requests_served.get(endpoint, 0) + 1
        fault = self._faults.take(endpoint, now)
        if fault is not None and fault.mode in fault_rules.REPLACING:
            return fault_rules.fault_response(fault)
        if endpoint in ("fixture", "livescores", "fixtures"):
            raw_include = query.get("include", "")
            shape = _Shape(
                include=q.parse_include(raw_include),
                fields=q.parse_fields(query),
                relations=q.relation_names(raw_include),
                lag_s=self._faults.lag_for(endpoint, now),
            )
            if endpoint == "fixture":
                body_out = self._one_fixture(segments[1], shape, now)
            elif endpoint == "livescores":
                body_out = self._livescores(query, shape, now)
            else:
                rows = self._filtered(query, now, shape.lag_s)
                ghosts: list[bytes] = []
                if "filter[status]" in query:  # the live list through /fixtures
                    unlisted = self._faults.unlisted("fixtures", now)
                    rows = [(m, base) for m, base in rows if m.tape.fixture_id not in unlisted]
                    ghosts = [
                        self._ghost_bytes(str(spec.fixture_id), shape.include, now)
                        for spec in self._faults.listed_ghosts("fixtures", now)
                    ]
                items = [self._served(m, shape, now) for m, _ in rows] + ghosts
                body_out = q.page(items, query, host, prefix + path, self.page_size)
        else:
            body_out = self._reference(segments, query, host, prefix + path, now)
        response = Response(200, body_out, [("content-type", "application/json")])
        if fault is not None:
            response = fault_rules.apply_body_fault(fault, response)
        return response

    def _control(self, method: str, segments: list[str], query: dict[str, str], body: bytes) -> Response:
        action = segments[0] if segments else ""
        if action not in _CONTROLS or len(segments) > 1:
            raise ReplayRequestError(
                f"no replay control {'/'.join(segments)!r} (have: {', '.join(_CONTROLS)})", 404
            )
        if method not in _CONTROLS[action]:
            raise ReplayRequestError(f"{method} is not allowed on /replay/{action}", status=405)
        fixture_id = query.get("fixture_id") or None
        stop_after = False
        if action == "play":
            self.play(fixture_id, speed=q.positive_number(query, "speed") if "speed" in query else None)
        elif action == "pause":
            self.pause(fixture_id)
        elif action == "stop":
            stop_after = True
        elif action == "speed":
            if "x" not in query:
                raise ReplayRequestError("speed: the query parameter x is required")
            self.set_speed(q.positive_number(query, "x"), fixture_id)
        elif action == "seek":
            entry = q.integer(query, "entry") if "entry" in query else None
            ball_id = q.integer(query, "ball_id") if "ball_id" in query else None
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
                return json_response({"id": fault_id, "faults": self.faults()})
            return json_response({"faults": self.faults()})
        response = json_response(
            {
                "fixtures": self.status(),
                "faults": self.faults(),
                "calls": self.calls(),
                "stopping": stop_after,
            }
        )
        response.stop_after = stop_after
        return response

    # ------------------------------------------------------------------------------------------ listener

    async def serve(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on (host, port) until ``stop()``; ``task_status.started(port)`` with the bound port."""
        listeners = await trio.open_tcp_listeners(port, host=host)
        self.host, self.port = host, listeners[0].socket.getsockname()[1]
        self._stop_event = trio.Event()
        if self._stop_requested:
            self._stop_event.set()
        connection = partial(serve_connection, handle=self.handle, on_stop=self.stop)
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, connection, listeners)
            log.info("replay_serving", host=host, port=self.port, fixtures=self.fixture_ids)
            task_status.started(self.port)
            await self._stop_event.wait()
            nursery.cancel_scope.cancel()


@dataclass(frozen=True)
class _Shape:
    """What one answer's query asks of each fixture: includes, sparse fields, and how far behind it is."""

    include: frozenset[str]
    fields: q.Fields
    relations: frozenset[str]
    lag_s: float


class PlanBudget:
    """SportMonks' hourly limit per entity as the real service applies it (spec §4): a window that starts
    at the first call and resets an hour later; past the limit every call is answered 429 until then. No
    limit for an entity without one (the default: tests and the demo call freely)."""

    def __init__(self, default: int | None, limits: Mapping[str, int], *, window_s: float = 3600.0) -> None:
        for name, value in [("hourly_budget", default), *limits.items()]:
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"{name}: a budget must be a whole number of calls >= 0, got {value!r}")
        if not (window_s > 0 and math.isfinite(window_s)):
            raise ValueError(f"budget_window_s: must be a finite number > 0, got {window_s}")
        self.default = default
        self.limits = dict(limits)
        self.window_s = window_s
        self._window: dict[str, tuple[float, int]] = {}  # entity -> (window start, calls in it)
        self.answered: dict[str, int] = {}
        self.refused: dict[str, int] = {}

    def limit(self, entity: str) -> int | None:
        return self.limits.get(entity, self.default)

    def take(self, entity: str, now: float) -> float | None:
        """Count a call to ``entity``; None when it may be answered, else the seconds until the window
        resets (the call is refused)."""
        start, used = self._window.get(entity, (now, 0))
        if now >= start + self.window_s:
            start, used = now, 0
        limit = self.limit(entity)
        if limit is not None and used >= limit:
            self.refused[entity] = self.refused.get(entity, 0) + 1
            self._window[entity] = (start, used)
            return start + self.window_s - now
        self._window[entity] = (start, used + 1)
        self.answered[entity] = self.answered.get(entity, 0) + 1
        return None

    def describe(self, now: float) -> dict[str, dict[str, Any]]:
        names = set(self.answered) | set(self.refused) | set(self.limits)
        out: dict[str, dict[str, Any]] = {}
        for name in sorted(names):
            start, used = self._window.get(name, (now, 0))
            out[name] = {
                "answered": self.answered.get(name, 0),
                "refused": self.refused.get(name, 0),
                "limit": self.limit(name),
                "window_calls": used if now < start + self.window_s else 0,
                "window_left_s": round(max(0.0, start + self.window_s - now), 3),
            }
        return out


def _request_speed(speed: float) -> None:
    try:
        check_speed(speed)
    except ValueError as exc:
        raise ReplayRequestError(f"speed: {exc}") from None
