"""The one lease of match actors, region jobs and the feed leader (``actors.lease``).

The rules are pure (the deadline from the send, the next renewal ahead of slow answers); ``HeldLease`` runs
on moto's DynamoDB server, and on a store that answers slowly (in memory, so the autojump clock measures the
schedule alone).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import trio

from actors.lease import HeldLease, LeaseLost, lease_deadline, next_renewal_at
from daemon.store.locks import Lease


def test_a_lease_is_relied_on_from_its_send_less_the_skew_bound() -> None:
    assert lease_deadline(100.0, 10.0, 1.0) == 109.0


def test_the_next_renewal_comes_a_period_after_the_last_send_or_earlier_when_answers_are_slow() -> None:
    assert next_renewal_at(100.0, 2.5, 109.0, 0.01) == 102.5  # quick answers: a period after the send
    assert next_renewal_at(100.0, 2.5, 109.0, 4.0) == 101.0  # 4 s answers: 8 s before the deadline
    assert next_renewal_at(100.0, 2.5, 109.0, 6.0) == 100.25  # never sooner than a tenth of a period


class SlowLocks:
    """A lock table whose every call takes ``delay_s`` (``actors.ports.LeaseStore``), in memory."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.item: dict[str, Any] | None = None
        self.renewals = 0

    async def acquire_fenced(
        self, lock_key: str, owner: str, lease_s: float, *, fields: dict[str, Any] | None = None
    ) -> tuple[Lease | None, dict[str, Any] | None]:
        await trio.sleep(self.delay_s)
        self.item = {"owner": owner, "epoch": 1, "expiresAt": time.time() + lease_s}
        return Lease(lock_key, owner, 1, self.item["expiresAt"]), dict(self.item)

    async def extend_fenced(
        self, lease: Lease, lease_s: float, *, fields: dict[str, Any] | None = None
    ) -> Lease | None:
        await trio.sleep(self.delay_s)
        self.renewals += 1
        return Lease(lease.key, lease.owner, lease.epoch, time.time() + lease_s)

    async def release_fenced(self, lease: Lease) -> bool:
        return True


def _lease(store: Any, **kw: Any) -> HeldLease:
    return HeldLease(
        store,
        "match:1",
        "me",
        lease_s=kw.get("lease_s", 10.0),
        renew_every_s=kw.get("renew_every_s", 2.5),
        clock_skew_bound_s=kw.get("skew_s", 1.0),
        wall_clock=time.time,
    )


@pytest.mark.parametrize("delay_s", [0.01, 2.0, 4.0, 6.0, 6.4])
async def test_renewals_answered_slowly_still_land_inside_a_ten_second_lease(
    autojump_clock: Any, delay_s: float
) -> None:
    store = SlowLocks(0.01)
    lease = _lease(store)
    await lease.acquire()
    store.delay_s = delay_s  # DynamoDB turns slow with the lease held
    lapses = 0

    async def watch() -> None:
        nonlocal lapses
        while True:
            if not lease.held:
                lapses += 1
            await trio.sleep(0.05)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        with trio.move_on_after(120):
            reason = await lease.keep()
            raise AssertionError(f"the lease was lost: {reason}")
        nursery.cancel_scope.cancel()
    assert lapses == 0, "the lease never ran out between renewals"  # answers within 10 - 1 - 2.5 s
    assert store.renewals >= 120 / max(2.5, delay_s) - 2


async def test_a_renewal_sent_a_period_after_the_last_answer_would_let_a_slow_lease_lapse(
    autojump_clock: Any,
) -> None:
    """The schedule ``keep`` replaced: a renewal a period after the last answer, one at a time. With 4 s
    answers the lease runs out between renewals: the reason renewals are timed from their sends."""
    store = SlowLocks(0.01)
    lease = _lease(store, renew_every_s=10.0 / 3)
    await lease.acquire()
    store.delay_s = 4.0
    lapses = 0

    async def watch() -> None:
        nonlocal lapses
        while True:
            lapses += not lease.held
            await trio.sleep(0.05)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        for _ in range(5):
            await trio.sleep(lease.renew_every_s)  # after the answer, not after the send
            if lease.held:
                await lease.renew()
        nursery.cancel_scope.cancel()
    assert lapses > 0


async def test_a_lease_on_dynamodb_is_taken_renewed_refused_to_another_and_released(repos: Any) -> None:
    first = HeldLease(
        repos.locks,
        "job:x:eu",
        "a",
        lease_s=10.0,
        renew_every_s=2.5,
        clock_skew_bound_s=1.0,
        wall_clock=time.time,
    )
    second = HeldLease(
        repos.locks,
        "job:x:eu",
        "b",
        lease_s=10.0,
        renew_every_s=2.5,
        clock_skew_bound_s=1.0,
        wall_clock=time.time,
    )
    await first.acquire()
    assert first.held and first.epoch == 1 and first.fence.until == first.until
    item = await second.acquire()
    assert not second.held and (item or {}).get("owner") == "a", "refused, and told who holds it"
    before = first.until
    await trio.sleep(0.01)
    await first.renew(fields={"jobState": "{}"})
    assert first.until > before and first.fence.until == first.until
    assert (await repos.locks.read("job:x:eu") or {}).get("jobState") == "{}"
    await first.release()
    assert not first.held and first.fence.until == float("-inf")
    await second.acquire()
    assert second.held and second.epoch == 2, "a new holder gets a new epoch at once"
    with pytest.raises(LeaseLost):
        await first.renew()


async def test_a_lease_already_ours_from_an_earlier_request_is_renewed_before_it_is_relied_on(
    repos: Any,
) -> None:
    lease, _ = await repos.locks.acquire_fenced("match:7", "me", 10.0, now=time.time() - 5)
    assert lease is not None  # taken 5 s ago by a request whose send time this incarnation cannot know
    held = HeldLease(
        repos.locks,
        "match:7",
        "me",
        lease_s=10.0,
        renew_every_s=2.5,
        clock_skew_bound_s=1.0,
        wall_clock=time.time,
    )
    await held.acquire()
    assert held.held and held.epoch == lease.epoch
    item = await repos.locks.read("match:7")
    assert item is not None and float(item["expiresAt"]) > time.time() + 9, "renewed, from now"


async def test_a_lease_held_under_an_authority_stops_at_the_authoritys_end_whatever_its_own(
    autojump_clock: Any,
) -> None:
    """A shard's lease is bounded by the owner it is delivered for: its fence and ``check`` stop at the bound
    (the owner's lease as last confirmed), however long the shard's own lease lasts; a bound moved on moves
    them on, and the lease's own deadline still caps them."""
    store = SlowLocks(0.0)
    lease = _lease(store)
    await lease.acquire()
    now = trio.current_time()
    assert lease.fence.until == lease.until == now + 9.0
    lease.bound(now + 3.0)
    assert lease.fence.until == now + 3.0 and lease.usable_until == now + 3.0
    lease.check()
    await trio.sleep(3.0)
    with pytest.raises(LeaseLost, match="authority"):
        lease.check()
    assert lease.held, "the lease itself is still held: only the authority ran out"
    lease.bound(now + 20.0)  # the owner renewed: confirmed again
    assert lease.fence.until == lease.until == now + 9.0
    lease.check()
    await lease.renew()
    assert lease.fence.until == min(lease.until, now + 20.0)


async def test_a_settled_lease_is_held_for_its_record_and_dropped_here(repos: Any) -> None:
    """``settle``: the last renewal, long and with the work's record, then nothing more from this holder;
    refused (False) when another holder took the lease meanwhile."""
    first = HeldLease(
        repos.locks,
        "shard:1",
        "a",
        lease_s=5.0,
        renew_every_s=1.0,
        clock_skew_bound_s=1.0,
        wall_clock=time.time,
    )
    await first.acquire()
    assert await first.settle(hold_s=3600.0, fields={"doneAt": 1.0, "accepted": 3})
    assert first.lease is None and first.fence.until == float("-inf")
    item = await repos.locks.read("shard:1")
    assert item is not None and item["accepted"] == 3 and float(item["expiresAt"]) > time.time() + 3000
    second = HeldLease(
        repos.locks,
        "shard:1",
        "b",
        lease_s=5.0,
        renew_every_s=1.0,
        clock_skew_bound_s=1.0,
        wall_clock=time.time,
    )
    await second.acquire()
    assert not second.held, "a settled lease is not taken up again"
    stale, _ = await repos.locks.acquire_fenced("shard:2", "a", 5.0, now=time.time() - 10)
    assert stale is not None
    taken = HeldLease(
        repos.locks,
        "shard:2",
        "b",
        lease_s=5.0,
        renew_every_s=1.0,
        clock_skew_bound_s=1.0,
        wall_clock=time.time,
    )
    await taken.acquire()
    late = HeldLease(
        repos.locks,
        "shard:2",
        "a",
        lease_s=5.0,
        renew_every_s=1.0,
        clock_skew_bound_s=1.0,
        wall_clock=time.time,
    )
    late.lease = stale
    assert not await late.settle(hold_s=3600.0, fields={"doneAt": 2.0}), "another holder has it now"
