"""PrematchNotifier: followers of a match about to start get one "starting soon" alert (and a push-to-start).

Owns the prematch job, its pure decision core (``decide``, ``due_matches``, ``settled_hold_s``...), its
payloads, and the prematch marker on ``cricket-match-follows`` items (written only through
``MatchFollowRepository``'s ``*_prematch`` methods). It reads fixtures, leagues, teams and devices and writes
nothing else but the cleanup of tokens APNs rejected and the followers' push-to-start claims it shares with
the match's owner. What it guarantees, and how: docs/delivery.md, "Prematch notifications".
"""

from __future__ import annotations

import enum
import hashlib
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from actors.janitor import TokenRef
from actors.jobs.convert import TERMINAL_STATUSES, epoch_of, iso_utc
from actors.jobs.reference_sync import LeagueDirectory
from actors.jobs.settings import PrematchSettings
from actors.livework import LiveWork, Pace
from actors.ports import PrematchStores, PushSender
from daemon import metrics
from daemon.apns.rules import Resend, resend
from daemon.apns.types import Push, PushResult
from daemon.backoff import backoff_delay
from daemon.cricket.display import NEUTRAL, build_display
from daemon.cricket.payloads import (
    TeamRef,
    activity_attributes,
    alert_payload,
    start_payload,
    supports_channels,
)
from daemon.cricket.snapshot import snapshot_from_fixture
from daemon.logs import get_logger, short_token
from daemon.store.follows import PREMATCH_CLAIMED, PREMATCH_SENT
from daemon.store.locks import prematch_lock_key

log = get_logger("jobs.prematch")

JOB = "prematch"
COLLAPSE_ID_MAX = 64  # bytes, APNs (spec apns.md: BadCollapseId above it)

STATE_CLAIMED = PREMATCH_CLAIMED
STATE_SENT = PREMATCH_SENT


# --- the pure core -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Marker:
    """The prematch marker of one follow item, as read."""

    start_iso: str
    start_epoch: float | None
    state: str
    claimed_ms: int | None
    expires_at: float | None

    @classmethod
    def of(cls, follow: Mapping[str, Any]) -> Marker | None:
        start_iso = follow.get("prematchFor")
        if not isinstance(start_iso, str) or not start_iso:
            return None
        claimed = _number(follow.get("prematchClaimedMs"))
        return cls(
            start_iso=start_iso,
            start_epoch=_number(follow.get("prematchStart")),
            state=str(follow.get("prematchState") or STATE_SENT),
            claimed_ms=None if claimed is None else int(claimed),
            expires_at=_number(follow.get("prematchExpiresAt")),
        )


class Decision(enum.Enum):
    NOTIFY = "notify"  # no live marker for this start time: claim and send alert (+ push-to-start)
    RESEND = "resend"  # a claim never confirmed and its lease is over: take it over, send the alert again
    DONE = "done"  # notified for this start time already
    IN_FLIGHT = "in_flight"  # claimed moments ago (by us or another instance): leave it alone


def decide(marker: Marker | None, *, start_epoch: float, now: float, settings: PrematchSettings) -> Decision:
    """What to do for one follower. ``MatchFollowRepository.claim_prematch`` enforces the same rule in DynamoDB."""
    if marker is None or marker.start_epoch is None:
        return Decision.NOTIFY
    if marker.expires_at is not None and marker.expires_at <= now:
        return Decision.NOTIFY
    if abs(marker.start_epoch - start_epoch) > settings.restart_notify_threshold_s:
        return Decision.NOTIFY
    if marker.state == STATE_SENT:
        return Decision.DONE
    if marker.claimed_ms is None or marker.claimed_ms / 1000 + settings.claim_lease_s <= now:
        return Decision.RESEND
    return Decision.IN_FLIGHT


def marker_expiry(start_epoch: float, settings: PrematchSettings) -> int:
    return int(start_epoch + settings.catch_up_s + settings.marker_grace_s)


@dataclass(frozen=True)
class DueMatch:
    match_id: str
    start_iso: str
    start_epoch: float
    league_code: str | None
    fixture: Mapping[str, Any]


def due_matches(
    fixtures: Sequence[Mapping[str, Any]], *, now: float, settings: PrematchSettings
) -> list[DueMatch]:
    """The fixtures whose followers should hear about them now: within the league's window ahead, or started
    at most ``catch_up_s`` ago, and not over (finished, abandoned, cancelled, postponed)."""
    due: dict[str, DueMatch] = {}
    for fx in fixtures:
        match_id, start_iso = fx.get("matchId"), fx.get("startTime")
        if not isinstance(match_id, str) or not isinstance(start_iso, str):
            continue
        try:
            start = epoch_of(start_iso)
        except ValueError:
            log.warning("prematch_bad_start_time", match_id=match_id, start_time=start_iso)
            continue
        if fx.get("status") in TERMINAL_STATUSES:
            continue
        code = fx.get("leagueCode") if isinstance(fx.get("leagueCode"), str) else None
        if not (now - settings.catch_up_s <= start <= now + settings.window_for(code)):
            continue
        due[match_id] = DueMatch(match_id, start_iso, start, code, fx)
    return sorted(due.values(), key=lambda d: (d.start_epoch, d.match_id))


def collapse_id(match_id: str, start_iso: str) -> str:
    """``prematch:{matchId}:{startTime}``: the same for every send of one notification, so repeats collapse."""
    cid = f"prematch:{match_id}:{start_iso}"
    if len(cid.encode()) <= COLLAPSE_ID_MAX:
        return cid
    return "prematch:" + hashlib.sha256(cid.encode()).hexdigest()[:40]


def prematch_text(
    fixture: Mapping[str, Any], teams: Mapping[str, Mapping[str, Any]], *, start_epoch: float, now: float
) -> tuple[str, str]:
    """Title and body of the alert ("Pakistan v Sri Lanka", "1st T20I starts in 25 min")."""

    def name(key: str, fallback: str) -> str:
        team = teams.get(str(fixture.get(key) or ""))
        return str(team.get("name")) if team and team.get("name") else fallback

    title = f"{name('localteamId', 'Home')} v {name('visitorteamId', 'Away')}"
    what = fixture.get("round") or fixture.get("type") or "Your match"
    delta = start_epoch - now
    if delta >= 90:
        body = f"{what} starts in {round(delta / 60)} min"
    elif delta >= -90:
        body = f"{what} is starting now"
    else:
        body = f"{what} started {round(-delta / 60)} min ago"
    return title, body


class UnfollowedMemo:
    """Matches nobody followed when we looked, with a backoff: the next look is ``first_delay_s``
    later, then twice that, and so on, never past the match's window. A follower who comes late is still
    found, at a few reads per window instead of one a minute. Bounded LRU.

    Before the start the wait is also at most half the time left (and never under ``floor_s``, the job's
    cycle): the looks close in on the start, so a first follower who comes inside the window is noticed
    before the match starts (one who follows 14 min before is found about 7 min before), at a handful more
    reads per match."""

    def __init__(self, max_size: int, first_delay_s: float = 300.0, floor_s: float = 0.0) -> None:
        self._max = max_size
        self._first_delay = first_delay_s
        self._floor = floor_s
        # (match, start) -> (look again at, window end, current delay)
        self._entries: OrderedDict[tuple[str, str], tuple[float, float, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def remember(
        self, match_id: str, start_iso: str, *, now: float, window_end: float, start: float | None = None
    ) -> float:
        """Nobody follows it at ``now``; returns when to look again."""
        key = (match_id, start_iso)
        if self._max <= 0:
            return now
        previous = self._entries.get(key)
        delay = self._first_delay if previous is None else previous[2] * 2
        again = min(now + delay, window_end)
        if start is not None and now < start:
            again = min(again, now + max(self._floor, (start - now) / 2))
        self._entries[key] = (again, window_end, delay)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)
        return again

    def knows(self, match_id: str, start_iso: str, *, now: float) -> bool:
        """True while the match is known to have no follower and it is not yet time to look again."""
        entry = self._entries.get((match_id, start_iso))
        return entry is not None and now < entry[0]

    def prune(self, now: float) -> None:
        for key in [k for k, (_, window_end, _) in self._entries.items() if window_end <= now]:
            del self._entries[key]


def settled_hold_s(start_epoch: float, now: float, recheck_s: float) -> float:
    """How long a settled match keeps its prematch lock, so that no instance reads its followers again
    before then: ``recheck_s``, but before the start at most half the time left (the looks close in on the
    start, as the unfollowed memo's do); 0 when ``recheck_s`` is 0 (released at once, read every cycle)."""
    if recheck_s <= 0:
        return 0.0
    if now < start_epoch:
        return min(recheck_s, (start_epoch - now) / 2)
    return recheck_s


# --- the actor -----------------------------------------------------------------------------------------


@dataclass
class CycleReport:
    matches_due: int = 0
    matches_unfollowed: int = 0
    matches_settled: int = 0  # followed, and every follower notified for this start already
    matches_skipped_unfollowed: int = 0
    follower_reads: int = 0
    claimed: int = 0
    recovered: int = 0
    lost_claims: int = 0
    matches_locked: int = 0  # skipped: another instance held the match's prematch lock
    done: int = 0
    in_flight: int = 0
    accepted: int = 0
    rejected: int = 0
    failed: int = 0
    no_device: int = 0
    tokens_removed: int = 0
    gave_way_s: float = 0.0  # waited for this instance's live fan-outs (give_way_s per follower)
    paced_s: float = 0.0  # waited for the pace beside live matches (live_followers_per_s)
    push_to_start: int = 0
    starts_held: int = 0  # push-to-starts not sent: the follower's start claim was held (already started)
    sent: int = 0  # alerts handed to the sender
    confirmed: int = 0  # claims settled in DynamoDB (a crash repeats only those not yet confirmed)


@dataclass(frozen=True)
class _Work:
    user_id: str
    decision: Decision
    marker: Marker | None
    team_id: str | None
    device_token: str | None = None  # the device the follow names (written when the user followed)


@dataclass
class _Claim:
    match: DueMatch
    user_id: str
    stamp: int
    decision: Decision
    collapse_start: str
    team_id: str | None = None
    device: Mapping[str, Any] | None = None
    alert_id: str | None = None
    start_id: str | None = None
    start_token: str | None = None
    results: dict[str, PushResult] = field(default_factory=dict)
    pending: int = 0  # results still to come
    handed: bool = False  # its pushes were handed to the sender (or it had none to send)
    settled: bool = False


class PrematchNotifier:
    """Prematch notifications, every ``interval_s``: claimed, sent and confirmed per follower (see the module)."""

    def __init__(
        self,
        repos: PrematchStores,
        sender: PushSender,
        settings: PrematchSettings | None = None,
        *,
        topic: str = "",
        clock: Callable[[], float] = time.time,
        leagues: LeagueDirectory | None = None,
        owner: str = "",
        live: LiveWork | None = None,
    ) -> None:
        self._repos = repos
        # live fan-outs of this instance's match actors: each follower waits for them (give_way_s)
        self._live = live or LiveWork()
        # who holds the per-match lock: the instance id (a random one when none is given)
        self._owner = owner or f"prematch-{uuid.uuid4().hex[:12]}"
        self._sender = sender
        self.settings = settings or PrematchSettings()
        # beside live matches, at most live_followers_per_s followers a second (their claims)
        self._pace = Pace(self.settings.live_followers_per_s, active=lambda: self._live.matches() > 0)
        self._topic = self.settings.topic or topic
        self._clock = clock
        self.leagues = leagues or LeagueDirectory(
            repos.leagues, max_age_s=self.settings.active_leagues_cache_s
        )
        self.unfollowed = UnfollowedMemo(
            self.settings.unfollowed_memo_size, self.settings.unfollowed_recheck_s, self.settings.interval_s
        )
        self._teams: OrderedDict[str, Mapping[str, Any]] = OrderedDict()
        self.failures = 0
        self.cycles = 0
        self.last_report: CycleReport | None = None
        self.current: CycleReport | None = None  # the cycle in progress, for `ctl jobs`

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        s = self.settings
        if not s.enabled:
            log.info("prematch_disabled")
            await trio.sleep_forever()
        if not self._topic:
            log.warning("prematch_without_topic", hint="set [apns] topic or [jobs.prematch] topic")
        while True:
            started = trio.current_time()
            try:
                await self.run_cycle()
            except trio.Cancelled:
                raise
            except Exception as exc:
                self.failures += 1
                metrics.JOB_CYCLES.labels(JOB, "error").inc()
                log.warning(
                    "prematch_cycle_failed", error=f"{type(exc).__name__}: {exc}", failures=self.failures
                )
                await trio.sleep(backoff_delay(self.failures, base_s=s.backoff_base_s, cap_s=s.backoff_max_s))
                continue
            self.failures = 0
            await trio.sleep_until(started + s.interval_s)

    # -- one cycle --

    async def run_cycle(self) -> CycleReport:
        s = self.settings
        report = self.current = CycleReport()
        now = self._clock()
        codes = list(s.league_codes) or await self.leagues.active_codes()
        lo, hi = iso_utc(now - s.catch_up_s), iso_utc(now + s.longest_window_s)
        fixtures: list[Mapping[str, Any]] = []
        for code in codes:
            fixtures.extend(await self._repos.fixtures.get_matches_by_date_range(code, lo, hi))
        due = due_matches(fixtures, now=now, settings=s)
        report.matches_due = len(due)
        self.unfollowed.prune(now)
        for match in due:
            if self.unfollowed.knows(match.match_id, match.start_iso, now=now):
                report.matches_skipped_unfollowed += 1
                continue
            lock = prematch_lock_key(match.match_id)
            if not await self._repos.locks.acquire(lock, self._owner, s.match_lock_s):
                report.matches_locked += 1  # another instance is working through its followers
                continue
            hold = 0.0
            try:
                # only the followers whose marker is not settled for this start come back: once a match's
                # followers are notified, its later cycles read nothing but the Query's pages
                followers = await self._repos.follows.get_prematch_pending(
                    match.match_id,
                    start_epoch=match.start_epoch,
                    threshold_s=s.restart_notify_threshold_s,
                    now=now,
                )
                report.follower_reads += 1
                if not followers and await self._repos.follows.has_followers(match.match_id, now=now):
                    report.matches_settled += 1  # every follower notified for this start already
                    hold = settled_hold_s(match.start_epoch, now, s.settled_recheck_s)
                    continue
                if not followers:
                    report.matches_unfollowed += 1
                    self.unfollowed.remember(
                        match.match_id,
                        match.start_iso,
                        now=now,
                        window_end=match.start_epoch + s.catch_up_s,
                        start=match.start_epoch,
                    )
                    continue
                await self._notify_match(match, followers, now, report, lock=lock)
            finally:
                # even when cancelled (shutdown): the next instance need not wait out the lease
                with trio.CancelScope(shield=True, deadline=trio.current_time() + 5.0):
                    if hold > 0:
                        await self._hold(lock, hold)
                    else:
                        await self._release(lock)
        self.cycles += 1
        self.last_report, self.current = report, None
        metrics.JOB_CYCLES.labels(JOB, "ok").inc()
        metrics.JOB_LAST_SUCCESS.labels(JOB).set(now)
        if report.claimed or report.recovered or report.matches_due:
            log.info("prematch_cycle", **vars(report))
        return report

    async def _hold(self, lock: str, hold_s: float) -> None:
        """Keep a settled match's lock for ``hold_s``: the other instances skip the match until then."""
        try:
            await self._repos.locks.extend(lock, self._owner, hold_s)
        except Exception as exc:  # it expires on its own (match_lock_s)
            log.warning("prematch_lock_hold_failed", lock=lock, error=f"{type(exc).__name__}: {exc}")

    async def _release(self, lock: str) -> None:
        try:
            await self._repos.locks.release(lock, self._owner)
        except Exception as exc:  # it expires on its own
            log.warning("prematch_lock_release_failed", lock=lock, error=f"{type(exc).__name__}: {exc}")

    async def _notify_match(
        self,
        match: DueMatch,
        followers: Sequence[Mapping[str, Any]],
        now: float,
        report: CycleReport,
        *,
        lock: str,
    ) -> None:
        work: list[_Work] = []
        for follow in followers:
            user_id = follow.get("userId")
            if not isinstance(user_id, str) or not user_id:
                continue
            marker = Marker.of(follow)
            decision = decide(marker, start_epoch=match.start_epoch, now=now, settings=self.settings)
            if decision is Decision.DONE:
                report.done += 1
            elif decision is Decision.IN_FLIGHT:
                report.in_flight += 1
            else:
                team_id, named = follow.get("teamId"), follow.get("deviceToken")
                work.append(
                    _Work(
                        user_id,
                        decision,
                        marker,
                        team_id if isinstance(team_id, str) else None,
                        named if isinstance(named, str) and named else None,
                    )
                )
        if not work:
            return
        teams = await self._team_info(match.fixture)
        size = self.settings.batch_size
        for i in range(0, len(work), size):
            if i and not await self._repos.locks.extend(lock, self._owner, self.settings.match_lock_s):
                report.matches_locked += 1  # our lease ran out and another instance took the match over
                log.warning("prematch_lock_lost", match_id=match.match_id, done=i, left=len(work) - i)
                return
            await self._notify_batch(match, work[i : i + size], teams, now, report)

    async def _notify_batch(
        self,
        match: DueMatch,
        batch: Sequence[_Work],
        teams: Mapping[str, Mapping[str, Any]],
        now: float,
        report: CycleReport,
    ) -> None:
        """One batch in three steps, so its DynamoDB calls are few and bounded: the devices (a BatchGetItem
        per 100), the claims (``send_concurrency`` at a time, each after giving way to live fan-outs), the
        batch's push-to-start claims (one call); then the pushes, each claim confirmed as its last result
        arrives while the rest are still going out."""
        limiter = trio.CapacityLimiter(self.settings.send_concurrency)
        devices = await self._devices_of(batch, now)
        claims: list[_Claim] = []

        async def claim_one(work: _Work) -> None:
            async with limiter:
                paced = await self._pace.take()
                report.paced_s += paced
                waited = await self._live.give_way(JOB, self.settings.give_way_s)
                report.gave_way_s += waited  # (not `+= await`: that reads the sum before the wait)
                claim = await self._claim(match, work, devices.get(work.user_id), now, report)
                if claim is not None:
                    claims.append(claim)

        async with trio.open_nursery() as nursery:
            for work in batch:
                nursery.start_soon(claim_one, work)
        if not claims:
            return
        starting = await self._claim_starts(match, claims, now, report)

        # Room for every result of the batch, so the sender never waits on us.
        results_in, results_out = trio.open_memory_channel[PushResult](2 * len(claims))
        waiting: dict[str, _Claim] = {}
        # At most send_concurrency claims between their pushes and their confirmation: a crash then repeats
        # only those (the rest of the batch is claimed but not sent, and the lease brings it back), and the
        # confirmations keep pace with the sends.
        window = trio.Semaphore(self.settings.send_concurrency)
        sends = trio.CancelScope()
        sends_done = trio.Event()

        async def settle(claim: _Claim) -> None:
            try:
                async with limiter:
                    await self._settle_once(claim, report)
            finally:
                window.release()

        async def send_all(nursery: trio.Nursery) -> None:
            with sends:
                for claim in claims:
                    await window.acquire()
                    waited = await self._live.give_way(JOB, self.settings.give_way_s)
                    report.gave_way_s += waited
                    pushes = self._pushes(claim, teams, now, results_in, start=claim.user_id in starting)
                    if claim.start_id is not None:
                        # From here the start may reach the device whatever happens to this job: its claim
                        # is held past the match's start (a job that dies before this holds it a lease only).
                        hold = max(0.0, match.start_epoch - now) + self.settings.push_to_start_hold_s
                        await self._repos.locks.confirm_push_to_starts(
                            match.match_id, [claim.user_id], owner=self._owner, hold_s=hold, now=now
                        )
                    claim.pending, claim.handed = len(pushes), True
                    if not pushes:
                        nursery.start_soon(settle, claim)
                        continue
                    for push in pushes:
                        assert push.apns_id is not None
                        waiting[push.apns_id] = claim
                        await self._sender.send(push)
                    report.sent += 1
            sends_done.set()

        # Each claim is confirmed as soon as its last result is in, while the rest of the batch is still
        # going out. No answer for result_timeout_s stops the batch: a missing answer is a failure, which
        # leaves its claim unconfirmed, and the lease brings it back (same collapse id), as it does the
        # claims not sent yet.
        async with results_out, trio.open_nursery() as nursery:
            nursery.start_soon(send_all, nursery)
            last_answer = trio.current_time()
            while not (sends_done.is_set() and not any(c.pending for c in claims)):
                result = None
                with trio.move_on_after(0.5):
                    result = await results_out.receive()
                if result is None:
                    if trio.current_time() - last_answer >= self.settings.result_timeout_s:
                        sends.cancel()
                        break
                    continue
                last_answer = trio.current_time()
                claim = waiting.pop(result.push.apns_id or "", None)
                if claim is None:
                    continue
                claim.results[result.push.apns_id or ""] = result
                claim.pending -= 1
                if claim.pending == 0:
                    nursery.start_soon(settle, claim)
        for claim in claims:
            if claim.handed:  # one never sent is not settled: its claim stands until the lease brings it back
                await self._settle_once(claim, report)

    async def _settle_once(self, claim: _Claim, report: CycleReport) -> None:
        if not claim.settled:
            claim.settled = True
            await self._settle(claim, report)

    async def _devices_of(self, batch: Sequence[_Work], now: float) -> dict[str, Mapping[str, Any]]:
        """Each follower's registered device: by the device its follow names (BatchGetItem, 100 a call), else
        by a Query per follower (``send_concurrency`` at a time). A follower without one is absent."""
        named = {w.user_id: w.device_token for w in batch if w.device_token}
        return dict(
            await self._repos.devices.get_devices_of_users(
                [w.user_id for w in batch], named, concurrency=self.settings.send_concurrency, now=now
            )
        )

    async def _claim(
        self,
        match: DueMatch,
        work: _Work,
        device: Mapping[str, Any] | None,
        now: float,
        report: CycleReport,
    ) -> _Claim | None:
        """The follower's prematch claim, given its device (None: it has none); None when not taken."""
        user_id, decision, marker = work.user_id, work.decision, work.marker
        if decision is Decision.NOTIFY:
            # A follower nothing can reach is settled in the claim's own write (one call, not claim +
            # confirm). A device registered after the batch's device read is missed either way.
            reachable = bool(_alert_token(device))
            stamp = await self._repos.follows.claim_prematch(
                match.match_id,
                user_id,
                start_iso=match.start_iso,
                start_epoch=match.start_epoch,
                now=now,
                threshold_s=self.settings.restart_notify_threshold_s,
                expires_at=marker_expiry(match.start_epoch, self.settings),
                settled=None if reachable else "no_device",
            )
            collapse_start = match.start_iso
            if stamp is not None and not reachable:
                report.no_device += 1
                metrics.PREMATCH_NOTIFICATIONS.labels("no_device").inc()
                return None
        else:
            assert marker is not None  # RESEND is only decided from a marker
            stamp = await self._repos.follows.reclaim_prematch(
                match.match_id, user_id, seen_ms=marker.claimed_ms, now=now
            )
            collapse_start = marker.start_iso  # the first send's id, so this copy collapses onto it
        if stamp is None:  # another worker or instance holds it: its business now
            report.lost_claims += 1
            metrics.PREMATCH_NOTIFICATIONS.labels("skipped").inc()  # another worker holds the claim
            return None
        if decision is Decision.NOTIFY:
            report.claimed += 1
            metrics.PREMATCH_NOTIFICATIONS.labels("claimed").inc()
        else:
            report.recovered += 1
            metrics.PREMATCH_NOTIFICATIONS.labels("recovered").inc()
            log.info("prematch_resend_after_lease", match_id=match.match_id, user_id=user_id)
        return _Claim(match, user_id, stamp, decision, collapse_start, team_id=work.team_id, device=device)

    def _pushes(
        self,
        claim: _Claim,
        teams: Mapping[str, Mapping[str, Any]],
        now: float,
        reply_to: trio.MemorySendChannel[PushResult],
        *,
        start: bool = False,
    ) -> list[Push]:
        """The claim's alert, and its push-to-start when ``start`` (its start claim was taken)."""
        device = claim.device
        alert_token = _alert_token(device)
        if device is None or not alert_token:
            return []
        device_token = str(device.get("deviceToken") or "")
        match = claim.match
        title, body = prematch_text(match.fixture, teams, start_epoch=match.start_epoch, now=now)
        expiration = int(match.start_epoch + self.settings.catch_up_s)
        claim.alert_id = str(uuid.uuid4())
        pushes = [
            Push(
                token=str(alert_token),
                push_type="alert",
                topic=self._topic,
                payload=alert_payload(
                    title,
                    body,
                    thread_id=f"match:{match.match_id}",
                    data={"matchId": match.match_id, "type": "prematch", "startTime": claim.collapse_start},
                ),
                priority=10,
                kind="alert",
                expiration=expiration,
                collapse_id=collapse_id(match.match_id, claim.collapse_start),
                apns_id=claim.alert_id,
                context=TokenRef("device", match.match_id, user_id=claim.user_id, device_token=device_token),
                reply_to=reply_to,
            )
        ]
        start_token = self._start_token(claim) if start else None
        channels = match.fixture.get("broadcastChannels") or {}
        if start_token:
            try:
                # iOS 18+: the activity starts on its perspective's broadcast channel when the match's owner
                # has recorded them (it creates them as it takes the match); else on an update token
                channel = (
                    (channels.get(claim.team_id or "") or channels.get("neutral"))
                    if supports_channels(device)
                    else None
                )
                payload = start_payload(
                    _content_state(match, teams, claim.team_id),
                    attributes_type=self.settings.attributes_type,
                    attributes=_attributes(match, teams),
                    timestamp=int(now),
                    alert=(title, body),
                    input_push_channel=str(channel) if channel else None,
                    input_push_token=not channel,
                )
            except ValueError as exc:  # SnapshotError, PayloadTooLarge: the alert still goes
                log.warning("prematch_push_to_start_skipped", match_id=match.match_id, error=str(exc))
                return pushes
            claim.start_id = str(uuid.uuid4())
            claim.start_token = str(start_token)
            pushes.append(
                Push(
                    token=str(start_token),
                    push_type="liveactivity",
                    topic=self._topic,
                    payload=payload,
                    priority=10,
                    kind="start",
                    expiration=expiration,
                    apns_id=claim.start_id,
                    context=TokenRef(
                        "push_to_start", match.match_id, user_id=claim.user_id, device_token=device_token
                    ),
                    reply_to=reply_to,
                )
            )
        return pushes

    def _start_token(self, claim: _Claim) -> str | None:
        """The push-to-start token this claim's push-to-start would go to, or None when it gets none: not a
        first notification, switched off, no token, or an iOS 18 device while the match has no channels."""
        device = claim.device
        if claim.decision is not Decision.NOTIFY or not self.settings.push_to_start or device is None:
            return None
        token = device.get("pushToStartToken")
        channels = claim.match.fixture.get("broadcastChannels") or {}
        if supports_channels(device) and not channels and self.settings.ios18_waits_for_channels:
            return None  # the owner starts it on a channel (see PrematchSettings.ios18_waits_for_channels)
        return str(token) if token else None

    async def _claim_starts(
        self, match: DueMatch, claims: Sequence[_Claim], now: float, report: CycleReport
    ) -> set[str]:
        """Take the push-to-start claims (``start:{match}:{user}``, the one the match's owner takes before its
        own push-to-starts) of the batch's followers that are due one, in one call, for ``claim_lease_s``;
        each is held until ``push_to_start_hold_s`` after the start once APNs accepted its push-to-start
        (``_settle``): the owner does not start them again meanwhile, and a follower the owner (or this job
        before a crash) already started gets the alert only. A claim whose push never went (a crash) runs out
        with its lease, and the owner's heal starts that follower. The user ids whose claim was taken; a
        held one is counted in ``starts_held``."""
        due = [c.user_id for c in claims if self._start_token(c) is not None]
        if not due:
            return set()
        won = set(
            await self._repos.locks.claim_push_to_starts(
                match.match_id, due, owner=self._owner, hold_s=self.settings.claim_lease_s, now=now
            )
        )
        for user_id in due:
            if user_id not in won:
                report.starts_held += 1
                log.info("prematch_push_to_start_held", match_id=match.match_id, user_id=user_id)
        return won

    async def _settle(self, claim: _Claim, report: CycleReport) -> None:
        match, user_id = claim.match, claim.user_id
        device = claim.device
        device_token = str(device.get("deviceToken") or "") if device else ""
        if claim.start_id is not None:
            started = claim.results.get(claim.start_id)
            if started is not None and started.outcome == "accepted":
                report.push_to_start += 1
            elif started is not None and started.outcome == "rejected":
                # never started: the owner may start it once the device has a new token (an unanswered
                # start keeps its hold, since it may have reached the device)
                await self._repos.locks.release_push_to_starts(match.match_id, [user_id], owner=self._owner)
                await self._repos.devices.clear_push_to_start_token(
                    user_id, device_token, expected_token=claim.start_token
                )
                report.tokens_removed += 1
                metrics.PREMATCH_NOTIFICATIONS.labels("token_removed").inc()
                log.info(
                    "prematch_push_to_start_token_removed",
                    user_id=user_id,
                    token=short_token(claim.start_token),
                )
        if claim.alert_id is None:  # no device, or a device without a token: nothing can reach this user
            report.no_device += 1
            metrics.PREMATCH_NOTIFICATIONS.labels("no_device").inc()
            await self._repos.follows.confirm_prematch(
                match.match_id, user_id, claimed_ms=claim.stamp, result="no_device"
            )
            report.confirmed += 1
            return
        result = claim.results.get(claim.alert_id)
        if result is None or resend(result) is not Resend.SETTLED:
            # Unknown fate (timeout) or retries exhausted: keep the claim; after the lease the alert is sent
            # again under the same collapse id.
            report.failed += 1
            metrics.PREMATCH_NOTIFICATIONS.labels("failed").inc()
            log.warning(
                "prematch_alert_unconfirmed",
                match_id=match.match_id,
                user_id=user_id,
                reason=None if result is None else result.reason,
            )
            return
        if result.outcome == "rejected":
            await self._repos.devices.delete_device(user_id, device_token)
            report.rejected += 1
            report.tokens_removed += 1
            metrics.PREMATCH_NOTIFICATIONS.labels("rejected").inc()
            metrics.PREMATCH_NOTIFICATIONS.labels("token_removed").inc()
            log.info(
                "prematch_device_removed",
                user_id=user_id,
                token=short_token(result.push.token),
                reason=result.reason,
            )
        else:
            report.accepted += 1
            metrics.PREMATCH_NOTIFICATIONS.labels("accepted").inc()
        await self._repos.follows.confirm_prematch(
            match.match_id, user_id, claimed_ms=claim.stamp, result=result.outcome
        )
        report.confirmed += 1

    async def _team_info(self, fixture: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
        """The two teams (name, code) from ``cricket-teams``, remembered; the text degrades without them."""
        out: dict[str, Mapping[str, Any]] = {}
        for key in ("localteamId", "visitorteamId"):
            team_id = fixture.get(key)
            if not isinstance(team_id, str) or not team_id:
                continue
            team = self._teams.get(team_id)
            if team is None:
                try:
                    team = await self._repos.teams.get_team(team_id)
                except trio.Cancelled:
                    raise
                except Exception as exc:
                    log.warning(
                        "prematch_team_unavailable", team_id=team_id, error=f"{type(exc).__name__}: {exc}"
                    )
                    team = None
                if team is None:
                    continue
                self._teams[team_id] = team
                while len(self._teams) > 1000:
                    self._teams.popitem(last=False)
            out[team_id] = team
        return out

    def stats(self) -> dict[str, Any]:
        return {
            "cycles": self.cycles,
            "failures": self.failures,
            "unfollowed_remembered": len(self.unfollowed),
            "progress": progress(self.current) if self.current else None,
            "last": vars(self.last_report) if self.last_report else None,
        }

    def describe(self) -> dict[str, Any]:
        return self.stats()


def progress(report: CycleReport) -> dict[str, Any]:
    """A cycle in progress as ``ctl jobs`` shows it: claims taken, alerts sent, claims confirmed, time given
    way to live fan-outs and paced beside live matches."""
    return {
        "claims": report.claimed + report.recovered,
        "sent": report.sent,
        "confirmed": report.confirmed,
        "given_way_s": round(report.gave_way_s, 3),
        "paced_s": round(report.paced_s, 3),
        "matches_due": report.matches_due,
    }


# --- payloads ------------------------------------------------------------------------------------------


def _alert_token(device: Mapping[str, Any] | None) -> str:
    """The token an alert to this device goes to ("" when there is none)."""
    if device is None:
        return ""
    return str(device.get("apnsToken") or device.get("deviceToken") or "")


def _attributes(match: DueMatch, teams: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The Live Activity's static attributes (``payloads.activity_attributes``: the same whoever starts it)."""

    def team(key: str) -> TeamRef | None:
        team_id = str(match.fixture.get(key) or "")
        info = teams.get(team_id) or {}
        if not team_id:
            return None
        return TeamRef(team_id, str(info.get("name") or ""), str(info.get("code") or ""))

    return activity_attributes(match.match_id, team("localteamId"), team("visitorteamId"))


def _content_state(
    match: DueMatch, teams: Mapping[str, Mapping[str, Any]], perspective: str | None
) -> dict[str, Any]:
    """The engine's pre-match content-state (every key the app decodes), for the follower's team if known.

    Built from the fixture item as the SportMonks fixture it came from, so the Live Activity started now
    shows exactly what the match actor's first update will refine."""
    fx = match.fixture
    raw: dict[str, Any] = {
        "id": match.match_id,
        "league_id": fx.get("leagueId"),
        "status": fx.get("status") or "NS",
        "localteam_id": fx.get("localteamId"),
        "visitorteam_id": fx.get("visitorteamId"),
        "starting_at": match.start_iso,
        "type": fx.get("type"),
        "round": fx.get("round"),
        "note": fx.get("note"),
    }
    for side, key in (("localteam", "localteamId"), ("visitorteam", "visitorteamId")):
        team = teams.get(str(fx.get(key) or ""))
        if team:
            raw[side] = {"id": fx.get(key), "name": team.get("name"), "code": team.get("code")}
    display = build_display(
        snapshot_from_fixture(raw), event=None, event_type=None, result=None, alert_event=False
    )
    return dict(display.get(perspective or NEUTRAL) or display[NEUTRAL])


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None
