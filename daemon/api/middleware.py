"""The API's plain ASGI middlewares, outside FastAPI.

- ``AccessLog`` (outermost): one structlog line and the Prometheus metrics per request, the requests in
  flight for the graceful stop, and the last guard: an exception from any layer inside becomes the JSON 500
  (and a log line), never hypercorn's empty one.
- ``HttpRules``: what HTTP/1.1 itself asks of the server before any body is read: a request with both
  Content-Length and Transfer-Encoding is refused (400, connection closed: RFC 9112 §6.1, a request
  smuggling vector); HEAD is answered as GET without the body; answers under ``/user/`` carry
  ``Cache-Control: no-store`` (they are one user's own items).
- ``BodyLimit``: refuses a body whose Content-Type is not JSON with 415 (unread), reads a body only up to
  ``[api].max_body_bytes`` (413 past it, whatever Content-Length says) and within ``[api].body_timeout_s``
  (408 and the connection closed past it), and refuses a body that is not JSON, or is nested too deeply
  to parse, with 400, before the app sees it.

Each refusal is marked on the scope (``daemon.api.gate.refuse``) for the gate's metrics and per-address
limit. See docs/api.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import MutableMapping
from typing import Any

import trio

from daemon.api.gate import Buckets, account, refuse
from daemon.api.responses import ASGIApp, Receive, Scope, Send, error_response
from daemon.logs import get_logger
from daemon.metrics import API_LATENCY, API_REQUESTS

log = get_logger("daemon.api")

CLOSE = {"Connection": "close"}
NO_STORE = (b"cache-control", b"no-store")
ORIGINAL_METHOD = "sightscreen.method"


def is_json_media_type(value: bytes) -> bool:
    """Whether a Content-Type names JSON: ``application/json`` or ``application/<something>+json``, any
    case, parameters (``; charset=utf-8``) allowed."""
    media = value.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


class BodyLimit:
    """Refuse a body whose Content-Type is not JSON with 415 (unread), bodies over ``limit`` bytes with 413,
    reading at most ``limit + 1`` of them, bodies slower than ``timeout_s`` with 408, and bodies that are
    not JSON with 400, before the app sees any of them. A request without a body (no Content-Length, or 0,
    and no Transfer-Encoding) needs no Content-Type."""

    def __init__(self, app: ASGIApp, limit: int, timeout_s: float) -> None:
        self.app = app
        self.limit = limit
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        has_body = False
        content_type: bytes | None = None
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    length = 0
                if length > self.limit:
                    await self._too_big(scope, receive, send)
                    return
                has_body = has_body or length > 0
            elif name == b"transfer-encoding":
                has_body = True
            elif name == b"content-type":
                content_type = bytes(value)
        if scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        if has_body and (content_type is None or not is_json_media_type(content_type)):
            refuse(scope, "unsupported_media_type")
            scope["sightscreen.route"] = "unsupported_media_type"
            response = error_response(
                415,
                "unsupported_media_type",
                "the body must be JSON (Content-Type: application/json)",
                [{"field": "header.content-type", "reason": "not application/json"}],
                headers=CLOSE,
            )
            await response(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        with trio.move_on_after(self.timeout_s) as timer:
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    await self.app(scope, replay([message]), send)
                    return
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.limit:
                    await self._too_big(scope, receive, send)
                    return
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
        if timer.cancelled_caught:
            refuse(scope, "body_timeout")
            scope["sightscreen.route"] = "body_timeout"
            response = error_response(
                408, "body_timeout", f"the body did not arrive within {self.timeout_s:g} s", headers=CLOSE
            )
            await response(scope, receive, send)
            return
        body = b"".join(chunks)
        if body:
            try:
                json.loads(body)
            except (ValueError, UnicodeDecodeError, RecursionError) as exc:
                refuse(scope, "malformed_json")
                scope["sightscreen.route"] = "malformed_json"
                reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
                response = error_response(
                    400, "malformed_json", "the body is not valid JSON", [{"field": "body", "reason": reason}]
                )
                await response(scope, receive, send)
                return
        await self.app(
            scope, replay([{"type": "http.request", "body": body, "more_body": False}], receive), send
        )

    async def _too_big(self, scope: Scope, receive: Receive, send: Send) -> None:
        refuse(scope, "body_too_large")
        scope["sightscreen.route"] = "body_limit"
        response = error_response(
            413, "body_too_large", f"the body is larger than {self.limit} bytes", headers=CLOSE
        )
        await response(scope, receive, send)


def replay(messages: list[MutableMapping[str, Any]], then: Receive | None = None) -> Receive:
    """A ``receive`` that hands ``messages`` first, then what ``then`` receives (a disconnect without it)."""
    queue = list(messages)

    async def receive() -> MutableMapping[str, Any]:
        if queue:
            return queue.pop(0)
        if then is not None:
            return await then()
        return {"type": "http.disconnect"}

    return receive


class HttpRules:
    """Framing, HEAD and the private caching rule (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = chunked = False
        for name, _ in scope.get("headers", ()):
            if name == b"content-length":
                length = True
            elif name == b"transfer-encoding":
                chunked = True
        if length and chunked:
            refuse(scope, "bad_framing")
            scope["sightscreen.route"] = "bad_framing"
            response = error_response(
                400,
                "bad_framing",
                "a request may carry Content-Length or Transfer-Encoding, not both",
                headers=CLOSE,
            )
            await response(scope, receive, send)
            return
        head = scope.get("method") == "HEAD"
        private = scope["path"].startswith("/user/")
        if not head and not private:
            await self.app(scope, receive, send)
            return
        if head:  # answered as GET; the server sends no body to a HEAD request (h11 knows the method)
            scope[ORIGINAL_METHOD] = "HEAD"
            scope["method"] = "GET"

        async def send_rules(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                if private and not any(k == b"cache-control" for k, _ in message.get("headers", ())):
                    message = {**message, "headers": [*message.get("headers", ()), NO_STORE]}
            elif head and message["type"] == "http.response.body" and message.get("body"):
                message = {**message, "body": b""}
            await send(message)

        await self.app(scope, receive, send_rules)


class InFlight:
    """The number of requests between their head and their answer (the access log counts them; the server
    logs what its graceful stop left)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class AccessLog:
    """One structlog line (method, route, status, duration, shortened user id) and the Prometheus metrics
    per request; counts requests in flight (``in_flight``) for the graceful stop; accounts for refusals
    (``gate.account``: the address's ``refusals`` bucket, the address read with ``trusted_hops``); answers
    an exception from inside with the JSON 500."""

    def __init__(self, app: ASGIApp, in_flight: InFlight, refusals: Buckets, trusted_hops: int) -> None:
        self.app = app
        self.in_flight = in_flight
        self.refusals = refusals
        self.trusted_hops = trusted_hops
        # the metrics' children by (route template, status): both sets are small and fixed
        self._children: dict[tuple[str, int], tuple[Any, Any]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [0]

        async def send_status(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        self.in_flight.value += 1
        try:
            await self.app(scope, receive, send_status)
        except Exception as exc:
            log.error("api_unexpected_error", path=scope.get("path"), error=repr(exc)[:300])
            if status[0] == 0:
                response = error_response(
                    500, "internal_error", "the server failed to answer this request", headers=CLOSE
                )
                await response(scope, receive, send_status)
        finally:
            self.in_flight.value -= 1
            account(scope, self.refusals, self.trusted_hops)
            duration = time.perf_counter() - started
            code = status[0] or 500
            route = scope.get("route")
            template = getattr(route, "path_format", None) or scope.get("sightscreen.route")
            if template is None:
                template = "/openapi.json" if scope.get("path") == "/openapi.json" else "unmatched"
            children = self._children.get((template, code))
            if children is None:
                children = (API_REQUESTS.labels(template, str(code)), API_LATENCY.labels(template))
                self._children[(template, code)] = children
            children[0].inc()
            children[1].observe(duration)
            log.info(
                "api_request",
                method=scope.get(ORIGINAL_METHOD) or scope.get("method"),
                route=template,
                status=code,
                duration_ms=round(duration * 1000, 2),
                user=scope.get("sightscreen.user"),
            )
