"""The orchestrator: which matches are live, who takes them, crash recovery and takeover.

Every ``cycle_s`` (and at start-up) it gathers the matches that should be live (``/livescores`` through the
feed, the fixtures starting within ``prestart_s`` or under way, ``active-matches``), and every
``takeover_check_s`` it looks for records whose lock ran out. Taking a match: its lock (free, run out, or
already this process's), then the record registered, claimed from a dead owner (a new ``ownerEpoch``) or
reopened after a wrong end, then its actor started under the supervisor; a match whose actor keeps crashing
is quarantined for ``quarantine_s``. An ended match's follows are removed once its end has stood
``follows_grace_s``. It owns none of a match's work: the match actor does. docs/operations.md ("Ownership
across instances") and docs/delivery.md have the rules and why.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any

import trio

from actors.jobs.convert import iso_utc
from actors.lease import HeldLease, LeaseLost
from actors.match import MatchActor
from actors.ports import LiveFeed, OrchestratorStore, Supervision
from actors.settings import OrchestratorSettings
from daemon.logs import get_logger
from daemon.metrics import MATCH_OWNER_EPOCH, MATCH_WANTED, OWNED_MATCHES, TAKEOVERS, forget_match
from daemon.store.locks import match_lock_key

log = get_logger("orchestrator")

# Statuses a /livescores entry can carry that mean "nothing to process now".
NOT_LIVE_STATUSES = frozenset({"Finished", "Cancl.", "Aban.", "Postp.", "NS"})


class Orchestrator:
    def __init__(
        self,
        *,
        instance_id: str,
        repos: OrchestratorStore,
        feed: LiveFeed,
        supervisor: Supervision,
        actor_factory: Callable[[str, int, bool], MatchActor],
        settings: OrchestratorSettings,
        marquee_leagues: Collection[int | str] = (),
        takeover_check_s: float | None = None,
        quarantine_s: float = 600.0,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.instance_id = instance_id
        self._repos = repos
        self._feed = feed
        self._supervisor = supervisor
        self._factory = actor_factory
        self.settings = settings
        self._marquee = {str(x) for x in marquee_leagues}
        self.takeover_check_s = takeover_check_s or min(settings.cycle_s, settings.lease_s / 2)
        self._quarantine_s = quarantine_s
        self._quarantined: dict[str, float] = {}
        self._now = wall_clock
        self.draining = False
        self.owned: set[str] = set()
        self.cycles = 0
        self.last_cycle_at: float | None = None
        self.last_cycle_error: str | None = None
        self._wake = trio.Event()
        self._locks: dict[str, HeldLease] = {}  # the lock taken for each owned match, released on its exit
        self._live_now: set[str] = set()  # ids the latest /livescores answer shows in play

    # ------------------------------------------------------------------ loops
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self._safe_cycle(full=True)  # start-up recovery before we call ourselves ready
        task_status.started()
        next_full = trio.current_time() + self.settings.cycle_s
        while not self.draining:
            with trio.move_on_after(self.takeover_check_s):
                await self._wake.wait()
            self._wake = trio.Event()
            full = trio.current_time() >= next_full
            if full:
                next_full = trio.current_time() + self.settings.cycle_s
            await self._safe_cycle(full=full)

    def poke(self) -> None:
        """Run a full cycle now (admin, tests)."""
        self._wake.set()

    async def _safe_cycle(self, *, full: bool) -> None:
        try:
            await self.cycle(full=full)
            self.last_cycle_error = None
        except Exception as exc:  # one bad cycle (DynamoDB or SportMonks down) must not stop the loop
            self.last_cycle_error = repr(exc)
            log.warning("orchestrator_cycle_failed", error=repr(exc), full=full)

    async def cycle(self, *, full: bool = True) -> None:
        if self.draining:
            return
        candidates: dict[str, str | None] = {}  # match id -> league id
        active = await self._repos.active_matches.get_all_active_matches()
        for item in active:
            if item.get("status") == "active":
                candidates[str(item["matchId"])] = _str_or_none(item.get("leagueId"))
        if full:
            await self._from_livescores(candidates)
            await self._from_fixtures(candidates)
            _export_wanted(candidates)
            await self._remove_follows_after_grace(active)
        for match_id, league_id in candidates.items():
            if self.draining or len(self.owned) >= self.settings.max_matches:
                break
            if match_id in self.owned or self._is_quarantined(match_id) or self._released(match_id):
                continue
            try:
                await self.try_take(match_id, league_id)
            except Exception as exc:
                log.warning("take_failed", match_id=match_id, error=repr(exc))
        self.cycles += 1
        self.last_cycle_at = self._now()

    async def _from_livescores(self, candidates: dict[str, str | None]) -> None:
        try:
            live = await self._feed.livescores()
        except Exception as exc:
            log.warning("livescores_unavailable", error=repr(exc))
            return
        live_now: set[str] = set()
        for fixture in live:
            if fixture.get("status") in NOT_LIVE_STATUSES:
                continue
            match_id = str(fixture["id"])
            live_now.add(match_id)
            if self._released(match_id):
                continue  # released by the feed (404 on every try, or no play at all): not taken
            candidates.setdefault(match_id, _str_or_none(fixture.get("league_id")))
        self._live_now = live_now

    async def _from_fixtures(self, candidates: dict[str, str | None]) -> None:
        try:
            leagues = await self._repos.leagues.get_active_leagues()
        except Exception as exc:
            log.warning("active_leagues_unavailable", error=repr(exc))
            return
        now = self._now()
        start = iso_utc(now - self.settings.fixture_lookback_s)
        end = iso_utc(now + self.settings.prestart_s)
        soon = iso_utc(now + self.settings.prestart_s)
        live = set(self.settings.live_statuses)
        for league in leagues:
            code = league.get("code")
            if not code:
                continue
            try:
                fixtures = await self._repos.fixtures.get_matches_by_date_range(code, start, end)
            except Exception as exc:
                log.warning("fixtures_query_failed", league=code, error=repr(exc))
                continue
            for item in fixtures:
                status = item.get("status")
                upcoming = status == "NS" and str(item.get("startTime", "")) <= soon
                if (status in live or upcoming) and not item.get("archivedAt"):
                    candidates.setdefault(str(item["matchId"]), _str_or_none(item.get("leagueId")))

    # ------------------------------------------------------------------ ended matches
    async def _remove_follows_after_grace(self, records: list[dict[str, Any]]) -> None:
        """Remove the follows of ended matches whose end stood ``follows_grace_s`` (see the module doc)."""
        cutoff = self._now() - self.settings.follows_grace_s
        for item in records:
            match_id, ended_at = str(item["matchId"]), item.get("endedAt")
            if (
                self.draining
                or item.get("status") != "ended"
                or item.get("followsRemovedAt")
                or not isinstance(ended_at, str)
                or _epoch(ended_at) > cutoff
                or match_id in self._live_now
                or match_id in self.owned
            ):
                continue
            try:
                await self._remove_follows(match_id, ended_at)
            except Exception as exc:  # tried again next cycle; the follows' own TTL is the last resort
                log.warning("follows_removal_failed", match_id=match_id, error=repr(exc))

    async def _remove_follows(self, match_id: str, ended_at: str) -> None:
        lock = await self._take_lock(match_id)
        if lock is None:
            return  # someone is taking it (reopening) or removing them: not ours to do now
        try:
            item = await self._repos.active_matches.get_active_match_state(match_id)
            if item is None or item.get("status") != "ended" or item.get("endedAt") != ended_at:
                return
            removed = await self._repos.follows.remove_all_follows_for_match(match_id)
            await self._repos.active_matches.mark_follows_removed(match_id, ended_at)
            log.info("follows_removed_after_grace", match_id=match_id, follows=removed, ended_at=ended_at)
        finally:
            await lock.release()

    # ------------------------------------------------------------------ taking a match
    async def try_take(self, match_id: str, league_id: str | None) -> bool:
        lock = await self._take_lock(match_id)
        if lock is None:
            return False
        started = False
        try:
            epoch = await self._register_or_claim(match_id, league_id)
            if epoch is None:
                return False
            item = await self._repos.active_matches.get_active_match_state(match_id)
            league = league_id or _str_or_none((item or {}).get("leagueId"))
            marquee = league is not None and league in self._marquee
            # Owned before the actor starts: an actor that ends before start() returns (it crashed past its
            # restarts at once) has already run _on_exit, which must find it (and its lock) here.
            self.owned.add(match_id)
            self._locks[match_id] = lock
            try:
                await self._supervisor.start(
                    f"match:{match_id}",
                    lambda: self._factory(match_id, epoch, marquee),
                    kind="match",
                    normal_exits=(LeaseLost,),
                    on_give_up=self._give_up,
                    on_exit=self._on_exit,
                )
            except BaseException:
                self.owned.discard(match_id)
                self._locks.pop(match_id, None)
                raise
            started = True
            OWNED_MATCHES.set(len(self.owned))
            MATCH_OWNER_EPOCH.labels(match_id).set(epoch)
            log.info("match_taken", match_id=match_id, epoch=epoch, marquee=marquee)
            return True
        finally:
            if not started:
                await lock.release()

    async def _register_or_claim(self, match_id: str, league_id: str | None) -> int | None:
        repo = self._repos.active_matches
        item = await repo.get_active_match_state(match_id)
        if item is not None and item.get("status") == "ended":
            if match_id not in self._live_now:
                return None
            # Ended, yet SportMonks shows it in play: ended on a glitch. Take it again, state and all.
            epoch = await repo.reopen_ended_match(match_id, self.instance_id)
            if epoch is not None:
                log.warning("match_reopened", match_id=match_id, epoch=epoch)
            return epoch
        if item is None or item.get("status") == "idle":
            fields = {"leagueId": league_id} if league_id else None
            if await repo.register_active_match(match_id, self.instance_id, fields=fields):
                return 1
        # An active record: its owner died, was paused past its lease, or released it at shutdown.
        epoch = await repo.claim_active_match(match_id, self.instance_id)
        if epoch is None:
            return None
        TAKEOVERS.inc()
        return int(epoch)

    async def _take_lock(self, match_id: str) -> HeldLease | None:
        """The match's lock, if it is free, run out or already this process's (the actor then renews it as its
        lease); None when another instance holds it."""
        lock = HeldLease(
            self._repos.locks,
            match_lock_key(match_id),
            self.instance_id,
            lease_s=self.settings.lease_s,
            renew_every_s=self.settings.renew_every_s,
            clock_skew_bound_s=self.settings.clock_skew_bound_s,
            wall_clock=self._now,
        )
        await lock.acquire()
        return lock if lock.held else None

    async def _on_exit(self, name: str) -> None:
        match_id = name.split(":", 1)[1]
        self.owned.discard(match_id)
        OWNED_MATCHES.set(len(self.owned))
        forget_match(match_id)  # its epoch, ticks, channels and sessions series go with it
        # Whatever ended the actor (match end, lost lease, give-up, shutdown), a lock still ours is released so
        # another instance can take over at once (``HeldLease.release``: bounded, and conditional on the owner
        # and epoch taken, so it is harmless when the lock has moved on). An actor restarted after its lease
        # ran out took the lock at a new epoch: that one runs out on its own.
        lock = self._locks.pop(match_id, None)
        if lock is not None:
            await lock.release()

    async def _give_up(self, name: str, exc: BaseException) -> None:
        match_id = name.split(":", 1)[1]
        self._quarantined[match_id] = trio.current_time() + self._quarantine_s
        log.error("match_released_after_repeated_crashes", match_id=match_id, error=repr(exc))

    def _released(self, match_id: str) -> bool:
        """The feed released it after repeated 404s: not taken from any source until the feed says so."""
        return self._feed.is_released(match_id)

    def _is_quarantined(self, match_id: str) -> bool:
        until = self._quarantined.get(match_id)
        if until is None:
            return False
        if trio.current_time() >= until:
            del self._quarantined[match_id]
            return False
        return True

    # ------------------------------------------------------------------ drain and shutdown
    async def drain(self) -> None:
        """Stop taking matches and hand every owned match over (its lock released at once)."""
        self.draining = True
        self._wake.set()
        async with trio.open_nursery() as nursery:  # together: each may wait on its lock's release
            for match_id in list(self.owned):
                nursery.start_soon(self._supervisor.stop_and_wait, f"match:{match_id}")

    def actors(self) -> dict[str, MatchActor]:
        out: dict[str, MatchActor] = {}
        for match_id in self.owned:
            actor = self._supervisor.actor(f"match:{match_id}")
            if isinstance(actor, MatchActor):
                out[match_id] = actor
        return out


def _export_wanted(candidates: Collection[str]) -> None:
    """``sightscreen_match_wanted``: exactly the matches this full cycle found should be processed now.

    Cleared and refilled with no await in between, so a scrape never sees half a set."""
    MATCH_WANTED.clear()
    for match_id in candidates:
        MATCH_WANTED.labels(match_id).set(1)


def _epoch(text: str) -> float:
    """Epoch seconds of an ISO-8601 stamp (``endedAt``); +inf when unreadable, so nothing acts on it."""
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return math.inf
    return parsed.timestamp() if parsed.tzinfo else math.inf


def _str_or_none(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)
