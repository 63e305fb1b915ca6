"""Several daemon processes on one moto server, the replay server and the APNs server.

Each daemon process signs with its own provider-token key id, so every push the APNs server accepted says
which process sent it. From that record the tests check ownership (no two processes push one match at the
same time), continuity across ``kill -9`` (every wicket reaches every token), idempotence of repeats (an
alert is never shown twice: a repeated alert carries the same timestamp), and the lifecycle's end.
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from daemon.store.locks import instance_of
from tests.harness.cluster import Cluster, build_cluster, check_deliveries, check_exclusive_ownership
from tests.harness.records import record_kid

pytestmark = pytest.mark.slow


async def _run_cluster(
    tmp_path: Path,
    moto_url: str,
    *,
    matches: int,
    instances: int,
    kill_every: float | None,
    seed: int,
    overs: int | None,
    lease_s: float = 5.0,
) -> Cluster:
    cluster = build_cluster(
        tmp_path,
        moto_url,
        seed=seed,
        matches=matches,
        overs=overs,
        prefix=f"mi{seed}-",
        speed=400.0,
        followers=4,
        lease_s=lease_s,
    )
    rng = random.Random(seed)
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery, instances=instances)
        try:
            ended = False
            with trio.move_on_after(400):
                next_kill = trio.current_time() + (kill_every or 1e9)
                while not ended:
                    ended = await cluster.wait_all_ended(1.0)
                    if kill_every and trio.current_time() >= next_kill and not ended:
                        slot = rng.choice(sorted(cluster.instances))
                        cluster.kill(slot)
                        cluster.spawn(slot)
                        # the next kill counted from when the new process answers, not from its spawn: on
                        # a loaded machine a start takes seconds, and kills paced by the wall clock alone
                        # could leave the region without a running engine for the whole match
                        await cluster.wait_healthy(120)
                        next_kill = trio.current_time() + kill_every
            assert ended, f"not every match ended in 400 s: {await cluster.matches_report()}"
        finally:
            await cluster.stop_all()
            nursery.cancel_scope.cancel()
    return cluster


@pytest.mark.timeout(900)  # the run's own bound is 400 s, the start and the checks come on top
async def test_each_match_has_one_owner_at_a_time_and_every_session_gets_the_lifecycle(
    tmp_path: Path, moto_server: Any
) -> None:
    # three short matches (8 overs an innings, ~12 s each) on two instances: ownership, not length, is the
    # point. Nothing is killed, so the lease is 8 s, as the hot match's fault tests have it: moto (one thread)
    # on a machine loaded by the rest of the suite must not make owners churn.
    cluster = await _run_cluster(
        tmp_path, moto_server.url, matches=3, instances=2, kill_every=None, seed=11, overs=8, lease_s=8.0
    )
    check_exclusive_ownership(cluster)
    check_deliveries(cluster)


@pytest.mark.timeout(900)  # the run's own bound is 400 s, the start and the checks come on top
async def test_kill_9_mid_match_moves_matches_and_loses_no_wicket(tmp_path: Path, moto_server: Any) -> None:
    # whole T20s (~30 s each): a kill every 6 s, each match lost with its owner and taken over (5-s lease)
    # several times while it is still being played
    cluster = await _run_cluster(
        tmp_path, moto_server.url, matches=3, instances=3, kill_every=6.0, seed=21, overs=None
    )
    assert len(cluster.retired) > 3, "instances were killed during the run"
    check_exclusive_ownership(cluster)
    check_deliveries(cluster)


async def test_a_paused_instance_pushes_nothing_after_waking(tmp_path: Path, moto_server: Any) -> None:
    cluster = build_cluster(tmp_path, moto_server.url, seed=31, prefix="one31-", speed=150.0, lease_s=5.0)
    match_id = str(cluster.tapes[0].fixture_id)
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery, instances=1)
        try:
            with trio.fail_after(120):
                while not cluster.apns.records:
                    await trio.sleep(0.2)
            paused = cluster.instances[0]
            cluster.spawn(1)  # a second instance, ready to take over
            paused.proc.send_signal(signal.SIGSTOP)
            stopped_at = time.time()
            with trio.fail_after(120):
                while True:
                    item = await cluster.repos.active_matches.get_active_match_state(match_id)
                    if item and instance_of(str(item.get("instanceId"))) != paused.instance_id:
                        break
                    await trio.sleep(0.2)
            await trio.sleep(2.0)
            paused.proc.send_signal(signal.SIGCONT)
            woke_at = time.time()
            await trio.sleep(4.0)
            late = [r for r in cluster.apns.records if record_kid(r) == paused.key_id and r["time"] > woke_at]
            assert not late, f"the paused instance pushed {len(late)} times after waking"
            item = await cluster.repos.active_matches.get_active_match_state(match_id)
            assert item is not None and instance_of(item["instanceId"]) != paused.instance_id
            lock = await cluster.repos.locks.get(f"match:{match_id}")
            assert lock is None or instance_of(lock["owner"]) != paused.instance_id
            assert stopped_at < woke_at
        finally:
            await cluster.stop_all()
            nursery.cancel_scope.cancel()


async def test_sigterm_releases_every_lock_at_once_and_the_match_continues_elsewhere(
    tmp_path: Path, moto_server: Any
) -> None:
    # a long lease: a lock still held after exit would be visible for 30 s; a T20 shortened to 8 overs an
    # innings (~17 s) still has most of its play after the hand-over
    cluster = build_cluster(
        tmp_path, moto_server.url, seed=41, prefix="one41-", speed=300.0, lease_s=30.0, overs=8
    )
    match_id = str(cluster.tapes[0].fixture_id)
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery, instances=1)
        try:
            with trio.fail_after(120):
                while len(cluster.apns.records) < 5:
                    await trio.sleep(0.2)
            owner = cluster.instances[0]
            cluster.spawn(1)
            await cluster.wait_healthy(timeout=120)
            owner.proc.send_signal(signal.SIGTERM)
            with trio.fail_after(60):
                while owner.alive:
                    await trio.sleep(0.05)
            assert owner.proc.returncode == 0
            lock = await cluster.repos.locks.get(f"match:{match_id}")
            assert lock is None or instance_of(lock["owner"]) != owner.instance_id, (
                "SIGTERM left the lock held"
            )
            # the other instance takes the match long before the 30 s lease could have run out
            with trio.fail_after(25):
                while True:
                    item = await cluster.repos.active_matches.get_active_match_state(match_id)
                    if item and instance_of(item["instanceId"]) == cluster.instances[1].instance_id:
                        break
                    await trio.sleep(0.2)
            assert await cluster.wait_all_ended(240), await cluster.matches_report()
        finally:
            await cluster.stop_all()
            nursery.cancel_scope.cancel()
    check_exclusive_ownership(cluster)
    check_deliveries(cluster)
