"""An in-memory HTTP/2 peer for the sans-I/O connection's tests: h2's own server side, with inbound validation
on, so a drift in our request path shows up as an h2 protocol error; and the pushes and provider tokens the
tests send."""

from __future__ import annotations

import json

import h2.config
import h2.connection
import h2.events

from daemon.apns.connection import ApnsConnection
from daemon.apns.token import ProviderToken
from daemon.apns.types import Push

TOKEN = ProviderToken(team_id="TEAM123456", key_id="KEY1234567", issued_at=1000, jwt="eyJhbGciOi.x.y")
TOKEN2 = ProviderToken(team_id="TEAM123456", key_id="KEY1234567", issued_at=2000, jwt="eyJhbGciOi.z.w")


def make_push(i: int = 0, **kw: object) -> Push:
    base: dict[str, object] = {
        "token": f"{i:064x}",
        "push_type": "liveactivity",
        "topic": "com.example.app",
        "payload": b'{"aps":{"event":"update"}}',
        "priority": 5,
    }
    base.update(kw)
    return Push(**base)  # type: ignore[arg-type]


class ServerPeer:
    """h2's server connection with inbound validation on; records what it got."""

    def __init__(self, settings: dict[int, int] | None = None) -> None:
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        self.h2.initiate_connection()
        if settings:
            self.h2.update_settings(settings)
        self.requests: dict[int, dict[str, str]] = {}
        self.bodies: dict[int, bytes] = {}
        self.complete: list[int] = []
        self.resets: dict[int, int] = {}  # stream id -> error code
        self.pings = 0

    def feed(self, data: bytes) -> None:
        for event in self.h2.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                self.requests[event.stream_id] = dict(event.headers)
                self.bodies[event.stream_id] = b""
            elif isinstance(event, h2.events.DataReceived):
                self.bodies[event.stream_id] += event.data
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.complete.append(event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                self.resets[event.stream_id] = event.error_code
            elif isinstance(event, h2.events.PingReceived):
                self.pings += 1

    def answer(self, stream_id: int, status: int = 200, body: dict[str, object] | None = None) -> None:
        headers = [(":status", str(status)), ("apns-id", f"00000000-0000-0000-0000-{stream_id:012d}")]
        if body is None:
            self.h2.send_headers(stream_id, headers, end_stream=True)
        else:
            self.h2.send_headers(stream_id, headers)
            self.h2.send_data(stream_id, json.dumps(body).encode(), end_stream=True)

    def out(self) -> bytes:
        return self.h2.data_to_send()


def connect(settings: dict[int, int] | None = None, **kw: object) -> tuple[ApnsConnection, ServerPeer]:
    conn = ApnsConnection("api.example.test:443", **kw)  # type: ignore[arg-type]
    conn.initiate(0.0)
    conn.use_token(TOKEN)
    server = ServerPeer(settings)
    server.feed(conn.data_to_send())
    return conn, server


def exchange(conn: ApnsConnection, server: ServerPeer, now: float = 0.0) -> list[object]:
    """Shuttle bytes both ways until quiet; returns the client's outcomes."""
    outcomes: list[object] = []
    for _ in range(20):
        to_server = conn.data_to_send()
        if to_server:
            server.feed(to_server)
        to_client = server.out()
        if to_client:
            outcomes.extend(conn.receive_data(to_client, now))
        if not to_server and not to_client:
            break
    return outcomes
