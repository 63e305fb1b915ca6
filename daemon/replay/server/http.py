"""The replay server's HTTP/1.1 side: trio + h11, keep-alive, bounded requests, and the response type.

One connection is a loop of request -> ``handle`` -> response until the peer closes, goes idle for
``IDLE_TIMEOUT_S`` or breaks the protocol. What a request means is not this module's business: it calls the
handler it is given. A response may ask to be held (a timeout fault), to drop the connection unanswered (a
disconnect fault) or to stop the server once sent (``POST /replay/stop``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import h11
import trio

from daemon.replay.errors import ReplayError

# A request head larger than this is refused (h11 answers 431-style); 16 KiB is what nginx allows per
# header buffer by default and far above any SportMonks query this daemon sends.
MAX_HEAD_BYTES = 16 * 1024
MAX_BODY_BYTES = 64 * 1024  # only fault specs arrive with a body
IDLE_TIMEOUT_S = 60.0


class ReplayRequestError(ReplayError, ValueError):
    """A bad control or data request; becomes a 4xx with this message."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    hold_s: float = 0.0
    disconnect: bool = False
    stop_after: bool = False


def encode_json(value: Any) -> bytes:
    """Compact JSON with ``/`` escaped as ``\\/`` as SportMonks (PHP json_encode) does; ``/`` only occurs
    inside strings, so a plain replace is exact."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).replace("/", "\\/").encode()


def error_body(message: str, status: int) -> bytes:
    # The real error shape is undocumented (spec §4); clients only rely on "non-2xx or no `data`".
    return encode_json({"message": message, "error": {"message": message, "code": status}})


def json_response(value: Any) -> Response:
    return Response(200, encode_json(value), [("content-type", "application/json")])


def error_response(message: str, status: int) -> Response:
    return Response(status, error_body(message, status), [("content-type", "application/json")])


# (method, target, body, host) -> the response to send
Handler = Callable[[str, str, bytes, str], Awaitable[Response]]


async def serve_connection(stream: trio.SocketStream, handle: Handler, on_stop: Callable[[], None]) -> None:
    """Serve one client connection until it closes; ``on_stop`` runs after a response that asks for it."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    try:
        while True:
            request, body = await _read_request(conn, stream)
            if request is None:
                return
            host = next((v.decode("latin-1") for k, v in request.headers if k == b"host"), "localhost")
            response = await handle(
                request.method.decode("ascii", "replace"), request.target.decode("latin-1"), body, host
            )
            if response.hold_s:
                await trio.sleep(response.hold_s)
            if response.disconnect:
                return
            await _send(conn, stream, response)
            if response.stop_after:
                on_stop()
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()
    except h11.RemoteProtocolError as exc:
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            status = exc.error_status_hint if 400 <= exc.error_status_hint < 500 else 400
            with _Quiet():
                await _send(conn, stream, Response(status, error_body(f"bad request: {exc}", status)))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return
    finally:
        with _Quiet():
            await stream.aclose()


async def _read_request(conn: h11.Connection, stream: trio.SocketStream) -> tuple[h11.Request | None, bytes]:
    request: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            with trio.move_on_after(IDLE_TIMEOUT_S) as idle:
                data = await stream.receive_some(65536)
            if idle.cancelled_caught:
                return None, b""
            conn.receive_data(data)
        elif isinstance(event, h11.Request):
            # h11 bounds a head only while it is incomplete; one that arrived whole is checked here
            size = len(event.target) + sum(len(k) + len(v) + 4 for k, v in event.headers)
            if size > MAX_HEAD_BYTES:
                msg = f"request head over {MAX_HEAD_BYTES} bytes"
                await _send(conn, stream, Response(431, error_body(msg, 431), [("connection", "close")]))
                return None, b""
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY_BYTES:
                msg = f"request body over {MAX_BODY_BYTES} bytes"
                await _send(conn, stream, Response(413, error_body(msg, 413), [("connection", "close")]))
                return None, b""
        elif isinstance(event, h11.EndOfMessage):
            return request, bytes(body)
        else:  # ConnectionClosed or PAUSED
            return None, b""


async def _send(conn: h11.Connection, stream: trio.SocketStream, response: Response) -> None:
    headers = [
        ("server", "sightscreen-replay"),
        ("content-length", str(len(response.body))),
        *response.headers,
    ]
    if not any(k == "content-type" for k, _ in response.headers):
        headers.append(("content-type", "application/json"))
    out = conn.send(h11.Response(status_code=response.status, headers=headers))
    out += conn.send(h11.Data(data=response.body))
    out += conn.send(h11.EndOfMessage())
    await stream.send_all(out)


class _Quiet:
    """Swallow the errors of writing to / closing a peer that already left."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return exc_type is not None and issubclass(
            exc_type, trio.BrokenResourceError | trio.ClosedResourceError | h11.LocalProtocolError
        )
