"""A lean HTTP/2 server engine for benchmarks: the slice of h2's server API the connection uses, about half
the CPU per request, with the same events and faults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import hpack
import hpack.hpack

from daemon.apns.server.http2 import MAX_HEADER_LIST_SIZE, ResponseEncoder
from daemon.apns.wire import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PADDED,
    PING,
    PRIORITY_FLAG,
    PUSH_PROMISE,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    frame,
)

# ---- a lean HTTP/2 server engine for benchmarks ------------------------------------------------------

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_MAX_WINDOW = 2**31 - 1
_DEFAULT_WINDOW = 65535
_SETTINGS_SENT = (
    h2.settings.SettingCodes.HEADER_TABLE_SIZE,
    h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS,
    h2.settings.SettingCodes.INITIAL_WINDOW_SIZE,
    h2.settings.SettingCodes.MAX_FRAME_SIZE,
    h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE,
)


@dataclass(slots=True)
class _LeanStream:
    send_window: int
    recv_window: int
    recv_unacked: int = 0
    remote_open: bool = True
    local_open: bool = True


class LeanH2Connection:
    """The slice of ``h2.connection.H2Connection``'s server API that ``ServerConnection`` uses, done lean.

    h2 spends more time per request in its frame objects, stream state machines and window managers than
    the server spends on everything else (spec §1.7 asks for the profile; see tests/apns/test_server_lean_engine.py). For
    the throughput benchmark (``fast``), this engine parses frames with plain byte arithmetic, keeps one
    small record per stream and emits the same ``h2.events`` objects, so every fault works on both engines
    and the same tests run against both. HPACK stays ``hpack``'s. Protocol errors raise h2's exceptions
    after queueing a GOAWAY with the matching code, as h2 does.
    """

    def __init__(self) -> None:
        self.local_settings = h2.settings.Settings(client=False)
        self.encoder: Any = ResponseEncoder()
        self.decoder = hpack.Decoder()
        self.decoder.max_header_list_size = MAX_HEADER_LIST_SIZE
        self.streams: dict[int, _LeanStream] = {}
        self._closed_streams: dict[int, bool] = {}  # recently closed: True if we reset it (RST is allowed)
        self._out = bytearray()
        self._in = bytearray()
        self._preface_seen = False
        self._highest_inbound = 0
        self._send_conn_window = _DEFAULT_WINDOW
        self._recv_conn_window = _DEFAULT_WINDOW
        self._recv_conn_target = _DEFAULT_WINDOW
        self._recv_conn_unacked = 0
        self._remote_initial_window = _DEFAULT_WINDOW
        self._remote_max_frame = 16384
        self._local_acked_once = False
        self._headers_sid = 0  # stream whose header block continues in CONTINUATION frames
        self._headers_flags = 0
        self._headers_block = bytearray()
        self._closed = False

    # ---- the h2 API the server uses ------------------------------------------------------------------

    @property
    def max_outbound_frame_size(self) -> int:
        return self._remote_max_frame

    def initiate_connection(self) -> None:
        payload = b"".join(
            int(code).to_bytes(2, "big") + self.local_settings[code].to_bytes(4, "big")
            for code in _SETTINGS_SENT
            if self.local_settings.get(code) is not None
        )
        self._out += frame(SETTINGS, 0, 0, payload)

    def update_settings(self, changes: Mapping[int, int]) -> None:
        for code, value in changes.items():
            self.local_settings[code] = value  # pending until the client acknowledges (h2's Settings)
        payload = b"".join(int(c).to_bytes(2, "big") + v.to_bytes(4, "big") for c, v in changes.items())
        self._out += frame(SETTINGS, 0, 0, payload)

    def increment_flow_control_window(self, increment: int, stream_id: int | None = None) -> None:
        assert stream_id is None, "the server only widens the connection window"
        self._recv_conn_window += increment
        self._recv_conn_target += increment
        self._out += frame(WINDOW_UPDATE, 0, 0, increment.to_bytes(4, "big"))

    def local_flow_control_window(self, stream_id: int) -> int:
        stream = self.streams.get(stream_id)
        if stream is None or not stream.local_open:
            raise h2.exceptions.StreamClosedError(stream_id)
        return min(self._send_conn_window, stream.send_window)

    def acknowledge_received_data(self, size: int, stream_id: int) -> None:
        self._recv_conn_unacked += size
        # As h2's WindowManager: hand the window back once half of it was consumed.
        if self._recv_conn_unacked >= self._recv_conn_target // 2:
            self._out += frame(WINDOW_UPDATE, 0, 0, self._recv_conn_unacked.to_bytes(4, "big"))
            self._recv_conn_window += self._recv_conn_unacked
            self._recv_conn_unacked = 0
        stream = self.streams.get(stream_id)
        if stream is None or not stream.remote_open:
            return  # no point widening a window nobody will send on again
        stream.recv_unacked += size
        target = self.local_settings.initial_window_size
        if stream.recv_unacked >= max(1, target // 2) or stream.recv_window <= 0:
            self._out += frame(WINDOW_UPDATE, 0, stream_id, stream.recv_unacked.to_bytes(4, "big"))
            stream.recv_window += stream.recv_unacked
            stream.recv_unacked = 0

    def send_headers(
        self, stream_id: int, headers: list[tuple[bytes, bytes]], end_stream: bool = False
    ) -> None:
        stream = self._sendable(stream_id)
        block = self.encoder.encode(headers)
        limit = self._remote_max_frame
        flags = END_STREAM if end_stream else 0
        if len(block) <= limit:
            self._out += frame(HEADERS, flags | END_HEADERS, stream_id, block)
        else:
            chunks = [block[i : i + limit] for i in range(0, len(block), limit)]
            self._out += frame(HEADERS, flags, stream_id, chunks[0])
            for i, chunk in enumerate(chunks[1:], 1):
                self._out += frame(CONTINUATION, END_HEADERS if i == len(chunks) - 1 else 0, stream_id, chunk)
        if end_stream:
            self._end_local(stream_id, stream)

    def send_data(self, stream_id: int, data: bytes, end_stream: bool = False) -> None:
        stream = self._sendable(stream_id)
        if len(data) > min(self._send_conn_window, stream.send_window):
            raise h2.exceptions.FlowControlError("cannot send beyond the flow-control window")
        if len(data) > self._remote_max_frame:
            raise h2.exceptions.FrameTooLargeError("DATA frame larger than the peer's MAX_FRAME_SIZE")
        self._send_conn_window -= len(data)
        stream.send_window -= len(data)
        self._out += frame(DATA, END_STREAM if end_stream else 0, stream_id, data)
        if end_stream:
            self._end_local(stream_id, stream)

    def reset_stream(self, stream_id: int, error_code: int = 0) -> None:
        self._out += frame(RST_STREAM, 0, stream_id, int(error_code).to_bytes(4, "big"))
        if self.streams.pop(stream_id, None) is not None:
            self._forget(stream_id, reset=True)

    def data_to_send(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        return out

    def receive_data(self, data: bytes) -> list[h2.events.Event]:
        if self._closed:
            return []
        buf = self._in
        buf += data
        events: list[h2.events.Event] = []
        pos = 0
        try:
            if not self._preface_seen:
                if len(buf) < len(_PREFACE):
                    if not _PREFACE.startswith(bytes(buf)):
                        raise h2.exceptions.ProtocolError("invalid HTTP/2 connection preface")
                    return events
                if buf[: len(_PREFACE)] != _PREFACE:
                    raise h2.exceptions.ProtocolError("invalid HTTP/2 connection preface")
                self._preface_seen = True
                pos = len(_PREFACE)
            end = len(buf)
            max_frame = self.local_settings.max_frame_size
            while end - pos >= 9:
                length = (buf[pos] << 16) | (buf[pos + 1] << 8) | buf[pos + 2]
                if length > max_frame:
                    raise h2.exceptions.FrameTooLargeError(f"frame of {length} bytes exceeds {max_frame}")
                if end - pos - 9 < length:
                    break
                ftype, flags = buf[pos + 3], buf[pos + 4]
                sid = int.from_bytes(buf[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
                payload = bytes(buf[pos + 9 : pos + 9 + length])
                pos += 9 + length
                self._receive_frame(ftype, flags, sid, payload, events)
        except h2.exceptions.ProtocolError as exc:
            self._goaway(exc.error_code)
            raise
        except hpack.OversizedHeaderListError as exc:
            # As h2: a header list over MAX_HEADER_LIST_SIZE is treated as abuse (ENHANCE_YOUR_CALM).
            self._goaway(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
            raise h2.exceptions.DenialOfServiceError(f"HPACK: {exc}") from exc
        except hpack.HPACKError as exc:
            self._goaway(h2.errors.ErrorCodes.COMPRESSION_ERROR)
            raise h2.exceptions.ProtocolError(f"HPACK: {exc}") from exc
        finally:
            if pos:
                del buf[:pos]
        return events

    # ---- internals --------------------------------------------------------------------------------------

    def _goaway(self, error_code: int) -> None:
        self._closed = True
        payload = self._highest_inbound.to_bytes(4, "big") + int(error_code).to_bytes(4, "big")
        self._out += frame(GOAWAY, 0, 0, payload)

    def _sendable(self, stream_id: int) -> _LeanStream:
        stream = self.streams.get(stream_id)
        if stream is None or not stream.local_open:
            raise h2.exceptions.StreamClosedError(stream_id)
        return stream

    def _end_local(self, stream_id: int, stream: _LeanStream) -> None:
        stream.local_open = False
        if not stream.remote_open:
            del self.streams[stream_id]
            self._forget(stream_id, reset=False)

    def _forget(self, stream_id: int, *, reset: bool) -> None:
        closed = self._closed_streams
        closed[stream_id] = reset
        if len(closed) > 4096:  # as h2's bounded closed-stream memory: drop the oldest
            for old in list(closed)[:1024]:
                del closed[old]

    def _receive_frame(
        self, ftype: int, flags: int, sid: int, payload: bytes, events: list[h2.events.Event]
    ) -> None:
        if self._headers_sid and ftype != CONTINUATION:
            raise h2.exceptions.ProtocolError("header block interrupted before END_HEADERS")
        if ftype == HEADERS:
            self._receive_headers(flags, sid, payload, events)
        elif ftype == DATA:
            self._receive_body(flags, sid, payload, events)
        elif ftype == CONTINUATION:
            if sid != self._headers_sid or not sid:
                raise h2.exceptions.ProtocolError("CONTINUATION without an open header block")
            self._headers_block += payload
            if flags & END_HEADERS:
                self._headers_sid = 0
                self._finish_headers(sid, self._headers_flags, bytes(self._headers_block), events)
        elif ftype == SETTINGS:
            self._receive_settings(flags, sid, payload, events)
        elif ftype == WINDOW_UPDATE:
            self._receive_window_update(sid, payload, events)
        elif ftype == PING:
            if sid or len(payload) != 8:
                raise h2.exceptions.ProtocolError("malformed PING")
            if not flags & ACK:
                self._out += frame(PING, ACK, 0, payload)
        elif ftype == RST_STREAM:
            if not sid or len(payload) != 4:
                raise h2.exceptions.ProtocolError("malformed RST_STREAM")
            if self.streams.pop(sid, None) is not None:
                self._forget(sid, reset=True)
                code = int.from_bytes(payload, "big")
                events.append(h2.events.StreamReset(stream_id=sid, error_code=code, remote_reset=True))
        elif ftype == GOAWAY:
            event = h2.events.ConnectionTerminated()
            event.last_stream_id = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            event.error_code = int.from_bytes(payload[4:8], "big")
            event.additional_data = payload[8:]
            events.append(event)
        elif ftype == PUSH_PROMISE:
            raise h2.exceptions.ProtocolError("clients must not send PUSH_PROMISE")
        # PRIORITY and unknown frame types are ignored (RFC 9113 §5.5; APNs ignores PRIORITY).

    def _receive_headers(self, flags: int, sid: int, payload: bytes, events: list[h2.events.Event]) -> None:
        if not sid or not sid % 2:
            raise h2.exceptions.ProtocolError(f"HEADERS on invalid stream {sid}")
        if flags & PADDED:
            pad = payload[0]
            payload = payload[1 : len(payload) - pad] if pad else payload[1:]
        if flags & PRIORITY_FLAG:
            payload = payload[5:]
        if flags & END_HEADERS:
            self._finish_headers(sid, flags, payload, events)
        else:
            self._headers_sid, self._headers_flags = sid, flags
            self._headers_block = bytearray(payload)

    def _finish_headers(self, sid: int, flags: int, block: bytes, events: list[h2.events.Event]) -> None:
        headers: list[Any] = list(
            self.decoder.decode(block, raw=True)
        )  # decoded always: HPACK state advances
        stream = self.streams.get(sid)
        if stream is None:
            if sid <= self._highest_inbound:
                raise (
                    h2.exceptions.StreamClosedError(sid)
                    if sid in self._closed_streams
                    else h2.exceptions.ProtocolError(f"stream {sid} is not above {self._highest_inbound}")
                )
            self._highest_inbound = sid
            initial = self.local_settings.initial_window_size
            if not self._local_acked_once:
                initial = max(initial, _DEFAULT_WINDOW)  # the client may not have our SETTINGS yet
            stream = _LeanStream(send_window=self._remote_initial_window, recv_window=initial)
            self.streams[sid] = stream
            events.append(h2.events.RequestReceived(stream_id=sid, headers=headers))
        elif not stream.remote_open:
            raise h2.exceptions.StreamClosedError(sid)
        elif not flags & END_STREAM:
            raise h2.exceptions.ProtocolError("trailers without END_STREAM")
        if flags & END_STREAM:
            stream.remote_open = False
            events.append(h2.events.StreamEnded(stream_id=sid))
            if not stream.local_open:
                del self.streams[sid]
                self._forget(sid, reset=False)

    def _receive_body(self, flags: int, sid: int, payload: bytes, events: list[h2.events.Event]) -> None:
        flow_length = len(payload)
        if flow_length > self._recv_conn_window:
            raise h2.exceptions.FlowControlError("DATA beyond the connection window")
        self._recv_conn_window -= flow_length
        stream = self.streams.get(sid)
        if stream is None or not stream.remote_open:
            if sid in self._closed_streams or (stream is not None and not stream.remote_open):
                # A stream we already closed: tell the client, and give the connection window back.
                self._out += frame(
                    RST_STREAM, 0, sid, int(h2.errors.ErrorCodes.STREAM_CLOSED).to_bytes(4, "big")
                )
                self.acknowledge_received_data(flow_length, sid)
                return
            raise h2.exceptions.ProtocolError(f"DATA on idle stream {sid}")
        if flow_length > stream.recv_window:
            raise h2.exceptions.FlowControlError(f"DATA beyond stream {sid}'s window")
        stream.recv_window -= flow_length
        if flags & PADDED:
            pad = payload[0]
            payload = payload[1 : len(payload) - pad] if pad else payload[1:]
        events.append(h2.events.DataReceived(stream_id=sid, data=payload, flow_controlled_length=flow_length))
        if flags & END_STREAM:
            stream.remote_open = False
            events.append(h2.events.StreamEnded(stream_id=sid))
            if not stream.local_open:
                del self.streams[sid]
                self._forget(sid, reset=False)

    def _receive_settings(self, flags: int, sid: int, payload: bytes, events: list[h2.events.Event]) -> None:
        if sid:
            raise h2.exceptions.ProtocolError("SETTINGS on a stream")
        if flags & ACK:
            self.local_settings.acknowledge()
            self._local_acked_once = True
            events.append(h2.events.SettingsAcknowledged())
            return
        if len(payload) % 6:
            raise h2.exceptions.FrameDataMissingError("SETTINGS length is not a multiple of 6")
        codes = h2.settings.SettingCodes
        for i in range(0, len(payload), 6):
            code = int.from_bytes(payload[i : i + 2], "big")
            value = int.from_bytes(payload[i + 2 : i + 6], "big")
            if code == codes.INITIAL_WINDOW_SIZE:
                if value > _MAX_WINDOW:
                    raise h2.exceptions.FlowControlError("INITIAL_WINDOW_SIZE too large")
                delta = value - self._remote_initial_window
                self._remote_initial_window = value
                for stream in self.streams.values():
                    stream.send_window += delta
            elif code == codes.MAX_FRAME_SIZE:
                if not 16384 <= value <= 2**24 - 1:
                    raise h2.exceptions.ProtocolError("MAX_FRAME_SIZE out of range")
                self._remote_max_frame = value
            elif code == codes.HEADER_TABLE_SIZE:
                self.encoder.header_table_size = value
        self._out += frame(SETTINGS, ACK, 0)
        events.append(h2.events.RemoteSettingsChanged())

    def _receive_window_update(self, sid: int, payload: bytes, events: list[h2.events.Event]) -> None:
        if len(payload) != 4:
            raise h2.exceptions.FrameDataMissingError("WINDOW_UPDATE payload is not 4 bytes")
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if not sid:
            if not increment:
                raise h2.exceptions.ProtocolError("WINDOW_UPDATE of 0 on the connection")
            self._send_conn_window += increment
            if self._send_conn_window > _MAX_WINDOW:
                raise h2.exceptions.FlowControlError("connection window overflow")
        else:
            stream = self.streams.get(sid)
            if stream is None:
                return  # for a closed stream: allowed, ignored
            if not increment:
                self.reset_stream(sid, h2.errors.ErrorCodes.PROTOCOL_ERROR)
                return
            stream.send_window += increment
            if stream.send_window > _MAX_WINDOW:
                self.reset_stream(sid, h2.errors.ErrorCodes.FLOW_CONTROL_ERROR)
                return
        events.append(h2.events.WindowUpdated(stream_id=sid, delta=increment))
