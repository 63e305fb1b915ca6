"""The cache reader: how an instance that does not lead the region's feed gets its matches' fixtures.

One per instance. While another instance leads, it reads ``cricket-fixture-cache`` for every match this
instance's match actors subscribe to, in **one BatchGetItem per read** whatever the number of matches (the
change stamps only, a few bytes per match), then one more for the fixtures whose stamp (``feedEpoch``,
``feedSeq``) moved, and hands each of those to the Feed's subscription
(``FeedActor.offer_cached``), so a match actor sees the same ``FeedUpdate`` stream as on the leader, with
the leader's ``fetched_at``. Only changed items are decoded (gunzip + JSON).

The first BatchGetItem also carries the leader's 404 verdicts (``feedNotFound`` on the region's summary
item): when they change, the reader hands them to the feed (``adopt_not_found``), so a fixture the leader
released reaches its match actor here (a ``released`` update, on which it lets go) within one read, not at
the orchestrator's next cycle.

When it reads: the leader polls once per cadence and writes each poll's changed fixtures, then the poll's
summary, whose ``fetchedAt`` comes back with every read (the same BatchGetItem): it is the leader's
heartbeat, present whether or not a fixture changed, and a read that sees it sees that poll's fixtures.
So the reader aims at the moment the next poll's writes become visible (``next_read_in``: last poll +
cadence + the write delay). That delay is measured, not assumed (``WriteDelay``): each time a read sees a
new poll, the time from that poll's fetch to the start of that read is a sample (a read begun that long
after the fetch found the writes), and the reader aims one step before the smallest recent sample, so the
estimate keeps coming down to what the leader and DynamoDB take now; the clock difference between the two
instances is in it too. When that poll is not in yet, it looks again a step (a 25th of a cadence) later,
for up to a cadence; past that (no leader is polling: it died, or is being replaced) every half cadence.
Without a summary it aims by the newest fixture instead. On the leader it only waits: the feed serves the
subscribers in process.

``LeaderSummary`` answers the feed's ``livescores()`` on a follower (the orchestrator's question), from the
leader's summary item, and hands the 404 verdicts written with it to the feed (``adopt_not_found``: a fixture
the leader released is released here too, its match actor lets go, the orchestrator does not take it again);
it refuses (``SportMonksError``) one that is older than the caller accepts plus two leases: then no leader has
polled for that long and a stale list must not start matches. It holds no feed: the feed is built with it.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import trio

from actors.feed import FeedUpdate
from actors.ports import CacheReads, FollowerFeed, NotFoundVerdicts, SummaryReads
from daemon.logs import get_logger
from daemon.metrics import FIXTURE_CACHE_AGE
from daemon.sportmonks.errors import SportMonksError
from daemon.sportmonks.settings import FeedSettings

log = get_logger("actors.cache_reader")

DEFAULT_WRITE_DELAY_S = 0.25  # before a poll has been seen arriving: the leader's write takes a moment
STEPS_PER_CADENCE = 25  # while the next poll is not in: look again every 25th of a cadence
DELAY_SAMPLES = 8  # polls the write delay is measured over


class WriteDelay:
    """How long after the leader's fetch its writes are visible to this reader, from the recent polls this
    reader saw arrive: the smallest sample (how long after its poll's fetch the first read that found the
    poll began), at most half a cadence."""

    def __init__(self, samples: int = DELAY_SAMPLES) -> None:
        self._samples: deque[float] = deque(maxlen=samples)

    def add(self, seen_after_s: float) -> None:
        self._samples.append(max(0.0, seen_after_s))

    def estimate(self, cadence_s: float) -> float:
        """The delay to aim at, one step under the smallest sample (so a read that still finds the writes
        brings the estimate down), or ``DEFAULT_WRITE_DELAY_S`` before any sample."""
        if not self._samples:
            return min(DEFAULT_WRITE_DELAY_S, cadence_s / 2)
        return min(cadence_s / 2, max(0.0, min(self._samples) - read_step(cadence_s)))

    def describe(self) -> float | None:
        return None if not self._samples else round(min(self._samples), 3)


def read_step(cadence_s: float) -> float:
    """How much later the reader looks again while the poll it expects is not in."""
    return cadence_s / STEPS_PER_CADENCE


def next_read_in(
    cadence_s: float, last_poll_at: float | None, now_wall: float, delay_s: float = DEFAULT_WRITE_DELAY_S
) -> float:
    """Seconds to the next read, from the leader's last poll (wall clock): when its next poll's writes are
    expected to be visible (``delay_s`` after that poll's fetch); a step later while that poll is late (up to
    a cadence); half a cadence once no leader seems to poll. Never less than a step."""
    step = read_step(cadence_s)
    if last_poll_at is None:
        return cadence_s / 2
    behind = now_wall - last_poll_at
    due = cadence_s + delay_s
    if behind < due:
        return max(step, due - behind)
    if behind < due + cadence_s:
        return step
    return max(step, cadence_s / 2)


class LeaderSummary:
    """The region leader's ``/livescores`` in short, as a follower reads it from the cache (the module)."""

    def __init__(
        self,
        cache: SummaryReads,
        *,
        region: str,
        stale_after_s: float,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._cache = cache
        self.region = region
        self.stale_after_s = stale_after_s
        self._wall = wall_clock
        self._summary: tuple[list[dict[str, Any]], float, float] | None = (
            None  # (fixtures, fetchedAt, read at)
        )

    async def livescores(
        self, max_age_s: float, *, reread_after_s: float, adopt: NotFoundVerdicts
    ) -> list[dict[str, Any]]:
        """The leader's last ``/livescores`` in short (id, status, league, start), read again once the copy
        here is older than ``reread_after_s`` (or ``max_age_s``); the 404 verdicts read with it go to
        ``adopt``."""
        now = self._wall()
        cached = self._summary
        if cached is None or now - cached[2] > min(max_age_s, reread_after_s):
            got = await self._cache.get_livescores_summary_and_state(self.region)
            if got is None:
                raise SportMonksError(f"no feed leader has published /livescores for region {self.region!r}")
            cached = self._summary = (got[0], got[1], now)
            # the leader's 404 verdicts: a released id is let go by its match actor here and not taken again
            adopt.adopt_not_found(got[2].get("notFound"), to_wall=now - trio.current_time())
        age = now - cached[1]
        if age > max_age_s + self.stale_after_s:
            raise SportMonksError(
                f"the region's /livescores in the cache is {age:.0f} s old: no feed leader is polling"
            )
        return list(cached[0])

    def age_s(self) -> float | None:
        """How old the summary read last is (None before the first read)."""
        return None if self._summary is None else self._wall() - self._summary[1]


class CacheReader:
    def __init__(
        self,
        feed: FollowerFeed,
        cache: CacheReads,
        settings: FeedSettings,
        *,
        region: str,
        summary: LeaderSummary,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._feed = feed
        self._cache = cache
        self.settings = settings
        self.region = region
        self._leader_summary = summary
        self._wall = wall_clock
        self.seen: dict[str, tuple[int, int]] = {}
        self.newest_fetched_at: float | None = None
        self.last_poll_at: float | None = None  # the leader's last /livescores poll, from its summary
        self.write_delay = WriteDelay()
        self.reads = 0
        self.delivered = 0
        self.errors = 0
        self.last_read_at: float | None = None
        self._verdicts: dict[str, Any] | None = None  # the leader's 404 verdicts as last adopted
        self.released_by_read = 0  # ids this reader's reads released here

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            subs = self._feed.local_subscriptions()
            cadence = self._feed.cadence_for(marquee=any(subs.values()))  # the leader's, on the same plan
            if self._feed.leading:
                self.seen.clear()  # on taking over again later, deliver what the cache holds then
                await trio.sleep(cadence / 2)
                continue
            # With no match here, the read is of the leader's summary alone (one item): readiness judges the
            # region's feed by when its leader last polled, and an engine that owns nothing yet must see
            # that as well as one that does, or it answers "not ready" until it is given a match.
            await self.read_once(subs)
            # by the leader's poll summary, with the measured delay; without one, by the newest fixture
            polled = self.last_poll_at is not None
            heartbeat = self.last_poll_at if polled else self.newest_fetched_at
            delay = self.write_delay.estimate(cadence) if polled else DEFAULT_WRITE_DELAY_S
            await trio.sleep(next_read_in(cadence, heartbeat, self._wall(), delay))

    async def read_once(self, subs: dict[str, bool] | None = None) -> int:
        """One BatchGetItem of the change stamps of every subscribed match (and of the leader's 404
        verdicts), then one of the fixtures that changed (none when nothing did); returns how many changed
        fixtures were handed on."""
        subs = self._feed.local_subscriptions() if subs is None else subs
        started = self._wall()
        try:
            got = await self._cache.batch_get_region_stamps(list(subs), self.region)
            self._adopt_verdicts(got.not_found)
            if got.polled_at is not None:
                if self.last_poll_at is not None and got.polled_at > self.last_poll_at:
                    self.write_delay.add(started - got.polled_at)  # a new poll: first seen by this read
                self.last_poll_at = got.polled_at
            stamps = got.stamps
            for stamp in stamps.values():
                if self.newest_fetched_at is None or stamp[2] > self.newest_fetched_at:
                    self.newest_fetched_at = stamp[2]
            changed = [m for m, stamp in stamps.items() if self.seen.get(m) != stamp[:2]]
            entries = await self._cache.batch_get_entries(changed) if changed else {}
        except Exception as exc:  # DynamoDB trouble: the match actors keep their last state; read again soon
            self.errors += 1
            log.warning("fixture_cache_read_failed", error=repr(exc), matches=len(subs))
            return 0
        self.reads += 1
        now = self._wall()
        self.last_read_at = now
        handed = 0
        for match_id, entry in entries.items():
            if self.newest_fetched_at is None or entry.fetched_at > self.newest_fetched_at:
                self.newest_fetched_at = entry.fetched_at
            if self.seen.get(match_id) == entry.stamp:
                continue
            try:
                fixture = entry.fixture()
            except ValueError as exc:
                log.warning("fixture_cache_item_unreadable", match_id=match_id, error=str(exc))
                self.seen[match_id] = entry.stamp
                continue
            update = FeedUpdate(match_id, fixture, entry.fetched_at, entry.source, entry.in_livescores)
            if self._feed.offer_cached(update):
                FIXTURE_CACHE_AGE.observe(max(0.0, now - entry.fetched_at))
                self.seen[match_id] = entry.stamp
                self.delivered += 1
                handed += 1
        for gone in set(self.seen) - set(subs):
            del self.seen[gone]
        return handed

    def _adopt_verdicts(self, verdicts: dict[str, Any] | None) -> None:
        """Hand the leader's 404 verdicts to the feed when they changed since the last read (a released id's
        local subscriber gets its ``released`` update now)."""
        if verdicts is None or verdicts == self._verdicts:
            return
        self._verdicts = verdicts
        released = self._feed.adopt_not_found(verdicts, to_wall=self._wall() - trio.current_time())
        self.released_by_read += len(released)

    def describe(self) -> dict[str, Any]:
        now = self._wall()
        return {
            "reads": self.reads,
            "delivered": self.delivered,
            "errors": self.errors,
            "released_by_read": self.released_by_read,
            "last_read_age_s": None if self.last_read_at is None else round(now - self.last_read_at, 3),
            "newest_fixture_age_s": (
                None if self.newest_fetched_at is None else round(now - self.newest_fetched_at, 3)
            ),
            "livescores_age_s": None if (age := self._leader_summary.age_s()) is None else round(age, 3),
            "last_poll_age_s": None if self.last_poll_at is None else round(now - self.last_poll_at, 3),
            "write_delay_s": self.write_delay.describe(),
            "stale_after_s": (stale if math.isfinite(stale := self._leader_summary.stale_after_s) else None),
        }
