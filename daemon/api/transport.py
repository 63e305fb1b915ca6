"""The API's connections: hypercorn's HTTP protocol code over connections this module admits, bounds in
time and closes, and hypercorn's own refusals in the API's error shape.

``hypercorn.trio.serve`` accepts every connection, bounds it by one timer (``keep_alive_timeout``, from
idle to a complete request head), keeps a connection whose client closed its end until that timer runs out,
and answers what its HTTP parser refuses (a malformed request, a head over ``h11_max_incomplete_size``, a
``Transfer-Encoding`` other than chunked) with an empty 400, 431 or 501. ``serve`` here runs the same
``TCPServer`` with:

- admission (``ConnectionLimits``): at most ``[api].max_connections_per_address`` connections per client
  address (an IPv6 /64), a further one closed at accept; at most ``ApiSettings.connection_cap`` in all (the
  descriptor limit less ``[api].fd_reserve``, so the engine's own connections always find descriptors),
  past which the server stops accepting and newcomers wait in the kernel's backlog, holding none of ours;
- a ``ConnectionClock`` on each connection: a new connection's first request head within
  ``[api].header_timeout_s`` of its accept; idle keep-alive ``[api].keep_alive_s`` from the last answer to
  the next byte; a request head within ``[api].header_timeout_s`` of its first byte and at most
  ``[api].max_header_bytes`` long (431 past it, however the bytes arrived); every write taken by the client
  within ``[api].send_timeout_s``; request bodies are the app's to bound (``BodyLimit``, 408);
- the client's end of file honoured: a connection the client closed is closed at once when no request is
  in flight, else as soon as the request is answered.

A connection cut on a timeout is counted in ``sightscreen_api_connections_cut{reason}``, one refused at
accept in ``sightscreen_api_connections_refused{reason}``. hypercorn has no hook for the body of its own
error answers, so ``parser_refusal`` recognises one on its way out (a 4xx or 5xx whose Content-Length is 0:
the app never answers an error without a body) and replaces it with the same answer carrying the JSON
error body. The rules are pure functions and small state machines, tested without sockets; the I/O around
them only moves bytes. See docs/api.md "Limits" and docs/operations.md "Connections and descriptors".
"""

from __future__ import annotations

import errno
import json
import math
import os
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.events import Event, RawData, Updated
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import AppWrapper, ConnectionState
from hypercorn.utils import repr_socket_addr, wrap_app

from daemon.api.gate import address_key
from daemon.api.responses import error_body
from daemon.descriptors import ACCEPT_RETRY_S, ACCEPT_TRANSIENT, nofile_limit
from daemon.logs import get_logger
from daemon.metrics import API_CONNECTIONS_CUT, API_CONNECTIONS_OPEN, API_CONNECTIONS_REFUSED, API_REFUSED

log = get_logger("daemon.api")

H2_PREFACE = b"PRI * HTTP/2.0"
PARSER_REFUSALS: dict[int, tuple[str, str, str]] = {
    # status: (code, metric reason, message)
    400: ("bad_http", "bad_http", "the request is not valid HTTP/1.1"),
    431: ("headers_too_large", "headers_too_large", "the request head is larger than the server takes"),
    501: (
        "not_implemented",
        "bad_transfer_encoding",
        "the request's Transfer-Encoding is not one the server takes (chunked only)",
    ),
}
REASONS = {
    400: "Bad Request",
    408: "Request Timeout",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
}


# --- the rules (pure) -------------------------------------------------------------------------------------


class ConnectionClock:
    """Which bound applies to a connection now, from what hypercorn and the socket say of it, and how long
    the request head being read has grown.

    ``new`` (accepted, no byte yet): ``header_timeout_s`` from the accept; ``idle`` (between requests):
    ``keep_alive_s`` from when it became idle; ``head`` (a request's first bytes have come, hypercorn has
    not yet handed it to the app): ``header_timeout_s`` from its first byte, and the head at most
    ``max_header_bytes`` up to its blank line; ``busy`` (the app has it; its body is the app's to bound):
    none. An HTTP/2 connection (its preface first) is bounded only while new or idle: its frames come and go
    between requests. ``eof``: the client closed its end."""

    def __init__(
        self, keep_alive_s: float, header_timeout_s: float, now: float, max_header_bytes: float = math.inf
    ) -> None:
        self.keep_alive_s = keep_alive_s
        self.header_timeout_s = header_timeout_s
        self.max_header_bytes = max_header_bytes
        self.state = "new"
        self.since = now
        self.h2 = False
        self.eof = False
        self._head = 0  # bytes of the head read so far (-1: its blank line came)
        self._tail = b""  # the head's last bytes, for a blank line split across reads

    def on_data(self, data: bytes, now: float) -> bool:
        """Bytes arrived; False when they take the request head past ``max_header_bytes``."""
        if self.state == "new":
            self.h2 = data.startswith(H2_PREFACE)
            if self.h2:
                self.state, self.since = "idle", now
        if self.state in ("new", "idle") and data and not self.h2:
            self.state, self.since = "head", now
            self._head, self._tail = 0, b""
        if self.state != "head" or self._head < 0:
            return True
        seen = self._tail + data
        ends = [i + len(mark) for mark in (b"\r\n\r\n", b"\n\n") if (i := seen.find(mark)) >= 0]
        if ends:
            size = self._head - len(self._tail) + min(ends)
            self._head = -1
            return size <= self.max_header_bytes
        self._head += len(data)
        self._tail = seen[-3:]
        return self._head <= self.max_header_bytes

    def on_request(self) -> None:
        self.state = "busy"

    def on_idle(self, now: float) -> None:
        self.state, self.since = "idle", now

    def on_eof(self) -> bool:
        """The client closed its end; True when the connection should close now (no request in flight)."""
        self.eof = True
        return self.state != "busy"

    def deadline(self) -> tuple[float, str]:
        """(when the connection is cut, why); ``inf`` while busy."""
        if self.state == "idle":
            return self.since + self.keep_alive_s, "idle"
        if self.state in ("new", "head"):
            return self.since + self.header_timeout_s, "header_timeout"
        return math.inf, ""


class ConnectionLimits:
    """Admission of connections: at most ``total`` open and ``per_address`` per address key (None: no
    per-address cap). ``admit`` says why a new connection is refused (None: admitted and counted);
    ``release`` uncounts one that closed."""

    def __init__(self, total: int, per_address: int | None) -> None:
        self.total = total
        self.per_address = per_address
        self.open = 0
        self._by_address: dict[str, int] = {}

    def full(self) -> bool:
        return self.open >= self.total

    def admit(self, key: str) -> str | None:
        if self.full():
            return "total"
        held = self._by_address.get(key, 0)
        if self.per_address is not None and held >= self.per_address:
            return "per_address"
        self._by_address[key] = held + 1
        self.open += 1
        return None

    def release(self, key: str) -> None:
        held = self._by_address.get(key, 0)
        if held <= 1:
            self._by_address.pop(key, None)
        else:
            self._by_address[key] = held - 1
        self.open = max(0, self.open - 1)

    def held(self, key: str) -> int:
        return self._by_address.get(key, 0)


def error_answer(status: int, extra: list[bytes] | None = None) -> bytes:
    """An HTTP/1.1 answer of ``status`` in the error shape (one of ``PARSER_REFUSALS``)."""
    code, _, message = PARSER_REFUSALS.get(status, ("bad_http", "bad_http", "the request was refused"))
    body = json.dumps(error_body(status, code, message), separators=(",", ":")).encode()
    lines = [
        b"HTTP/1.1 %d %s" % (status, REASONS.get(status, "").encode()),
        b"content-type: application/json",
        b"content-length: %d" % len(body),
        *(extra or []),
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def parser_refusal(data: bytes) -> tuple[int, bytes] | None:
    """hypercorn's own error answer, recognised by its head (an HTTP/1.1 4xx or 5xx with ``content-length:
    0``: the app never answers an error without a body, and HEAD answers keep the body's length): (its
    status, the same answer with the JSON error body). None for any other bytes."""
    if not data.startswith((b"HTTP/1.1 4", b"HTTP/1.1 5")) or not data.endswith(b"\r\n\r\n"):
        return None
    head = data[:-4].split(b"\r\n")
    try:
        status = int(head[0][9:12])
    except ValueError:
        return None
    headers = [line.split(b":", 1) for line in head[1:]]
    if [v.strip() for k, v in headers if k.strip().lower() == b"content-length"] != [b"0"]:
        return None
    kept = [
        b"%s:%s" % (k, v) for k, v in headers if k.strip().lower() not in (b"content-length", b"content-type")
    ]
    return status, error_answer(status, kept)


# --- the I/O ----------------------------------------------------------------------------------------------


class GuardedStream:
    """A socket stream whose reads end at the clock's deadline and whose writes end at the send timeout;
    either ends the connection, as does a request head past its size (431) and the client's end of file
    while no request is in flight (``close``: ends the connection's task). What ``TCPServer`` uses of a
    stream: ``receive_some``, ``send_all``, ``send_eof``, ``aclose`` and ``socket`` (no ``do_handshake``:
    plain TCP)."""

    def __init__(
        self,
        stream: trio.SocketStream,
        clock: ConnectionClock,
        send_timeout_s: float,
        close: Callable[[], None],
    ) -> None:
        self.stream = stream
        self.socket = stream.socket
        self.clock = clock
        self.send_timeout_s = send_timeout_s
        self.close = close
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
        if not data:
            if self.clock.on_eof():
                self.close()
            return b""
        if not self.clock.on_data(bytes(data), trio.current_time()):
            API_REFUSED.labels("headers_too_large").inc()
            with trio.move_on_after(self.send_timeout_s):
                await self.send_all(error_answer(431, [b"connection: close"]))
            await self._cut("headers_too_large")
            raise trio.BrokenResourceError("connection cut: the request head is too large")
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
        """Close the connection and end its task (hypercorn's own idle timer would keep the task, and so
        the connection's slot, until it runs out)."""
        API_CONNECTIONS_CUT.labels(reason).inc()
        with trio.CancelScope(shield=True):
            await self.stream.aclose()
        self.close()


class GuardedTCPServer(TCPServer):
    """hypercorn's connection handler, telling the stream's clock when a request reaches the app and when
    the connection is idle again (closing it then if the client has closed its end), and putting its
    parser's refusals in the error shape."""

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
                if self.guarded.clock.eof:
                    self.guarded.close()
            else:
                self.guarded.clock.on_request()
            self.guarded.moved()
        elif isinstance(event, RawData) and event.data.startswith((b"HTTP/1.1 4", b"HTTP/1.1 5")):
            refusal = parser_refusal(event.data)
            if refusal is not None:
                status, data = refusal
                API_REFUSED.labels(PARSER_REFUSALS.get(status, ("", "bad_http", ""))[1]).inc()
                event = RawData(data=data, address=event.address)
        await super().protocol_send(event)


def hypercorn_config(listen: str, settings: Any) -> HypercornConfig:
    """hypercorn's configuration from ``[api]``: its own idle timer is only the outer bound (the clock's
    bounds come first), its head limit is ``max_header_bytes`` (the clock's count is the exact one)."""
    cfg = HypercornConfig()
    cfg.bind = [listen]
    cfg.graceful_timeout = settings.shutdown_grace_s
    cfg.accesslog = None  # the app writes its own access lines through structlog
    cfg.include_server_header = False  # nothing to gain from naming the server and its version
    cfg.keep_alive_timeout = settings.keep_alive_s + settings.header_timeout_s + 5.0
    cfg.h11_max_incomplete_size = settings.max_header_bytes
    cfg.backlog = 1024
    return cfg


def peer_key(stream: trio.SocketStream) -> str:
    """The address key of a connection's peer (``address_key``); "?" when the socket cannot say."""
    try:
        peer = stream.socket.getpeername()
    except OSError:
        return "?"
    return address_key(str(peer[0])) if isinstance(peer, tuple) else "?"


async def serve(
    app: Any,
    config: HypercornConfig,
    settings: Any,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]],
    nofile: int | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``config.bind`` (plain TCP) until ``shutdown_trigger`` returns, then stop accepting
    and give connections ``config.graceful_timeout`` to finish: ``hypercorn.trio.serve``'s shape, with the
    admission, bounds and end-of-file rule of the module docstring (``nofile``: the descriptor limit the cap
    is sized from, the process's own by default). The app has no lifespan to run (it starts nothing of its
    own), so no lifespan events are sent."""
    wrapped = wrap_app(app, config.wsgi_max_body_size, "asgi")
    context = WorkerContext(None)
    descriptors = nofile if nofile is not None else nofile_limit()
    cap = settings.connection_cap(descriptors)
    per_address = settings.max_connections_per_address if settings.trusted_proxy_hops == 0 else None
    log.info("api_connection_caps", total=cap, per_address=per_address, descriptor_limit=descriptors)
    limits = ConnectionLimits(cap, per_address)
    room = trio.Event()
    room.set()
    sockets = config.create_sockets()
    listeners = []
    binds = []
    for sock in sockets.insecure_sockets:
        sock.listen(config.backlog)
        listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
        binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")

    async def connection(stream: trio.SocketStream, key: str) -> None:
        nonlocal room
        try:
            with trio.CancelScope() as scope:
                clock = ConnectionClock(
                    settings.keep_alive_s,
                    settings.header_timeout_s,
                    trio.current_time(),
                    settings.max_header_bytes,
                )
                guarded = GuardedStream(stream, clock, settings.send_timeout_s, scope.cancel)
                await GuardedTCPServer(wrapped, config, context, ConnectionState({}), guarded)
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()
            limits.release(key)
            API_CONNECTIONS_OPEN.set(limits.open)
            room.set()

    async def accept_loop(listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        nonlocal room
        while True:
            while limits.full():  # newcomers wait in the kernel's backlog, holding no descriptor of ours
                room = trio.Event()
                await room.wait()
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno in ACCEPT_TRANSIENT:
                    log.warning("api_accept_failed", error=errno.errorcode.get(exc.errno or 0, str(exc)))
                    await trio.sleep(ACCEPT_RETRY_S)
                    continue
                raise
            key = peer_key(stream)
            refused = limits.admit(key)
            if refused is not None:
                API_CONNECTIONS_REFUSED.labels(refused).inc()
                stream.socket.close()  # no checkpoint between accept and close: the descriptor is back
                continue
            API_CONNECTIONS_OPEN.set(limits.open)
            nursery.start_soon(connection, stream, key)

    async with trio.open_nursery() as connections:
        task_status.started(binds)
        try:
            async with trio.open_nursery() as accepting:
                for listener in listeners:
                    accepting.start_soon(accept_loop, listener, connections)
                await shutdown_trigger()
                accepting.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                for listener in listeners:
                    await listener.aclose()  # no new connection
            await context.terminated.set()  # idle connections close; busy ones finish their request
            connections.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
