"""What an operator sees of a real ``sightscreen run`` process: systemd's notifications, ``ctl``, SIGTERM.

The daemon runs as a child process from a TOML file (as systemd or a container would start it) against the
local stand-ins (moto, the replay server, the APNs server), with ``NOTIFY_SOCKET`` and ``WATCHDOG_USEC`` set
the way systemd sets them for a ``Type=notify`` unit with ``WatchdogSec=``.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from daemon.replay.synth import synthesise
from tests.harness.cluster import Cluster

pytestmark = pytest.mark.slow


async def ctl(socket_path: str, *args: str) -> tuple[int, str]:
    result = await trio.run_process(
        [sys.executable, "-m", "daemon", "ctl", "--socket", socket_path, *args],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    return result.returncode, result.stdout.decode() + result.stderr.decode()


async def test_systemd_sees_ready_status_watchdog_then_stopping_and_ctl_answers(
    sock_dir: Path, moto_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    notify = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_DGRAM)
    await notify.bind(str(sock_dir / "notify"))
    monkeypatch.setenv("NOTIFY_SOCKET", str(sock_dir / "notify"))
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")  # WatchdogSec=1: a ping at least every 0.5 s
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    cluster = Cluster(
        sock_dir,
        moto_url=moto_server.url,
        tapes=[synthesise("T20", seed=5)],
        table_prefix="ops-notify-",
        speed=50.0,
        followers_per_match=1,
    )
    messages: list[str] = []

    async def receive_until(predicate: Any, timeout: float) -> None:
        with trio.fail_after(timeout):
            while not predicate():
                messages.append((await notify.recv(4096)).decode())

    async with trio.open_nursery() as nursery:
        await cluster.start(nursery, instances=1)
        instance = cluster.instances[0]
        socket_path = str(sock_dir / f"{instance.instance_id}.sock")
        try:
            await receive_until(
                lambda: (
                    "READY=1" in messages
                    and "WATCHDOG=1" in messages
                    and any(m.startswith("STATUS=") for m in messages)
                ),
                120,
            )
            code, out = await ctl(socket_path, "health")
            assert code == 0, out
            assert json.loads(out)["alive"] is True
            code, out = await ctl(socket_path, "status")
            assert code == 0 and json.loads(out)["instance_id"] == instance.instance_id, out
            gc_status = json.loads(out)["gc"]  # the process applied its collector settings once up
            assert gc_status["thresholds"][0] == 1_000_000 and gc_status["frozen_objects"] > 10_000, gc_status
            code, out = await ctl(socket_path, "no-such-command")
            assert code == 1 and "unknown command" in out

            cluster.signal(0, signal.SIGTERM)
            await receive_until(lambda: "STOPPING=1" in messages, 60)
            with trio.fail_after(60):
                while instance.alive:
                    await trio.sleep(0.05)
        finally:
            await cluster.stop_all()
            nursery.cancel_scope.cancel()
    notify.close()

    assert instance.proc.returncode == 0, (await trio.Path(instance.log_path).read_text())[-3000:]
    ready = messages.index("READY=1")
    first_watchdog = messages.index("WATCHDOG=1")
    first_status = next(i for i, m in enumerate(messages) if m.startswith("STATUS="))
    stopping = messages.index("STOPPING=1")
    assert ready < first_watchdog and ready < first_status and ready < stopping
    assert any(m.endswith("matches owned") for m in messages if m.startswith("STATUS="))
    assert not await trio.Path(socket_path).exists()  # the admin socket is removed on the way out
