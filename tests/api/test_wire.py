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
from daemon.api.transport import ConnectionClock, ConnectionLimits, parser_refusal
from daemon.demo.issuer import LocalIssuer
from daemon.metrics import API_CONNECTIONS_CUT, API_CONNECTIONS_OPEN, API_CONNECTIONS_REFUSED, API_REFUSED
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
    async with served(
        repos,
        issuer,
        send_timeout_s=0.5,
        keep_alive_s=LONG,
        header_timeout_s=LONG,
        rate_per_s=10_000,  # the anonymous requests' own limit would answer 429s, small ones
        rate_burst=100_000,
    ) as server:
        stream = await connect(server)
        stream.socket.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, 4096)
        # pipelined requests for the largest public answer, never read: the server's writes back up
        request = b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n"
        with trio.move_on_after(LONG / 2):
            for _ in range(2000):
                try:
                    await stream.send_all(request)
                except trio.BrokenResourceError:
                    break  # the server cut it already (and reset what it had not read)
                if cut() > before:
                    break
                await trio.lowlevel.checkpoint()
        with trio.fail_after(LONG / 2):
            while cut() == before:
                await trio.sleep(0.05)
        with trio.fail_after(LONG / 2):
            assert await closed(stream)
    assert cut() == before + 1


def test_the_connection_clock_bounds_new_then_head_then_nothing_while_busy_then_idle() -> None:
    clock = ConnectionClock(keep_alive_s=75.0, header_timeout_s=10.0, now=100.0)
    assert clock.deadline() == (110.0, "header_timeout")  # a new connection: its first head, soon
    clock.on_idle(now=105.0)
    assert clock.deadline() == (180.0, "idle")
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
    assert h2.deadline() == (76.0, "idle")


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


# --- connections: the client's end of file, the caps, the head's size ---------------------------------------


def gauge(metric: Any) -> Callable[[], float]:
    return lambda: float(metric._value.get())


async def wait_until(predicate: Callable[[], bool], what: str) -> None:
    with trio.fail_after(LONG / 2):  # a guard only: no other bound could have acted before it
        while not predicate():
            await trio.sleep(0.02)


async def test_a_connection_the_client_closed_is_closed_at_once(repos: Any, issuer: LocalIssuer) -> None:
    """Connect and close without a byte, or after an answer: the server's end closes then, not when a
    timeout (here a minute) runs out; the connection's slot is free again."""
    open_now = gauge(API_CONNECTIONS_OPEN)
    async with served(repos, issuer, keep_alive_s=LONG, header_timeout_s=LONG) as server:
        for _ in range(20):
            stream = await connect(server)
            await stream.aclose()
        stream = await connect(server)
        await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await read_answer(stream))[0] == 200
        await stream.aclose()
        await wait_until(lambda: open_now() == 0, "every connection closed")
        # a client that half-closes after its request still gets its answer, then the close
        stream = await connect(server)
        await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        await stream.send_eof()
        assert (await read_answer(stream))[0] == 200
        assert await closed(stream)
        await wait_until(lambda: open_now() == 0, "the half-closed connection closed")


async def test_a_new_connection_that_sends_nothing_is_cut_at_the_header_timeout(
    repos: Any, issuer: LocalIssuer
) -> None:
    cut = counter(API_CONNECTIONS_CUT, "header_timeout")
    before = cut()
    async with served(repos, issuer, header_timeout_s=0.5, keep_alive_s=LONG) as server:
        stream = await connect(server)
        with trio.fail_after(LONG / 2):  # the keep-alive bound could not have cut it
            assert await closed(stream)
    assert cut() == before + 1


async def test_a_head_past_the_limit_is_431_however_it_arrives(repos: Any, issuer: LocalIssuer) -> None:
    """A whole 40 KiB head in one write (the parser alone only bounds an incomplete one): 431 at 16 KiB."""
    async with served(repos, issuer) as server:
        stream = await connect(server)
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40_000 + b"\r\n\r\n"
        await stream.send_all(head)
        status, _, body = await read_answer(stream)
        assert status == 431 and error_of(body)["code"] == "headers_too_large"
        assert await closed(stream)
        stream = await connect(server)  # just under the limit passes
        await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 15_000 + b"\r\n\r\n")
        assert (await read_answer(stream))[0] == 200


async def test_an_unknown_transfer_encoding_is_501_in_the_error_shape(
    repos: Any, issuer: LocalIssuer
) -> None:
    async with served(repos, issuer) as server:
        stream = await connect(server)
        await stream.send_all(b"POST /user/device HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nxxxx")
        status, headers, body = await read_answer(stream)
        assert status == 501 and headers["content-type"] == "application/json"
        assert error_of(body)["code"] == "not_implemented"


def test_the_connection_limits_count_per_address_and_in_all() -> None:
    limits = ConnectionLimits(total=3, per_address=2)
    assert [limits.admit("a"), limits.admit("a"), limits.admit("a")] == [None, None, "per_address"]
    assert limits.admit("b") is None and limits.full() and limits.admit("c") == "total"
    limits.release("a")
    assert not limits.full() and limits.admit("a") is None and limits.held("a") == 2
    no_cap = ConnectionLimits(total=10, per_address=None)
    assert all(no_cap.admit("lb") is None for _ in range(10)) and no_cap.admit("lb") == "total"


def test_the_cap_is_sized_from_the_descriptor_limit() -> None:
    settings = ApiSettings()
    assert settings.connection_cap(1024) == 1024 - 256  # the reserve stays for the engine
    assert settings.connection_cap(65536) == 65536 - 256
    assert settings.connection_cap(256) == 64  # a reserve that would leave nothing: a quarter
    assert ApiSettings(max_connections=100).connection_cap(65536) == 100
    assert ApiSettings(max_connections=5000).connection_cap(1024) == 768  # never past the limit's room


async def test_an_address_holding_its_share_of_connections_is_refused_more(
    repos: Any, issuer: LocalIssuer
) -> None:
    refused = counter(API_CONNECTIONS_REFUSED, "per_address")
    open_now = gauge(API_CONNECTIONS_OPEN)
    before = refused()
    async with served(
        repos, issuer, max_connections_per_address=3, keep_alive_s=LONG, header_timeout_s=LONG
    ) as server:
        held = [await connect(server) for _ in range(3)]
        extra = await connect(server)
        assert await closed(extra)  # closed at accept, before a byte
        assert refused() == before + 1
        # another address (another loopback one) is served
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        sock = trio.socket.socket()
        await sock.bind(("127.0.0.2", 0))
        await sock.connect((host, int(port)))
        other = trio.SocketStream(sock)
        await other.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await read_answer(other))[0] == 200
        await held[0].aclose()
        await wait_until(lambda: open_now() <= 3, "the closed connection's slot freed")
        again = await connect(server)
        await again.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await read_answer(again))[0] == 200


async def test_past_the_cap_in_all_newcomers_wait_for_a_free_slot(repos: Any, issuer: LocalIssuer) -> None:
    async with served(repos, issuer, max_connections=2, keep_alive_s=LONG, header_timeout_s=LONG) as server:
        held = [await connect(server) for _ in range(2)]
        waiting = await connect(server)  # the kernel completes it; the server does not accept it yet
        await waiting.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        with trio.move_on_after(0.5) as waited:
            await waiting.receive_some(1)
        assert waited.cancelled_caught  # no answer while both slots are held
        await held[0].aclose()  # a slot frees: the newcomer is accepted and answered
        assert (await read_answer(waiting))[0] == 200


async def test_a_connection_cut_on_a_timeout_frees_its_slot_at_once(repos: Any, issuer: LocalIssuer) -> None:
    """With one slot, a silent connection cut at the header timeout lets the next one in then, not when
    hypercorn's own idle timer (a minute here) would end its task."""
    async with served(repos, issuer, max_connections=1, header_timeout_s=0.5, keep_alive_s=LONG) as server:
        silent = await connect(server)
        waiting = await connect(server)
        await waiting.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        with trio.fail_after(LONG / 2):
            assert await closed(silent)
            assert (await read_answer(waiting))[0] == 200
