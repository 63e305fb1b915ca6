"""``sightscreen ctl`` against a real admin server: output, exit status, and every way it cannot connect."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from daemon.commands import ctl
from daemon.runtime.admin.server import AdminServer
from tests.runtime.conftest import Calls


async def run_ctl(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    # ctl uses blocking sockets: run it in a thread so the server on this trio loop can answer.
    code = await trio.to_thread.run_sync(ctl.main, argv)
    out, err = capsys.readouterr()
    return code, out, err


async def test_ok_answer_prints_pretty_json_and_exits_0(
    admin: tuple[AdminServer, Path, Calls], capsys: pytest.CaptureFixture[str]
) -> None:
    _, path, _ = admin
    code, out, err = await run_ctl(["--socket", str(path), "match", "71344"], capsys)
    assert code == 0, err
    assert out == json.dumps({"matchId": "71344", "phase": "2nd Innings"}, indent=2) + "\n"


async def test_text_results_such_as_metrics_print_verbatim(
    admin: tuple[AdminServer, Path, Calls], capsys: pytest.CaptureFixture[str]
) -> None:
    _, path, _ = admin
    code, out, _ = await run_ctl(["--socket", str(path), "metrics"], capsys)
    assert code == 0
    assert out.startswith("# HELP ") and "\n# TYPE sightscreen_pushes_total counter\n" in out


async def test_error_answer_goes_to_stderr_and_exits_1(
    admin: tuple[AdminServer, Path, Calls], capsys: pytest.CaptureFixture[str]
) -> None:
    _, path, _ = admin
    code, out, err = await run_ctl(["--socket", str(path), "match", "9"], capsys)
    assert (code, out, err) == (1, "", "error: match 9 is not active here\n")
    code, _, err = await run_ctl(["--socket", str(path), "nosuch"], capsys)
    assert code == 1 and "unknown command 'nosuch'" in err


async def test_help_prints_one_command_per_line(
    admin: tuple[AdminServer, Path, Calls], capsys: pytest.CaptureFixture[str]
) -> None:
    _, path, _ = admin
    code, out, _ = await run_ctl(["--socket", str(path), "help"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert "health          liveness: the daemon's main loop answers" in lines
    assert "unserialisable" in lines  # no summary: the name alone
    assert len(lines) == 8


async def test_raw_prints_the_answer_line(
    admin: tuple[AdminServer, Path, Calls], capsys: pytest.CaptureFixture[str]
) -> None:
    _, path, _ = admin
    code, out, _ = await run_ctl(["--socket", str(path), "--raw", "health"], capsys)
    assert code == 0 and json.loads(out) == {"ok": True, "result": {"alive": True}}


async def test_socket_path_defaults_to_the_environment(
    admin: tuple[AdminServer, Path, Calls],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, path, _ = admin
    monkeypatch.setenv("SIGHTSCREEN_ADMIN_SOCKET", str(path))
    code, out, _ = await run_ctl(["health"], capsys)
    assert code == 0 and json.loads(out) == {"alive": True}


def test_missing_socket_exits_2_saying_what_to_check(
    sock_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sock_dir / "nothing.sock"
    assert ctl.main(["--socket", str(path), "health"]) == 2
    err = capsys.readouterr().err
    assert f"no admin socket at {path}" in err and "SIGHTSCREEN_ADMIN_SOCKET" in err


def test_stale_socket_exits_2(sock_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = sock_dir / "stale.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()
    assert ctl.main(["--socket", str(path), "health"]) == 2
    assert "nothing is listening" in capsys.readouterr().err


def test_a_server_that_never_answers_exits_2_after_the_timeout(
    sock_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sock_dir / "mute.sock"
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mute.bind(str(path))
    mute.listen(1)  # accepts (in the backlog) but never answers
    try:
        assert ctl.main(["--socket", str(path), "--timeout", "0.2", "health"]) == 2
    finally:
        mute.close()
    assert "no answer" in capsys.readouterr().err


def test_a_peer_that_does_not_speak_the_protocol_exits_2(
    sock_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sock_dir / "http.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(str(path))  # so accept() below does not block; ctl gets the second connection
    try:
        peer, _ = server.accept()
        peer.close()
        client.close()

        def answer_garbage() -> None:
            conn, _ = server.accept()
            conn.recv(1024)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            conn.close()

        import threading

        thread = threading.Thread(target=answer_garbage)
        thread.start()
        assert ctl.main(["--socket", str(path), "health"]) == 2
        thread.join(5)
    finally:
        server.close()
    assert "not JSON" in capsys.readouterr().err


def test_sightscreen_ctl_is_wired_into_the_cli(sock_dir: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "daemon", "ctl", "--socket", str(sock_dir / "none.sock"), "health"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "no admin socket" in result.stderr
