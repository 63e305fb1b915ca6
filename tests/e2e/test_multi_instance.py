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
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import trio

from daemon.replay.synth import synthesise
from daemon.store.locks import instance_of
from tests.harness.cluster import Cluster, record_kid

pytestmark = pytest.mark.slow


def _aps(record: dict[str, Any]) -> dict[str, Any]:
    return (record.get("payload") or {}).get("aps") or {}


def _event_ids(record: dict[str, Any]) -> set[tuple[str, str]]:
    """(type, subject) of every key event an update carried."""
    aps = _aps(record)
    state = aps.get("content-state") or {}
    out: set[tuple[str, str]] = set()
    for ev in state.get("events") or []:
        out.add((str(ev.get("type")), str(ev.get("subject"))))
    return out


def _wicket_subjects(tape: Any) -> set[str]:
    """Wickets that stand at the end of the tape (corrected or deleted ones excluded), named as the engine
    names them: innings and dismissed batter ("S1:900401")."""
    fixture = tape.fixture_at(len(tape))
    out = set()
    for ball in fixture.get("balls") or []:
        score = ball.get("score") or {}
        if score.get("is_wicket") and ball.get("batsmanout_id"):
            out.add(f"{ball['scoreboard']}:{ball['batsmanout_id']}")
    return out


def _check_exclusive_ownership(cluster: Cluster) -> None:
    per_match: dict[str, list[tuple[float, str]]] = defaultdict(list)
    token_match = {tok: m.match_id for m in cluster.matches.values() for tok in m.tokens}
    for record in cluster.apns.records:
        match_id = token_match.get(record["token"])
        if match_id is not None and record.get("status") == 200:
            per_match[match_id].append((record["time"], record_kid(record) or "?"))
    for match_id, seq in per_match.items():
        seq.sort()
        runs: list[str] = []
        for _, kid in seq:
            if not runs or runs[-1] != kid:
                runs.append(kid)
        assert len(runs) == len(set(runs)), f"match {match_id} pushed by interleaved owners: {runs}"


def _check_deliveries(cluster: Cluster, tapes: list[Any]) -> None:
    deliveries = cluster.deliveries()
    by_id = {str(t.fixture_id): t for t in tapes}
    for match in cluster.matches.values():
        wickets = _wicket_subjects(by_id[match.match_id])
        assert wickets, "a synthesised T20 has wickets"
        for token in match.tokens:
            records = deliveries.get(token, [])
            ends = [r for r in records if _aps(r).get("event") == "end"]
            assert ends, f"token of {match.match_id} got no end"
            assert all("dismissal-date" in _aps(r) for r in ends)
            got = set().union(*(_event_ids(r) for r in records)) if records else set()
            missing = {b for b in wickets if ("wicket", b) not in got}
            assert not missing, f"{match.match_id}: wickets {sorted(missing)} never reached a token"
            stamps = [int(_aps(r)["timestamp"]) for r in records if _aps(r).get("event") == "update"]
            # arrival order may interleave a repeat, but the device keeps the newest: a repeat carries
            # the same timestamp as the original, so at most one timestamp per alerting event
            alerts: dict[tuple[str, str, str], set[int]] = defaultdict(set)
            for r in records:
                aps = _aps(r)
                if aps.get("alert") and aps.get("event") == "update":
                    state = aps.get("content-state") or {}
                    head = (state.get("events") or [{}])[0]
                    # the same event is the same ball too: a catch overturned on review and the batter's
                    # real dismissal later are two alerts, not one shown twice
                    key = (str(state.get("eventType")), str(head.get("subject")), str(head.get("ballId")))
                    alerts[key].add(int(aps["timestamp"]))
            for key, ts in alerts.items():
                assert len(ts) == 1, f"alert {key} shown {len(ts)} times on one device"
            assert stamps, "updates were delivered"


async def _run_cluster(
    tmp_path: Path, moto_url: str, *, matches: int, instances: int, kill_every: float | None, seed: int
) -> tuple[Cluster, list[Any]]:
    tapes = [synthesise("T20", seed=seed + i) for i in range(matches)]
    cluster = Cluster(
        tmp_path,
        moto_url=moto_url,
        tapes=tapes,
        table_prefix=f"mi{seed}-",
        speed=400.0,
        followers_per_match=4,
        lease_s=5.0,
        cadence_s=0.25,
        cycle_s=1.0,
        innings_break_s=600.0,
    )
    rng = random.Random(seed)
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery, instances=instances)
        try:
            with trio.fail_after(400):
                ended = False
                next_kill = trio.current_time() + (kill_every or 1e9)
                while not ended:
                    ended = await cluster.wait_all_ended(1.0)
                    if kill_every and trio.current_time() >= next_kill and not ended:
                        slot = rng.choice(sorted(cluster.instances))
                        cluster.kill(slot)
                        cluster.spawn(slot)
                        next_kill = trio.current_time() + kill_every
        finally:
            await cluster.stop_all()
            nursery.cancel_scope.cancel()
    return cluster, tapes


async def test_each_match_has_one_owner_at_a_time_and_every_session_gets_the_lifecycle(
    tmp_path: Path, moto_server: Any
) -> None:
    cluster, tapes = await _run_cluster(
        tmp_path, moto_server.url, matches=3, instances=2, kill_every=None, seed=11
    )
    _check_exclusive_ownership(cluster)
    _check_deliveries(cluster, tapes)


async def test_kill_9_mid_match_moves_matches_and_loses_no_wicket(tmp_path: Path, moto_server: Any) -> None:
    cluster, tapes = await _run_cluster(
        tmp_path, moto_server.url, matches=3, instances=3, kill_every=6.0, seed=21
    )
    assert len(cluster.retired) > 3, "instances were killed during the run"
    _check_exclusive_ownership(cluster)
    _check_deliveries(cluster, tapes)


def _one_match(
    tmp_path: Path, moto_url: str, *, seed: int, speed: float, lease_s: float
) -> tuple[Cluster, list[Any]]:
    tapes = [synthesise("T20", seed=seed)]
    cluster = Cluster(
        tmp_path,
        moto_url=moto_url,
        tapes=tapes,
        table_prefix=f"one{seed}-",
        speed=speed,
        followers_per_match=3,
        lease_s=lease_s,
        cadence_s=0.25,
        cycle_s=1.0,
        innings_break_s=600.0,
    )
    return cluster, tapes


async def test_a_paused_instance_pushes_nothing_after_waking(tmp_path: Path, moto_server: Any) -> None:
    cluster, tapes = _one_match(tmp_path, moto_server.url, seed=31, speed=150.0, lease_s=5.0)
    match_id = str(tapes[0].fixture_id)
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
    # a long lease: a lock still held after exit would be visible for 30 s
    cluster, tapes = _one_match(tmp_path, moto_server.url, seed=41, speed=300.0, lease_s=30.0)
    match_id = str(tapes[0].fixture_id)
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
            assert await cluster.wait_all_ended(240)
        finally:
            await cluster.stop_all()
            nursery.cancel_scope.cancel()
    _check_exclusive_ownership(cluster)
    _check_deliveries(cluster, tapes)
