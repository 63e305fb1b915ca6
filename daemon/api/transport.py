"""The API's connections: hypercorn's HTTP protocol code over connections this module bounds in time, and
hypercorn's own refusals in the API's error shape.

``hypercorn.trio.serve`` bounds a connection by one timer, from idle to a complete request head
(``keep_alive_timeout``), and answers what its HTTP parser refuses (a malformed request, a head over
``h11_max_incomplete_size``) with an empty 400 or 431. ``serve`` here runs the same ``TCPServer`` on
connections whose stream keeps a ``ConnectionClock``:

- idle keep-alive: ``[api].keep_alive_s`` from the last answer (or the connection's start) to the next byte;
- the request head: ``[api].header_timeout_s`` from its first byte until hypercorn hands the request to the
  app (a head dribbled a byte at a time is cut there, not at the keep-alive bound);
- answers: every write must be taken by the client within ``[api].send_timeout_s``;
- request bodies are the app's to bound (``daemon.api.middleware.BodyLimit``, 408).

A connection cut on a timeout is counted in ``sightscreen_api_connections_cut{reason}``. hypercorn has no
hook for the body of its own error answers, so ``parser_refusal`` recognises one on its way out (a 4xx
whose Content-Length is 0: the app never answers an error without a body) and replaces it with the same
answer carrying the JSON error body. The rules are pure functions and a small state machine, tested
without sockets; the I/O around them only moves bytes. See docs/api.md "Limits".
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.events import Event, RawData, Updated
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import AppWrapper, ConnectionState
from hypercorn.utils import repr_socket_addr, wrap_app

from daemon.api.responses import error_body
from daemon.logs import get_logger
from daemon.metrics import API_CONNECTIONS_CUT, API_REFUSED

log = get_logger("daemon.api")

H2_PREFACE = b"PRI * HTTP/2.0"
PARSER_REFUSALS: dict[int, tuple[str, str, str]] = {
    # status: (code, metric reason, message)
    400: ("bad_http", "bad_http", "the request is not valid HTTP/1.1"),
    431: ("headers_too_large", "headers_too_large", "the request head is larger than the server takes"),
}
REASONS = {
    400: "Bad Request",
    408: "Request Timeout",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
}


# --- the rules (pure) -------------------------------------------------------------------------------------


class ConnectionClock:
    """Which bound applies to a connection now, from what hypercorn and the socket say of it.

    ``idle`` (no byte of a next request yet): ``keep_alive_s`` from when it became idle; ``head`` (a
    request's first bytes have come, hypercorn has not yet handed it to the app): ``header_timeout_s`` from
    its first byte; ``busy`` (the app has it; its body is the app's to bound): none. An HTTP/2 connection
    (its preface first) is bounded only while idle: its frames come and go between requests."""

    def __init__(self, keep_alive_s: float, header_timeout_s: float, now: float) -> None:
        self.keep_alive_s = keep_alive_s
        self.header_timeout_s = header_timeout_s
        self.state = "idle"
        self.since = now
        self.h2 = False
        self.fresh = True

    def on_data(self, data: bytes, now: float) -> None:
        if self.fresh:
            self.fresh = False
            self.h2 = data.startswith(H2_PREFACE)
        if self.state == "idle" and data and not self.h2:
            self.state, self.since = "head", now

    def on_request(self) -> None:
        self.state = "busy"

    def on_idle(self, now: float) -> None:
        self.state, self.since = "idle", now

    def deadline(self) -> tuple[float, str]:
        """(when the connection is cut, why); ``inf`` while busy."""
        if self.state == "idle":
            return self.since + self.keep_alive_s, "idle"
        if self.state == "head":
            return self.since + self.header_timeout_s, "header_timeout"
        return math.inf, ""


def parser_refusal(data: bytes) -> tuple[int, bytes] | None:
    """hypercorn's own error answer, recognised by its head (an HTTP/1.1 4xx with ``content-length: 0``:
    the app never answers an error without a body, and HEAD answers keep the body's length): (its status,
    the same answer with the JSON error body). None for any other bytes."""
    if not data.startswith(b"HTTP/1.1 4") or not data.endswith(b"\r\n\r\n"):
        return None
    head = data[:-4].split(b"\r\n")
    try:
        status = int(head[0][9:12])
    except ValueError:
        return None
    headers = [line.split(b":", 1) for line in head[1:]]
    if [v.strip() for k, v in headers if k.strip().lower() == b"content-length"] != [b"0"]:
        return None
    code, _, message = PARSER_REFUSALS.get(status, ("bad_http", "bad_http", "the request was refused"))
    body = json.dumps(error_body(status, code, message), separators=(",", ":")).encode()
    kept = [
        b"%s:%s" % (k, v) for k, v in headers if k.strip().lower() not in (b"content-length", b"content-type")
    ]
    reason = REASONS.get(status, "").encode()
    lines = [
        b"HTTP/1.1 %d %s" % (status, reason),
        b"content-type: application/json",
        b"content-length: %d" % len(body),
        *kept,
    ]
    return status, b"\r\n".join(lines) + b"\r\n\r\n" + body


# --- the I/O ----------------------------------------------------------------------------------------------


class GuardedStream:
    """A socket stream whose reads end at the clock's deadline and whose writes end at the send timeout;
    either ends the connection. What ``TCPServer`` uses of a stream: ``receive_some``, ``send_all``,
    ``send_eof``, ``aclose`` and ``socket`` (no ``do_handshake``: plain TCP)."""

    def __init__(self, stream: trio.SocketStream, clock: ConnectionClock, send_timeout_s: float) -> None:
        self.stream = stream
        self.socket = stream.socket
        self.clock = clock
        self.send_timeout_s = send_timeout_s
        self._reading: trio.CancelScope | None = None

    def moved(self) -> None:
        """The clock's state changed: a read in progress gets the new deadline."""
        if self._reading is not None:
            self._reading.deadline = self.clock.deadline()[0]

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        deadline, why = self.clock.deadline()
        with trio.CancelScope(deadline=deadline) as scope:
            self._reading = scope
            try:
                data = await self.stream.receive_some(max_bytes)
            finally:
                self._reading = None
        if scope.cancelled_caught:
            await self._cut(self.clock.deadline()[1] or why)
            raise trio.BrokenResourceError(f"connection cut: {why}")
        self.clock.on_data(bytes(data), trio.current_time())
        return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Write ``data``; whatever the kernel does not take at once must go within ``send_timeout_s``.

        An answer almost always fits the socket's send buffer, so the write is tried first on the socket
        itself (non-blocking, as trio keeps it): no cancel scope and no trip through trio's scheduler for a
        write that cannot block. Only the rest, when the client is not reading, waits, under the timeout.
        (hypercorn serialises a connection's writes under its own lock.)"""
        if not data:
            return
        fd = self.socket.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("the connection is closed")
        try:
            sent = os.write(fd, data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            raise trio.BrokenResourceError(f"socket connection broken: {exc}") from exc
        if sent == len(data):
            return
        with trio.move_on_after(self.send_timeout_s) as scope:
            await self.stream.send_all(memoryview(data)[sent:])
        if scope.cancelled_caught:
            await self._cut("send_timeout")
            raise trio.BrokenResourceError("connection cut: send_timeout")

    async def send_eof(self) -> None:
        await self.stream.send_eof()

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def _cut(self, reason: str) -> None:
        API_CONNECTIONS_CUT.labels(reason).inc()
        with trio.CancelScope(shield=True):
            await self.stream.aclose()


class GuardedTCPServer(TCPServer):
    """hypercorn's connection handler, telling the stream's clock when a request reaches the app and when
    the connection is idle again, and putting its parser's refusals in the error shape."""

    def __init__(
        self,
        app: AppWrapper,
        config: HypercornConfig,
        context: WorkerContext,
        state: ConnectionState,
        stream: GuardedStream,
    ) -> None:
        super().__init__(app, config, context, state, stream)  # type: ignore[arg-type]
        self.guarded = stream

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, Updated):
            if event.idle:
                self.guarded.clock.on_idle(trio.current_time())
            else:
                self.guarded.clock.on_request()
            self.guarded.moved()
        elif isinstance(event, RawData) and event.data.startswith(b"HTTP/1.1 4"):
            refusal = parser_refusal(event.data)
            if refusal is not None:
                status, data = refusal
                API_REFUSED.labels(PARSER_REFUSALS.get(status, ("", "bad_http", ""))[1]).inc()
                event = RawData(data=data, address=event.address)
        await super().protocol_send(event)


def hypercorn_config(listen: str, settings: Any) -> HypercornConfig:
    """hypercorn's configuration from ``[api]``: its own idle timer is only the outer bound (the clock's
    bounds come first), its head limit is ``max_header_bytes``."""
    cfg = HypercornConfig()
    cfg.bind = [listen]
    cfg.graceful_timeout = settings.shutdown_grace_s
    cfg.accesslog = None  # the app writes its own access lines through structlog
    cfg.include_server_header = False  # nothing to gain from naming the server and its version
    cfg.keep_alive_timeout = settings.keep_alive_s + settings.header_timeout_s + 5.0
    cfg.h11_max_incomplete_size = settings.max_header_bytes
    cfg.backlog = 1024
    return cfg


async def serve(
    app: Any,
    config: HypercornConfig,
    settings: Any,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]],
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``config.bind`` (plain TCP) until ``shutdown_trigger`` returns, then stop accepting
    and give connections ``config.graceful_timeout`` to finish: ``hypercorn.trio.serve``'s shape, with the
    connections of ``GuardedTCPServer``. The app has no lifespan to run (it starts nothing of its own), so
    no lifespan events are sent."""
    wrapped = wrap_app(app, config.wsgi_max_body_size, "asgi")
    context = WorkerContext(None)
    sockets = config.create_sockets()
    listeners = []
    binds = []
    for sock in sockets.insecure_sockets:
        sock.listen(config.backlog)
        listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
        binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")

    async def connection(stream: trio.SocketStream) -> None:
        clock = ConnectionClock(settings.keep_alive_s, settings.header_timeout_s, trio.current_time())
        guarded = GuardedStream(stream, clock, settings.send_timeout_s)
        await GuardedTCPServer(wrapped, config, context, ConnectionState({}), guarded)

    async with trio.open_nursery() as connections:
        task_status.started(binds)
        try:
            async with trio.open_nursery() as accepting:
                accepting.start_soon(
                    partial(trio.serve_listeners, connection, listeners, handler_nursery=connections)
                )
                await shutdown_trigger()
                accepting.cancel_scope.cancel()  # the listeners close: no new connection
        finally:
            await context.terminated.set()  # idle connections close; busy ones finish their request
            connections.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
