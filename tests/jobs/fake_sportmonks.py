"""A tiny SportMonks-compatible HTTP server for the jobs' tests (tests only).

Real HTTP/1.1 over loopback (trio + h11), so the project's real ``SportMonksClient`` talks to it exactly as to
SportMonks: ``/fixtures`` filtered by ``filter[starts_between]``, sorted, paginated with Laravel ``links``
whose ``next`` carries only ``page=N`` (spec sportmonks-api.md §2, §9.10); ``/livescores``; ``/teams``,
``/leagues`` (paginated); ``/seasons/{id}?include=teams``. Faults are scripted per request (``fail``), and
every request is logged (``requests``) so tests can see which pages were fetched, and how often.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import h11
import trio

BASE_PATH = "/api/v2.0"


def sm_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.000000Z")


def make_fixture(
    fixture_id: int,
    start: float,
    *,
    league_id: int = 3,
    season_id: int = 1715,
    status: str = "NS",
    localteam_id: int = 1,
    visitorteam_id: int = 39,
    note: str | None = None,
    round_: str = "1st T20I",
) -> dict[str, Any]:
    return {
        "resource": "fixtures",
        "id": fixture_id,
        "league_id": league_id,
        "season_id": season_id,
        "stage_id": 6695,
        "round": round_,
        "localteam_id": localteam_id,
        "visitorteam_id": visitorteam_id,
        "starting_at": sm_time(start),
        "type": "T20I",
        "live": True,
        "status": status,
        "last_period": None,
        "note": note,
        "venue_id": 84,
        "toss_won_team_id": None,
        "winner_team_id": None,
        "draw_noresult": None,
        "total_overs_played": 20,
        "super_over": False,
        "follow_on": False,
    }


LEAGUES = [
    {
        "resource": "leagues",
        "id": 3,
        "season_id": 1715,
        "country_id": 99474,
        "name": "Twenty20 International",
        "code": "T20I",
        "image_path": "https://cdn.sportmonks.com/images/cricket/leagues/3/3.png",
        "type": "phase",
    },
    {
        "resource": "leagues",
        "id": 5,
        "season_id": 1800,
        "country_id": 98,
        "name": "Big Bash League",
        "code": "BBL",
        "image_path": "https://cdn.sportmonks.com/images/cricket/leagues/5/5.png",
        "type": "league",
    },
    {
        "resource": "leagues",
        "id": 10,
        "season_id": 1849,
        "country_id": 146,
        "name": "CSA T20 Challenge",
        "code": "CSA",
        "image_path": "https://cdn.sportmonks.com/images/cricket/leagues/10/10.png",
        "type": "league",
    },
]


def make_team(team_id: int, name: str, code: str) -> dict[str, Any]:
    return {
        "resource": "teams",
        "id": team_id,
        "name": name,
        "code": code,
        "image_path": f"https://cdn.sportmonks.com/images/cricket/teams/{team_id % 32}/{team_id}.png",
        "country_id": 1000 + team_id,
        "national_team": team_id < 100,
    }


@dataclass
class Fault:
    """Answer ``status`` to requests matching ``when`` (path, query), ``times`` times (None = always)."""

    when: Callable[[str, dict[str, str]], bool]
    status: int = 500
    times: int | None = 1


@dataclass
class FakeSportMonks:
    per_page: int = 100
    fixtures: list[dict[str, Any]] = field(default_factory=list)
    live: list[dict[str, Any]] = field(default_factory=list)
    teams: list[dict[str, Any]] = field(default_factory=list)
    leagues: list[dict[str, Any]] = field(default_factory=lambda: [dict(lg) for lg in LEAGUES])
    seasons: dict[int, dict[str, Any]] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    requests: list[tuple[str, dict[str, str], int]] = field(default_factory=list)
    port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{BASE_PATH}"

    def fail(
        self, *, path: str, status: int = 500, times: int | None = 1, page: str | None = None, **query: str
    ) -> Fault:
        def when(p: str, q: dict[str, str]) -> bool:
            if p != path:
                return False
            if page is not None and q.get("page", "1") != page:
                return False
            return all(q.get(k) == v for k, v in query.items())

        fault = Fault(when, status, times)
        self.faults.append(fault)
        return fault

    def calls(self, path: str) -> list[dict[str, str]]:
        return [q for p, q, _ in self.requests if p == path]

    # -- serving --

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self.port)
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
                    target = event.target.decode()
                    status, body = self._answer(target)
                    headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
                    await stream.send_all(conn.send(h11.Response(status_code=status, headers=headers)))
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

    def _answer(self, target: str) -> tuple[int, bytes]:
        parts = urlsplit(target)
        path = parts.path[len(BASE_PATH) :] if parts.path.startswith(BASE_PATH) else parts.path
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        query.pop("api_token", None)
        for fault in self.faults:
            if fault.times != 0 and fault.when(path, query):
                if fault.times is not None:
                    fault.times -= 1
                self.requests.append((path, query, fault.status))
                return fault.status, json.dumps({"message": "scripted fault"}).encode()
        status, payload = self._route(path, query)
        self.requests.append((path, query, status))
        return status, json.dumps(payload).encode()

    def _route(self, path: str, query: dict[str, str]) -> tuple[int, Any]:
        includes = set(filter(None, query.get("include", "").split(",")))
        if path == "/fixtures":
            items = self.fixtures
            between = query.get("filter[starts_between]")
            if between:
                lo, hi = (_parse(x) for x in between.split(","))
                items = [f for f in items if lo <= _parse(f["starting_at"]) <= hi]
            items = sorted(items, key=lambda f: (f["starting_at"], f["id"]))
            return 200, self._page("/fixtures", [self._with(f, includes) for f in items], query)
        if path == "/livescores":
            return 200, {"data": [self._with(f, includes) for f in self.live]}
        if path == "/teams":
            return 200, self._page("/teams", self.teams, query)
        if path == "/leagues":
            return 200, self._page("/leagues", self.leagues, query)
        if path.startswith("/seasons/"):
            season = self.seasons.get(int(path.rsplit("/", 1)[1]))
            if season is None:
                return 404, {"message": "record not found"}
            return 200, {"data": season}
        return 404, {"message": f"no route {path}"}

    def _with(self, fixture: dict[str, Any], includes: set[str]) -> dict[str, Any]:
        out = dict(fixture)
        if "league" in includes:
            out["league"] = next((lg for lg in self.leagues if lg["id"] == fixture["league_id"]), None)
        return out

    def _page(self, path: str, items: list[dict[str, Any]], query: dict[str, str]) -> dict[str, Any]:
        page = int(query.get("page", "1"))
        last = max(1, -(-len(items) // self.per_page))
        chunk = items[(page - 1) * self.per_page : page * self.per_page]
        root = f"https://cricket.sportmonks.com/api/v2.0{path}"
        return {
            "data": chunk,
            # As SportMonks does: the links carry only page=N, never the filters or includes.
            "links": {
                "first": f"{root}?page=1",
                "last": f"{root}?page={last}",
                "prev": f"{root}?page={page - 1}" if page > 1 else None,
                "next": f"{root}?page={page + 1}" if page < last else None,
            },
            "meta": {
                "current_page": page,
                "last_page": last,
                "per_page": self.per_page,
                "total": len(items),
                "path": root,
                "from": (page - 1) * self.per_page + 1,
                "to": (page - 1) * self.per_page + len(chunk),
            },
        }


def _parse(text: str) -> float:
    text = text.strip().replace("Z", "+00:00")
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
