"""The shared test doubles: each a real implementation of the Protocol it stands for, configured per test
instead of written again per file, and checked by ``mypy --strict`` (pyproject.toml).

- ``Clock``: a clock the test sets (``now``, ``advance``), or that runs on from a real one with an offset.
- ``FakeSportMonks``: a programmable SportMonks (``/livescores``, ``/fixtures`` with its filters, paging and
  includes, ``/fixtures/{id}``, ``/teams``, ``/leagues``, ``/seasons/{id}``) served as an
  ``httpx.MockTransport`` (``transport()``: no sockets, usable under trio's MockClock) or as a real HTTP/1.1
  server on loopback (``serve``); it records every request and can be scripted to fail. The project's full
  replay server is ``daemon/replay``.
- ``FakeSender``: the APNs sender as producers see it (``actors.ports.PushSender``). It records every push it
  is handed and answers each through its ``reply_to`` as APNs would: accepted by default, rejected or failed
  for the tokens a test names, never for those it says stay unanswered, after ``answer_after_s`` when set
  (then answered one by one in the background, in order). ``before_each`` runs before a push is taken (a
  test's hook: kill the producer mid fan-out, take a lock away...). tests/actors/test_sender_contract.py runs
  the same cases against it and the real ``ApnsSender``.
- ``ScriptedFeed``: a feed a match actor subscribes to; the test hands it updates with ``tick``.
- ``AudienceRecords``, ``SilencedLocks``, ``WithLocks``, ``LiveFeedDouble``, ``DyingClaims``: store and feed
  ports with one behaviour changed.
- ``sample``: a metric's current value, read through the Prometheus registry.

The DynamoDB side needs no double: tests run on moto's server (``repos`` in tests/conftest.py).
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import h11
import httpx
import trio

from actors.feed import FeedUpdate
from daemon.apns.types import Push, PushResult
from daemon.metrics import REGISTRY

# --- time ------------------------------------------------------------------------------------------------


class Clock:
    """A wall clock for a part that takes one (``clock=``, ``wall_clock=``): ``now`` as the test sets it, or,
    with ``running``, that clock's time plus ``now`` (a real clock the test can move on)."""

    def __init__(self, now: float = 0.0, *, running: Callable[[], float] | None = None) -> None:
        self.now = now
        self._running = running

    def __call__(self) -> float:
        return self.now if self._running is None else self._running() + self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# --- metrics -----------------------------------------------------------------------------------------------


def sample(name: str, labels: dict[str, str] | None = None) -> float:
    """The current value of the sample ``name`` (with ``labels``) in the daemon's registry; 0 when it has not
    been recorded yet. A counter's sample is named with its ``_total`` suffix."""
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


# --- SportMonks -------------------------------------------------------------------------------------------

PROD = "https://cricket.sportmonks.com/api/v2.0"


@dataclass
class Scripted:
    """One answer: a status, a JSON body (or the exact ``raw`` bytes), headers, and a wait before it."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    raw: bytes | None = None


@dataclass
class Seen:
    """One request: its path (below the base URL), its query (the token included), when it arrived (trio
    time) and the status it was answered with."""

    path: str
    query: dict[str, str]
    at: float = 0.0
    status: int = 0


@dataclass
class Fault:
    """Answer ``status`` to the requests ``when`` matches (path, query), ``times`` times (None: always)."""

    when: Callable[[str, dict[str, str]], bool]
    status: int = 500
    times: int | None = 1


def minimal_fixture(
    fixture_id: int, *, league_id: int = 3, status: str = "1st Innings", score: int = 0, balls: int = 0
) -> dict[str, Any]:
    """A small but well-formed fixture, in the real key order, with ``balls`` balls when asked."""
    fixture: dict[str, Any] = {
        "resource": "fixtures",
        "id": fixture_id,
        "league_id": league_id,
        "season_id": 1715,
        "stage_id": 6695,
        "round": "1st T20I",
        "localteam_id": 1,
        "visitorteam_id": 39,
        "starting_at": "2026-10-09T13:00:00.000000Z",
        "type": "T20I",
        "live": True,
        "status": status,
        "note": None,
        "winner_team_id": None,
        "runs": [
            {
                "resource": "runs",
                "id": fixture_id * 10,
                "fixture_id": fixture_id,
                "team_id": 39,
                "inning": 1,
                "score": score,
                "wickets": 0,
                "overs": 0.1,
                "pp1": None,
                "pp2": None,
                "pp3": None,
            }
        ],
    }
    if balls:
        fixture["balls"] = [
            {
                "resource": "balls",
                "id": fixture_id * 1000 + i,
                "fixture_id": fixture_id,
                "team_id": 39,
                "ball": round(0.1 + i / 10, 1),
                "scoreboard": "S1",
                "score_id": 82,
                "score": {
                    "resource": "scores",
                    "id": 82,
                    "name": "No Run",
                    "runs": 0,
                    "four": False,
                    "six": False,
                    "bye": 0,
                    "leg_bye": 0,
                    "noball": 0,
                    "noball_runs": 0,
                    "is_wicket": False,
                    "ball": True,
                    "out": False,
                },
            }
            for i in range(balls)
        ]
    return fixture


class FakeSportMonks:
    """SportMonks from in-memory data: ``live`` (``/livescores``, and ``/fixtures?filter[status]``: the live
    fixtures in those statuses, as the feed's second endpoint reads them), ``fixtures_by_id``
    (``/fixtures/{id}``), ``schedule`` (``/fixtures``, filtered by ``filter[starts_between]`` and sorted when
    asked), ``teams`` and ``leagues`` (paged like SportMonks: ``links.next`` carries only ``page=N``),
    ``seasons`` (``/seasons/{id}``). ``include=league`` adds each fixture's league where ``leagues`` has it.

    Failures, in the order they win: ``hook`` (a function of the request), the answers queued with
    ``fail_next``/``answer_next``, the ``fail`` rules by path and query; then a request without ``token``
    (when one is set) is answered 401."""

    def __init__(
        self,
        *,
        token: str | None = "secret-token",
        base_url: str = PROD,
        per_page: int = 2,
        leagues: Iterable[dict[str, Any]] = (),
    ) -> None:
        self.token = token
        self.base_url = base_url
        self.per_page = per_page
        self.live_per_page = 100  # SportMonks' page size, for the live list through /fixtures
        self.live: list[dict[str, Any]] = []
        self.fixtures_by_id: dict[int, dict[str, Any]] = {}
        self.schedule: list[dict[str, Any]] = []
        self.teams: list[dict[str, Any]] = []
        self.leagues: list[dict[str, Any]] = [dict(league) for league in leagues]
        self.seasons: dict[int, dict[str, Any]] = {}
        self.requests: list[Seen] = []
        self.faults: list[Fault] = []
        self._script: deque[Scripted] = deque()
        self.hook: Callable[[Seen], Scripted | None] | None = None

    # --- scripting ----------------------------------------------------------------------------------------

    def fail_next(
        self,
        status: int,
        *,
        times: int = 1,
        body: Any = None,
        headers: dict[str, str] | None = None,
        delay_s: float = 0.0,
    ) -> None:
        """The next ``times`` requests, whatever they ask, are answered ``status``."""
        for _ in range(times):
            self._script.append(
                Scripted(
                    status, body if body is not None else {"message": "scripted"}, headers or {}, delay_s
                )
            )

    def answer_next(self, scripted: Scripted) -> None:
        self._script.append(scripted)

    def forget_scripted(self) -> None:
        """Drop the answers queued with ``fail_next``/``answer_next`` that were not given yet."""
        self._script.clear()

    def fail(
        self, *, path: str, status: int = 500, times: int | None = 1, page: str | None = None, **query: str
    ) -> Fault:
        """Requests for ``path`` (on ``page``, with ``query``'s values) are answered ``status``, ``times``
        times (None: always)."""

        def when(p: str, q: dict[str, str]) -> bool:
            if p != path:
                return False
            if page is not None and q.get("page", "1") != page:
                return False
            return all(q.get(k) == v for k, v in query.items())

        fault = Fault(when, status, times)
        self.faults.append(fault)
        return fault

    def calls(self, prefix: str = "") -> list[Seen]:
        return [r for r in self.requests if r.path.startswith(prefix)]

    # --- serving ------------------------------------------------------------------------------------------

    def respond(self, path: str, query: dict[str, str]) -> Scripted:
        seen = Seen(path, query, trio.current_time())
        self.requests.append(seen)
        scripted = self._answer(seen)
        seen.status = scripted.status
        return scripted

    def _answer(self, seen: Seen) -> Scripted:
        path, query = seen.path, seen.query
        if self.hook is not None:
            hooked = self.hook(seen)
            if hooked is not None:
                return hooked
        if self._script:
            return self._script.popleft()
        for fault in self.faults:
            if fault.times != 0 and fault.when(path, query):
                if fault.times is not None:
                    fault.times -= 1
                return Scripted(fault.status, {"message": "scripted fault"})
        if self.token is not None and query.get("api_token") != self.token:
            return Scripted(401, {"error": {"message": "Unauthenticated.", "code": 401}})
        includes = set(filter(None, query.get("include", "").split(",")))
        parts = [p for p in path.split("/") if p]
        if parts == ["livescores"]:
            return Scripted(200, {"data": [self._with(f, includes) for f in self.live]})
        if parts == ["fixtures"] and "filter[status]" in query:
            # the live list through /fixtures (the feed's second endpoint): the live fixtures in those statuses
            statuses = set(query["filter[status]"].split(","))
            live = [self._with(f, includes) for f in self.live if f.get("status") in statuses]
            return self._page("fixtures", live, query, per_page=self.live_per_page)
        if parts == ["fixtures"]:
            items = self.schedule
            between = query.get("filter[starts_between]")
            if between:
                lo, hi = (_epoch(x) for x in between.split(","))
                items = [f for f in items if lo <= _epoch(f["starting_at"]) <= hi]
            if query.get("sort") == "starting_at":
                items = sorted(items, key=lambda f: (f["starting_at"], f["id"]))
            return self._page("fixtures", [self._with(f, includes) for f in items], query)
        if len(parts) == 2 and parts[0] == "fixtures":
            found = self.fixtures_by_id.get(int(parts[1])) if parts[1].isdigit() else None
            if found is None:
                return Scripted(
                    404, {"error": {"message": "No result(s) found matching your request.", "code": 404}}
                )
            return Scripted(200, {"data": found})
        if parts == ["teams"]:
            return self._page("teams", self.teams, query)
        if parts == ["leagues"]:
            return self._page("leagues", self.leagues, query)
        if len(parts) == 2 and parts[0] == "seasons" and parts[1].isdigit() and int(parts[1]) in self.seasons:
            return Scripted(200, {"data": self.seasons[int(parts[1])]})
        return Scripted(404, {"error": {"message": "not found", "code": 404}})

    def _with(self, fixture: dict[str, Any], includes: set[str]) -> dict[str, Any]:
        if "league" not in includes:
            return fixture
        league = next((lg for lg in self.leagues if lg.get("id") == fixture.get("league_id")), None)
        return fixture if league is None else {**fixture, "league": league}

    def _page(
        self, name: str, items: list[dict[str, Any]], query: dict[str, str], *, per_page: int | None = None
    ) -> Scripted:
        per_page = per_page or self.per_page
        page = int(query.get("page", "1"))
        last = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page : page * per_page]
        url = f"{self.base_url}/{name}"
        return Scripted(
            200,
            {
                "data": chunk,
                # Like SportMonks: the links carry only page=N, not the caller's filters/include/token.
                "links": {
                    "first": f"{url}?page=1",
                    "last": f"{url}?page={last}",
                    "prev": f"{url}?page={page - 1}" if page > 1 else None,
                    "next": f"{url}?page={page + 1}" if page < last else None,
                },
                "meta": {
                    "current_page": page,
                    "from": (page - 1) * per_page + 1,
                    "last_page": last,
                    "path": url,
                    "per_page": per_page,
                    "to": (page - 1) * per_page + len(chunk),
                    "total": len(items),
                },
            },
        )

    def _route(self, target_path: str, raw_query: str) -> tuple[str, dict[str, str]]:
        base_path = urlsplit(self.base_url).path
        path = target_path[len(base_path) :] if target_path.startswith(base_path) else target_path
        return path, dict(parse_qsl(raw_query, keep_blank_values=True))

    @staticmethod
    def _encode(scripted: Scripted) -> bytes:
        if scripted.raw is not None:
            return scripted.raw
        return json.dumps(scripted.body).encode()

    def transport(self) -> httpx.MockTransport:
        """The fake as an httpx transport: ``httpx.AsyncClient(transport=fake.transport())``."""

        async def handler(request: httpx.Request) -> httpx.Response:
            scripted = self.respond(*self._route(request.url.path, request.url.query.decode()))
            if scripted.delay_s:
                await trio.sleep(scripted.delay_s)
            headers = {"Content-Type": "application/json", **scripted.headers}
            return httpx.Response(scripted.status, headers=headers, content=self._encode(scripted))

        return httpx.MockTransport(handler)

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """A real HTTP/1.1 server on 127.0.0.1 (keep-alive), from now on at ``base_url``; reports its port."""
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/api/v2.0"
        task_status.started(port)
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    conn.receive_data(data)
                    continue
                if isinstance(event, h11.Request):
                    parts = urlsplit(event.target.decode())
                    scripted = self.respond(*self._route(parts.path, parts.query))
                    if scripted.delay_s:
                        await trio.sleep(scripted.delay_s)
                    body = self._encode(scripted)
                    headers = [
                        ("Content-Type", "application/json"),
                        ("Content-Length", str(len(body))),
                        *scripted.headers.items(),
                    ]
                    await stream.send_all(
                        conn.send(h11.Response(status_code=scripted.status, headers=headers))
                    )
                    await stream.send_all(conn.send(h11.Data(data=body)))
                    await stream.send_all(conn.send(h11.EndOfMessage()))
                elif isinstance(event, h11.ConnectionClosed):
                    return
                if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                    conn.start_next_cycle()
                elif conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
            return
        finally:
            await stream.aclose()


def _epoch(text: str) -> float:
    parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


# --- the sender --------------------------------------------------------------------------------------------


@dataclass
class FakeSender:
    """Records every push handed over and answers it like APNs."""

    # Scripted answers by device token, or by channel id for a broadcast (which has no token):
    rejected: dict[str, tuple[int, str]] = field(default_factory=dict)  # -> (status, reason): final
    failing: set[str] = field(default_factory=set)  # "failed" after APNs answered 503 past every retry
    timing_out: set[str] = field(default_factory=set)  # "failed", no status: sent, never answered in time
    accepted_after: dict[str, int] = field(default_factory=dict)  # -> attempts: 503s first, then accepted
    # Pushes taken and never answered at all: not what ApnsSender does (it answers every push, see
    # tests/actors/test_sender_contract.py), but what a producer meets when a sender lost its results.
    unanswered: Callable[[Push], bool] = lambda push: False
    answer_after_s: float = 0.0  # answer each this long after the last (in the background; needs ``nursery``)
    before_each: Callable[[Push], Awaitable[None]] | None = None
    nursery: trio.Nursery | None = None
    pushes: list[Push] = field(default_factory=list)
    handed_at: list[float] = field(default_factory=list)  # wall clock, one per push
    rounds: list[list[Push]] = field(default_factory=list)  # one per ``send_many``
    took: trio.Event = field(default_factory=trio.Event)  # set once any push was taken

    async def send(self, push: Push) -> None:
        await self.send_many([push])

    async def send_many(self, pushes: list[Push]) -> None:
        self.rounds.append(list(pushes))
        answer: list[Push] = []
        for push in pushes:
            if self.before_each is not None:
                await self.before_each(push)
            self.pushes.append(push)
            self.handed_at.append(time.time())
            self.took.set()
            if push.reply_to is None or self.unanswered(push):
                continue
            if self.answer_after_s:
                answer.append(push)
            else:
                await push.reply_to.send(self.result_for(push))
        if answer:
            assert self.nursery is not None, "a FakeSender that answers later needs a nursery"
            self.nursery.start_soon(self._answer_later, answer)

    async def _answer_later(self, pushes: list[Push]) -> None:
        for push in pushes:
            await trio.sleep(self.answer_after_s)
            assert push.reply_to is not None
            try:
                await push.reply_to.send(self.result_for(push))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                # the producer stopped waiting (its fan-out ended: a lost lease, a cancellation): its
                # answers are dropped, as ``ApnsSender`` drops them
                pass

    def result_for(self, push: Push) -> PushResult:
        """The result ``ApnsSender`` gives for this push under the scripted answers (its retries spent at
        ``[apns].max_retries``'s default of 5: six attempts)."""
        key = push.channel_id or push.token
        if key in self.rejected:
            status, reason = self.rejected[key]
            return PushResult(push, "rejected", status, reason, push.apns_id, 1, 0.001)
        if key in self.failing:
            return PushResult(push, "failed", 503, "ServiceUnavailable", None, 6, 0.001)
        if key in self.timing_out:
            return PushResult(push, "failed", None, "Timeout", None, 6, 0.001)
        return PushResult(push, "accepted", 200, None, push.apns_id, self.accepted_after.get(key, 1), 0.001)

    def to(self, token: str, kind: str | None = None) -> list[Push]:
        return [p for p in self.pushes if p.token == token and (kind is None or p.kind == kind)]

    def tokens(self, pushes: Iterable[Push] | None = None) -> list[str]:
        return [p.token for p in (self.pushes if pushes is None else pushes)]


# --- the feed and the store -------------------------------------------------------------------------------


class ScriptedFeed:
    """A feed whose updates the test hands in (``tick``); a match that is never ticked stays silent."""

    def __init__(self) -> None:
        self.subscribed: dict[str, bool] = {}  # match id -> marquee
        self._send: dict[str, trio.MemorySendChannel[FeedUpdate]] = {}

    def subscribe(self, match_id: str, *, marquee: bool) -> trio.MemoryReceiveChannel[FeedUpdate]:
        send, receive = trio.open_memory_channel[FeedUpdate](math.inf)
        self._send[match_id] = send
        self.subscribed[match_id] = marquee
        return receive

    def unsubscribe(self, match_id: str) -> None:
        self.subscribed.pop(match_id, None)
        send = self._send.pop(match_id, None)
        if send is not None:
            send.close()

    async def tick(self, update: FeedUpdate) -> None:
        await self._send[update.match_id].send(update)


def update(match_id: str, fixture: dict[str, Any] | None, *, fetched_at: float | None = None) -> FeedUpdate:
    """A feed update of ``fixture`` as the leader fetched it now (or at ``fetched_at``)."""
    return FeedUpdate(match_id, fixture, time.time() if fetched_at is None else fetched_at, "fixture", True)


class AudienceRecords:
    """A match's sessions and follows in memory (``actors.ports.AudienceStore``), each read noted with the
    trio time it came: for the re-read cadence under the autojump clock, where real I/O would stall it."""

    def __init__(self, sessions: list[dict[str, Any]], follows: list[dict[str, Any]] | None = None) -> None:
        self.sessions = sessions
        self.follows_items = follows or []
        self.reads: list[tuple[str, float]] = []  # (what, trio time)
        self.live_activities = self
        self.follows = self

    def at(self, what: str) -> list[float]:
        return [t for kind, t in self.reads if kind == what]

    async def get_all_la_sessions_for_match(
        self, match_id: str, *, fields: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        self.reads.append(("sessions", trio.current_time()))
        return [dict(s) for s in self.sessions]

    async def end_la_sessions(
        self, match_id: str, sessions: list[dict[str, Any]], end_reason: str, *, ttl_s: float | None = None
    ) -> int:
        raise AssertionError("an audience never ends sessions")

    async def get_followers_for_match(
        self, match_id: str, *, fields: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        self.reads.append(("followers", trio.current_time()))
        return [dict(f) for f in self.follows_items]


class SilencedLocks:
    """A lock table (``actors.ports.LeaseStore``) in front of the real one whose link can go silent: once
    ``silent``, every lease call hangs (no answer, no error), as for a paused process or a dead link. Anything
    else is the real repository's."""

    def __init__(self, locks: Any) -> None:
        self._locks = locks
        self.silent = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._locks, name)

    async def _gate(self) -> None:
        if self.silent:
            await trio.sleep_forever()

    async def acquire_fenced(self, *args: Any, **kwargs: Any) -> Any:
        await self._gate()
        return await self._locks.acquire_fenced(*args, **kwargs)

    async def extend_fenced(self, *args: Any, **kwargs: Any) -> Any:
        await self._gate()
        return await self._locks.extend_fenced(*args, **kwargs)

    async def release_fenced(self, *args: Any, **kwargs: Any) -> Any:
        await self._gate()
        return await self._locks.release_fenced(*args, **kwargs)


class WithLocks:
    """The repositories ``repos`` with their lock table replaced by ``locks``."""

    def __init__(self, repos: Any, locks: Any) -> None:
        self._repos = repos
        self.locks = locks

    def __getattr__(self, name: str) -> Any:
        return getattr(self._repos, name)


class LiveFeedDouble:
    """What the orchestrator and the reconciler ask of the feed (``actors.ports.LiveFeed``): ``livescores``
    (``live``, or an error while ``fail``) and ``is_released`` (``released``)."""

    def __init__(self, live: list[dict[str, Any]] | None = None) -> None:
        self.live: list[dict[str, Any]] = live or []
        self.released: set[str] = set()
        self.fail = False

    async def livescores(self, *, max_age_s: float | None = None) -> list[dict[str, Any]]:
        if self.fail:
            raise RuntimeError("SportMonks unavailable")
        return list(self.live)

    def is_released(self, match_id: str) -> bool:
        return match_id in self.released


class DyingClaims:
    """The push-to-start claims (``actors.ports.StartClaims``) of an owner that dies right after it claimed its
    followers and before their starts go: the hold it writes before sending cancels ``scope`` instead."""

    def __init__(self, locks: Any, scope: trio.CancelScope) -> None:
        self._locks = locks
        self._scope = scope

    def __getattr__(self, name: str) -> Any:
        return getattr(self._locks, name)

    async def confirm_push_to_starts(self, *args: Any, **kwargs: Any) -> int:
        self._scope.cancel()
        await trio.sleep_forever()
        raise AssertionError("unreachable")
