"""DynamoDB faults: client-side throttling (a botocore hook on the daemon's own client) and the TCP link
through the fault proxy (latency, resets, a blackhole longer than a lease).

Each test checks the outcome in DynamoDB and on the APNs server's record: the daemon stayed up, botocore's
retries absorbed what they can, a lease that could not be renewed stopped the owner's pushes, the match was
resumed (by another instance or the same one) without a gap, and every session got every wicket and an end.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import trio

from daemon import metrics
from daemon.store.locks import instance_of
from tests.doubles import sample
from tests.faults.checks import SHORT_OVERS, ask, assert_nothing_lost, first_updates
from tests.harness.dynamo_throttle import DynamoThrottle
from tests.harness.fault_rig import KEY_ID, SECOND_KEY_ID, FaultRig, aps

pytestmark = pytest.mark.slow


def _restarts() -> float:
    return sample("sightscreen_actor_restarts_total", {"actor": "match"})


@pytest.mark.parametrize("code", ["ProvisionedThroughputExceededException", "ThrottlingException"])
async def test_intermittent_throttling_is_absorbed_by_botocore_retries(make_rig: Any, code: str) -> None:
    async with make_rig(seed=3, overs=SHORT_OVERS) as rig:
        await rig.wait_for(first_updates(rig, 6), 60, "the match under way")
        restarts = _restarts()
        throttle = DynamoThrottle(rig.daemon.dynamo.client).install(code=code, every=4)
        await assert_nothing_lost(rig)
        throttle.remove()
        assert throttle.throttled["UpdateItem"] > 0, "state writes and lease renewals were throttled"
        assert _restarts() == restarts, "botocore retried every throttled call: no actor crashed"
        item = await rig.match_item()
        # A renewal that botocore retries with backoff may outlast the short test lease; then the same
        # instance takes the match back (a new epoch) and carries on, as the checks above showed.
        assert item is not None and item["instanceId"] == rig.daemon.owner_id


async def test_throttling_past_the_retry_budget_and_the_lease_then_the_owner_resumes_without_a_gap(
    make_rig: Any,
) -> None:
    # the whole T10: the owner lets go, stays refused 6 s and takes the match back ~12 s after the first
    # wicket, with play still to come
    async with make_rig(seed=1, lease_s=3.0, extra={"dynamodb": {"max_attempts": 2}}) as rig:
        await rig.wait_for(lambda: bool(rig.served_wickets()), 60, "the first wicket served")
        orchestrator = rig.daemon.orchestrator
        assert orchestrator is not None
        throttle = DynamoThrottle(rig.daemon.dynamo.client).install(every=1)
        await rig.wait_for(lambda: not orchestrator.owned, 30, "the owner to let the match go")
        stopped_at = time.time()
        await trio.sleep(6.0)  # every DynamoDB call of the daemon is refused for a while longer
        throttle.remove()
        late = [r for r in rig.apns.records if r["status"] == 200 and stopped_at < r["time"]]
        assert not late, "nothing was pushed while the match had no owner"
        # the lease is 3 s and the orchestrator looks every second: it takes the match back soon
        await rig.wait_for(lambda: bool(orchestrator.owned), 20, "the instance to take the match back")
        await assert_nothing_lost(rig)
        item = await rig.match_item()
        assert item is not None and int(item["ownerEpoch"]) >= 2, "the same instance took the match back"
        assert item["instanceId"] == rig.daemon.owner_id


async def test_a_slow_and_resetting_link_to_dynamodb_loses_nothing(make_rig: Any) -> None:
    async with make_rig(seed=4, overs=SHORT_OVERS) as rig:
        proxy = rig.proxies["dynamodb"]
        await rig.wait_for(first_updates(rig, 6), 60, "the match under way")
        proxy.set(latency_s=0.02)
        resets = 0
        for _ in range(4):
            await trio.sleep(0.8)
            resets += proxy.reset()
        assert resets > 0, "open connections to DynamoDB were reset"
        await assert_nothing_lost(rig)


async def test_seconds_of_dynamodb_latency_keep_ownership_with_a_ten_second_lease(make_rig: Any) -> None:
    """Every chunk of every DynamoDB exchange waits a second each way, so a call takes three to four seconds,
    with the production lease (10 s) and skew bound (1 s): renewals are timed from their sends, started ahead
    of slow answers and run on threads of their own, so each lands inside the lease and the match never
    changes owner."""
    async with make_rig(seed=4, lease_s=10.0, extra={"orchestrator": {"clock_skew_bound_s": 1.0}}) as rig:
        await rig.wait_for(first_updates(rig, 4), 60, "the match under way")
        before = await rig.match_item()
        assert before is not None
        losses = sample("sightscreen_lock_losses_total")
        rig.proxies["dynamodb"].set(latency_s=1.0)
        await trio.sleep(25.0)  # two and a half leases
        rig.proxies["dynamodb"].clear()
        await assert_nothing_lost(rig)
        after = await rig.match_item()
        assert after is not None and after["ownerEpoch"] == before["ownerEpoch"], "ownership never moved"
        assert after["instanceId"] == before["instanceId"]
        assert sample("sightscreen_lock_losses_total") == losses, "no lease was lost on the way"


async def test_dynamodb_unreachable_past_a_lease_the_owner_stops_and_another_instance_resumes(
    make_rig: Any,
) -> None:
    # the whole T10: the hand-over (a lease, then 2 s of two owners) is done with play still to come
    async with make_rig(seed=1, lease_s=3.0) as rig:
        first = rig.daemon
        await rig.wait_for(lambda: bool(rig.served_wickets()), 60, "the first wicket served")
        async with trio.open_nursery() as nursery:
            # a second instance, with its own link to DynamoDB and its own APNs key
            second = rig.new_daemon("fault-i2", key_id=SECOND_KEY_ID, dynamo_direct=True)
            await nursery.start(second.run)
            try:
                rig.proxies["dynamodb"].set(blackhole=True)

                async def owner() -> str | None:
                    item = await rig.match_item()
                    return None if item is None else instance_of(str(item.get("instanceId")))

                with trio.fail_after(60):
                    while await owner() != "fault-i2":
                        await trio.sleep(0.1)
                await trio.sleep(2.0)  # the cut-off owner keeps running, blind, while the new one pushes
                rig.proxies["dynamodb"].clear()
                await assert_nothing_lost(rig)
                assert not first.finished.is_set(), "the cut-off instance stayed up"
            finally:
                with trio.CancelScope(shield=True):
                    await rig.stop_daemon(second)
                nursery.cancel_scope.cancel()
        item = await rig.match_item()
        assert item is not None and int(item["ownerEpoch"]) >= 2, "another instance took the match over"
        _check_one_owner_at_a_time(rig, item)


def _check_one_owner_at_a_time(rig: FaultRig, item: dict[str, Any]) -> None:
    """Accepted pushes, in server order, come in runs from one instance at a time, each run an ownership epoch.

    The second instance takes over while the first is cut off. On a loaded machine the 3-s test lease of the
    second may then run out in its turn (moto answering the cut-off instance's backlog), and the first takes
    the match back under a third epoch: that is a correct hand-over, not an interleaving. So: at most as many
    runs as epochs, the second instance has a run, the last run is the final owner's, and no instance ever
    delivered a display older than one another instance had already delivered to that token (what a cut-off
    owner pushing blind after the takeover would do).
    """
    runs: list[str] = []
    newest: dict[str, tuple[int, str]] = {}  # token -> (newest update timestamp delivered, by which key)
    for record in sorted(rig.apns.records, key=lambda r: r["time"]):
        if record["status"] != 200:
            continue
        kid = rig.record_kid(record) or "?"
        if not runs or runs[-1] != kid:
            runs.append(kid)
        if aps(record).get("event") != "update":
            continue
        stamp = int(aps(record)["timestamp"])
        seen = newest.get(record["token"])
        if seen is not None and seen[1] != kid:
            assert stamp >= seen[0], (
                f"{kid} delivered a display ({stamp}) older than {seen[1]}'s ({seen[0]}): blind"
            )
        if seen is None or stamp >= seen[0]:
            newest[record["token"]] = (stamp, kid)
    epochs = int(item["ownerEpoch"])
    assert len(runs) <= epochs, f"pushes from interleaved owners: {runs} in {epochs} epochs"
    assert SECOND_KEY_ID in runs, f"the second instance never pushed: {runs}"
    final_key = {"fault-i1": KEY_ID, "fault-i2": SECOND_KEY_ID}[instance_of(str(item["instanceId"]))]
    assert runs[-1] == final_key, f"the last pushes {runs} are not the final owner's ({item['instanceId']})"


async def test_a_stop_while_dynamodb_is_black_holed_ends_within_the_grace_and_counts_the_locks_left(
    make_rig: Any,
) -> None:
    """SIGTERM while DynamoDB answers nothing: calls under way are abandoned, the locks it cannot release are
    left to run out (counted), and the process is done within ``shutdown_grace_s``, before systemd's or
    Docker's SIGKILL."""
    async with make_rig(seed=2, overs=SHORT_OVERS) as rig:
        await rig.wait_for(first_updates(rig, 4), 60, "the match under way")
        left = metrics.REGISTRY.get_sample_value("sightscreen_leases_left_to_expire_total") or 0.0
        rig.proxies["dynamodb"].set(blackhole=True)
        await trio.sleep(0.5)  # calls now hang: renewals, the cache reader, the orchestrator's reads
        grace = rig.daemon.config.instance.shutdown_grace_s
        rig.daemon.shutdown()
        with trio.fail_after(grace):  # the guarantee itself: the stop is bounded by the grace
            await rig.daemon.finished.wait()
        now_left = metrics.REGISTRY.get_sample_value("sightscreen_leases_left_to_expire_total") or 0.0
        assert now_left - left >= 2, "the match's lock and the feed's lease were left to run out, counted"
        rig.proxies["dynamodb"].clear()


async def test_during_a_dynamodb_cut_the_admin_socket_says_so_instead_of_failing(make_rig: Any) -> None:
    async with make_rig(seed=2, overs=SHORT_OVERS) as rig:
        await rig.wait_for(first_updates(rig, 2), 60, "the match under way")
        socket_path = rig.daemon.config.admin.socket_path
        rig.proxies["dynamodb"].set(blackhole=True)
        try:
            with trio.fail_after(30):
                matches = await ask(socket_path, b"matches\n")
                ready = await ask(socket_path, b"ready\n")
                match = await ask(socket_path, b"match 1\n")
        finally:
            rig.proxies["dynamodb"].clear()
        assert matches["ok"] is True, matches
        assert "active-matches unreadable" in matches["result"]["error"]
        assert [m["match_id"] for m in matches["result"]["owned"]] == [rig.match_id]
        assert ready["ok"] is True and ready["result"]["ready"] is False
        assert str(ready["result"]["checks"]["dynamodb"]).startswith("unreachable")
        assert match["ok"] is False and "active-matches is unreadable" in match["error"]
        await assert_nothing_lost(rig)
