"""The display answer: ``GET /matches/{matchId}/display``, the route every open app polls during a match.

``DisplayAnswers`` reads the display state the engine cached for a team's supporters (neutral without a
team) and keeps it in memory within ``[api].display_cache_s`` as the encoded answer (``DisplayAnswer``:
body, ETag, the ASGI header lists of a 200 and of a 304), so a read costs no DynamoDB call and no encoding;
concurrent misses of one key share one read. ``DisplayFastPath`` answers the route before FastAPI's
routing and dependency resolution (its cost per request is the API's capacity); the FastAPI route in
``daemon.api.routes.matches`` answers every other shape of the request with the same answers.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from botocore.exceptions import BotoCoreError, ClientError
from fastapi.responses import Response

from daemon.api.cache import TtlCache
from daemon.api.errors import ApiError
from daemon.api.models import is_id
from daemon.api.responses import ASGIApp, Receive, Scope, Send, error_response, json_response
from daemon.cricket.display import NEUTRAL
from daemon.logs import get_logger

log = get_logger("daemon.api")

DISPLAY_CACHE_CONTROL = b"private, no-cache"
DISPLAY_ROUTE = "/matches/{matchId}/display"
_DISPLAY_PATH = re.compile(r"/matches/([^/]{1,64})/display")


@dataclass(frozen=True)
class DisplayAnswer:
    """One display state encoded once per cache load: the JSON body, its ETag and the ASGI header lists of
    a 200 and of a 304, ready to send as they are. ``Cache-Control: private, no-cache``: a client (or
    URLSession's cache) keeps the answer and revalidates it with ``If-None-Match``; a shared cache never
    stores it (it answers a bearer token)."""

    body: bytes
    etag: str
    headers: list[tuple[bytes, bytes]]
    not_modified_headers: list[tuple[bytes, bytes]]

    @classmethod
    def encode(cls, body: bytes) -> DisplayAnswer:
        etag = '"' + hashlib.blake2b(body, digest_size=12).hexdigest() + '"'
        validators = [(b"etag", etag.encode()), (b"cache-control", DISPLAY_CACHE_CONTROL)]
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *validators,
        ]
        return cls(body, etag, headers, validators)

    def messages(self, if_none_match: str | None) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """(status, headers, body): 304 without a body when ``If-None-Match`` names this answer's ETag."""
        if if_none_match is not None and etag_matches(if_none_match, self.etag):
            return 304, self.not_modified_headers, b""
        return 200, self.headers, self.body


def etag_matches(if_none_match: str, etag: str) -> bool:
    """``If-None-Match`` against one strong ETag, by weak comparison as RFC 9110 has it for this header:
    ``*`` or any listed tag equal to it, a ``W/`` prefix ignored."""
    value = if_none_match.strip()
    if value == "*":
        return True
    for tag in value.split(","):
        tag = tag.strip()
        if tag.startswith("W/"):
            tag = tag[2:]
        if tag == etag:
            return True
    return False


class RawResponse(Response):
    """A response whose status, headers and body are sent as given (the display answer's prebuilt ones)."""

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.status_code = status
        self.raw_headers = headers
        self.body = self.raw_body = body
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_raw(send, self.status_code, self.raw_headers, self.raw_body)


async def send_raw(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


ReadDisplay = Callable[[str, str], Awaitable[dict[str, Any] | None]]
"""The engine's cached display state of (match id, perspective), or None."""


class DisplayAnswers:
    """The display answers of (match, team), from memory within ``cache_s`` (see the module docstring)."""

    def __init__(self, read: ReadDisplay, cache_s: float) -> None:
        self.read = read
        self.cache: TtlCache[DisplayAnswer | None] = TtlCache(cache_s)

    async def get(self, match_id: str, team: str | None) -> DisplayAnswer:
        """The answer for ``team``'s supporters (neutral without one); 404 when the engine has cached none."""
        perspective = team or NEUTRAL

        async def load() -> DisplayAnswer | None:
            state = await self.read(match_id, perspective)
            if state is None:
                return None
            body = json_response({"matchId": match_id, "team": perspective, "displayState": state}).body
            return DisplayAnswer.encode(bytes(body))

        answer = await self.cache.get(("display", match_id, perspective), load)
        if answer is None:
            raise ApiError(404, "not_found", "no such display state for this match and team")
        return answer


class DisplayFastPath:
    """``GET /matches/{matchId}/display`` answered before FastAPI's routing and dependency resolution.

    It sits behind the gate (authorisation and rate limit done), and its answer is the FastAPI route's (same
    cache, ETag and error shape), sent as the prebuilt ASGI messages of the cached answer; a request of any
    other shape (another query parameter, an id that does not match, HEAD) falls through to the FastAPI
    route, which answers it (422 with the field, ...)."""

    def __init__(self, app: ASGIApp, answers: Callable[[str, str | None], Awaitable[DisplayAnswer]]) -> None:
        self.app = app
        self.answers = answers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") == "GET":
            m = _DISPLAY_PATH.fullmatch(scope.get("path", ""))
            team = team_param(scope.get("query_string", b"")) if m and is_id(m.group(1)) else False
            if m and team is not False:
                scope["sightscreen.route"] = DISPLAY_ROUTE
                if_none_match = None
                for key, value in scope.get("headers", ()):
                    if key == b"if-none-match":
                        if_none_match = bytes(value).decode("latin-1")
                try:
                    answer = await self.answers(m.group(1), team)
                except ApiError as exc:
                    response = error_response(exc.status, exc.code, exc.message, exc.fields, exc.headers)
                except (ClientError, BotoCoreError) as exc:
                    log.error("api_store_error", path=scope.get("path"), error=str(exc)[:300])
                    response = error_response(
                        503,
                        "unavailable",
                        "the data store is unavailable; retry later",
                        headers={"Retry-After": "1"},
                    )
                else:
                    await send_raw(send, *answer.messages(if_none_match))
                    return
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def team_param(query: bytes) -> str | None | Literal[False]:
    """The ``team`` of a display query (None without one); False for any other query (left to FastAPI)."""
    if not query:
        return None
    name, sep, value = query.decode("latin-1").partition("=")
    if name != "team" or not sep or "&" in value or not is_id(value):
        return False
    return value
