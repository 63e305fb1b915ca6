"""ApnsConnection (sans-I/O) against h2's own server side, fed in memory: an independent HTTP/2 peer that
validates our frames and headers, so a drift in our direct request path shows up as an h2 protocol error."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hpack
import pytest
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hyperframe.frame import GoAwayFrame
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.apns.connection import (
    Answered,
    ApnsConnection,
    Liveness,
    RequestHeaderEncoder,
    ResponseHeaderDecoder,
    Unanswered,
)
from tests.apns.memory_peer import TOKEN, TOKEN2, ServerPeer, connect, exchange, make_push


def test_no_request_before_the_servers_settings_arrive() -> None:
    conn = ApnsConnection("a.test:443")
    conn.initiate(0.0)
    conn.use_token(TOKEN)
    assert conn.state == "connecting"
    assert not conn.can_send()
    server = ServerPeer()
    server.feed(conn.data_to_send())
    conn.receive_data(server.out(), 0.0)
    assert conn.state == "open" and conn.can_send()


def test_request_headers_and_body_reach_a_validating_server_intact() -> None:
    conn, server = connect()
    exchange(conn, server)
    push = make_push(
        7, expiration=1700000000, collapse_id="wicket-1", apns_id="123e4567-e89b-12d3-a456-426614174000"
    )
    sid = conn.send(push, "ctx", 0.0)
    exchange(conn, server)
    headers = server.requests[sid]
    assert headers[":method"] == "POST" and headers[":scheme"] == "https"
    assert headers[":authority"] == "api.example.test:443"
    assert headers[":path"] == f"/3/device/{7:064x}"
    assert headers["authorization"] == "bearer " + TOKEN.jwt
    assert headers["apns-topic"] == "com.example.app.push-type.liveactivity"
    assert headers["apns-push-type"] == "liveactivity" and headers["apns-priority"] == "5"
    assert headers["apns-expiration"] == "1700000000"
    assert headers["apns-collapse-id"] == "wicket-1"
    assert headers["apns-id"] == "123e4567-e89b-12d3-a456-426614174000"
    assert server.bodies[sid] == push.payload and sid in server.complete


def test_answers_are_matched_to_their_stream_and_closed_streams_are_forgotten() -> None:
    conn, server = connect()
    exchange(conn, server)
    sids = [conn.send(make_push(i), f"push{i}", 0.0) for i in range(50)]
    exchange(conn, server)
    for sid in reversed(sids):
        server.answer(sid, 200)
    outcomes = exchange(conn, server)
    got = {o.exchange: o for o in outcomes if isinstance(o, Answered)}
    assert set(got) == {f"push{i}" for i in range(50)}
    assert got["push3"].status == 200
    assert got["push3"].apns_id is None  # an accepted answer's id is not decoded (the sender reports ours)
    assert conn.in_flight == 0 and conn.h2_streams == 0


def test_error_answer_carries_reason_and_410_timestamp() -> None:
    conn, server = connect()
    exchange(conn, server)
    sid = conn.send(make_push(1), "x", 0.0)
    exchange(conn, server)
    server.answer(sid, 410, {"reason": "Unregistered", "timestamp": 1700000000123})
    (outcome,) = exchange(conn, server)
    assert isinstance(outcome, Answered)
    assert (outcome.status, outcome.reason, outcome.timestamp_ms) == (410, "Unregistered", 1700000000123)
    assert outcome.apns_id == f"00000000-0000-0000-0000-{sid:012d}"


def test_stream_limit_of_one_is_obeyed_until_the_server_raises_it() -> None:
    conn, server = connect({SettingCodes.MAX_CONCURRENT_STREAMS: 1})
    exchange(conn, server)
    assert conn.max_concurrent == 1
    sid = conn.send(make_push(1), "a", 0.0)
    assert not conn.can_send()
    exchange(conn, server)
    server.answer(sid)
    server.h2.update_settings({SettingCodes.MAX_CONCURRENT_STREAMS: 1000})
    exchange(conn, server)
    assert conn.max_concurrent == 1000
    for i in range(1000):
        conn.send(make_push(i), i, 0.0)
    assert conn.in_flight == 1000 and not conn.can_send()


def test_limit_drop_to_one_stops_new_streams_until_in_flight_falls_below_it() -> None:
    conn, server = connect({SettingCodes.MAX_CONCURRENT_STREAMS: 100})
    exchange(conn, server)
    sids = [conn.send(make_push(i), i, 0.0) for i in range(10)]
    exchange(conn, server)
    server.h2.update_settings({SettingCodes.MAX_CONCURRENT_STREAMS: 1})
    exchange(conn, server)
    assert conn.max_concurrent == 1 and not conn.can_send()
    for sid in sids[:9]:
        server.answer(sid)
    exchange(conn, server)
    assert conn.in_flight == 1 and not conn.can_send()
    server.answer(sids[9])
    exchange(conn, server)
    assert conn.can_send()


def test_small_window_holds_bodies_back_until_window_update_and_never_overruns() -> None:
    # The server's stream window is 100 bytes: a 600-byte body must go out in window-sized pieces.
    conn, server = connect({SettingCodes.INITIAL_WINDOW_SIZE: 100})
    exchange(conn, server)
    push = make_push(1, payload=b"x" * 600)
    sid = conn.send(push, "big", 0.0)
    assert not conn.can_send()  # a body is waiting for window: no new stream meanwhile
    exchange(conn, server)  # the server acknowledges what it got -> WINDOW_UPDATEs -> more body
    assert server.bodies[sid] == push.payload and sid in server.complete
    assert conn.can_send()


def test_answer_before_the_body_is_complete_resets_our_half_of_the_stream() -> None:
    conn, server = connect({SettingCodes.INITIAL_WINDOW_SIZE: 100})
    exchange(conn, server)
    sid = conn.send(make_push(1, payload=b"x" * 600), "early", 0.0)
    server.feed(conn.data_to_send())  # the server has the headers and 100 bytes of body
    server.out()  # (drop its WINDOW_UPDATE: the answer alone must unblock the connection)
    server.answer(sid, 413, {"reason": "PayloadTooLarge"})
    outcomes = conn.receive_data(server.out(), 0.0)
    assert [(o.exchange, o.status) for o in outcomes if isinstance(o, Answered)] == [("early", 413)]
    server.feed(conn.data_to_send())
    assert sid in server.resets  # our half is closed, so the stream no longer counts against the limit
    assert conn.in_flight == 0 and conn.can_send()


def test_connection_window_exhaustion_waits_instead_of_raising() -> None:
    conn, server = connect()
    exchange(conn, server)
    # Never let the server read: the client must stop at the 65535-byte connection window.
    bodies = 0
    while conn.can_send():
        conn.send(make_push(bodies, payload=b"y" * 4000), bodies, 0.0)
        bodies += 1
    assert conn.send_window >= 0
    assert 16 <= bodies <= 17  # ~65535 / 4000, the last one partly sent
    exchange(conn, server)
    assert len(server.complete) == bodies


def test_goaway_requeues_streams_above_last_stream_id_and_still_takes_answers_below() -> None:
    conn, server = connect()
    exchange(conn, server)
    sids = [conn.send(make_push(i), f"p{i}", 0.0) for i in range(6)]
    exchange(conn, server)
    goaway = GoAwayFrame(0, last_stream_id=sids[2], error_code=0, additional_data=b'{"reason":"Shutdown"}')
    outcomes = conn.receive_data(goaway.serialize(), 0.0)
    requeued = {o.exchange for o in outcomes if isinstance(o, Unanswered)}
    assert requeued == {"p3", "p4", "p5"}
    assert all(not o.processed and o.cause == "goaway" for o in outcomes)
    assert conn.goaway is not None and conn.goaway.reason == "Shutdown"
    assert conn.state == "draining" and not conn.can_send()
    for sid in sids[:3]:
        server.answer(sid)
    answered = exchange(conn, server)
    assert {o.exchange for o in answered} == {"p0", "p1", "p2"}
    assert conn.state == "closed"


def test_error_goaway_gives_back_every_stream() -> None:
    conn, server = connect()
    exchange(conn, server)
    for i in range(3):
        conn.send(make_push(i), i, 0.0)
    frame = GoAwayFrame(0, last_stream_id=3, error_code=ErrorCodes.PROTOCOL_ERROR)
    outcomes = conn.receive_data(frame.serialize(), 0.0)
    assert sorted(o.exchange for o in outcomes) == [0, 1, 2]
    assert conn.state == "closed"


def test_refused_stream_comes_back_as_unprocessed() -> None:
    conn, server = connect()
    exchange(conn, server)
    sid = conn.send(make_push(1), "r", 0.0)
    exchange(conn, server)
    server.h2.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
    (outcome,) = exchange(conn, server)
    assert isinstance(outcome, Unanswered) and outcome.cause == "refused" and not outcome.processed


def test_deadline_cancels_the_stream_and_gives_the_push_back() -> None:
    conn, server = connect(request_timeout_s=5.0)
    exchange(conn, server)
    sid_a = conn.send(make_push(1), "a", 0.0)
    sid_b = conn.send(make_push(2), "b", 3.0)
    assert conn.next_deadline() == 5.0
    assert conn.expire(4.9) == []
    expired = conn.expire(5.0)
    assert [(o.exchange, o.cause) for o in expired] == [("a", "timeout")]
    assert conn.next_deadline() == 8.0
    exchange(conn, server)
    assert sid_a in server.resets and sid_b not in server.resets
    server.answer(sid_b)
    assert [o.exchange for o in exchange(conn, server)] == ["b"]


RULES = Liveness(idle_s=60.0, silence_s=3.0, ping_timeout_s=5.0)


def test_idle_connection_pings_and_notices_a_missing_ack() -> None:
    conn, server = connect()
    exchange(conn, server, now=0.0)
    assert conn.check(50.0, RULES).action == "ok" and conn.check(50.0, RULES).next_check == 60.0
    assert conn.check(61.0, RULES).action == "ping"
    conn.send_ping(61.0)
    assert conn.check(62.0, RULES).action == "ok" and conn.responsive(62.0, RULES.silence_s)
    assert not conn.responsive(64.5, RULES.silence_s), "a PING left unanswered makes the connection doubtful"
    assert conn.check(65.9, RULES).next_check == 66.0  # the PING's deadline
    exchange(conn, server, now=65.0)  # the ack, late but in time
    assert server.pings == 1 and conn.responsive(66.0, RULES.silence_s)
    assert conn.check(66.0, RULES).action == "ok" and conn.check(66.0, RULES).next_check == 125.0
    conn.send_ping(125.0)  # the next idle PING, never answered
    judged = conn.check(130.0, RULES)
    assert (judged.action, judged.cause) == ("retire", "ping_unanswered")


def test_requests_going_out_do_not_keep_a_silent_connection_alive() -> None:
    # A connection whose flow a NAT dropped: every push goes out, nothing ever comes back.
    conn, server = connect()
    exchange(conn, server, now=0.0)
    for second in range(1, 4):
        conn.send(make_push(second), second, float(second))  # one push a second, never answered
        assert conn.check(float(second), RULES).action == "ok"
    assert conn.silence(3.9) == pytest.approx(2.9) and conn.responsive(3.9, RULES.silence_s)
    judged = conn.check(4.0, RULES)
    assert (judged.action, judged.cause) == ("ping", "silent")
    assert not conn.responsive(4.0, RULES.silence_s), "silent while waiting: no new request goes there"
    conn.send_ping(4.0)
    assert conn.check(8.9, RULES).action == "ok" and conn.check(8.9, RULES).next_check == 9.0
    judged = conn.check(9.0, RULES)
    assert (judged.action, judged.cause) == ("retire", "ping_unanswered")


def test_answers_keep_a_busy_connection_alive_and_the_silence_clock_starts_when_waiting_begins() -> None:
    conn, server = connect()
    exchange(conn, server, now=0.0)
    assert conn.silence(100.0) == 0.0, "waiting for nothing is not silence"
    for second in range(100, 110):
        sid = conn.send(make_push(second), second, float(second))
        assert conn.silence(float(second)) == 0.0 or conn.silence(float(second)) < 1.0
        exchange(conn, server, now=float(second))
        server.answer(sid)
        exchange(conn, server, now=float(second) + 0.5)
        assert conn.check(float(second) + 0.5, RULES).action == "ok"
    assert conn.pings_sent == 0 and server.pings == 0


def test_a_request_past_its_deadline_counts_against_its_connection() -> None:
    conn, server = connect(request_timeout_s=2.0)
    exchange(conn, server, now=0.0)
    conn.send(make_push(1), 1, 0.0)
    exchange(conn, server, now=1.0)  # bytes heard (SETTINGS ack): not silent yet
    (expired,) = conn.expire(2.0)
    assert expired.cause == "timeout"
    judged = conn.check(2.0, RULES)
    assert (judged.action, judged.cause) == ("ping", "timeout"), (
        "a deadline asks at once whether anyone is there"
    )
    conn.send_ping(2.0)
    exchange(conn, server, now=2.1)  # the server acknowledges: it is alive, only slow
    assert conn.check(2.1, RULES).action == "ok"
    # Requests time out one after the other with no answer between them, although PINGs come back.
    for i in (2, 3):
        conn.send(make_push(i), i, 3.0)
        conn.expire(5.0 + i)
        exchange(conn, server, now=5.0 + i)
    assert conn.timeouts_since_answer == 3
    judged = conn.check(8.0, RULES)
    assert (judged.action, judged.cause) == ("retire", "requests_unanswered")


def test_an_answer_clears_the_timeouts_held_against_a_connection() -> None:
    conn, server = connect(request_timeout_s=2.0)
    exchange(conn, server, now=0.0)
    for i in (1, 2):
        conn.send(make_push(i), i, 0.0)
    conn.expire(2.0)
    assert conn.timeouts_since_answer == 2
    sid = conn.send(make_push(3), 3, 2.0)
    exchange(conn, server, now=2.0)
    server.answer(sid)
    exchange(conn, server, now=2.5)
    assert conn.timeouts_since_answer == 0 and conn.check(2.5, RULES).action in ("ok", "ping")


def test_a_draining_connection_that_hears_nothing_is_retired_without_a_ping() -> None:
    conn, server = connect()
    exchange(conn, server, now=0.0)
    conn.send(make_push(1), 1, 0.0)
    conn.start_draining()  # no PING can be asked of it
    assert conn.check(4.0, RULES).action == "ok"
    judged = conn.check(8.0, RULES)
    assert (judged.action, judged.cause) == ("retire", "silent")


def test_connection_lost_returns_every_unanswered_push() -> None:
    conn, server = connect()
    exchange(conn, server)
    for i in range(4):
        conn.send(make_push(i), i, 0.0)
    orphans = conn.connection_lost()
    assert sorted(o.exchange for o in orphans) == [0, 1, 2, 3] and all(o.cause == "lost" for o in orphans)
    assert conn.state == "closed" and not conn.can_send()


def test_token_switch_sends_the_new_authorization() -> None:
    conn, server = connect()
    exchange(conn, server)
    sid1 = conn.send(make_push(1), 1, 0.0)
    conn.use_token(TOKEN2)
    sid2 = conn.send(make_push(2), 2, 0.0)
    exchange(conn, server)
    assert server.requests[sid1]["authorization"] == "bearer " + TOKEN.jwt
    assert server.requests[sid2]["authorization"] == "bearer " + TOKEN2.jwt


@pytest.mark.parametrize("table_size", [0, 64, 300, 4096, 65536])
def test_server_header_table_size_is_respected(table_size: int) -> None:
    conn, server = connect({SettingCodes.HEADER_TABLE_SIZE: table_size})
    exchange(conn, server)
    sids = [conn.send(make_push(i, priority=10 if i % 2 else 5), i, 0.0) for i in range(20)]
    exchange(conn, server)
    assert all(server.requests[sid][":path"] == f"/3/device/{i:064x}" for i, sid in enumerate(sids))
    assert all(
        server.requests[sid]["apns-priority"] == ("10" if i % 2 else "5") for i, sid in enumerate(sids)
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("resize"), st.sampled_from([0, 40, 100, 250, 500, 1000, 4096, 8192])),
            st.tuples(
                st.just("req"),
                st.tuples(
                    st.sampled_from([b"bearer aaa", b"bearer " + b"b" * 200, b"bearer c"]),
                    st.sampled_from([b"com.a", b"com.b.push-type.liveactivity"]),
                    st.sampled_from([b"5", b"10"]),
                    st.binary(min_size=1, max_size=20),
                ),
            ),
        ),
        max_size=40,
    )
)
def test_encoder_stays_in_step_with_an_independent_hpack_decoder(ops: list[tuple[str, object]]) -> None:
    encoder = RequestHeaderEncoder()
    decoder = hpack.Decoder()
    pseudo = ((b":method", b"POST"), (b":scheme", b"https"), (b":authority", b"h:443"))
    limit = 4096
    for op, arg in ops:
        if op == "resize":
            assert isinstance(arg, int)
            limit = arg  # the decoder's SETTINGS_HEADER_TABLE_SIZE
            decoder.max_allowed_table_size = arg
            encoder.header_table_size = arg
            continue
        auth, topic, prio, path = arg  # type: ignore[misc]
        constant = ((b"authorization", auth), (b"apns-topic", topic), (b"apns-priority", prio))
        block = bytearray()
        encoder.start_block(block)
        encoder.encode_constant(pseudo, block)
        block += b"\x04" + bytes([len(path)]) + path  # literal :path, as ApnsConnection writes it
        encoder.encode_constant(constant, block)
        decoded = decoder.decode(bytes(block), raw=True)
        assert decoded == [*pseudo, (b":path", path), *constant]
        # A shrink must have been signalled, so the decoder never holds more than its setting allows.
        assert decoder.header_table.maxsize <= limit


WANTED = {b":status", b"apns-id", b"content-length"}
header_names = st.sampled_from(
    [
        b":status",
        b"apns-id",
        b"apns-unique-id",
        b"content-length",
        b"server",
        b"date",
        b"x-custom",
        b"x-" + b"n" * 150,
    ]
)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.lists(st.tuples(header_names, st.binary(min_size=0, max_size=300)), max_size=6), max_size=10),
    st.booleans(),
)
def test_response_decoder_agrees_with_hpack_on_the_fields_it_reads(
    blocks: list[list[tuple[bytes, bytes]]], huffman: bool
) -> None:
    # The server's encoder obeys our SETTINGS_HEADER_TABLE_SIZE of 0, as h2 makes it do.
    encoder = hpack.Encoder()
    encoder.header_table_size = 0
    reference = hpack.Decoder()
    reference.max_allowed_table_size = 0
    ours = ResponseHeaderDecoder()
    for fields in blocks:
        block = encoder.encode(fields, huffman=huffman)
        expected = reference.decode(block, raw=True)
        got = ours.decode(block)
        wanted = [f for f in expected if f[0] in WANTED]
        if (b":status", b"200") in wanted[:1]:
            wanted = [f for f in wanted if f[0] != b"apns-id"]  # not decoded after a 200
        assert got == wanted


def test_response_decoder_refuses_dynamic_table_references_and_growth() -> None:
    import h2.exceptions

    decoder = ResponseHeaderDecoder()
    with pytest.raises(h2.exceptions.ProtocolError, match="index 62"):
        decoder.decode(b"\xbe")  # indexed field 62: the first dynamic entry
    with pytest.raises(h2.exceptions.ProtocolError, match="above 0"):
        decoder.decode(b"\x3f\xe1\x1f")  # size update to 4096
    with pytest.raises(h2.exceptions.ProtocolError, match="truncated"):
        decoder.decode(b"\x40\x05ab")


def test_client_advertises_a_zero_header_table_and_no_push() -> None:
    conn, server = connect()
    exchange(conn, server)
    assert server.h2.remote_settings.header_table_size == 0
    assert server.h2.remote_settings.enable_push == 0


def _window_update(stream_id: int, increment: int) -> bytes:
    return (
        (4).to_bytes(3, "big") + bytes([0x8, 0]) + stream_id.to_bytes(4, "big") + increment.to_bytes(4, "big")
    )


def test_window_updates_credit_the_connection_and_open_streams_and_ignore_closed_ones() -> None:
    conn, server = connect({SettingCodes.INITIAL_WINDOW_SIZE: 100})
    exchange(conn, server)
    before = conn.send_window
    conn.receive_data(_window_update(0, 5000), 0.0)
    assert conn.send_window == before + 5000
    done = conn.send(make_push(1), "done", 0.0)
    exchange(conn, server)
    server.answer(done)
    exchange(conn, server)
    sid = conn.send(make_push(2, payload=b"x" * 600), "big", 0.0)
    server.feed(conn.data_to_send())  # headers and the first 100 bytes; the server's credit is dropped
    server.out()
    assert conn.receive_data(_window_update(done, 1000), 0.0) == []  # a closed stream: ignored, as h2 does
    assert len(conn.data_to_send()) < 100  # no credit, no more body
    conn.receive_data(_window_update(sid, 1000), 0.0)  # credit for the open stream: the other 500 bytes go
    rest = conn.data_to_send()
    assert 500 <= len(rest) < 600 and rest.endswith(b"x" * 500)


def test_a_zero_window_increment_is_a_protocol_error() -> None:
    conn, server = connect()
    exchange(conn, server)
    with pytest.raises(h2.exceptions.ProtocolError):
        conn.receive_data(_window_update(0, 0), 0.0)


def test_an_answer_that_crosses_our_timeout_reset_is_dropped_and_the_connection_goes_on() -> None:
    # The server answers a stream we have just given up on, before our RST_STREAM reaches it. That late
    # HEADERS takes h2's own path (the stream is closed), whose HPACK decoder must agree with ours about the
    # peer's (zero-size) table, or the connection dies of a compression error (seen in the soak).
    conn, server = connect(request_timeout_s=5.0)
    exchange(conn, server)
    for i in range(3):  # answers through our fast path first
        sid = conn.send(make_push(i), f"warm{i}", 0.0)
        exchange(conn, server)
        server.answer(sid)
        exchange(conn, server)
    late = conn.send(make_push(10), "late", 0.0)
    server.feed(conn.data_to_send())
    assert [o.cause for o in conn.expire(5.0)] == ["timeout"]  # our reset is queued, not yet delivered
    server.answer(late)
    assert conn.receive_data(server.out(), 5.0) == []  # the crossed answer: dropped, no protocol error
    sid = conn.send(make_push(11), "next", 5.0)
    exchange(conn, server)
    server.answer(sid)
    assert [o.exchange for o in exchange(conn, server)] == ["next"]


def test_a_window_increment_of_only_the_reserved_bit_is_a_protocol_error_too() -> None:
    conn, server = connect()
    exchange(conn, server)
    with pytest.raises(h2.exceptions.ProtocolError):
        conn.receive_data(_window_update(0, 0x80000000), 0.0)


@settings(max_examples=200, deadline=None)
@given(
    st.floats(0.0, 1e6, allow_nan=False),
    st.floats(0.001, 10.0, allow_nan=False),
    st.sampled_from(["ping", "busy", "idle", "draining"]),
)
def test_a_look_at_the_moment_check_named_finds_that_moment_come(
    start: float, step: float, case: str
) -> None:
    # check() names when to look again; looking exactly then must move on (a PING sent, a retirement, or a
    # later moment), or a watchdog under a virtual clock looks again and again without time passing. In
    # floating point ``a + b - a`` can fall short of ``b`` (a PING sent at 3.005 s: 8.005 - 3.005 < 5).
    rules = Liveness(idle_s=60.0 * step, silence_s=3.0 * step, ping_timeout_s=5.0 * step)
    conn, server = connect()
    exchange(conn, server, now=start)
    if case != "idle":
        conn.send(make_push(1), "a", start)
    if case == "ping":
        conn.send_ping(start + step)
    if case == "draining":
        conn.start_draining()
    now = start + step / 3
    for _ in range(4):
        judged = conn.check(now, rules)
        if judged.action != "ok":
            return
        assert judged.next_check > now
        now = judged.next_check
        again = conn.check(now, rules)
        assert again.action != "ok" or again.next_check > now
