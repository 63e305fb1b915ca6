"""The region's feed leader: one instance at a time polls SportMonks for the whole region.

``FeedLeadership`` contends for the lease ``feed:{region}`` in ``cricket-locks`` every ``renew_every_s``:
an instance that takes it (a new ``epoch``, the fencing token) switches its ``FeedActor`` to polling
(``set_leading(True)``), hands it every active match of the region (``active-matches``: the matches other
instances own are polled for the cache only) and renews the lease, each renewal carrying a heartbeat
(``lastPollAt``) and the region's SportMonks call record (``budget``: the budget is the region's, one counter
kept by the leader and handed on with the lease). An instance that does not lead learns who does from the
failed acquire (the lock item comes back with the refusal: no second call) and leaves its subscribers to
``actors.cache_reader``.

The leader also writes, with every ``/livescores`` summary (each poll, and each 404 try), the call record and
the feed's 404 verdicts (``FeedActor.region_state``). Followers take the verdicts from the summary they read
anyway, so an id the leader released is released on every instance; a new leader takes both from the summary
as well as from the lock item, so calls made since the last renewal still count and a 404 id's tries are not
started over.

Stepping down: the leader stops polling as soon as a renewal is refused, or as soon as its own monotonic
clock says the lease (less the clock-skew bound) ran out before a renewal succeeded, exactly as a match actor
does. What it writes to ``cricket-fixture-cache`` goes through ``FencedFixtureCache``: each write is a
transaction whose ConditionCheck says the lease still names this owner and epoch and has not run out by the
writer's clock, so a leader paused past its lease (SIGSTOP, a long GC, a VM freeze) writes nothing on
waking, even a write it had already prepared.

Handover. When the leader dies, its lease runs out at the ``expiresAt`` its last renewal wrote; a follower
knows that time from its last refused acquire, so it tries again just after it (``next_attempt_at``), not
at its next renewal period: the feed moves within one lease of the leader's last renewal. A new leader
reads the region's active matches before its first poll (``_take_up_polling``, in the region task, so a
slow Scan never holds up a renewal): that first ``/livescores`` already serves, and writes to the cache,
every match of the region, not only its own. A leader that dies between a poll and its cache write loses
that write only: the successor's first poll returns the fixture as it stands then, balls included, and the
match actors diff against their last state, so the events it held arrive with that poll.

Wiring: the lease (``FeedLease``) is built first and handed to both the leadership, which takes and renews
it, and ``FencedFixtureCache``, whose writes carry it; the feed is built with that cache, and the leadership
with the feed. Nothing is handed in after construction, and the fenced cache holds the lease, not the
leadership.

The decisions (when the lease is lost, what the region's call count is, which matches the leader polls) are
the pure functions at the top; the actor is the shell that calls DynamoDB.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import trio

from actors.feed import PollSummary
from actors.lease import HeldLease
from actors.ports import FeedLeaderStores, FencedCacheStores, LeaderFeed, LeaseStore
from daemon.logs import get_logger
from daemon.metrics import FEED_LEADER, FEED_LEADER_CHANGES, SPORTMONKS_REGION_CALLS
from daemon.store.caches import CachePut, FenceLost, LivescoresSummary
from daemon.store.locks import Lease, feed_lock_key

log = get_logger("actors.feed_leader")

WINDOW_S = 3600.0
ATTEMPT_MARGIN_S = 0.05  # a follower's attempt after the lease it saw runs out: just after, by its clock


# ------------------------------------------------------------------------------------------------ pure decisions


def next_attempt_at(
    last_attempt: float,
    renew_every_s: float,
    seen_expires_wall: float | None,
    now: float,
    now_wall: float,
    margin_s: float = ATTEMPT_MARGIN_S,
) -> float:
    """When (monotonic) to contend for the lease next: a renewal period after the last attempt, or, for a
    follower that saw the lease's expiry (``seen_expires_wall``, wall clock), just after that expiry if it
    comes first, so a dead leader's lease is taken as it runs out. Never sooner than a tenth of a period
    after the last attempt (a live leader's renewal moves the expiry on; no busy loop)."""
    due = last_attempt + renew_every_s
    if seen_expires_wall is None:
        return due
    at_expiry = now + (seen_expires_wall - now_wall) + margin_s
    return max(min(due, at_expiry), last_attempt + renew_every_s / 10)


def region_calls(record: Mapping[str, Sequence[Sequence[float]]], now_wall: float) -> dict[str, int]:
    """Calls per endpoint in the hour before ``now_wall``, from a budget record (``CallBudget.export``)."""
    return {
        endpoint: int(sum(count for at, count in buckets if at > now_wall - WINDOW_S))
        for endpoint, buckets in record.items()
    }


def parse_budget(item: Mapping[str, Any] | None) -> tuple[dict[str, list[list[float]]], float] | None:
    """The budget record a leader left on the lock item, and when; None when there is none or it is unreadable
    (a bad record is ignored: the next leader then counts from zero, logged)."""
    if not item or not item.get("budget"):
        return None
    try:
        record = json.loads(str(item["budget"]))
        at = float(item.get("budgetAt", 0.0))
    except (ValueError, TypeError):
        log.warning("feed_budget_record_unreadable", lock=item.get("lockKey"))
        return None
    if not isinstance(record, dict):
        return None
    return record, at


def wanted_matches(
    active: Iterable[Mapping[str, Any]], marquee_leagues: Collection[int | str]
) -> dict[str, bool]:
    """The region's matches the leader polls for: every active record, marquee by its league."""
    marquee = {str(x) for x in marquee_leagues}
    out: dict[str, bool] = {}
    for item in active:
        if item.get("status") == "active" and item.get("matchId"):
            out[str(item["matchId"])] = str(item.get("leagueId", "")) in marquee
    return out


def leader_view(item: Mapping[str, Any] | None, me: str, now_wall: float) -> dict[str, Any]:
    """Who leads, as the admin socket shows it, from the lock item."""
    if not item:
        return {"leader": None, "me": me, "leading": False}
    expires = float(item.get("expiresAt", 0.0))
    last_poll = item.get("lastPollAt")
    budget = parse_budget(item)
    return {
        "leader": item.get("owner") if expires > now_wall else None,
        "last_leader": item.get("owner"),
        "epoch": item.get("epoch"),
        "me": me,
        "leading": item.get("owner") == me and expires > now_wall,
        "lease_left_s": round(expires - now_wall, 3),
        "leader_since": item.get("acquiredAt"),
        "last_poll_age_s": None if last_poll is None else round(now_wall - float(last_poll), 3),
        "region_calls_last_hour": region_calls(budget[0], now_wall) if budget else {},
    }


def newer_budget(
    lock_item: Mapping[str, Any] | None, state: Mapping[str, Any] | None
) -> tuple[dict[str, list[list[float]]], float] | None:
    """The fresher of the two call records a new leader finds: the lock item's (last renewal) or the
    summary's (last poll)."""
    from_lock = parse_budget(lock_item)
    from_summary: tuple[dict[str, list[list[float]]], float] | None = None
    if state and isinstance(state.get("budget"), dict):
        try:
            from_summary = (state["budget"], float(state.get("budgetAt", 0.0)))
        except (TypeError, ValueError):
            log.warning("feed_summary_budget_unreadable")
    if from_summary is None or (from_lock is not None and from_lock[1] >= from_summary[1]):
        return from_lock
    return from_summary


# ------------------------------------------------------------------------------------------------ the actor


class FeedLease:
    """The region's feed lease (``feed:{region}``) as the leadership takes and renews it and every fenced
    cache write carries it. Built before the feed and handed to both, so neither holds the other."""

    def __init__(
        self,
        locks: LeaseStore,
        region: str,
        owner: str,
        *,
        lease_s: float,
        renew_every_s: float,
        clock_skew_bound_s: float,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.region = region
        self.key = feed_lock_key(region)
        self.held = HeldLease(
            locks,
            self.key,
            owner,
            lease_s=lease_s,
            renew_every_s=renew_every_s,
            clock_skew_bound_s=clock_skew_bound_s,
            wall_clock=wall_clock,
        )
        self.last_poll_wall: float | None = None  # the newest poll whose summary went out under this lease
        self.stepped_down_for: str | None = None  # why it was dropped, for the leadership's log line

    @property
    def lease(self) -> Lease | None:
        return self.held.lease

    @property
    def leading(self) -> bool:
        """Whether this instance may write for the region now (the local half of the fence; the cache
        write's ConditionCheck is the other)."""
        return self.held.held

    def write_lease(self) -> Lease:
        """The lease a cache write must carry; ``FenceLost`` when this instance may not write now."""
        lease = self.held.lease
        if lease is None or not self.held.held:
            self.step_down("lease ran out before it was renewed" if lease is not None else None)
            raise FenceLost("this instance does not lead the region's feed")
        return lease

    def step_down(self, reason: str | None) -> None:
        """Stop leading now (a refused fenced write, a lease that ran out): the renewals stop and the
        leadership contends again at once."""
        if self.held.lease is None:
            return
        self.stepped_down_for = reason
        self.held.drop()


class FeedLeadership:
    def __init__(
        self,
        *,
        feed: LeaderFeed,
        lease: FeedLease,
        repos: FeedLeaderStores,
        marquee_leagues: Collection[int | str] = (),
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.feed = feed
        self._lease = lease
        self._repos = repos
        self.region = lease.region
        self.key = lease.key
        self.instance_id = lease.held.owner
        self.renew_every_s = lease.held.renew_every_s
        self._marquee = marquee_leagues
        self._wall = wall_clock
        self.held = lease.held
        self.last_seen: dict[str, Any] | None = None  # the lock item as last seen (a follower's view)
        self.became_leader = 0
        self.stepped_down = 0
        self._kick = trio.Event()
        self._take_up = trio.Event()  # set on taking the lease: the region task prepares the first poll
        self._last_attempt = -math.inf

    @property
    def lease(self) -> Lease | None:
        return self.held.lease

    @property
    def leading(self) -> bool:
        return self._lease.leading

    @property
    def last_poll_wall(self) -> float | None:
        return self._lease.last_poll_wall

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            # a lone instance leads before the orchestrator's first cycle asks for livescores
            await self.attempt()
            if self.held.lease is not None:
                await self._take_up_polling()
                self._take_up = trio.Event()  # done: the region task need not do it again
            task_status.started()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._region_loop)
                while True:
                    if self.held.lease is not None:  # leading: renew until the lease is lost or given up
                        reason = await self.held.keep(fields=self._renewal_fields)
                        self._stood_down(self._lease.stepped_down_for or reason)
                        self._lease.stepped_down_for = None
                        continue  # contend again at once: nobody else may have taken it
                    with trio.move_on_at(self._next_attempt()):
                        await self._kick.wait()
                    self._kick = trio.Event()
                    await self.attempt()
        finally:
            if self.held.lease is not None:
                self._stood_down("stopping")
                await self.held.release()

    def _next_attempt(self) -> float:
        """A follower tries a period after its last attempt, or just after the lease it saw runs out
        (``next_attempt_at``)."""
        expires = None
        if self.last_seen is not None:
            try:
                expires = float(self.last_seen.get("expiresAt", 0.0))
            except (TypeError, ValueError):
                expires = None
        return next_attempt_at(
            self._last_attempt, self.renew_every_s, expires, trio.current_time(), self._wall()
        )

    async def _region_loop(self) -> None:
        """While leading, the region's active matches every renewal period (apart from the renewals, so a
        slow Scan never delays one); on taking the lease, at once, before the first poll."""
        while True:
            with trio.move_on_after(self.renew_every_s):
                await self._take_up.wait()
            self._take_up = trio.Event()
            if self.held.lease is None:
                continue
            if not self.feed.leading:
                await self._take_up_polling()
            else:
                await self._refresh_region_safely()

    async def _take_up_polling(self) -> None:
        """A new leader's first poll serves the whole region: its active matches first, then polling."""
        await self._refresh_region_safely()
        if self.held.lease is not None:
            self.feed.set_leading(True)

    async def _refresh_region_safely(self) -> None:
        try:
            await self._refresh_region()
        except Exception as exc:  # noqa: BLE001 - the last known set stays; next period tries again
            log.warning("feed_region_matches_unavailable", error=repr(exc))

    async def attempt(self) -> None:
        """One contention for the lease by a follower (the leader renews it in ``HeldLease.keep``)."""
        self._last_attempt = trio.current_time()
        if self.held.lease is not None:
            return
        try:
            await self._acquire()
        except Exception as exc:  # DynamoDB unreachable: try again a period later
            log.warning("feed_lease_attempt_failed", error=repr(exc))
            self.last_seen = None  # a follower tries again a period later, not at an expiry long past

    async def _acquire(self) -> None:
        item = await self.held.acquire()
        lease = self.held.lease
        if lease is None:
            self.last_seen = item
            budget = parse_budget(item)
            if budget is not None:
                for endpoint, n in region_calls(budget[0], self._wall()).items():
                    SPORTMONKS_REGION_CALLS.labels(endpoint).set(n)
            return
        # counted the moment the lease is held (``leading`` is true from here), not after the reads below
        self.became_leader += 1
        FEED_LEADER.set(1)
        FEED_LEADER_CHANGES.inc()
        state = await self._summary_state()
        if state:
            self.feed.adopt_not_found(state.get("notFound"), to_wall=self._wall() - trio.current_time())
        budget = newer_budget(item, state)
        if budget is not None:
            record, at = budget
            self.feed.budget.seed(record, to_wall=self._wall() - trio.current_time(), recorded_at=at)
        log.info(
            "feed_leader",
            region=self.region,
            epoch=lease.epoch,
            previous=(item or {}).get("previousOwner"),
            budget_seeded=budget is not None,
        )
        self._take_up.set()  # the region task reads the region's matches, then the feed polls

    async def _summary_state(self) -> dict[str, Any]:
        """The state the previous leader wrote with its last summary ({} when none can be read: the lock
        item's record is used alone, logged)."""
        try:
            got = await self._repos.fixture_cache.get_livescores_summary_and_state(self.region)
        except Exception as exc:  # noqa: BLE001 - leading must not wait on it
            log.warning("feed_summary_state_unavailable", error=repr(exc))
            return {}
        return {} if got is None else got[2]

    def _renewal_fields(self) -> dict[str, Any]:
        """What each renewal writes on the lock item: the region's call record and the heartbeat (and, while
        at it, the region's calls per endpoint to the gauge)."""
        budget = self.feed.budget
        wall = self._wall()
        record = budget.export(to_wall=wall - trio.current_time())
        fields: dict[str, Any] = {
            "budget": json.dumps(record, separators=(",", ":")),
            "budgetAt": wall,
            "previousOwner": self.instance_id,
        }
        if self._lease.last_poll_wall is not None:
            fields["lastPollAt"] = self._lease.last_poll_wall
        for endpoint, n in region_calls(record, wall).items():
            SPORTMONKS_REGION_CALLS.labels(endpoint).set(n)
        return fields

    async def _refresh_region(self) -> None:
        active = await self._repos.active_matches.get_all_active_matches()
        if self.lease is not None:
            self.feed.set_region_matches(wanted_matches(active, self._marquee))

    def _stood_down(self, reason: str | None) -> None:
        log.warning("feed_leader_stepped_down", region=self.region, epoch=self.held.epoch, reason=reason)
        self.stepped_down += 1
        FEED_LEADER.set(0)
        self.feed.set_leading(False)

    def describe(self) -> dict[str, Any]:
        return {
            "region": self.region,
            "lease_key": self.key,
            "leading": self.leading,
            "epoch": self.held.epoch,
            "lease_left_s": None if (left := self.held.left_s()) is None else round(left, 3),
            "became_leader": self.became_leader,
            "stepped_down": self.stepped_down,
        }


class FencedFixtureCache:
    """The feed's cache sink on a fleet member: every write carries the feed lease (see the module doc)."""

    def __init__(self, lease: FeedLease, repos: FencedCacheStores, *, summary_ttl_s: float = 600.0) -> None:
        self._lease = lease
        self._repo = repos.fixture_cache
        self._locks = repos.locks
        self._summary_ttl_s = summary_ttl_s
        self.seq = 0
        self.refused = 0

    async def put_poll(self, puts: Sequence[CachePut], summary: PollSummary | None) -> None:
        """A poll's changed fixtures and then its summary (the ``/livescores`` in short with the feed's state
        for the region, ``FeedActor.region_state``), in one transaction when they fit: a follower's read that
        sees the summary sees the poll's fixtures, and the poll costs one DynamoDB call however many matches
        moved. The summary goes with every poll (and every 404 try), so the feed state it carries is fresher
        than the record a lease renewal writes."""
        lease = self._lease.write_lease()
        fenced = []
        for put in puts:
            self.seq += 1
            fenced.append(replace(put, seq=self.seq))
        short = None
        if summary is not None:
            short = LivescoresSummary(
                self._lease.region, summary.fixtures, summary.fetched_at, self._summary_ttl_s, summary.state
            )
        await self._fenced(
            lease,
            lambda: self._repo.put_fixtures_fenced(
                fenced, lambda: self._locks.lease_condition(lease), lease.epoch, summary=short
            ),
        )
        if summary is not None:
            self._lease.last_poll_wall = summary.fetched_at

    async def _fenced(self, lease: Lease, write: Callable[[], Awaitable[int]]) -> None:
        try:
            await write()
        except FenceLost:
            self.refused += 1
            current = self._lease.lease
            if current is not None and current.epoch == lease.epoch:  # not a newer lease taken meanwhile
                self._lease.step_down("a fenced cache write was refused")
            raise
