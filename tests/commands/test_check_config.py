"""``sightscreen check-config`` says OK only when ``run`` starts: the local resources ``run`` takes (the admin
socket's path, the listen ports) are checked too, and ``run`` refuses to start on them with the same words;
files that are not configurations (a FIFO, a BOM) get a clear answer. The tools refuse numbers that are not
finite."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from daemon.commands.check_config import main as check_main
from daemon.commands.common import finite
from daemon.commands.run import main as run_main
from daemon.config import ConfigError, load_config
from tests.config.test_config import complete, problems_of, write


def _socket_line(tmp: Path, path: str) -> str:
    return f'[admin]\nsocket_path = "{path}"\n'


def test_an_admin_socket_path_too_long_for_a_unix_socket_is_refused_by_check_config_and_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long_path = str(tmp_path / ("s" * 120) / "admin.sock")
    config = complete(tmp_path, _socket_line(tmp_path, long_path))
    assert check_main([str(config)]) == 2
    assert "admin.socket_path:" in capsys.readouterr().err
    assert run_main(["--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "a Unix socket path takes at most 107" in err and "Traceback" not in err


def test_a_file_at_the_socket_path_or_another_daemon_on_it_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    taken = tmp_path / "file.sock"
    taken.write_text("not a socket")
    config = complete(tmp_path, _socket_line(tmp_path, str(taken)))
    assert check_main([str(config)]) == 2
    assert "exists and is not a socket" in capsys.readouterr().err
    served = tmp_path / "live.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(served))
    listener.listen(8)
    try:
        config = complete(tmp_path, _socket_line(tmp_path, str(served)), name="served.toml")
        assert check_main([str(config)]) == 2
        assert "another process is serving the admin socket" in capsys.readouterr().err
    finally:
        listener.close()
    # once nobody serves it, the stale socket is fine: the daemon replaces it
    assert check_main([str(config)]) == 0


def test_a_metrics_port_already_taken_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        extra = _socket_line(tmp_path, str(tmp_path / "a.sock")) + f'[metrics]\nlisten = "127.0.0.1:{port}"\n'
        config = complete(tmp_path, extra)
        assert check_main([str(config)]) == 2
        assert f"metrics.listen: 127.0.0.1:{port} is taken by another process" in capsys.readouterr().err
    finally:
        holder.close()


def test_a_table_prefix_with_characters_dynamodb_refuses_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, '[dynamodb]\ntable_prefix = "a b/c"\n')
    found = problems_of(path)
    assert any(p.startswith("dynamodb.table_prefix:") and "' '" in p and "'/'" in p for p in found), found


def test_a_fifo_is_refused_at_once_instead_of_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "sightscreen.toml"
    os.mkfifo(fifo)
    done = threading.Event()
    found: list[str] = []

    def load() -> None:
        try:
            load_config(fifo, {})
        except ConfigError as exc:
            found.extend(str(p) for p in exc.problems)
        done.set()

    threading.Thread(target=load, daemon=True).start()
    assert done.wait(30), "reading a FIFO with no writer hung"
    assert len(found) == 1 and "is not a regular file (it is a FIFO" in found[0], found


def test_a_utf8_byte_order_mark_is_not_an_invalid_statement(tmp_path: Path) -> None:
    plain = complete(tmp_path, '[instance]\nid = "bom-1"\n')
    with_bom = tmp_path / "bom.toml"
    with_bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    assert load_config(with_bom, {}).instance.id == "bom-1"


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "-1", "0", "abc"])
def test_the_tools_refuse_numbers_that_are_not_finite_and_positive(text: str) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        finite()(text)


@pytest.mark.parametrize(
    "argv",
    [
        ["replay", "serve", "--tape", "t20-demo", "--ms-per-ball", "nan"],
        ["replay", "serve", "--tape", "t20-demo", "--innings-break-s", "inf"],
        ["replay", "serve", "--tape", "t20-demo", "--start-delay-s", "nan"],
        ["ctl", "--timeout", "nan", "status"],
        ["ctl", "--timeout", "-1", "status"],
        ["ctl", "--socket", "/nonexistent.sock", "watch", "--interval", "nan"],
    ],
)
def test_the_commands_answer_a_non_finite_number_with_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from daemon.cli import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "finite" in err or "must be" in err, err
    assert "Traceback" not in err


def test_check_config_is_ok_when_run_would_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = complete(tmp_path, _socket_line(tmp_path, str(tmp_path / "ok.sock")))
    assert check_main([str(config)]) == 0
    assert capsys.readouterr().out.startswith(f"OK: {config} is valid")
