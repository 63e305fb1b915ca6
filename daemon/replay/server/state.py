"""One served fixture: its tape, its clock, how far the feed has got, and its rendered output.

The clock (``cursor.ReplayClock``) says which entry is due when; ``advance`` brings the served cursor up to
it and stamps each newly visible entry with the time it became visible (the balls' ``updated_at``). The
encoded fixture is cached per (cursor, include) and each ball's JSON is encoded once, since balls are most
of a payload and never change once visible; ``invalidate`` drops all of it when served output may change
(a seek back, an inserted correction).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from daemon.replay.cursor import ReplayClock
from daemon.replay.server.http import encode_json
from daemon.replay.server.query import UNMODELLED_INCLUDES, Fields, sparse
from daemon.replay.tape import Scorecard, Tape

CACHE_PER_FIXTURE = 16
_BALLS_SENTINEL = "\x00balls\x00"
_BALLS_SENTINEL_JSON = b'"\\u0000balls\\u0000"'


@dataclass
class ServedMatch:
    tape: Tape
    clock: ReplayClock
    visible_at: list[float | None]  # when each entry last became visible (ball updated_at)
    first_seen: list[float | None]  # when each entry first became visible (lag measurement)
    # when a request first got each entry (``/livescores``, ``/fixtures/{id}``): the lag measured from it leaves
    # out the wait for the client's next poll
    first_polled: list[float | None] = field(default_factory=list)
    polled_upto: int = 0  # every entry before it has been stamped in ``first_polled``
    cursor: int = 0
    version: int = 0  # bumped whenever already-served output can change (seek back, inserted entries)
    cache: dict[tuple[Any, ...], tuple[bytes, str]] = field(default_factory=dict)
    ball_cache: dict[int, dict[str, Any]] = field(default_factory=dict)  # entry index -> ball object
    ball_bytes: dict[int, bytes] = field(default_factory=dict)  # id(ball object) -> its JSON
    stall_until: float = 0.0  # wall time a "stall" fault ends (the feed then catches up at once)
    card: Scorecard | None = None  # the scorecard at `cursor`, shared by every include set
    card_version: int = -1

    @classmethod
    def of(cls, tape: Tape, clock: ReplayClock) -> ServedMatch:
        n = len(tape)
        return cls(tape, clock, [None] * n, [None] * n)

    def invalidate(self) -> None:
        """Already-rendered output may be wrong now (seek back, an inserted entry)."""
        self.version += 1
        self.cache.clear()
        self.ball_cache.clear()
        self.ball_bytes.clear()

    def advance(self, now: float) -> None:
        """Bring the served cursor up to the clock, stamping each newly visible entry with its due time."""
        if now < self.stall_until:
            return  # the feed is stalled: nothing new until it catches up in one burst
        target = self.clock.cursor(now)
        for i in range(self.cursor, target):
            t = max(self.clock.wall_time_of(i, now), self.stall_until)
            self.visible_at[i] = t
            if self.first_seen[i] is None:
                self.first_seen[i] = t
        if target > self.cursor:
            self.cursor = target

    def note_polled(self, now: float, upto: int | None = None) -> None:
        """A response carried this fixture as served now (up to entry ``upto``, for an answer that lags):
        stamp the entries no request had got before."""
        upto = self.cursor if upto is None else min(upto, self.cursor)
        if len(self.first_polled) < len(self.first_seen):
            self.first_polled.extend([None] * (len(self.first_seen) - len(self.first_polled)))
        for i in range(self.polled_upto, upto):
            if self.first_polled[i] is None:
                self.first_polled[i] = now
        self.polled_upto = max(self.polled_upto, upto)

    def view(self, now: float, lag_s: float = 0.0) -> tuple[int, bool]:
        """(cursor, started) as an answer shows them now, or as they were ``lag_s`` ago (an endpoint that
        lags): never past what has been served."""
        self.advance(now)
        if lag_s <= 0:
            return self.cursor, self.clock.started(now)
        then = now - lag_s
        return min(self.cursor, self.clock.cursor(then)), self.clock.started(then)

    def status(self, now: float, lag_s: float = 0.0) -> str:
        """The fixture's status as served now (``NS`` until the match starts)."""
        return self.fixture_bytes(now, frozenset(), lag_s=lag_s)[1]

    def fixture_bytes(
        self,
        now: float,
        include: frozenset[str],
        *,
        fields: Fields = (),
        relations: frozenset[str] = frozenset(),
        lag_s: float = 0.0,
    ) -> tuple[bytes, str]:
        """The encoded fixture object and its status, cached per (cursor, include, fields): as served now,
        or ``lag_s`` ago; cut to the sparse ``fields`` when given (``relations``: the include's names)."""
        cursor, started = self.view(now, lag_s)
        forced = None if started else "NS"
        key = (cursor, forced, include, fields, relations if fields else None, self.version)
        cached = self.cache.get(key)
        if cached is None:
            times = self.visible_at
            data = self.tape.fixture_at(
                cursor,
                status=forced,
                include=[name for name in include if name not in UNMODELLED_INCLUDES],
                now=datetime.fromtimestamp(now, UTC),
                entry_times=lambda i: times[i] or now,
                ball_cache=self.ball_cache,
                scorecard=self.scorecard(cursor),
            )
            for name in include & UNMODELLED_INCLUDES.keys():
                data[name] = UNMODELLED_INCLUDES[name]()
            if fields:
                encoded = encode_json(sparse(data, fields, relations))
            else:
                encoded = self._encode_fixture(data)
            cached = (encoded, data["status"])
            if len(self.cache) >= CACHE_PER_FIXTURE:
                self.cache.pop(next(iter(self.cache)))
            self.cache[key] = cached
        return cached

    def scorecard(self, cursor: int | None = None) -> Scorecard:
        """The scorecard at ``cursor`` (default: the served one), the served one rebuilt only when the cursor
        or the tape changed."""
        if cursor is not None and cursor != self.cursor:
            return self.tape.scorecard_at(cursor)  # an answer that lags: not kept
        if self.card is None or self.card.cursor != self.cursor or self.card_version != self.version:
            self.card, self.card_version = self.tape.scorecard_at(self.cursor), self.version
        return self.card

    def _encode_fixture(self, data: dict[str, Any]) -> bytes:
        """Encode a fixture, reusing each ball's bytes: balls are most of the payload and never change once
        visible, so only the rest is encoded per cursor."""
        balls = data.get("balls")
        if not balls:
            return encode_json(data)
        data["balls"] = _BALLS_SENTINEL
        parts = []
        for ball in balls:
            raw = self.ball_bytes.get(id(ball))  # ball objects live in ball_cache until invalidate()
            if raw is None:
                raw = self.ball_bytes[id(ball)] = encode_json(ball)
            parts.append(raw)
        encoded = encode_json(data)
        data["balls"] = balls
        return encoded.replace(_BALLS_SENTINEL_JSON, b"[" + b",".join(parts) + b"]", 1)
