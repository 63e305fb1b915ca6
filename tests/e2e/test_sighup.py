"""SIGHUP on a real ``sightscreen run`` process: a graceful stop (exit 0, its match's lock released at once),
never the default hard exit that leaves the lock held until its lease runs out."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from daemon.replay.synth import synthesise
from daemon.store.locks import instance_of, match_lock_key
from tests.harness.cluster import Cluster

pytestmark = pytest.mark.slow


async def test_sighup_stops_gracefully_and_releases_the_match_lock(sock_dir: Path, moto_server: Any) -> None:
    # A long lease: were the lock left held, it would still be held when the process is gone.
    cluster = Cluster(
        sock_dir,
        moto_url=moto_server.url,
        tapes=[synthesise("T10", seed=21)],
        table_prefix="ops-sighup-",
        speed=20.0,
        followers_per_match=1,
        lease_s=60.0,
    )
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery, instances=1)
        instance = cluster.instances[0]
        (match_id,) = cluster.matches
        try:
            with trio.fail_after(120):
                while True:
                    lock = await cluster.repos.locks.get(match_lock_key(match_id))
                    if lock is not None and instance_of(str(lock.get("owner"))) == instance.instance_id:
                        break
                    assert instance.alive, (await trio.Path(instance.log_path).read_text())[-3000:]
                    await trio.sleep(0.2)
            cluster.signal(0, signal.SIGHUP)
            with trio.fail_after(60):
                while instance.alive:
                    await trio.sleep(0.05)
            log_text = await trio.Path(instance.log_path).read_text()
            assert instance.proc.returncode == 0, log_text[-3000:]
            assert "signal_received" in log_text and "SIGHUP" in log_text
            assert await cluster.repos.locks.get(match_lock_key(match_id)) is None, "the lock was left held"
            record = await cluster.repos.active_matches.get_active_match_state(match_id)
            assert record is not None and record["status"] == "active"  # handed over, not ended
        finally:
            await cluster.stop_all()
            nursery.cancel_scope.cancel()
