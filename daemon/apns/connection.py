"""One HTTP/2 connection to APNs, sans I/O: bytes in, bytes out, and which stream carries which push.

Owns: the HTTP/2 request streams of one connection (h2 keeps the connection itself) and its APNs bookkeeping (apns.md §1.7): no request before the server's
SETTINGS; the live MAX_CONCURRENT_STREAMS (it starts at 1 with token auth and can drop back to 1); the
flow-control windows (bodies wait for WINDOW_UPDATE rather than raising); a deadline per request; GOAWAY
(streams above ``last_stream_id`` come back for re-sending, those below may still be answered); REFUSED_STREAM;
PING. It also owns the HPACK encoding of APNs requests. Must not touch: sockets, trio, the clock (``now`` is
passed in), retry policy (``daemon.apns.rules``) and the token cache (``daemon.apns.token``).

Speed: stock h2 costs ~100 µs of CPU per APNs request and answer (measured in memory against h2's server
side, 1000 streams in flight). What this module cuts, without changing what goes on the wire beyond HPACK
choices the RFC leaves to us:

- Streams: h2 keeps the connection (its state machine, SETTINGS, PING, GOAWAY, the connection's flow-control
  windows, every frame not on a stream we opened); the request streams are ours (``_Stream``): no h2 stream
  object, state machine or event per request. A stream is opened by its HEADERS and closed once both ends
  ended it or either reset it (RFC 9113 §5.1); its send window starts at the server's
  SETTINGS_INITIAL_WINDOW_SIZE, follows its changes and the server's WINDOW_UPDATEs (§6.9); what arrives on it
  is checked as h2 would check it: an answer's headers (informational ones skipped, trailers must end the
  stream), DATA only after them and within our window and the content-length, frames on closed streams
  (ignored after our RST_STREAM, RST_STREAM STREAM_CLOSED after the server's, a connection error after both
  ends ended it). A stream error is treated as a connection error (§5.4.1 allows it): GOAWAY, and every
  request still unanswered comes back for another connection.
- Request HPACK: the constant fields (method, scheme, authority, authorization, topic, push type,
  priority) are entered once in the server's dynamic table, as Apple asks (apns.md §1.2), and afterwards
  sent as cached one- or two-byte index references; only ``:path`` and optional per-push fields are literals.
  While the table does not change, a push's whole block is those cached references around its literals
  (``header_block``; ``encode_block`` makes the same bytes field by field).
- Request framing: no per-request header validation/normalisation or frame objects; a request is one
  HEADERS frame and its DATA frames written straight into h2's output buffer. Our headers are built from
  checked values (``rules.check_push``), so h2's outbound validation has nothing left to find.
- Answers: frames on our streams are split from the bytes and handled here (``internals.ApnsClientH2Connection
  .receive_frames``); every other frame goes through h2 unchanged, in wire order. We advertise a zero-size
  HPACK table for responses, so their fields can be skipped undecoded (``ResponseHeaderDecoder``): hpack spent
  ~30 µs Huffman-decoding the two UUIDs of each APNs answer just to size a table we never use.
Result: ~5 µs to send and ~4 µs to settle a push (in memory), and GOAWAY handled gracefully (stock h2 closes
its state on GOAWAY and would refuse the answers still owed below ``last_stream_id``).

The h2 4.x internals this needs (``_data_to_send``, the connection's state machine and inbound window manager)
are reached only from ``daemon.apns.internals``, behind its version check; HPACK integers, strings and frame
headers come from ``daemon.apns.wire``, shared with the test server. The tests drive this against h2's own
client and server, hyperframe's parser and hpack's own coder to catch drift (tests/apns/test_connection.py,
test_streams.py).
"""

from __future__ import annotations

import json
import math
from collections import deque
from dataclasses import dataclass
from typing import Any, Final

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hpack.exceptions
import hpack.table
from h2.errors import ErrorCodes
from h2.utilities import guard_increment_window
from hpack.huffman_table import decode_huffman

from daemon.apns.internals import ApnsClientH2Connection, StreamFrame
from daemon.apns.token import ProviderToken
from daemon.apns.types import Push, slot_init
from daemon.apns.wire import (
    DATA,
    END_STREAM,
    HEADERS,
    RST_STREAM,
    WINDOW_UPDATE,
    hpack_int,
    hpack_str,
    read_hpack_int,
)

# --- HPACK (RFC 7541) for APNs requests ----------------------------------------------------------------

_STATIC_FULL: Final = {(b":method", b"POST"): 3, (b":scheme", b"https"): 7}
_STATIC_NAME: Final = {b":authority": 1, b":method": 2, b":path": 4, b":scheme": 6, b"authorization": 23}
_DEFAULT_TABLE_SIZE: Final = 4096  # RFC 7541 §4.2 / RFC 9113 §6.5.2 default; APNs advertises the same
_ENTRY_OVERHEAD: Final = 32  # RFC 7541 §4.1


def _literal_not_indexed(name: bytes, value: bytes) -> bytes:
    """RFC 7541 §6.2.2, for per-request values that must not churn the shared table."""
    index = _STATIC_NAME.get(name)
    if index is not None:
        return hpack_int(index, 4, 0x00) + hpack_str(value)
    return b"\x00" + hpack_str(name) + hpack_str(value)


class RequestHeaderEncoder:
    """HPACK encoder for APNs requests: constant fields live in the dynamic table, the rest are literals.

    It mirrors the peer decoder's dynamic table exactly (insertions, evictions, size updates), so index
    references stay right whatever the table size the server advertises. h2 sets ``header_table_size`` when
    the server's SETTINGS_HEADER_TABLE_SIZE changes, as it does for hpack's encoder.
    """

    def __init__(self) -> None:
        self._entries: deque[tuple[tuple[bytes, bytes], int, int]] = (
            deque()
        )  # oldest first: (field, size, seq)
        self._where: dict[tuple[bytes, bytes], int] = {}  # field -> insertion sequence number
        self._inserted = 0
        self._size = 0
        self._max = _DEFAULT_TABLE_SIZE
        self._pending_sizes: list[int] = []
        # bumped by every change of the table, and by every size update owed to the decoder: an encoding made
        # from the table holds for one generation, and while it holds no size update is owed
        self.generation = 0
        self._cache: dict[tuple[tuple[bytes, bytes], ...], tuple[int, bytes]] = {}

    @property
    def header_table_size(self) -> int:
        return self._max

    @header_table_size.setter
    def header_table_size(self, value: int) -> None:
        # We never grow past the default (a bigger table buys nothing for ~8 constant fields); we must
        # shrink when the decoder asks, and say so at the start of the next header block (RFC 7541 §4.2).
        new_max = min(value, _DEFAULT_TABLE_SIZE)
        if new_max == self._max:
            return
        self._max = new_max
        self._pending_sizes.append(new_max)
        self._evict(0)
        self.generation += 1

    def _evict(self, room: int) -> None:
        while self._entries and self._size + room > self._max:
            field, size, seq = self._entries.popleft()
            self._size -= size
            if self._where.get(field) == seq:
                del self._where[field]

    def _index_of(self, field: tuple[bytes, bytes]) -> int | None:
        static = _STATIC_FULL.get(field)
        if static is not None:
            return static
        seq = self._where.get(field)
        if seq is None:
            return None
        return 62 + (self._inserted - 1 - seq)  # RFC 7541 §2.3.3: newest dynamic entry is index 62

    def _encode_field(self, field: tuple[bytes, bytes], out: bytearray) -> None:
        index = self._index_of(field)
        if index is not None:
            out += hpack_int(index, 7, 0x80)
            return
        name, value = field
        size = len(name) + len(value) + _ENTRY_OVERHEAD
        if size > self._max:
            out += _literal_not_indexed(name, value)  # cannot fit: adding it would only empty the table
            return
        name_index = _STATIC_NAME.get(name)
        if name_index is not None:
            out += hpack_int(name_index, 6, 0x40)
        else:
            out += b"\x40" + hpack_str(name)
        out += hpack_str(value)
        self._evict(size)
        self._entries.append((field, size, self._inserted))
        self._where[field] = self._inserted
        self._inserted += 1
        self._size += size
        self.generation += 1

    @property
    def owes_size_update(self) -> bool:
        """A size update is owed to the decoder: the next block must start with it (``start_block``)."""
        return bool(self._pending_sizes)

    def steady(self, fields: tuple[tuple[bytes, bytes], ...]) -> bytes | None:
        """``fields`` as index references into the table as it is now (what ``encode_constant`` appends for
        them from their second use on), or None when one of them is not in it (too big for the table)."""
        steady = bytearray()
        for field in fields:
            index = self._index_of(field)
            if index is None:
                return None
            steady += hpack_int(index, 7, 0x80)
        return bytes(steady)

    def encode_constant(self, fields: tuple[tuple[bytes, bytes], ...], out: bytearray) -> None:
        """Append ``fields``, indexed in the table (inserting them the first time)."""
        cached = self._cache.get(fields)
        if cached is not None and cached[0] == self.generation:
            out += cached[1]
            return
        for field in fields:
            self._encode_field(field, out)
        steady = self.steady(fields)
        if steady is None:
            return  # some field cannot live in the table: no steady-state encoding to cache
        if len(self._cache) > 64:
            self._cache.clear()  # old tokens' entries; bounded
        self._cache[fields] = (self.generation, steady)

    def start_block(self, out: bytearray) -> None:
        """Dynamic table size updates owed to the decoder go first in a header block (RFC 7541 §4.2)."""
        if self._pending_sizes:
            smallest = min(self._pending_sizes)
            out += hpack_int(smallest, 5, 0x20)
            if self._max != smallest:
                out += hpack_int(self._max, 5, 0x20)
            self._pending_sizes.clear()

    def encode(self, headers: Any, huffman: bool = True) -> bytes:
        # h2 only calls this for requests we do not send (we build every request block ourselves).
        raise NotImplementedError("ApnsConnection builds request header blocks itself")


_PATH_HEADS: dict[int, bytes] = {}
_SHARED_LITERALS: dict[tuple[bytes, str], bytes] = {}
_SHARED_LITERALS_KEPT: Final = 1024


def _shared_literal(name: bytes, value: str) -> bytes:
    """``_literal_not_indexed`` of a value a whole fan-out shares (an alert's collapse id, an expiry), encoded
    once per value (the most recent ones, bounded)."""
    key = (name, value)
    literal = _SHARED_LITERALS.get(key)
    if literal is None:
        if len(_SHARED_LITERALS) >= _SHARED_LITERALS_KEPT:
            _SHARED_LITERALS.clear()
        literal = _SHARED_LITERALS[key] = _literal_not_indexed(name, value.encode())
    return literal


def _path_head(token_length: int) -> bytes:
    """A device push's literal ``:path`` (RFC 7541 §6.2.2, raw) up to its token: /3/device/ (apns.md §1.2)."""
    head = _PATH_HEADS.get(token_length)
    if head is None:
        head = _PATH_HEADS[token_length] = b"\x04" + hpack_int(10 + token_length, 7, 0) + b"/3/device/"
    return head


def _broadcast_path(bundle: str) -> bytes:
    """A broadcast's literal ``:path``: /4/broadcasts/apps/{bundle} (apns.md §2.1)."""
    path = b"/4/broadcasts/apps/" + bundle.encode("ascii")
    return b"\x04" + hpack_int(len(path), 7, 0) + path


_STATIC_TABLE: Final = hpack.table.HeaderTable.STATIC_TABLE  # RFC 7541 Appendix A, 1-based
# The response fields we read: the status, the echoed apns-id, and content-length (h2 checks bodies against it).
_WANTED_RESPONSE_FIELDS: Final = frozenset({b":status", b"apns-id", b"content-length", b"apns-channel-id"})
# An accepted push's apns-id is not worth its Huffman decoding (the sender reports the one it sent, if any);
# a rejected push's is decoded for the logs.
_WANTED_AFTER_200: Final = frozenset({b"content-length", b"apns-channel-id"})
_STATUS_200: Final = (b":status", b"200")


_HUFFMAN_NAMES: dict[bytes, bytes] = {}
_HUFFMAN_NAMES_KEPT: Final = 256


def _huffman_name(raw: bytes) -> bytes:
    """A Huffman-coded literal field name, decoded once: a server names the same few fields in every answer
    (APNs's ``apns-id``), and hpack's decoder is pure Python (the most recent names, bounded)."""
    name = _HUFFMAN_NAMES.get(raw)
    if name is None:
        if len(_HUFFMAN_NAMES) >= _HUFFMAN_NAMES_KEPT:
            _HUFFMAN_NAMES.clear()
        name = _HUFFMAN_NAMES[raw] = decode_huffman(raw)
    return name


class ResponseHeaderDecoder:
    """HPACK decoder for APNs responses, for a connection that advertised SETTINGS_HEADER_TABLE_SIZE 0.

    With a zero-sized table the server can store nothing, so a header block carries no state across
    blocks, and fields we do not read can be skipped without decoding (hpack must Huffman-decode every
    value to size its table: ~30 µs for the two UUIDs of an APNs answer). Only ``:status``, ``apns-id``
    (except after a 200) and ``content-length`` are decoded; other fields are dropped. A reference to a dynamic-table entry, or a
    size update above 0, is a compression error (RFC 7541 §4.2, §2.3.3), as it would be for hpack.
    """

    def decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        # Integers below their prefix's limit (every index and length an answer has) are read inline; larger
        # ones through ``read_hpack_int``.
        fields: list[tuple[bytes, bytes]] = []
        wanted = _WANTED_RESPONSE_FIELDS
        static = _STATIC_TABLE
        entries = len(static)
        pos = 0
        size = len(block)
        try:
            while pos < size:
                first = block[pos]
                if first & 0x80:  # indexed field
                    index = first & 0x7F
                    pos += 1
                    if index == 0x7F:
                        index, pos = read_hpack_int(block, pos - 1, 7)
                    if not 0 < index <= entries:
                        raise h2.exceptions.ProtocolError(f"HPACK: index {index} outside a zero-size table")
                    field = static[index - 1]
                    if field[0] in wanted:
                        fields.append(field)
                        if field == _STATUS_200:
                            wanted = _WANTED_AFTER_200
                    continue
                if first & 0xE0 == 0x20:  # dynamic table size update
                    new_size, pos = read_hpack_int(block, pos, 5)
                    if new_size:
                        raise h2.exceptions.ProtocolError(f"HPACK: table size update to {new_size} above 0")
                    continue
                # A literal, with or without indexing (indexing into a zero-size table stores nothing).
                limit = 0x3F if first & 0x40 else 0x0F
                index = first & limit
                pos += 1
                if index == limit:
                    index, pos = read_hpack_int(block, pos - 1, 6 if limit == 0x3F else 4)
                if index:
                    if index > entries:
                        raise h2.exceptions.ProtocolError(
                            f"HPACK: name index {index} outside a zero-size table"
                        )
                    name = static[index - 1][0]
                else:
                    octet = block[pos]
                    length = octet & 0x7F
                    pos += 1
                    if length == 0x7F:
                        length, pos = read_hpack_int(block, pos - 1, 7)
                    raw = block[pos : pos + length]
                    pos += length
                    name = _huffman_name(raw) if octet & 0x80 else bytes(raw)
                octet = block[pos]
                length = octet & 0x7F
                pos += 1
                if length == 0x7F:
                    length, pos = read_hpack_int(block, pos - 1, 7)
                if pos + length > size:
                    raise h2.exceptions.ProtocolError("HPACK: truncated string")
                if name in wanted:
                    raw = block[pos : pos + length]
                    value = decode_huffman(raw) if octet & 0x80 else bytes(raw)
                    fields.append((name, value))
                    if name == b":status" and value == b"200":
                        wanted = _WANTED_AFTER_200
                pos += length
        except IndexError as exc:
            raise h2.exceptions.ProtocolError("HPACK: truncated header block") from exc
        except hpack.exceptions.HPACKDecodingError as exc:
            raise h2.exceptions.ProtocolError(f"HPACK: {exc}") from exc
        return fields


# --- the APNs bookkeeping ------------------------------------------------------------------------------


@slot_init
@dataclass(frozen=True, slots=True)
class Answered:
    """APNs answered the request on this connection."""

    exchange: Any
    status: int
    reason: str | None
    apns_id: str | None
    timestamp_ms: int | None  # 410's "the token became invalid at" (ms since the epoch)
    channel_id: str | None = None  # channel management: the created channel's id (``apns-channel-id``)
    body: bytes | None = None  # the answer's body (channel management reads it on success too)


@slot_init
@dataclass(frozen=True, slots=True)
class Unanswered:
    """The request got no answer. ``processed`` False means APNs certainly did not act on it (safe to re-send).

    cause: "refused" (RST_STREAM REFUSED_STREAM), "goaway" (above GOAWAY's last_stream_id), "reset" (another
    RST_STREAM code), "timeout" (our deadline; we cancelled the stream), "lost" (the connection went away).
    """

    exchange: Any
    cause: str
    processed: bool


Outcome = Answered | Unanswered


@dataclass(slots=True)
class _Stream:
    """One request stream (RFC 9113 §5.1), opened by its HEADERS: ``sent`` bytes of ``body`` have gone
    (END_STREAM went with the last: our half is closed once ``sent == len(body)``); ``window`` is what the
    server's flow control still lets it send (§6.9); ``status`` is None until the final answer's headers came
    (0 when they carried no :status); ``received`` counts the flow-controlled bytes the server sent on it
    against our initial window; ``done`` marks a stream settled during the current read (it is forgotten at the
    end of the read, so a read that dies of a protocol error hands it back with the others)."""

    exchange: Any
    body: bytes
    sent: int
    deadline: float
    window: int
    status: int | None = None
    apns_id: bytes | None = None
    data: bytearray | None = None
    channel_id: bytes | None = None
    content_length: int | None = None
    received: int = 0
    done: bool = False


@dataclass(frozen=True, slots=True)
class GoAway:
    error_code: int
    last_stream_id: int
    reason: str | None  # APNs puts {"reason": ...} in the debug data


@dataclass(frozen=True, slots=True)
class Liveness:
    """How a connection is judged by what it hears, in seconds (see ``ApnsConnection.check``)."""

    idle_s: float  # nothing outstanding: PING after this long without a byte from the server
    silence_s: float  # requests or a PING outstanding: PING after this long without a byte
    ping_timeout_s: float  # a PING unanswered this long: the connection is dead
    # requests timed out with no answer between them: dead even though PINGs come back. Three: one slow
    # request is APNs's business, a run of them on one connection (and none answered) is the connection's.
    max_timeouts: int = 3


@dataclass(frozen=True, slots=True)
class Judgement:
    """``ApnsConnection.check``'s answer: ``action`` "ok", "ping" (send one now) or "retire" (the connection
    is dead); ``cause`` in a word ("idle", "silent", "ping_unanswered", "requests_unanswered"), ``detail`` for
    the log, and when to look again."""

    action: str
    cause: str
    detail: str
    next_check: float


# Stream ids are 31-bit; well before the end we stop opening streams so the sender replaces the connection.
_LAST_STREAM_ID: Final = 2**31 - 1 - 2 * 100_000
_RECEIVE_WINDOW: Final = 1 << 24  # error bodies of 1000 concurrent streams must never stall on our window
_RESETS_KEPT: Final = 1 << 14  # closed-by-reset streams remembered for the frames still on their way


class ApnsConnection:
    """The state of one APNs connection, without I/O. The driver feeds bytes in and ships ``data_to_send()``.

    States: "connecting" (preface sent, no SETTINGS yet: send nothing), "open", "draining" (GOAWAY or our own
    decision: no new streams, in-flight ones may finish), "closed".
    """

    def __init__(
        self,
        authority: str,
        *,
        request_timeout_s: float = 10.0,
        local_stream_cap: int = 1000,
    ) -> None:
        config = h2.config.H2Configuration(
            client_side=True,
            header_encoding=None,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
            validate_inbound_headers=False,
            normalize_inbound_headers=False,
        )
        self._h2 = ApnsClientH2Connection(config, encoder=RequestHeaderEncoder())
        self._decoder = ResponseHeaderDecoder()
        self._authority = authority.encode("ascii")
        self._pseudo = ((b":method", b"POST"), (b":scheme", b"https"), (b":authority", self._authority))
        self.request_timeout_s = request_timeout_s
        self.local_stream_cap = local_stream_cap
        self.state = "connecting"
        self._streams: dict[int, _Stream] = {}
        self._deadlines: deque[tuple[float, int]] = deque()  # send order == deadline order (one timeout)
        self._blocked: deque[int] = deque()  # streams whose body waits for window
        self._finished: list[int] = []  # streams settled during the current read (see ``_Stream.done``)
        # streams closed by RST_STREAM, ours ("sent") or the server's ("received"), for the frames that may
        # still come on them (RFC 9113 §5.1); the most recent ones, bounded
        self._resets: dict[int, str] = {}
        self._initial_window = 65535  # the server's SETTINGS_INITIAL_WINDOW_SIZE: a new stream's send window
        self._receive_window = 65535  # ours: what the server may send on one stream (we never credit streams)
        self._next_stream_id = 1
        self._token: ProviderToken | None = None
        self._constant_fields: dict[tuple[str, str, int, bool], tuple[tuple[bytes, bytes], ...]] = {}
        # the steady-state header block of each kind of push (see ``header_block``): (the encoder's table
        # generation it holds for, pseudo-header references, constant-field references, a broadcast's :path)
        self._blocks: dict[tuple[str, str, int, bool], tuple[int, bytes, bytes, bytes]] = {}
        self.goaway: GoAway | None = None
        self.settings_received = False
        self._max_concurrent = 0  # min(server's MAX_CONCURRENT_STREAMS, local cap), refreshed on its SETTINGS
        self.peak_in_flight = 0
        self.requests_sent = 0
        self.answers_received = 0
        self.pings_sent = 0
        # Liveness (see ``check``): when a byte last came from the server, when the connection last began to
        # wait for one (a request or PING sent while nothing was outstanding), the PING outstanding, and the
        # requests whose deadline passed since the server last answered one.
        self.last_heard = 0.0
        self._waiting_since = 0.0
        self._ping_sent_at: float | None = None
        self._probe = False  # a deadline passed since the last PING: ask whether anyone is there
        self.unanswered_timeouts = 0
        self._answers_at_timeout = 0

    # -- lifecycle ----------------------------------------------------------------------------------------
    def initiate(self, now: float) -> None:
        h2c = self._h2
        h2c.initiate_connection()
        # A zero-size HPACK table for responses: nothing to keep in step, so ResponseHeaderDecoder can skip
        # the fields we never read. Both SETTINGS frames precede our first request, so every response
        # header block is encoded under this limit.
        h2c.update_settings(
            {h2.settings.SettingCodes.HEADER_TABLE_SIZE: 0, h2.settings.SettingCodes.ENABLE_PUSH: 0}
        )
        h2c.increment_flow_control_window(_RECEIVE_WINDOW - 65535)
        self._initial_window = h2c.remote_settings.initial_window_size
        self._receive_window = h2c.local_settings.initial_window_size
        self.last_heard = now

    def data_to_send(self) -> bytes:
        return self._h2.data_to_send()

    @property
    def h2_streams(self) -> int:
        """Streams h2 itself still tracks on this connection (0 once every answered stream was let go)."""
        return len(self._h2.streams)

    @property
    def in_flight(self) -> int:
        return len(self._streams)

    @property
    def max_concurrent(self) -> int:
        """Streams we may have open now: the server's live limit, capped locally; 0 before its SETTINGS."""
        return self._max_concurrent

    @property
    def send_window(self) -> int:
        return self._h2.outbound_flow_control_window

    @property
    def token(self) -> ProviderToken | None:
        return self._token

    def use_token(self, token: ProviderToken) -> None:
        """Send later requests with ``token`` (the caller applies the 20-minute switching rule)."""
        if self._token is None or token.jwt != self._token.jwt:
            self._token = token
            self._constant_fields.clear()
            self._blocks.clear()

    def can_send(self) -> bool:
        """A new request may start now: open, under the stream limit, and no body stuck waiting for window."""
        return (
            self.state == "open"
            and not self._blocked
            and len(self._streams) < self._max_concurrent
            and self._h2.outbound_flow_control_window > 0
            and self._token is not None
        )

    def start_draining(self) -> None:
        """Open no new streams; the in-flight ones finish (used before replacing a connection)."""
        if self.state in ("connecting", "open"):
            self.state = "draining"
        self._maybe_closed()

    def close(self, error_code: int = 0, reason: str | None = None) -> list[Unanswered]:
        """Say GOAWAY and give back everything unanswered (the caller re-sends it elsewhere)."""
        orphans = self._orphan_all("lost")
        if self.state != "closed":
            data = json.dumps({"reason": reason}).encode() if reason else None
            try:
                self._h2.close_connection(error_code=error_code, additional_data=data)
            except h2.exceptions.ProtocolError:
                pass  # already closed on h2's side: nothing to say
        self.state = "closed"
        return orphans

    def connection_lost(self) -> list[Unanswered]:
        """The transport died: everything unanswered comes back (it may or may not have been processed)."""
        self.state = "closed"
        return self._orphan_all("lost")

    def _orphan_all(self, cause: str) -> list[Unanswered]:
        streams = self._streams
        orphans = [Unanswered(s.exchange, cause, processed=True) for s in streams.values() if not s.done]
        for stream_id in [sid for sid, s in streams.items() if not s.done]:
            del streams[stream_id]  # in place: a read in progress holds this table
        self._h2.open_requests = len(streams)  # those settled in this read, forgotten at its end
        self._blocked.clear()
        self._deadlines.clear()
        return orphans

    def _maybe_closed(self) -> None:
        if self.state == "draining" and not self._streams:
            self.state = "closed"

    # -- requests -----------------------------------------------------------------------------------------
    def _constant(self, push: Push) -> tuple[tuple[bytes, bytes], ...]:
        broadcast = push.channel_id is not None
        key = (push.topic if broadcast else push.wire_topic, push.push_type, push.priority, broadcast)
        fields = self._constant_fields.get(key)
        if fields is None:
            assert self._token is not None
            if broadcast:  # a broadcast names its bundle in the path and has no apns-topic (apns.md §2.1)
                fields = (
                    (b"authorization", self._token.authorization),
                    (b"apns-push-type", push.push_type.encode()),
                    (b"apns-priority", str(push.priority).encode()),
                )
            else:
                fields = (
                    (b"authorization", self._token.authorization),
                    (b"apns-push-type", push.push_type.encode()),
                    (b"apns-topic", key[0].encode()),
                    (b"apns-priority", str(push.priority).encode()),
                )
            self._constant_fields[key] = fields
        return fields

    def header_block(self, push: Push) -> bytes:
        """The HPACK block for ``push`` (updates the encoder's table: call once per request sent).

        Once the constant fields of its kind (topic, push type, priority, broadcast or not) are in the table,
        and while the table does not change, the block is their cached index references around the literal
        ``:path`` (and the per-push literals): the same bytes ``encode_block`` makes, without its work."""
        encoder: RequestHeaderEncoder = self._h2.encoder
        channel_id = push.channel_id
        cached = self._blocks.get((push.topic, push.push_type, push.priority, channel_id is not None))
        # (a size update owed to the decoder bumped the generation: a block cached before it does not hold)
        if cached is None or cached[0] != encoder.generation:
            return self.encode_block(push)
        if channel_id is None:
            token = push.token.encode("ascii")
            head = _PATH_HEADS.get(len(token)) or _path_head(len(token))
            if push.expiration is None and push.collapse_id is None and push.apns_id is None:
                return b"".join((cached[1], head, token, cached[2]))  # a routine update's block
            parts = [cached[1], head, token, cached[2]]
        else:
            parts = [
                cached[1],
                cached[3],
                cached[2],
                _literal_not_indexed(b"apns-channel-id", channel_id.encode("ascii")),
            ]
        if push.expiration is not None:
            parts.append(_shared_literal(b"apns-expiration", str(push.expiration)))
        if push.collapse_id is not None:
            parts.append(_shared_literal(b"apns-collapse-id", push.collapse_id))
        if push.apns_id is not None:
            parts.append(_literal_not_indexed(b"apns-id", push.apns_id.encode()))
        return b"".join(parts)

    def encode_block(self, push: Push) -> bytes:
        """``header_block`` field by field through the encoder (inserting the constant fields the first time
        they are used), then caching the steady-state parts for the pushes of the same kind."""
        encoder: RequestHeaderEncoder = self._h2.encoder
        block = bytearray()
        encoder.start_block(block)
        encoder.encode_constant(self._pseudo, block)
        if push.channel_id is not None:
            block += _broadcast_path(push.topic)
            encoder.encode_constant(self._constant(push), block)
            block += _literal_not_indexed(b"apns-channel-id", push.channel_id.encode("ascii"))
        else:
            token = push.token.encode("ascii")
            block += _path_head(len(token)) + token
            encoder.encode_constant(self._constant(push), block)
        if push.expiration is not None:
            block += _shared_literal(b"apns-expiration", str(push.expiration))
        if push.collapse_id is not None:
            block += _shared_literal(b"apns-collapse-id", push.collapse_id)
        if push.apns_id is not None:
            block += _literal_not_indexed(b"apns-id", push.apns_id.encode())
        head = encoder.steady(self._pseudo)
        tail = encoder.steady(self._constant(push))
        if head is not None and tail is not None and not encoder.owes_size_update:
            broadcast = push.channel_id is not None
            path = _broadcast_path(push.topic) if broadcast else b""
            self._blocks[(push.topic, push.push_type, push.priority, broadcast)] = (
                encoder.generation,
                head,
                tail,
                path,
            )
        return bytes(block)

    def send(self, push: Push, exchange: Any, now: float) -> int:
        """Start the request for ``push`` (check ``can_send()`` first); returns its stream id."""
        if not self.can_send():
            raise RuntimeError(f"ApnsConnection.send while it cannot send (state {self.state})")
        stream_id = self._next_stream_id
        self._next_stream_id += 2
        body = push.payload
        window = self._initial_window
        sent = self._h2.send_request(stream_id, self.header_block(push), body, window)
        deadline = now + self.request_timeout_s
        if not self._streams and self._ping_sent_at is None:
            self._waiting_since = now
        self._streams[stream_id] = _Stream(exchange, body, sent, deadline, window - sent)
        self._deadlines.append((deadline, stream_id))
        if sent < len(body):
            self._blocked.append(stream_id)
        self.requests_sent += 1
        if len(self._streams) > self.peak_in_flight:
            self.peak_in_flight = len(self._streams)
        if self._next_stream_id > _LAST_STREAM_ID:
            self.start_draining()
        return stream_id

    def send_request(
        self,
        method: str,
        path: str,
        headers: tuple[tuple[str, str], ...],
        body: bytes,
        exchange: Any,
        now: float,
    ) -> int:
        """Start any other APNs request (channel management): ``method`` and ``path`` as given, the provider
        token, ``headers`` as literals. Answers come back as ``Answered`` with ``channel_id`` and ``body``."""
        if not self.can_send():
            raise RuntimeError(f"ApnsConnection.send_request while it cannot send (state {self.state})")
        encoder: RequestHeaderEncoder = self._h2.encoder
        block = bytearray()
        encoder.start_block(block)
        if method == "POST":
            encoder.encode_constant(self._pseudo, block)
        else:
            block += _literal_not_indexed(b":method", method.encode("ascii"))
            encoder.encode_constant(self._pseudo[1:], block)
        block += _literal_not_indexed(b":path", path.encode("ascii"))
        assert self._token is not None
        encoder.encode_constant(((b"authorization", self._token.authorization),), block)
        for name, value in headers:
            block += _literal_not_indexed(name.encode("ascii"), value.encode("ascii"))
        if body:
            block += _literal_not_indexed(b"content-type", b"application/json")
        stream_id = self._next_stream_id
        self._next_stream_id += 2
        window = self._initial_window
        sent = self._h2.send_request(stream_id, bytes(block), body, window)
        deadline = now + self.request_timeout_s
        if not self._streams and self._ping_sent_at is None:
            self._waiting_since = now
        self._streams[stream_id] = _Stream(exchange, body, sent, deadline, window - sent)
        self._deadlines.append((deadline, stream_id))
        if sent < len(body):
            self._blocked.append(stream_id)
        self.requests_sent += 1
        return stream_id

    def _pump_blocked(self) -> None:
        """Window opened: continue the bodies that were waiting, oldest first."""
        h2c = self._h2
        while self._blocked:
            stream_id = self._blocked[0]
            stream = self._streams.get(stream_id)
            if stream is None:
                self._blocked.popleft()
                continue
            sent = h2c.send_body(stream_id, stream.body, stream.sent, stream.window)
            stream.window -= sent - stream.sent
            stream.sent = sent
            if sent < len(stream.body):
                return
            self._blocked.popleft()

    # -- time ---------------------------------------------------------------------------------------------
    def next_deadline(self) -> float | None:
        deadlines = self._deadlines
        while deadlines and deadlines[0][1] not in self._streams:
            deadlines.popleft()
        return deadlines[0][0] if deadlines else None

    def expire(self, now: float) -> list[Unanswered]:
        """Cancel the requests whose deadline passed (RST_STREAM CANCEL) and give them back."""
        expired: list[Unanswered] = []
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            _, stream_id = deadlines.popleft()
            stream = self._streams.pop(stream_id, None)
            if stream is None:
                continue
            if self.state != "closed":
                try:
                    self._h2.send_reset(stream_id, ErrorCodes.CANCEL)
                except h2.exceptions.H2Error:
                    pass  # h2 closed the connection meanwhile: nothing more goes out
                self._note_reset(stream_id, "sent")
            self._h2.stream_closed()
            expired.append(Unanswered(stream.exchange, "timeout", processed=True))
        if expired:
            self.unanswered_timeouts = self.timeouts_since_answer + len(expired)
            self._answers_at_timeout = self.answers_received
            self._probe = True
            if self._blocked:
                self._pump_blocked()
            self._maybe_closed()
        return expired

    # -- liveness: a connection is judged by what it hears, never by what it sends ------------------------
    def silence(self, now: float) -> float:
        """Seconds this connection has waited for the server without hearing a byte: since the later of the
        last byte received and the moment it began to wait (a request or PING sent while nothing was
        outstanding). 0 while it waits for nothing."""
        if not self._streams and self._ping_sent_at is None:
            return 0.0
        return now - max(self.last_heard, self._waiting_since)

    def responsive(self, now: float, silence_s: float) -> bool:
        """Open, and not left waiting ``silence_s`` without a byte: new requests may go here."""
        return self.state == "open" and self.silence(now) < silence_s

    @property
    def timeouts_since_answer(self) -> int:
        """Requests whose deadline passed since the server last answered a request on this connection."""
        return self.unanswered_timeouts if self.answers_received == self._answers_at_timeout else 0

    def check(self, now: float, rules: Liveness) -> Judgement:
        """What the connection's silence means now: nothing, time for a PING, or retirement.

        A connection waiting for answers that hears nothing for ``silence_s`` is PINGed (and takes no new
        request meanwhile); a PING unanswered for ``ping_timeout_s`` retires it, and so do ``silence_s +
        ping_timeout_s`` of silence on a draining connection, which cannot be PINGed: its requests come back
        as lost, for a fresh connection. A request that outlives its deadline counts against its connection: it
        triggers a PING at once, and ``max_timeouts`` of them with no answer between them retire the
        connection even if PINGs come back (a server that acknowledges PINGs but never answers a stream).
        An idle connection is PINGed after ``idle_s`` without a byte.

        Each moment is compared as the sum returned for the next look (``now >= since + span``, never
        ``now - since >= span``): in floating point the two can disagree, and a look at exactly the returned
        moment must find it come, or a watchdog waiting for it would look again and again."""
        if self.state == "closed":
            return Judgement("ok", "", "", math.inf)
        ping_at = self._ping_sent_at
        if ping_at is not None and now >= ping_at + rules.ping_timeout_s:
            return Judgement("retire", "ping_unanswered", f"PING unanswered for {now - ping_at:.1f} s", now)
        timeouts = self.timeouts_since_answer
        if timeouts >= rules.max_timeouts:
            detail = f"{timeouts} requests timed out with no answer between them"
            return Judgement("retire", "requests_unanswered", detail, now)
        if ping_at is not None:
            return Judgement("ok", "", "", ping_at + rules.ping_timeout_s)  # the PING's answer decides
        can_ping = self.state == "open"
        if self._streams:
            quiet_from = max(self.last_heard, self._waiting_since)
            silent = now - quiet_from
            if can_ping and now >= quiet_from + rules.silence_s:
                return Judgement("ping", "silent", f"nothing heard for {silent:.1f} s", now)
            if can_ping and self._probe:
                return Judgement("ping", "timeout", "a request outlived its deadline", now)
            if not can_ping:  # no PING can be asked of a draining connection: its silence decides
                if now >= quiet_from + rules.silence_s + rules.ping_timeout_s:
                    return Judgement("retire", "silent", f"nothing heard for {silent:.1f} s", now)
                return Judgement("ok", "", "", quiet_from + rules.silence_s + rules.ping_timeout_s)
            return Judgement("ok", "", "", quiet_from + rules.silence_s)
        if not can_ping:
            return Judgement("ok", "", "", math.inf)  # draining and idle: it closes, nothing to watch
        if self._probe:
            return Judgement("ping", "timeout", "a request outlived its deadline", now)
        if now >= self.last_heard + rules.idle_s:
            return Judgement("ping", "idle", f"idle for {now - self.last_heard:.1f} s", now)
        return Judgement("ok", "", "", self.last_heard + rules.idle_s)

    def send_ping(self, now: float) -> None:
        if not self._streams and self._ping_sent_at is None:
            self._waiting_since = now
        self._h2.ping(b"apnsping")
        self._ping_sent_at = now
        self._probe = False
        self.pings_sent += 1

    # -- bytes in -----------------------------------------------------------------------------------------
    def receive_data(self, data: bytes | bytearray, now: float) -> list[Outcome]:
        """Feed bytes from the server; returns the requests that finished. Protocol errors propagate (the
        connection is then over: GOAWAY is queued, and ``connection_lost`` gives back every request this read
        had not finished before the error, those it had finished included)."""
        self.last_heard = now
        outcomes: list[Outcome] = []
        h2c = self._h2
        streams = self._streams
        finished = self._finished
        try:
            self._receive(h2c.receive_frames(data), outcomes)
        except BaseException:
            # The connection is over: what this read settled goes back with the rest (``connection_lost``).
            for stream_id in finished:
                stream = streams.get(stream_id)
                if stream is not None:
                    stream.done = False
            finished.clear()
            raise
        if finished:
            for stream_id in finished:
                if streams.pop(stream_id, None) is not None:
                    h2c.stream_closed()
            finished.clear()
        if self._blocked:
            # More window, or the waiting stream ended (answered early, reset): either way move on.
            self._pump_blocked()
        self._maybe_closed()
        return outcomes

    def _receive(self, items: list[h2.events.Event | StreamFrame], outcomes: list[Outcome]) -> None:
        h2c = self._h2
        streams = self._streams
        for item in items:
            if type(item) is tuple:  # a frame on one of our streams (``internals.StreamFrame``)
                frame_type, flags, stream_id, payload, flow = item
                stream = streams.get(stream_id)
                if stream is not None and stream.done:
                    stream = None  # settled earlier in this read: closed
                if frame_type == HEADERS:
                    if stream is None:
                        self._on_closed_stream(stream_id, "HEADERS")
                    else:
                        self._on_headers(stream_id, stream, payload, flags & END_STREAM, outcomes)
                elif frame_type == DATA:
                    if flow:  # counted against the connection's window, open stream or not
                        h2c.data_received(flow)
                    if stream is None:
                        self._on_closed_stream(stream_id, "DATA")
                    elif not flow and flags & END_STREAM and stream.status is not None:
                        self._answer(stream_id, stream, outcomes)  # an empty DATA ending an answer
                    else:
                        self._on_data(stream_id, stream, payload, flow, flags & END_STREAM, outcomes)
                elif frame_type == WINDOW_UPDATE:
                    increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
                    if not increment:
                        raise h2c.protocol_error(
                            ErrorCodes.PROTOCOL_ERROR, f"WINDOW_UPDATE of 0 on stream {stream_id}"
                        )
                    if stream is not None:  # a closed stream's credit is ignored (RFC 9113 §6.9)
                        try:
                            stream.window = guard_increment_window(stream.window, increment)
                        except h2.exceptions.FlowControlError as exc:
                            raise h2c.protocol_error(ErrorCodes.FLOW_CONTROL_ERROR, str(exc)) from exc
                elif frame_type == RST_STREAM:
                    if stream is not None:
                        code = int.from_bytes(payload, "big")
                        self._note_reset(stream_id, "received")
                        self._settle(stream_id, stream)
                        refused = code == ErrorCodes.REFUSED_STREAM
                        outcomes.append(
                            Unanswered(
                                stream.exchange, "refused" if refused else "reset", processed=not refused
                            )
                        )
                # PRIORITY is advice about scheduling the server's sending: nothing for us to do
                continue
            event = item
            # ``type(x) is`` rather than isinstance: h2's event classes are final.
            if type(event) is h2.events.RemoteSettingsChanged:
                h2c.settings_changed()
                self._max_concurrent = min(h2c.stream_limit, self.local_stream_cap)
                self._window_setting_changed(h2c.remote_settings.initial_window_size)
                if not self.settings_received:
                    self.settings_received = True
                    if self.state == "connecting":
                        self.state = "open"
            elif type(event) is h2.events.ConnectionTerminated:
                outcomes.extend(self._on_goaway(event))
                if self.state == "closed":
                    return  # an error GOAWAY: everything came back; whatever follows it is not read
            elif type(event) is h2.events.PingAckReceived:
                self._ping_sent_at = None
                self._probe = False  # someone is there: a late answer is the server's, not the link's

    def _settle(self, stream_id: int, stream: _Stream) -> None:
        """The stream is closed: it is forgotten at the end of this read."""
        stream.done = True
        self._finished.append(stream_id)

    def _note_reset(self, stream_id: int, by: str) -> None:
        resets = self._resets
        if len(resets) >= _RESETS_KEPT:
            del resets[next(iter(resets))]
        resets[stream_id] = by

    def _on_closed_stream(self, stream_id: int, kind: str) -> None:
        """HEADERS or DATA on a stream of ours that is closed (RFC 9113 §5.1): ignored after our RST_STREAM
        (the server may have sent it before ours arrived); answered with RST_STREAM STREAM_CLOSED after the
        server's; a connection error STREAM_CLOSED after both ends ended it (or it was given back at a GOAWAY,
        unanswered), as h2 treats it."""
        by = self._resets.get(stream_id)
        if by == "sent":
            return
        if by == "received":
            self._h2.send_reset(stream_id, ErrorCodes.STREAM_CLOSED)
            return
        raise self._h2.protocol_error(ErrorCodes.STREAM_CLOSED, f"{kind} on closed stream {stream_id}")

    def _on_headers(
        self, stream_id: int, stream: _Stream, block: bytes, end_stream: int, outcomes: list[Outcome]
    ) -> None:
        """A header block on an open stream: the answer's headers (an informational 1xx is skipped), or its
        trailers, which must end the stream."""
        try:
            fields = self._decoder.decode(block)
        except h2.exceptions.ProtocolError as exc:
            raise self._h2.protocol_error(ErrorCodes.COMPRESSION_ERROR, str(exc)) from exc
        if stream.status is not None:  # trailers: nothing in them for us
            if not end_stream:
                raise self._h2.protocol_error(ErrorCodes.PROTOCOL_ERROR, "Trailers must have END_STREAM set")
            self._answer(stream_id, stream, outcomes)
            return
        status = 0  # a response without :status is malformed: 0 sends it down the "bug" path
        for name, value in fields:
            if name == b":status":
                if not value.isdigit():
                    raise self._h2.protocol_error(ErrorCodes.PROTOCOL_ERROR, f"malformed :status {value!r}")
                status = int(value)
            elif name == b"apns-id":
                stream.apns_id = value
            elif name == b"apns-channel-id":
                stream.channel_id = value
            elif name == b"content-length":
                if not value.isdigit():
                    raise self._h2.protocol_error(
                        ErrorCodes.PROTOCOL_ERROR, f"malformed content-length {value!r}"
                    )
                stream.content_length = int(value)
        if 100 <= status < 200:  # informational: the final answer is still to come
            if end_stream:
                raise self._h2.protocol_error(
                    ErrorCodes.PROTOCOL_ERROR, "Cannot set END_STREAM on informational responses"
                )
            stream.apns_id = stream.channel_id = stream.content_length = None
            return
        stream.status = status
        if end_stream:
            self._answer(stream_id, stream, outcomes)

    def _on_data(
        self,
        stream_id: int,
        stream: _Stream,
        data: bytes,
        flow: int,
        end_stream: int,
        outcomes: list[Outcome],
    ) -> None:
        if stream.status is None:
            raise self._h2.protocol_error(
                ErrorCodes.PROTOCOL_ERROR, f"DATA before the answer on stream {stream_id}"
            )
        stream.received += flow
        if stream.received > self._receive_window:
            raise self._h2.protocol_error(
                ErrorCodes.FLOW_CONTROL_ERROR,
                f"stream {stream_id} overran our window of {self._receive_window}",
            )
        if data:
            if stream.data is None:
                stream.data = bytearray()
            stream.data += data
        if end_stream:
            self._answer(stream_id, stream, outcomes)

    def _answer(self, stream_id: int, stream: _Stream, outcomes: list[Outcome]) -> None:
        """The server ended the stream: the request is answered."""
        received = len(stream.data) if stream.data else 0
        if stream.content_length is not None and stream.content_length != received:
            raise self._h2.protocol_error(
                ErrorCodes.PROTOCOL_ERROR,
                f"stream {stream_id}: content-length {stream.content_length}, body of {received} bytes",
            )
        if stream.sent < len(stream.body):
            # Answered before we finished the body (an early 413, say): end our half with a reset, or the
            # server keeps counting the stream against its limit (RFC 9113 §8.1).
            self._h2.send_reset(stream_id, ErrorCodes.NO_ERROR)
            self._note_reset(stream_id, "sent")
        stream.done = True  # ``_settle``, inline: this runs per answer
        self._finished.append(stream_id)
        self.answers_received += 1
        if stream.data is None and stream.apns_id is None and stream.channel_id is None:
            outcomes.append(Answered(stream.exchange, stream.status or 0, None, None, None))  # a bare answer
        else:
            outcomes.append(self._answered(stream))

    def _window_setting_changed(self, initial_window: int) -> None:
        """The server's SETTINGS_INITIAL_WINDOW_SIZE moves every open stream's send window by the change
        (RFC 9113 §6.9.2); a window pushed past 2^31-1 is a connection error."""
        delta = initial_window - self._initial_window
        if not delta:
            return
        self._initial_window = initial_window
        for stream_id, stream in self._streams.items():
            try:
                stream.window = guard_increment_window(stream.window, delta)
            except h2.exceptions.FlowControlError as exc:
                raise self._h2.protocol_error(
                    ErrorCodes.FLOW_CONTROL_ERROR, f"stream {stream_id}: {exc}"
                ) from exc

    def _answered(self, stream: _Stream) -> Answered:
        reason: str | None = None
        timestamp: int | None = None
        if stream.data:
            try:
                body = json.loads(stream.data)
            except ValueError:
                body = None
            if isinstance(body, dict):
                raw_reason = body.get("reason")
                reason = raw_reason if isinstance(raw_reason, str) else None
                raw_ts = body.get("timestamp")
                timestamp = raw_ts if isinstance(raw_ts, int) else None
        apns_id = stream.apns_id.decode("ascii", "replace") if stream.apns_id else None
        channel_id = stream.channel_id.decode("ascii", "replace") if stream.channel_id else None
        body_bytes = bytes(stream.data) if stream.data else None
        # A response without :status is malformed; 0 sends it down the "bug" path instead of crashing.
        return Answered(
            stream.exchange, stream.status or 0, reason, apns_id, timestamp, channel_id, body_bytes
        )

    def _on_goaway(self, event: h2.events.ConnectionTerminated) -> list[Unanswered]:
        reason: str | None = None
        if event.additional_data:
            try:
                body = json.loads(event.additional_data)
            except ValueError:
                body = None
            if isinstance(body, dict) and isinstance(body.get("reason"), str):
                reason = body["reason"]
            else:
                reason = event.additional_data.decode("utf-8", "replace")[:200]
        last = event.last_stream_id if event.last_stream_id is not None else 0
        self.goaway = GoAway(int(event.error_code or 0), last, reason)
        self.state = "draining" if self.state != "closed" else "closed"
        requeue: list[Unanswered] = []
        for stream_id, stream in self._streams.items():
            if stream_id > last and not stream.done:
                self._settle(stream_id, stream)
                requeue.append(Unanswered(stream.exchange, "goaway", processed=False))
        if event.error_code not in (None, ErrorCodes.NO_ERROR):
            # An error GOAWAY ends the connection at once: nothing more will be answered.
            requeue.extend(self._orphan_all("lost"))
            self.state = "closed"
        return requeue
