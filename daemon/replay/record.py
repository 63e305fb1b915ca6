"""The tape recorder: follows one live fixture on the real API and writes its feed history as a tape.

Owns ``record`` and the pure diff of two ball lists (``diff_balls``). Each poll fetches
``/fixtures/{id}`` with balls; a ball id not seen before becomes a ``ball`` entry, a seen id whose fields
changed a ``correct`` entry, and a seen id that vanished from the (complete) list a ``delete`` entry, each
stamped with the ball's ``updated_at`` (the poll time for a deletion). Metadata (teams, lineup, toss,
result) is refreshed on every poll.

Resumable: the tape is written atomically after every poll that changed it; started again with the same
output file, the recorder rebuilds the ball list the tape ends with and carries on, so whatever changed
while it was down is recorded as the corresponding entries. It stops when the fixture reaches a terminal
status (``Finished``, ``Aban.``, ``Cancl.``, ``Postp.``).

The token comes from ``SIGHTSCREEN_SPORTMONKS_TOKEN`` or a file and is never logged. It uses httpx
directly (one GET per poll, the API's per-endpoint budget in mind: the default 5 s cadence is 720
calls an hour); it must not touch the daemon's Feed or its budget.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import trio
from pydantic import ValidationError

from daemon.backoff import backoff_delay
from daemon.logs import get_logger
from daemon.replay.errors import ReplayError
from daemon.replay.tape import (
    TERMINAL_STATUSES,
    Tape,
    TapeBall,
    TapeError,
    ball_fields,
    load_tape,
    save_tape,
    tape_metadata,
    tape_to_json,
    validate_tape,
    visible_balls,
)

log = get_logger("daemon.replay.record")

TOKEN_ENV = "SIGHTSCREEN_SPORTMONKS_TOKEN"
RECORD_INCLUDE = (
    "localteam,visitorteam,league,season,stage,venue,lineup,tosswon,winnerteam,runs,batting,bowling,balls"
)
PRODUCTION_BASE_URL = "https://cricket.sportmonks.com/api/v2.0"


class RecordError(ReplayError, RuntimeError):
    """The recording cannot go on (bad token, unknown fixture, a tape for another fixture)."""


def diff_balls(
    before: dict[int, dict[str, Any]], after: list[dict[str, Any]], *, now: datetime
) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """Tape entries that turn the ball list ``before`` (id -> tape ball fields) into ``after`` (raw balls),
    and the new ball list. New ids and corrections come in id order, then deletions. ``before`` is not
    changed, so a malformed ball (``TapeError``) loses nothing: the next poll diffs from the same state.
    """
    entries: list[dict[str, Any]] = []
    current: dict[int, dict[str, Any]] = {}
    for i, raw in enumerate(sorted(after, key=lambda b: b.get("id", 0) if isinstance(b, dict) else 0)):
        where = f"balls[{i}]"
        try:
            fields = TapeBall.model_validate(ball_fields(raw, where)).model_dump()
        except ValidationError as exc:
            first = exc.errors()[0]
            raise TapeError(f"{where}.{'.'.join(map(str, first['loc']))}: {first['msg']}") from exc
        current[fields["id"]] = fields
        stamp = raw.get("updated_at") or _iso(now)
        old = before.get(fields["id"])
        if old is None:
            entries.append({"op": "ball", "ball": fields, "updated_at": stamp})
        elif old != fields:
            entries.append({"op": "correct", "ball": fields, "updated_at": stamp})
    for gone in sorted(set(before) - set(current)):
        entries.append({"op": "delete", "ball_id": gone, "updated_at": _iso(now)})
    return entries, current


def _iso(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def read_token(token_file: str | None) -> str | None:
    """The API token from a file (first line) or the environment; None when neither is set."""
    if token_file:
        try:
            return Path(token_file).read_text().strip() or None
        except OSError as exc:
            raise RecordError(f"token file {token_file}: cannot read: {exc.strerror or exc}") from exc
    return os.environ.get(TOKEN_ENV) or None


@dataclass
class RecordOutcome:
    polls: int
    entries: int
    status: str | None
    finished: bool


class Recorder:
    """Recording state for one fixture and output file (restartable: see ``resume``)."""

    def __init__(self, fixture_id: str, out: str | Path) -> None:
        self.fixture_id = str(fixture_id)
        self.out = Path(out)
        self.meta: dict[str, Any] | None = None
        self.entries: list[dict[str, Any]] = []
        self.balls: dict[int, dict[str, Any]] = {}
        self.source = f"record {self.fixture_id}"

    def resume(self) -> bool:
        """Continue an earlier recording of the same fixture at ``out``; False if there is none."""
        if not self.out.exists():
            return False
        tape = load_tape(self.out)
        if tape.fixture_id != self.fixture_id:
            raise RecordError(f"{self.out} is a tape of fixture {tape.fixture_id}, not {self.fixture_id}")
        raw = tape_to_json(tape)
        self.entries = raw.pop("entries", [])
        self.source = raw.pop("source", self.source)
        raw.pop("format_version", None)
        self.meta = raw
        self.balls = {vb.ball.id: vb.ball.model_dump() for vb in visible_balls(tape, len(tape))}
        return True

    def apply(self, data: dict[str, Any], *, now: datetime) -> int:
        """Fold one fixture response into the recording; returns how many entries it added."""
        if str(data.get("id")) != self.fixture_id:
            raise RecordError(f"asked for fixture {self.fixture_id}, the API answered {data.get('id')}")
        meta = tape_metadata(data, self.meta)
        new, balls = diff_balls(self.balls, data.get("balls") or [], now=now)
        self.meta, self.balls = meta, balls
        self.entries.extend(new)
        return len(new)

    def tape(self) -> Tape:
        if self.meta is None:
            raise RecordError("nothing recorded yet")
        return validate_tape({**self.meta, "source": self.source, "entries": self.entries}, str(self.out))

    def save(self) -> None:
        save_tape(self.tape(), self.out)


async def record(
    fixture_id: str,
    out: str | Path,
    *,
    base_url: str = PRODUCTION_BASE_URL,
    token: str | None = None,
    interval_s: float = 5.0,
    max_polls: int | None = None,
    timeout_s: float = 10.0,
    client: httpx.AsyncClient | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> RecordOutcome:
    """Record ``fixture_id`` into ``out`` until it finishes (or ``max_polls`` polls); resumes ``out``.

    Transient failures (timeouts, 429 with Retry-After, 5xx, malformed bodies) are logged and retried with
    backoff; 401/403/404 stop the recording with ``RecordError``.
    """
    rec = Recorder(fixture_id, out)
    if rec.resume():
        log.info("record_resumed", fixture_id=fixture_id, entries=len(rec.entries), out=str(out))
    url = f"{base_url.rstrip('/')}/fixtures/{fixture_id}"
    params = {"include": RECORD_INCLUDE}
    if token:
        params["api_token"] = token
    own_client = client is None
    http = client or httpx.AsyncClient(timeout=timeout_s)
    polls = 0
    failures = 0
    status: str | None = None
    try:
        while max_polls is None or polls < max_polls:
            polls += 1
            try:
                data = await _fetch(http, url, params, fixture_id)
                try:
                    added = rec.apply(data, now=now())
                except TapeError as exc:
                    raise _Transient(f"malformed fixture: {exc}") from exc
            except _Transient as exc:
                failures += 1
                # exponential backoff from the cadence, capped at a minute; a 429 says how long itself
                backoff = backoff_delay(failures + 1, base_s=interval_s, cap_s=60.0)
                wait = exc.retry_after if exc.retry_after is not None else backoff
                log.warning("record_poll_failed", fixture_id=fixture_id, reason=str(exc), retry_in_s=wait)
            else:
                failures = 0
                wait = interval_s
                status = data.get("status")
                if added or polls == 1:
                    rec.save()
                    log.info(
                        "record_poll",
                        fixture_id=fixture_id,
                        added=added,
                        status=status,
                        total=len(rec.entries),
                    )
                if status in TERMINAL_STATUSES:
                    rec.save()
                    return RecordOutcome(polls, len(rec.entries), status, True)
            if max_polls is None or polls < max_polls:
                await trio.sleep(wait)
    finally:
        if own_client:
            await http.aclose()
    return RecordOutcome(polls, len(rec.entries), status, False)


class _Transient(ReplayError):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


async def _fetch(
    http: httpx.AsyncClient, url: str, params: dict[str, str], fixture_id: str
) -> dict[str, Any]:
    """One poll: the fixture object, or ``_Transient`` for what is worth retrying, ``RecordError`` for what is not."""
    try:
        resp = await http.get(url, params=params)
    except httpx.TransportError as exc:
        raise _Transient(f"{type(exc).__name__}: {exc}") from exc
    if resp.status_code in (401, 403, 404):
        raise RecordError(f"GET /fixtures/{fixture_id}: HTTP {resp.status_code}: {resp.text[:160]}")
    if resp.status_code == 429:
        raw = resp.headers.get("retry-after", "")
        raise _Transient("HTTP 429", retry_after=float(raw) if raw.replace(".", "", 1).isdigit() else None)
    if resp.status_code >= 400:
        raise _Transient(f"HTTP {resp.status_code}")
    try:
        body = resp.json()
    except ValueError as exc:
        raise _Transient(f"malformed JSON: {exc}") from exc
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, dict):
        raise _Transient("response without a `data` object")
    if not isinstance(data.get("balls"), list):
        raise _Transient("response without a `balls` list")
    return data
