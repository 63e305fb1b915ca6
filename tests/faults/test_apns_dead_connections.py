"""APNs connections that die without a word, under a whole daemon following a match (the fault rig).

Two cases, judged from what each device token received and from the daemon's readiness:

- connections left open but dead while new ones get through (a NAT or load balancer that dropped the flows:
  the APNs server's ``freeze``): the sender hears nothing, PINGs, retires the connections and re-sends what
  they held on fresh ones; every token gets every wicket and the end;
- a black hole (``FaultProxy``: nothing crosses, old or new connections): readiness turns false, saying why,
  while no connection answers, and true again once the hole lifts; nothing is lost.

Before the sender judged connections by their answers, the first case timed requests out every 10 s on the
same connections for as long as the match lasted, and readiness said true through both.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.faults.checks import SHORT_OVERS, assert_nothing_lost, first_updates
from tests.harness.fault_rig import FaultRig

pytestmark = pytest.mark.slow

# Short retry and reconnect delays, so a fault clears in a few wall seconds of a 400x match; the request
# deadline stays at its default (10 s): only the judgement by answers replaces a dead connection sooner.
APNS = {
    "retry_backoff_s": 0.1,
    "retry_backoff_max_s": 1.0,
    "reconnect_backoff_s": 0.1,
    "reconnect_backoff_max_s": 1.0,
    "max_retries": 8,
    "ping_silence_s": 1.0,
    "ping_timeout_s": 1.0,
}


class Readiness:
    """Samples the daemon's readiness (``Daemon.readiness``, what ``ctl ready`` and the gauges show)."""

    def __init__(self, rig: FaultRig) -> None:
        self.rig = rig
        self.samples: list[tuple[bool, Any]] = []

    async def sample(self, every_s: float = 0.1) -> None:
        while True:
            answer = await self.rig.daemon.readiness()
            self.samples.append((answer["ready"], answer["checks"].get("apns")))
            await trio.sleep(every_s)

    def apns_refusals(self) -> list[str]:
        """What the ``apns`` check said whenever it was not true."""
        return [str(apns) for _, apns in self.samples if apns is not True]

    async def wait(self, ready: bool, timeout: float) -> None:
        with trio.fail_after(timeout):
            while not self.samples or self.samples[-1][0] is not ready:
                await trio.sleep(0.05)


def _retired(rig: FaultRig) -> int:
    from daemon import metrics

    return int(
        sum(
            metrics.REGISTRY.get_sample_value(
                "sightscreen_apns_connections_retired_total", {"pool": "push", "cause": cause}
            )
            or 0.0
            for cause in ("ping_unanswered", "silent", "requests_unanswered")
        )
    )


async def test_connections_left_open_but_dead_are_replaced_and_every_device_gets_everything(
    make_rig: Any,
) -> None:
    async with make_rig(seed=2, overs=SHORT_OVERS, extra={"apns": APNS}) as rig:
        readiness = Readiness(rig)
        async with trio.open_nursery() as sampler:
            sampler.start_soon(readiness.sample)
            await rig.wait_for(first_updates(rig, 6), 60, "the match under way")
            await readiness.wait(True, 30)
            retired = _retired(rig)
            connects = rig.daemon.sender.stats()["connects"]
            for _ in range(2):  # the flows die, and the replacements' die again a little later
                rig.apns.freeze_connections()
                await trio.sleep(2.5)
            await assert_nothing_lost(rig)
            await readiness.wait(True, 30)
            sampler.cancel_scope.cancel()
        stats = rig.daemon.sender.stats()
        assert _retired(rig) >= retired + 2 and stats["connects"] >= connects + 2, stats
        # Readiness may have said false for the moment no connection answered (both died together); it says
        # true once a fresh one answers.
        assert readiness.samples[-1] == (True, True), readiness.apns_refusals()


async def test_readiness_is_false_through_an_apns_black_hole_and_true_after_it_and_nothing_is_lost(
    make_rig: Any,
) -> None:
    async with make_rig(seed=3, overs=SHORT_OVERS, extra={"apns": {**APNS, "connect_timeout_s": 2.0}}) as rig:
        proxy = rig.proxies["apns"]
        readiness = Readiness(rig)
        async with trio.open_nursery() as sampler:
            sampler.start_soon(readiness.sample)
            await rig.wait_for(first_updates(rig, 6), 60, "the match under way")
            await readiness.wait(True, 30)
            proxy.set(blackhole=True)
            await readiness.wait(False, 15)
            _, why = readiness.samples[-1]
            assert "push pool: no usable connection" in str(why), why
            await trio.sleep(2.0)
            assert readiness.samples[-1][0] is False, "still no answer from APNs: still not ready"
            proxy.clear()
            await readiness.wait(True, 30)
            await assert_nothing_lost(rig)
            sampler.cancel_scope.cancel()
        assert rig.daemon.sender.stats()["pushes"]["failed"] == 0
