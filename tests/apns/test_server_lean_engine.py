"""The lean HTTP/2 engine without sockets, checked against h2 as an independent client implementation."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import pytest
from hyperframe.frame import DataFrame, HeadersFrame, PingFrame, PriorityFrame

from daemon.apns.server import LeanH2Connection

REQUEST = [
    (":method", "POST"),
    (":path", "/3/device/abcd"),
    (":scheme", "https"),
    (":authority", "localhost"),
]


def pair(settings: dict[int, int] | None = None) -> tuple[h2.connection.H2Connection, LeanH2Connection, list]:
    """An h2 client and a lean server, SETTINGS exchanged; returns them and the server's events so far."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    server = LeanH2Connection()
    values = {h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 10, **(settings or {})}
    server.local_settings = h2.settings.Settings(client=False, initial_values=values)
    server.initiate_connection()
    client.initiate_connection()
    events = server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    events += server.receive_data(client.data_to_send())
    return client, server, events


def test_settings_exchange_reaches_the_client_and_is_acknowledged():
    client, server, events = pair({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1000})
    assert client.remote_settings.max_concurrent_streams == 10
    assert client.remote_settings.initial_window_size == 1000
    assert any(isinstance(e, h2.events.SettingsAcknowledged) for e in events)
    assert any(isinstance(e, h2.events.RemoteSettingsChanged) for e in events)


def test_request_and_response_round_trip_with_body_and_error_answer():
    client, server, _ = pair()
    client.send_headers(1, REQUEST)
    client.send_data(1, b'{"aps":{}}', end_stream=True)
    events = server.receive_data(client.data_to_send())
    kinds = [type(e) for e in events]
    assert kinds == [h2.events.RequestReceived, h2.events.DataReceived, h2.events.StreamEnded]
    assert dict(events[0].headers)[b":path"] == b"/3/device/abcd"
    assert events[1].data == b'{"aps":{}}'
    server.send_headers(1, [(b":status", b"410"), (b"content-type", b"application/json")])
    server.send_data(1, b'{"reason":"Unregistered"}', end_stream=True)
    answer = client.receive_data(server.data_to_send())
    response = next(e for e in answer if isinstance(e, h2.events.ResponseReceived))
    assert dict(response.headers)[b":status"] == b"410"
    assert (
        b"".join(e.data for e in answer if isinstance(e, h2.events.DataReceived))
        == b'{"reason":"Unregistered"}'
    )
    assert any(isinstance(e, h2.events.StreamEnded) for e in answer)
    assert server.streams == {}


def test_padding_priority_and_ping_are_handled():
    client, server, _ = pair()
    client.send_headers(1, REQUEST, priority_weight=200)  # HEADERS with the PRIORITY flag
    client.send_data(1, b"hello", end_stream=True, pad_length=7)
    data = client.data_to_send()
    data += PriorityFrame(3, depends_on=1).serialize() + PingFrame(0, opaque_data=b"12345678").serialize()
    events = server.receive_data(data)
    assert dict(events[0].headers)[b":method"] == b"POST"
    body = next(e for e in events if isinstance(e, h2.events.DataReceived))
    assert body.data == b"hello" and body.flow_controlled_length == 13
    pong = client.receive_data(server.data_to_send())
    assert any(isinstance(e, h2.events.PingAckReceived) and e.ping_data == b"12345678" for e in pong)


def test_header_block_split_over_continuation_frames_is_reassembled():
    client, server, _ = pair()
    server.decoder.max_header_list_size = 1 << 16
    big = [*REQUEST, ("x-filler", "v" * 20000)]  # more than one 16 KiB frame
    client.send_headers(1, big, end_stream=True)
    events = server.receive_data(client.data_to_send())
    assert dict(events[0].headers)[b"x-filler"] == b"v" * 20000
    assert isinstance(events[-1], h2.events.StreamEnded)


def test_window_updates_let_a_body_larger_than_the_window_through():
    client, server, _ = pair({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1000})
    client.send_headers(1, REQUEST)
    body, received = b"z" * 3000, b""
    while True:
        room = min(client.local_flow_control_window(1), len(body) - len(received))
        if room:
            client.send_data(
                1, body[len(received) : len(received) + room], end_stream=len(received) + room == 3000
            )
        for event in server.receive_data(client.data_to_send()):
            if isinstance(event, h2.events.DataReceived):
                received += event.data
                server.acknowledge_received_data(event.flow_controlled_length, 1)
        client.receive_data(server.data_to_send())
        if len(received) == 3000:
            break
    assert received == body


def test_data_beyond_the_window_is_a_flow_control_error_with_goaway():
    client, server, _ = pair({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1000})
    client.send_headers(1, REQUEST)
    raw = client.data_to_send() + DataFrame(1, data=b"x" * 1500).serialize()
    with pytest.raises(h2.exceptions.FlowControlError):
        server.receive_data(raw)
    terminated = [
        e for e in client.receive_data(server.data_to_send()) if isinstance(e, h2.events.ConnectionTerminated)
    ]
    assert terminated[0].error_code == h2.errors.ErrorCodes.FLOW_CONTROL_ERROR


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (DataFrame(5, data=b"x").serialize(), h2.exceptions.ProtocolError),  # DATA on an idle stream
        (HeadersFrame(2, data=b"\x82", flags=["END_HEADERS"]).serialize(), h2.exceptions.ProtocolError),
        (b"\x00\x40\x01\x00\x00\x00\x00\x00\x01" + b"\x00" * 0x4001, h2.exceptions.FrameTooLargeError),
    ],
)
def test_malformed_traffic_is_a_protocol_error(raw, error):
    _, server, _ = pair()
    with pytest.raises(error):
        server.receive_data(raw)
    assert server.data_to_send()[3] == 7  # a GOAWAY frame went out


def test_bad_preface_is_refused():
    server = LeanH2Connection()
    with pytest.raises(h2.exceptions.ProtocolError):
        server.receive_data(b"GET / HTTP/1.1\r\n\r\n")


def test_sending_on_a_finished_stream_raises_stream_closed():
    client, server, _ = pair()
    client.send_headers(1, REQUEST, end_stream=True)
    server.receive_data(client.data_to_send())
    server.send_headers(1, [(b":status", b"200")], end_stream=True)
    with pytest.raises(h2.exceptions.StreamClosedError):
        server.send_headers(1, [(b":status", b"200")], end_stream=True)


def test_client_reset_is_reported_and_stream_forgotten():
    client, server, _ = pair()
    client.send_headers(1, REQUEST)
    server.receive_data(client.data_to_send())
    client.reset_stream(1, h2.errors.ErrorCodes.CANCEL)
    events = server.receive_data(client.data_to_send())
    assert (
        isinstance(events[0], h2.events.StreamReset) and events[0].error_code == h2.errors.ErrorCodes.CANCEL
    )
    assert 1 not in server.streams


def test_header_list_over_8000_bytes_is_refused_as_h2_does():
    client, server, _ = pair()
    client.send_headers(1, [*REQUEST, ("x-filler", "v" * 9000)], end_stream=True)
    with pytest.raises(h2.exceptions.DenialOfServiceError):
        server.receive_data(client.data_to_send())
