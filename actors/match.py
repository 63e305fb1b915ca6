"""MatchActor: everything about one live match, owned by exactly one instance at a time.

It owns, for its match: the lock lease (``actors.lease``: it stops pushing the moment the lease cannot be
relied on), the previous state it diffs against (``active-matches``, every write fenced on owner and epoch),
its cooldowns (in the engine's state), its audience (``actors.audience``), its push-to-starts
(``actors.match_starts``), its broadcast channels (``actors.channels``) and its fan-outs (``actors.fanout``).

Each tick: the feed's fixture -> ``snapshot_from_fixture`` -> ``process_tick`` (pure) -> a payload per
perspective -> the fan-out -> APNs's results -> the new state persisted (fenced) -> the display published for
the app's API (every perspective in ``DisplayStateCache``, neutral on the fixture). A routine tick is pushed,
then persisted; an alerting tick goes through an alert intent written before its first push; the match's end
winds everything down. A hot match (``actors.share``: its per-token audience above ``[fanout].share_above``)
publishes each fan-out as a work item that every engine of the region delivers shard by shard, this owner
included; what is sent is still decided here. docs/delivery.md has why each step is where it is;
docs/architecture.md what may call what. It must not talk to SportMonks or APNs itself: the feed and the sender
do.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import trio
from botocore.exceptions import BotoCoreError, ClientError

from actors.audience import NEUTRAL, MatchAudience
from actors.channels import ChannelRef, MatchBroadcasts, MatchChannels, broadcast_pushes
from actors.delivery import Delivery
from actors.fanout import FanOut, RetryPolicy
from actors.janitor import TokenRef
from actors.lease import GIVEN_UP, HeldLease, LeaseLost
from actors.livework import LiveWork
from actors.match_starts import HEAL_PHASES, FollowerStarts, Latest, StartsContext
from actors.ports import ChannelRequests, FixtureSource, MatchStore, PushSender
from actors.settings import MatchActorSettings, OrchestratorSettings
from actors.shard import OWNER, ShardRunner
from actors.share import SharedFanOut, Sharing
from daemon.apns.types import LIVEACTIVITY_TOPIC_SUFFIX, Fence, Push, PushResult
from daemon.cricket import intent as intents
from daemon.cricket import payloads
from daemon.cricket.engine import TickResult, process_tick
from daemon.cricket.intent import HANDED_ATTRIBUTE, INTENT_ATTRIBUTE, AlertIntent
from daemon.cricket.payloads import TeamRef, activity_attributes
from daemon.cricket.settings import EngineSettings
from daemon.cricket.share import TICK, TickWork
from daemon.cricket.snapshot import ImplausibleSnapshot, MatchSnapshot, Team, snapshot_from_fixture
from daemon.cricket.state import MatchState
from daemon.logs import get_logger
from daemon.metrics import (
    BALL_TO_PUSH,
    DYNAMODB_CALLS_PER_TICK,
    KEY_EVENTS,
    LOCK_LOSSES,
    LOCK_RENEWALS,
    TICK_DURATION,
    TICKS,
)
from daemon.store.codec import iso
from daemon.store.dynamo import BatchIncomplete, count_calls
from daemon.store.locks import match_lock_key

if TYPE_CHECKING:
    from actors.feed import FeedUpdate

TERMINAL_PHASES = frozenset({"completed", "abandoned"})

# DynamoDB failing past botocore's own retries (throttled, unreachable). Without DynamoDB the actor can neither
# prove its lease nor persist a tick, so it stops as if the lease were lost: its lock (if still its own) is
# released and the orchestrator takes the match again at its next takeover check, once DynamoDB answers,
# from the persisted state. Treating it as a crash would spend the supervisor's restart budget in seconds and
# quarantine the match for minutes.
STORE_UNAVAILABLE: tuple[type[BaseException], ...] = (BotoCoreError, ClientError, BatchIncomplete)


# ------------------------------------------------------------------------------------------------ tick timing


def routine_wait_s(fetched_at: float, now: float, after_s: float) -> float:
    """How long a routine tick (no alert) still waits before its pushes: until ``after_s`` after the feed
    leader fetched it (wall clock, ``fetched_at``), never longer than ``after_s`` (another host's clock may
    be ahead) and not at all once that moment has passed (a late tick: a cache hop, a take-over).

    Why: a poll carries the new balls of every match of the region at once, so a wicket's fan-out and
    another match's routine update start together, often on other instances of the same host, and share
    its CPU and the APNs peer. Held back, routine updates go out once the poll's key events are out."""
    return min(max(0.0, fetched_at + after_s - now), after_s)


def tick_timings(
    *, since_fetch_s: float, at_start_s: float, tick_s: float, started: float, marks: dict[str, float]
) -> dict[str, float]:
    """Where a key event's time went, for the ``key_event_tick`` log line: from the leader's fetch to the
    tick done, to the tick's start (the cache hop and the queue), the tick itself, and from its start to each
    mark (``persisted``: the alert intent written; ``answer``: the first answer the actor took)."""
    out = {"since_fetch_s": since_fetch_s, "at_start_s": at_start_s, "tick_s": tick_s}
    out.update({f"{name}_s": at - started for name, at in marks.items()})
    return {k: round(v, 3) for k, v in out.items()}


def _plus(
    total: int, counts: Mapping[str, int], more: list[tuple[int, dict[str, int]]]
) -> tuple[int, dict[str, int]]:
    """A fan-out's pushes and outcome counts with those of ``more`` hand-offs (the broadcasts) added."""
    out = dict(counts)
    for n, extra in more:
        total += n
        for k, v in extra.items():
            out[k] = out.get(k, 0) + v
    return total, out


def _team(team: Team) -> TeamRef:
    return TeamRef(str(team.id), str(team.name), str(team.code))


# ------------------------------------------------------------------------------------------------ the actor


class MatchActor:
    def __init__(
        self,
        match_id: str,
        *,
        instance_id: str,
        epoch: int,
        repos: MatchStore,
        feed: FixtureSource,
        sender: PushSender,
        channel_requests: ChannelRequests | None,
        topic: str,
        marquee: bool,
        engine_settings: EngineSettings,
        settings: MatchActorSettings,
        lease: OrchestratorSettings,
        on_delivery: Callable[[Delivery], None] | None = None,
        wall_clock: Callable[[], float] = time.time,
        live: LiveWork | None = None,
        sharing: Sharing | None = None,
    ) -> None:
        """``channel_requests``: the sender's channel management (None: the match uses no broadcast
        channels). ``sharing``: the region's ``[fanout]`` (default: never hot; an intent a previous owner
        fanned out shared is still completed shared)."""
        self.match_id = match_id
        self.instance_id = instance_id
        self.epoch = epoch
        self._repos = repos
        self._feed = feed
        self._topic = topic
        self.marquee = marquee
        self._engine_settings = engine_settings
        self.settings = settings
        self._ended_ttl_s = lease.ended_ttl_s
        self._on_delivery = on_delivery
        self._now = wall_clock
        self.log = get_logger("match", match_id=match_id)

        self.lease = HeldLease(
            repos.locks,
            match_lock_key(match_id),
            instance_id,
            lease_s=lease.lease_s,
            renew_every_s=lease.renew_every_s,
            clock_skew_bound_s=lease.clock_skew_bound_s,
            wall_clock=wall_clock,
            on_outcome=lambda outcome: LOCK_RENEWALS.labels(outcome).inc(),
        )
        self.audience = MatchAudience(match_id, repos, settings)
        self.latest = Latest()
        self._live = live or LiveWork()
        self.fanout = FanOut(
            sender,
            fence=self.lease.fence,
            check=self.lease.check,
            policy=RetryPolicy(
                retry_max_s=settings.push_retry_max_s,
                backoff_max_s=settings.push_retry_backoff_max_s,
                result_timeout_s=settings.push_result_timeout_s,
            ),
            live=self._live,
            on_result=self._on_result,
            log_context={"match_id": match_id},
        )
        sharing = sharing or Sharing()
        self.share = SharedFanOut(
            match_id,
            region=sharing.region,
            owner=instance_id,
            lease=self.lease,
            owner_epoch=lambda: self.epoch,
            boards=repos.locks,
            runner=ShardRunner(
                owner_id=instance_id,
                role=OWNER,
                locks=repos.locks,
                devices=repos.devices,
                sender=sender,
                live=self._live,
                topic=topic,
                match_settings=settings,
                settings=sharing.settings,
                claim_hold_s=lease.lease_s,
                clock_skew_bound_s=lease.clock_skew_bound_s,
                wall_clock=wall_clock,
            ),
            audience=self.audience,
            settings=sharing.settings,
            cadence_s=lambda: sharing.cadence_s(marquee),
            on_result=self._on_result,
            helpers=sharing.helpers,
            wall_clock=wall_clock,
        )
        self._bundle = topic.removesuffix(LIVEACTIVITY_TOPIC_SUFFIX)
        self.broadcasts: MatchBroadcasts | None = None
        if settings.broadcast_channels and channel_requests is not None:
            channels = MatchChannels(
                match_id,
                bundle=self._bundle,
                request=channel_requests.request,
                fixtures=repos.fixtures,
                epoch=lambda: self.epoch,
                active_matches=repos.active_matches.get_all_active_matches,
            )
            self.broadcasts = MatchBroadcasts(
                channels,
                retry_s=settings.channel_retry_s,
                check=self.lease.check,
                perspectives=lambda: None if self.latest.display is None else list(self.latest.display),
            )
        self.starts = FollowerStarts(
            StartsContext(
                match_id=match_id,
                owner=instance_id,
                topic=topic,
                settings=settings,
                pending_hold_s=lease.lease_s,
                now=wall_clock,
            ),
            audience=self.audience,
            latest=self.latest,
            devices=repos.devices,
            claims=repos.locks,
            fanout=self.fanout,
            channels=self.broadcasts,
            report=on_delivery,
            shared=self.share,
        )

        self.state: MatchState | None = None
        self._ending = False
        # taken at a final phase with no intent left: the end reached every session before its owner stopped
        # (in the wind-up), or the match was taken back after a wrong end; a final tick then only winds it up
        self._end_delivered = False
        self._cast_count = 0  # broadcasts of the hand-off being reported
        self.broadcast_counts: dict[str, int] = {"update": 0, "end": 0}
        # introspection for the admin socket
        self.last_tick_at: float | None = None
        self.last_tick_lag_s: float | None = None
        self.ticks = 0
        self.last_events: list[dict[str, Any]] = []
        # the current tick's moments (trio time), for its key_event_tick log, and its routine hold
        self._marks: dict[str, float] = {}
        self.held_s = 0.0  # the last routine tick's wait after the poll (left out of its duration)

    @property
    def phase(self) -> str | None:
        return self.latest.phase

    # ------------------------------------------------------------------ lifecycle
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await self._run(task_status)
        except* STORE_UNAVAILABLE as group:
            LOCK_LOSSES.inc()
            raise LeaseLost(f"DynamoDB unavailable: {group.exceptions[0]!r}") from None
        except* LeaseLost:
            LOCK_LOSSES.inc()
            raise
        finally:
            # Stopped (lease lost, cancelled, crashed): what is still queued in the sender must not go out;
            # the next owner repeats the tick.
            self.lease.drop()
            self.share.forget()

    async def _run(self, task_status: trio.TaskStatus[None]) -> None:
        await self.lease.acquire()  # a restarted incarnation must prove it still holds the lease
        if not self.lease.held:
            raise LeaseLost("lock is held by another instance")
        item = await self._repos.active_matches.get_active_match_state(self.match_id)
        if (
            item is None
            or item.get("instanceId") != self.instance_id
            or int(item.get("ownerEpoch", 0)) != self.epoch
        ):
            raise LeaseLost("active-matches record is owned by another instance or epoch")
        if item.get("status") == "ended":
            await self.lease.release()
            task_status.started()
            return
        self.state = MatchState.from_item(item) if item.get("matchPhase") else None
        self.latest.phase = self.state.match_phase if self.state else None
        if self.state is not None and self.latest.phase in TERMINAL_PHASES:
            # reopened after a wrong end (its sessions all ended), or its owner stopped in the wind-up after
            # the end was delivered: its stamp at the end's progress, taken back to the innings' own
            self.state = self.state.reopened()
            self.starts.restart_all()
        intent = AlertIntent.from_record(item)
        self._end_delivered = intent is None and self.latest.phase in TERMINAL_PHASES
        self._ending = intent is not None and intent.kind == "end"
        self.log.info(
            "match_actor_started",
            epoch=self.epoch,
            resumed=self.state is not None,
            unfinished_alert=bool(intent),
        )
        if self.broadcasts is not None:
            await self.broadcasts.load()

        updates = self._feed.subscribe(self.match_id, marquee=self.marquee)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._keep_lease)
                nursery.start_soon(self.audience.keep_fresh)
                nursery.start_soon(self.starts.loop)
                nursery.start_soon(self._prepare_channels)
                await self.audience.loaded.wait()
                task_status.started()
                if intent is not None:
                    await self._complete_intent(intent)
                    if intent.kind == "end":
                        await self.wind_up(self.latest.phase or "completed")
                        nursery.cancel_scope.cancel()
                        return
                async for update in updates:
                    if await self.handle(update):
                        break
                nursery.cancel_scope.cancel()
        finally:
            self._feed.unsubscribe(self.match_id)

    async def _keep_lease(self) -> None:
        reason = await self.lease.keep()
        if reason != GIVEN_UP:  # released at the end: the actor is returning on its own
            raise LeaseLost(reason)

    # ------------------------------------------------------------------ ticks
    async def handle(self, update: FeedUpdate) -> bool:
        """Handle one feed update; True once the match has ended and been wound up."""
        if update.released:
            await self._let_go(str(update.error))
            return True
        if update.error or update.fixture is None:
            self.log.warning("feed_update_unusable", error=update.error)
            return False
        try:
            snapshot = snapshot_from_fixture(update.fixture)
        except ImplausibleSnapshot as exc:  # numbers cricket cannot produce: skipped like a malformed tick
            self.log.warning("fixture_implausible", error=str(exc))
            return False
        except Exception as exc:  # malformed tick: keep the last good state, skip this one
            self.log.warning("fixture_rejected", error=str(exc))
            return False
        with count_calls() as calls:
            started = trio.current_time()
            age_at_start = max(0.0, self._now() - update.fetched_at)
            self._marks, self.held_s = {}, 0.0  # when its intent was persisted, its first answer came
            result = process_tick(
                self.state,
                snapshot,
                now=self._now(),
                marquee=self.marquee,
                settings=self._engine_settings,
                fetched_at=update.fetched_at,
            )
            if self._doubtful(result, snapshot):
                return False
            self.latest.attributes = activity_attributes(
                self.match_id, _team(snapshot.localteam), _team(snapshot.visitorteam)
            )
            if result.display:
                self.latest.display = dict(result.display)
                self.latest.shown.set()
            if result.ended or result.phase in TERMINAL_PHASES:
                if self._end_delivered:
                    await self._wind_up_delivered(result, snapshot)
                else:
                    await self._finish(result, snapshot)
                return True
            self._end_delivered = False  # live again: a wrong end taken back, its real end still to come
            if self.state is None and not result.events:
                await self._persist_baseline(result)
            persisted = False
            if result.display_changed or result.events:
                persisted = await self.deliver(result, kind="update", fetched_at=update.fetched_at)
            if result.state != self.state and not persisted:
                await self._persist(result.state)
            if result.display_changed:
                await self._publish_display(result, snapshot)
            self.state = result.state
            if result.phase in HEAL_PHASES and self.latest.phase not in HEAL_PHASES:
                self.starts.wake()  # gone live: its followers get their push-to-start now
            self.latest.phase = result.phase
            elapsed = trio.current_time() - started - self.held_s
        self.ticks += 1
        self.last_tick_at = self._now()
        self.last_tick_lag_s = max(0.0, self.last_tick_at - update.fetched_at)
        if result.display_changed or result.events:
            BALL_TO_PUSH.observe(self.last_tick_lag_s)
        if result.events:  # where a key event's time went
            timings = tick_timings(
                since_fetch_s=self.last_tick_lag_s,
                at_start_s=age_at_start,
                tick_s=elapsed,
                started=started,
                marks=self._marks,
            )
            self.log.info(
                "key_event_tick",
                events=[e.key for e in result.events],
                sessions=len(self.audience.sessions),
                **timings,
            )
        TICKS.labels(self.match_id).inc()
        TICK_DURATION.labels(self.match_id).observe(elapsed)
        DYNAMODB_CALLS_PER_TICK.observe(calls.n)
        return False

    def _doubtful(self, result: TickResult, snapshot: MatchSnapshot) -> bool:
        """Log the engine's doubts; True when the tick is skipped (nothing pushed, nothing written)."""
        if result.behind is not None:
            # an older fixture than the state's (a feed leader change, a take-over): not news, not a correction
            self.log.info("fixture_behind_state", reason=result.behind)
            return True
        if result.end_withdrawn:
            self.log.warning("match_end_withdrawn", status=snapshot.status)
        if result.end_pending and (self.state is None or self.state.end_doubt is None):
            status, note, winner = snapshot.status, snapshot.note, snapshot.winner_team_id
            self.log.warning("match_end_unconfirmed", status=status, note=note, winner=winner)
        if result.skipped is None:
            return False
        self.log.warning(
            "fixture_doubtful",
            reason=result.skipped,
            polls=result.state.score_doubt.polls if result.state.score_doubt is not None else 0,
        )
        self.state = result.state  # the previous state, with the doubt counted (in memory only)
        return True

    def _on_result(self, result: PushResult) -> None:
        """A push APNs answered: a rejected session or channel is pushed no more."""
        if self.fanout.first_answer_at is not None:
            self._marks.setdefault("answer", self.fanout.first_answer_at)
        if result.outcome != "rejected":
            return
        ref = result.push.context
        if isinstance(ref, TokenRef) and ref.kind == "la":
            self.audience.drop_session(ref.visitor_key or "")
        elif isinstance(ref, ChannelRef) and self.broadcasts is not None:
            self.broadcasts.note_gone(ref)

    def _casts(self, kind: str) -> list[tuple[str, str]]:
        """The broadcasts of a ``kind`` hand-off, counted (for ``describe`` and the demo)."""
        if self.broadcasts is None:
            return []
        casts = self.broadcasts.targets({s.channel for s in self.audience.channel_sessions.values()})
        self._cast_count = len(casts)
        if kind in self.broadcast_counts:
            self.broadcast_counts[kind] += len(casts)
        return casts

    def _intent_broadcasts(
        self,
        intent: AlertIntent,
        casts: list[tuple[str, str]],
        fresh: bool,
        reply_to: trio.MemorySendChannel[PushResult],
        fence: Fence,
    ) -> list[Push]:
        """An alerting tick's broadcasts, one per perspective, each with the payload its intent records (the
        neutral one for a perspective it has none of); ``fresh`` false (a successor completing the intent)
        sends them without the alert."""

        def cast_payload(p: str, alert: bool = fresh) -> bytes:
            return intent.payload_for(p if p in intent.payloads else NEUTRAL, alert=alert)

        return broadcast_pushes(
            casts,
            self._bundle,
            cast_payload,
            intent.priority,
            intent.kind,
            reply_to,
            fence,
            quiet=(lambda p: cast_payload(p, False)) if fresh else None,
        )

    async def deliver(self, result: TickResult, *, kind: str, fetched_at: float | None = None) -> bool:
        """Push the tick to every session; True when the tick's state was persisted on the way.

        A routine tick (no alert in any payload) is pushed, then persisted by the caller: a crash repeats it,
        which shows nothing twice; given the leader's ``fetched_at``, it first waits until ``routine_after_s``
        after it (``routine_wait_s``). An alerting tick goes through an ``AlertIntent`` (``_fan_out``): its
        state and intent are written before the first push, so what a dying owner leaves is completed by the
        next one with the alert only where it cannot have been shown yet."""
        display = result.display
        now = self._now()
        stale_after = self.settings.stale_after_s
        by_perspective = payloads.tick_payloads(
            display,
            kind=kind,
            timestamp=result.timestamp,
            event=result.best,
            events=result.events,
            dismissal_date=int(now) + self.settings.dismissal_after_s,
            stale_date=int(now) + stale_after if stale_after else None,
        )
        priority = 10 if kind == "end" else payloads.apns_priority(result.best)
        persisted = False
        await self._decide_hot()
        if any(intents.has_alert(p) for p in by_perspective.values()):
            intent = AlertIntent(
                kind=kind,
                timestamp=result.timestamp,
                priority=priority,
                events=tuple(e.key for e in result.events),
                payloads=by_perspective,
                collapse_id=result.best.collapse_id(self.match_id) if result.best is not None else None,
            )
            total, counts = await self._fan_out(intent, state=result.state)
            persisted = True
        else:
            if fetched_at is not None:
                wait = routine_wait_s(fetched_at, self._now(), self.settings.routine_after_s)
                if wait > 0:
                    await trio.sleep(wait)
                self.held_s = wait
            if self.share.shared:
                total, counts = await self._shared_routine(by_perspective, kind, priority)
            else:
                total, counts = await self._routine(by_perspective, kind, priority, display)
        for event in result.events:
            KEY_EVENTS.labels(event.type).inc()
        self.last_events = (
            [{"type": e.type, "subject": e.subject, "ball": e.ball_id, "text": e.text} for e in result.events]
            + self.last_events
        )[:20]
        self._report(
            kind,
            display,
            total,
            counts,
            event=result.best.text if result.best else None,
            event_types=tuple(e.type for e in result.events),
            priority=priority,
        )
        await self._recover_channels()
        return persisted

    async def _routine(
        self, by_perspective: Mapping[str, bytes], kind: str, priority: int, display: Any
    ) -> tuple[int, dict[str, int]]:
        """A routine tick's fan-out by this owner alone: the broadcasts, then every session's push."""
        sessions = list(self.audience.sessions.values())
        perspective = self.audience.perspective
        casts = self._casts(kind)

        def pushes(reply_to: trio.MemorySendChannel[PushResult], fence: Fence) -> list[Push]:
            return broadcast_pushes(
                casts,
                self._bundle,
                lambda p: by_perspective.get(p) or by_perspective[NEUTRAL],
                priority,
                kind,
                reply_to,
                fence,
            ) + [
                Push(
                    s.token,
                    "liveactivity",
                    self._topic,
                    by_perspective[perspective(s.user_id, display)],
                    priority,
                    kind,
                    context=s.ref,
                    fence=fence,
                    reply_to=reply_to,
                )
                for s in sessions
            ]

        return await self.fanout.push_all(pushes)

    async def _shared_routine(
        self, by_perspective: Mapping[str, bytes], kind: str, priority: int
    ) -> tuple[int, dict[str, int]]:
        """A hot match's routine tick: published as a work item, the broadcasts sent here, every session's
        push delivered shard by shard by the fleet (this owner included)."""
        work = await self.share.tick_work(
            kind=kind, priority=priority, payloads=by_perspective, alert=False, collapse_id=None, stamp=None
        )
        casts = self._casts(kind)
        sent: list[tuple[int, dict[str, int]]] = []

        async def broadcasts() -> None:
            if casts:
                sent.append(
                    await self.fanout.push_all(
                        lambda reply_to, fence: broadcast_pushes(
                            casts,
                            self._bundle,
                            lambda p: by_perspective.get(p) or by_perspective[NEUTRAL],
                            priority,
                            kind,
                            reply_to,
                            fence,
                        )
                    )
                )

        total, counts = await self.share.run(TICK, work, before=broadcasts)
        return _plus(total, counts, sent)

    def _report(self, kind: str, display: Any, total: int, counts: dict[str, int], **fields: Any) -> None:
        """Hand the hand-off's ``Delivery`` to the demo/admin listener (``fields``: event, event_types,
        priority)."""
        casts, self._cast_count = self._cast_count, 0
        if self._on_delivery is not None:
            sessions = len(self.audience.channel_sessions) if casts else 0
            more = {"tokens": total - casts, "broadcasts": casts, "channel_sessions": sessions}
            self._on_delivery(Delivery.of(self.match_id, kind, display, {**counts, **fields}, **more))

    async def _fan_out(self, intent: AlertIntent, *, state: MatchState | None) -> tuple[int, dict[str, int]]:
        """An alerting tick's fan-out (a key event of this instance's: the share worker gives way to it): by
        this owner alone, or, for a hot match, shared (``_shared_fan_out``). An intent is completed the way it
        was begun: one recorded with a work item is completed as that item, whoever is hot now."""
        with self._live.key_event():
            if intent.share_seq is not None or (state is not None and self.share.shared):
                return await self._shared_fan_out(intent, state=state)
            return await self._own_fan_out(intent, state=state)

    async def _shared_fan_out(
        self, intent: AlertIntent, *, state: MatchState | None
    ) -> tuple[int, dict[str, int]]:
        """A hot match's alerting tick, at most one alert per session across owners and helpers.

        With ``state`` (a fresh intent), the work item is cut first and recorded with the intent, in the one
        fenced write of the state and the intent, before anything is published or pushed. Without (an intent
        found at take-over), the item the intent records is published again under this owner and continued:
        each shard from its own watermark, its holder fenced on the match lock, so no shard is delivered
        under two owners. Then the broadcasts (without their alert on a take-over), every shard delivered,
        and the intent removed. docs/delivery.md has the argument."""
        fresh = state is not None
        work: TickWork
        if state is not None:
            work = await self.share.tick_work(
                kind=intent.kind,
                priority=intent.priority,
                payloads=intent.payloads,
                alert=True,
                collapse_id=intent.collapse_id,
                stamp=intent.timestamp,
            )
            intent = replace(intent, share_seq=work.seq, share_bounds=work.bounds)
            self.lease.check()
            await self._persist(state, extra={INTENT_ATTRIBUTE: intent.to_item(), HANDED_ATTRIBUTE: None})
            self._marks.setdefault("persisted", trio.current_time())
        else:
            work = self.share.resumed_tick(intent)
        casts = self._casts(intent.kind)
        sent: list[tuple[int, dict[str, int]]] = []

        async def broadcasts() -> None:
            if casts:
                sent.append(
                    await self.fanout.push_all(
                        lambda reply_to, fence: self._intent_broadcasts(intent, casts, fresh, reply_to, fence)
                    )
                )

        total, counts = await self.share.run(TICK, work, before=broadcasts)
        if not await self._repos.active_matches.clear_alert_intent(
            self.match_id, self.instance_id, self.epoch
        ):
            raise LeaseLost("fenced: active-matches is owned by another instance now")
        return _plus(total, counts, sent)

    async def _own_fan_out(
        self, intent: AlertIntent, *, state: MatchState | None
    ) -> tuple[int, dict[str, int]]:
        """Push an alerting tick's intent to every session, at most one alert per session across owners.

        With ``state`` (a fresh intent, this tick's), the state, the intent and the first chunk's watermark
        are written in one fenced write before the first push. Without (an intent found at take-over), the
        sessions at or below its watermark get the payload without its alert first. Every later chunk that
        carries the alert is handed to the sender only once every push before it has been answered and its
        watermark is persisted (fenced): the watermark is never more than one chunk ahead of APNs's answers,
        so an owner killed at any moment leaves at most one chunk (``alert_chunk_max`` sessions) without the
        alert, and a re-send of a push whose fate is unknown (no answer came) goes without its alert. The
        intent is removed at the end. The cost, in DynamoDB writes: one per chunk (the first rides on the state
        write) and one to remove it."""
        sessions = {s.visitor_key: s for s in self.audience.sessions.values()}
        s = self.settings
        plan = intents.plan(list(sessions), intent.handed, first=s.alert_chunk_first, most=s.alert_chunk_max)
        repo = self._repos.active_matches
        gated = list(plan.chunks)
        if state is not None:
            self.lease.check()
            first = gated.pop(0).watermark if gated else None
            await self._persist(state, extra={INTENT_ATTRIBUTE: intent.to_item(), HANDED_ATTRIBUTE: first})
            self._marks.setdefault("persisted", trio.current_time())
            ungated = len(plan.quiet) + (len(plan.chunks[0].keys) if plan.chunks else 0)
        else:
            ungated = len(plan.quiet)
        gates: dict[int, Callable[[], Awaitable[None]]] = {}
        casts = self._casts(intent.kind)
        at = ungated + len(casts)  # the broadcasts go first, ungated
        for chunk in gated:

            async def move(mark: str = chunk.watermark) -> None:
                if not await repo.move_alert_watermark(self.match_id, self.instance_id, self.epoch, mark):
                    raise LeaseLost("fenced: active-matches is owned by another instance now")

            gates[at] = move
            at += len(chunk.keys)
        order = [(k, False) for k in plan.quiet] + [(k, True) for c in plan.chunks for k in c.keys]
        perspective = {k: self.audience.perspective(v.user_id, intent.payloads) for k, v in sessions.items()}
        fresh = state is not None  # a successor completing the intent broadcasts without the alert

        def pushes(reply_to: trio.MemorySendChannel[PushResult], fence: Fence) -> list[Push]:
            return self._intent_broadcasts(intent, casts, fresh, reply_to, fence) + [
                Push(
                    sessions[key].token,
                    "liveactivity",
                    self._topic,
                    intent.payload_for(perspective[key], alert=alert),
                    intent.priority,
                    intent.kind,
                    collapse_id=intent.collapse_id if alert else None,
                    context=sessions[key].ref,
                    fence=fence,
                    reply_to=reply_to,
                    resend_payload=intent.payload_for(perspective[key], alert=False) if alert else None,
                )
                for key, alert in order
            ]

        def quiet(push: Push) -> Push:
            if push.resend_payload is None:
                return replace(push)
            return replace(push, payload=push.resend_payload, collapse_id=None, resend_payload=None)

        total, counts = await self.fanout.push_all(pushes, gates=gates, quiet=quiet)
        if not await repo.clear_alert_intent(self.match_id, self.instance_id, self.epoch):
            raise LeaseLost("fenced: active-matches is owned by another instance now")
        return total, counts

    async def _complete_intent(self, intent: AlertIntent) -> None:
        """Finish an alerting tick a previous owner began (found in the record at take-over)."""
        self.log.warning(
            "alert_intent_completing", kind=intent.kind, events=list(intent.events), handed=intent.handed
        )
        total, counts = await self._fan_out(intent, state=None)
        self.log.info("alert_intent_completed", kind=intent.kind, tokens=total, **counts)
        self._report(
            intent.kind,
            self.latest.display,
            total,
            counts,
            event=None,
            event_types=(),
            priority=intent.priority,
        )
        await self._recover_channels()

    async def _decide_hot(self) -> None:
        """Whether the match is hot (``SharedFanOut.update_hot``): a hot match is kept on the region's hot list
        (its fan-outs shared while another engine says it helps), one that cooled is taken off."""
        was = self.share.hot
        if self.share.update_hot():
            if not self.share.shared:  # a shared fan-out lists it as it publishes
                try:
                    await self.share.go_alone()
                except LeaseLost:
                    raise
                except Exception as exc:  # noqa: BLE001 - this fan-out goes alone anyway; listed next tick
                    self.log.warning("hot_list_not_written", error=repr(exc))
        elif was:
            await self.share.cool()

    async def _persist_baseline(self, result: TickResult) -> None:
        """Persist the first tick's state before its display goes out, marked as not yet shown (no display
        hash), so a successor that resumes from it diffs the next balls against it and sends the display."""
        await self._persist(replace(result.state, display_hash=""))

    async def _persist(self, state: MatchState, *, extra: Mapping[str, Any] | None = None) -> None:
        item = state.to_item()
        if extra:
            item.update(extra)
        ok = await self._repos.active_matches.update_match_state(
            self.match_id, self.instance_id, self.epoch, item
        )
        if not ok:
            raise LeaseLost("fenced: active-matches is owned by another instance now")

    async def _publish_display(self, result: TickResult, snapshot: MatchSnapshot) -> None:
        """The display for the app's API: the fixture's live fields (neutral), and every perspective, neutral
        included, in ``DisplayStateCache`` (the API's display read is a cache hit for each)."""
        try:
            await self._repos.fixtures.update_fixture_fields(
                self.match_id,
                {
                    "live": result.phase not in TERMINAL_PHASES and result.phase != "pre",
                    "status": snapshot.status,
                    "liveUpdatedAt": iso(self._now(), timespec="seconds"),
                    "displayState": result.display.get(NEUTRAL),
                },
            )
            for perspective, content in result.display.items():
                await self._repos.display_cache.set_cached_display_state(
                    self.match_id, perspective, dict(content), ttl_s=self.settings.display_cache_ttl_s
                )
        except Exception as exc:  # the API side's copy is best effort; the push already went out
            self.log.warning("display_publish_failed", error=repr(exc))

    # ------------------------------------------------------------------ match end
    async def _wind_up_delivered(self, result: TickResult, snapshot: MatchSnapshot) -> None:
        """The feed still shows the end an earlier owner delivered (its intent completed and removed, the owner
        stopped in the wind-up): the end is not pushed again, only the display published and the match wound
        up. Pushed again, every session would get the end, and its alert, a second time."""
        self.log.info("match_end_already_delivered", phase=result.phase)
        self.latest.phase = result.phase
        await self._publish_display(result, snapshot)
        await self.wind_up(result.phase)

    async def _finish(self, result: TickResult, snapshot: MatchSnapshot) -> None:
        self.log.info("match_ending", sessions=len(self.audience.sessions))
        if not await self.deliver(result, kind="end"):
            await self._persist(result.state)
        self.state = result.state
        self.latest.phase = result.phase
        await self._publish_display(result, snapshot)
        await self.wind_up(result.phase)

    async def wind_up(self, phase: str) -> None:
        """The end's last steps, each idempotent: sessions ended, the match deactivated, the lock released.
        Follows stay for the orchestrator to remove after ``follows_grace_s`` (a wrong end is undone by taking
        the match again, and its followers are found through them)."""
        reason = "match_abandoned" if phase == "abandoned" else "match_end"
        await self.share.cool()
        if self.broadcasts is not None:  # after the end broadcast: the channels are of no more use
            await self.broadcasts.delete_all()
        sessions = await self._repos.live_activities.get_all_la_sessions_for_match(self.match_id)
        await self._repos.live_activities.end_la_sessions(
            self.match_id, sessions, reason, ttl_s=self.settings.session_ttl_after_end_s
        )
        await self._repos.active_matches.deactivate_match(
            self.match_id, self.instance_id, self.epoch, ttl_s=int(self._ended_ttl_s)
        )
        await self.lease.release()
        self.log.info("match_ended", phase=phase)

    async def _let_go(self, reason: str) -> None:
        """The feed released the fixture (SportMonks does not know its id): stop without ending anything,
        the record idled (fenced) so that a real match under that id can be registered again later."""
        self.log.warning("match_released_by_feed", reason=reason)
        await self.share.cool()
        if not await self._repos.active_matches.release_match(
            self.match_id, self.instance_id, self.epoch, ttl_s=int(self._ended_ttl_s)
        ):
            raise LeaseLost("fenced: active-matches is owned by another instance now")
        await self.lease.release()

    # ------------------------------------------------------------------ broadcast channels
    async def _prepare_channels(self) -> None:
        """As the owner takes the match: its channels (neutral and both teams, from the fixture) created and
        recorded if they are not yet, so that push-to-starts sent before the first tick (the prematch job's)
        can name them too. In the background: a slow or failing management host delays nothing else."""
        if self.broadcasts is None or self.latest.phase in TERMINAL_PHASES or self._ending:
            return  # an owner finishing the match has no use for new channels
        try:
            fixture = await self._repos.fixtures.get_fixture(self.match_id) or {}
        except Exception as exc:
            self.log.warning("broadcast_channels_unavailable", error=repr(exc))
            return
        teams = [str(fixture[k]) for k in ("localteamId", "visitorteamId") if fixture.get(k)]
        if teams:  # else the first display names the perspectives (``MatchBroadcasts.for_start``)
            await self.broadcasts.prepare(teams)

    async def _recover_channels(self) -> None:
        """Broadcasts found channels APNs no longer knows: recreate and record them, and re-announce them with
        a push-to-start to the followers whose activities were on them."""
        if self.broadcasts is None or not self.broadcasts.gone:
            return
        dead = await self.broadcasts.recover()
        users = self.audience.drop_channel_sessions(dead)
        self.starts.forget(users)
        if users:
            await self.starts.heal(again=users)

    # ------------------------------------------------------------------ introspection
    @property
    def token_sessions(self) -> int:
        """Active sessions pushed per token."""
        return len(self.audience.sessions)

    @property
    def hot(self) -> bool:
        """Whether this match is hot: listed for the region's engines to help with its fan-outs."""
        return self.share.hot

    @property
    def shared(self) -> bool:
        """Whether this match's fan-outs are shared by the region's engines now (hot, and helped)."""
        return self.share.shared

    @property
    def channel_session_count(self) -> int:
        """Active sessions started on a broadcast channel."""
        return len(self.audience.channel_sessions)

    def channel_ids(self) -> dict[str, str]:
        """The match's broadcast channels by perspective."""
        return dict(self.broadcasts.channels) if self.broadcasts is not None else {}

    def describe(self) -> dict[str, Any]:
        return {
            "match_id": self.match_id,
            "owner": self.instance_id,
            "epoch": self.epoch,
            "marquee": self.marquee,
            "phase": self.latest.phase,
            "ticks": self.ticks,
            "last_tick_at": self.last_tick_at,
            "lag_s": self.last_tick_lag_s,
            "lease_left_s": self.lease.left_s(),
            "tokens": len(self.audience.sessions),
            "channel_sessions": len(self.audience.channel_sessions),
            "channels": self.channel_ids(),
            "broadcasts": dict(self.broadcast_counts),
            "followers": len(self.audience.follower_team),
            "share": self.share.describe(),
            "cooldowns": dict(self.state.cooldowns) if self.state is not None else {},
            "last_events": self.last_events,
        }
