"""The API on the wire, as a slow or malformed client meets it: hypercorn on trio over real sockets, every
refusal in the JSON error shape (the HTTP parser's own 400 and 431 included), and every connection bounded
by ``[api]``'s timeouts (head, body, idle keep-alive, answers a client does not take).

The timeouts are set short here (half a second) and the keep-alive or the others long, so which bound cut
a connection is told by which one could have: nothing asserts on how long anything took.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from daemon.api.server import ApiServer
from daemon.api.settings import ApiSettings, AuthSettings
from daemon.api.transport import ConnectionClock, parser_refusal
from daemon.demo.issuer import LocalIssuer
from daemon.metrics import API_CONNECTIONS_CUT, API_REFUSED
from tests.api.conftest import seed_matches

LONG = 60.0


@asynccontextmanager
async def served(repos: Any, issuer: LocalIssuer, **api: Any) -> AsyncIterator[ApiServer]:
    settings = ApiSettings(listen="127.0.0.1:0", shutdown_grace_s=1.0, **api)
    auth = AuthSettings(issuer=issuer.issuer, jwks_url=issuer.jwks_url, client_ids=[issuer.client_id])
    server = ApiServer(repos, settings, auth)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        try:
            yield server
        finally:
            server.stop()
            nursery.cancel_scope.deadline = trio.current_time() + 5


async def connect(server: ApiServer) -> trio.SocketStream:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    return await trio.open_tcp_stream(host, int(port))


async def read_answer(stream: trio.SocketStream) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 answer framed by Content-Length: (status, headers, body)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = await stream.receive_some(65536)
        assert chunk, f"closed before an answer: {buf!r}"
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = await stream.receive_some(65536)
        assert chunk
        rest += chunk
    return int(lines[0].split()[1]), headers, rest[:length]


async def closed(stream: trio.SocketStream) -> bool:
    """True once the server closed the connection (EOF or a reset), reading whatever came before."""
    try:
        while True:
            if not await stream.receive_some(65536):
                return True
    except trio.BrokenResourceError:
        return True


def counter(metric: Any, reason: str) -> Callable[[], float]:
    child = metric.labels(reason)
    return lambda: float(child._value.get())


def error_of(body: bytes) -> dict[str, Any]:
    error: dict[str, Any] = json.loads(body)["error"]
    return error


async def test_the_parsers_own_431_and_400_carry_the_error_shape(repos: Any, issuer: LocalIssuer) -> None:
    too_large = counter(API_REFUSED, "headers_too_large")
    before = too_large()
    async with served(repos, issuer) as server:
        stream = await connect(server)
        # a head past [api].max_header_bytes (16 KiB); the 1 MB is the same refusal, sooner
        await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000)
        status, headers, body = await read_answer(stream)
        assert status == 431 and headers["content-type"] == "application/json"
        assert error_of(body) == {
            "status": 431,
            "code": "headers_too_large",
            "message": "the request head is larger than the server takes",
            "fields": [],
        }
        assert await closed(stream)
        stream = await connect(server)
        await stream.send_all(b"GET /healthz HTTP/1.1 garbage\r\n\r\n")
        status, _, body = await read_answer(stream)
        assert status == 400 and error_of(body)["code"] == "bad_http"
        assert await closed(stream)
    assert too_large() == before + 1


async def test_a_head_dribbled_in_is_cut_at_the_header_timeout(repos: Any, issuer: LocalIssuer) -> None:
    cut = counter(API_CONNECTIONS_CUT, "header_timeout")
    before = cut()
    async with served(repos, issuer, header_timeout_s=0.5, keep_alive_s=LONG) as server:
        stream = await connect(server)
        await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        with trio.fail_after(LONG / 2):  # a guard only: the keep-alive bound could not have cut it yet
            assert await closed(stream)
    assert cut() == before + 1


async def test_an_idle_keep_alive_connection_is_closed(repos: Any, issuer: LocalIssuer) -> None:
    cut = counter(API_CONNECTIONS_CUT, "idle")
    before = cut()
    async with served(repos, issuer, keep_alive_s=0.5, header_timeout_s=LONG) as server:
        stream = await connect(server)
        for _ in range(2):  # the connection is kept alive between requests...
            await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            status, _, _ = await read_answer(stream)
            assert status == 200
        with trio.fail_after(LONG / 2):  # ...and closed once idle past keep_alive_s
            assert await closed(stream)
    assert cut() >= before + 1


async def test_a_body_that_never_comes_is_408_and_the_connection_closed(
    repos: Any, issuer: LocalIssuer
) -> None:
    await seed_matches(repos, "1001")
    token = issuer.mint("slow-body-user")
    async with served(repos, issuer, body_timeout_s=0.5, keep_alive_s=LONG, header_timeout_s=LONG) as server:
        stream = await connect(server)
        await stream.send_all(
            b"POST /user/activity/1001 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {token}\r\nContent-Length: 16000\r\n\r\n".encode()
            + b'{"deviceId":'
        )
        with trio.fail_after(LONG / 2):
            status, headers, body = await read_answer(stream)
            assert status == 408 and error_of(body)["code"] == "body_timeout"
            assert headers["connection"] == "close"
            assert await closed(stream)
        # without a token the body is never read: 401 at once, and the connection closed
        stream = await connect(server)
        await stream.send_all(
            b"POST /user/activity/1001 HTTP/1.1\r\nHost: x\r\nContent-Length: 16000\r\n\r\n" + b"[" * 1000
        )
        status, _, body = await read_answer(stream)
        assert status == 401 and error_of(body)["code"] == "invalid_token"
        assert await closed(stream)
    assert await repos.live_activities.get_user_la_sessions("slow-body-user") == []


async def test_content_length_with_transfer_encoding_is_refused_and_closed(
    repos: Any, issuer: LocalIssuer
) -> None:
    token = issuer.mint("smuggler")
    async with served(repos, issuer) as server:
        stream = await connect(server)
        body = b'{"deviceId":"d1","updateToken":"' + b"ab" * 32 + b'"}'
        await stream.send_all(
            b"POST /user/activity/1001 HTTP/1.1\r\nHost: x\r\n"
            + f"Authorization: Bearer {token}\r\n".encode()
            + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        )
        status, headers, answer = await read_answer(stream)
        assert status == 400 and error_of(answer)["code"] == "bad_framing"
        assert headers["connection"] == "close"
        assert await closed(stream)


async def test_a_client_that_does_not_take_its_answers_is_cut(repos: Any, issuer: LocalIssuer) -> None:
    cut = counter(API_CONNECTIONS_CUT, "send_timeout")
    before = cut()
    async with served(repos, issuer, send_timeout_s=0.5, keep_alive_s=LONG, header_timeout_s=LONG) as server:
        stream = await connect(server)
        stream.socket.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, 4096)
        # pipelined requests for the largest public answer, never read: the server's writes back up
        request = b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n"
        with trio.move_on_after(LONG / 2):
            for _ in range(2000):
                await stream.send_all(request)
                if cut() > before:
                    break
                await trio.lowlevel.checkpoint()
        with trio.fail_after(LONG / 2):
            while cut() == before:
                await trio.sleep(0.05)
        with trio.fail_after(LONG / 2):
            assert await closed(stream)
    assert cut() == before + 1


def test_the_connection_clock_bounds_idle_then_head_then_nothing_while_busy() -> None:
    clock = ConnectionClock(keep_alive_s=75.0, header_timeout_s=10.0, now=100.0)
    assert clock.deadline() == (175.0, "idle")
    clock.on_data(b"GET / HT", now=120.0)
    assert clock.deadline() == (130.0, "header_timeout")
    clock.on_data(b"TP/1.1\r\n", now=125.0)  # more of the same head: its bound does not move
    assert clock.deadline() == (130.0, "header_timeout")
    clock.on_request()
    assert clock.deadline()[0] == float("inf")
    clock.on_data(b"body bytes", now=140.0)  # the body is the app's to bound
    assert clock.deadline()[0] == float("inf")
    clock.on_idle(now=150.0)
    assert clock.deadline() == (225.0, "idle")
    h2 = ConnectionClock(keep_alive_s=75.0, header_timeout_s=10.0, now=0.0)
    h2.on_data(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", now=1.0)
    assert h2.deadline() == (75.0, "idle")


def test_only_an_empty_error_head_is_taken_for_the_parsers() -> None:
    ours = parser_refusal(b"HTTP/1.1 431 \r\ncontent-length: 0\r\nconnection: close\r\ndate: x\r\n\r\n")
    assert ours is not None and ours[0] == 431
    head, _, body = ours[1].partition(b"\r\n\r\n")
    assert json.loads(body)["error"]["code"] == "headers_too_large"
    assert b"content-length: %d" % len(body) in head and b"connection: close" in head
    # the app's answers pass as they are: errors with a body, HEAD answers keeping the body's length
    assert parser_refusal(b"HTTP/1.1 404 \r\ncontent-length: 80\r\n\r\n") is None
    assert parser_refusal(b"HTTP/1.1 200 \r\ncontent-length: 0\r\n\r\n") is None
    assert parser_refusal(b'{"error": 1}') is None
