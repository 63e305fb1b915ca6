"""A small programmable SportMonks stand-in for the client and feed tests.

``FakeSportMonks`` answers ``/livescores``, ``/fixtures`` (with ``filter[status]``: the live fixtures in those
statuses, as the feed's second endpoint reads them), ``/fixtures/{id}``, ``/teams``, ``/leagues`` and
``/seasons/{id}`` from in-memory data, records every request (path and query, token included, so tests can
check it is sent), paginates lists the way SportMonks does (``links.next`` carries only ``page=N``), and can
be scripted to fail: ``fail_next(status, ...)`` queues answers returned before the normal ones.

It serves two ways: as an ``httpx.MockTransport`` (``transport()``: no sockets, usable under trio's
MockClock) and as a real HTTP/1.1 server on loopback (``serve(...)``, trio + h11) for the tests that want
real sockets and real timeouts. It is test code: the project's full replay server lives in daemon/replay.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import h11
import httpx
import trio

PROD = "https://cricket.sportmonks.com/api/v2.0"


@dataclass
class Scripted:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # sleep before answering (timeouts)
    raw: bytes | None = None  # exact body bytes (not JSON-encoded)


@dataclass
class Seen:
    path: str
    query: dict[str, str]
    at: float = 0.0  # trio time the request arrived


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
    def __init__(
        self, *, token: str | None = "secret-token", base_url: str = PROD, per_page: int = 2
    ) -> None:
        self.token = token
        self.base_url = base_url
        self.per_page = per_page
        self.live_per_page = 100  # SportMonks' page size, for the live list through /fixtures
        self.live: list[dict[str, Any]] = []
        self.fixtures_by_id: dict[int, dict[str, Any]] = {}
        self.schedule: list[dict[str, Any]] = []
        self.teams: list[dict[str, Any]] = []
        self.leagues: list[dict[str, Any]] = []
        self.seasons: dict[int, dict[str, Any]] = {}
        self.requests: list[Seen] = []
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
        for _ in range(times):
            self._script.append(
                Scripted(
                    status, body if body is not None else {"message": "scripted"}, headers or {}, delay_s
                )
            )

    def answer_next(self, scripted: Scripted) -> None:
        self._script.append(scripted)

    def calls(self, prefix: str = "") -> list[Seen]:
        return [r for r in self.requests if r.path.startswith(prefix)]

    # --- serving ------------------------------------------------------------------------------------------

    def respond(self, path: str, query: dict[str, str]) -> Scripted:
        seen = Seen(path, query, trio.current_time())
        self.requests.append(seen)
        if self.hook is not None:
            hooked = self.hook(seen)
            if hooked is not None:
                return hooked
        if self._script:
            return self._script.popleft()
        if self.token is not None and query.get("api_token") != self.token:
            return Scripted(401, {"error": {"message": "Unauthenticated.", "code": 401}})
        parts = [p for p in path.split("/") if p]
        if parts == ["livescores"]:
            return Scripted(200, {"data": self.live})
        if parts == ["fixtures"] and "filter[status]" in query:
            # the live list through /fixtures (the feed's second endpoint): the live fixtures in those statuses
            statuses = set(query["filter[status]"].split(","))
            live = [f for f in self.live if f.get("status") in statuses]
            return self._page("fixtures", live, query, per_page=self.live_per_page)
        if parts == ["fixtures"]:
            return self._page("fixtures", self.schedule, query)
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
            return Scripted(200, {"data": self.leagues})
        if len(parts) == 2 and parts[0] == "seasons" and parts[1].isdigit() and int(parts[1]) in self.seasons:
            return Scripted(200, {"data": self.seasons[int(parts[1])]})
        return Scripted(404, {"error": {"message": "not found", "code": 404}})

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
                    "from": 1,
                    "last_page": last,
                    "path": url,
                    "per_page": per_page,
                    "to": len(chunk),
                    "total": len(items),
                },
            },
        )

    @staticmethod
    def _encode(scripted: Scripted) -> bytes:
        if scripted.raw is not None:
            return scripted.raw
        return json.dumps(scripted.body).encode()

    def transport(self) -> httpx.MockTransport:
        async def handler(request: httpx.Request) -> httpx.Response:
            base_path = urlsplit(self.base_url).path
            path = request.url.path
            if path.startswith(base_path):
                path = path[len(base_path) :]
            query = dict(parse_qsl(request.url.query.decode(), keep_blank_values=True))
            scripted = self.respond(path, query)
            if scripted.delay_s:
                await trio.sleep(scripted.delay_s)
            headers = {"Content-Type": "application/json", **scripted.headers}
            return httpx.Response(scripted.status, headers=headers, content=self._encode(scripted))

        return httpx.MockTransport(handler)

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """A real HTTP/1.1 server on 127.0.0.1 (one request per connection); reports the port it bound."""

        async def handle(stream: trio.SocketStream) -> None:
            conn = h11.Connection(h11.SERVER)
            request: h11.Request | None = None
            while request is None:
                data = await stream.receive_some(65536)
                conn.receive_data(data)
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA or isinstance(event, h11.ConnectionClosed):
                        break
                    if isinstance(event, h11.Request):
                        request = event
                        break
                if not data:
                    return
            target = request.target.decode()
            parts = urlsplit(target)
            base_path = urlsplit(self.base_url).path
            path = parts.path[len(base_path) :] if parts.path.startswith(base_path) else parts.path
            scripted = self.respond(path, dict(parse_qsl(parts.query, keep_blank_values=True)))
            if scripted.delay_s:
                await trio.sleep(scripted.delay_s)
            body = self._encode(scripted)
            headers = [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
                ("Connection", "close"),
                *scripted.headers.items(),
            ]
            await stream.send_all(conn.send(h11.Response(status_code=scripted.status, headers=headers)))
            await stream.send_all(conn.send(h11.Data(data=body)))
            await stream.send_all(conn.send(h11.EndOfMessage()))
            await stream.aclose()

        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/api/v2.0"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, handle, listeners)
            task_status.started(port)
