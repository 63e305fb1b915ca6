"""The share worker: every engine's help with the region's hot matches owned by other engines.

One per engine, run by the supervisor beside the orchestrator. It

- reads the region's hot list (``hot:{region}``, one GetItem every ``[fanout].hot_list_poll_s``) and follows
  each hot match another process owns: a view of its audience of its own (``MatchAudience``, refreshed on the
  match actor's cadence), kept while the match is listed; while it follows any whose audience it has read,
  it says so on the hot list every ``helper_word_s`` (one UpdateItem), and it keeps the other engines' words
  it read, for this process's own hot matches (``helpers``: their owner fans out alone while no other
  engine would help);
- reads the followed matches' boards (one strongly consistent BatchGetItem every ``board_poll_s`` for all of
  them): a work item it has not seen finished is work to do. This poll is how a helper learns of new work: a
  shard waits for it (half a poll on average, and the read) before it is taken, and that wait is in the lag
  the owner measures (the tick ends when its last shard is done) and in ``sightscreen_share_shard_wait_seconds``;
- takes up to ``shards_at_once`` shards at a time (a few, so shards spread over the fleet, and more than one,
  so its sender is not idle while a shard's last answers come back and the next shard is claimed; an
  alerting item's one at a time, so a helper that dies had one alert chunk in flight), alerting items first,
  then routine updates, then push-to-starts, each from a random shard on; gives way first to this instance's
  own key events (``LiveWork``);
  and delivers it through ``ShardRunner`` for the owner the board names, confirmed on the match lock
  (``OwnerOnLock``) before the first push, before each alerting chunk and at each renewal of the shard's lease.

A stale hot list entry (an owner that died and whose match nobody took up, a board older than
``stale_board_s``) is taken off by whichever engine sees it, conditional on the epoch it saw. Must not: decide
what is sent, or deliver its own process's matches (their owner does). docs/delivery.md ("A hot match shared by
the fleet") has the argument.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from actors.audience import MatchAudience
from actors.janitor import TokenRef
from actors.livework import LiveWork
from actors.ports import HelperStores, PushSender
from actors.settings import FanoutSettings, MatchActorSettings
from actors.shard import HELPER, OwnerOnLock, ShardJob, ShardRunner
from daemon.apns.types import PushResult
from daemon.cricket import share
from daemon.cricket.share import LANES, Board, ShardRecord, TickWork
from daemon.logs import get_logger
from daemon.metrics import SHARE_HELPED_MATCHES, SHARE_HELPERS
from daemon.store.locks import shard_key

log = get_logger("share.worker")

WORD_SPANS = 3  # a helper's word on the hot list is good for this many helper_word_s


@dataclass
class Followed:
    """A hot match of another owner this engine follows: its audience as read here, its boards as last
    read, the work items found finished (nothing left to take) and when to look again at those whose
    every shard is held by someone else."""

    match_id: str
    owner: str
    epoch: int
    since: float  # when the owner listed it (wall clock)
    audience: MatchAudience
    scope: trio.CancelScope
    boards: dict[str, Board] = field(default_factory=dict)
    published_at: float = 0.0  # the newest board's publication (wall clock)
    finished: set[tuple[str, int]] = field(default_factory=set)
    look_again: dict[tuple[str, int], float] = field(default_factory=dict)  # (lane, seq) -> trio time

    def on_result(self, result: PushResult) -> None:
        """A token APNs rejected is pushed no more from this view (the janitor suspends it in the table)."""
        ref = result.push.context
        if result.outcome == "rejected" and isinstance(ref, TokenRef) and ref.kind == "la":
            self.audience.drop_session(ref.visitor_key or "")


class ShareWorker:
    """The engine's share worker (an actor: ``run``)."""

    def __init__(
        self,
        *,
        region: str,
        owner_id: str,
        stores: HelperStores,
        sender: PushSender,
        live: LiveWork,
        topic: str,
        match_settings: MatchActorSettings,
        settings: FanoutSettings,
        claim_hold_s: float,
        clock_skew_bound_s: float,
        wall_clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        self.region = region
        self.owner_id = owner_id
        self._stores = stores
        self._locks = stores.locks
        self._live = live
        self._match = match_settings
        self.settings = settings
        self._skew_s = clock_skew_bound_s
        self._now = wall_clock
        self._rng = rng or random.Random()
        self.runner = ShardRunner(
            owner_id=owner_id,
            role=HELPER,
            locks=stores.locks,
            devices=stores.devices,
            sender=sender,
            live=live,
            topic=topic,
            match_settings=match_settings,
            settings=settings,
            claim_hold_s=claim_hold_s,
            clock_skew_bound_s=clock_skew_bound_s,
            wall_clock=wall_clock,
        )
        self.followed: dict[str, Followed] = {}
        self._wake = trio.Event()
        self._nursery: trio.Nursery | None = None
        # the shards being delivered now: key -> whether of an alerting item (one such at most)
        self.working_on: dict[str, bool] = {}
        self.gave_way_s = 0.0
        # the other engines' words on the hot list as last read (owner -> until, their clock) and when this
        # one last said its own (trio time; None: not said, or taken back)
        self.words: dict[str, float] = {}
        self._said_at: float | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._hot_list_loop)
                nursery.start_soon(self._board_loop)
                task_status.started()
                await self._claim_loop()
        finally:
            self.followed.clear()
            self.words.clear()
            SHARE_HELPED_MATCHES.set(0)
            SHARE_HELPERS.set(0)
            if self._said_at is not None:
                with trio.CancelScope(shield=True), trio.move_on_after(2.0):
                    await self._take_word_back()

    def helpers(self) -> int:
        """Other engines of the region whose word that they help is still good (by this clock, less the skew
        bound): this process's hot matches are shared only while there is one."""
        now = self._now() + self._skew_s
        return sum(1 for until in self.words.values() if until > now)

    # --- which matches ---------------------------------------------------------------------------------------
    async def _hot_list_loop(self) -> None:
        while True:
            try:
                await self.look_at_hot_list()
            except Exception as exc:  # noqa: BLE001 - DynamoDB away: keep what is followed, look again
                log.warning("hot_list_unreadable", error=repr(exc))
            await trio.sleep(self.settings.hot_list_poll_s)

    async def look_at_hot_list(self) -> None:
        """Follow every hot match of another owner; let go of those no longer listed (or now this process's);
        keep the other engines' words, and say (or take back) this one's."""
        hot = await self._locks.get_hot_list(self.region)
        self.words = {h: until for h, until in hot.helpers.items() if h != self.owner_id}
        SHARE_HELPERS.set(self.helpers())
        entries = hot.matches
        wanted = {m: e for m, e in entries.items() if e.get("owner") and e.get("owner") != self.owner_id}
        for match_id in list(self.followed):
            entry = wanted.get(match_id)
            if entry is None:
                self._unfollow(match_id)
                continue
            f = self.followed[match_id]  # a new owner: the audience read here stands
            f.owner, f.epoch = str(entry["owner"]), int(entry.get("epoch", 0))
            f.since = float(entry.get("since") or 0)
        for match_id, entry in wanted.items():
            if match_id not in self.followed:
                self._follow(
                    match_id, str(entry["owner"]), int(entry.get("epoch", 0)), float(entry.get("since") or 0)
                )
        SHARE_HELPED_MATCHES.set(len(self.followed))
        if any(f.audience.loaded.is_set() for f in self.followed.values()):  # it can deliver shards now
            await self._say_word(hot.helpers.get(self.owner_id))
        elif self._said_at is not None and not self.followed:
            await self._take_word_back()

    async def _say_word(self, standing: float | None) -> None:
        """Say this engine helps, every ``helper_word_s`` (sooner when its word is not on the list as read),
        good for ``WORD_SPANS`` of them; the words of others that ran out more than a word's span ago go with
        it (engines gone without taking theirs back)."""
        every = self.settings.helper_word_s
        now = trio.current_time()
        if standing is not None and self._said_at is not None and now - self._said_at < every:
            return
        wall, span = self._now(), WORD_SPANS * every
        stale = {h: until for h, until in self.words.items() if until < wall - span}
        if not await self._locks.say_helping(self.region, self.owner_id, until=wall + span, stale=stale):
            # another engine took one of those off first, or its owner spoke again: say it alone
            await self._locks.say_helping(self.region, self.owner_id, until=wall + span)
        self._said_at = now

    async def _take_word_back(self) -> None:
        try:
            await self._locks.stop_helping(self.region, self.owner_id)
        except Exception as exc:  # noqa: BLE001 - it runs out on its own
            log.warning("helper_word_not_taken_back", error=repr(exc))
        self._said_at = None

    def _follow(self, match_id: str, owner: str, epoch: int, since: float) -> None:
        assert self._nursery is not None
        audience = MatchAudience(match_id, self._stores, self._match, export=False)
        f = Followed(match_id, owner, epoch, since, audience, trio.CancelScope())

        async def keep() -> None:
            with f.scope:
                await audience.keep_fresh()

        self.followed[match_id] = f
        self._nursery.start_soon(keep)
        log.info("hot_match_followed", match_id=match_id, owner=owner, epoch=epoch)

    def _unfollow(self, match_id: str) -> None:
        f = self.followed.pop(match_id, None)
        if f is not None:
            f.scope.cancel()
            log.info("hot_match_let_go", match_id=match_id)

    # --- what to do --------------------------------------------------------------------------------------------
    async def _board_loop(self) -> None:
        while True:
            if len(self.working_on) >= self.settings.shards_at_once:
                # every taker busy: nothing new could be taken now; each looks again as it finishes
                await trio.sleep(self.settings.board_poll_s)
                continue
            try:
                await self.look_at_boards()
            except Exception as exc:  # noqa: BLE001 - look again next poll
                log.warning("share_boards_unreadable", error=repr(exc))
            await trio.sleep(self.settings.board_poll_s)

    async def look_at_boards(self) -> None:
        """Read every followed match's boards; wake the claim loop when there is work to look at. A match whose
        boards are all older than ``stale_board_s`` (or, with none, listed longer ago than that) is taken off
        the hot list (if the entry is still the one seen) and let go."""
        if not self.followed:
            return
        items = await self._locks.get_share_boards(list(self.followed), LANES)
        now = self._now()
        for match_id, f in list(self.followed.items()):
            newest = 0.0
            for lane in LANES:
                item = items.get((match_id, lane))
                if item is None:
                    f.boards.pop(lane, None)
                    continue
                newest = max(newest, float(item.get("publishedAt") or 0))
                try:
                    f.boards[lane] = Board.from_item(item)
                except share.ShareError as exc:
                    log.warning("share_board_unreadable", match_id=match_id, lane=lane, error=str(exc))
                    f.boards.pop(lane, None)
            f.published_at = newest
            if now - max(newest, f.since) > self.settings.stale_board_s:
                await self._locks.remove_hot_match(self.region, match_id, epoch=f.epoch)
                self._unfollow(match_id)
        if self._candidates():
            self._wake.set()

    def _candidates(self) -> list[tuple[Followed, Board]]:
        """Work items to look at now, alerting ticks first, then routine ticks, then rounds of starts: of
        another owner, not found finished, not waiting for a look again, the audience read."""
        now = trio.current_time()
        out: list[tuple[int, Followed, Board]] = []
        for f in self.followed.values():
            if not f.audience.loaded.is_set():
                continue
            for lane, board in f.boards.items():
                item = (lane, board.work.seq)
                if board.owner == self.owner_id or item in f.finished or f.look_again.get(item, 0) > now:
                    continue
                work = board.work
                rank = (0 if work.alert else 1) if isinstance(work, TickWork) else 2
                out.append((rank, f, board))
        out.sort(key=lambda c: c[0])
        return [(f, board) for _, f, board in out]

    async def _claim_loop(self) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(self.settings.shards_at_once):
                nursery.start_soon(self._taker)

    async def _taker(self) -> None:
        """One of ``shards_at_once``: waits for work, then takes and delivers shards while there are any."""
        while True:
            wake = self._wake
            await wake.wait()
            if self._wake is wake:  # the first taker woken arms the next wake-up for all of them
                self._wake = trio.Event()
            while await self.help_once():
                pass

    async def help_once(self) -> bool:
        """Take and deliver one shard of the first work item that has one free; False when none had."""
        for f, board in self._candidates():
            self.gave_way_s += await self._live.give_way_to_key_events("share")
            work = board.work
            item = (board.lane, work.seq)
            keys = [shard_key(f.match_id, board.lane, work.seq, i) for i in range(work.shards)]
            try:
                found = await self._locks.get_shards(keys)
            except Exception as exc:  # noqa: BLE001 - look again next poll
                log.warning("shards_unreadable", match_id=f.match_id, error=repr(exc))
                return False
            now = self._now()
            records = {i: ShardRecord.from_item(found[k]) for i, k in enumerate(keys) if k in found}
            if all(i in records and records[i].done for i in range(work.shards)):
                f.finished.add(item)
                f.look_again.pop(item, None)
                continue
            order = share.claim_order(work.shards, self._rng.randrange(work.shards))
            if share.alerting(work) and any(self.working_on.values()):
                continue  # one alerting shard at a time: a process that dies had one chunk in flight
            free = [
                i for i in order if share.claimable(records.get(i), now) and keys[i] not in self.working_on
            ]
            if not free:  # all held: look again once a holder that died would have lost its lease
                f.look_again[item] = trio.current_time() + self.settings.shard_lease_s / 2
                continue
            await self._deliver(f, board, free[0])
            return True
        return False

    async def _deliver(self, f: Followed, board: Board, index: int) -> None:
        job = ShardJob(f.match_id, board.lane, board.work, index)
        authority = OwnerOnLock(
            self._locks,
            f.match_id,
            owner=board.owner,
            epoch=board.lease_epoch,
            skew_s=self._skew_s,
            wall_clock=self._now,
        )
        # before the first await: another taker passes it by
        self.working_on[job.key] = share.alerting(board.work)
        try:
            await self.runner.run(job, f.audience, authority, on_result=f.on_result)
        except Exception as exc:  # noqa: BLE001 - the shard was given back; the fleet takes it up
            log.warning("shard_failed", match_id=f.match_id, shard=job.key, error=repr(exc))
        finally:
            del self.working_on[job.key]

    def describe(self) -> dict[str, Any]:
        return {
            "followed": {
                m: {
                    "owner": f.owner,
                    "epoch": f.epoch,
                    "sessions": len(f.audience.sessions),
                    "followers": len(f.audience.follower_team),
                    "lanes": {lane: b.work.seq for lane, b in f.boards.items()},
                    "board_age_s": round(max(0.0, self._now() - f.published_at), 1)
                    if f.published_at
                    else None,
                }
                for m, f in self.followed.items()
            },
            "working_on": list(self.working_on),
            "shards_delivered": self.runner.delivered,
            "pushes_answered": self.runner.pushes,
            "gave_way_s": round(self.gave_way_s, 3),
            "helpers": {h: round(until - self._now(), 1) for h, until in sorted(self.words.items())},
            "saying_it_helps": self._said_at is not None,
        }
