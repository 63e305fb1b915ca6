"""Fixtures for APNs tests: the project's APNs server running in the test's nursery, its CA, a signing key.

Also a deliberately small HTTP/2 test client (``H2TestClient``), independent of the daemon's sender, so the
server's behaviour is checked against a second implementation of the protocol (h2 in client mode).

Fixtures others use:
- ``signing_key`` (``SigningKeyPair``), ``team_id``, ``bundle_id``, ``provider_token`` (fresh JWT)
- ``apns_server``: a running ``ApnsTestServer`` (defaults: team_id, signing_key, bundle_id); ``.port``,
  ``.ca_file``, ``.ssl_context_for_clients()``, ``.records``, ``.script(...)``
- ``start_apns_server``: ``await start_apns_server(**overrides)`` for servers with other settings
- ``apns_ca_file``: the running server's CA PEM path
- ``open_client``: ``async with open_client(server) as client`` -> ``H2TestClient``
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import pytest
import trio

from daemon.apns.certs import SigningKeyPair, generate_signing_key, make_provider_token
from daemon.apns.server import ApnsTestServer

TEAM_ID = "TEAM000001"
BUNDLE_ID = "com.sightscreen.app"
LA_TOPIC = BUNDLE_ID + ".push-type.liveactivity"
TOKEN = "ab" * 80  # Live Activity update tokens are 160 hex characters (spec §1.2)


@dataclass
class H2Response:
    stream_id: int
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    reset_code: int | None = None  # RST_STREAM error code, when the server reset the stream

    @property
    def reason(self) -> str | None:
        if not self.body:
            return None
        return json.loads(self.body).get("reason")

    def json(self) -> Any:
        return json.loads(self.body)


class H2TestClient:
    """A minimal h2 client: waits for SETTINGS, sends requests within flow-control windows, keeps events."""

    def __init__(self, stream: trio.SSLStream[trio.SocketStream]) -> None:
        self.stream = stream
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self.settings_received = trio.Event()
        self.closed = trio.Event()
        self.max_streams_seen: list[int] = []
        self.goaway: h2.events.ConnectionTerminated | None = None
        self.goaway_event = trio.Event()
        self.protocol_error: Exception | None = None
        self.responses: dict[int, H2Response] = {}
        self.done: dict[int, trio.Event] = {}
        self.changed = trio.Event()
        self._lock = trio.StrictFIFOLock()

    @property
    def max_streams(self) -> int:
        return self.h2.remote_settings.max_concurrent_streams

    async def flush(self) -> None:
        async with self._lock:
            data = self.h2.data_to_send()
            if data:
                await self.stream.send_all(data)

    def _poke(self) -> None:
        event, self.changed = self.changed, trio.Event()
        event.set()

    async def reader(self) -> None:
        try:
            while True:
                try:
                    data = await self.stream.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return
                if not data:
                    return
                try:
                    events = self.h2.receive_data(data)
                except h2.exceptions.ProtocolError as exc:
                    self.protocol_error = exc
                    return
                for event in events:
                    self._handle(event)
                try:
                    await self.flush()
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return
                self._poke()
        finally:
            self.closed.set()
            for event in self.done.values():
                event.set()
            self._poke()

    def _handle(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RemoteSettingsChanged):
            changed = event.changed_settings.get(h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS)
            if changed is not None:
                self.max_streams_seen.append(changed.new_value)
            self.settings_received.set()
        elif isinstance(event, h2.events.ResponseReceived):
            resp = self.responses[event.stream_id]
            resp.headers = dict(event.headers)  # type: ignore[arg-type]
            resp.status = int(resp.headers[":status"])
        elif isinstance(event, h2.events.DataReceived):
            self.responses[event.stream_id].body += event.data
            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            self.done[event.stream_id].set()
        elif isinstance(event, h2.events.StreamReset):
            if event.stream_id in self.responses:
                self.responses[event.stream_id].reset_code = event.error_code
                self.done[event.stream_id].set()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.goaway = event
            self.goaway_event.set()

    async def start_request(
        self, path: str, headers: dict[str, str] | None = None, body: bytes = b"", *, method: str = "POST"
    ) -> int:
        """Open a stream (waiting for a free stream slot) and send the whole body within the windows."""
        await self.settings_received.wait()
        while self.h2.open_outbound_streams >= self.max_streams:
            if self.closed.is_set():
                raise ConnectionError("connection closed")
            await self.changed.wait()
        sid = self.h2.get_next_available_stream_id()
        all_headers = [
            (":method", method),
            (":path", path),
            (":scheme", "https"),
            (":authority", "localhost"),
        ]
        all_headers += list((headers or {}).items())
        self.responses[sid] = H2Response(sid)
        self.done[sid] = trio.Event()
        self.h2.send_headers(sid, all_headers, end_stream=not body)
        await self.flush()
        view = memoryview(body)
        while view:
            room = min(self.h2.local_flow_control_window(sid), self.h2.max_outbound_frame_size, len(view))
            if room <= 0:
                if self.closed.is_set():
                    raise ConnectionError("connection closed while waiting for window")
                await self.changed.wait()
                continue
            chunk, view = view[:room], view[room:]
            self.h2.send_data(sid, bytes(chunk), end_stream=not view)
            await self.flush()
        return sid

    async def start_batch(self, requests: list[tuple[str, dict[str, str], bytes]]) -> list[int]:
        """Open several streams and send them in one write (bodies must fit the current windows)."""
        await self.settings_received.wait()
        sids = []
        for path, headers, body in requests:
            sid = self.h2.get_next_available_stream_id()
            all_headers = [
                (":method", "POST"),
                (":path", path),
                (":scheme", "https"),
                (":authority", "localhost"),
            ]
            self.responses[sid] = H2Response(sid)
            self.done[sid] = trio.Event()
            self.h2.send_headers(sid, all_headers + list(headers.items()), end_stream=not body)
            if body:
                self.h2.send_data(sid, body, end_stream=True)
            sids.append(sid)
        await self.flush()
        return sids

    async def response(self, sid: int) -> H2Response:
        await self.done[sid].wait()
        return self.responses[sid]

    async def request(
        self, path: str, headers: dict[str, str] | None = None, body: bytes = b"", *, method: str = "POST"
    ) -> H2Response:
        return await self.response(await self.start_request(path, headers, body, method=method))

    async def control(self, method: str, path: str, body: Any = None) -> H2Response:
        data = json.dumps(body).encode() if body is not None else b""
        return await self.request(
            path, {"content-type": "application/json"} if data else {}, data, method=method
        )


@asynccontextmanager
async def open_h2_client(
    port: int, ctx: ssl.SSLContext, host: str = "127.0.0.1"
) -> AsyncIterator[H2TestClient]:
    tcp = await trio.open_tcp_stream(host, port)
    tls = trio.SSLStream(tcp, ctx, server_hostname="localhost", https_compatible=True)
    await tls.do_handshake()
    assert tls.selected_alpn_protocol() == "h2"
    client = H2TestClient(tls)
    client.h2.initiate_connection()
    await client.flush()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.reader)
            with trio.fail_after(5):
                await client.settings_received.wait()
            try:
                yield client
            finally:
                nursery.cancel_scope.cancel()
    finally:
        await trio.aclose_forcefully(tls)


def push_headers(
    provider_token: str | None,
    *,
    push_type: str = "liveactivity",
    topic: str | None = None,
    priority: str | None = "10",
    **extra: str,
) -> dict[str, str]:
    headers: dict[str, str] = {"apns-push-type": push_type}
    if topic is None:
        topic = LA_TOPIC if push_type == "liveactivity" else BUNDLE_ID
    if topic:
        headers["apns-topic"] = topic
    if priority is not None:
        headers["apns-priority"] = priority
    if provider_token is not None:
        headers["authorization"] = f"bearer {provider_token}"
    headers.update({k.replace("_", "-"): v for k, v in extra.items()})
    return headers


def la_payload(event: str = "update", *, runs: int = 120, pad: int = 0) -> bytes:
    aps: dict[str, Any] = {
        "timestamp": int(time.time()),
        "event": event,
        "content-state": {"score": f"{runs}/3", "overs": "14.2", "note": "x" * pad},
    }
    if event == "start":
        aps.update(
            {
                "attributes-type": "MatchAttributes",
                "attributes": {"matchId": 1},
                "alert": {"title": "Live", "body": "Match started"},
            }
        )
    return json.dumps({"aps": aps}).encode()


@pytest.fixture(scope="session")
def signing_key() -> SigningKeyPair:
    return generate_signing_key("KEY0000001")


@pytest.fixture
def team_id() -> str:
    return TEAM_ID


@pytest.fixture
def bundle_id() -> str:
    return BUNDLE_ID


@pytest.fixture
def provider_token(signing_key: SigningKeyPair) -> str:
    return make_provider_token(signing_key, TEAM_ID)


@pytest.fixture
def apns_engine() -> str:
    """The server's HTTP/2 engine; the server's own test modules run every test on "h2" and "lean"."""
    return "h2"


@pytest.fixture
def start_apns_server(
    nursery: trio.Nursery, signing_key: SigningKeyPair, apns_engine: str
) -> Callable[..., Awaitable[ApnsTestServer]]:
    async def start(**overrides: Any) -> ApnsTestServer:
        kwargs: dict[str, Any] = {
            "team_id": TEAM_ID,
            "keys": {signing_key.key_id: signing_key.public_pem},
            "topics": [BUNDLE_ID],
            "engine": apns_engine,
        }
        kwargs.update(overrides)
        server = ApnsTestServer(**kwargs)
        await nursery.start(server.serve)
        return server

    return start


@pytest.fixture
async def apns_server(start_apns_server: Callable[..., Awaitable[ApnsTestServer]]) -> ApnsTestServer:
    return await start_apns_server()


@pytest.fixture
def apns_ca_file(apns_server: ApnsTestServer) -> str:
    return apns_server.ca_file


@pytest.fixture
def open_client() -> Callable[..., Any]:
    def opener(server: ApnsTestServer) -> Any:
        return open_h2_client(server.port, server.ssl_context_for_clients())

    return opener
