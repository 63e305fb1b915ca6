"""The admin socket protocol, over a real Unix socket: every built-in behaviour and every kind of bad client."""

from __future__ import annotations

import io
import os
import socket
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from daemon import metrics
from daemon.config.models import parse_listen
from daemon.runtime.admin.protocol import AdminError, encode_answer, expect_args, parse_request
from daemon.runtime.admin.server import AdminServer, AdminSocketError
from daemon.runtime.metrics_http import MetricsHttpServer
from tests.conftest import log_lines
from tests.runtime.conftest import Calls, Client, make_handlers

# --- the pure parts ------------------------------------------------------------------------------------


def test_json_request_is_parsed_with_its_args_and_id() -> None:
    request = parse_request(b'{"cmd": "match", "args": ["71344"], "id": 7}')
    assert (request.cmd, request.args, request.id) == ("match", ["71344"], 7)


def test_bare_line_is_a_command_and_its_args() -> None:
    request = parse_request(b"match 71344\r")
    assert (request.cmd, request.args) == ("match", ["71344"])


def test_numeric_json_args_are_taken_as_text() -> None:
    assert parse_request(b'{"cmd": "match", "args": [71344]}').args == ["71344"]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b'{"cmd": "health"', "bad JSON"),
        (b'["health"]', "JSON object"),
        (b'{"args": []}', "cmd"),
        (b'{"cmd": "health", "arg": []}', "unknown field"),
        (b'{"cmd": "match", "args": [{"x": 1}]}', "args"),
        (b'{"cmd": 5}', "cmd"),
        (b"\xff\xfe", "UTF-8"),
        (b"match 'unterminated", "bad command line"),
        (b"bad;cmd", "cmd"),
        (b'{"cmd": "health", "args": ' + b"[" * 50000 + b"]" * 50000 + b"}", "nested too deeply"),
    ],
)
def test_malformed_requests_are_rejected_with_a_reason(line: bytes, expected: str) -> None:
    with pytest.raises(AdminError, match=expected):
        parse_request(line)


def test_answers_are_one_line_and_json_even_for_awkward_values() -> None:
    from decimal import Decimal

    line = encode_answer(
        ok=True,
        result={"lag": Decimal("1.5"), "count": Decimal("3"), "p99": float("nan"), "text": "two\nlines"},
    )
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert line == b'{"ok": true, "result": {"lag": 1.5, "count": 3, "p99": null, "text": "two\\nlines"}}\n'


def test_expect_args_states_the_usage() -> None:
    assert expect_args("match", ["1"], "ID") == ["1"]
    with pytest.raises(AdminError, match=r"usage: match ID \[SINCE\]"):
        expect_args("match", [], "ID", optional=["SINCE"])


# --- the server ----------------------------------------------------------------------------------------


async def test_health_answers_ok_with_the_handlers_result(admin: tuple[AdminServer, Path, Calls]) -> None:
    _, path, calls = admin
    client = await Client.connect(path)
    assert await client.ask('{"cmd": "health"}') == {"ok": True, "result": {"alive": True}}
    assert calls.args == [("health", [])]


async def test_bare_line_and_json_reach_the_same_handler_with_args(
    admin: tuple[AdminServer, Path, Calls],
) -> None:
    _, path, calls = admin
    client = await Client.connect(path)
    expected = {"ok": True, "result": {"matchId": "71344", "phase": "2nd Innings"}}
    assert await client.ask("match 71344") == expected
    assert await client.ask('{"cmd": "match", "args": ["71344"]}') == expected
    assert calls.args == [("match", ["71344"]), ("match", ["71344"])]


async def test_request_id_is_echoed(admin: tuple[AdminServer, Path, Calls]) -> None:
    _, path, _ = admin
    client = await Client.connect(path)
    assert await client.ask('{"cmd": "health", "id": "abc"}') == {
        "ok": True,
        "result": {"alive": True},
        "id": "abc",
    }


async def test_help_lists_every_command_with_its_summary(admin: tuple[AdminServer, Path, Calls]) -> None:
    _, path, _ = admin
    client = await Client.connect(path)
    answer = await client.ask("help")
    assert answer["ok"] is True
    commands = answer["result"]
    assert set(commands) == {"help", "metrics", "health", "match", "crash", "unserialisable", "big", "slow"}
    assert commands["health"] == "liveness: the daemon's main loop answers"
    assert commands["metrics"].startswith("Prometheus")


async def test_metrics_returns_the_prometheus_text_of_the_registry(
    admin: tuple[AdminServer, Path, Calls],
) -> None:
    _, path, _ = admin
    metrics.ACTOR_RESTARTS.labels(actor="admin-test-actor").inc()
    client = await Client.connect(path)
    answer = await client.ask("metrics")
    assert answer["ok"] is True
    assert 'sightscreen_actor_restarts_total{actor="admin-test-actor"} 1.0' in answer["result"]
    assert "# TYPE sightscreen_push_latency_seconds histogram" in answer["result"]


async def test_bad_json_gets_an_error_and_the_connection_stays_usable(
    admin: tuple[AdminServer, Path, Calls],
) -> None:
    _, path, _ = admin
    client = await Client.connect(path)
    answer = await client.ask('{"cmd": "health"')
    assert answer["ok"] is False and answer["error"].startswith("bad JSON")
    assert await client.ask("health") == {"ok": True, "result": {"alive": True}}


async def test_unknown_command_gets_an_error_naming_it(admin: tuple[AdminServer, Path, Calls]) -> None:
    _, path, _ = admin
    client = await Client.connect(path)
    assert await client.ask("helth") == {
        "ok": False,
        "error": "unknown command 'helth'; did you mean 'health'?",
    }
    assert await client.ask("zzz") == {"ok": False, "error": "unknown command 'zzz'; try 'help'"}
    assert (await client.ask("health"))["ok"] is True


async def test_wrong_args_get_the_usage(admin: tuple[AdminServer, Path, Calls]) -> None:
    _, path, _ = admin
    client = await Client.connect(path)
    assert await client.ask("match") == {"ok": False, "error": "usage: match ID"}
    assert await client.ask("health now") == {"ok": False, "error": "usage: health"}
    assert await client.ask("metrics all") == {"ok": False, "error": "usage: metrics"}


async def test_a_user_error_from_a_handler_is_its_message(admin: tuple[AdminServer, Path, Calls]) -> None:
    _, path, _ = admin
    client = await Client.connect(path)
    assert await client.ask("match 1") == {"ok": False, "error": "match 1 is not active here"}


async def test_a_crashing_handler_yields_internal_error_and_a_log_line_and_the_server_carries_on(
    admin: tuple[AdminServer, Path, Calls], log_stream: io.StringIO
) -> None:
    _, path, _ = admin
    client = await Client.connect(path)
    assert await client.ask("crash") == {"ok": False, "error": "internal error"}
    assert await client.ask("unserialisable") == {"ok": False, "error": "internal error"}
    assert await client.ask("health") == {"ok": True, "result": {"alive": True}}
    other = await Client.connect(path)
    assert (await other.ask("health"))["ok"] is True
    events = {line["event"]: line for line in log_lines(log_stream)}
    assert events["admin_handler_failed"]["cmd"] == "crash"
    assert "bug in a handler" in events["admin_handler_failed"]["exception"]
    assert events["admin_result_not_json"]["cmd"] == "unserialisable"


async def test_blank_lines_are_ignored_and_pipelined_requests_answered_in_order(
    admin: tuple[AdminServer, Path, Calls],
) -> None:
    _, path, _ = admin
    client = await Client.connect(path)
    await client.send('\n\r\nslow\n{"cmd": "match", "args": ["71344"], "id": 2}\nnope\n')
    answers = [await client.read_line() for _ in range(3)]
    assert answers[0] == b'{"ok": true, "result": "done"}'
    assert b'"id": 2' in (answers[1] or b"")
    assert b"unknown command" in (answers[2] or b"")


async def test_a_last_line_without_newline_is_answered_at_eof(admin: tuple[AdminServer, Path, Calls]) -> None:
    _, path, _ = admin
    client = await Client.connect(path)
    await client.send("health")
    await client.stream.send_eof()
    assert await client.read_line() == b'{"ok": true, "result": {"alive": true}}'
    assert await client.read_line() is None


async def test_an_oversized_line_gets_an_error_then_the_connection_is_closed(
    admin: tuple[AdminServer, Path, Calls],
) -> None:
    server, path, _ = admin
    client = await Client.connect(path)
    await client.send(b"x" * 5000)  # max_line_bytes is 1024; no newline ever comes
    answer = await client.read_line()
    assert answer == b'{"ok": false, "error": "request line too long (max 1024 bytes); closing"}'
    assert await client.read_line() is None
    other = await Client.connect(path)
    assert (await other.ask("health"))["ok"] is True


async def test_an_oversized_line_with_its_newline_is_refused_too(
    admin: tuple[AdminServer, Path, Calls],
) -> None:
    _, path, _ = admin
    client = await Client.connect(path)
    await client.send(b'{"cmd": "match", "args": ["' + b"7" * 1100 + b'"]}\n')
    answer = await client.read_line()
    assert answer is not None and b"too long" in answer
    assert await client.read_line() is None


async def wait_for_clients(server: AdminServer, count: int) -> None:
    with trio.fail_after(10):
        while server.clients != count:
            await trio.sleep(0.01)


async def test_a_client_that_never_reads_cannot_block_others_and_is_dropped(
    admin: tuple[AdminServer, Path, Calls],
) -> None:
    server, path, _ = admin
    stuck = await Client.connect(path)
    # Ask for far more than the socket buffers hold, and never read: the server's send blocks on this client.
    with trio.move_on_after(2):
        for _ in range(64):
            await stuck.send("big\n")
    other = await Client.connect(path)
    assert await other.ask("health") == {"ok": True, "result": {"alive": True}}
    await other.aclose()
    # The server gives up on the stuck client after its send deadline and frees the slot.
    await wait_for_clients(server, 0)


async def test_a_client_that_sends_slowly_is_disconnected_and_others_are_served(
    admin: tuple[AdminServer, Path, Calls],
) -> None:
    server, path, _ = admin
    slow = await Client.connect(path)
    await slow.send('{"cmd": "hea')  # and nothing more
    other = await Client.connect(path)
    assert (await other.ask("health"))["ok"] is True
    assert await slow.read_line() is None  # closed after client_timeout_s without a complete line
    await other.aclose()
    await wait_for_clients(server, 0)


async def test_clients_past_the_limit_get_an_error_and_are_closed(
    admin: tuple[AdminServer, Path, Calls],
) -> None:
    server, path, _ = admin
    held = [await Client.connect(path) for _ in range(4)]  # max_clients=4
    for client in held:
        assert (await client.ask("health"))["ok"] is True  # each is being served
    extra = await Client.connect(path)
    assert await extra.read_line() == b'{"ok": false, "error": "too many clients (max 4)"}'
    assert await extra.read_line() is None
    for client in held:
        await client.aclose()
    await wait_for_clients(server, 0)
    again = await Client.connect(path)
    assert (await again.ask("health"))["ok"] is True


async def test_socket_gets_the_configured_mode_and_is_removed_at_shutdown(sock_dir: Path) -> None:
    path = sock_dir / "sub" / "admin.sock"
    server = AdminServer(str(path), {}, mode=0o660)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        info = os.stat(path)
        assert stat.S_ISSOCK(info.st_mode)
        assert stat.S_IMODE(info.st_mode) == 0o660
        nursery.cancel_scope.cancel()
    assert not path.exists()


async def test_a_stale_socket_file_is_replaced(sock_dir: Path) -> None:
    path = sock_dir / "admin.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))  # bound, never listening, then closed: what a killed daemon leaves behind
    dead.close()
    assert path.exists()
    server = AdminServer(str(path), make_handlers(Calls()))
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        client = await Client.connect(path)
        assert (await client.ask("health"))["ok"] is True
        nursery.cancel_scope.cancel()


async def test_a_socket_a_live_server_answers_on_is_left_alone(
    admin: tuple[AdminServer, Path, Calls],
) -> None:
    _, path, _ = admin
    second = AdminServer(str(path), {})
    with pytest.raises(AdminSocketError, match="another process is serving"):
        await second.serve()
    client = await Client.connect(path)
    assert (await client.ask("health"))["ok"] is True


async def test_a_regular_file_at_the_path_is_never_removed(sock_dir: Path) -> None:
    path = sock_dir / "admin.sock"
    path.write_text("not a socket")
    with pytest.raises(AdminSocketError, match="not a socket"):
        await AdminServer(str(path), {}).serve()
    assert path.read_text() == "not a socket"


async def test_the_daemon_may_replace_a_builtin_but_not_help(sock_dir: Path) -> None:
    async def metrics_handler(args: list[str]) -> str:
        """the daemon's own metrics"""
        return "custom 1\n"

    async def help_handler(args: list[str]) -> str:
        return "hijacked"

    path = sock_dir / "admin.sock"
    server = AdminServer(str(path), {"metrics": metrics_handler, "help": help_handler})
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        client = await Client.connect(path)
        assert await client.ask("metrics") == {"ok": True, "result": "custom 1\n"}
        assert (await client.ask("help"))["result"] == {
            "help": "list the commands this daemon answers",
            "metrics": "the daemon's own metrics",
        }
        nursery.cancel_scope.cancel()


# --- Prometheus over HTTP --------------------------------------------------------------------------------


async def http_get(port: int, request: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(request)
    data = bytearray()
    with trio.fail_after(10):
        while chunk := await stream.receive_some(65536):
            data += chunk
    await stream.aclose()
    return bytes(data)


@pytest.fixture
async def metrics_port() -> AsyncIterator[int]:
    server = MetricsHttpServer("127.0.0.1:0", client_timeout_s=0.5, max_clients=2)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        yield port
        nursery.cancel_scope.cancel()


async def test_metrics_over_http_serves_the_registry_to_a_scraper(metrics_port: int) -> None:
    metrics.LOCK_LOSSES.inc()
    answer = await http_get(metrics_port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"Content-Type: text/plain; version=0.0.4; charset=utf-8" in head
    assert f"Content-Length: {len(body)}".encode() in head
    assert b"\nsightscreen_lock_losses_total " in body


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /admin HTTP/1.1\r\n\r\n", b"404"),
        (b"POST /metrics HTTP/1.1\r\n\r\n", b"405"),
        (b"hello\r\n\r\n", b"400"),
        (b"GET /metrics HTTP/1.1\r\nX: " + b"y" * 9000 + b"\r\n\r\n", b"431"),
    ],
)
async def test_metrics_over_http_refuses_anything_else(
    metrics_port: int, request_bytes: bytes, status: bytes
) -> None:
    answer = await http_get(metrics_port, request_bytes)
    assert answer.split(b" ")[1] == status


async def test_metrics_over_http_drops_a_client_that_sends_nothing_and_serves_the_next(
    metrics_port: int,
) -> None:
    silent = [await trio.open_tcp_stream("127.0.0.1", metrics_port) for _ in range(2)]  # max_clients=2
    answer = await http_get(metrics_port, b"GET /metrics HTTP/1.0\r\n\r\n")  # waits for a slot, then served
    assert answer.startswith(b"HTTP/1.1 200 OK")
    for stream in silent:
        await stream.aclose()


def test_listen_addresses_are_checked() -> None:
    assert parse_listen("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_listen("[::1]:9464") == ("::1", 9464)
    for bad in ("9464", ":9464", "host:", "host:http", "host:70000"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_listen(bad)
