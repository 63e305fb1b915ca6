"""LiveMatchReconciler: archives fixtures that left SportMonks ``/livescores``.

Every ``cycle_s`` it compares the Feed's latest ``/livescores`` (no extra SportMonks call: the Feed's answer is
reused while fresh) with the matches it saw live before. A match that was live and no longer is gets
``archive_fixture`` (``archivedAt`` set, ``liveUpdatedAt`` removed, as the data model says) and ``live = false``
on its ``cricket-fixtures`` item, so the API side stops showing it as live even when no match actor wound it up
(a match this daemon never owned, or one abandoned while no instance was up).

What it saw live is seeded at start-up from ``active-matches``: the matches being processed (by any instance)
whose owner has seen them under way (``matchPhase`` past ``pre``), so a restart in the middle of a match does
not forget it. A match taken before its first ball is not in ``/livescores`` yet: it is seen live once it is
listed there, never archived for not being listed before it started. Archiving is idempotent and
conditioned on the fixture existing; several instances doing it is harmless. A failed cycle (SportMonks or
DynamoDB down) is logged and changes nothing: the match stays in the seen set and is archived on a later
cycle.
"""

from __future__ import annotations

from typing import Any

import trio

from actors.jobs.lease import NoSchedule
from actors.ports import Livescores, ReconcilerStores
from daemon.logs import get_logger

log = get_logger("reconciler")


class LiveMatchReconciler(NoSchedule):
    def __init__(
        self, repos: ReconcilerStores, feed: Livescores, *, cycle_s: float = 30.0, max_age_s: float = 30.0
    ) -> None:
        self._repos = repos
        self._feed = feed
        self.cycle_s = cycle_s
        self._max_age_s = max_age_s
        self.seen_live: set[str] = set()
        self.archived: set[str] = set()
        self.cycles = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            for item in await self._repos.active_matches.get_all_active_matches():
                if item.get("status") == "active" and (item.get("matchPhase") or "pre") != "pre":
                    self.seen_live.add(str(item["matchId"]))
        except Exception as exc:
            log.warning("reconciler_seed_failed", error=repr(exc))
        task_status.started()
        while True:
            await trio.sleep(self.cycle_s)
            await self.cycle()

    async def cycle(self) -> list[str]:
        """One comparison; returns the match ids archived by it."""
        try:
            live = await self._feed.livescores(max_age_s=self._max_age_s)
        except Exception as exc:
            log.warning("reconciler_livescores_unavailable", error=repr(exc))
            return []
        now_live = {str(f["id"]) for f in live if f.get("status") not in ("Finished", "Aban.", "Cancl.")}
        gone = sorted(self.seen_live - now_live)
        done: list[str] = []
        for match_id in gone:
            try:
                if await self._repos.fixtures.archive_fixture(match_id):
                    await self._repos.fixtures.update_fixture_fields(match_id, {"live": False})
                self.archived.add(match_id)
                self.seen_live.discard(match_id)
                done.append(match_id)
                log.info("fixture_archived", match_id=match_id)
            except Exception as exc:  # try again next cycle
                log.warning("archive_failed", match_id=match_id, error=repr(exc))
        self.seen_live |= now_live
        self.cycles += 1
        return done

    def stats(self) -> dict[str, Any]:
        return {"cycles": self.cycles, "seen_live": len(self.seen_live), "archived": len(self.archived)}
