"""Every place the APNs client and test server reach into h2's, hpack's or trio's private internals.

The sender's request streams bypass h2's per-stream machinery (``ApnsClientH2Connection``: h2 keeps the
connection, ``daemon.apns.connection`` the streams), and the test server's receive path skips h2's per-frame
logging (see ``daemon.apns.connection`` for what that saves). Those internals are not h2's API, so they sit
here, behind one check made at import:

- ``H2_FAST_PATHS`` is true when h2 is 4.x and every private attribute used below exists on a probe
  connection. When it is false: the test server runs stock h2 (its ``_receive_frame`` override is dropped),
  answers still use the HPACK shortcut (public hpack API only), hpack's Huffman decoding stays uncached, and
  the sender's connection refuses to start with an error naming what is missing (its request path has no
  stock-h2 equivalent). pyproject.toml pins h2 to 4.x for this reason; the tests drive both sides against
  h2's own peer and hpack's own coder to catch drift.
- trio: ``drain_decrypted`` reads an ``SSLStream``'s private buffers and falls back to one TLS record per
  read when they are absent.
"""

from __future__ import annotations

import ssl
import struct
from collections.abc import Callable
from typing import Any, Final

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import hpack.hpack
import trio
from h2.connection import ConnectionInputs, ConnectionState
from h2.errors import _error_code_from_int
from h2.utilities import guard_increment_window
from hyperframe.frame import Frame, RstStreamFrame

from daemon.apns.wire import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    FRAME_HEADER,
    HEADERS,
    PADDED,
    PRIORITY,
    PRIORITY_FLAG,
    RST_STREAM,
    WINDOW_UPDATE,
    frame_header,
)

# Private attributes of an h2 4.x connection that the code below uses (the client's and the test server's).
_CONNECTION_INTERNALS = (
    "_data_to_send",
    "_frame_dispatch_table",
    "_inbound_flow_control_window_manager",
    "_open_streams",
    "_prepare_for_sending",
    "_receive_frame",
    "_receive_goaway_frame",
    "_stream_is_closed_by_end",
    "_stream_is_closed_by_reset",
    "_terminate_connection",
    "state_machine",
    "incoming_buffer",
)


def _missing_h2_internals() -> list[str]:
    major = h2.__version__.split(".", 1)[0]
    if major != "4":
        return [f"h2 4.x (have {h2.__version__})"]
    probe = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    probe.initiate_connection()
    missing = [name for name in _CONNECTION_INTERNALS if not hasattr(probe, name)]
    if not hasattr(getattr(probe, "incoming_buffer", None), "_headers_buffer"):
        missing.append("incoming_buffer._headers_buffer")
    manager = getattr(probe, "_inbound_flow_control_window_manager", None)
    missing += [
        f"_inbound_flow_control_window_manager.{name}"
        for name in ("window_consumed", "process_bytes")
        if not hasattr(manager, name)
    ]
    if not isinstance(getattr(probe, "_data_to_send", None), bytearray):
        missing.append("_data_to_send as a bytearray")
    return missing


MISSING_H2_INTERNALS: list[str] = _missing_h2_internals()
H2_FAST_PATHS: bool = not MISSING_H2_INTERNALS


# --- the APNs client's connection ------------------------------------------------------------------------

StreamFrame = tuple[int, int, int, bytes, int]
"""A frame on one of our request streams, as ``ApnsClientH2Connection.receive_frames`` hands it on: (type, flags,
stream id, payload, flow-controlled length). HEADERS come whole (CONTINUATION frames joined, END_HEADERS set),
unpadded and without their priority fields; DATA unpadded, with its flow-controlled length (padding
included); RST_STREAM, WINDOW_UPDATE and PRIORITY as received (length 0 for all but DATA)."""

_STREAM_FRAME_TYPES: Final = frozenset({DATA, HEADERS, RST_STREAM, PRIORITY, WINDOW_UPDATE, CONTINUATION})
_FIXED_LENGTH: Final = {RST_STREAM: 4, WINDOW_UPDATE: 4, PRIORITY: 5}
_FRAME_HEAD: Final = struct.Struct(">HBBBL")  # 24-bit length as (high 16, low 8), type, flags, stream id
# A HEADERS frame whose flags masked by this are END_HEADERS alone is a whole header block without padding or
# priority fields: its payload is the block as it came.
_HEADERS_AS_IS: Final = PADDED | PRIORITY_FLAG | END_HEADERS


class ApnsClientH2Connection(h2.connection.H2Connection):
    """h2's client connection for what belongs to the connection; the request streams are ``ApnsConnection``'s.

    h2 keeps the connection itself: its state machine, SETTINGS both ways, PING, GOAWAY, the connection-level
    flow-control windows, and every frame that is not on a stream we opened. The request streams are lean
    records kept by ``ApnsConnection`` (their states, windows and answers): h2's per-stream objects, state
    machines and events cost more CPU than the rest of a push. This class opens them without an h2 stream (h2
    only learns the highest stream id, so that it treats frames on other ids as it should), writes their frames
    straight into h2's output buffer, charges what arrives on them to h2's connection window, and splits what
    arrives: frames on our streams go back as ``StreamFrame``s, every other frame through h2's own receive path,
    all in wire order. ``encoder`` is the request HPACK encoder (h2 tells it the server's table size).
    """

    def __init__(self, config: h2.config.H2Configuration, *, encoder: Any) -> None:
        if not H2_FAST_PATHS:
            raise RuntimeError(
                f"h2 {h2.__version__} lacks the internals the APNs request path drives "
                f"(missing: {', '.join(MISSING_H2_INTERNALS)}); install h2 4.x"
            )
        super().__init__(config=config)
        self.encoder: Any = encoder
        self.open_requests = 0
        self._pending_bytes = bytearray()  # a partial frame, until the rest arrives
        # our HEADERS whose block continues in CONTINUATION frames: (stream id, HEADERS flags, block so far)
        self._block: tuple[int, int, bytearray] | None = None
        # the server's SETTINGS_MAX_CONCURRENT_STREAMS, kept by ``settings_changed`` (h2's Settings mapping
        # costs a lookup chain per read, and this is read per request)
        self.stream_limit: int = self.remote_settings.max_concurrent_streams

    def settings_changed(self) -> None:
        """The server's SETTINGS were applied: refresh what is kept from them."""
        self.stream_limit = self.remote_settings.max_concurrent_streams

    @property
    def open_outbound_streams(self) -> int:
        # h2 counts the streams in its own table; ours are not there. ApnsConnection counts them exactly.
        return self.open_requests

    @property
    def is_open(self) -> bool:
        """The connection is open both ways (h2's state machine): our streams' frames are ours to handle."""
        return self.state_machine.state is ConnectionState.CLIENT_OPEN

    def protocol_error(self, error_code: h2.errors.ErrorCodes, message: str) -> h2.exceptions.ProtocolError:
        """End the connection with GOAWAY ``error_code`` (a stream error on our streams is treated as a
        connection error, as RFC 9113 §5.4.1 allows); returns the exception for the caller to raise."""
        self._terminate_connection(error_code)
        exc = h2.exceptions.ProtocolError(message)
        exc.error_code = error_code
        return exc

    # -- our streams, outbound ----------------------------------------------------------------------------
    def send_request(self, stream_id: int, block: bytes, body: bytes, window: int) -> int:
        """Open ``stream_id`` with the HPACK ``block`` as its request headers, and send as much of ``body`` as
        the connection's window and the stream's ``window`` allow; returns the bytes of body sent. END_STREAM
        comes with the last byte of the body, or with the headers when there is no body (GET, DELETE)."""
        if self.open_requests >= self.stream_limit:
            raise h2.exceptions.TooManyStreamsError("APNs stream limit reached")  # guarded by ApnsConnection
        machine = self.state_machine
        if machine.state is not ConnectionState.CLIENT_OPEN:
            machine.process_input(ConnectionInputs.SEND_HEADERS)  # raises in a state that sends nothing
        if stream_id <= self.highest_outbound_stream_id or not stream_id & 1:
            raise h2.exceptions.StreamIDTooLowError(stream_id, self.highest_outbound_stream_id)
        self.highest_outbound_stream_id = stream_id
        self.open_requests += 1
        out = self._data_to_send
        frame_max = self.max_outbound_frame_size
        end_flag = 0 if body else END_STREAM
        size = len(block)
        if size <= frame_max:
            size_body = len(body)
            if (
                size_body
                and size_body <= frame_max
                and size_body <= window
                and size_body <= self.outbound_flow_control_window
            ):
                # the usual request: one HEADERS frame and the whole body in one DATA frame ending the stream
                self.outbound_flow_control_window -= size_body
                pack = FRAME_HEADER.pack
                out += pack(size >> 8, size & 0xFF, HEADERS, END_HEADERS, stream_id)
                out += block
                out += pack(size_body >> 8, size_body & 0xFF, DATA, END_STREAM, stream_id)
                out += body
                return size_body
            out += frame_header(size, HEADERS, END_HEADERS | end_flag, stream_id)
            out += block
        else:
            chunks = [block[i : i + frame_max] for i in range(0, len(block), frame_max)]
            for i, chunk in enumerate(chunks):
                flags = END_HEADERS if i == len(chunks) - 1 else 0
                if i == 0:
                    flags |= end_flag
                out += frame_header(len(chunk), HEADERS if i == 0 else CONTINUATION, flags, stream_id)
                out += chunk
        return self.send_body(stream_id, body, 0, window) if body else 0

    def send_body(self, stream_id: int, body: bytes, offset: int, window: int) -> int:
        """Send ``body[offset:]`` as far as the connection's window and the stream's ``window`` allow, in frames
        of at most the server's frame size, END_STREAM on the last byte; returns the new offset (the caller
        takes what went out from the stream's window; the connection's is taken here)."""
        allowed = min(self.outbound_flow_control_window, window, len(body) - offset)
        if allowed <= 0:
            return offset
        machine = self.state_machine
        if machine.state is not ConnectionState.CLIENT_OPEN:
            machine.process_input(ConnectionInputs.SEND_DATA)
        self.outbound_flow_control_window -= allowed
        out = self._data_to_send
        frame_max = self.max_outbound_frame_size
        total = len(body)
        while allowed > 0:
            size = min(allowed, frame_max)
            stop = offset + size
            out += frame_header(size, DATA, END_STREAM if stop == total else 0, stream_id)
            out += body[offset:stop]
            offset = stop
            allowed -= size
        return offset

    def send_reset(self, stream_id: int, error_code: int) -> None:
        """RST_STREAM ``error_code`` on one of our streams (the caller forgets it)."""
        machine = self.state_machine
        if machine.state is not ConnectionState.CLIENT_OPEN:
            machine.process_input(ConnectionInputs.SEND_RST_STREAM)
        self._data_to_send += frame_header(4, RST_STREAM, 0, stream_id) + int(error_code).to_bytes(4, "big")

    def stream_closed(self) -> None:
        """One of our streams is closed and forgotten: it no longer counts against the server's limit."""
        self.open_requests -= 1

    # -- our streams, inbound -----------------------------------------------------------------------------
    def data_received(self, flow_controlled_length: int) -> None:
        """DATA arrived on one of our streams (open or closed): charge it to the connection's window, and hand
        it straight back (we keep nothing buffered), with a WINDOW_UPDATE once h2's window manager says so."""
        if not flow_controlled_length:
            return
        manager = self._inbound_flow_control_window_manager
        try:
            manager.window_consumed(flow_controlled_length)
        except h2.exceptions.ProtocolError as exc:  # the server overran our window
            self._terminate_connection(exc.error_code)
            raise
        increment = manager.process_bytes(flow_controlled_length)
        if increment:
            self._data_to_send += frame_header(4, WINDOW_UPDATE, 0, 0) + increment.to_bytes(4, "big")

    def receive_frames(self, data: bytes | bytearray) -> list[h2.events.Event | StreamFrame]:
        """Split what arrived into whole frames: those on our streams come back as ``StreamFrame``s; every
        other frame goes through h2's ``receive_data`` (SETTINGS, PING, GOAWAY, anything odd) and its events
        come back in their place, in wire order. A connection-level WINDOW_UPDATE (nginx sends many) credits
        the connection's window directly, as h2 would. Frames on our streams that are malformed (a length
        their type does not allow, over our SETTINGS_MAX_FRAME_SIZE), and everything while the connection is
        not open both ways or while h2 holds part of another header block, take h2's path and its errors.
        h2 protocol errors propagate, after GOAWAY is queued."""
        buffer = self._pending_bytes
        buffer += data
        items: list[h2.events.Event | StreamFrame] = []
        pos = 0
        end = len(buffer)
        slow_from = -1  # start of a run of frames for h2's own parser
        unpack = _FRAME_HEAD.unpack_from
        frame_buffer = self.incoming_buffer
        highest = self.highest_outbound_stream_id
        fast = self.is_open and not frame_buffer._headers_buffer
        max_size = self.max_inbound_frame_size
        while end - pos >= 9:
            high, low, frame_type, flags, stream_id = unpack(buffer, pos)
            length = (high << 8) | low
            frame_end = pos + 9 + length
            if frame_end > end:
                break
            stream_id &= 0x7FFFFFFF
            block = self._block
            if block is not None:  # our header block is open: nothing but its CONTINUATION may come
                if frame_type != CONTINUATION or stream_id != block[0] or length > max_size:
                    raise self.protocol_error(
                        h2.errors.ErrorCodes.PROTOCOL_ERROR,
                        f"expected a CONTINUATION of stream {block[0]}, got frame type {frame_type} "
                        f"on stream {stream_id}",
                    )
                block[2].extend(buffer[pos + 9 : frame_end])
                if flags & END_HEADERS:
                    self._block = None
                    items.append((HEADERS, block[1] | END_HEADERS, stream_id, bytes(block[2]), 0))
            elif (
                fast
                and stream_id & 1
                and stream_id <= highest
                and length <= max_size
                and frame_type in _STREAM_FRAME_TYPES
                and _FIXED_LENGTH.get(frame_type, length) == length
                and frame_type != CONTINUATION
            ):
                if slow_from >= 0:
                    items += self._slow(buffer, slow_from, pos)
                    slow_from = -1
                    fast = self.is_open and not frame_buffer._headers_buffer
                    max_size = self.max_inbound_frame_size
                # The usual frames are handed on as they came (``_stream_frame`` does the same for them, and
                # strips padding and priority fields and gathers a header block's CONTINUATIONs for the rest).
                if frame_type == DATA:
                    if flags & PADDED:
                        self._stream_frame(buffer, pos + 9, frame_end, frame_type, flags, stream_id, items)
                    else:
                        items.append((DATA, flags, stream_id, bytes(buffer[pos + 9 : frame_end]), length))
                elif frame_type == HEADERS:
                    if flags & _HEADERS_AS_IS == END_HEADERS:
                        items.append((HEADERS, flags, stream_id, bytes(buffer[pos + 9 : frame_end]), 0))
                    else:
                        self._stream_frame(buffer, pos + 9, frame_end, frame_type, flags, stream_id, items)
                else:  # RST_STREAM, WINDOW_UPDATE, PRIORITY: fixed lengths, checked above
                    items.append((frame_type, flags, stream_id, bytes(buffer[pos + 9 : frame_end]), 0))
            elif (
                fast
                and frame_type == WINDOW_UPDATE
                and stream_id == 0
                and length == 4
                and (increment := int.from_bytes(buffer[pos + 9 : frame_end], "big") & 0x7FFFFFFF)
            ):
                # Connection credit: what h2's _receive_window_update_frame does for stream 0 (its event is not
                # needed: ApnsConnection moves waiting bodies on after every read). A zero increment takes
                # h2's path and its error.
                if slow_from >= 0:
                    items += self._slow(buffer, slow_from, pos)
                    slow_from = -1
                    fast = self.is_open and not frame_buffer._headers_buffer
                    max_size = self.max_inbound_frame_size
                try:
                    self.outbound_flow_control_window = guard_increment_window(
                        self.outbound_flow_control_window, increment
                    )
                except h2.exceptions.ProtocolError as exc:
                    self._terminate_connection(exc.error_code)
                    raise
            elif slow_from < 0:
                slow_from = pos
            pos = frame_end
        if slow_from >= 0:
            items += self._slow(buffer, slow_from, pos)
        del buffer[:pos]
        return items

    def _slow(self, buffer: bytearray, start: int, stop: int) -> list[h2.events.Event]:
        return self.receive_data(bytes(buffer[start:stop]))

    def _stream_frame(
        self,
        buffer: bytearray,
        start: int,
        stop: int,
        frame_type: int,
        flags: int,
        stream_id: int,
        items: list[h2.events.Event | StreamFrame],
    ) -> None:
        """One frame on our streams, unpadded (HEADERS without their priority fields), into ``items``."""
        length = stop - start
        if frame_type == DATA or frame_type == HEADERS:
            if flags & PADDED:
                pad = buffer[start] if length else 0
                start += 1
                if not length or pad > stop - start:
                    raise self.protocol_error(
                        h2.errors.ErrorCodes.PROTOCOL_ERROR, "Received frame with invalid padding."
                    )
                stop -= pad
            if frame_type == HEADERS and flags & PRIORITY_FLAG:
                start += 5
                if start > stop:
                    raise self.protocol_error(
                        h2.errors.ErrorCodes.FRAME_SIZE_ERROR, "HEADERS too short for its priority fields"
                    )
            payload = bytes(buffer[start:stop])
            if frame_type == HEADERS and not flags & END_HEADERS:
                self._block = (stream_id, flags, bytearray(payload))
                return
            items.append((frame_type, flags, stream_id, payload, length if frame_type == DATA else 0))
            return
        items.append((frame_type, flags, stream_id, bytes(buffer[start:stop]), 0))

    def _receive_goaway_frame(self, frame: Any) -> tuple[list[Any], list[h2.events.Event]]:
        # Stock h2 closes its state machine on GOAWAY, so the answers the server still owes for streams
        # at or below last_stream_id (RFC 9113 §6.8) would then be treated as protocol errors and lost.
        # We keep the connection state open; ApnsConnection opens no new stream after a GOAWAY.
        event = h2.events.ConnectionTerminated()
        event.error_code = _error_code_from_int(frame.error_code)
        event.last_stream_id = frame.last_stream_id
        event.additional_data = frame.additional_data or None
        return [], [event]


# --- the test server's connection ------------------------------------------------------------------------


class ServerH2Connection(h2.connection.H2Connection):
    """h2's server connection without its O(open streams) walk on every new stream.

    h2 counts open inbound streams by walking every stream each time a HEADERS frame opens one; with 1000
    streams in flight that walk costs more than the rest of the request. The server enforces
    MAX_CONCURRENT_STREAMS itself, in event order (``_ServerConnection._dispatch``), answering an excess
    stream with RST_STREAM REFUSED_STREAM as RFC 9113 §5.1.2 allows; h2 only has to forget closed streams
    now and then, which the sweep below keeps amortised.
    """

    _SWEEP_EVERY = 512
    _new_streams = 0

    def _receive_frame(self, frame: Frame) -> list[h2.events.Event]:
        # h2's version starts with ``logger.trace("Received frame: %s", repr(frame))``: the repr is built
        # for every frame even with no logger (~15 us a frame, two frames a push). The rest mirrors h2 4.x:
        # a frame on a stream closed by RST_STREAM gets RST_STREAM back; anything else is a connection error.
        events: list[h2.events.Event]
        try:
            frames, events = self._frame_dispatch_table[frame.__class__](frame)
        except h2.exceptions.StreamClosedError as exc:
            if not self._stream_is_closed_by_reset(exc.stream_id):
                raise
            reset = RstStreamFrame(exc.stream_id)
            reset.error_code = exc.error_code
            self._prepare_for_sending([reset])
            events = exc._events
            return events
        except h2.exceptions.StreamIDTooLowError as exc:
            if self._stream_is_closed_by_reset(exc.stream_id):
                reset = RstStreamFrame(exc.stream_id)
                reset.error_code = h2.errors.ErrorCodes.STREAM_CLOSED
                self._prepare_for_sending([reset])
                return []
            if self._stream_is_closed_by_end(exc.stream_id):
                raise h2.exceptions.StreamClosedError(exc.stream_id) from exc
            raise
        self._prepare_for_sending(frames)
        return events

    @property
    def open_inbound_streams(self) -> int:
        self._new_streams += 1
        if self._new_streams >= self._SWEEP_EVERY:
            self._new_streams = 0
            self._open_streams(1)  # drops closed streams from self.streams
        return 0


if not H2_FAST_PATHS:  # pragma: no cover - stock h2 receives and counts itself (slower, same behaviour)
    del ServerH2Connection._receive_frame
    del ServerH2Connection.open_inbound_streams


# --- hpack -----------------------------------------------------------------------------------------------


_HUFFMAN_CACHE_MIN = 32
_HUFFMAN_CACHE_LIMIT = 4096


def install_huffman_cache() -> None:
    """Memoise hpack's Huffman decoding of long literals (process-wide, idempotent).

    h2 (and other APNs clients) send ``authorization`` as a never-indexed literal, so the ~200-byte
    Huffman-coded JWT is decoded on every request although it changes once per ~50 minutes; decoding it is
    the largest single cost of a request in pure-Python hpack. ``decode_huffman`` is a pure function of its
    input, so caching it changes nothing but the time.
    """
    original: Callable[[bytes], bytes] | None = getattr(hpack.hpack, "decode_huffman", None)
    if original is None or getattr(original, "_sightscreen_cached", False):
        return  # an hpack without this function: decoding stays uncached
    cache: dict[bytes, bytes] = {}

    def decode_huffman(data: bytes) -> bytes:
        if len(data) < _HUFFMAN_CACHE_MIN:
            return original(data)
        decoded = cache.get(data)
        if decoded is None:
            decoded = original(data)
            if len(cache) >= _HUFFMAN_CACHE_LIMIT:
                cache.clear()
            cache[bytes(data)] = decoded
        return decoded

    # both are monkeypatches of hpack's module (read back through getattr above), set the same way
    setattr(decode_huffman, "_sightscreen_cached", True)  # noqa: B010
    setattr(hpack.hpack, "decode_huffman", decode_huffman)  # noqa: B010


# --- trio ------------------------------------------------------------------------------------------------


def drain_decrypted(
    stream: trio.abc.ReceiveStream, first: bytes | bytearray, read_size: int
) -> bytes | bytearray:
    """``first`` plus every TLS record already received and buffered, decrypted without awaiting.

    ``SSLStream.receive_some`` returns one TLS record per call (OpenSSL's SSL_read), and each call is a trip
    through trio's scheduler. A server that writes every HTTP/2 frame as its own record (nginx does) would
    cost a scheduler round-trip, an h2 call and a writer wake-up per push, several times the CPU. The
    records are already in the stream's incoming buffer, so they are decrypted here in one go. This reads
    trio's private ``_incoming``/``_ssl_object``; if they are absent it falls back to one record per read.
    Anything the TLS layer wants to send in reply stays in its outgoing buffer and goes out with trio's next
    read or write on the stream. Any other stream (a test's in-memory one) is read one chunk at a time.
    """
    incoming = getattr(stream, "_incoming", None)
    ssl_object = getattr(stream, "_ssl_object", None)
    if incoming is None or ssl_object is None or not (incoming.pending or ssl_object.pending()):
        return first
    chunks = [first]
    while incoming.pending or ssl_object.pending():
        try:
            chunks.append(ssl_object.read(read_size))
        except ssl.SSLError:
            break  # WantRead (a partial record), EOF or an error: the next receive_some deals with it
    return b"".join(chunks)
