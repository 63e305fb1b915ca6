"""One shard of a hot match's work item, delivered by whichever engine took it: the match's owner or a helper.

Owns: the shard's lease (``cricket-locks``, the one lease implementation, ``actors.lease.HeldLease``), taken
with ``acquire_fenced`` (which hands back the shard's record: its watermark survives the holders), renewed in
the background, bounded by the authority of the owner the shard is delivered for (``Authority``), and settled
with the outcome counts once every push is answered; the pushes, built from the owner's published payloads
(``daemon.cricket.share.TickWork``, ``StartWork``) and this engine's view of the match's audience, fenced on
that bound lease; and, for an alerting item, the watermark persisted before each chunk is handed over, in the
same conditional write that renews the lease.

Must not: decide what is sent (the owner did: the board), write the match's state, pick which shard to take
(``actors.share`` and ``actors.share_worker`` do). docs/delivery.md ("A hot match shared by the fleet") has
why each step is where it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import trio

from actors.audience import MatchAudience
from actors.errors import ActorError
from actors.fanout import FanOut, Gate, RetryPolicy
from actors.lease import GIVEN_UP, HeldLease, LeaseLost
from actors.livework import LiveWork
from actors.match_starts import StartRound, StartsContext, start_push
from actors.ports import DeviceStore, PushSender, ShardLocks
from actors.settings import FanoutSettings, MatchActorSettings
from daemon.apns.types import Fence, Push, PushResult
from daemon.cricket import share
from daemon.cricket.payloads import supports_channels
from daemon.cricket.share import ShardRecord, StartWork, TickWork, Work
from daemon.logs import get_logger
from daemon.metrics import SHARE_PUSHES, SHARE_SHARD_WAIT, SHARE_SHARDS
from daemon.store.locks import match_lock_key, shard_key

OWNER = "owner"
HELPER = "helper"


class ShardAbandoned(ActorError):
    """The owner a shard was being delivered for no longer owns the match (or its lease could not be
    confirmed): the shard is given back, to be taken up under the match's current owner."""


class Authority(Protocol):
    """Whom a shard is delivered for: ``confirm`` answers until when (this process's monotonic clock) that
    owner's authority can be relied on, or raises (``ShardAbandoned``, ``LeaseLost``) when it cannot."""

    async def confirm(self) -> float: ...


class OwnLease:
    """The owner's authority over its own match's shards: its match lease, as it holds it."""

    def __init__(self, lease: HeldLease) -> None:
        self._lease = lease

    async def confirm(self) -> float:
        self._lease.check()
        await trio.lowlevel.checkpoint()
        return self._lease.usable_until


class LockReads(Protocol):
    async def read(self, lock_key: str) -> dict[str, Any] | None: ...


class OwnerOnLock:
    """A helper's confirmation of the owner it delivers for: the match lock read (strongly consistent) must
    show that owner under that lease epoch; it can then be relied on until the lock's ``expiresAt`` (the
    owner's clock) less the clock skew bound, counted from when the read was sent. A successor takes the
    match only once that lease ran out (by its clock, within the same bound), so no push of the helper goes
    out under a stale owner."""

    def __init__(
        self,
        locks: LockReads,
        match_id: str,
        *,
        owner: str,
        epoch: int,
        skew_s: float,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._locks = locks
        self._key = match_lock_key(match_id)
        self.owner = owner
        self.epoch = epoch
        self._skew_s = skew_s
        self._wall = wall_clock

    async def confirm(self) -> float:
        sent, sent_wall = trio.current_time(), self._wall()
        item = await self._locks.read(self._key)
        if item is None or item.get("owner") != self.owner or int(item.get("epoch", 0)) != self.epoch:
            raise ShardAbandoned("the match lock names another owner or epoch than the board")
        until = sent + (float(item.get("expiresAt", 0)) - sent_wall) - self._skew_s
        if until <= trio.current_time():
            raise ShardAbandoned("the owner's lease on the match has run out")
        return until


@dataclass(frozen=True)
class ShardJob:
    """Which shard to deliver: the match, the lane, the work item as published, and the shard's index."""

    match_id: str
    lane: str
    work: Work
    index: int

    @property
    def key(self) -> str:
        return shard_key(self.match_id, self.lane, self.work.seq, self.index)


@dataclass(frozen=True)
class ShardResult:
    """A shard delivered: the pushes built and their outcomes, and whether it was taken up from another
    holder (its record had an earlier epoch)."""

    total: int
    counts: dict[str, int]
    resumed: bool


class ShardRunner:
    """Delivers shards for one process: ``run`` takes one shard, delivers it and settles it, or gives it back.

    ``role`` is "owner" (a match actor's own shards) or "helper" (the share worker's: it gives way to this
    instance's own key events before each alerting chunk). ``owner_id`` is this process's owner identity, the
    holder of every lease and push-to-start claim it takes."""

    def __init__(
        self,
        *,
        owner_id: str,
        role: str,
        locks: ShardLocks,
        devices: DeviceStore,
        sender: PushSender,
        live: LiveWork,
        topic: str,
        match_settings: MatchActorSettings,
        settings: FanoutSettings,
        claim_hold_s: float,
        clock_skew_bound_s: float,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.owner_id = owner_id
        self.role = role
        self._locks = locks
        self._devices = devices
        self._sender = sender
        self._live = live
        self._topic = topic
        self._match = match_settings
        self._settings = settings
        self._claim_hold_s = claim_hold_s
        self._skew_s = clock_skew_bound_s
        self._now = wall_clock
        self._policy = RetryPolicy(
            retry_max_s=match_settings.push_retry_max_s,
            backoff_max_s=match_settings.push_retry_backoff_max_s,
            result_timeout_s=match_settings.push_result_timeout_s,
        )
        self._outcomes = {
            o: SHARE_PUSHES.labels(role=role, outcome=o) for o in ("accepted", "rejected", "failed")
        }
        # answers settled since the last flush, by outcome: added to ``sightscreen_share_pushes_total`` once
        # per shard (a locked counter increment per push showed in a hot fan-out's profile)
        self._tally: dict[str, int] = dict.fromkeys(self._outcomes, 0)
        self.log = get_logger("share", role=role)
        self.delivered = 0  # shards this runner delivered, for introspection
        self.pushes = 0  # pushes of those shards answered

    def _lease(self, job: ShardJob) -> HeldLease:
        s = self._settings
        return HeldLease(
            self._locks,
            job.key,
            self.owner_id,
            lease_s=s.shard_lease_s,
            renew_every_s=s.shard_renew_every_s,
            clock_skew_bound_s=self._skew_s,
            wall_clock=self._now,
        )

    async def run(
        self,
        job: ShardJob,
        audience: MatchAudience,
        authority: Authority,
        *,
        on_result: Callable[[PushResult], None] | None = None,
    ) -> ShardResult | None:
        """Take the shard and deliver it; None when it could not be taken (another holds it, or it is done)
        or was given back (its owner changed, its lease was lost: the work is left to whoever takes it up,
        from its watermark). ``on_result`` sees each settled answer (the owner drops rejected sessions)."""
        lease = self._lease(job)
        item = await lease.acquire(fields={"role": self.role})
        if not lease.held:
            return None
        record = ShardRecord.from_item(item or {"owner": self.owner_id})
        if record.done:  # delivered already (a record older than its hold): nothing to do again
            await lease.release()
            return None
        resumed = record.epoch > 1
        SHARE_SHARDS.labels(self.role, "resumed" if resumed else "claimed").inc()
        if record.epoch == 1:
            SHARE_SHARD_WAIT.labels(job.lane).observe(max(0.0, self._now() - job.work.published_at))
        given_back: list[str] = []
        outcome: tuple[int, dict[str, int], bool] | None = None
        try:
            outcome = await self._deliver(job, lease, authority, audience, record, on_result)
        except* (ShardAbandoned, LeaseLost) as group:
            given_back.append(str(group.exceptions[0]))
        except* BaseException:
            # a crash or a cancellation: the shard is given back at once (its watermark stands), so whoever
            # takes it next need not wait out the lease
            await lease.release()
            raise
        finally:
            lease.drop()
            self._flush_tally()
        if given_back:
            SHARE_SHARDS.labels(self.role, "abandoned").inc()
            self.log.warning("shard_given_back", match_id=job.match_id, shard=job.key, reason=given_back[0])
            await lease.release()
            return None
        assert outcome is not None
        total, counts, settled = outcome
        if not settled:
            SHARE_SHARDS.labels(self.role, "abandoned").inc()
            return None
        SHARE_SHARDS.labels(self.role, "done").inc()
        self.delivered += 1
        return ShardResult(total, counts, resumed)

    async def _deliver(
        self,
        job: ShardJob,
        lease: HeldLease,
        authority: Authority,
        audience: MatchAudience,
        record: ShardRecord,
        on_result: Callable[[PushResult], None] | None,
    ) -> tuple[int, dict[str, int], bool]:
        """The delivery under the lease, kept and bounded meanwhile; returns the counts and whether the shard
        was settled (its record written as done)."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._keep, lease, authority)
            lease.bound(await authority.confirm())
            if isinstance(job.work, TickWork):
                total, counts = await self._tick(job, job.work, lease, authority, audience, record, on_result)
            else:
                total, counts = await self._starts(job, job.work, lease, audience)
            settled = await lease.settle(
                hold_s=self._settings.done_hold_s, fields=share.done_fields(counts, total, self._now())
            )
            nursery.cancel_scope.cancel()
        return total, counts, settled

    async def _keep(self, lease: HeldLease, authority: Authority) -> None:
        """Renew the shard's lease and confirm the owner's authority every renewal period; a lost lease or a
        changed owner ends the delivery (the pushes still queued stop at the fence)."""

        async def confirm_every_period() -> None:
            while True:
                await trio.sleep(self._settings.shard_renew_every_s)
                lease.bound(await authority.confirm())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(confirm_every_period)
            reason = await lease.keep()
            nursery.cancel_scope.cancel()
        if reason != GIVEN_UP:  # settled or dropped by the delivery itself: not a loss
            raise LeaseLost(f"shard lease: {reason}")

    # --- a tick's shard ------------------------------------------------------------------------------------

    async def _tick(
        self,
        job: ShardJob,
        work: TickWork,
        lease: HeldLease,
        authority: Authority,
        audience: MatchAudience,
        record: ShardRecord,
        on_result: Callable[[PushResult], None] | None,
    ) -> tuple[int, dict[str, int]]:
        sessions = audience.sessions
        keys = [k for k in share.shard_slice(audience.sorted_keys(), work.bounds, job.index) if k in sessions]
        perspective = {k: audience.perspective(sessions[k].user_id, work.payloads) for k in keys}
        gates: dict[int, Gate] = {}
        if work.alert:
            s = self._match
            plan = share.shard_plan(keys, record.handed, first=s.alert_chunk_first, most=s.alert_chunk_max)
            order = [(k, False) for k in plan.quiet] + [(k, True) for c in plan.chunks for k in c.keys]
            at = len(plan.quiet)
            for chunk in plan.chunks:
                gates[at] = self._watermark(lease, authority, chunk.watermark)
                at += len(chunk.keys)
        else:
            order = [(k, False) for k in keys]
            if self.role == HELPER:
                gates[0] = self._give_way

        def pushes(reply_to: trio.MemorySendChannel[PushResult], fence: Fence) -> list[Push]:
            out = []
            for key, alert in order:
                session = sessions[key]
                out.append(
                    Push(
                        session.token,
                        "liveactivity",
                        self._topic,
                        work.payload_for(perspective[key], alert=alert),
                        work.priority,
                        work.kind,
                        collapse_id=work.collapse_id if alert else None,
                        context=session.ref,
                        fence=fence,
                        reply_to=reply_to,
                        resend_payload=work.payload_for(perspective[key], alert=False) if alert else None,
                    )
                )
            return out

        def quiet(push: Push) -> Push:
            if push.resend_payload is None:
                return replace(push)
            return replace(push, payload=push.resend_payload, collapse_id=None, resend_payload=None)

        fanout = self._fanout(job, lease, on_result)
        return await fanout.push_all(pushes, gates=gates, quiet=quiet if work.alert else None)

    def _watermark(self, lease: HeldLease, authority: Authority, mark: str) -> Gate:
        """The step before an alerting chunk: this instance's own key events first (a helper), the owner's
        authority confirmed, then the watermark written in the lease's renewal (refused: the shard was taken
        up by another after this holder's lease ran out, and this holder stops)."""

        async def step() -> None:
            await self._give_way()
            lease.bound(await self._lasting(authority))
            await lease.renew(fields={"handed": mark})

        return step

    async def _lasting(self, authority: Authority) -> float:
        """The owner's authority, confirmed to last at least a shard renewal period more (when the holder
        confirms it again anyway); until it does, confirmed again every quarter of that period. An alerting
        chunk is handed only then: an owner whose lease is running out (dead, or cut from DynamoDB) leaves
        the chunk unhanded, its sessions above the watermark for its successor to alert, where a chunk
        started at the lease's end would stop at the fence with its watermark written and its rest never
        alerted. A live owner's lease lasts that long between its renewals (the configuration checks it), so
        only a late renewal makes a chunk wait."""
        margin = self._settings.shard_renew_every_s
        while True:
            until = await authority.confirm()
            left = until - trio.current_time()
            if left >= margin:
                return until
            await trio.sleep(min(margin / 4, max(left, 0.0)))

    async def _give_way(self) -> None:
        if self.role == HELPER:
            await self._live.give_way_to_key_events("share")

    def _fanout(
        self, job: ShardJob, lease: HeldLease, on_result: Callable[[PushResult], None] | None
    ) -> FanOut:
        tally = self._tally

        def settled(result: PushResult) -> None:
            tally[result.outcome] += 1
            self.pushes += 1
            if on_result is not None:
                on_result(result)

        return FanOut(
            self._sender,
            fence=lease.fence,
            check=lease.check,
            policy=self._policy,
            live=self._live,
            on_result=settled,
            log_context={"match_id": job.match_id, "shard": job.key},
        )

    def _flush_tally(self) -> None:
        for outcome, n in self._tally.items():
            if n:
                self._outcomes[outcome].inc(n)
                self._tally[outcome] = 0

    # --- a round of starts' shard ---------------------------------------------------------------------------

    async def _starts(
        self, job: ShardJob, work: StartWork, lease: HeldLease, audience: MatchAudience
    ) -> tuple[int, dict[str, int]]:
        """Followers of the shard's range without a session (in this engine's view of the audience), started
        chunk by chunk: each chunk's devices read, its claims taken (none is ever started twice, whoever
        sends), its pushes sent and its claims held. The claims, not a watermark, are what a resumed shard
        relies on."""
        after, through = share.shard_range(work.bounds, job.index)
        with_session = audience.users_with_session()
        due = sorted(
            u for u in audience.follower_team if share.in_shard(u, after, through) and u not in with_session
        )
        ctx = StartsContext(
            match_id=job.match_id,
            owner=self.owner_id,
            topic=self._topic,
            settings=self._match,
            pending_hold_s=self._claim_hold_s,
            now=self._now,
        )
        starts = StartRound(
            ctx, devices=self._devices, claims=self._locks, fanout=self._fanout(job, lease, None)
        )
        total = 0
        counts = dict.fromkeys(share.OUTCOMES, 0)
        step = self._match.heal_chunk
        for i in range(0, len(due), step):
            await self._give_way()
            lease.check()
            users = due[i : i + step]
            devices = await starts.devices_of(users, audience.follower_device)
            claimed = await starts.claim(users, devices, force=set())
            pushes = [self._start_push(ctx, work, audience, u, device) for u, device in claimed]
            if pushes:
                for k, n in (await starts.send(pushes)).items():
                    counts[k] = counts.get(k, 0) + n
                total += len(pushes)
        return total, counts

    def _start_push(
        self, ctx: StartsContext, work: StartWork, audience: MatchAudience, user_id: str, device: Any
    ) -> Push:
        perspective = audience.perspective(user_id, work.content)
        channel = work.channels.get(perspective) if supports_channels(device) else None
        return start_push(
            ctx,
            user_id,
            device,
            content=work.content[perspective],
            channel=channel or None,
            attributes=work.attributes,
            timestamp=work.timestamp,
        )
