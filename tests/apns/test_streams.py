"""Our request streams (``ApnsConnection`` over ``internals.ApnsClientH2Connection``, without h2's per-stream
machinery) against independent implementations: h2's own client and server, hyperframe's frame parser and
hpack's decoder. The same server bytes must give the same answers however they are cut into reads, padded,
prioritised or split into CONTINUATION frames; the cached request header blocks must be the bytes the
field-by-field encoder makes; and a server that breaks the protocol on one of our streams ends the connection
without losing a request."""

from __future__ import annotations

import json
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import hpack
import pytest
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PriorityFrame,
    RstStreamFrame,
    WindowUpdateFrame,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.apns.connection import Answered, ApnsConnection, Unanswered
from daemon.apns.internals import ApnsClientH2Connection
from daemon.apns.types import Push
from daemon.apns.wire import CONTINUATION, DATA, END_HEADERS, HEADERS
from tests.apns.memory_peer import TOKEN, TOKEN2, ServerPeer, connect, exchange, make_push


def connected(local: dict[int, int] | None = None, **kw: Any) -> tuple[ApnsConnection, ServerPeer]:
    """A connection past the SETTINGS exchange with h2's server side."""
    conn, server = connect(local, **kw)
    exchange(conn, server)
    return conn, server


def reference_client(stream_bodies: dict[int, bytes]) -> h2.connection.H2Connection:
    """Stock h2's client, with the requests ours sent (same stream ids), as a second reader of the answers."""
    ref = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    ref.initiate_connection()
    ref.update_settings({SettingCodes.HEADER_TABLE_SIZE: 0, SettingCodes.ENABLE_PUSH: 0})
    ref.increment_flow_control_window((1 << 24) - 65535)
    headers = [(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/3/device/x")]
    for stream_id, body in sorted(stream_bodies.items()):
        ref.send_headers(stream_id, headers)
        ref.send_data(stream_id, body, end_stream=True)
    ref.data_to_send()
    return ref


def ours_view(outcomes: list[Any], by_exchange: dict[Any, int]) -> dict[int, tuple[Any, ...]]:
    view: dict[int, tuple[Any, ...]] = {}
    for o in outcomes:
        sid = by_exchange[o.exchange]
        if isinstance(o, Answered):
            view[sid] = ("answer", o.status, o.body or b"")
        else:
            assert isinstance(o, Unanswered)
            view[sid] = ("reset", o.cause == "refused")
    return view


def reference_view(events: list[h2.events.Event]) -> dict[int, tuple[Any, ...]]:
    status: dict[int, int] = {}
    bodies: dict[int, bytes] = {}
    view: dict[int, tuple[Any, ...]] = {}
    for e in events:
        if isinstance(e, h2.events.ResponseReceived):
            status[e.stream_id] = int(dict(e.headers)[b":status"])
        elif isinstance(e, h2.events.DataReceived):
            bodies[e.stream_id] = bodies.get(e.stream_id, b"") + e.data
        elif isinstance(e, h2.events.StreamEnded):
            view[e.stream_id] = ("answer", status[e.stream_id], bodies.get(e.stream_id, b""))
        elif isinstance(e, h2.events.StreamReset):
            view[e.stream_id] = ("reset", e.error_code == ErrorCodes.REFUSED_STREAM)
    return view


# What a server may do with each of our requests (all valid HTTP/2): answer with headers alone, with a body in
# several DATA frames (padded or not), after a 100 Continue, with trailers, with priority fields on its
# HEADERS, with a header block too big for one frame (CONTINUATION), or reset the stream.
answers = st.one_of(
    st.tuples(st.just("answer"), st.sampled_from([200, 400, 403, 410, 429, 500])),
    st.tuples(
        st.just("body"),
        st.sampled_from([400, 410, 413]),
        st.lists(st.integers(0, 40), min_size=1, max_size=3),  # DATA frames' pad lengths (0: unpadded)
    ),
    st.tuples(st.just("continue"), st.sampled_from([200, 410])),
    st.tuples(st.just("trailers"), st.sampled_from([200, 500])),
    st.tuples(st.just("priority"), st.sampled_from([200, 429])),
    st.tuples(st.just("huge"), st.sampled_from([200, 400])),
    st.tuples(
        st.just("reset"),
        st.sampled_from([ErrorCodes.REFUSED_STREAM, ErrorCodes.CANCEL, ErrorCodes.INTERNAL_ERROR]),
    ),
)
interludes = st.sampled_from(["none", "ping", "settings", "window"])


def act(server: ServerPeer, stream_id: int, action: tuple[Any, ...], interlude: str) -> bytes:
    """What the server sends for ``action`` on ``stream_id`` (and the interlude after it)."""
    h = server.h2
    out = h.data_to_send()
    kind = action[0]
    status_headers = [(":status", str(action[1])), ("apns-id", f"id-{stream_id}")]
    if kind == "answer":
        h.send_headers(stream_id, status_headers, end_stream=True)
    elif kind == "body":
        body = json.dumps({"reason": "BadDeviceToken", "timestamp": 1700000000000 + stream_id}).encode()
        h.send_headers(stream_id, [*status_headers, ("content-length", str(len(body)))])
        pads = action[2]
        step = max(1, len(body) // len(pads) + 1)
        pieces = [body[i : i + step] for i in range(0, len(body), step)]
        for n, piece in enumerate(pieces):
            pad = pads[n % len(pads)]
            h.send_data(stream_id, piece, end_stream=n == len(pieces) - 1, pad_length=pad or None)
    elif kind == "continue":
        h.send_headers(stream_id, [(":status", "100")])
        h.send_headers(stream_id, status_headers, end_stream=True)
    elif kind == "trailers":
        h.send_headers(stream_id, status_headers)
        h.send_headers(stream_id, [("x-trailer", "1")], end_stream=True)
    elif kind == "priority":  # h2's server will not send priority fields: hyperframe writes the frame
        encoder = hpack.Encoder()
        encoder.header_table_size = 0
        block = encoder.encode(status_headers)
        flags = ["END_HEADERS", "END_STREAM", "PRIORITY", "PADDED"]
        out += h.data_to_send()
        out += HeadersFrame(stream_id, block, flags=flags, pad_length=3, stream_weight=200).serialize()
        h.reset_stream(stream_id, ErrorCodes.NO_ERROR)  # its own state: the stream is over
        h.data_to_send()
    elif kind == "huge":
        h.send_headers(stream_id, [*status_headers, ("x-big", "v" * 40_000)], end_stream=True)
    else:
        h.reset_stream(stream_id, action[1])
    if interlude == "ping":
        h.ping(b"12345678")
    elif interlude == "settings":
        h.update_settings({SettingCodes.MAX_CONCURRENT_STREAMS: 100 + stream_id})
    elif interlude == "window":
        h.increment_flow_control_window(1000)
    return out + h.data_to_send()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(answers, interludes), min_size=1, max_size=12),
    st.lists(st.integers(1, 4000), min_size=1, max_size=8),
)
def test_our_streams_read_any_server_bytes_as_stock_h2_does(
    script: list[tuple[tuple[Any, ...], str]], cuts: list[int]
) -> None:
    conn, server = connected()
    exchanges: dict[Any, int] = {}
    bodies: dict[int, bytes] = {}
    for i in range(len(script)):
        push = make_push(i, payload=b"x" * (50 + 97 * i))
        sid = conn.send(push, f"p{i}", 0.0)
        exchanges[f"p{i}"] = sid
        bodies[sid] = push.payload
    server.feed(conn.data_to_send())
    assert set(server.complete) == set(bodies)
    server.out()  # the server's window credit: not part of what is compared
    wire = b"".join(
        act(server, sid, action, interlude)
        for (action, interlude), sid in zip(script, sorted(bodies), strict=True)
    )
    ref = reference_client(bodies)
    outcomes: list[Any] = []
    events: list[h2.events.Event] = []
    pos = 0
    for cut in [*cuts, len(wire)]:  # the same reads for both readers
        chunk = wire[pos : pos + cut]
        pos += len(chunk)
        outcomes += conn.receive_data(chunk, 0.0)
        events += ref.receive_data(chunk)
    outcomes += conn.receive_data(wire[pos:], 0.0)
    events += ref.receive_data(wire[pos:])
    assert ours_view(outcomes, exchanges) == reference_view(events)
    assert conn.in_flight == 0
    exchange(conn, server)  # what we sent back (SETTINGS and PING acks, credit) is valid to h2's server


# -- the frame splitter against hyperframe ------------------------------------------------------------------

frames_on_stream = st.one_of(
    st.tuples(st.just("data"), st.binary(max_size=60), st.integers(0, 20), st.booleans()),
    st.tuples(st.just("headers"), st.binary(min_size=1, max_size=60), st.integers(0, 20), st.booleans()),
    st.tuples(st.just("split-headers"), st.binary(min_size=2, max_size=60), st.integers(1, 4), st.booleans()),
    st.tuples(st.just("rst"), st.integers(0, 15)),
    st.tuples(st.just("window"), st.integers(1, 2**31 - 1)),
    st.tuples(st.just("priority"), st.integers(0, 255)),
)


def serialise(kind: tuple[Any, ...], stream_id: int) -> tuple[list[Frame], tuple[Any, ...]]:
    """Frames (by hyperframe) for one generated item, and the StreamFrame we expect for it."""
    if kind[0] == "data":
        _, data, pad, end = kind
        f = DataFrame(stream_id, data, pad_length=pad, flags=["PADDED"] if pad else [])
        if end:
            f.flags.add("END_STREAM")
        return [f], (DATA, stream_id, data, f.flow_controlled_length)
    if kind[0] == "headers":
        _, block, pad, prio = kind
        flags = ["END_HEADERS", *(["PADDED"] if pad else []), *(["PRIORITY"] if prio else [])]
        f = HeadersFrame(stream_id, block, pad_length=pad, flags=flags, stream_weight=16, depends_on=0)
        return [f], (HEADERS, stream_id, block, 0)
    if kind[0] == "split-headers":
        _, block, parts, _ = kind
        parts = min(parts, len(block))
        size = -(-len(block) // parts)
        pieces = [block[i : i + size] for i in range(0, len(block), size)]
        out: list[Frame] = [HeadersFrame(stream_id, pieces[0])]
        for n, piece in enumerate(pieces[1:], start=1):
            c = ContinuationFrame(stream_id, piece)
            if n == len(pieces) - 1:
                c.flags.add("END_HEADERS")
            out.append(c)
        if len(pieces) == 1:
            out[0].flags.add("END_HEADERS")
        return out, (HEADERS, stream_id, block, 0)
    if kind[0] == "rst":
        f = RstStreamFrame(stream_id, error_code=kind[1])
        return [f], (3, stream_id, kind[1].to_bytes(4, "big"), 0)
    if kind[0] == "window":
        f = WindowUpdateFrame(stream_id, window_increment=kind[1])
        return [f], (8, stream_id, kind[1].to_bytes(4, "big"), 0)
    f = PriorityFrame(stream_id, depends_on=0, stream_weight=kind[1])
    return [f], (2, stream_id, f.serialize_body(), 0)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(frames_on_stream, st.integers(0, 3)), min_size=1, max_size=15),
    st.lists(st.integers(1, 50), max_size=12),
)
def test_the_splitter_hands_on_what_hyperframe_parses_whatever_the_reads(
    items: list[tuple[tuple[Any, ...], int]], cuts: list[int]
) -> None:
    c = ApnsClientH2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding=None), encoder=None
    )
    c.initiate_connection()
    for stream_id in (1, 3, 5, 7):  # streams 1, 3, 5, 7 are ours
        c.send_request(stream_id, b"\x82", b"", 65535)
    wire = bytearray()
    expected = []
    for kind, n in items:
        frames, want = serialise(kind, 2 * n + 1)
        for f in frames:
            wire += f.serialize()
        expected.append(want)
    got = []
    pos = 0
    for cut in [*cuts, len(wire)]:
        got += c.receive_frames(bytes(wire[pos : pos + cut]))
        pos = min(pos + cut, len(wire))
    got += c.receive_frames(bytes(wire[pos:]))
    assert [(f[0], f[2], f[3], f[4]) for f in got] == expected
    assert all(f[1] & END_HEADERS for f in got if f[0] == HEADERS)
    assert all(f[0] != CONTINUATION for f in got)


# -- request header blocks: the cached steady state against the field-by-field encoder ----------------------

push_kinds = st.builds(
    lambda i, topic, push_type, prio, channel, exp, collapse: make_push(
        i,
        topic=topic,
        push_type=push_type,
        priority=prio,
        channel_id=channel,
        token="" if channel else f"{i:064x}",
        expiration=exp,
        collapse_id=collapse,
    ),
    st.integers(0, 10**6),
    st.sampled_from(["com.a", "com.b", "com.b.push-type.liveactivity"]),
    st.sampled_from(["liveactivity", "alert"]),
    st.sampled_from([5, 10]),
    st.sampled_from([None, None, "chan-1", "chan-22"]),
    st.sampled_from([None, 0, 1700000000]),
    st.sampled_from([None, "wicket-1"]),
)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("push"), push_kinds),
            st.tuples(st.just("resize"), st.sampled_from([0, 60, 200, 500, 4096])),
            st.tuples(st.just("token"), st.sampled_from([TOKEN, TOKEN2])),
        ),
        max_size=40,
    )
)
def test_cached_header_blocks_are_the_encoders_own_bytes(ops: list[tuple[str, Any]]) -> None:
    fast = ApnsConnection("h.test:443")
    slow = ApnsConnection("h.test:443")
    decoder = hpack.Decoder()
    for conn in (fast, slow):
        conn.use_token(TOKEN)
    token = TOKEN
    for op, arg in ops:
        if op == "resize":
            decoder.max_allowed_table_size = arg
            for conn in (fast, slow):
                conn._h2.encoder.header_table_size = arg
            continue
        if op == "token":
            token = arg
            for conn in (fast, slow):
                conn.use_token(arg)
            continue
        push: Push = arg
        block = fast.header_block(push)
        assert block == slow.encode_block(push)
        fields = dict(decoder.decode(block, raw=True))
        assert fields[b"authorization"] == token.authorization
        if push.channel_id is None:
            assert fields[b":path"] == f"/3/device/{push.token}".encode()
            assert fields[b"apns-topic"] == push.wire_topic.encode()
        else:
            assert fields[b":path"] == f"/4/broadcasts/apps/{push.topic}".encode()
            assert fields[b"apns-channel-id"] == push.channel_id.encode()
        assert fields[b"apns-priority"] == str(push.priority).encode()
        assert fields.get(b"apns-collapse-id") == (push.collapse_id.encode() if push.collapse_id else None)


# -- a server that breaks the rules on our streams ----------------------------------------------------------


def _raw(frame: Frame) -> bytes:
    return frame.serialize()


def _answered(conn: ApnsConnection, server: ServerPeer, n: int) -> list[int]:
    sids = [conn.send(make_push(i), f"p{i}", 0.0) for i in range(n)]
    exchange(conn, server)
    return sids


def test_data_before_the_answers_headers_ends_the_connection_and_loses_nothing() -> None:
    conn, server = connected()
    a, b = _answered(conn, server, 2)
    server.h2.send_headers(a, [(":status", "200")], end_stream=True)
    wire = server.out() + _raw(DataFrame(b, b"{}", flags=["END_STREAM"]))
    with pytest.raises(h2.exceptions.ProtocolError):
        conn.receive_data(wire, 0.0)
    # the answer to ``a`` came in the read that failed: it goes back with ``b``, to be sent again
    assert sorted(o.exchange for o in conn.connection_lost()) == ["p0", "p1"]
    assert b"\x00\x00\x08\x07" in conn.data_to_send()  # our GOAWAY


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (lambda sid: HeadersFrame(sid, b"\x88", flags=["END_HEADERS"]), ErrorCodes.STREAM_CLOSED),
        (lambda sid: DataFrame(sid, b"x"), ErrorCodes.STREAM_CLOSED),
    ],
)
def test_a_frame_on_a_stream_both_ends_closed_is_a_connection_error(frame: Any, code: int) -> None:
    conn, server = connected()
    (sid,) = _answered(conn, server, 1)
    server.h2.send_headers(sid, [(":status", "200")], end_stream=True)
    assert [o.status for o in conn.receive_data(server.out(), 0.0)] == [200]
    with pytest.raises(h2.exceptions.ProtocolError) as caught:
        conn.receive_data(_raw(frame(sid)), 0.0)
    assert caught.value.error_code == code


def _frames(data: bytes) -> list[tuple[int, int, bytes]]:
    """(type, stream id, payload) of each frame in ``data``."""
    out = []
    pos = 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 3], "big")
        stream_id = int.from_bytes(data[pos + 5 : pos + 9], "big")
        out.append((data[pos + 3], stream_id, data[pos + 9 : pos + 9 + length]))
        pos += 9 + length
    return out


def test_after_our_reset_late_frames_are_ignored_and_after_the_servers_they_get_stream_closed() -> None:
    conn, server = connected(request_timeout_s=1.0)
    mine, theirs = _answered(conn, server, 2)
    server.h2.reset_stream(theirs, ErrorCodes.INTERNAL_ERROR)
    assert [o.cause for o in conn.receive_data(server.out(), 0.0)] == ["reset"]
    assert [o.cause for o in conn.expire(5.0)] == ["timeout"]
    assert (3, mine, ErrorCodes.CANCEL.to_bytes(4, "big")) in _frames(conn.data_to_send())
    late = _raw(HeadersFrame(mine, b"\x88", flags=["END_HEADERS", "END_STREAM"]))
    late += _raw(DataFrame(mine, b"abc", flags=["END_STREAM"]))
    late += _raw(DataFrame(theirs, b"abc", flags=["END_STREAM"]))
    assert conn.receive_data(late, 0.0) == []
    # nothing for ours; RST_STREAM STREAM_CLOSED for the server's (RFC 9113 §5.1)
    assert _frames(conn.data_to_send()) == [(3, theirs, ErrorCodes.STREAM_CLOSED.to_bytes(4, "big"))]


@pytest.mark.parametrize(
    ("wire", "code"),
    [
        # CONTINUATION expected, a PING came
        (
            lambda sid: _raw(HeadersFrame(sid, b"\x88")) + bytes.fromhex("000008060000000000") + b"12345678",
            ErrorCodes.PROTOCOL_ERROR,
        ),
        # padding longer than the frame
        (
            lambda sid: b"\x00\x00\x02\x01\x0d" + sid.to_bytes(4, "big") + b"\x09\x88",
            ErrorCodes.PROTOCOL_ERROR,
        ),
        # a zero increment on an open stream
        (lambda sid: _zero_window(sid), ErrorCodes.PROTOCOL_ERROR),
        # an informational answer ending the stream
        (
            lambda sid: _raw(HeadersFrame(sid, b"\x08\x03100", flags=["END_HEADERS", "END_STREAM"])),
            ErrorCodes.PROTOCOL_ERROR,
        ),
        # trailers that do not end it
        (
            lambda sid: (
                _raw(HeadersFrame(sid, b"\x88", flags=["END_HEADERS"]))
                + _raw(HeadersFrame(sid, b"\x88", flags=["END_HEADERS"]))
            ),
            ErrorCodes.PROTOCOL_ERROR,
        ),
        # a body longer than its content-length
        (
            lambda sid: (
                _raw(HeadersFrame(sid, b"\x88\x0f\x0d\x011", flags=["END_HEADERS"]))
                + _raw(DataFrame(sid, b"12", flags=["END_STREAM"]))
            ),
            ErrorCodes.PROTOCOL_ERROR,
        ),
        # a reference into the (zero-size) dynamic table
        (
            lambda sid: _raw(HeadersFrame(sid, b"\xbe", flags=["END_HEADERS", "END_STREAM"])),
            ErrorCodes.COMPRESSION_ERROR,
        ),
        # more DATA than our stream window lets the server send
        (
            lambda sid: (
                _raw(HeadersFrame(sid, b"\x88", flags=["END_HEADERS"]))
                + b"".join(_raw(DataFrame(sid, b"z" * 16000)) for _ in range(5))
            ),
            ErrorCodes.FLOW_CONTROL_ERROR,
        ),
    ],
)
def test_protocol_errors_on_our_streams_end_the_connection_with_goaway(wire: Any, code: int) -> None:
    conn, server = connected()
    (sid,) = _answered(conn, server, 1)
    with pytest.raises(h2.exceptions.ProtocolError) as caught:
        conn.receive_data(wire(sid), 0.0)
    assert caught.value.error_code == code
    server.feed(conn.data_to_send())
    assert server.h2.state_machine.state.name == "CLOSED"  # our GOAWAY arrived
    assert [o.exchange for o in conn.connection_lost()] == ["p0"]


def _zero_window(stream_id: int) -> bytes:
    return b"\x00\x00\x04\x08\x00" + stream_id.to_bytes(4, "big") + b"\x00\x00\x00\x00"


def test_a_servers_initial_window_change_moves_open_streams_and_unblocks_a_waiting_body() -> None:
    conn, server = connected({SettingCodes.INITIAL_WINDOW_SIZE: 100})
    push = make_push(1, payload=b"y" * 700)
    sid = conn.send(push, "big", 0.0)
    server.feed(conn.data_to_send())
    server.out()  # drop the server's credit: only the settings change may move the body on
    assert sid not in server.complete and not conn.can_send()
    server.h2.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 1000})
    conn.receive_data(server.out(), 0.0)
    server.feed(conn.data_to_send())
    assert server.bodies[sid] == push.payload and sid in server.complete
    assert conn.can_send()


def test_a_window_setting_past_the_limit_is_a_flow_control_error() -> None:
    conn, server = connected()
    (sid,) = _answered(conn, server, 1)
    conn.receive_data(_raw(WindowUpdateFrame(sid, 2**31 - 1 - 65535)), 0.0)
    server.h2.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 70000})
    with pytest.raises(h2.exceptions.ProtocolError) as caught:
        conn.receive_data(server.out(), 0.0)
    assert caught.value.error_code == ErrorCodes.FLOW_CONTROL_ERROR


def test_an_error_goaway_gives_every_request_back_once_whatever_follows_it_in_the_read() -> None:
    conn, server = connected()
    a, b = _answered(conn, server, 2)
    server.h2.send_headers(a, [(":status", "200")], end_stream=True)
    wire = server.out()
    wire += GoAwayFrame(0, last_stream_id=b, error_code=ErrorCodes.INTERNAL_ERROR).serialize()
    wire += _raw(HeadersFrame(b, b"\x88", flags=["END_HEADERS", "END_STREAM"]))  # after the GOAWAY: not read
    outcomes = conn.receive_data(wire, 0.0)
    assert sorted((type(o).__name__, o.exchange) for o in outcomes) == [
        ("Answered", "p0"),
        ("Unanswered", "p1"),
    ]
    assert conn.state == "closed" and conn.connection_lost() == []
