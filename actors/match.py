"""MatchActor: everything about one live match, owned by exactly one instance at a time.

The actor owns, for its match:
- the lock lease (``cricket-locks``, ``match:{id}``): renewed every ``lease_s * renew_fraction``; when a renewal
  is refused, or the lease would run out (by this process's monotonic clock, less the configured clock-skew
  bound) before a renewal succeeded, the actor raises ``LeaseLost`` and stops before pushing anything more.
  Its pushes carry a ``Fence`` the actor moves to the new lease end at each renewal and to -inf when it
  stops: a push waiting in the sender's queue goes out while, and only while, the actor holds the lease;
- the previous state it diffs against (``active-matches``), loaded at start and written after every tick with
  a write fenced on ``instanceId = me AND ownerEpoch = epoch`` — a paused instance that lost its lease cannot
  overwrite the new owner; a fenced write that fails stops the actor the same way;
- its cooldowns (part of the engine's state);
- the match's Live Activity sessions and followers, held in memory and re-read every ``session_refresh_s``
  (longer for a big match: ``refresh_interval``; spread so that matches do not re-read together:
  ``refresh_pause``) and ``follower_refresh_s``, so a tick's DynamoDB calls do not grow with its followers;
- self-healing: followers without an active session get a push-to-start, rate-limited per device;
- its iOS 18 broadcast channels (``actors.channels``), one per display perspective: created (policy 0) before
  the first push-to-start that needs one, recorded on the fixture, reused by a new owner, deleted at the end.
  An iOS 18 follower is started with ``input-push-channel`` (a *channel session*: stored, never pushed per
  device), older ones with ``input-push-token`` (a *token session*). Each tick is one broadcast per
  perspective with channel sessions or announced in a push-to-start (first; priority 10 for key events, 5
  for routine updates, expiration 0), then the per-token pushes. A channel APNs no longer knows
  (``ChannelNotRegistered``, ``BadChannelId``) is recreated, recorded and re-announced to its followers with
  a push-to-start. A successor completing a tick's intent broadcasts it without the alert (at most once).

Each tick: the Feed's fixture -> ``snapshot_from_fixture`` -> ``process_tick`` (pure) -> a payload per
perspective -> pushes to the shared sender (bounded inbox) -> APNs's results -> persist the new state (fenced)
-> publish the display state for the API (``cricket-fixtures`` live fields, ``DisplayStateCache``). A routine
tick first waits until ``routine_after_s`` after the leader fetched it: the poll's key events go out first.

Delivery (docs/delivery.md has the whole argument): a device shows each alert at most once and still
receives every key event, whatever moment an owner dies. A routine tick (no alert) is pushed, then persisted:
a successor pushes it again, which shows nothing twice. An alerting tick goes through an alert intent
(``daemon.cricket.intent``): its state, exact payloads and a fan-out watermark are written in one fenced write
before its first push, the watermark moved before each chunk of sessions; a successor completes it with the
same payloads, without the alert for sessions up to the watermark. A fixture fetched before the state's is
skipped, not taken as a correction (``fixture_behind_state``). A match's first tick detects nothing and is
persisted before its display goes out. Push-to-starts are claimed per follower (``actors.match_starts``).

A tick the engine doubts goes out as the match was before it: a final status not yet confirmed (the engine
processes the tick with the previous status), a score gone back further than a correction can (skipped);
implausible numbers are refused at the snapshot and skipped like a malformed tick. Each is logged.

At match end (confirmed by the engine): ``end`` (with a dismissal date) to every session, sessions marked
ended, the match deactivated in ``active-matches`` and the lock released. Follows are kept (the orchestrator
removes them once the end has stood ``follows_grace_s``). An owner that finds the persisted phase terminal
runs the same, idempotent, end sequence again. A match ended wrongly and taken again re-starts its followers
at its first live heal: each without an active session gets a push-to-start at once (docs/delivery.md).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

import trio

from actors.channels import ChannelsUnavailable, MatchChannels, broadcast_pushes
from actors.feed import FixtureSource
from actors.janitor import TokenRef
from actors.livework import LiveWork
from actors.match_starts import HEAL_PHASES, FollowerStarts
from actors.match_types import (
    STORE_UNAVAILABLE,
    ChannelRef,
    Delivery,
    LeaseLost,
    Session,
    refresh_pause,
    routine_hold,
    tick_timings,
)
from actors.settings import MatchActorSettings, OrchestratorSettings
from daemon.apns.broadcast import ChannelError
from daemon.apns.types import LIVEACTIVITY_TOPIC_SUFFIX, Fence, Push
from daemon.cricket import intent as intents
from daemon.cricket import payloads
from daemon.cricket.engine import TickResult, process_tick
from daemon.cricket.intent import HANDED_ATTRIBUTE, INTENT_ATTRIBUTE, AlertIntent
from daemon.cricket.settings import EngineSettings
from daemon.cricket.snapshot import ImplausibleSnapshot, MatchSnapshot, snapshot_from_fixture
from daemon.cricket.state import MatchState
from daemon.logs import get_logger
from daemon.metrics import (
    BALL_TO_PUSH,
    DYNAMODB_CALLS_PER_TICK,
    KEY_EVENTS,
    LOCK_LOSSES,
    LOCK_RENEWALS,
    SESSIONS_BY_PATH,
    TICK_DURATION,
    TICKS,
)
from daemon.store.codec import iso
from daemon.store.dynamo import count_calls
from daemon.store.locks import match_lock_key

TERMINAL_PHASES = frozenset({"completed", "abandoned"})


# What a refresh reads: only these attributes come back (a match can have 100,000 sessions and followers,
# held in memory for the whole match; the rest of each item is not needed here).
SESSION_FIELDS = ("visitorKey", "userId", "updateToken", "channelId", "status")
FOLLOWER_FIELDS = ("userId", "teamId", "deviceToken")


class MatchActor:
    def __init__(
        self,
        match_id: str,
        *,
        instance_id: str,
        epoch: int,
        repos: Any,
        feed: FixtureSource,
        sender: Any,
        topic: str,
        marquee: bool,
        engine_settings: EngineSettings,
        settings: MatchActorSettings,
        lease: OrchestratorSettings,
        on_delivery: Callable[[Delivery], None] | None = None,
        wall_clock: Callable[[], float] = time.time,
        live: LiveWork | None = None,
    ) -> None:
        self.match_id = match_id
        self.instance_id = instance_id
        self.epoch = epoch
        self._repos = repos
        self._feed = feed
        self._sender = sender
        self._topic = topic
        self.marquee = marquee
        self._engine_settings = engine_settings
        self._settings = settings
        self._lease = lease
        self._on_delivery = on_delivery
        self._now = wall_clock
        self._live = live or LiveWork()
        self.log = get_logger("match", match_id=match_id)

        self.state: MatchState | None = None
        self.sessions: dict[str, Session] = {}
        self.follower_team: dict[str, str] = {}
        self._lease_until = -math.inf
        self._fence = Fence(-math.inf)  # rides on every push; moved with the lease (see _renew_once)
        self._last_display: dict[str, Any] | None = None
        self._last_snapshot: MatchSnapshot | None = None
        self._heal_wake = trio.Event()
        # the device each follow names (``deviceToken``, written when the user followed): read in batches
        self.follower_device: dict[str, str] = {}
        # reopened after a wrong end: the first live heal starts every follower
        self._restart_followers = False
        self._sessions_loaded = trio.Event()
        self._first_display = trio.Event()
        # iOS 18 broadcast channels (None: off, or a sender without channel management)
        self.channel_sessions: dict[str, Session] = {}
        self._session_items = 0  # items the last session read returned (ended and channel ones too)
        self._bundle = topic.removesuffix(LIVEACTIVITY_TOPIC_SUFFIX)
        request = getattr(getattr(sender, "channels", None), "request", None)
        self.channels: MatchChannels | None = (
            MatchChannels(
                match_id,
                bundle=self._bundle,
                request=request,
                fixtures=repos.fixtures,
                epoch=lambda: self.epoch,
                active_matches=repos.active_matches.get_all_active_matches,
            )
            if settings.broadcast_channels and request is not None
            else None
        )
        self._channels_gone: dict[str, str] = {}  # perspective -> channel APNs no longer knows
        self._announced: set[str] = set()  # channels named in a push-to-start this actor sent
        self._ending = False
        self._channels_retry_at = -math.inf
        self._last_broadcasts = 0
        self.broadcasts: dict[str, int] = {"update": 0, "end": 0}
        # introspection for the admin socket
        self.last_tick_at: float | None = None
        self.last_tick_lag_s: float | None = None
        self.ticks = 0
        # the current tick's moments (trio time), for its key_event_tick log, and its routine hold
        self._marks: dict[str, float] = {}
        self._held_s = 0.0  # left out of the tick's duration
        self.last_events: list[dict[str, Any]] = []
        self.phase: str | None = None
        self._starts = FollowerStarts(self)  # push-to-start (self-healing)

    # ------------------------------------------------------------------ lifecycle
    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await self._run(task_status)
        except* STORE_UNAVAILABLE as group:
            LOCK_LOSSES.inc()
            raise LeaseLost(f"DynamoDB unavailable: {group.exceptions[0]!r}") from None
        finally:
            # Stopped (lease lost, cancelled, crashed): what is still queued in the sender must not go out;
            # the next owner repeats the tick.
            self._fence.until = -math.inf

    async def _run(self, task_status: Any) -> None:
        await self._renew_once()  # a restarted incarnation must prove it still holds the lease
        item = await self._repos.active_matches.get_active_match_state(self.match_id)
        if (
            item is None
            or item.get("instanceId") != self.instance_id
            or int(item.get("ownerEpoch", 0)) != self.epoch
        ):
            raise LeaseLost("active-matches record is owned by another instance or epoch")
        if item.get("status") == "ended":
            await self._release_lock()
            task_status.started()
            return
        self.state = MatchState.from_item(item) if item.get("matchPhase") else None
        self.phase = self.state.match_phase if self.state else None
        # Active with a final phase: reopened after a wrong end, whose sessions were all ended.
        self._restart_followers = self.phase in TERMINAL_PHASES
        intent = AlertIntent.from_record(item)
        self._ending = intent is not None and intent.kind == "end"
        self.log.info(
            "match_actor_started",
            epoch=self.epoch,
            resumed=self.state is not None,
            unfinished_alert=bool(intent),
        )
        if self.channels is not None:
            try:  # a restarted or new owner reuses the recorded channels
                await self.channels.load()
            except Exception as exc:
                self.log.warning("broadcast_channels_load_failed", error=repr(exc))

        updates = self._feed.subscribe(self.match_id, marquee=self.marquee)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._renew_loop)
                nursery.start_soon(self._refresh_loop)
                nursery.start_soon(self._heal_loop)
                nursery.start_soon(self._prepare_channels)
                await self._sessions_loaded.wait()
                task_status.started()
                if intent is not None:
                    await self._complete_intent(intent)
                    if intent.kind == "end":
                        await self._wind_up(self.phase or "completed")
                        nursery.cancel_scope.cancel()
                        return
                async for update in updates:
                    if await self._on_update(update):
                        break
                nursery.cancel_scope.cancel()
        finally:
            self._feed.unsubscribe(self.match_id)

    # ------------------------------------------------------------------ the lease
    def _assert_lease(self) -> None:
        if trio.current_time() >= self._lease_until:
            LOCK_LOSSES.inc()
            raise LeaseLost("lease ran out before it was renewed")

    async def _renew_once(self) -> None:
        started = trio.current_time()
        ok = await self._repos.locks.extend(
            match_lock_key(self.match_id), self.instance_id, self._lease.lease_s
        )
        if not ok:
            LOCK_RENEWALS.labels("lost").inc()
            LOCK_LOSSES.inc()
            raise LeaseLost("lock is held by another instance")
        LOCK_RENEWALS.labels("ok").inc()
        # Count from when the request left, not when it came back: the server may have written it at once.
        self._lease_until = started + self._lease.lease_s - self._lease.clock_skew_bound_s
        self._fence.until = self._lease_until

    async def _renew_loop(self) -> None:
        while True:
            await trio.sleep(self._lease.renew_every_s)
            while True:
                remaining = self._lease_until - trio.current_time()
                if remaining <= 0:
                    LOCK_LOSSES.inc()
                    raise LeaseLost("could not renew the lease before it ran out")
                try:
                    with trio.fail_after(max(remaining, 0.01)):
                        await self._renew_once()
                    break
                except (trio.TooSlowError, OSError, RuntimeError) as exc:
                    LOCK_RENEWALS.labels("error").inc()
                    self.log.warning("lease_renewal_failed", error=repr(exc))
                    await trio.sleep(min(0.5, max(self._lease_until - trio.current_time(), 0)))
                except LeaseLost:
                    raise
                except Exception as exc:  # botocore errors: retry until the lease runs out
                    LOCK_RENEWALS.labels("error").inc()
                    self.log.warning("lease_renewal_failed", error=repr(exc))
                    await trio.sleep(min(0.5, max(self._lease_until - trio.current_time(), 0)))

    async def _release_lock(self) -> None:
        try:
            await self._repos.locks.release(match_lock_key(self.match_id), self.instance_id)
        except Exception as exc:
            self.log.warning("lock_release_failed", error=repr(exc))

    # ------------------------------------------------------------------ sessions and followers
    async def refresh_sessions(self, *, followers: bool = True) -> None:
        """Re-read the match's sessions (and followers, unless told not to). Unchanged sessions keep their
        objects and user ids are shared between the two maps, so a big match costs its memory once, not
        once per refresh."""
        sessions = await self._repos.live_activities.get_all_la_sessions_for_match(
            self.match_id, fields=SESSION_FIELDS
        )
        old, old_channel, self._session_items = self.sessions, self.channel_sessions, len(sessions)
        fresh: dict[str, Session] = {}
        fresh_channel: dict[str, Session] = {}
        for item in sessions:
            token = item.get("updateToken")
            if item.get("status", "active") != "active":
                continue
            if not token:
                channel = item.get("channelId")
                if channel:  # started on a broadcast channel: counted, never pushed per device
                    key = str(item["visitorKey"])
                    known = old_channel.get(key)
                    if known is not None and known.channel == channel:
                        fresh_channel[key] = known
                    else:
                        user = sys.intern(str(item.get("userId") or key.split("#", 1)[0]))
                        ref = TokenRef("la", self.match_id, visitor_key=key, user_id=user)
                        fresh_channel[key] = Session(key, user, "", ref, str(channel))
                continue
            key = str(item["visitorKey"])
            known = old.get(key)
            if known is not None and known.token == token:
                fresh[known.visitor_key] = known
            else:
                user = sys.intern(str(item.get("userId") or key.split("#", 1)[0]))
                ref = TokenRef("la", self.match_id, visitor_key=key, user_id=user)
                fresh[key] = Session(key, user, str(token), ref)
        del sessions
        if followers:
            follows = await self._repos.follows.get_followers_for_match(self.match_id, fields=FOLLOWER_FIELDS)
            teams: dict[str, str] = {}  # one string per team, not one per follower
            follower_team: dict[str, str] = {}
            follower_device: dict[str, str] = {}
            for f in follows:
                team = str(f.get("teamId") or "")
                user = sys.intern(str(f["userId"]))
                follower_team[user] = teams.setdefault(team, team)
                if f.get("deviceToken"):
                    follower_device[user] = str(f["deviceToken"])
            self.follower_team = follower_team
            self.follower_device = follower_device
        self.sessions = fresh
        self.channel_sessions = fresh_channel
        SESSIONS_BY_PATH.labels(self.match_id, "token").set(len(fresh))
        SESSIONS_BY_PATH.labels(self.match_id, "channel").set(len(fresh_channel))
        self._sessions_loaded.set()

    def refresh_interval(self) -> float:
        """Seconds to the next session refresh: ``session_refresh_s``, longer for a big match so that its
        re-reads stay under ``session_refresh_items_per_s`` (their decoding is most of a big match's CPU).
        Every item the read returns counts: channel and ended sessions are read and decoded too."""
        s = self._settings
        return max(s.session_refresh_s, self._session_items / s.session_refresh_items_per_s)

    async def _refresh_loop(self) -> None:
        followers_due, first = -math.inf, True
        while True:
            with_followers = trio.current_time() >= followers_due
            try:
                await self.refresh_sessions(followers=with_followers)
                if with_followers:
                    followers_due = trio.current_time() + self._settings.follower_refresh_s
            except Exception as exc:  # keep the last good view; try again next round
                self.log.warning("session_refresh_failed", error=repr(exc))
                self._sessions_loaded.set()
            await trio.sleep(refresh_pause(self.refresh_interval(), first=first))  # spread: see refresh_pause
            first = False

    # ------------------------------------------------------------------ ticks
    async def _on_update(self, update: Any) -> bool:
        """Handle one feed update; True once the match has ended and been wound up."""
        if getattr(update, "released", False):
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
            self._marks, self._held_s = {}, 0.0  # when its intent was persisted, its first answer came
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
            self._last_snapshot = snapshot
            if result.display:
                self._last_display = dict(result.display)
                self._first_display.set()
            terminal = result.ended or result.phase in TERMINAL_PHASES
            if terminal:
                await self._finish(result, snapshot)
                return True
            if self.state is None and not result.events:
                await self._persist_baseline(result)
            persisted = False
            if result.display_changed or result.events:
                persisted = await self._deliver(result, snapshot, kind="update", fetched_at=update.fetched_at)
            if result.state != self.state and not persisted:
                await self._persist(result.state)
            if result.display_changed:
                await self._publish_display(result, snapshot)
            self.state = result.state
            if result.phase in HEAL_PHASES and self.phase not in HEAL_PHASES:
                self._heal_wake.set()  # gone live: its followers get their push-to-start now
            self.phase = result.phase
            elapsed = trio.current_time() - started - self._held_s
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
                sessions=len(self.sessions),
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
            "fixture_doubtful", reason=result.skipped, polls=getattr(result.state.score_doubt, "polls", 0)
        )
        self.state = result.state  # the previous state, with the doubt counted (in memory only)
        return True

    def _content_for(self, display: Any, user_id: str) -> dict[str, Any]:
        return dict(display[self._perspective(user_id, display)])

    def _perspective(self, user_id: str, display: Mapping[str, Any]) -> str:
        team = self.follower_team.get(user_id, "")
        return team if team and team in display else "neutral"

    async def _deliver(
        self, result: TickResult, snapshot: MatchSnapshot, *, kind: str, fetched_at: float | None = None
    ) -> bool:
        """Push the tick to every session; True when the tick's state was persisted on the way.

        A routine tick (no alert in any payload) is pushed, then persisted by the caller: a crash repeats it,
        which shows nothing twice; given the leader's ``fetched_at``, it first waits until ``routine_after_s``
        after it (``routine_hold``). An alerting tick goes through an ``AlertIntent`` (``_fan_out``): its state
        and intent are written before the first push, so what a dying owner leaves is completed by the next
        one with the alert only where it cannot have been shown yet."""
        display = result.display
        now = self._now()
        stale_after = self._settings.stale_after_s
        by_perspective = payloads.tick_payloads(
            display,
            kind=kind,
            timestamp=result.timestamp,
            event=result.best,
            events=result.events,
            dismissal_date=int(now) + self._settings.dismissal_after_s,
            stale_date=int(now) + stale_after if stale_after else None,
        )
        priority = 10 if kind == "end" else payloads.apns_priority(result.best)
        persisted = False
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
                self._held_s = await routine_hold(fetched_at, self._now(), self._settings.routine_after_s)
            sessions = list(self.sessions.values())
            topic = self._topic
            casts = self._broadcast_targets()

            def pushes(reply_to: Any, fence: Fence) -> list[Push]:
                return broadcast_pushes(
                    self._counted(casts, kind),
                    self._bundle,
                    lambda p: by_perspective.get(p) or by_perspective["neutral"],
                    priority,
                    kind,
                    reply_to,
                    fence,
                ) + [
                    Push(
                        s.token,
                        "liveactivity",
                        topic,
                        by_perspective[self._perspective(s.user_id, display)],
                        priority,
                        kind,
                        context=s.ref,
                        fence=fence,
                        reply_to=reply_to,
                    )
                    for s in sessions
                ]

            total, counts = await self._push_all(pushes)
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
        if self._channels_gone:
            await self._recover_channels()
        return persisted

    def _report(self, kind: str, display: Any, total: int, counts: dict[str, int], **fields: Any) -> None:
        """Hand the tick's ``Delivery`` to the demo/admin listener (``fields``: event, event_types, priority)."""
        casts, self._last_broadcasts = self._last_broadcasts, 0
        if self._on_delivery is not None:
            sessions = len(self.channel_sessions) if casts else 0
            more = {"tokens": total - casts, "broadcasts": casts, "channel_sessions": sessions}
            self._on_delivery(Delivery.of(self.match_id, kind, display, {**counts, **fields}, **more))

    async def _fan_out(self, intent: AlertIntent, *, state: MatchState | None) -> tuple[int, dict[str, int]]:
        """Push an alerting tick's intent to every session, at most one alert per session across owners.

        With ``state`` (a fresh intent, this tick's), the state, the intent and the first chunk's watermark
        are written in one fenced write before the first push. Without (an intent found at take-over), the
        sessions at or below its watermark get the payload without its alert first. Every chunk that carries
        the alert is handed to the sender only once its watermark is persisted (fenced), and a re-send of a
        push whose fate is unknown (no answer came) goes without its alert. The intent is removed at the end.
        The cost, in DynamoDB writes: one per chunk (the first rides on the state write) and one to remove it.
        """
        sessions = {s.visitor_key: s for s in self.sessions.values()}
        s = self._settings
        plan = intents.plan(list(sessions), intent.handed, first=s.alert_chunk_first, most=s.alert_chunk_max)
        repo = self._repos.active_matches
        gated = list(plan.chunks)
        if state is not None:
            self._assert_lease()
            first = gated.pop(0).watermark if gated else None
            await self._persist(state, extra={INTENT_ATTRIBUTE: intent.to_item(), HANDED_ATTRIBUTE: first})
            self._marks.setdefault("persisted", trio.current_time())
            ungated = len(plan.quiet) + (len(plan.chunks[0].keys) if plan.chunks else 0)
        else:
            ungated = len(plan.quiet)
        gates: dict[int, Callable[[], Awaitable[None]]] = {}
        casts = self._broadcast_targets()
        at = ungated + len(casts)  # the broadcasts go first, ungated
        for chunk in gated:

            async def move(mark: str = chunk.watermark) -> None:
                if not await repo.move_alert_watermark(self.match_id, self.instance_id, self.epoch, mark):
                    LOCK_LOSSES.inc()
                    raise LeaseLost("fenced: active-matches is owned by another instance now")

            gates[at] = move
            at += len(chunk.keys)
        order = [(k, False) for k in plan.quiet] + [(k, True) for c in plan.chunks for k in c.keys]
        topic = self._topic
        perspective = {k: self._perspective(v.user_id, intent.payloads) for k, v in sessions.items()}

        fresh = state is not None  # a successor completing the intent broadcasts without the alert

        def cast_payload(p: str, alert: bool = fresh) -> bytes:
            return intent.payload_for(p if p in intent.payloads else "neutral", alert=alert)

        def pushes(reply_to: Any, fence: Fence) -> list[Push]:
            return broadcast_pushes(
                self._counted(casts, intent.kind),
                self._bundle,
                cast_payload,
                intent.priority,
                intent.kind,
                reply_to,
                fence,
                quiet=(lambda p: cast_payload(p, False)) if fresh else None,
            ) + [
                Push(
                    sessions[key].token,
                    "liveactivity",
                    topic,
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

        total, counts = await self._push_all(pushes, gates=gates, quiet=quiet)
        if not await repo.clear_alert_intent(self.match_id, self.instance_id, self.epoch):
            LOCK_LOSSES.inc()
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
            self._last_display,
            total,
            counts,
            event=None,
            event_types=(),
            priority=intent.priority,
        )
        if self._channels_gone:
            await self._recover_channels()

    async def _push_all(
        self,
        build: Callable[[Any, Fence], list[Push]],
        *,
        gates: Mapping[int, Callable[[], Awaitable[None]]] | None = None,
        quiet: Callable[[Push], Push] | None = None,
    ) -> tuple[int, dict[str, int]]:
        """Hand pushes to the sender and wait for every result, dropping sessions whose token is dead.

        ``build(reply_to, fence)`` makes the pushes, tagged with the channel their results come back on
        and the actor's lease fence, after which the sender must not send them (each push is built once: at
        10,000 per tick, a copy per push is measurable). Returns how many were built and the outcome counts.

        Pushes that failed (APNs down past the sender's own retry budget) or whose result did not come back
        in time are sent again, the same payload with the same timestamp, with a capped backoff, until
        accepted or ``push_retry_max_s`` has passed; ``quiet`` (given by an alerting fan-out) turns a push
        whose fate is unknown (it went out and no answer came) into its ``resend_payload``, the update
        without its alert, so no device shows the alert twice; a push APNs answered with an error, or that
        never left, is re-sent as it was. A routine tick's state is persisted only after this returns, so an
        owner that dies meanwhile leaves the tick to the next owner rather than losing it (an alerting
        tick's intent does the same, see ``_fan_out``). The lease is checked before every round: a paused or
        cut-off owner stops here.

        ``gates`` (index -> coroutine function): before the first round hands over the pushes from that index
        on, the gate is awaited (an alerting fan-out persists its watermark there)."""
        counts = {"accepted": 0, "rejected": 0, "failed": 0}
        deadline = trio.current_time() + self._settings.push_retry_max_s
        send, receive = trio.open_memory_channel[Any](math.inf)
        async with receive:
            self._assert_lease()
            pending = build(send, self._fence)
            total = len(pending)
            attempt = 0
            while pending:
                with self._live.fanout():  # background jobs of this instance give way meanwhile
                    retry, unknown = await self._push_round(pending, receive, counts, gates)
                gates = None
                if not retry:
                    break
                if trio.current_time() >= deadline:
                    counts["failed"] += len(retry)
                    self.log.error(
                        "pushes_given_up", pushes=len(retry), after_s=self._settings.push_retry_max_s
                    )
                    break
                delay = min(self._settings.push_retry_backoff_max_s, 0.5 * 2**attempt)
                self.log.warning("pushes_retrying", pushes=len(retry), attempt=attempt + 1, delay_s=delay)
                await trio.sleep(delay)
                attempt += 1
                self._assert_lease()
                # new objects: a late answer to the last round is then recognised and ignored
                pending = [
                    quiet(push) if quiet is not None and id(push) in unknown else replace(push)
                    for push in retry
                ]
        return total, counts

    async def _push_round(
        self,
        pushes: list[Push],
        receive: trio.MemoryReceiveChannel[Any],
        counts: dict[str, int],
        gates: Mapping[int, Callable[[], Awaitable[None]]] | None = None,
    ) -> tuple[list[Push], set[int]]:
        """One hand-off of ``pushes``; returns those to send again (failed, or no result in time) and the ids
        of those among them whose fate is unknown (sent, never answered).

        The pushes go to the sender in one ``send_many`` and the results are taken as they are buffered,
        awaiting only when none is: a scheduler trip per push each way cost as much CPU as the push itself.
        The round ends early only when no result at all has come for ``push_result_timeout_s`` (the sender
        lost them: it was restarted); a long queue that is moving is waited for, since re-sending what is
        still queued would only lengthen it."""
        waiting: dict[int, Push] = {id(push): push for push in pushes}
        if gates:
            marks = sorted(gates)
            start = 0
            for mark in marks:
                if mark > start:
                    await self._sender.send_many(pushes[start:mark])
                await gates[mark]()
                self._assert_lease()
                start = mark
            if start < len(pushes):
                await self._sender.send_many(pushes[start:])
        else:
            await self._sender.send_many(pushes)
        retry: list[Push] = []
        unknown: set[int] = set()
        stalled = False
        while waiting:
            try:
                result = receive.receive_nowait()
            except trio.WouldBlock:
                result = None
                with trio.move_on_after(self._settings.push_result_timeout_s):
                    result = await receive.receive()
                if result is None:
                    stalled = True
                    break
            push = waiting.pop(id(result.push), None)
            if push is None:
                continue  # a late answer to an earlier round
            self._marks.setdefault("answer", trio.current_time())
            if result.outcome == "failed":
                retry.append(push)
                if result.status is None and result.attempts:
                    unknown.add(id(push))
                continue
            counts[result.outcome] = counts.get(result.outcome, 0) + 1
            ref = push.context
            if result.outcome == "rejected" and isinstance(ref, TokenRef) and ref.kind == "la":
                self.sessions.pop(ref.visitor_key or "", None)
            elif result.outcome == "rejected" and isinstance(ref, ChannelRef):
                self._channels_gone[ref.perspective] = ref.channel_id
        if stalled:
            self.log.warning(
                "push_results_timed_out",
                pending=len(waiting),
                total=len(pushes),
                idle_s=self._settings.push_result_timeout_s,
            )
            retry.extend(waiting.values())
            unknown.update(waiting)
        return retry, unknown

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
            LOCK_LOSSES.inc()
            raise LeaseLost("fenced: active-matches is owned by another instance now")

    async def _publish_display(self, result: TickResult, snapshot: MatchSnapshot) -> None:
        neutral = result.display.get("neutral")
        try:
            await self._repos.fixtures.update_fixture_fields(
                self.match_id,
                {
                    "live": result.phase not in TERMINAL_PHASES and result.phase != "pre",
                    "status": snapshot.status,
                    "liveUpdatedAt": iso(self._now(), timespec="seconds"),
                    "displayState": neutral,
                },
            )
            for team, content in result.display.items():
                if team == "neutral":
                    continue
                await self._repos.display_cache.set_cached_display_state(
                    self.match_id, team, dict(content), ttl_s=self._settings.display_cache_ttl_s
                )
        except Exception as exc:  # the API side's copy is best effort; the push already went out
            self.log.warning("display_publish_failed", error=repr(exc))

    # ------------------------------------------------------------------ match end
    async def _finish(self, result: TickResult, snapshot: MatchSnapshot) -> None:
        self.log.info("match_ending", sessions=len(self.sessions))
        if not await self._deliver(result, snapshot, kind="end"):
            await self._persist(result.state)
        self.state = result.state
        self.phase = result.phase
        await self._publish_display(result, snapshot)
        await self._wind_up(result.phase)

    async def _wind_up(self, phase: str) -> None:
        """The end's last steps, each idempotent: sessions ended, the match deactivated, the lock released.
        Follows stay for the orchestrator to remove after ``follows_grace_s`` (a wrong end is undone by taking
        the match again, and its followers are found through them)."""
        reason = "match_abandoned" if phase == "abandoned" else "match_end"
        if self.channels is not None:  # after the end broadcast: the channels are of no more use
            try:
                await self.channels.delete_all()
            except Exception as exc:  # the sweep deletes what is left
                self.log.warning("broadcast_channels_delete_failed", error=repr(exc))
        sessions = await self._repos.live_activities.get_all_la_sessions_for_match(self.match_id)
        await self._repos.live_activities.end_la_sessions(
            self.match_id, sessions, reason, ttl_s=self._settings.session_ttl_after_end_s
        )
        await self._repos.active_matches.deactivate_match(
            self.match_id, self.instance_id, self.epoch, ttl_s=int(self._lease.ended_ttl_s)
        )
        await self._release_lock()
        self.log.info("match_ended", phase=phase)

    async def _let_go(self, reason: str) -> None:
        """The feed released the fixture (SportMonks does not know its id): stop without ending anything,
        the record idled (fenced) so that a real match under that id can be registered again later."""
        self.log.warning("match_released_by_feed", reason=reason)
        if not await self._repos.active_matches.release_match(
            self.match_id, self.instance_id, self.epoch, ttl_s=int(self._lease.ended_ttl_s)
        ):
            raise LeaseLost("fenced: active-matches is owned by another instance now")
        await self._release_lock()

    # ------------------------------------------------------------------ self-healing push-to-start
    async def _heal_loop(self) -> None:
        await self._starts.loop()

    async def heal(self, *, again: set[str] | None = None) -> int:
        """Push-to-start to followers without a session (``FollowerStarts.heal``); how many were sent."""
        return await self._starts.heal(again=again)

    # ------------------------------------------------------------------ broadcast channels
    async def _prepare_channels(self) -> None:
        """As the owner takes the match: its channels (neutral and both teams, from the fixture) created and
        recorded if they are not yet, so that push-to-starts sent before the first tick (the prematch job's)
        can name them too. In the background: a slow or failing management host delays nothing else."""
        if self.channels is None or self.phase in TERMINAL_PHASES or self._ending:
            return  # an owner finishing the match has no use for new channels
        try:
            fixture = await self._repos.fixtures.get_fixture(self.match_id) or {}
            teams = [str(fixture[k]) for k in ("localteamId", "visitorteamId") if fixture.get(k)]
            if not teams:
                return  # the first display names the perspectives (see _start_channels)
            self._assert_lease()
            with trio.fail_after(self._settings.channel_retry_s):
                await self.channels.ensure(["neutral", *teams])
        except LeaseLost:
            raise
        except Exception as exc:
            self._channels_retry_at = trio.current_time() + self._settings.channel_retry_s
            self.log.warning("broadcast_channels_unavailable", error=repr(exc))

    async def _start_channels(self) -> dict[str, str]:
        """The match's channels for a push-to-start, created (under the lease) if some perspective has none;
        {} while they cannot be had (then iOS 18 followers are started on update tokens)."""
        channels = self.channels
        if channels is None or self._last_display is None:
            return {}
        perspectives = list(self._last_display)
        if all(p in channels.channels for p in perspectives) or trio.current_time() < self._channels_retry_at:
            return channels.channels
        self._assert_lease()
        try:
            with trio.fail_after(self._settings.channel_retry_s):
                await channels.ensure(perspectives)
        except (ChannelsUnavailable, ChannelError, trio.TooSlowError) as exc:
            self._channels_retry_at = trio.current_time() + self._settings.channel_retry_s
            self.log.warning(
                "broadcast_channels_unavailable",
                error=str(exc) or type(exc).__name__,
                retry_in_s=self._settings.channel_retry_s,
            )
        return channels.channels

    def _broadcast_targets(self) -> list[tuple[str, str]]:
        """(perspective, channel) for each recorded channel that has channel sessions on it, or that a
        push-to-start of ours announced: an activity listens from its start, before its session is
        registered and read back, and a broadcast costs one request whoever listens."""
        if self.channels is None or not (self.channel_sessions or self._announced):
            return []
        listening = {s.channel for s in self.channel_sessions.values()} | self._announced
        return [(p, c) for p, c in self.channels.channels.items() if c in listening]

    def _counted(self, casts: list[tuple[str, str]], kind: str) -> list[tuple[str, str]]:
        """``casts``, counted as the broadcasts of a ``kind`` push (for ``describe`` and the demo)."""
        self._last_broadcasts = len(casts)
        if kind in self.broadcasts:
            self.broadcasts[kind] += len(casts)
        return casts

    async def _recover_channels(self) -> None:
        """Broadcasts found channels APNs no longer knows: recreate and record them, and re-announce them with
        a push-to-start to the followers whose activities were on them."""
        gone, self._channels_gone = self._channels_gone, {}
        if self.channels is None:
            return
        self.log.warning("broadcast_channels_gone", channels=gone)
        self._assert_lease()
        try:
            await self.channels.ensure(list(self.channels.channels) or list(gone), replace=gone)
        except (ChannelsUnavailable, ChannelError) as exc:
            self._channels_retry_at = trio.current_time() + self._settings.channel_retry_s
            self.log.warning("broadcast_channels_unavailable", error=str(exc))
        dead = set(gone.values())
        self._announced -= dead
        users = set()
        for key, session in list(self.channel_sessions.items()):
            if session.channel in dead:
                users.add(session.user_id)
                del self.channel_sessions[key]
        for user_id in users:
            self._starts.sent.pop(user_id, None)
        if users:
            await self.heal(again=users)

    # ------------------------------------------------------------------ introspection
    @property
    def token_sessions(self) -> int:
        """Active sessions pushed per token."""
        return len(self.sessions)

    @property
    def channel_session_count(self) -> int:
        """Active sessions started on a broadcast channel."""
        return len(self.channel_sessions)

    def channel_ids(self) -> dict[str, str]:
        """The match's broadcast channels by perspective."""
        return dict(self.channels.channels) if self.channels is not None else {}

    def describe(self) -> dict[str, Any]:
        return {
            "match_id": self.match_id,
            "owner": self.instance_id,
            "epoch": self.epoch,
            "marquee": self.marquee,
            "phase": self.phase,
            "ticks": self.ticks,
            "last_tick_at": self.last_tick_at,
            "lag_s": self.last_tick_lag_s,
            "tokens": len(self.sessions),
            "channel_sessions": len(self.channel_sessions),
            "channels": dict(self.channels.channels) if self.channels is not None else {},
            "broadcasts": dict(self.broadcasts),
            "followers": len(self.follower_team),
            "cooldowns": dict(getattr(self.state, "cooldowns", {}) or {}),
            "last_events": self.last_events,
        }
