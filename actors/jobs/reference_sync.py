"""Reference sync: ``cricket-leagues``, ``cricket-teams`` and ``cricket-team-seasons`` from SportMonks, daily.

Owns the reference-sync actor and the small pieces the other jobs share with it: ``LeagueDirectory`` (the
cached list of active leagues and the leagueId -> code map, read from ``cricket-leagues``) and
``SyncReport``. It writes only through the data layer's repositories and never touches a table other
than the three above.

Attributes other writers own are never overwritten: a league's ``active`` flag is set only when the league
is first created (from ``active_league_ids``; admins change it afterwards), and an existing team or league
gets an UpdateItem of just its changed SportMonks fields (conditioned on existence), so an admin's PATCH of
another field survives. Unchanged records (same ``syncHash``) cost no write at all.

A cycle is a queue of steps (leagues, teams, then one step per active season); a step that fails stays at
the head of the queue and is retried after a capped exponential backoff, so a SportMonks outage in the
middle of a cycle costs only the failed step, never the ones already done.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from actors.jobs.convert import (
    LEAGUE_SYNCED_FIELDS,
    TEAM_SYNCED_FIELDS,
    changed_fields,
    convert_all,
    iso_utc,
    league_item,
    team_item,
    team_season_items,
)
from actors.jobs.settings import ReferenceSyncSettings
from actors.ports import ActiveLeagues, ReferenceClient, ReferenceStores
from daemon import metrics
from daemon.backoff import backoff_delay
from daemon.logs import get_logger

log = get_logger("jobs.reference_sync")

JOB = "reference_sync"


# --- shared by the jobs ------------------------------------------------------------------------------


@dataclass
class SyncReport:
    """What one sync pass did. ``written`` is every created or updated record's key."""

    table: str
    seen: int = 0
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    invalid: int = 0
    errors: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)

    def count(self) -> None:
        for result in ("created", "updated", "unchanged", "invalid"):
            n = getattr(self, result)
            if n:
                metrics.SYNC_RECORDS.labels(self.table, result).inc(n)

    def summary(self) -> dict[str, int]:
        """The counts, for a log line or the admin socket."""
        return {
            "seen": self.seen,
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "invalid": self.invalid,
        }

    def add(self, part: SyncReport) -> None:
        """Fold another pass's report (one chunk of a longer sync) into this one."""
        self.seen += part.seen
        self.created += part.created
        self.updated += part.updated
        self.unchanged += part.unchanged
        self.invalid += part.invalid
        self.errors.extend(part.errors)
        self.written.extend(part.written)


class LeagueDirectory:
    """The active leagues and the leagueId -> code map, read from ``cricket-leagues`` and reused for a while.

    One per job (jobs share no mutable state); each re-reads the small table at most once per ``max_age_s``,
    the caching the data model asks for ("Get active leagues ... per job cycle, cached").
    """

    def __init__(
        self, leagues: ActiveLeagues, *, max_age_s: float, now: Callable[[], float] = trio.current_time
    ) -> None:
        self._repo = leagues
        self._max_age_s = max_age_s
        self._now = now
        self._active: tuple[float, list[dict[str, Any]]] | None = None
        self._codes: tuple[float, dict[str, str]] | None = None

    def invalidate(self) -> None:
        self._active = None
        self._codes = None

    def _fresh(self, entry: tuple[float, Any] | None) -> bool:
        return entry is not None and self._now() - entry[0] < self._max_age_s

    async def active(self) -> list[dict[str, Any]]:
        if not self._fresh(self._active):
            self._active = (self._now(), list(await self._repo.get_active_leagues()))
        assert self._active is not None
        return self._active[1]

    async def codes(self) -> dict[str, str]:
        if not self._fresh(self._codes):
            leagues = await self._repo.get_all_leagues()
            self._codes = (self._now(), {str(lg["leagueId"]): lg["code"] for lg in leagues if lg.get("code")})
        assert self._codes is not None
        return self._codes[1]

    async def active_codes(self) -> list[str]:
        return sorted({str(lg["code"]) for lg in await self.active() if lg.get("code")})

    async def active_season_ids(self) -> list[str]:
        seasons = {str(lg["currentSeasonId"]) for lg in await self.active() if lg.get("currentSeasonId")}
        return sorted(seasons)


# --- the job -------------------------------------------------------------------------------------------


Step = tuple[str, str]  # ("leagues", ""), ("teams", ""), ("seasons", ""), ("season", season_id)


class ReferenceSyncJob:
    """Daily sync of leagues, teams and the team-seasons of active seasons."""

    def __init__(
        self,
        client: ReferenceClient,
        repos: ReferenceStores,
        settings: ReferenceSyncSettings | None = None,
        *,
        leagues: LeagueDirectory | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._repos = repos
        self.settings = settings or ReferenceSyncSettings()
        self._clock = clock
        self.leagues = leagues or LeagueDirectory(
            repos.leagues, max_age_s=self.settings.active_leagues_cache_s
        )
        self._pending: deque[Step] = deque()
        self._failures = 0
        self.last_reports: dict[str, SyncReport] = {}
        self.skipped_steps: list[Step] = []
        self.cycles_completed = 0
        self._next_cycle_at: float | None = None  # trio time of the next cycle, kept across runs

    # -- actor --

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        if not self.settings.enabled:
            log.info("reference_sync_disabled")
            await trio.sleep_forever()
        # Kept across runs of this object and handed on with the job's region lease (``schedule_state`` /
        # ``adopt_schedule``): a region-wide job stopped and restarted as its lease comes and goes, here or on
        # another instance, finishes the cycle in progress, then waits for the next one, instead of starting
        # over.
        while True:
            if not self._pending and self._next_cycle_at is not None:
                await trio.sleep_until(self._next_cycle_at)
            if not self._pending:
                self.start_cycle()
                self._next_cycle_at = trio.current_time() + self.settings.interval_s
            while self._pending:
                if await self.step():
                    continue
                await trio.sleep(
                    backoff_delay(
                        self._failures, base_s=self.settings.backoff_base_s, cap_s=self.settings.backoff_max_s
                    )
                )

    def schedule_state(self) -> dict[str, Any]:
        """For the next holder of the region lease: when the next cycle is due (wall clock) and the steps
        of the cycle in progress."""
        to_wall = self._clock() - trio.current_time()
        return {
            "cycleAt": None if self._next_cycle_at is None else round(self._next_cycle_at + to_wall, 3),
            "pending": [[kind, arg] for kind, arg in self._pending],
        }

    def adopt_schedule(self, state: Mapping[str, Any]) -> None:
        """Take the region's schedule (``schedule_state``'s shape) before running. A bad entry raises
        ValueError/TypeError: the caller logs it and the job keeps its own."""
        at = state.get("cycleAt")
        pending = deque((str(kind), str(arg)) for kind, arg in state.get("pending") or [])
        next_cycle = None if at is None else float(at) + trio.current_time() - self._clock()
        self._next_cycle_at, self._pending = next_cycle, pending

    def start_cycle(self) -> None:
        """Queue a full cycle (leagues first: team-seasons depend on which leagues are active)."""
        self._pending = deque([("leagues", ""), ("teams", ""), ("seasons", "")])
        self._failures = 0
        self.skipped_steps = []

    @property
    def pending(self) -> list[Step]:
        return list(self._pending)

    async def step(self) -> bool:
        """Run the step at the head of the queue; True when it succeeded (it is then dequeued)."""
        if not self._pending:
            return True
        kind, arg = self._pending[0]
        try:
            if kind == "leagues":
                self.last_reports["leagues"] = await self.sync_leagues()
            elif kind == "teams":
                self.last_reports["teams"] = await self.sync_teams()
            elif kind == "seasons":
                # Expand into one step per active season, after the leagues step refreshed the flags.
                self.leagues.invalidate()
                seasons = await self.leagues.active_season_ids()
                self._pending.popleft()
                self._pending.extendleft(reversed([("season", s) for s in seasons]))
                self._failures = 0
                self._done_if_empty()
                return True
            elif kind == "season":
                self.last_reports[f"season:{arg}"] = await self.sync_team_season(arg)
        except trio.Cancelled:
            raise
        except Exception as exc:
            self._failures += 1
            metrics.JOB_CYCLES.labels(JOB, "error").inc()
            step = f"{kind}:{arg}" if arg else kind
            log.warning(
                "reference_sync_step_failed",
                step=step,
                error=f"{type(exc).__name__}: {exc}",
                failures=self._failures,
            )
            if self._failures >= self.settings.max_step_failures:
                log.error("reference_sync_step_skipped", step=step, hint="left for the next cycle")
                self.skipped_steps.append(self._pending.popleft())
                self._failures = 0
                self._done_if_empty()
            return False
        self._pending.popleft()
        self._failures = 0
        self._done_if_empty()
        return True

    def _done_if_empty(self) -> None:
        if self._pending:
            return
        self.cycles_completed += 1
        if self.skipped_steps:  # a partial cycle: not a success for the freshness gauge
            log.warning(
                "reference_sync_cycle_partial",
                skipped=[":".join(filter(None, s)) for s in self.skipped_steps],
            )
            return
        metrics.JOB_CYCLES.labels(JOB, "ok").inc()
        metrics.JOB_LAST_SUCCESS.labels(JOB).set(self._clock())

    def stats(self) -> dict[str, Any]:
        """For the admin socket: progress of the current cycle and what the last one did."""
        return {
            "cycles_completed": self.cycles_completed,
            "pending": [":".join(filter(None, step)) for step in self._pending],
            "failures": self._failures,
            "skipped": [":".join(filter(None, step)) for step in self.skipped_steps],
            "last": {name: report.summary() for name, report in self.last_reports.items()},
        }

    async def sync_all(self) -> dict[str, SyncReport]:
        """One whole cycle, no retries: raises on the first failed step (for tests and one-shot use)."""
        self.start_cycle()
        while self._pending:
            kind = self._pending[0]
            if not await self.step():
                raise RuntimeError(f"reference sync step {kind} failed")
        return dict(self.last_reports)

    # -- steps --

    async def sync_leagues(self) -> SyncReport:
        leagues = self._repos.leagues

        async def create(items: list[dict[str, Any]]) -> None:
            # New (or deleted since read): created with the configured initial active flag, which admins
            # own afterwards.
            active = self.settings.active_league_ids
            for item in items:
                await leagues.put_league(dict(item, active=int(item["leagueId"]) in active))

        report = await self._sync_records(
            SyncReport("cricket-leagues"),
            await self._client.leagues(),
            league_item,
            what="leagues",
            key="leagueId",
            synced_fields=LEAGUE_SYNCED_FIELDS,
            existing=await leagues.get_all_leagues(),
            update_fields=leagues.update_league_fields,
            create=create,
        )
        if report.written:
            self.leagues.invalidate()
        log.info("leagues_synced", **report.summary())
        return report

    async def sync_teams(self) -> SyncReport:
        teams = self._repos.teams

        async def create(items: list[dict[str, Any]]) -> None:
            for batch in _chunks(items, 25):
                await teams.batch_write_teams(batch)

        report = await self._sync_records(
            SyncReport("cricket-teams"),
            await self._client.teams(),
            team_item,
            what="teams",
            key="teamId",
            synced_fields=TEAM_SYNCED_FIELDS,
            existing=await teams.get_all_teams(),
            update_fields=teams.update_team_fields,
            create=create,
        )
        log.info("teams_synced", **report.summary())
        return report

    async def _sync_records(
        self,
        report: SyncReport,
        raws: Iterable[Any],
        convert: Callable[..., dict[str, Any]],
        *,
        what: str,
        key: str,
        synced_fields: Iterable[str],
        existing: Iterable[Mapping[str, Any]],
        update_fields: Callable[[str, dict[str, Any]], Awaitable[bool]],
        create: Callable[[list[dict[str, Any]]], Awaitable[None]],
    ) -> SyncReport:
        """One reference table (leagues or teams) from SportMonks records: invalid ones noted, unchanged
        ones (same ``syncHash``) left alone, changed ones updated field by field, the rest created."""
        items, errors = convert_all(raws, convert, what=what)
        self._note_invalid(report, errors)
        by_key = {str(record[key]): record for record in existing}
        now_iso = iso_utc(self._clock())
        new_items = await _update_changed(
            report, _dedupe(items, key), by_key, key, synced_fields, update_fields, now_iso
        )
        created = [dict(item, updatedAt=now_iso) for item in new_items]
        await create(created)
        report.created += len(created)
        report.written.extend(item[key] for item in created)
        report.count()
        return report

    async def sync_team_season(self, season_id: str) -> SyncReport:
        report = SyncReport("cricket-team-seasons")
        season = await self._client.season(season_id, include=("teams",))
        try:
            items = team_season_items(season, path=f"season[{season_id}]")
        except ValueError as exc:
            self._note_invalid(report, [exc])
            raise
        existing = {
            str(r["teamId"]): r for r in await self._repos.team_seasons.get_teams_for_season(season_id)
        }
        now_iso = iso_utc(self._clock())
        to_write: list[dict[str, Any]] = []
        for item in _dedupe(items, "teamId"):
            report.seen += 1
            old = existing.get(item["teamId"])
            if old is not None and old.get("syncHash") == item["syncHash"]:
                report.unchanged += 1
                continue
            # The only access pattern is a BatchWriteItem (a put): keep what others stored (stats).
            merged = {**(old or {}), **item, "updatedAt": now_iso}
            if old is None:
                report.created += 1
            else:
                report.updated += 1
            to_write.append(merged)
        for batch in _chunks(to_write, 25):
            await self._repos.team_seasons.write_season_team_records(batch)
            report.written.extend(f"{r['seasonId']}#{r['teamId']}" for r in batch)
        report.count()
        log.info("team_seasons_synced", season_id=season_id, **report.summary())
        return report

    def _note_invalid(self, report: SyncReport, errors: Sequence[Exception]) -> None:
        for exc in errors:
            report.invalid += 1
            report.errors.append(str(exc))
            log.warning("reference_record_invalid", table=report.table, error=str(exc))


# --- helpers -------------------------------------------------------------------------------------------


async def _update_changed(
    report: SyncReport,
    items: Iterable[dict[str, Any]],
    existing: Mapping[str, Mapping[str, Any]],
    key: str,
    synced_fields: Iterable[str],
    update_fields: Callable[[str, dict[str, Any]], Awaitable[bool]],
    now_iso: str,
) -> list[dict[str, Any]]:
    """The reference-table sync rule: an item whose ``syncHash`` is unchanged is left alone; a changed one
    gets only its synced fields updated (admin-owned fields kept, conditionally on the item existing);
    the rest - new, or deleted since read - are returned for the caller to create."""
    to_create: list[dict[str, Any]] = []
    for item in items:
        report.seen += 1
        old = existing.get(item[key])
        if old is not None and old.get("syncHash") == item["syncHash"]:
            report.unchanged += 1
            continue
        if old is not None:
            fields = changed_fields(item, old, synced_fields)
            fields.update(syncHash=item["syncHash"], updatedAt=now_iso)
            if await update_fields(item[key], fields):
                report.updated += 1
                report.written.append(item[key])
                continue
        to_create.append(item)
    return to_create


def _dedupe(items: Sequence[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """Last record per key wins (a paginated listing can repeat a record that moved between pages)."""
    return list({item[key]: item for item in items}.values())


def _chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
