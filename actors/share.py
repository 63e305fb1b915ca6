"""A hot match's fan-outs, shared by every engine of the region: the owner's side.

A match whose per-token audience is above ``[fanout].share_above`` is *hot* (``daemon.cricket.share.is_hot``,
with hysteresis). Its owner still decides everything that is sent (the match actor: the tick, the alert
intent, the payload of each perspective); ``SharedFanOut`` then, instead of pushing every session itself:

1. lists the match on the region's hot list (``hot:{region}``) so every engine follows it;
2. publishes the work item on the match's board for its lane (``share:{matchId}:{lane}``): the exact
   payloads and the shard bounds, cut from its own view of the audience; conditional on no newer owner
   having written it;
3. sends the broadcasts itself (the caller's ``before``), then delivers shards like any helper (up to
   ``shards_at_once`` at a time), through the same ``ShardRunner``, under its own match lease (``OwnLease``);
4. polls its shards' records (one strongly consistent BatchGetItem every ``board_poll_s``) until every shard
   is done, taking up any whose lease ran out (its helper died or stalled) from its watermark;
5. returns the pushes and their outcome counts summed from the shards' records.

The match actor then goes on as it does with a fan-out of its own: a routine tick's state is persisted, an
alert intent is removed. A match below the threshold never comes here. Must not: decide what to push, write the
match's state, or touch another engine's work. docs/delivery.md ("A hot match shared by the fleet") has the
argument.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import trio

from actors.audience import MatchAudience
from actors.lease import HeldLease, LeaseLost
from actors.ports import ShareBoards
from actors.settings import FanoutSettings
from actors.shard import OwnLease, ShardJob, ShardRunner
from daemon.apns.types import PushResult
from daemon.cricket import share
from daemon.cricket.intent import AlertIntent
from daemon.cricket.share import LANES, START, TICK, Board, ShardRecord, StartWork, TickWork, Work
from daemon.logs import get_logger
from daemon.metrics import SHARE_HOT_MATCHES, SHARE_WAIT_CADENCES
from daemon.store.locks import shard_key


class ShareRefused(LeaseLost):
    """The board would not take this owner's work: a newer owner published since (this one is stale)."""


class SharedFanOut:
    """One hot match's shared fan-outs, for its owner (the match actor builds it and hands it its parts)."""

    def __init__(
        self,
        match_id: str,
        *,
        region: str,
        owner: str,
        lease: HeldLease,
        owner_epoch: Callable[[], int],
        boards: ShareBoards,
        runner: ShardRunner,
        audience: MatchAudience,
        settings: FanoutSettings,
        cadence_s: Callable[[], float],
        on_result: Callable[[PushResult], None] | None = None,
        helpers: Callable[[], int] | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.match_id = match_id
        self._helpers = helpers
        self.region = region
        self.owner = owner
        self._lease = lease
        self._owner_epoch = owner_epoch
        self._boards = boards
        self._runner = runner
        self._audience = audience
        self.settings = settings
        self._cadence_s = cadence_s
        self._on_result = on_result
        self._now = wall_clock
        self._authority = OwnLease(lease)
        self.log = get_logger("share", match_id=match_id)
        self._hot = False
        self._listed_at = -float("inf")  # when this owner last listed the match as hot (wall clock)
        self._published: set[str] = set()  # the lanes whose board this owner wrote
        self._seqs: dict[str, int] | None = None  # each lane's last seq, as found on the boards, then ours
        self._cut: tuple[str, ...] = ()  # the shard bounds cut from the sorted keys ``_bounds_of``
        self._bounds_of: list[str] | None = None
        # introspection: the work items in progress, by lane, and the last one's figures
        self.current: dict[str, dict[str, Any]] = {}
        self.last: dict[str, dict[str, Any]] = {}

    # --- hot or not ----------------------------------------------------------------------------------------
    @property
    def hot(self) -> bool:
        """Whether the match is hot (as the last ``update_hot`` decided): listed on the region's hot list."""
        return self._hot

    @property
    def shared(self) -> bool:
        """Whether the match's next fan-out is shared: hot, and another engine of the region said it helps
        (``helpers``: None when not known, then every hot match is shared). A hot match without a helper is
        fanned out by its owner alone, as one below the threshold, and stays listed so helpers find it."""
        return self._hot and (self._helpers is None or self._helpers() > 0)

    def update_hot(self) -> bool:
        """Decide again from the audience as last read (with hysteresis); True when hot."""
        s = self.settings
        was = self._hot
        self._hot = share.is_hot(
            len(self._audience.sessions), was_hot=was, share_above=s.share_above, cool_below=s.cool_below
        )
        if self._hot != was:
            self.log.info("match_hot" if self._hot else "match_cooled", sessions=len(self._audience.sessions))
        if self._hot:
            SHARE_HOT_MATCHES.labels(self.match_id).set(1)
        else:
            _forget(SHARE_HOT_MATCHES, self.match_id)
        return self._hot

    def forget(self) -> None:
        """This owner stops (its lease lost, or the actor ended): its hot match's gauges go with it."""
        _forget(SHARE_HOT_MATCHES, self.match_id)
        _forget(SHARE_WAIT_CADENCES, self.match_id)

    async def cool(self) -> None:
        """The match is hot no more, or it ended, or its owner lets it go: off the hot list, its boards
        removed (each only if no newer owner has written it). Best effort: a stale entry costs the helpers a
        poll, never a push (a helper confirms the owner on the match lock)."""
        self.forget()
        epoch = self._lease.epoch
        if epoch is None or (not self._published and self._listed_at < 0):
            return
        try:
            await self._boards.remove_hot_match(self.region, self.match_id, epoch=epoch)
            for lane in sorted(self._published):
                await self._boards.remove_share_board(self.match_id, lane, lease_epoch=epoch)
        except Exception as exc:  # noqa: BLE001 - the TTL and the next owner tidy up
            self.log.warning("share_cool_failed", error=repr(exc))
        self._listed_at = -float("inf")
        self._published.clear()

    # --- work items ----------------------------------------------------------------------------------------
    async def next_seq(self, lane: str) -> int:
        """The seq of this lane's next item: above what the boards showed (read once per owner) and the last
        one this owner published, and at least the clock in milliseconds."""
        if self._seqs is None:
            items = await self._boards.get_share_boards([self.match_id], LANES)
            seqs: dict[str, int] = {}
            for (_, lane_of), item in items.items():
                try:
                    seqs[lane_of] = Board.from_item(item).work.seq
                except share.ShareError as exc:  # written by a version that no longer reads: start afresh
                    self.log.warning("share_board_unreadable", lane=lane_of, error=str(exc))
            self._seqs = seqs
        seq = share.next_seq(self._seqs.get(lane), int(self._now() * 1000))
        self._seqs[lane] = seq
        return seq

    async def tick_work(
        self,
        *,
        kind: str,
        priority: int,
        payloads: Mapping[str, bytes],
        alert: bool,
        collapse_id: str | None,
        stamp: int | None,
    ) -> TickWork:
        """A tick's work item, its shards cut from the audience as last read (to be published by ``run``)."""
        return TickWork(
            seq=await self.next_seq(TICK),
            kind=kind,
            priority=priority,
            payloads=payloads,
            alert=alert,
            bounds=self._bounds(),
            published_at=self._now(),
            collapse_id=collapse_id,
            stamp=stamp,
        )

    def _bounds(self) -> tuple[str, ...]:
        """The shard bounds of the audience as last read: cut once per read, not once per tick."""
        keys = self._audience.sorted_keys()
        if self._bounds_of is not keys:
            self._cut, self._bounds_of = share.plan_bounds(keys, self.settings.shard_size), keys
        return self._cut

    def resumed_tick(self, intent: AlertIntent) -> TickWork:
        """The work item of an alert intent a previous owner published (recorded with the intent)."""
        return share.tick_of_intent(intent, published_at=self._now())

    async def run(
        self, lane: str, work: Work, *, before: Callable[[], Awaitable[None]] | None = None
    ) -> tuple[int, dict[str, int]]:
        """Publish ``work`` and see every shard of it delivered (this owner takes its share, and any shard
        whose holder's lease ran out); ``before`` runs between the publication and the first shard (the
        broadcasts). Returns the pushes built and their counts, summed from the shards' records."""
        self._lease.check()
        await self.keep_listed()
        board = Board(
            self.match_id,
            lane,
            owner=self.owner,
            lease_epoch=self._lease_epoch(),
            owner_epoch=self._owner_epoch(),
            work=work,
        )
        if not await self._boards.publish_share_board(
            self.match_id,
            lane,
            board.to_item(),
            lease_epoch=board.lease_epoch,
            ttl_s=self.settings.board_ttl_s,
        ):
            raise ShareRefused("the board holds a newer owner's work: this owner is stale")
        self._published.add(lane)
        self.current[lane] = {
            "seq": work.seq,
            "shards": work.shards,
            "alert": share.alerting(work),
            "published_at": work.published_at,
            "delivering": [],  # the shards this owner delivers now (their indexes)
        }
        try:
            if before is not None:
                await before()
            total, counts, waited = await self._complete(lane, work)
        finally:
            self.current.pop(lane, None)
        self.last[lane] = {
            "seq": work.seq,
            "shards": work.shards,
            "pushes": total,
            "longest_wait_s": round(waited, 3),
            **counts,
        }
        return total, counts

    async def starts(
        self,
        users: list[str],
        *,
        content: Mapping[str, Mapping[str, Any]],
        attributes: Mapping[str, Any],
        channels: Mapping[str, str],
    ) -> tuple[int, dict[str, int]]:
        """A round of push-to-starts over ``users`` (follower ids), shared like a tick."""
        work = StartWork(
            seq=await self.next_seq(START),
            bounds=share.plan_bounds(users, self.settings.shard_size),
            published_at=self._now(),
            timestamp=int(self._now()),
            attributes=dict(attributes),
            content={k: dict(v) for k, v in content.items()},
            channels=dict(channels),
        )
        return await self.run(START, work)

    # --- the owner's part: shards, and the wait for the rest ---------------------------------------------------
    async def _complete(self, lane: str, work: Work) -> tuple[int, dict[str, int], float]:
        """Deliver shards until every one is done: those no one has taken (from a random one on), and those
        whose holder's lease ran out, up to ``shards_at_once`` at a time (an alerting item's one at a time:
        a process that dies then had one chunk in flight, the most its followers can miss); between them,
        read the records every ``board_poll_s`` while none of its own is in delivery (it waits on others),
        else when one of its own ends, or at the latest every ``shard_renew_every_s`` (a holder that died is
        found within a renewal of its lease running out). A busy owner's reads would take CPU from its own
        pushes: ten a second cost a hot match's owner a sixth of a core in boto alone."""
        n = work.shards
        keys = [shard_key(self.match_id, lane, work.seq, i) for i in range(n)]
        order = share.claim_order(n, random.randrange(n))
        first_claims: dict[int, float] = {}
        cadence = max(self._cadence_s(), 1e-3)
        running: set[int] = set()
        ended = trio.Event()
        at_once = 1 if share.alerting(work) else self.settings.shards_at_once

        async def deliver(i: int) -> None:
            nonlocal ended
            try:
                await self._runner.run(
                    ShardJob(self.match_id, lane, work, i),
                    self._audience,
                    self._authority,
                    on_result=self._on_result,
                )
            finally:
                running.discard(i)  # before _complete returns: the nursery waits for this task
                self.current[lane]["delivering"] = sorted(running)
                ended.set()
                ended = trio.Event()

        async with trio.open_nursery() as nursery:
            while True:
                self._lease.check()
                items = await self._boards.get_shards(keys)
                now = self._now()
                records = {i: ShardRecord.from_item(items[k]) for i, k in enumerate(keys) if k in items}
                for i, record in records.items():
                    if i not in first_claims:
                        seen = share.first_claim(record, now)
                        if seen is not None:
                            first_claims[i] = seen
                waited = share.longest_wait(work.published_at, first_claims, n, now)
                SHARE_WAIT_CADENCES.labels(self.match_id).set(waited / cadence)
                if all(i in records and records[i].done for i in range(n)):
                    total, counts = share.summed(records.values())
                    return total, counts, waited
                free = [i for i in order if i not in running and share.claimable(records.get(i), now)]
                if free and len(running) < at_once:
                    running.add(free[0])
                    self.current[lane]["delivering"] = sorted(running)
                    nursery.start_soon(deliver, free[0])
                    continue
                pace = self.settings.shard_renew_every_s if running else self.settings.board_poll_s
                with trio.move_on_after(pace):
                    await ended.wait()

    # --- the hot list ---------------------------------------------------------------------------------------
    async def go_alone(self) -> None:
        """The next fan-out goes alone (hot, no helper): no shard of it waits, so the wait gauge is zeroed
        (its last shared item's value would keep SightscreenHotMatchShardsWaiting firing), and the match is
        kept listed so helpers find it."""
        SHARE_WAIT_CADENCES.labels(self.match_id).set(0)
        await self.keep_listed()

    async def keep_listed(self) -> None:
        """On the region's hot list, listed again each ``stale_board_s / 2`` (an entry older than a stale
        board may be taken off by any engine), whether its fan-outs are shared or not: helpers follow what
        is listed, and say so."""
        now = self._now()
        if now - self._listed_at < self.settings.stale_board_s / 2:
            return
        await self._boards.put_hot_match(
            self.region, self.match_id, owner=self.owner, epoch=self._lease_epoch()
        )
        self._listed_at = now

    def _lease_epoch(self) -> int:
        epoch = self._lease.epoch
        if epoch is None:
            self._lease.check()  # raises: not held
            raise AssertionError("unreachable")
        return epoch

    def describe(self) -> dict[str, Any]:
        return {
            "hot": self._hot,
            "alone": self._hot and not self.shared,
            "current": dict(self.current),
            "last": dict(self.last),
        }


def _forget(gauge: Any, match_id: str) -> None:
    try:
        gauge.remove(match_id)
    except KeyError:  # never exported
        pass


@dataclass(frozen=True)
class Sharing:
    """What a match actor needs to share its fan-outs when its match is hot: the region (its hot list), the
    ``[fanout]`` settings and the poll cadence of a match (marquee or not), the unit the shards' waits are
    judged in."""

    region: str = "default"
    settings: FanoutSettings = field(default_factory=lambda: FanoutSettings(share_above=0))
    cadence_s: Callable[[bool], float] = lambda marquee: 2.5
    helpers: Callable[[], int] | None = None  # other engines ready to help (the share worker's word count)
