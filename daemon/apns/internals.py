"""Every place the APNs client and test server reach into h2's, hpack's or trio's private internals.

The sender's request path and both sides' receive fast paths drive h2's own connection and stream state
machines directly instead of going through its frame objects (see ``daemon.apns.connection`` for what that
saves). Those internals are not h2's API, so they sit here, behind one check made at import:

- ``H2_FAST_PATHS`` is true when h2 is 4.x and every private attribute used below exists on a probe
  connection and stream. When it is false: the test server runs stock h2 (its ``_receive_frame`` override
  is dropped), answers still use the HPACK shortcut (public hpack API only), hpack's Huffman decoding stays
  uncached, and the sender's connection refuses to start with an error naming what is missing (its request
  path has no stock-h2 equivalent). pyproject.toml pins h2 to 4.x for this reason; the tests drive both
  sides against h2's own peer and hpack's own coder to catch drift.
- trio: ``drain_decrypted`` reads an ``SSLStream``'s private buffers and falls back to one TLS record per
  read when they are absent.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import hpack.hpack
import trio
from h2.connection import AllowedStreamIDs, ConnectionInputs, ConnectionState
from h2.errors import _error_code_from_int
from h2.stream import StreamInputs
from h2.utilities import guard_increment_window
from hyperframe.frame import Frame, RstStreamFrame

from daemon.apns.wire import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    PADDED,
    PRIORITY_FLAG,
    RST_STREAM,
    WINDOW_UPDATE,
    frame_header,
)

# Private attributes of an h2 4.x connection and stream that the code below uses.
_CONNECTION_INTERNALS = (
    "_begin_new_stream",
    "_closed_streams",
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
_STREAM_INTERNALS = ("_initialize_content_length", "state_machine", "receive_window_update", "receive_data")


def _missing_h2_internals() -> list[str]:
    major = h2.__version__.split(".", 1)[0]
    if major != "4":
        return [f"h2 4.x (have {h2.__version__})"]
    probe = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    probe.initiate_connection()
    missing = [name for name in _CONNECTION_INTERNALS if not hasattr(probe, name)]
    if not hasattr(getattr(probe, "incoming_buffer", None), "_headers_buffer"):
        missing.append("incoming_buffer._headers_buffer")
    try:
        stream = probe._begin_new_stream(1, AllowedStreamIDs.ODD)
    except Exception:  # noqa: BLE001 - any failure means the internals differ
        return [*missing, "_begin_new_stream()"]
    missing += [f"H2Stream.{name}" for name in _STREAM_INTERNALS if not hasattr(stream, name)]
    return missing


MISSING_H2_INTERNALS: list[str] = _missing_h2_internals()
H2_FAST_PATHS: bool = not MISSING_H2_INTERNALS


# --- the APNs client's connection ------------------------------------------------------------------------


class ApnsClientH2Connection(h2.connection.H2Connection):
    """h2's client connection with O(1) stream counting, a direct request path and graceful GOAWAY.

    ``encoder`` builds request header blocks (h2 never encodes for this connection: ``send_request`` takes
    the block); ``response_decoder`` decodes answers on the fast path.
    """

    def __init__(self, config: h2.config.H2Configuration, *, encoder: Any, response_decoder: Any) -> None:
        if not H2_FAST_PATHS:
            raise RuntimeError(
                f"h2 {h2.__version__} lacks the internals the APNs request path drives "
                f"(missing: {', '.join(MISSING_H2_INTERNALS)}); install h2 4.x"
            )
        super().__init__(config=config)
        self.encoder: Any = encoder
        self.open_requests = 0
        self._pending_bytes = bytearray()  # a partial frame, until the rest arrives
        self.response_decoder = response_decoder
        # the server's SETTINGS_MAX_CONCURRENT_STREAMS, kept by ``settings_changed`` (h2's Settings mapping
        # costs a lookup chain per read, and this is read per request)
        self.stream_limit: int = self.remote_settings.max_concurrent_streams

    def settings_changed(self) -> None:
        """The server's SETTINGS were applied: refresh what is kept from them."""
        self.stream_limit = self.remote_settings.max_concurrent_streams

    @property
    def open_outbound_streams(self) -> int:
        # Stock h2 recounts (and garbage-collects) every stream here, on every send_headers: O(n) per
        # request. ApnsConnection counts its own streams exactly and forgets closed ones as they close.
        return self.open_requests

    def _connection_input(self, input_: ConnectionInputs) -> None:
        # In CLIENT_OPEN, h2's connection state machine maps SEND/RECV of HEADERS, DATA and RST_STREAM back to
        # CLIENT_OPEN with no side effect; only other states need the machine (and its ProtocolError).
        machine = self.state_machine
        if machine.state is not ConnectionState.CLIENT_OPEN:
            machine.process_input(input_)

    def forget_stream(self, stream_id: int) -> None:
        """Drop a closed stream the way h2's recount would (late frames on it are still recognised)."""
        stream = self.streams.pop(stream_id, None)
        if stream is not None:
            self._closed_streams[stream_id] = stream.closed_by
            self.open_requests -= 1

    def receive_frames(self, data: bytes | bytearray) -> list[h2.events.Event]:
        """``receive_data`` with a direct path for the frame APNs sends most: a response's HEADERS.

        Stock h2 turns every frame into a hyperframe object, logs its repr and dispatches it; for a
        one-frame response that is most of the receive cost. Complete frames are split here; a HEADERS
        frame that carries a whole header block (END_HEADERS, no padding or priority) on a stream we opened
        is decoded by ``ResponseHeaderDecoder`` and driven through h2's own connection and stream state
        machines, producing the same events h2 would; so is an unpadded DATA frame on such a stream (error
        bodies, empty END_STREAM frames). Every other frame (SETTINGS, WINDOW_UPDATE,
        RST_STREAM, GOAWAY, PING, CONTINUATION, anything odd) goes through h2 unchanged.
        """
        buffer = self._pending_bytes
        buffer += data
        events: list[h2.events.Event] = []
        pos = 0
        end = len(buffer)
        slow_from = -1  # start of a run of frames for h2's own parser
        streams = self.streams
        frame_buffer = self.incoming_buffer
        while end - pos >= 9:
            length = (buffer[pos] << 16) | (buffer[pos + 1] << 8) | buffer[pos + 2]
            frame_end = pos + 9 + length
            if frame_end > end:
                break
            frame_type = buffer[pos + 3]
            flags = buffer[pos + 4]
            stream_id = int.from_bytes(buffer[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
            # the fast path: a whole HEADERS block or a DATA frame, unpadded, on a stream we opened
            if (
                (frame_type == DATA or (frame_type == HEADERS and flags & END_HEADERS))
                and not flags & (PADDED | PRIORITY_FLAG)
                and length <= self.max_inbound_frame_size
                and stream_id in streams
                and not frame_buffer._headers_buffer
            ):
                if slow_from >= 0:
                    events += self.receive_data(bytes(buffer[slow_from:pos]))
                    slow_from = -1
                handler = self._fast_data if frame_type == DATA else self._fast_headers
                events += handler(
                    streams[stream_id], bytes(buffer[pos + 9 : frame_end]), bool(flags & END_STREAM)
                )
            elif (
                frame_type == RST_STREAM
                and length == 4
                and stream_id not in streams
                and 0 < stream_id <= self.highest_outbound_stream_id
            ):
                # A reset of a stream we already closed (nginx sends one after every answer): h2 would only
                # look the stream up, find it closed and ignore the frame.
                if slow_from >= 0:
                    events += self.receive_data(bytes(buffer[slow_from:pos]))
                    slow_from = -1
                self._connection_input(ConnectionInputs.RECV_RST_STREAM)
            elif (
                frame_type == WINDOW_UPDATE
                and length == 4
                and (increment := int.from_bytes(buffer[pos + 9 : frame_end], "big") & 0x7FFFFFFF)
                and (stream_id == 0 or stream_id in streams or self._closed_by_us(stream_id))
                and not frame_buffer._headers_buffer
            ):
                # Flow-control credit (nginx returns some after every request body): h2 would build a frame
                # object for it and dispatch it. A zero increment (a protocol error) takes h2's path.
                if slow_from >= 0:
                    events += self.receive_data(bytes(buffer[slow_from:pos]))
                    slow_from = -1
                events += self._fast_window_update(stream_id, increment)
            elif slow_from < 0:
                slow_from = pos
            pos = frame_end
        if slow_from >= 0:
            events += self.receive_data(bytes(buffer[slow_from:pos]))
        del buffer[:pos]
        return events

    def _closed_by_us(self, stream_id: int) -> bool:
        """A stream we opened and have since closed and forgotten (odd, at or below the last one we opened)."""
        return (
            stream_id & 1 == 1
            and stream_id <= self.highest_outbound_stream_id
            and stream_id not in self.streams
        )

    def _fast_window_update(self, stream_id: int, increment: int) -> list[h2.events.Event]:
        """What ``_receive_window_update_frame`` does: credit the connection or an open stream; a closed
        stream's credit is ignored, as h2 ignores it."""
        try:
            self._connection_input(ConnectionInputs.RECV_WINDOW_UPDATE)
            if stream_id == 0:
                self.outbound_flow_control_window = guard_increment_window(
                    self.outbound_flow_control_window, increment
                )
                return [h2.events.WindowUpdated(stream_id=0, delta=increment)]
            stream = self.streams.get(stream_id)
            if stream is None:
                return []
            frames, events = stream.receive_window_update(increment)
            if frames:
                self._prepare_for_sending(frames)
            return events
        except h2.exceptions.StreamClosedError:
            return []
        except h2.exceptions.ProtocolError as exc:
            self._terminate_connection(exc.error_code)
            raise

    def _fast_headers(self, stream: Any, block: bytes, end_stream: bool) -> list[h2.events.Event]:
        """What ``_receive_headers_frame`` + ``H2Stream.receive_headers`` do for a response (no validation)."""
        try:
            self._connection_input(ConnectionInputs.RECV_HEADERS)
            headers = self.response_decoder.decode(block)
            if self.decoder.header_table_size:
                # h2's own decoder still gets the odd HEADERS (a late answer on a stream we reset, a
                # CONTINUATION): it must know the peer's table is empty, which the size update in the first
                # block we decoded here told us and not it.
                self.decoder.header_table_size = 0
            status = headers[0][1] if headers and headers[0][0] == b":status" else b""
            informational = status[:1] == b"1"
            if informational and end_stream:
                raise h2.exceptions.ProtocolError("Cannot set END_STREAM on informational responses")
            events = stream.state_machine.process_input(
                StreamInputs.RECV_INFORMATIONAL_HEADERS if informational else StreamInputs.RECV_HEADERS
            )
            first = events[0]
            if end_stream:
                ended = stream.state_machine.process_input(StreamInputs.RECV_END_STREAM)
                first.stream_ended = ended[0]
                events += ended
                if stream.closed:
                    # Forget it now, so a RST_STREAM right behind it in this read (nginx sends one) takes
                    # the closed-stream path instead of h2's.
                    self.forget_stream(stream.stream_id)
            elif type(first) is h2.events.TrailersReceived:
                raise h2.exceptions.ProtocolError("Trailers must have END_STREAM set")
            stream._initialize_content_length(headers)
            first.headers = headers
            return events  # type: ignore[no-any-return]
        except h2.exceptions.ProtocolError as exc:
            self._terminate_connection(exc.error_code)
            raise

    def _fast_data(self, stream: Any, data: bytes, end_stream: bool) -> list[h2.events.Event]:
        """What ``_receive_data_frame`` does for an unpadded DATA frame on an open stream (an error body, or
        the empty END_STREAM frame some servers send after a body-less response)."""
        try:
            self._connection_input(ConnectionInputs.RECV_DATA)
            self._inbound_flow_control_window_manager.window_consumed(len(data))
            _, events = stream.receive_data(data, end_stream, len(data))
            if end_stream and stream.closed:
                self.forget_stream(stream.stream_id)
            return events  # type: ignore[no-any-return]
        except h2.exceptions.ProtocolError as exc:
            self._terminate_connection(exc.error_code)
            raise

    def _receive_goaway_frame(self, frame: Any) -> tuple[list[Any], list[h2.events.Event]]:
        # Stock h2 closes its state machine on GOAWAY, so the answers the server still owes for streams
        # at or below last_stream_id (RFC 9113 §6.8) would then be treated as protocol errors and lost.
        # We keep the connection state open; ApnsConnection opens no new stream after a GOAWAY.
        event = h2.events.ConnectionTerminated()
        event.error_code = _error_code_from_int(frame.error_code)
        event.last_stream_id = frame.last_stream_id
        event.additional_data = frame.additional_data or None
        return [], [event]

    def send_request(
        self, stream_id: int, block: bytes, *, end_stream: bool = False, method: bytes = b"POST"
    ) -> None:
        """Open ``stream_id`` with the HPACK ``block`` as its request headers. END_STREAM comes with the body,
        or with the headers when ``end_stream`` (a request without a body: GET, DELETE)."""
        if self.open_requests + 1 > self.stream_limit:
            raise h2.exceptions.TooManyStreamsError("APNs stream limit reached")  # guarded by ApnsConnection
        self._connection_input(ConnectionInputs.SEND_HEADERS)
        stream = self._begin_new_stream(stream_id, AllowedStreamIDs.ODD)
        stream.state_machine.process_input(StreamInputs.SEND_HEADERS)
        stream.request_method = method
        if end_stream:
            stream.state_machine.process_input(StreamInputs.SEND_END_STREAM)
        self.open_requests += 1
        out = self._data_to_send
        frame_max = self.max_outbound_frame_size
        end_flag = END_STREAM if end_stream else 0
        if len(block) <= frame_max:
            out += frame_header(len(block), HEADERS, END_HEADERS | end_flag, stream_id)
            out += block
            return
        chunks = [block[i : i + frame_max] for i in range(0, len(block), frame_max)]
        for i, chunk in enumerate(chunks):
            frame_type = HEADERS if i == 0 else CONTINUATION
            flags = END_HEADERS if i == len(chunks) - 1 else 0
            if i == 0:
                flags |= end_flag
            out += frame_header(len(chunk), frame_type, flags, stream_id)
            out += chunk

    def send_body(self, stream_id: int, body: bytes, offset: int) -> int:
        """Send as much of ``body[offset:]`` as the windows allow, END_STREAM on the last byte; new offset."""
        stream = self.streams[stream_id]
        allowed = min(
            self.outbound_flow_control_window, stream.outbound_flow_control_window, len(body) - offset
        )
        frame_max = self.max_outbound_frame_size
        out = self._data_to_send
        while allowed > 0:
            size = min(allowed, frame_max)
            end = offset + size == len(body)
            self._connection_input(ConnectionInputs.SEND_DATA)
            stream.state_machine.process_input(StreamInputs.SEND_DATA)
            if end:
                stream.state_machine.process_input(StreamInputs.SEND_END_STREAM)
            out += frame_header(size, DATA, END_STREAM if end else 0, stream_id)
            out += body[offset : offset + size]
            offset += size
            allowed -= size
            stream.outbound_flow_control_window -= size
            self.outbound_flow_control_window -= size
        return offset


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
