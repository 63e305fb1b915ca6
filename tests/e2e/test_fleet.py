"""One fleet per region, as separate daemon processes on one moto server, one replay server and one APNs
server: SportMonks is polled by one instance for the region (the replay server counts the calls), a feed
leader killed with SIGKILL hands the feed on and every wicket still reaches every token, a leader paused
past its lease writes nothing to the cache once it wakes, and the region-wide jobs run on one instance."""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from daemon.store.locks import instance_of
from tests.harness.cluster import (
    Cluster,
    Instance,
    admin_request,
    build_cluster,
    check_deliveries,
    check_exclusive_ownership,
    metric_sum,
)

pytestmark = pytest.mark.slow

FEED_KEY = "feed:default"


async def _leader(cluster: Cluster) -> tuple[Instance, int]:
    """The live instance holding the feed lease, and its epoch."""
    with trio.fail_after(60):
        while True:
            item = await cluster.repos.locks.get(FEED_KEY)
            if item is not None:
                for inst in cluster.instances.values():
                    if inst.alive and instance_of(str(item["owner"])) == inst.instance_id:
                        return inst, int(item["epoch"])
            await trio.sleep(0.1)


async def _feed(cluster: Cluster, inst: Instance) -> dict[str, Any]:
    with trio.fail_after(30):
        while (answer := await admin_request(cluster.admin_socket(inst), "feed")) is None:
            await trio.sleep(0.2)
    return dict(answer)


def _calls(feed: dict[str, Any]) -> int:
    return sum(per.get("ok", 0) + per.get("error", 0) + per.get("retry", 0) for per in feed["calls"].values())


@pytest.mark.timeout(900)  # the run's own bound is 400 s, the start and the checks come on top
async def test_three_instances_poll_sportmonks_as_one_and_a_killed_leader_hands_the_feed_on(
    tmp_path: Path, moto_server: Any
) -> None:
    # T20s shortened to 10 overs an innings (~20 s): the leader is killed ~10 s in, and most of the play
    # (wickets included) is polled by its successor. An 8 s lease, as the hot match's fault tests have it:
    # moto (one thread) on a machine loaded by the rest of the suite must not make leaders churn.
    cluster = build_cluster(
        tmp_path, moto_server.url, matches=2, seed=61, prefix="fl61-", speed=300.0, lease_s=8.0, overs=10
    )
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery, instances=3)
        try:
            with trio.fail_after(60):
                while not cluster.apns.records:
                    await trio.sleep(0.2)
            leader, epoch = await _leader(cluster)
            # a window with a stable leader: the replay server sees exactly the leader's calls. The leader's
            # count is read on both sides of each replay-server reading (admin requests take time under load,
            # and the leader polls meanwhile): the requests served lie between the inner and outer counts.
            outer0 = _calls(await _feed(cluster, leader))
            served0 = cluster.replay.sportmonks_requests()
            inner0 = _calls(await _feed(cluster, leader))
            before = {i.slot: _calls(await _feed(cluster, i)) for i in cluster.instances.values()}
            await trio.sleep(4.0)
            after = {i.slot: _calls(await _feed(cluster, i)) for i in cluster.instances.values()}
            inner1 = _calls(await _feed(cluster, leader))
            served1 = cluster.replay.sportmonks_requests()
            outer1 = _calls(await _feed(cluster, leader))
            assert (await _leader(cluster))[1] == epoch, "the leader changed during the window"
            made = {slot: after[slot] - before[slot] for slot in after}
            assert made[leader.slot] > 0
            assert all(n == 0 for slot, n in made.items() if slot != leader.slot), made
            # a request in flight at either reading is counted on one side only
            window = (inner1 - inner0, served1 - served0, outer1 - outer0)
            assert inner1 - inner0 - 3 <= served1 - served0 <= outer1 - outer0 + 3, window
            # the region's jobs run on one instance: the leader (they call SportMonks)
            runs = {}
            metrics: dict[int, str] = {}
            for inst in cluster.instances.values():
                text = metrics[inst.slot] = await admin_request(cluster.admin_socket(inst), "metrics")
                runs[inst.slot] = metric_sum(text, "sightscreen_job_cycles_total", job="fixture_sync_near")
            assert runs[leader.slot] >= 1 and all(n == 0 for s, n in runs.items() if s != leader.slot), runs
            # the fleet's metrics: who leads, the region's calls on every instance (the leader's count)
            for slot, text in metrics.items():
                assert metric_sum(text, "sightscreen_feed_leader") == (1 if slot == leader.slot else 0)
                assert (
                    metric_sum(text, "sightscreen_sportmonks_region_calls_last_hour", endpoint="livescores")
                    > 0
                )
            assert metric_sum(metrics[leader.slot], "sightscreen_feed_leader_changes_total") >= 1
            # the admin socket: every instance names the same leader; a follower's cache is fresh
            for inst in cluster.instances.values():
                feed = await _feed(cluster, inst)
                assert instance_of(str(feed["region"]["leader"])) == leader.instance_id
                assert feed["region"]["epoch"] == epoch and feed["region"]["last_poll_age_s"] is not None
                jobs = await admin_request(cluster.admin_socket(inst), "jobs")
                assert jobs["fixture-sync"]["running"] is (inst.slot == leader.slot)
                if inst.slot != leader.slot:
                    assert feed["leading"] is False
                    if feed["subscribers"]:  # a follower that owns a match reads it from the cache
                        assert feed["cache_reader"]["reads"] > 0
                        assert feed["cache_reader"]["newest_fixture_age_s"] is not None
                        assert feed["cache_reader"]["last_poll_age_s"] is not None
                        assert (
                            metric_sum(metrics[inst.slot], "sightscreen_fixture_cache_age_seconds_count") > 0
                        )
            # kill -9 the leader mid-match: another instance takes the lease and polls on
            cluster.kill(leader.slot)
            with trio.fail_after(60):
                while True:
                    item = await cluster.repos.locks.get(FEED_KEY)
                    if item is not None and int(item["epoch"]) > epoch:
                        break
                    await trio.sleep(0.1)
            assert instance_of(str(item["owner"])) != leader.instance_id
            successor = next(
                i
                for i in cluster.instances.values()
                if i.alive and instance_of(str(item["owner"])) == i.instance_id
            )
            text = await admin_request(cluster.admin_socket(successor), "metrics")
            assert metric_sum(text, "sightscreen_feed_leader_changes_total") >= 1
            cluster.spawn(leader.slot)
            assert await cluster.wait_all_ended(400), await cluster.matches_report()
        finally:
            await cluster.stop_all()
            nursery.cancel_scope.cancel()
    check_exclusive_ownership(cluster)
    check_deliveries(cluster)


async def test_a_feed_leader_paused_past_its_lease_writes_nothing_to_the_cache_after_waking(
    tmp_path: Path, moto_server: Any
) -> None:
    cluster = build_cluster(tmp_path, moto_server.url, seed=71, prefix="fl71-", speed=150.0, lease_s=3.0)
    match_id = str(cluster.tapes[0].fixture_id)
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery, instances=2)
        cache = cluster.repos.fixture_cache
        try:
            with trio.fail_after(60):
                while not (await cache.batch_get_entries([match_id])):
                    await trio.sleep(0.2)
            paused, epoch = await _leader(cluster)
            paused.proc.send_signal(signal.SIGSTOP)
            with trio.fail_after(60):
                while True:
                    item = await cluster.repos.locks.get(FEED_KEY)
                    if item is not None and int(item["epoch"]) > epoch:
                        break
                    await trio.sleep(0.1)
            new_epoch = int(item["epoch"])
            with trio.fail_after(30):
                while (await cache.batch_get_entries([match_id]))[match_id].epoch != new_epoch:
                    await trio.sleep(0.1)
            paused.proc.send_signal(signal.SIGCONT)
            # watch the cached item while the woken leader finds out: its epoch never goes back
            seen_epochs: list[int] = []
            end = trio.current_time() + 4.0
            while trio.current_time() < end:
                entries = await cache.batch_get_entries([match_id])
                seen_epochs.append(entries[match_id].epoch)
                await trio.sleep(0.03)
            assert set(seen_epochs) == {new_epoch}, sorted(set(seen_epochs))
            woke = await _feed(cluster, paused)
            assert woke["leading"] is False and woke["leadership"]["stepped_down"] >= 1
            writes = woke["cache"]["writes"]
            await trio.sleep(2.0)
            assert (await _feed(cluster, paused))["cache"]["writes"] == writes
        finally:
            await cluster.stop_all()
            nursery.cancel_scope.cancel()
    log = paused.log_path.read_text()
    assert re.findall(r'"event": "feed_leader_stepped_down"', log), "the woken leader said it stepped down"
