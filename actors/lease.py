"""One lease on one lock of ``cricket-locks``, held by this process: the match actors (``match:{id}``), the
region's feed leader (``feed:{region}``) and the region jobs (``job:{name}:{region}``) all hold theirs here.

A lease is relied on until ``sent + lease_s - clock_skew_bound_s`` by this process's monotonic clock, where
``sent`` is when the request that took or renewed it left: the server may have written it at once, and another
host's clock may be ahead by the skew bound. Renewals are timed from the sends, not the answers, and start
early enough that a slow answer (DynamoDB slow, a congested path) still lands inside the lease
(``next_renewal_at``). A refused renewal, or a deadline that passes before a renewal succeeded, loses the lease:
the holder stops at once. The ``Fence`` rides on every push a match actor makes and follows the deadline, so a
queued push of a holder that lost its lease never goes out. docs/delivery.md has the argument.

A lease held under another's authority (a shard of a hot match's fan-out, delivered for the match's owner) is
also bounded by that authority: ``bound(until)`` caps its deadline, its fence and ``check`` at the moment the
authority can no longer be relied on, however long the lease itself lasts. ``settle`` ends a lease whose work
is done with a last write that holds it (and its record) for a while, so nobody takes the work up again.

Decisions (``lease_deadline``, ``next_renewal_at``) are pure; ``HeldLease`` is the shell around the store.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import trio

from actors.errors import ActorError
from actors.ports import LeaseStore
from daemon.apns.types import Fence
from daemon.logs import get_logger
from daemon.metrics import LEASES_LEFT_TO_EXPIRE
from daemon.store.locks import Lease

log = get_logger("actors.lease")

# A renewal is started at least this many answer times before the deadline (the last answer's time counts):
# an answer as slow as the last one then still lands inside the lease with as much again to spare.
RTT_MARGIN = 2.0
# After a renewal that failed (DynamoDB unreachable, throttled past botocore's retries), try again after at
# most this long, for as long as the lease lasts.
RETRY_AFTER_S = 0.5
# How long a release may take before the lease is left to run out: a shutdown must end within its grace,
# whatever DynamoDB does (``daemon.runtime.assembly`` keeps two rounds of it in reserve).
RELEASE_S = 1.5
# What ``keep`` returns when the holder itself dropped or released the lease (not a loss).
GIVEN_UP = "the lease was given up"
# Renewals under way at once at most: with answers slower than the renewal period, the next goes out before
# the last is answered.
MAX_IN_FLIGHT = 3


class LeaseLost(ActorError):
    """This process no longer holds the lease: stop at once, write and push nothing more. Not a crash."""


def lease_deadline(sent_at: float, lease_s: float, clock_skew_bound_s: float) -> float:
    """Until when (this process's monotonic clock) a lease taken or renewed by a request sent at ``sent_at``
    may be relied on: counted from when the request left, less the skew bound between hosts' clocks."""
    return sent_at + lease_s - clock_skew_bound_s


def next_renewal_at(last_sent: float, renew_every_s: float, deadline: float, last_rtt_s: float) -> float:
    """When (monotonic) to send the next renewal: a period after the last was sent, or earlier when the
    answers are slow, so that an answer as slow as the last one, twice over, still comes before the deadline.
    Never sooner than a tenth of a period after the last send (no busy loop on a lease nearly gone)."""
    due = min(last_sent + renew_every_s, deadline - RTT_MARGIN * max(0.0, last_rtt_s))
    return max(due, last_sent + renew_every_s / 10)


class HeldLease:
    """The lease on ``key`` this process holds (or tries to). ``acquire`` takes it, ``keep`` renews it until
    it is lost, ``check`` raises ``LeaseLost`` once it cannot be relied on, ``release`` gives it up."""

    def __init__(
        self,
        store: LeaseStore,
        key: str,
        owner: str,
        *,
        lease_s: float,
        renew_every_s: float,
        clock_skew_bound_s: float,
        wall_clock: Callable[[], float],
        on_outcome: Callable[[str], None] = lambda outcome: None,
    ) -> None:
        """``on_outcome`` hears of each renewal: "ok", "lost" (refused or run out) or "error" (no answer)."""
        if not 0 < renew_every_s < lease_s or clock_skew_bound_s + renew_every_s >= lease_s:
            raise ValueError("a lease needs renew_every_s + clock_skew_bound_s below lease_s")
        self._store = store
        self.key = key
        self.owner = owner
        self.lease_s = lease_s
        self.renew_every_s = renew_every_s
        self.skew_s = clock_skew_bound_s
        self._wall = wall_clock
        self.lease: Lease | None = None
        self.until = -math.inf
        self.bounded_by = math.inf  # the authority's deadline this lease is held under (``bound``)
        self.fence = Fence(-math.inf)  # rides on pushes; follows ``until`` (and the bound)
        self.last_sent = -math.inf
        self.last_rtt_s = 0.0
        self._on_outcome = on_outcome
        self._wake = trio.Event()  # set when a renewal ends or the lease is dropped: ``keep`` looks again

    # --- state ---------------------------------------------------------------------------------------------
    @property
    def held(self) -> bool:
        """Held and not run out by this process's clock."""
        return self.lease is not None and trio.current_time() < self.until

    @property
    def usable_until(self) -> float:
        """Until when (monotonic) the holder may act on the lease: its deadline, within its bound."""
        return min(self.until, self.bounded_by)

    @property
    def epoch(self) -> int | None:
        return None if self.lease is None else self.lease.epoch

    def left_s(self) -> float | None:
        return None if self.lease is None else self.until - trio.current_time()

    def check(self) -> None:
        """Raise ``LeaseLost`` unless the lease can still be relied on (within its bound)."""
        if self.lease is None:
            raise LeaseLost("the lease is not held")
        now = trio.current_time()
        if now >= self.until:
            raise LeaseLost("the lease ran out before it was renewed")
        if now >= self.bounded_by:
            raise LeaseLost("the authority the lease is held under ran out")

    def bound(self, until: float) -> None:
        """Hold the lease under an authority that can be relied on until ``until`` (monotonic): its fence and
        ``check`` stop there even while the lease itself lasts. Each call replaces the last bound."""
        self.bounded_by = until
        if self.lease is not None:
            self.fence.until = self.usable_until

    def _hold(self, lease: Lease, sent: float, answered: float) -> None:
        self.lease = lease
        self.until = lease_deadline(sent, self.lease_s, self.skew_s)
        self.fence.until = self.usable_until
        self.last_sent = sent
        self.last_rtt_s = max(0.0, answered - sent)

    def drop(self) -> None:
        """Forget the lease (lost or given up): pushes fenced on it stop at once, and ``keep`` returns."""
        self.lease = None
        self.until = -math.inf
        self.fence.until = -math.inf
        self._wake.set()

    # --- the store -----------------------------------------------------------------------------------------
    async def acquire(self, *, fields: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """Take the lease if it is free, run out, or already ours; returns the lock item (what the last holder
        left on it, or who holds it when it was not taken: then ``held`` is False)."""
        sent, sent_wall = trio.current_time(), self._wall()
        lease, item = await self._store.acquire_fenced(
            self.key, self.owner, self.lease_s, fields=dict(fields) if fields else None
        )
        if lease is not None and lease.expires_at < sent_wall + self.lease_s - self.skew_s:
            # Already ours, from an earlier request whose send time is unknown here (a lost answer, a
            # restarted incarnation of the same process): renew it before relying on it.
            sent = trio.current_time()
            lease = await self._store.extend_fenced(lease, self.lease_s)
        if lease is None:
            self.drop()
            return item
        self._hold(lease, sent, trio.current_time())
        return item

    async def renew(self, *, fields: Mapping[str, Any] | None = None) -> None:
        """One renewal. ``LeaseLost`` when it was refused; other errors (DynamoDB unreachable) propagate with the
        lease still held until its deadline. A renewal moves the deadline only forward (an older one answered
        late never shortens a newer one's), and one answered after the lease was dropped changes nothing. It
        does not give up on its own when the deadline passes: ``keep`` (or a caller's cancel scope) does."""
        lease = self.lease
        self.check()
        assert lease is not None
        sent = trio.current_time()
        self.last_sent = max(self.last_sent, sent)
        try:
            renewed = await self._store.extend_fenced(
                lease, self.lease_s, fields=dict(fields) if fields else None
            )
        except Exception:
            self._on_outcome("error")
            raise
        if self.lease is None or self.lease.epoch != lease.epoch:
            return  # dropped meanwhile (lost, or the holder stopped): the renewed lease runs out on its own
        if renewed is None:
            self._on_outcome("lost")
            self.drop()
            raise LeaseLost("the lease was taken over")
        self._on_outcome("ok")
        self.lease = renewed
        self.until = max(self.until, lease_deadline(sent, self.lease_s, self.skew_s))
        self.fence.until = self.usable_until
        self.last_rtt_s = max(0.0, trio.current_time() - sent)

    async def settle(self, *, hold_s: float, fields: Mapping[str, Any]) -> bool:
        """The work done under the lease is finished: one last renewal, for ``hold_s`` and with ``fields`` (what
        the work left), then the lease is dropped here. Held that long, nobody takes the work up again, and
        the table's TTL removes the item later. False when the lease was no longer this holder's (the
        record was not written: another holder took the work up, as it may once this one's lease ran out)."""
        lease = self.lease
        if lease is None:
            return False
        try:
            settled = await self._store.extend_fenced(lease, hold_s, fields=dict(fields))
        finally:
            self.drop()
        return settled is not None

    async def keep(
        self,
        *,
        fields: Callable[[], Mapping[str, Any] | None] | None = None,
        may_hold: Callable[[], bool] = lambda: True,
    ) -> str:
        """Renew the lease until it is lost or ``may_hold`` turns false; returns why it ended (the lease is
        dropped, not released).

        A renewal goes out every ``renew_every_s`` after the last was sent (sooner when answers are slow,
        ``next_renewal_at``) whether or not that one has been answered yet, up to ``MAX_IN_FLIGHT`` at once:
        with answers slower than the period, each still counts from its own send, so the lease holds as long
        as an answer takes less than ``lease_s - clock_skew_bound_s - renew_every_s``. A failed renewal is
        tried again every ``RETRY_AFTER_S`` until the deadline."""
        ended: list[str] = []
        in_flight = 0
        retry_at = math.inf

        async def one() -> None:
            nonlocal in_flight, retry_at
            try:
                await self.renew(fields=fields() if fields is not None else None)
                retry_at = math.inf
            except LeaseLost as exc:
                ended.append(str(exc))
            except Exception as exc:  # noqa: BLE001 - unreachable or throttled: try again while it lasts
                log.warning("lease_renewal_failed", key=self.key, error=repr(exc))
                retry_at = min(retry_at, trio.current_time() + RETRY_AFTER_S)
            finally:
                in_flight -= 1
                self._wake.set()

        async with trio.open_nursery() as nursery:
            while True:
                due = next_renewal_at(self.last_sent, self.renew_every_s, self.until, self.last_rtt_s)
                if in_flight >= MAX_IN_FLIGHT:
                    due = retry_at = math.inf  # the next goes out once one of those is answered
                with trio.move_on_at(min(due, retry_at, self.until)):
                    await self._wake.wait()
                self._wake = trio.Event()
                now = trio.current_time()
                if ended:
                    reason = ended[0]
                elif self.lease is None:
                    reason = GIVEN_UP
                elif not may_hold():
                    reason = "may no longer hold it"
                elif now >= self.until:
                    reason = "could not renew the lease before it ran out"
                else:
                    if (now >= due or now >= retry_at) and in_flight < MAX_IN_FLIGHT:
                        in_flight += 1
                        retry_at = math.inf
                        self.last_sent = now  # the schedule counts from this send
                        nursery.start_soon(one)
                    continue
                self.drop()
                nursery.cancel_scope.cancel()
                return reason
        raise AssertionError("unreachable")  # the loop returns from inside the nursery

    async def release(self, *, timeout_s: float = RELEASE_S) -> bool:
        """Give the lease up at once (another process takes it without waiting it out); best effort, shielded
        and bounded: a lease whose release DynamoDB does not confirm within ``timeout_s`` runs out on its own
        (counted in ``sightscreen_leases_left_to_expire`` and logged). True when released (or not held)."""
        lease = self.lease
        self.drop()
        if lease is None:
            return True
        released = False
        with trio.CancelScope(shield=True), trio.move_on_after(timeout_s):
            try:
                await self._store.release_fenced(lease)
                released = True
            except Exception as exc:  # noqa: BLE001 - it runs out on its own
                log.warning("lease_release_failed", key=self.key, error=repr(exc))
        if not released:
            LEASES_LEFT_TO_EXPIRE.inc()
            log.warning("lease_left_to_expire", key=self.key, lease_s=self.lease_s)
        return released
