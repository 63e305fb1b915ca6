"""FixtureSyncJob: keeps ``cricket-fixtures`` in step with SportMonks.

Owns the fixture-sync actor: the near window (matches in ``/livescores`` plus those starting between
``near_behind_h`` ago and ``near_ahead_h`` ahead) every ``near_interval_s`` (60 s), and a full sync through the
paginated ``/fixtures`` every ``full_interval_s`` (6 h). It writes ``cricket-fixtures`` only, through the data
layer's FixtureRepository, and never touches attributes other writers own (``displayState``,
``archivedAt``...): existing fixtures get an UpdateItem of just the changed SportMonks fields.

Only changed fixtures are written. Each item carries a ``syncHash`` of its SportMonks fields
(``actors.jobs.convert``); a fixture whose hash equals the stored one costs no write. New fixtures go in
BatchWriteItem calls of 25; existing ones get ``update_fixture_fields`` (UpdateItem conditioned on the
fixture existing); one that vanished between our read and our update is written whole instead.

Where the job's place is kept:
- Near window: in DynamoDB itself (the stored ``syncHash`` of every fixture), plus an in-memory LRU of the
  hashes this process last wrote, so a quiet minute costs one SportMonks call and no DynamoDB read at all.
  A restarted process has an empty LRU and simply reads the hashes back (one BatchGetItem per 100).
- Full sync: a plan of date-range chunks (``full_chunk_days`` each; the client follows ``links.next``
  within a chunk). Chunks are done in order; a chunk that fails is retried after a capped exponential
  backoff and the chunks already done are not fetched again, so a SportMonks outage in the middle of a
  6-hour sync resumes where it stopped. A restart begins a new full sync (it is idempotent and writes only
  what changed). The full sync always reads the stored hashes (never the LRU), so it also repairs anything
  the LRU may have hidden (a fixture deleted behind our back).

SportMonks budget: the near window costs one ``/fixtures`` call (per page) a minute. Its ``/livescores`` part
is either the feed's cached view (``livescores=``, as the daemon should wire it) or the job's own call, which
is skipped while the endpoint's hourly budget is below ``livescores_budget_reserve`` (the feed needs it more).

A failure in one cycle is logged, counted (``sightscreen_job_cycles{job,outcome="error"}``) and retried
after a backoff; it never ends the actor.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import trio

from actors.errors import ActorError
from actors.jobs.convert import ConversionError, fixture_item, fixture_update, iso_utc, sportmonks_datetime
from actors.jobs.reference_sync import LeagueDirectory, SyncReport
from actors.jobs.settings import FixtureSyncSettings
from actors.ports import FixturesClient, FixtureSyncStores
from daemon import metrics
from daemon.backoff import backoff_delay
from daemon.logs import get_logger

log = get_logger("jobs.fixture_sync")

JOB_NEAR = "fixture_sync_near"
JOB_FULL = "fixture_sync_full"
BATCH_WRITE_MAX = 25  # DynamoDB's BatchWriteItem limit (data model: "batches of 25")


class SyncIncomplete(ActorError):
    """Part of a cycle's source data could not be fetched; what was fetched has been written."""


# --- the full-sync plan (pure) ----------------------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    """One ``filter[starts_between]`` range of the full sync (epoch seconds, end exclusive of the next)."""

    start: float
    end: float

    def filters(self) -> dict[str, str]:
        return {"starts_between": f"{sportmonks_datetime(self.start)},{sportmonks_datetime(self.end)}"}


@dataclass(frozen=True)
class FullSyncPlan:
    """Where a full sync is: which chunks exist, how many are done, how often the next one has failed."""

    chunks: tuple[Chunk, ...]
    done: int = 0
    failures: int = 0
    skipped: int = 0

    @property
    def finished(self) -> bool:
        return self.done >= len(self.chunks)

    @property
    def current(self) -> Chunk:
        return self.chunks[self.done]

    def advanced(self) -> FullSyncPlan:
        return replace(self, done=self.done + 1, failures=0)

    def failed(self) -> FullSyncPlan:
        return replace(self, failures=self.failures + 1)

    def skipped_current(self) -> FullSyncPlan:
        return replace(self, done=self.done + 1, failures=0, skipped=self.skipped + 1)


def plan_full_sync(now: float, settings: FixtureSyncSettings) -> FullSyncPlan:
    """Date chunks covering ``[now - full_behind_days, now + full_ahead_days]``, at day boundaries (UTC)."""
    day = 86400.0
    first = (now // day - settings.full_behind_days) * day
    last = (now // day + settings.full_ahead_days + 1) * day
    step = settings.full_chunk_days * day
    chunks = []
    start = first
    while start < last:
        end = min(start + step, last)
        # starts_between is inclusive at both ends: stop one second short so chunks do not overlap.
        chunks.append(Chunk(start, end - 1))
        start = end
    return FullSyncPlan(tuple(chunks))


# --- the job -----------------------------------------------------------------------------------------


class FixtureSyncJob:
    """The near-window and full fixture sync, as one actor."""

    def __init__(
        self,
        client: FixturesClient,
        repos: FixtureSyncStores,
        settings: FixtureSyncSettings | None = None,
        *,
        livescores: Callable[[], Awaitable[list[dict[str, Any]]]] | None = None,
        leagues: LeagueDirectory | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._fixtures = repos.fixtures
        self.settings = settings or FixtureSyncSettings()
        # The feed already polls /livescores; the daemon may hand in its cached view to save calls.
        self._livescores = livescores or self._own_livescores
        self._clock = clock
        self.leagues = leagues or LeagueDirectory(repos.leagues, max_age_s=600.0)
        self._hashes: OrderedDict[str, str] = OrderedDict()
        self.plan: FullSyncPlan | None = None
        self.near_failures = 0
        self.last_near: SyncReport | None = None
        self.last_full: SyncReport | None = None
        self._full_report: SyncReport | None = None
        self.full_syncs_completed = 0
        self._next_full: float | None = None  # trio time of the next full sync, kept across runs
        self._next_near: float | None = None  # trio time of the next near-window sync, kept across runs
        self._plan_at: float | None = None  # wall time the full-sync plan in progress was made

    # -- actor --

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        if not self.settings.enabled:
            log.info("fixture_sync_disabled")
            await trio.sleep_forever()
        s = self.settings
        # The near window at a process's first start (a restart may have missed changes); both syncs on
        # their schedule after that, kept across runs of this object and handed on with the job's lease
        # (``schedule_state``/``adopt_schedule``): a region-wide job that moves to another instance resumes
        # the region's schedule and the plan in progress instead of syncing everything again.
        next_near = trio.current_time() if self._next_near is None else self._next_near
        next_full = trio.current_time() if self._next_full is None else self._next_full
        chunk_retry_at = -float("inf")
        while True:
            now = trio.current_time()
            if now >= next_near:
                ok = await self._guarded(JOB_NEAR, self.sync_near_window)
                self.near_failures = 0 if ok else self.near_failures + 1
                delay = (
                    s.near_interval_s
                    if ok
                    else backoff_delay(self.near_failures, base_s=s.backoff_base_s, cap_s=s.backoff_max_s)
                )
                next_near = self._next_near = trio.current_time() + min(delay, s.near_interval_s)
            elif self.plan is None and now >= next_full:
                self._plan_at = self._clock()
                self.plan = plan_full_sync(self._plan_at, s)
                self._full_report = SyncReport("cricket-fixtures")
                next_full = self._next_full = now + s.full_interval_s
                log.info("full_sync_started", chunks=len(self.plan.chunks))
            elif self.plan is not None and now >= chunk_retry_at:
                ok = await self.full_sync_step()
                failures = 0 if ok or self.plan is None else self.plan.failures
                chunk_retry_at = now + backoff_delay(failures, base_s=s.backoff_base_s, cap_s=s.backoff_max_s)
            else:
                wake = min(next_near, next_full if self.plan is None else chunk_retry_at)
                await trio.sleep_until(wake)
                continue
            await trio.lowlevel.checkpoint()  # let the rest of the daemon breathe between steps

    def schedule_state(self) -> dict[str, Any]:
        """Where the job is, in wall-clock time, for the next holder of its region lease: when the next near
        and full syncs are due and how far the full sync in progress got."""
        to_wall = self._clock() - trio.current_time()
        plan = None
        if self.plan is not None and self._plan_at is not None and not self.plan.finished:
            plan = {"at": self._plan_at, "done": self.plan.done}
        return {
            "nearAt": None if self._next_near is None else round(self._next_near + to_wall, 3),
            "fullAt": None if self._next_full is None else round(self._next_full + to_wall, 3),
            "plan": plan,
        }

    def adopt_schedule(self, state: Mapping[str, Any]) -> None:
        """Take the region's schedule from the previous holder (``schedule_state``'s shape) before running.
        A bad entry raises ValueError/TypeError/KeyError: the caller logs it and the job keeps its own."""
        to_trio = trio.current_time() - self._clock()
        near, full, plan = state.get("nearAt"), state.get("fullAt"), state.get("plan")
        next_near = None if near is None else float(near) + to_trio
        next_full = None if full is None else float(full) + to_trio
        adopted = None
        if plan is not None:
            at, done = float(plan["at"]), int(plan["done"])
            adopted = replace(plan_full_sync(at, self.settings), done=done)
        self._next_near, self._next_full = next_near, next_full
        if adopted is not None and not adopted.finished:
            self.plan, self._plan_at = adopted, at
            self._full_report = SyncReport("cricket-fixtures")
        elif plan is None and self.plan is not None and next_full is not None:
            self.plan = self._plan_at = None  # the region finished the plan this process had begun

    async def _guarded(self, job: str, step: Callable[[], Awaitable[SyncReport]]) -> bool:
        try:
            await step()
        except trio.Cancelled:
            raise
        except Exception as exc:
            metrics.JOB_CYCLES.labels(job, "error").inc()
            log.warning("fixture_sync_failed", job=job, error=f"{type(exc).__name__}: {exc}")
            return False
        metrics.JOB_CYCLES.labels(job, "ok").inc()
        metrics.JOB_LAST_SUCCESS.labels(job).set(self._clock())
        return True

    # -- near window --

    async def sync_near_window(self) -> SyncReport:
        s = self.settings
        now = self._clock()
        window = Chunk(now - s.near_behind_h * 3600, now + s.near_ahead_h * 3600)
        problems: list[str] = []
        raws = await self._client.fixtures(filters=window.filters(), include=s.include, sort="starting_at")
        if s.include_livescores:
            try:
                # Appended last: for a match in both, the livescores copy is the fresher one.
                raws = [*raws, *await self._livescores()]
            except trio.Cancelled:
                raise
            except Exception as exc:
                problems.append(f"livescores: {type(exc).__name__}: {exc}")
        report = await self.write_fixtures(raws, what="near", use_memory=True)
        self.last_near = report
        if problems:
            raise SyncIncomplete("; ".join(problems))
        return report

    async def _own_livescores(self) -> list[dict[str, Any]]:
        """/livescores through the client, unless that would eat into the feed's hourly budget."""
        if self._client.budget.remaining("livescores") < self.settings.livescores_budget_reserve:
            log.info("near_sync_livescores_skipped", reason="hourly budget kept for the feed")
            return []
        return await self._client.livescores(include=tuple(self.settings.include))

    # -- full sync --

    async def full_sync_step(self) -> bool:
        """Fetch and write the current chunk of the full sync; False (and the plan unchanged) on failure."""
        if self.plan is None:
            self._plan_at = self._clock()
            self.plan = plan_full_sync(self._plan_at, self.settings)
            self._full_report = SyncReport("cricket-fixtures")
        if self.plan.finished:
            return True
        chunk = self.plan.current
        try:
            raws = await self._client.fixtures(
                filters=chunk.filters(), include=self.settings.include, sort="starting_at"
            )
            report = await self.write_fixtures(raws, what=f"full[{self.plan.done}]", use_memory=False)
        except trio.Cancelled:
            raise
        except Exception as exc:
            self.plan = self.plan.failed()
            metrics.JOB_CYCLES.labels(JOB_FULL, "error").inc()
            log.warning(
                "full_sync_chunk_failed",
                chunk=self.plan.done,
                of=len(self.plan.chunks),
                range=chunk.filters()["starts_between"],
                failures=self.plan.failures,
                error=f"{type(exc).__name__}: {exc}",
            )
            if self.plan.failures >= self.settings.max_chunk_failures:
                log.error(
                    "full_sync_chunk_skipped",
                    chunk=self.plan.done,
                    range=chunk.filters()["starts_between"],
                    hint="left for the next full sync; the near window still covers the next hours",
                )
                (self._full_report or SyncReport("cricket-fixtures")).errors.append(
                    f"chunk {chunk.filters()['starts_between']}: skipped after {self.plan.failures} failures"
                )
                self.plan = self.plan.skipped_current()
                self._finish_if_done()
            return False
        self.plan = self.plan.advanced()
        total = self._full_report or SyncReport("cricket-fixtures")
        total.add(report)
        self._full_report = total
        self._finish_if_done()
        return True

    def _finish_if_done(self) -> None:
        if self.plan is None or not self.plan.finished:
            return
        total = self._full_report or SyncReport("cricket-fixtures")
        self.last_full = total
        self.full_syncs_completed += 1
        skipped = self.plan.skipped
        self.plan = None
        metrics.JOB_CYCLES.labels(JOB_FULL, "ok" if not skipped else "error").inc()
        if not skipped:
            metrics.JOB_LAST_SUCCESS.labels(JOB_FULL).set(self._clock())
        log.info("full_sync_done", skipped_chunks=skipped, **total.summary())

    async def full_sync(self, *, max_failures: int = 0) -> SyncReport:
        """Run a whole full sync now (tests, one-shot use): retries a failing chunk up to ``max_failures``."""
        self.plan = plan_full_sync(self._clock(), self.settings)
        self._full_report = SyncReport("cricket-fixtures")
        while self.plan is not None:
            if not await self.full_sync_step() and self.plan is not None:
                if self.plan.failures > max_failures:
                    raise SyncIncomplete(
                        f"full sync stopped at chunk {self.plan.done} of {len(self.plan.chunks)}"
                    )
        assert self.last_full is not None
        return self.last_full

    # -- writing --

    async def write_fixtures(
        self, raws: Sequence[Any], *, what: str = "fixtures", use_memory: bool = False
    ) -> SyncReport:
        """Convert SportMonks fixtures and write exactly the ones that changed."""
        report = SyncReport("cricket-fixtures")
        codes: Mapping[str, str] | None = None
        if any(isinstance(r, Mapping) and not r.get("league") for r in raws):
            codes = await self._league_codes()
        items: dict[str, dict[str, Any]] = {}
        for i, raw in enumerate(raws):
            try:
                item = fixture_item(
                    raw, league_codes=codes, retention_days=self.settings.retention_days, path=f"{what}[{i}]"
                )
            except ConversionError as exc:
                report.invalid += 1
                report.errors.append(str(exc))
                log.warning("fixture_invalid", error=str(exc))
                continue
            items[item["matchId"]] = item  # a fixture listed twice: the later copy wins
        report.seen = len(items)

        candidates = [
            it
            for it in items.values()
            if not (use_memory and self._hashes.get(it["matchId"]) == it["syncHash"])
        ]
        report.unchanged = len(items) - len(candidates)
        stored = (
            await self._fixtures.batch_get_fixtures([it["matchId"] for it in candidates])
            if candidates
            else {}
        )
        now_iso = iso_utc(self._clock())
        new: list[dict[str, Any]] = []
        for item in candidates:
            match_id = item["matchId"]
            old = stored.get(match_id)
            if old is not None and old.get("syncHash") == item["syncHash"]:
                report.unchanged += 1
                self._remember(match_id, item["syncHash"])
                continue
            if old is None:
                new.append(dict(item, updatedAt=now_iso))
                continue
            fields = fixture_update(item, old)
            fields["updatedAt"] = now_iso
            if await self._fixtures.update_fixture_fields(match_id, fields):
                report.updated += 1
                report.written.append(match_id)
                self._remember(match_id, item["syncHash"])
            else:  # deleted between our read and our write: write it whole
                new.append(dict(item, updatedAt=now_iso))
        for i in range(0, len(new), BATCH_WRITE_MAX):
            batch = new[i : i + BATCH_WRITE_MAX]
            await self._fixtures.batch_write_fixtures(batch)
            for item in batch:
                report.created += 1
                report.written.append(item["matchId"])
                self._remember(item["matchId"], item["syncHash"])
        report.count()
        log.info("fixtures_synced", what=what, **report.summary())
        return report

    def _remember(self, match_id: str, digest: str) -> None:
        if self.settings.hash_cache_size <= 0:
            return
        self._hashes[match_id] = digest
        self._hashes.move_to_end(match_id)
        while len(self._hashes) > self.settings.hash_cache_size:
            self._hashes.popitem(last=False)

    async def _league_codes(self) -> Mapping[str, str] | None:
        try:
            return await self.leagues.codes()
        except trio.Cancelled:
            raise
        except Exception as exc:  # the codes only place a fixture in the GSI; the sync goes on without
            log.warning("league_codes_unavailable", error=f"{type(exc).__name__}: {exc}")
            return None

    def stats(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "near": self.last_near.summary() if self.last_near else None,
            "near_failures": self.near_failures,
            "full": self.last_full.summary() if self.last_full else None,
            "full_syncs_completed": self.full_syncs_completed,
            "full_in_progress": None
            if plan is None
            else {"chunk": plan.done, "of": len(plan.chunks), "failures": plan.failures},
            "hashes_remembered": len(self._hashes),
        }
