"""TCP faults on the daemon's links to SportMonks and APNs, through the fault proxy (``FaultProxy``): resets,
a blackhole (the peer looks hung: the worst case for timeouts), latency and a narrow pipe.

(The DynamoDB link's faults are in ``test_dynamodb_faults.py``.) Each test checks that the daemon stayed up,
that the breaker or the sender's retries did what they are configured to do, and that every session got every
standing wicket and an end once the link was whole again.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.faults.checks import SHORT_OVERS, assert_nothing_lost, first_updates

pytestmark = pytest.mark.slow

FAST_APNS = {
    "retry_backoff_s": 0.1,
    "retry_backoff_max_s": 1.0,
    "reconnect_backoff_s": 0.1,
    "reconnect_backoff_max_s": 1.0,
    "max_retries": 20,
}


async def test_apns_connections_reset_mid_match_are_re_established_and_nothing_is_lost(make_rig: Any) -> None:
    async with make_rig(seed=2, overs=SHORT_OVERS, extra={"apns": FAST_APNS}) as rig:
        proxy = rig.proxies["apns"]
        await rig.wait_for(first_updates(rig, 6), 60, "the match under way")
        connects = rig.daemon.sender.stats()["connects"]
        resets = 0
        for _ in range(3):
            resets += proxy.reset()
            await trio.sleep(1.0)
        assert resets >= 2
        await assert_nothing_lost(rig)
        stats = rig.daemon.sender.stats()
        assert stats["connects"] >= connects + 2 and stats["pushes"]["failed"] == 0, stats


async def test_an_apns_blackhole_times_requests_out_and_they_are_delivered_when_it_lifts(
    make_rig: Any,
) -> None:
    async with make_rig(
        seed=3, overs=SHORT_OVERS, extra={"apns": {**FAST_APNS, "request_timeout_s": 0.5}}
    ) as rig:
        proxy = rig.proxies["apns"]
        await rig.wait_for(first_updates(rig, 6), 60, "the match under way")
        proxy.set(blackhole=True)
        await trio.sleep(3.0)
        proxy.clear()
        await assert_nothing_lost(rig)
        stats = rig.daemon.sender.stats()
        assert stats["retries"] >= 1 and stats["pushes"]["failed"] == 0, stats


async def test_a_sportmonks_blackhole_opens_the_breaker_and_the_feed_recovers(make_rig: Any) -> None:
    config = {"sportmonks": {"timeout_s": 0.3, "max_retries": 1, "breaker_failure_threshold": 3}}
    async with make_rig(seed=5, overs=SHORT_OVERS, extra=config) as rig:
        proxy = rig.proxies["sportmonks"]
        breaker = rig.daemon.client.breaker
        await rig.wait_for(first_updates(rig, 6), 60, "the match under way")
        opened = breaker.opened_count
        proxy.set(blackhole=True)
        await rig.wait_for(lambda: breaker.opened_count > opened, 30, "the breaker to open")
        await trio.sleep(1.5)
        proxy.clear()
        proxy.reset()  # the held connections carry stale answers; the client has moved on
        await assert_nothing_lost(rig)
        assert breaker.state == "closed"


async def test_a_slow_narrow_link_to_sportmonks_delays_but_loses_nothing(make_rig: Any) -> None:
    async with make_rig(seed=6, overs=SHORT_OVERS, extra={"sportmonks": {"timeout_s": 5.0}}) as rig:
        proxy = rig.proxies["sportmonks"]
        await rig.wait_for(first_updates(rig, 6), 60, "the match under way")
        proxy.set(latency_s=0.1, bandwidth_bps=2_000_000)
        await assert_nothing_lost(rig)
        assert rig.daemon.client.breaker.opened_count == 0, (
            "slow answers within the deadline are not failures"
        )
