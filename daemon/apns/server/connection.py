"""One client connection of the APNs test server: a TLS stream driven through an HTTP/2 engine, each request
validated, decided (script, token policy, stream limits) and answered or refused."""

from __future__ import annotations

import heapq
import itertools
import json
import ssl
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import trio
from hyperframe.frame import GoAwayFrame

from daemon.apns.internals import ServerH2Connection
from daemon.apns.server.auth import ConnectionAuth
from daemon.apns.server.http2 import (
    DEFAULT_CONNECTION_WINDOW,
    H2_SERVER_CONFIG,
    MAX_HEADER_LIST_SIZE,
    READ_SIZE,
    ResponseEncoder,
)
from daemon.apns.server.lean import LeanH2Connection
from daemon.apns.server.script import FaultState, GoawayFault
from daemon.logs import get_logger

log = get_logger("apns.server")


class ApnsIds:
    """Fresh canonical UUIDs (version 4 layout) for apns-id / apns-unique-id, cheaply: random + counter."""

    def __init__(self) -> None:
        raw = uuid.uuid4().hex
        self._prefix = f"{raw[:8]}-{raw[8:12]}-4{raw[13:16]}-a{raw[17:20]}-"
        self._counter = itertools.count(int(raw[20:], 16) & 0xFFFFFFFF)

    def next(self) -> str:
        return f"{self._prefix}{next(self._counter) & 0xFFFFFFFFFFFF:012x}"


@dataclass(slots=True)
class Request:
    stream_id: int
    headers: list[tuple[bytes, bytes]]
    body: bytearray = field(default_factory=bytearray)


@dataclass(slots=True)
class Answer:
    stream_id: int
    status: int
    reason: str | None
    apns_id: str
    record: dict[str, Any] | None
    body: bytes = b""
    # broadcasts and channel management: extra success headers (apns-channel-id, apns-unique-id), and the id
    # header's name (Apple echoes ``apns-request-id`` there rather than ``apns-id``)
    headers: tuple[tuple[bytes, bytes], ...] = ()
    id_header: bytes = b"apns-id"


class ConnectionOwner(Protocol):
    """What a connection needs of the server that accepted it (``ApnsTestServer``)."""

    @property
    def engine(self) -> str:
        """The HTTP/2 engine of new connections: "h2" or "lean"."""

    @property
    def faults(self) -> FaultState:
        """The scripted faults, server-wide (a connection consumes them)."""

    @property
    def goaway_linger_s(self) -> float:
        """How long a connection stays open after its GOAWAY once every stream it kept was answered."""

    def count(self, name: str, by: int = 1) -> None:
        """Add to one of the server's statistics."""

    def decide(self, conn: ServerConnection, req: Request) -> tuple[Answer, float]:
        """Validate a complete request and apply the fault script: the answer and how long to hold it."""

    async def control(self, conn: ServerConnection, req: Request) -> None:
        """Serve a ``/ctl/*`` request; the answer goes back through ``conn.send_control``."""

    def answered(self, conn: ServerConnection, answer: Answer) -> None:
        """An answer was queued: record it."""

    def protocol_error(self, conn: ServerConnection, exc: Exception) -> None:
        """The client broke HTTP/2 (the connection is closing)."""

    def stream_limit_violation(self, conn: ServerConnection, stream_id: int, open_streams: int) -> None:
        """The client opened a stream over a limit it had acknowledged (the stream is refused)."""

    def unique_id_header(self) -> list[tuple[bytes, bytes]]:
        """The ``apns-unique-id`` header of an accepted push (sandbox only), or nothing."""


class ServerConnection:
    """Drives one stream (TLS in production use) through an HTTP/2 server engine; owned by the server."""

    def __init__(self, server: ConnectionOwner, conn_id: int, stream: trio.abc.Stream) -> None:
        self.server = server
        self.id = conn_id
        self.stream = stream
        self.h2: Any
        if server.engine == "lean":
            self.h2 = LeanH2Connection()
        else:
            self.h2 = ServerH2Connection(config=H2_SERVER_CONFIG)
            self.h2.encoder = ResponseEncoder()
        faults = server.faults
        self.max_streams = faults.max_concurrent_streams
        self.advertised_streams = faults.initial_streams or faults.max_concurrent_streams
        self.window = faults.window
        self.auth = ConnectionAuth()
        self.role = "push"  # or "management": the channel-management listener
        self.requests: dict[int, Request] = {}
        self.unanswered: set[int] = set()  # complete requests not yet answered (delays, ctl tasks)
        self.highest_stream = 0  # highest stream whose request was complete (processed or pending)
        self.answered = 0
        self.max_open = 0
        self.goaway_last: int | None = None
        self.goaway_fault: GoawayFault | None = None
        self.goaway_sent = False
        self.closing = False
        self.frozen = False  # silent for good: see ``freeze``
        self._send_lock = trio.StrictFIFOLock()
        self._out: list[bytes] = []  # frames written outside h2 (crafted GOAWAY), flushed in order
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_seq = itertools.count()
        self._wake = trio.Event()
        self._pending_body: dict[int, memoryview] = {}
        self._closed_unflushed = 0  # streams we ended or reset whose frames are not yet written
        self.last_request_at = 0.0
        self.settings_acked = False
        self._nursery: trio.Nursery | None = None

    # ---- lifecycle ---------------------------------------------------------------------------------

    async def run(self) -> None:
        settings = {
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.advertised_streams,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST_SIZE,
        }
        if self.window is not None:
            settings[h2.settings.SettingCodes.INITIAL_WINDOW_SIZE] = self.window.initial_window_size
        # initial_values take effect at once locally (no ACK wait): a client that opens a second stream
        # before reading our SETTINGS breaks the rule of §1.7 and is told so.
        self.h2.local_settings = h2.settings.Settings(client=False, initial_values=settings)
        self.h2.initiate_connection()
        connection_window = (
            self.window.connection_window if self.window is not None else DEFAULT_CONNECTION_WINDOW
        )
        if connection_window is not None and connection_window > 65535:
            self.h2.increment_flow_control_window(connection_window - 65535)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.last_request_at = trio.current_time()
                self.arm_idle_timer()
                nursery.start_soon(self._timer_loop)
                await self._flush()
                await self._read_loop()
                nursery.cancel_scope.cancel()
        except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError, OSError):
            pass
        finally:
            await trio.aclose_forcefully(self.stream)

    async def _read_loop(self) -> None:
        h2conn = self.h2
        while not self.closing:
            try:
                data = await self.stream.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError, OSError):
                return
            if not data:
                return
            if self.frozen:
                continue  # a dropped flow: what arrives goes nowhere
            try:
                events = h2conn.receive_data(data)
            except h2.exceptions.ProtocolError as exc:
                # h2 has queued a GOAWAY with the matching error code; send it and hang up.
                self.server.protocol_error(self, exc)
                await self._flush()
                return
            for event in events:
                self._dispatch(event)
            await self._flush()

    def _dispatch(self, event: h2.events.Event) -> None:
        kind = type(event)
        if kind is h2.events.RequestReceived:
            sid = event.stream_id  # type: ignore[attr-defined]
            # Streams we closed in this batch still count: the client cannot know before we flush.
            open_now = len(self.requests) + len(self.unanswered) + self._closed_unflushed + 1
            if open_now > self.h2.local_settings.max_concurrent_streams:
                if not self.settings_acked:
                    # Before the client acknowledges our first SETTINGS it may assume HTTP/2's unlimited
                    # default (RFC 9113 §6.5.3); serve, but count it: spec §1.7 says to wait for SETTINGS.
                    self.server.count("streams_over_limit_before_settings_ack")
                else:
                    # Over a limit the client has acknowledged: refuse (RFC 9113 §5.1.2) and count it.
                    self.server.stream_limit_violation(self, sid, open_now - 1)
                    self.h2.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
                    self._closed_unflushed += 1
                    return
            self.requests[sid] = Request(sid, event.headers)  # type: ignore[attr-defined]
            if open_now > self.max_open:
                self.max_open = open_now
        elif kind is h2.events.DataReceived:
            sid = event.stream_id  # type: ignore[attr-defined]
            req = self.requests.get(sid)
            if req is not None:
                req.body += event.data  # type: ignore[attr-defined]
            self._ack(event.flow_controlled_length, sid)  # type: ignore[attr-defined]
        elif kind is h2.events.StreamEnded:
            req = self.requests.pop(event.stream_id, None)  # type: ignore[attr-defined]
            if req is not None:
                self._on_request(req)
        elif kind is h2.events.WindowUpdated or kind is h2.events.RemoteSettingsChanged:
            self._resume_bodies()
        elif kind is h2.events.StreamReset:
            sid = event.stream_id  # type: ignore[attr-defined]
            self.requests.pop(sid, None)
            self.unanswered.discard(sid)
            self._pending_body.pop(sid, None)
        elif kind is h2.events.SettingsAcknowledged:
            self.settings_acked = True
        elif kind is h2.events.ConnectionTerminated:
            self.closing = True

    def _ack(self, length: int, stream_id: int) -> None:
        if self.window is not None and self.window.update_delay_s > 0:
            self._call_later(self.window.update_delay_s, lambda: self._ack_now(length, stream_id))
        else:
            self._ack_now(length, stream_id)

    def _ack_now(self, length: int, stream_id: int) -> None:
        try:
            self.h2.acknowledge_received_data(length, stream_id)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            # The stream ended meanwhile; h2 still credits the connection window in that case.
            pass

    async def _flush(self) -> None:
        async with self._send_lock:
            data = self.h2.data_to_send()
            self._closed_unflushed = 0
            if self._out:
                data = b"".join(self._out) + data
                self._out.clear()
            if not data or self.frozen:
                return
            try:
                await self.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError, OSError):
                # The client went away: end this connection (and only it) quietly.
                self.closing = True
                if self._nursery is not None:
                    self._nursery.cancel_scope.cancel()

    # ---- timers: delayed answers, delayed window updates, "now" commands ---------------------------

    def _call_later(self, delay: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (trio.current_time() + delay, next(self._timer_seq), action))
        self._wake.set()

    def call_soon(self, action: Callable[[], None]) -> None:
        """Run ``action`` on this connection's timer task (from any task of the server's trio run)."""
        self._call_later(0.0, action)

    async def _timer_loop(self) -> None:
        while True:
            if self._timers:
                due = self._timers[0][0]
                with trio.move_on_at(due):
                    await self._wake.wait()
            else:
                await self._wake.wait()
            self._wake = trio.Event()
            now = trio.current_time()
            ran = False
            while self._timers and self._timers[0][0] <= now:
                _, _, action = heapq.heappop(self._timers)
                action()
                ran = True
            if ran:
                await self._flush()
                if self.closing and self._nursery is not None:
                    self._nursery.cancel_scope.cancel()
                    return

    # ---- requests ----------------------------------------------------------------------------------

    def arm_idle_timer(self) -> None:
        idle = self.server.faults.idle_timeout_s
        if idle > 0:
            self._call_later(max(0.0, self.last_request_at + idle - trio.current_time()), self._check_idle)

    def _check_idle(self) -> None:
        idle = self.server.faults.idle_timeout_s
        if idle <= 0 or self.goaway_last is not None:
            return
        if trio.current_time() - self.last_request_at >= idle:
            self.server.count("idle_timeouts")
            self.start_goaway(GoawayFault(after=0, reason="IdleTimeout", error_code=0, graceful=True))
        else:
            self.arm_idle_timer()

    def _on_request(self, req: Request) -> None:
        sid = req.stream_id
        self.last_request_at = trio.current_time()
        if self.goaway_last is not None and sid > self.goaway_last:
            # Above GOAWAY's last_stream_id: never processed, the client must retry elsewhere (RFC 9113).
            self.server.count("ignored_after_goaway")
            return
        if sid > self.highest_stream:
            self.highest_stream = sid
        server = self.server
        path = _header_value(req.headers, b":path")
        if path.startswith(b"/ctl/"):
            self.unanswered.add(sid)
            assert self._nursery is not None
            self._nursery.start_soon(server.control, self, req)
            return
        faults = server.faults
        if faults.drop_after is not None:
            if faults.drop_after <= 0:
                faults.drop_after = None
                server.count("connections_dropped")
                log.info("apns_server_drop", connection_id=self.id, stream_id=sid)
                self.abort()
                return
            faults.drop_after -= 1
        if faults.take_refusal():
            server.count("refused_streams")
            self.h2.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
            self._closed_unflushed += 1
            return
        self.unanswered.add(sid)
        answer, delay = server.decide(self, req)
        if delay > 0:
            self._call_later(delay, lambda: self._send_answer(answer))
        else:
            self._send_answer(answer)

    def _send_answer(self, answer: Answer) -> None:
        sid = answer.stream_id
        if self.frozen or (self.closing and not self.goaway_sent and self.goaway_last is None):
            return
        status = answer.status
        try:
            if 200 <= status < 300 and (answer.headers or answer.body or answer.id_header != b"apns-id"):
                self.h2.send_headers(
                    sid,
                    [
                        (b":status", str(status).encode()),
                        (answer.id_header, answer.apns_id.encode()),
                        *answer.headers,
                    ],
                    end_stream=not answer.body,
                )
                if answer.body:
                    self._send_body(sid, answer.body)
            elif status == 200:
                self.h2.send_headers(
                    sid,
                    [
                        (b":status", b"200"),
                        (b"apns-id", answer.apns_id.encode()),
                        *self.server.unique_id_header(),
                    ],
                    end_stream=True,
                )
            else:
                self.h2.send_headers(
                    sid,
                    [
                        (b":status", str(status).encode()),
                        (b"content-type", b"application/json"),
                        (answer.id_header, answer.apns_id.encode()),
                    ],
                    end_stream=not answer.body,
                )
                if answer.body:
                    self._send_body(sid, answer.body)
        except h2.exceptions.StreamClosedError:
            # The client reset the stream while we held the answer (e.g. its deadline fired).
            self.unanswered.discard(sid)
            self.server.count("answers_to_closed_streams")
            return
        self.unanswered.discard(sid)
        self._closed_unflushed += 1
        self.answered += 1
        self._adjust_stream_limit(answer.status)
        self.server.answered(self, answer)
        self._maybe_goaway_after_answer(sid)

    def send_control(self, stream_id: int, status: int, data: bytes) -> None:
        if self.frozen:
            return
        try:
            self.h2.send_headers(
                stream_id,
                [(b":status", str(status).encode()), (b"content-type", b"application/json")],
                end_stream=False,
            )
        except h2.exceptions.StreamClosedError:
            self.unanswered.discard(stream_id)
            return
        self._send_body(stream_id, data)
        self.unanswered.discard(stream_id)
        if self.goaway_last is not None and not self.goaway_sent and not self.unanswered:
            self._emit_goaway()

    def _send_body(self, sid: int, body: bytes) -> None:
        self._pending_body[sid] = memoryview(body)
        self._push_body(sid)

    def _push_body(self, sid: int) -> None:
        view = self._pending_body.get(sid)
        if view is None:
            return
        try:
            while view:
                room = min(self.h2.local_flow_control_window(sid), self.h2.max_outbound_frame_size, len(view))
                if room <= 0:
                    self._pending_body[sid] = view  # resumed by WindowUpdated / RemoteSettingsChanged
                    return
                chunk, view = view[:room], view[room:]
                self.h2.send_data(sid, bytes(chunk), end_stream=not view)
        except (h2.exceptions.StreamClosedError, h2.exceptions.FlowControlError):
            pass
        self._pending_body.pop(sid, None)

    def _resume_bodies(self) -> None:
        for sid in list(self._pending_body):
            self._push_body(sid)

    def _adjust_stream_limit(self, status: int) -> None:
        if status == 200:
            target = self.max_streams
        elif 400 <= status < 500 and status != 410 and self.server.faults.drop_streams_on_rejection:
            target = 1
        else:
            return
        if target != self.advertised_streams:
            self.advertised_streams = target
            self.h2.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: target})
            self.server.count("stream_limit_changes")

    # ---- GOAWAY and drops --------------------------------------------------------------------------

    def _maybe_goaway_after_answer(self, sid: int) -> None:
        faults = self.server.faults
        fault = faults.goaway
        if fault is not None and fault.after > 0 and self.goaway_last is None:
            faults.goaway_remaining -= 1
            if faults.goaway_remaining <= 0:
                faults.goaway = None
                # Requests already complete (answered or held) are at or below highest_stream.
                self.start_goaway(fault, last_stream_id=max(sid, self.highest_stream))
        elif self.goaway_last is not None and not self.goaway_sent and not self.unanswered:
            self._emit_goaway()

    def start_goaway(self, fault: GoawayFault, last_stream_id: int | None = None) -> None:
        """Stop taking streams above ``last_stream_id``; GOAWAY now or once the rest is answered."""
        if self.goaway_last is not None:
            return
        self.goaway_fault = fault
        self.goaway_last = self.highest_stream if last_stream_id is None else last_stream_id
        # Requests above last_stream_id whose bodies are still arriving are abandoned with the rest.
        for sid in [s for s in self.requests if s > self.goaway_last]:
            del self.requests[sid]
        if not fault.graceful or not self.unanswered:
            self._emit_goaway()

    def _emit_goaway(self) -> None:
        fault = self.goaway_fault
        assert fault is not None and self.goaway_last is not None
        frame = GoAwayFrame(0)
        frame.last_stream_id = self.goaway_last
        frame.error_code = fault.error_code
        frame.additional_data = json.dumps({"reason": fault.reason}).encode()
        # Crafted outside h2 so its state machine stays open: streams <= last_stream_id may still be
        # answered (h2 refuses to send anything once it has sent GOAWAY itself).
        self._out.append(self.h2.data_to_send())
        self._out.append(frame.serialize())
        self.goaway_sent = True
        self.server.count("goaways_sent")
        log.info(
            "apns_server_goaway",
            connection_id=self.id,
            last_stream_id=self.goaway_last,
            reason=fault.reason,
            pending=len(self.unanswered),
        )
        self._call_later(self.server.goaway_linger_s, self._close_when_done)

    def _close_when_done(self) -> None:
        # Closing a TCP socket with unread input makes the kernel send RST, which can destroy our GOAWAY
        # before the client reads it; so we linger (reading and ignoring) and let the client close first.
        if not self.unanswered:
            self.closing = True
            self._wake.set()
        else:
            # Non-graceful GOAWAY with answers still pending: check again once they have gone out.
            self._call_later(self.server.goaway_linger_s, self._close_when_done)

    def freeze(self) -> None:
        """Go silent for good without closing: read and discard whatever arrives, never write again (no answer,
        no PING or SETTINGS acknowledgement, no GOAWAY), and drop the answers still held. What a client sees
        of a flow a NAT or load balancer dropped without a word: the connection looks open and is dead."""
        self.frozen = True
        self.unanswered.clear()
        self._pending_body.clear()

    def abort(self) -> None:
        """Drop the TCP connection without a word (the client sees EOF / a reset)."""
        self.closing = True
        self.unanswered.clear()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()


def _header_value(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes:
    for k, v in headers:
        if k == name:
            return v
    return b""
