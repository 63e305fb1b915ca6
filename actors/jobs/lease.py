"""Region-wide jobs: one instance of the region at a time runs a job, under the lease ``job:{name}:{region}``.

``LeasedJob`` wraps a job actor (fixture sync, reference sync, the reconciler). Every ``renew_every_s`` it
contends for the job's lease in ``cricket-locks`` (fenced like the feed's: a new ``epoch`` per holder); the
instance that takes it runs the job and renews the lease; the others wait. The job stops at once when a
renewal is refused, when the lease runs out by this process's monotonic clock (less the clock-skew bound)
before a renewal succeeded, or when ``may_run`` turns false; the lease is then released so another
instance takes the job at its next attempt. When the holder dies, the lease runs out and another instance
takes the job within one lease plus one renewal period.

The job's schedule is the region's: a job that can say where it is (``schedule_state()``: when its next
cycles are due, in wall-clock time, and how far the cycle in progress got) has that written on its lease
item with every renewal (``jobState``), and the next holder hands it to the job (``adopt_schedule``) before
running it. So a job that moves to another instance (its holder killed, or no longer the feed leader)
carries on where the region was instead of starting over: no second full fixture sync, no extra
SportMonks calls per move. An unreadable state is logged and ignored (the job then runs on its own
schedule).

``may_run`` lets the daemon tie a job to the region's feed leader: the jobs that call SportMonks run where
the feed leader is, so the region's calls go through one client and one budget (the region's), and so does
the reconciler, which compares the leader's own fresh ``/livescores``.

The lease itself (taking, renewing, the deadline, giving up) is ``actors.lease.HeldLease``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import trio

from actors.lease import HeldLease
from actors.ports import LeaseStore, RegionJob
from daemon.logs import get_logger
from daemon.metrics import LEASED_JOB_RUNS
from daemon.store.locks import job_lock_key

log = get_logger("actors.jobs.lease")


class NoSchedule:
    """The schedule half of ``RegionJob`` for a job that keeps none: it runs on its own period wherever it
    moves, so it hands nothing on and takes nothing over."""

    def schedule_state(self) -> None:
        return None

    def adopt_schedule(self, state: Mapping[str, Any]) -> None:
        return None


class LeasedJob:
    def __init__(
        self,
        name: str,
        job: RegionJob,
        *,
        locks: LeaseStore,
        region: str,
        owner: str,
        lease_s: float,
        renew_every_s: float,
        clock_skew_bound_s: float,
        may_run: Callable[[], bool] = lambda: True,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.job = job
        self.key = job_lock_key(name, region)
        self.owner = owner
        self.renew_every_s = renew_every_s
        self.may_run = may_run
        self.lease = HeldLease(
            locks,
            self.key,
            owner,
            lease_s=lease_s,
            renew_every_s=renew_every_s,
            clock_skew_bound_s=clock_skew_bound_s,
            wall_clock=wall_clock,
        )
        self.runs = 0
        self.adopted = 0  # times this instance took the job's schedule from the lease item
        self.holder: str | None = None  # who holds it, as last seen

    @property
    def running(self) -> bool:
        """The lease is held, has not run out, and the instance may run the job (it still leads the feed)."""
        return self.lease.held and self.may_run()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            if self.may_run():
                try:
                    await self._acquire()
                except Exception as exc:  # noqa: BLE001 - DynamoDB trouble: try again at the next period
                    log.warning("job_lease_attempt_failed", job=self.name, error=repr(exc))
            if self.lease.held:
                await self._hold()
            await trio.sleep(self.renew_every_s)

    async def _acquire(self) -> None:
        item = await self.lease.acquire()
        if not self.lease.held:
            self.holder = (item or {}).get("owner")
            return
        self.holder = self.owner
        self._adopt((item or {}).get("jobState"))

    def _adopt(self, raw: Any) -> None:
        """Hand the region's schedule, as the last holder left it on the lease item, to the job."""
        if raw is None:
            return
        try:
            state = json.loads(str(raw))
            if not isinstance(state, dict):
                raise ValueError("not an object")
            self.job.adopt_schedule(state)
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("job_state_unreadable", job=self.name, error=repr(exc))
            return
        self.adopted += 1
        log.info("job_schedule_adopted", job=self.name, state=state)

    def _state_fields(self) -> Mapping[str, Any] | None:
        """What a renewal writes on the lease item: the job's schedule (None for a job that keeps none)."""
        state = self.job.schedule_state()
        if state is None:
            return None
        return {"jobState": json.dumps(state, separators=(",", ":"))}

    async def _hold(self) -> None:
        """Run the job while the lease holds; stop it the moment it does not, then release the lease."""
        self.runs += 1
        LEASED_JOB_RUNS.labels(self.name).inc()
        log.info("job_lease_taken", job=self.name, epoch=self.lease.epoch)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.job.run)
                reason = await self.lease.keep(fields=self._state_fields, may_hold=self.may_run)
                log.info("job_lease_ended", job=self.name, reason=reason)
                nursery.cancel_scope.cancel()
        finally:
            await self.lease.release()
            log.info("job_lease_given_up", job=self.name)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "lease_key": self.key,
            "running": self.running,
            "holder": self.holder,
            "runs": self.runs,
            "schedules_adopted": self.adopted,
        }
        out["job"] = self.job.stats()
        return out
