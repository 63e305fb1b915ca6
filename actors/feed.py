"""The Feed actor: the one place the running daemon gets SportMonks fixtures from.

Owns the polling schedule (the live lists ``/livescores`` and ``/fixtures?filter[status]`` in turn, at the
cadence the plan allows, with failover between them; ``/fixtures/{id}`` for a subscribed match no list
shows, with the 404 and ghost rules), the subscriptions of match actors, each subscription's content gate,
the latest list answer (for the orchestrator) and the writes to ``cricket-fixture-cache``. It must not
touch match state, locks or APNs, and calls SportMonks only through its ``SportMonksClient`` (budget,
breaker, timeouts) with ``budget_wait_s=0``: a feed tick never waits for budget.

- Subscribers: ``subscribe(match_id, marquee=...)`` returns a bounded channel fed through a one-slot
  mailbox, so a slow subscriber never blocks the feed and always ends up with the newest update; an error
  update does not displace an undelivered good fixture. Subscriptions outlive a run of the actor.
- The plan: ``daemon.sportmonks.plan`` derives the cadence and paces every call on an endpoint; a plan that
  cannot serve stops the start (``PlanError``). A failed poll (429, timeout, 5xx, bad body, no budget) is
  made again at once on the other endpoint, which rests meanwhile.
- Order: answers pass ``daemon.cricket.order.Gate`` (older content dropped, a same-stamp change held until
  a second answer agrees), fixtures from the cache too.
- One fleet per region: only the leader polls (``set_leading``, from ``actors.feed_leader``), for every
  match of the region (``set_region_matches``), and writes what its polls changed to the ``fixture_cache``
  it was built with; elsewhere ``actors.cache_reader`` serves the subscribers through ``offer_cached``, and
  ``livescores()`` answers from the ``leader_summary`` it was built with.
- Errors: a malformed fixture is an error update for its match only; a failed poll on every endpoint is an
  error update for the subscribers the lists serve; the actor keeps running.

See docs/operations.md ("The plan and the cadence") and docs/delivery.md ("The feed's order").
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from actors.ports import FixtureCache, LeaderSummaries
from daemon.backoff import backoff_delay
from daemon.cricket.order import Gate, Verdict, mark_of_fixture
from daemon.logs import get_logger
from daemon.metrics import FEED_ANSWERS_HELD, FEED_CADENCE, FEED_POLLS
from daemon.sportmonks.budget import CallBudget
from daemon.sportmonks.client import (
    DEFAULT_FIXTURE_INCLUDE,
    DEFAULT_LIVE_INCLUDE,
    LIVE_FIELDS,
    LIVE_STATUSES,
    LiveScores,
    SportMonksClient,
)
from daemon.sportmonks.errors import BreakerOpen, BudgetExhausted, SportMonksError, SportMonksHTTPError
from daemon.sportmonks.ghost import GhostRule, Watch, judge, played, sighting
from daemon.sportmonks.plan import FeedPlan, Pacer, next_poll, plan_feed
from daemon.sportmonks.settings import FeedSettings, SportMonksSettings
from daemon.store.caches import CachePut

log = get_logger("actors.feed")

TERMINAL_STATUSES = frozenset({"Finished", "Aban.", "Cancl.", "Postp."})
UNDER_WAY = frozenset(LIVE_STATUSES)
HELD: frozenset[str] = frozenset({"behind", "unconfirmed"})  # gate verdicts that keep a fixture back


@dataclass(frozen=True)
class FeedUpdate:
    match_id: str
    # SportMonks fixture JSON (with balls for marquee), None on error. Shared with the cache writer and the
    # orchestrator's view: treat it as read-only.
    fixture: dict[str, Any] | None
    fetched_at: float  # time.time() when received
    source: str  # "livescores" | "fixtures" (the live lists) | "fixture" (/fixtures/{id})
    in_livescores: bool  # False once no live list shows the match: the fixture then comes from /fixtures/{id}
    error: str | None = None  # a clear message when this tick's data was malformed or unavailable
    released: bool = False  # the fixture answered 404 not_found_max_tries times: the match should let go


@dataclass(frozen=True)
class PollSummary:
    """What a poll leaves for the instances that do not lead: the ``/livescores`` answer in short, when it was
    fetched, and the feed's region state (``FeedActor.region_state``: the call record, the 404 verdicts)."""

    fixtures: Sequence[Mapping[str, Any]]
    fetched_at: float
    state: Mapping[str, Any]


# ------------------------------------------------------------------------------------------------ pure helpers


def is_terminal(fixture: Mapping[str, Any]) -> bool:
    return fixture.get("status") in TERMINAL_STATUSES


def cache_ttl_s(fixture: Mapping[str, Any], settings: FeedSettings) -> int:
    """Short TTL while a match can still change, long once its status is terminal."""
    return settings.cache_ttl_final_s if is_terminal(fixture) else settings.cache_ttl_live_s


def without_balls(fixture: dict[str, Any]) -> dict[str, Any]:
    """The fixture minus its ``balls`` include (a shallow copy; the original is shared and left untouched)."""
    if "balls" not in fixture:
        return fixture
    return {key: value for key, value in fixture.items() if key != "balls"}


def ghost_rule(settings: FeedSettings) -> GhostRule:
    """The ghost-fixture rule's settings, from the feed's (its backoff starts at the off-livescores cadence)."""
    return GhostRule(
        max_tries=settings.ghost_max_tries,
        min_s=settings.ghost_min_s,
        early_s=settings.ghost_early_s,
        late_s=settings.ghost_late_s,
        backoff_s=settings.off_livescores_cadence_s,
        backoff_max_s=max(settings.ghost_backoff_max_s, settings.off_livescores_cadence_s),
    )


def feed_plan(sportmonks: SportMonksSettings, settings: FeedSettings) -> FeedPlan:
    """The feed's plan from the two sections (``PlanError`` when it cannot serve the live matches): the
    derived one, each configured cadence checked against it too."""
    endpoints = ["livescores"] if settings.marquee_source == "fixture" else list(settings.list_endpoints)
    args: dict[str, Any] = {
        "limits": {e: sportmonks.limit(e) for e in endpoints},
        "reserved": sportmonks.reserved_calls,
        "endpoints": endpoints,
        "headroom": settings.budget_headroom,
        "fastest_cadence_s": settings.fastest_cadence_s,
        "slowest_cadence_s": settings.slowest_cadence_s,
    }
    configured = [x for x in (settings.marquee_cadence_s, settings.livescores_cadence_s) if x is not None]
    for cadence in configured:
        plan_feed(**args, configured_s=cadence)  # each checked against the budgets
    if len(configured) == 2:  # both chosen: the derived period is never used
        return plan_feed(**args, configured_s=min(configured))
    return plan_feed(**args)


def under_way(status: str | None) -> bool:
    """A status of a match being played (a live list would show it)."""
    return status in UNDER_WAY


def check_match_id(match_id: str) -> str:
    """The canonical form of a match id (``str(fixture["id"])``), or ValueError naming the field."""
    text = str(match_id).strip()
    if not text.isdigit():
        raise ValueError(f"match_id: expected a numeric SportMonks fixture id, got {match_id!r}")
    return str(int(text))


# ------------------------------------------------------------------------------------------------ subscriptions


@dataclass(eq=False)
class _Subscription:
    match_id: str
    marquee: bool
    send: trio.MemorySendChannel[FeedUpdate]
    receive: trio.MemoryReceiveChannel[FeedUpdate]
    pending: FeedUpdate | None = None
    wake: trio.Event = field(default_factory=trio.Event)
    cancel_scope: trio.CancelScope = field(default_factory=trio.CancelScope)  # the current forwarder's
    in_livescores: bool | None = None  # None until a successful /livescores answer said either way
    league_id: int | None = None
    next_fixture_at: float = -math.inf
    offered: int = 0
    delivered: int = 0
    last_error: str | None = None
    last_update_at: float | None = None
    had_fixture: bool = False  # a good fixture was offered at least once
    remote: bool = False  # owned by another instance: polled by this leader for the cache, no channel
    gate: Gate = field(default_factory=Gate)  # the content order of what it is handed (daemon.cricket.order)
    status: str | None = None  # the status of the last fixture handed on
    # per live list: (whether its latest answer showed the match, not behind what was delivered; when)
    listed: dict[str, tuple[bool, float]] = field(default_factory=dict)

    def offer(self, update: FeedUpdate) -> None:
        """Put ``update`` in the one-slot mailbox (never blocks)."""
        self.offered += 1
        self.last_update_at = update.fetched_at
        self.last_error = update.error
        if self.pending is not None and self.pending.released:
            return  # the last word: the match actor lets go on it, nothing after it matters
        if (
            update.fixture is None
            and not update.released  # the last word supersedes whatever waits: nothing follows it to deliver that
            and self.pending is not None
            and self.pending.fixture is not None
        ):
            return  # keep the undelivered good fixture; the next good one will supersede it anyway
        self.pending = update
        self.wake.set()


@dataclass
class _Flight:
    done: trio.Event = field(default_factory=trio.Event)
    result: LiveScores | None = None
    error: SportMonksError | None = None


# ------------------------------------------------------------------------------------------------ the actor


class FeedActor:
    def __init__(
        self,
        client: SportMonksClient,
        settings: FeedSettings,
        *,
        fixture_cache: FixtureCache | None = None,
        leader_summary: LeaderSummaries | None = None,
        leading: bool = True,
    ) -> None:
        """``fixture_cache``: where the polls are written while leading (None: nowhere, a lone instance);
        ``leader_summary``: where ``livescores()`` is answered from while another instance leads."""
        self.client = client
        self.settings = settings
        # the plan the budgets allow; PlanError (a clear message naming the settings) stops the start
        self.plan = feed_plan(client.settings, settings)
        self.pacer = Pacer(self.plan.interval_s)
        client.budget.listeners.append(self.pacer.note)  # every call on an endpoint spaces the next
        self._cache = fixture_cache
        self._marquee_leagues = frozenset(settings.marquee_leagues)
        self._subs: dict[str, _Subscription] = {}
        self._nursery: trio.Nursery | None = None
        self._wakeup = trio.Event()
        self._last_poll_at = -math.inf
        self._last_endpoint: str | None = None
        self._resting: dict[str, float] = {}  # endpoint -> trio time until which no poll goes to it
        self._failing: dict[str, int] = {}  # endpoint -> its polls failed in a row (sets the next rest)
        self.polls: dict[str, dict[str, int]] = {}  # endpoint -> outcome -> count (as FEED_POLLS)
        self.held: dict[str, int] = {}  # gate verdicts that kept a fixture back -> count
        self._inflight: _Flight | None = None
        self._latest: LiveScores | None = None
        self._latest_at = -math.inf
        self._latest_with_balls = False
        # cache writer state: newest fixture per match waiting to be written, and what was last written
        self._cache_pending: dict[str, FeedUpdate] = {}
        self._summary_pending: tuple[list[dict[str, Any]], float] | None = None
        self._summary_last: tuple[list[dict[str, Any]], float] | None = None
        # region leadership: polling only while leading; elsewhere the cache reader serves the subscribers
        self.leading = leading
        self._leading_changed = trio.Event()
        self._leader_summary = leader_summary
        self._cache_wake = trio.Event()
        self._cache_written: dict[str, tuple[Mapping[str, Any], float]] = {}
        self.cache_writes = 0
        self.cache_errors = 0
        self._released: dict[str, float] = {}  # match id -> trio time until which it is not taken again
        self._not_found_tries: dict[str, int] = {}  # match id -> 404 answers to /fixtures/{id} in a row
        self._ghosts: dict[
            str, Watch
        ] = {}  # match id -> how long a listed fixture has shown no play, unchanged
        self._ghost_released: set[str] = set()  # released as ghosts: play seen in /livescores lifts it
        self._seen_listed: dict[str, float] = {}  # match id -> when a /livescores answer last listed it
        self._ghost_rule = ghost_rule(settings)

    # ------------------------------------------------------------------------------------------ public API

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        log.info("feed_plan", **self.plan_view())
        FEED_CADENCE.set(self.cadence_s())
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                for sub in self._subs.values():
                    if not sub.remote:
                        self._start_forwarder(sub)
                if self._cache is not None:
                    nursery.start_soon(self._cache_writer)
                task_status.started()
                await self._poll_loop()
            finally:
                # Subscriptions outlive a run: their channels stay open, so a feed restarted by the
                # supervisor picks them up again and match actors only notice a pause.
                self._nursery = None

    def subscribe(self, match_id: str, *, marquee: bool) -> trio.MemoryReceiveChannel[FeedUpdate]:
        """Updates for one match; replaces (and closes) an earlier subscription to the same match."""
        match_id = check_match_id(match_id)
        if match_id in self._subs:
            self.unsubscribe(match_id, _quiet=self._subs[match_id].remote)
        send, receive = trio.open_memory_channel[FeedUpdate](self.settings.subscriber_buffer)
        sub = _Subscription(match_id=match_id, marquee=marquee, send=send, receive=receive)
        self._subs[match_id] = sub
        if self._nursery is not None:
            self._start_forwarder(sub)
        log.info("feed_subscribe", match_id=match_id, marquee=marquee)
        if self.is_released(match_id):
            # A match actor restarted after the release (it crashed around it) would wait forever: no poll
            # answers for a released fixture. It gets the last word at once and lets go.
            sub.next_fixture_at = math.inf
            message = f"fixture {match_id} is released (404 on every try, or no play)"
            sub.offer(FeedUpdate(match_id, None, time.time(), "fixture", False, error=message, released=True))
        self._wakeup.set()
        return receive

    def unsubscribe(self, match_id: str, *, _quiet: bool = False) -> None:
        try:
            key = check_match_id(match_id)
        except ValueError:
            return  # never subscribed: subscribe() refuses such ids
        sub = self._subs.pop(key, None)
        if sub is None:
            return
        self._cache_written.pop(sub.match_id, None)
        sub.cancel_scope.cancel()
        sub.send.close()  # the receiver sees end-of-channel once it has taken what is buffered
        if not _quiet:
            log.info("feed_unsubscribe", match_id=sub.match_id)
        self._wakeup.set()

    # ------------------------------------------------------------------------------------------ the region

    def set_leading(self, leading: bool) -> None:
        """Poll SportMonks (the region's leader) or not (a follower: the cache reader serves the subscribers)."""
        if leading == self.leading:
            return
        self.leading = leading
        if not leading:
            self.set_region_matches({})
            self._latest, self._latest_at = None, -math.inf
            self._summary_last = None
        self._last_poll_at = -math.inf
        self._leading_changed.set()
        self._leading_changed = trio.Event()
        self._wakeup.set()

    def set_region_matches(self, wanted: Mapping[str, bool]) -> None:
        """The leader polls for every match of the region (``{match_id: marquee}``, from active-matches):
        those without a local subscriber get a remote subscription, whose fixtures only go to the cache."""
        for match_id, marquee in wanted.items():
            try:
                key = check_match_id(match_id)
            except ValueError:
                continue
            if key not in self._subs:
                send, receive = trio.open_memory_channel[FeedUpdate](0)
                self._subs[key] = _Subscription(key, marquee, send, receive, remote=True)
                self._wakeup.set()
        for key in [k for k, sub in self._subs.items() if sub.remote and k not in wanted]:
            self.unsubscribe(key, _quiet=True)

    def local_subscriptions(self) -> dict[str, bool]:
        """This instance's subscribers: ``{match_id: marquee}``."""
        return {k: self._is_marquee(sub) for k, sub in self._subs.items() if not sub.remote}

    def offer_cached(self, update: FeedUpdate) -> bool:
        """Hand a fixture the cache reader found to its local subscriber (a follower's path); False when
        nobody here subscribes to it any more."""
        sub = self._subs.get(update.match_id)
        if sub is None or sub.remote or self.is_released(update.match_id):
            return False
        if update.fixture is not None and self._admit(sub, update.fixture, trusted=True) in HELD:
            return True  # older than what this match was handed (a leader's change): not news
        sub.had_fixture = sub.had_fixture or update.fixture is not None
        sub.in_livescores = update.in_livescores
        sub.offer(update)
        return True

    async def livescores(self, *, max_age_s: float | None = None) -> list[dict[str, Any]]:
        """The latest valid ``/livescores`` fixtures, fetched now if older than ``max_age_s``
        (default: the livescores cadence). Raises ``SportMonksError`` when a needed fetch fails."""
        max_age = self.cadence_s() if max_age_s is None else max_age_s
        if not self.leading and self._leader_summary is not None:
            return await self._leader_summary.livescores(
                max_age, reread_after_s=self.cadence_for(marquee=False), adopt=self
            )
        if self._latest is not None and trio.current_time() - self._latest_at <= max_age:
            return list(self._latest.fixtures)
        return list((await self._refresh_livescores()).fixtures)

    @property
    def budget(self) -> CallBudget:
        """The SportMonks call record of this instance's client (the region's, while it leads)."""
        return self.client.budget

    def region_state(self, *, wall: float, now: float) -> dict[str, Any]:
        """What the leader hands on with each ``/livescores`` summary: the region's call record (as a renewal
        carries it, ``budget``/``budgetAt``) and the 404 verdicts (``notFound``: ids released and tries so
        far), so followers release those ids too and the next leader neither forgets calls made since the
        last renewal nor spends a 404 id's bound again."""
        return {
            "budget": self.client.budget.export(to_wall=wall - now),
            "budgetAt": wall,
            "notFound": self.not_found_state(to_wall=wall - now),
        }

    def not_found_state(self, *, to_wall: float) -> dict[str, dict[str, float]]:
        """The 404 verdicts the leader hands on with each ``/livescores`` summary: ids released (until when,
        wall clock; ``to_wall`` converts trio time) and the 404 tries so far of those not released yet."""
        now = trio.current_time()
        return {
            "released": {k: round(until + to_wall, 3) for k, until in self._released.items() if until > now},
            "tries": dict(self._not_found_tries),
        }

    def adopt_not_found(self, state: Mapping[str, Any] | None, *, to_wall: float) -> list[str]:
        """Take the leader's 404 verdicts (``not_found_state``'s shape) as this instance's: a released id is
        not taken here either, and a local subscriber to it gets the ``released`` update its match actor lets
        go on; tries count on from the leader's, so a new leader spends only what is left of the bound.
        Returns the ids newly released here. An unreadable entry is skipped, logged."""
        if not state:
            return []
        now = trio.current_time()
        newly: list[str] = []
        try:
            released = {str(k): float(v) - to_wall for k, v in dict(state.get("released") or {}).items()}
            tries = {str(k): int(v) for k, v in dict(state.get("tries") or {}).items()}
        except (TypeError, ValueError) as exc:
            log.warning("feed_not_found_state_unreadable", error=str(exc))
            return []
        if self.leading:  # taking over: what this instance counted itself counts too
            for match_id, n in tries.items():
                self._not_found_tries[match_id] = max(n, self._not_found_tries.get(match_id, 0))
        else:  # the leader's count is the region's (it forgets an id that answered since)
            self._not_found_tries = tries
        if (
            not self.leading and "released" in state
        ):  # the leader's verdicts are the region's (one it lifted too)
            for match_id in [k for k in self._released if k not in released]:
                del self._released[match_id]
                log.info("feed_release_lifted_by_leader", match_id=match_id)
        for match_id, until in released.items():
            if until <= now:
                continue
            was = self.is_released(match_id)
            self._released[match_id] = max(until, self._released.get(match_id, -math.inf))
            self._not_found_tries.pop(match_id, None)
            if was:
                continue
            newly.append(match_id)
            sub = self._subs.get(match_id)
            if sub is not None:
                sub.next_fixture_at = math.inf
                if not sub.remote:
                    log.warning("feed_fixture_released_by_leader", match_id=match_id)
                    message = f"fixture {match_id} released by the region's feed leader (404 on every try, or no play)"
                    sub.offer(
                        FeedUpdate(
                            match_id, None, time.time(), "fixture", False, error=message, released=True
                        )
                    )
        return newly

    def is_released(self, match_id: str) -> bool:
        """Whether ``match_id`` was released after repeated 404s and must not be taken again yet."""
        until = self._released.get(str(match_id))
        if until is None:
            return False
        if trio.current_time() >= until:
            del self._released[str(match_id)]
            return False
        return True

    @property
    def breaker_open(self) -> bool:
        return self.client.breaker.state == "open"

    def is_marquee_league(self, league_id: int | None) -> bool:
        return league_id is not None and league_id in self._marquee_leagues

    def backlog(self) -> dict[str, int]:
        """For the admin socket's ``runtime``: the subscriptions held (local and remote), the updates waiting in
        the local subscribers' channels and mailboxes, and the fixtures waiting to be written to the cache."""
        local = [sub for sub in self._subs.values() if not sub.remote]
        return {
            "feed_subscriptions": len(self._subs),
            "feed_subscriber_updates": sum(
                sub.receive.statistics().current_buffer_used + (sub.pending is not None) for sub in local
            ),
            "feed_cache_pending": len(self._cache_pending),
        }

    def stats(self) -> dict[str, Any]:
        """For the admin socket: calls, budget, breaker, cache and one line per subscriber."""
        now = trio.current_time()
        return {
            "calls": {endpoint: dict(per) for endpoint, per in self.client.calls.items()},
            "budget": self.client.budget.snapshot(),
            "breaker": self.client.breaker.state,
            "livescores_age_s": None if self._latest is None else round(now - self._latest_at, 3),
            "livescores_matches": 0 if self._latest is None else len(self._latest.fixtures),
            "livescores_with_balls": self._latest_with_balls,
            "cadence_s": self.cadence_s(),
            "plan": self.plan_view(),
            "endpoints": {
                e: {
                    "polls": dict(self.polls.get(e, {})),
                    "resting_s": round(max(0.0, self._resting.get(e, -math.inf) - now), 3),
                    "paced_s": round(max(0.0, self.pacer.ready_at(e) - now), 3),
                }
                for e in self.plan.endpoints
            },
            "last_endpoint": self._last_endpoint,
            "held": dict(self.held),
            "marquee_source": self.settings.marquee_source,
            "leading": self.leading,
            "cache": {
                "writes": self.cache_writes,
                "errors": self.cache_errors,
                "pending": len(self._cache_pending),
            },
            "subscribers": [
                {
                    "match_id": sub.match_id,
                    "remote": sub.remote,
                    "marquee": self._is_marquee(sub),
                    "in_livescores": sub.in_livescores,
                    "offered": sub.offered,
                    "delivered": sub.delivered,
                    "last_update_at": sub.last_update_at,
                    "last_error": sub.last_error,
                }
                for sub in self._subs.values()
            ],
        }

    # ------------------------------------------------------------------------------------------ scheduling

    def _is_marquee(self, sub: _Subscription) -> bool:
        return sub.marquee or self.is_marquee_league(sub.league_id)

    def _balls_via_livescores(self) -> bool:
        """Whether the live polls should carry balls: a marquee match is (or may be) live."""
        return self.settings.marquee_source == "livescores" and any(
            self._is_marquee(sub) and sub.in_livescores is not False for sub in self._subs.values()
        )

    def cadence_s(self) -> float:
        """The live poll period now: the marquee one while the polls carry balls."""
        return self.cadence_for(marquee=self._balls_via_livescores())

    def cadence_for(self, *, marquee: bool) -> float:
        """The live poll period while a marquee match is live, or while none is (configured, else the
        plan's)."""
        s = self.settings
        configured = s.marquee_cadence_s if marquee else s.livescores_cadence_s
        return configured or self.plan.cadence_s

    def fastest_cadence_s(self) -> float:
        """The shortest poll period the feed may use (what a match actor's routine hold is capped to)."""
        s = self.settings
        return min(x for x in (s.marquee_cadence_s, s.livescores_cadence_s, self.plan.cadence_s) if x)

    def plan_view(self) -> dict[str, Any]:
        """The plan and the cadences in use (the ``feed_plan`` log line at start, ``ctl feed``)."""
        s = self.settings
        return {
            **self.plan.describe(),
            "configured": {
                name: value
                for name, value in (
                    ("marquee_cadence_s", s.marquee_cadence_s),
                    ("livescores_cadence_s", s.livescores_cadence_s),
                )
                if value is not None
            },
            "in_use_s": {
                "marquee": round(self.cadence_for(marquee=True), 3),
                "plain": round(self.cadence_for(marquee=False), 3),
            },
        }

    def _fixture_cadence(self, sub: _Subscription) -> float | None:
        """How often this subscriber needs ``/fixtures/{id}``; None while a live list serves it."""
        if sub.in_livescores is False:
            return self.cadence_s() if under_way(sub.status) else self.settings.off_livescores_cadence_s
        if sub.in_livescores and self.settings.marquee_source == "fixture" and self._is_marquee(sub):
            return self.settings.marquee_cadence_s or self.plan.cadence_s
        return None

    def _next_poll(self, now: float) -> tuple[str | None, float]:
        """The endpoint the next live poll goes to, and when (``daemon.sportmonks.plan.next_poll``)."""
        endpoints = self.plan.endpoints
        return next_poll(
            now=now,
            last_poll_at=self._last_poll_at,
            cadence_s=self.cadence_s(),
            endpoints=endpoints,
            ready_at={e: self.pacer.ready_at(e) for e in endpoints},
            resting_until=self._resting,
            shares=self.plan.live_calls,
            made={e: self.polls.get(e, {}).get("ok", 0) for e in endpoints},
        )

    def _next_wake(self) -> float:
        if not self._subs:
            return math.inf
        times = [self._next_poll(trio.current_time())[1]]
        times += [
            sub.next_fixture_at for sub in self._subs.values() if self._fixture_cadence(sub) is not None
        ]
        return min(times)

    async def _poll_loop(self) -> None:
        while True:
            if not self.leading:
                await self._leading_changed.wait()
                continue
            now = trio.current_time()
            if self._subs and now >= self._next_poll(now)[1]:
                try:
                    await self._refresh_livescores()
                except SportMonksError:
                    pass  # already delivered as error updates and logged
            await self._fetch_due_fixtures()
            self._wakeup = trio.Event()
            with trio.move_on_at(self._next_wake()):
                await self._wakeup.wait()

    # ------------------------------------------------------------------------------------------ the live lists

    async def _refresh_livescores(self) -> LiveScores:
        """One live poll (or join the one in flight), then hand its fixtures to the subscribers."""
        if self._inflight is not None:
            flight = self._inflight
            await flight.done.wait()
            if flight.error is not None:
                raise flight.error
            assert flight.result is not None
            return flight.result
        flight = self._inflight = _Flight()
        with_balls = self._balls_via_livescores()
        try:
            result, endpoint = await self._poll_lists(with_balls)
        except SportMonksError as exc:
            flight.error = exc
            self._deliver_livescores_error(exc)
            raise
        except BaseException:
            flight.error = SportMonksError("the live poll was cancelled")
            raise
        finally:
            self._inflight = None
            flight.done.set()
        flight.result = result
        self._latest, self._latest_at, self._latest_with_balls = result, trio.current_time(), with_balls
        FEED_CADENCE.set(self.cadence_s())
        fetched_at = time.time()
        self._note_listed(result)
        self._lift_ghost_releases(result)
        self._distribute(result, fetched_at=fetched_at, endpoint=endpoint)
        self._cache_summary(result, fetched_at)
        return result

    async def _poll_lists(self, with_balls: bool) -> tuple[LiveScores, str]:
        """The live matches from the endpoint whose turn it is; on a failure, at once from the next one that
        is not resting (no poll is lost to a 429 or a slow answer). Raises the last error when none answers."""
        now = self._last_poll_at = trio.current_time()
        first, _ = self._next_poll(now)
        candidates = [] if first is None else [first]
        candidates += [
            e for e in self.plan.endpoints if e != first and self._resting.get(e, -math.inf) <= now
        ]
        error: SportMonksError = SportMonksError("every live endpoint is resting (429s or errors)")
        for n, endpoint in enumerate(candidates):
            try:
                result = await self._list_call(endpoint, with_balls)
            except SportMonksError as exc:
                error = exc
                self._rest(endpoint, exc)
                self._count_poll(endpoint, "failover" if n + 1 < len(candidates) else "failed")
                continue
            self._count_poll(endpoint, "ok")
            self._failing.pop(endpoint, None)
            self._last_endpoint = endpoint
            return result, endpoint
        raise error

    async def _list_call(self, endpoint: str, with_balls: bool) -> LiveScores:
        include = DEFAULT_FIXTURE_INCLUDE if with_balls else DEFAULT_LIVE_INCLUDE
        options: dict[str, Any] = {
            "budget_wait_s": 0,
            "fields": LIVE_FIELDS if self.settings.sparse_fields else None,
            "retries": 0,  # the other endpoint is the retry, at once
            "timeout_s": self.settings.poll_timeout_s,
        }
        return await self.client.live_list(endpoint, include, **options)

    def _rest(self, endpoint: str, exc: SportMonksError) -> None:
        """Leave a failed endpoint alone for a while: a 429 for its Retry-After, no room in the hour until
        there is; anything else (a 5xx, a timeout, a bad body) one cadence step, doubling with each failure
        in a row up to ``endpoint_rest_s``, so a blip costs a poll or two and an outage is not asked every
        round. An open circuit breaker is no failure of the endpoint: asking it costs nothing, so the next
        poll asks again (and is the first to go once it lets a trial call through)."""
        if isinstance(exc, BreakerOpen):
            return
        now = trio.current_time()
        failures = self._failing[endpoint] = self._failing.get(endpoint, 0) + 1
        backoff = backoff_delay(failures, base_s=self.cadence_s(), cap_s=self.settings.endpoint_rest_s)
        if isinstance(exc, SportMonksHTTPError) and exc.status == 429:
            wait = exc.retry_after if exc.retry_after is not None else backoff
        elif isinstance(exc, BudgetExhausted):
            wait = max(self.client.budget.wait_time(endpoint), self.cadence_s())
        else:
            wait = backoff
        self._resting[endpoint] = max(self._resting.get(endpoint, -math.inf), now + wait)
        log.warning("feed_endpoint_resting", endpoint=endpoint, rest_s=round(wait, 3), error=str(exc))

    def _count_poll(self, endpoint: str, outcome: str) -> None:
        FEED_POLLS.labels(endpoint, outcome).inc()
        per = self.polls.setdefault(endpoint, {})
        per[outcome] = per.get(outcome, 0) + 1

    def _admit(self, sub: _Subscription, fixture: Mapping[str, Any], *, trusted: bool = False) -> Verdict:
        """Pass a fixture through the subscription's gate (``daemon.cricket.order``); it goes on unless the
        verdict is in ``HELD``."""
        verdict: Verdict
        verdict, sub.gate = sub.gate.admit(mark_of_fixture(fixture), trusted=trusted)
        if verdict in HELD:
            self.held[verdict] = self.held.get(verdict, 0) + 1
            FEED_ANSWERS_HELD.labels(verdict).inc()
            return verdict
        status = fixture.get("status")
        sub.status = status if isinstance(status, str) else sub.status
        return verdict

    def _listed(self, sub: _Subscription, endpoint: str, shown: bool) -> None:
        """Record what a list's answer said about ``sub`` and whether a live list shows it now: the latest
        answer of each endpoint polled within a round (a resting endpoint's old answer does not count)."""
        now = trio.current_time()
        sub.listed[endpoint] = (shown, now)
        fresh = 2.5 * self.cadence_s() * max(1, len(self.plan.endpoints))
        said: list[bool | None] = []
        for e in self.plan.endpoints:
            if self._resting.get(e, -math.inf) > now:
                continue  # resting: its last answer is old news
            seen, at = sub.listed.get(e, (False, -math.inf))
            said.append(seen if now - at <= fresh else None)
        listed = any(said)
        if not listed and None in said:
            return  # an endpoint in use has not answered lately: wait for it before calling the match gone
        if listed and sub.in_livescores is False:
            log.info("feed_match_back_in_livescores", match_id=sub.match_id)
        elif not listed and sub.in_livescores is not False:
            # Left (or not yet in) the live lists: its own fixture now, for the final state or the play
            log.info(
                "feed_match_not_in_livescores",
                match_id=sub.match_id,
                was=sub.in_livescores,
                status=sub.status,
            )
            sub.next_fixture_at = now
        sub.in_livescores = listed

    def _deliver_livescores_error(self, exc: SportMonksError) -> None:
        level = log.info if isinstance(exc, BudgetExhausted) else log.warning
        level("feed_livescores_failed", error=str(exc), subscribers=len(self._subs))
        wall = time.time()
        for sub in self._subs.values():
            if self._fixture_cadence(sub) is None:
                sub.offer(FeedUpdate(sub.match_id, None, wall, "livescores", True, error=str(exc)))

    def _distribute(self, result: LiveScores, *, fetched_at: float, endpoint: str) -> None:
        source = "livescores" if endpoint == "livescores" else "fixtures"
        by_id = {str(fixture["id"]): fixture for fixture in result.fixtures}
        for key, invalid in result.invalid.items():
            log.warning("feed_malformed_fixture", match_id=key, error=str(invalid), endpoint=endpoint)
        for sub in list(self._subs.values()):
            if self.is_released(sub.match_id):
                continue  # listed, yet SportMonks answered 404 for it on every try: nothing goes to it
            problem = result.invalid.get(sub.match_id)
            if problem is not None:
                self._listed(sub, endpoint, True)
                sub.offer(FeedUpdate(sub.match_id, None, fetched_at, source, True, error=str(problem)))
                continue
            fixture = by_id.get(sub.match_id)
            if fixture is None:
                self._listed(sub, endpoint, False)
                continue
            league = fixture.get("league_id")
            sub.league_id = league if isinstance(league, int) else None
            marquee = self._is_marquee(sub)
            if marquee and self.settings.marquee_source == "fixture":
                self._listed(sub, endpoint, True)
                continue  # its ball-by-ball fixture comes from /fixtures/{id}; here it only proved it is live
            if not marquee and self.settings.strip_balls_for_non_marquee:
                fixture = without_balls(fixture)
            verdict = self._admit(sub, fixture)
            # an answer behind what the match was handed does not show it live now (it may have ended)
            self._listed(sub, endpoint, verdict != "behind")
            if verdict in HELD:
                continue
            if self._judge_ghost(sub, fixture, listed=True) == math.inf:
                continue  # released as a ghost just now (a suspect still goes to its match: it may be about to play)
            sub.had_fixture = True
            update = FeedUpdate(sub.match_id, fixture, fetched_at, source, True)
            sub.offer(update)
            self._cache_put(update)

    # ------------------------------------------------------------------------------------------ /fixtures/{id}

    async def _fetch_due_fixtures(self) -> None:
        now = trio.current_time()
        due = [
            sub
            for sub in self._subs.values()
            if self._fixture_cadence(sub) is not None
            and sub.next_fixture_at <= now
            and not self.is_released(sub.match_id)
        ]
        if not due:
            return
        limiter = trio.CapacityLimiter(self.settings.fixture_fetch_concurrency)
        async with trio.open_nursery() as nursery:
            for sub in due:
                nursery.start_soon(self._fetch_fixture, sub, limiter)

    async def _fetch_fixture(self, sub: _Subscription, limiter: trio.CapacityLimiter) -> None:
        cadence = self._fixture_cadence(sub)
        if cadence is None:
            return
        now = trio.current_time()
        paced = self.pacer.ready_at("fixtures")
        if paced > now:  # the endpoint's hour is being spent faster than it refills: read it when it allows
            sub.next_fixture_at = paced
            return
        # Scheduled before the call, so a slow answer does not trigger a second fetch.
        sub.next_fixture_at = now + cadence
        marquee = self._is_marquee(sub)
        in_livescores = bool(sub.in_livescores)
        include = DEFAULT_FIXTURE_INCLUDE if marquee else DEFAULT_LIVE_INCLUDE
        async with limiter:
            try:
                fixture = await self.client.fixture(
                    sub.match_id,
                    include,
                    budget_wait_s=0,
                    fields=LIVE_FIELDS if self.settings.sparse_fields else None,
                    retries=0,  # read again at its cadence
                    timeout_s=self.settings.poll_timeout_s,
                )
            except BudgetExhausted as exc:
                log.info("feed_fixture_skipped", match_id=sub.match_id, error=str(exc))
                self._retry_first_fixture_soon(sub)
                return  # no data this time, nothing wrong with the match: try at the next slot
            except SportMonksHTTPError as exc:
                if exc.status == 404:
                    self._not_found(sub, exc)
                    return
                self._fixture_failed(sub, in_livescores, exc)
                return
            except SportMonksError as exc:
                self._fixture_failed(sub, in_livescores, exc)
                return
        if self._subs.get(sub.match_id) is not sub:
            return  # unsubscribed while the call was out
        self._not_found_tries.pop(sub.match_id, None)
        if self._admit(sub, fixture) in HELD:
            return  # older than what a live list already handed on, or a change still to be confirmed
        after = self._fixture_cadence(sub)  # the answer may say it is over: read it at that pace from now
        if after is not None:
            sub.next_fixture_at = max(sub.next_fixture_at, now + after)
        retry = self._judge_ghost(sub, fixture, listed=in_livescores)
        if retry is not None:
            if math.isinf(retry):
                return  # released as a ghost
            sub.next_fixture_at = max(sub.next_fixture_at, trio.current_time() + retry)
        sub.had_fixture = True
        update = FeedUpdate(sub.match_id, fixture, time.time(), "fixture", in_livescores)
        sub.offer(update)
        self._cache_put(update)

    def _fixture_failed(self, sub: _Subscription, in_livescores: bool, exc: SportMonksError) -> None:
        log.warning("feed_fixture_failed", match_id=sub.match_id, error=str(exc))
        if self._subs.get(sub.match_id) is sub:
            sub.offer(FeedUpdate(sub.match_id, None, time.time(), "fixture", in_livescores, error=str(exc)))
        self._retry_first_fixture_soon(sub)

    def _not_found(self, sub: _Subscription, exc: SportMonksHTTPError) -> None:
        """A 404 for a subscribed fixture: try again after a doubling backoff, and after
        ``not_found_max_tries`` in a row release it (an id /livescores showed that SportMonks does not know).
        The count is kept per match id, so a match actor that subscribes again does not start it over."""
        s = self.settings
        tries = self._not_found_tries[sub.match_id] = self._not_found_tries.get(sub.match_id, 0) + 1
        self._republish_summary()  # the try counts region-wide from now, whoever leads next
        if self._subs.get(sub.match_id) is not sub:
            return
        if tries < s.not_found_max_tries:
            delay = backoff_delay(tries, base_s=s.not_found_backoff_s, cap_s=math.inf)  # tries are bounded
            sub.next_fixture_at = trio.current_time() + delay
            log.warning("feed_fixture_not_found", match_id=sub.match_id, tries=tries, retry_in_s=delay)
            sub.offer(FeedUpdate(sub.match_id, None, time.time(), "fixture", False, error=str(exc)))
            return
        del self._not_found_tries[sub.match_id]
        self._release(
            sub, f"fixture {sub.match_id} answered 404 {tries} times in a row: released", tries=tries
        )

    def _release(self, sub: _Subscription, message: str, **why: Any) -> None:
        """No more calls for ``sub``'s fixture, not taken again for ``not_found_release_s`` (region-wide: the
        verdict goes out with the summary), and a last ``released`` update its match actor lets go on."""
        s = self.settings
        self._released[sub.match_id] = trio.current_time() + s.not_found_release_s
        sub.next_fixture_at = math.inf  # no more calls for it, whatever the subscriber does next
        log.warning(
            "feed_fixture_released",
            match_id=sub.match_id,
            reason=message,
            not_taken_again_for_s=s.not_found_release_s,
            **why,
        )
        self._republish_summary()
        sub.offer(FeedUpdate(sub.match_id, None, time.time(), "fixture", False, error=message, released=True))

    def _judge_ghost(self, sub: _Subscription, fixture: Mapping[str, Any], *, listed: bool) -> float | None:
        """One more look at a fixture for ``daemon.sportmonks.ghost``: None when it shows play or its wait is
        explained, the backoff before its next ``/fixtures/{id}`` call while it is under suspicion, or inf
        once it has been released as a ghost (the subscriber got its ``released`` update)."""
        if played(fixture):  # the common case, every tick of a live match: nothing to remember
            self._ghosts.pop(sub.match_id, None)
            return None
        watch, verdict = judge(
            self._ghosts.get(sub.match_id),
            sighting(fixture, listed=listed or sub.match_id in self._seen_listed),
            now=trio.current_time(),
            wall=time.time(),
            rule=self._ghost_rule,
        )
        if watch is None:
            self._ghosts.pop(sub.match_id, None)
        else:
            if sub.match_id not in self._ghosts:
                log.info("feed_fixture_blank", match_id=sub.match_id, reason=verdict.reason)
            self._ghosts[sub.match_id] = watch
        if verdict.kind == "release":
            self._ghost_released.add(sub.match_id)
            self._release(sub, f"fixture {sub.match_id}: {verdict.reason}: released")
            return math.inf
        if verdict.kind == "suspect":
            return verdict.retry_in_s
        return None

    def _note_listed(self, result: LiveScores) -> None:
        """Remember which ids /livescores listed (for a day), subscribed or not: the orchestrator may take an id
        only after a short listing ended, and the ghost rule must still know it was listed."""
        now = trio.current_time()
        for fixture in result.fixtures:
            self._seen_listed[str(fixture.get("id"))] = now
        if len(self._seen_listed) > 1000 or now - min(self._seen_listed.values(), default=now) > 86400:
            self._seen_listed = {k: t for k, t in self._seen_listed.items() if now - t <= 86400}

    def _lift_ghost_releases(self, result: LiveScores) -> None:
        """A fixture released as a ghost that ``/livescores`` now shows with play is a real match after all:
        released no more, so the orchestrator takes it at once."""
        if not self._ghost_released:
            return
        for fixture in result.fixtures:
            match_id = str(fixture.get("id"))
            if match_id in self._ghost_released and played(fixture):
                self._ghost_released.discard(match_id)
                if self._released.pop(match_id, None) is not None:
                    log.warning("feed_release_lifted", match_id=match_id, reason="play shown in /livescores")
                    self._republish_summary()
        self._ghost_released &= set(self._released)

    def _retry_first_fixture_soon(self, sub: _Subscription) -> None:
        """A subscriber that never had a good fixture retries at the livescores cadence, not every 30 s: its
        first look must be the pre-match state, or the first balls it sees would be taken as history."""
        if not sub.had_fixture:
            sub.next_fixture_at = min(sub.next_fixture_at, trio.current_time() + self.cadence_s())

    # ------------------------------------------------------------------------------------------ forwarding

    def _start_forwarder(self, sub: _Subscription) -> None:
        assert self._nursery is not None
        sub.cancel_scope = trio.CancelScope()
        self._nursery.start_soon(self._forward, sub, sub.cancel_scope)

    async def _forward(self, sub: _Subscription, scope: trio.CancelScope) -> None:
        """Move the mailbox's newest update into the channel; the only place that may wait on a subscriber."""
        with scope:
            try:
                while True:
                    await sub.wake.wait()
                    sub.wake = trio.Event()
                    update, sub.pending = sub.pending, None
                    if update is None:
                        continue
                    await sub.send.send(update)
                    sub.delivered += 1
            except trio.ClosedResourceError:
                pass  # unsubscribed
            except trio.BrokenResourceError:
                # The match actor closed its end: treat it as an unsubscribe.
                if self._subs.get(sub.match_id) is sub:
                    del self._subs[sub.match_id]
                    log.info("feed_subscriber_gone", match_id=sub.match_id)

    # ------------------------------------------------------------------------------------------ cache

    def _cache_put(self, update: FeedUpdate) -> None:
        if self._cache is None:
            return
        self._cache_pending[update.match_id] = update
        self._cache_wake.set()

    def _cache_summary(self, result: LiveScores, fetched_at: float) -> None:
        """The answer in short for the instances that do not lead (their orchestrators)."""
        if self._cache is None:
            return
        keep = ("id", "status", "league_id", "starting_at", "localteam_id", "visitorteam_id")
        summary = [{k: f.get(k) for k in keep if k in f} for f in result.fixtures]
        self._summary_pending = self._summary_last = (summary, fetched_at)
        self._cache_wake.set()

    def _republish_summary(self) -> None:
        """Write the last summary again (it carries the 404 verdicts and the call record, see
        ``FencedFixtureCache.put_poll``) without waiting for the next ``/livescores``."""
        if self._summary_last is not None and self._summary_pending is None:
            self._summary_pending = self._summary_last
            self._cache_wake.set()

    async def _cache_writer(self) -> None:
        """Writes what the polls left pending: a poll's changed fixtures with its summary, in one call (one
        transaction when it fits), so a follower that sees a summary (its ``fetchedAt`` marks the poll) also
        sees every fixture that poll changed."""
        assert self._cache is not None
        while True:
            await self._cache_wake.wait()
            self._cache_wake = trio.Event()
            summary, self._summary_pending = self._summary_pending, None
            puts = self._pending_puts()
            if puts or summary is not None:
                await self._cache_write(puts, summary)

    def _pending_puts(self) -> list[CachePut]:
        """The fixtures the polls left pending, less those unchanged since written (while the stored copy is
        far from expiring)."""
        puts: list[CachePut] = []
        now = trio.current_time()
        pending, self._cache_pending = self._cache_pending, {}
        for match_id, update in pending.items():
            fixture = update.fixture
            assert fixture is not None
            ttl = cache_ttl_s(fixture, self.settings)
            last = self._cache_written.get(match_id)
            if last is not None and last[1] + ttl / 2 > now and last[0] == fixture:
                continue
            puts.append(
                CachePut(match_id, fixture, ttl, update.fetched_at, update.source, update.in_livescores)
            )
        return puts

    async def _cache_write(
        self, puts: list[CachePut], summary: tuple[list[dict[str, Any]], float] | None
    ) -> None:
        """One write to the cache; best effort: a failure is counted and logged, and the feed goes on (the
        next poll writes the fixtures as they stand then)."""
        assert self._cache is not None
        poll = None
        if summary is not None:
            state = self.region_state(wall=time.time(), now=trio.current_time())
            poll = PollSummary(summary[0], summary[1], state)
        try:
            await self._cache.put_poll(puts, poll)
        except Exception as exc:  # noqa: BLE001 - the cache is best effort; the feed must go on
            self.cache_errors += 1
            log.warning(
                "feed_cache_write_failed",
                matches=[p.match_id for p in puts],
                summary=summary is not None,
                error=f"{type(exc).__name__}: {exc}",
            )
            return
        self.cache_writes += len(puts)
        now = trio.current_time()
        for put in puts:
            if put.match_id in self._subs:
                self._cache_written[put.match_id] = (put.fixture, now)
