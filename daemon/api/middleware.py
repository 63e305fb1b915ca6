"""The API's plain ASGI middlewares, outside FastAPI: ``BodyLimit`` reads a body only up to
``[api].max_body_bytes`` (a larger one is refused with 413 before the app sees it, whatever its Content-Length
says; a body that is not JSON is refused with 400), ``AccessLog`` writes one structlog line and the Prometheus
metrics per request and counts requests in flight for the graceful stop."""

from __future__ import annotations

import json
import time
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

from daemon.api.responses import ASGIApp, Receive, Scope, Send, error_response
from daemon.logs import get_logger
from daemon.metrics import API_LATENCY, API_REQUESTS

if TYPE_CHECKING:
    from daemon.api.app import ApiState

log = get_logger("daemon.api")


class BodyLimit:
    """Refuse bodies over ``limit`` bytes with 413, reading at most ``limit + 1`` of them, and bodies that are
    not JSON with 400 (whatever the Content-Type says), before the app sees either."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.limit
                except ValueError:
                    too_big = False
                if too_big:
                    await self._refuse(scope, receive, send)
                    return
        if scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message]), send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._refuse(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if body:
            try:
                json.loads(body)
            except (ValueError, UnicodeDecodeError) as exc:
                scope["sightscreen.route"] = "malformed_json"
                reason = str(exc)[:200]
                response = error_response(
                    400, "malformed_json", "the body is not valid JSON", [{"field": "body", "reason": reason}]
                )
                await response(scope, receive, send)
                return
        await self.app(
            scope, _replay([{"type": "http.request", "body": body, "more_body": False}], receive), send
        )

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["sightscreen.route"] = "body_limit"
        response = error_response(413, "body_too_large", f"the body is larger than {self.limit} bytes")
        await response(scope, receive, send)


def _replay(messages: list[MutableMapping[str, Any]], then: Receive | None = None) -> Receive:
    queue = list(messages)

    async def receive() -> MutableMapping[str, Any]:
        if queue:
            return queue.pop(0)
        if then is not None:
            return await then()
        return {"type": "http.disconnect"}

    return receive


class AccessLog:
    """One structlog line (method, route, status, duration, shortened user id) and the Prometheus metrics
    per request; counts requests in flight for the graceful stop."""

    def __init__(self, app: ASGIApp, state: ApiState) -> None:
        self.app = app
        self.state = state
        # the metrics' children by (route template, status): both sets are small and fixed
        self._children: dict[tuple[str, int], tuple[Any, Any]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]

        async def send_status(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        self.state.in_flight += 1
        try:
            await self.app(scope, receive, send_status)
        finally:
            self.state.in_flight -= 1
            duration = time.perf_counter() - started
            route = scope.get("route")
            template = getattr(route, "path_format", None) or scope.get("sightscreen.route")
            if template is None:
                template = "/openapi.json" if scope.get("path") == "/openapi.json" else "unmatched"
            children = self._children.get((template, status[0]))
            if children is None:
                children = (API_REQUESTS.labels(template, str(status[0])), API_LATENCY.labels(template))
                self._children[(template, status[0])] = children
            children[0].inc()
            children[1].observe(duration)
            log.info(
                "api_request",
                method=scope.get("method"),
                route=template,
                status=status[0],
                duration_ms=round(duration * 1000, 2),
                user=scope.get("sightscreen.user"),
            )
