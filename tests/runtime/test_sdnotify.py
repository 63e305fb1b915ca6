"""sd_notify: the messages systemd would receive, read from a real datagram socket, in order."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from daemon.runtime.sdnotify import SdNotifier


@pytest.fixture
def notify_socket(sock_dir: Path) -> Iterator[tuple[str, socket.socket]]:
    """A datagram socket standing in for systemd's notification socket (a path, as systemd uses)."""
    path = str(sock_dir / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    try:
        yield path, sock
    finally:
        sock.close()


def received(sock: socket.socket, count: int) -> list[str]:
    return [sock.recv(4096).decode() for _ in range(count)]


def test_lifecycle_messages_arrive_in_order(notify_socket: tuple[str, socket.socket]) -> None:
    path, sock = notify_socket
    notifier = SdNotifier({"NOTIFY_SOCKET": path})
    assert notifier.enabled
    assert notifier.status("starting: 5 actors")
    assert notifier.ready(status="3 matches owned")
    assert notifier.watchdog()
    assert notifier.status("2 matches owned")
    assert notifier.stopping()
    assert notifier.extend_timeout(2.5)
    assert received(sock, 6) == [
        "STATUS=starting: 5 actors",
        "READY=1\nSTATUS=3 matches owned",
        "WATCHDOG=1",
        "STATUS=2 matches owned",
        "STOPPING=1",
        "EXTEND_TIMEOUT_USEC=2500000",
    ]


def test_abstract_namespace_socket_is_supported() -> None:
    name = f"sightscreen-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    try:
        notifier = SdNotifier({"NOTIFY_SOCKET": "@" + name})
        assert notifier.ready()
        assert received(sock, 1) == ["READY=1"]
    finally:
        sock.close()


def test_a_newline_in_a_status_cannot_inject_another_assignment(
    notify_socket: tuple[str, socket.socket],
) -> None:
    path, sock = notify_socket
    SdNotifier({"NOTIFY_SOCKET": path}).status("ok\nREADY=1")
    assert received(sock, 1) == ["STATUS=ok READY=1"]


def test_everything_is_a_no_op_without_notify_socket() -> None:
    notifier = SdNotifier({})
    assert not notifier.enabled
    assert notifier.ready() is False
    assert notifier.watchdog() is False
    assert notifier.watchdog_interval() is None


def test_a_send_failure_is_reported_not_raised(sock_dir: Path) -> None:
    notifier = SdNotifier({"NOTIFY_SOCKET": str(sock_dir / "gone")})
    assert notifier.ready() is False


def test_watchdog_interval_is_half_of_watchdog_usec(notify_socket: tuple[str, socket.socket]) -> None:
    path, _ = notify_socket
    assert SdNotifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "30000000"}).watchdog_interval() == 15.0
    assert SdNotifier({"NOTIFY_SOCKET": path}).watchdog_interval() is None
    mine = str(os.getpid())
    assert (
        SdNotifier(
            {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000000", "WATCHDOG_PID": mine}
        ).watchdog_interval()
        == 1.0
    )
    # The watchdog belongs to another process (this one inherited the environment): do not ping for it.
    assert (
        SdNotifier(
            {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "1"}
        ).watchdog_interval()
        is None
    )
    assert SdNotifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "soon"}).watchdog_interval() is None


async def test_run_watchdog_pings_repeatedly_until_cancelled(
    notify_socket: tuple[str, socket.socket],
) -> None:
    path, sock = notify_socket
    notifier = SdNotifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "20000"})  # a ping every 10 ms
    async with trio.open_nursery() as nursery:
        await nursery.start(notifier.run_watchdog)
        pings = await trio.to_thread.run_sync(received, sock, 3)
        nursery.cancel_scope.cancel()
    assert pings == ["WATCHDOG=1"] * 3


async def test_run_watchdog_returns_at_once_when_no_watchdog_is_asked_for() -> None:
    with trio.fail_after(5):
        await SdNotifier({}).run_watchdog()
