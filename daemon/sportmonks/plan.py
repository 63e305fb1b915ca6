"""The feed's plan: how often the region's feed leader may read the live matches, from the SportMonks plan.

Owns two pure decisions and no I/O: ``plan_feed`` derives the poll period from what the operator states (the
plan's calls an hour per endpoint, ``[sportmonks].hourly_budget`` and ``endpoint_budgets``, less the calls
kept for the region's other work, ``reserved_calls``), and ``Pacer`` spaces every call on an endpoint so that
the endpoint stays within its hour whatever else calls it. See docs/operations.md ("One fleet per region and
the SportMonks budget").

SportMonks counts its limit per endpoint (spec §4: 2,000 calls an hour on the standard plan), and the live
matches can be read from two endpoints: ``/livescores`` and ``/fixtures`` filtered to live statuses. Read in
turn, each within its own hour, they give a poll every ``3600 / (live calls of both)`` seconds: 0.9 s on the
standard plan, against 1.8 s from one endpoint. A plan that cannot poll at least every
``[feed].slowest_cadence_s`` is refused at start (``PlanError``), not left to drift.

The pacer is a generic cell rate algorithm per endpoint: a call conforms when it comes no earlier than the
endpoint's theoretical arrival time less a tolerance of a few intervals, and every call on the endpoint
(the feed's, the fixture sync's, a retry's) moves that time on by the endpoint's interval. Over any hour an
endpoint then sees at most ``3600 / interval`` calls plus the tolerance, which the headroom keeps under its
limit; when the other jobs call more than was reserved, the feed's polls on that endpoint simply come later.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from daemon.sportmonks.errors import SportMonksError

WINDOW_S = 3600.0
TOLERANCE_INTERVALS = 3.0  # calls an endpoint may run ahead of its pace by (a failover, a sync's page)


class PlanError(SportMonksError, ValueError):
    """A plan that cannot serve the live matches; the message names the settings and the figures."""


@dataclass(frozen=True)
class FeedPlan:
    endpoints: tuple[str, ...]  # the endpoints the live matches are read from, in turn
    limits: Mapping[str, int]  # the plan's calls an hour, per endpoint
    reserved: Mapping[str, int]  # calls an hour kept for the region's other work, per endpoint
    live_calls: Mapping[str, float]  # calls an hour left for the live reads (after headroom), per endpoint
    fastest_s: float  # the fastest poll the live calls allow: 3600 / their sum
    cadence_s: float  # the poll period in use
    configured: bool  # the period is the operator's (checked against the plan), not derived
    interval_s: Mapping[str, float] = field(default_factory=dict)  # the pacer's spacing of all calls

    def describe(self) -> dict[str, Any]:
        """For the start-up log line and ``ctl feed``."""
        return {
            "cadence_s": round(self.cadence_s, 3),
            "cadence": "configured" if self.configured else "derived from the plan",
            "fastest_s": round(self.fastest_s, 3),
            "endpoints": list(self.endpoints),
            "calls_per_hour": {
                e: {
                    "limit": self.limits.get(e),
                    "reserved": self.reserved.get(e, 0),
                    "live": round(self.live_calls.get(e, 0.0)),
                    "planned": round(self.planned(e)),
                }
                for e in self.endpoints
            },
        }

    def planned(self, endpoint: str) -> float:
        """The live reads an hour this plan makes on ``endpoint`` at its cadence (its share of the polls)."""
        total = sum(self.live_calls.get(e, 0.0) for e in self.endpoints)
        if total <= 0 or endpoint not in self.endpoints:
            return 0.0
        return WINDOW_S / self.cadence_s * self.live_calls.get(endpoint, 0.0) / total


def plan_feed(
    *,
    limits: Mapping[str, int],
    reserved: Mapping[str, int],
    endpoints: Iterable[str],
    headroom: float,
    fastest_cadence_s: float,
    slowest_cadence_s: float,
    configured_s: float | None = None,
) -> FeedPlan:
    """The plan for reading the live matches from ``endpoints`` in turn (see the module doc). A configured
    period is checked against the budgets only (the operator chose it); a derived one against
    ``slowest_cadence_s`` as well."""
    wanted = tuple(dict.fromkeys(endpoints))
    live = {e: max(0.0, (limits[e] - reserved.get(e, 0)) * (1.0 - headroom)) for e in wanted}
    used = tuple(e for e in wanted if live[e] >= 1.0)
    total = sum(live[e] for e in used)
    shown = ", ".join(f"{e} {limits[e]} less {reserved.get(e, 0)} reserved" for e in wanted)
    if total < 1.0:
        raise PlanError(
            f"sportmonks: no calls are left for the live matches ({shown} calls an hour): raise "
            "hourly_budget or endpoint_budgets, or lower reserved_calls"
        )
    fastest = WINDOW_S / total
    if configured_s is not None and configured_s < fastest * (1 - 1e-9):
        raise PlanError(
            f"feed: a poll every {configured_s:g} s is faster than the plan allows ({shown} calls an hour, "
            f"{headroom:.0%} headroom: one every {fastest:.2f} s at the fastest); leave the feed's cadences "
            "unset to have it derived"
        )
    cadence = configured_s if configured_s is not None else max(fastest_cadence_s, fastest)
    if configured_s is None and cadence > slowest_cadence_s:
        raise PlanError(
            f"feed: the plan allows a poll every {cadence:.2f} s ({shown} calls an hour), slower than "
            f"feed.slowest_cadence_s = {slowest_cadence_s:g} s: the live matches would be served late; raise "
            "sportmonks.hourly_budget or endpoint_budgets, lower sportmonks.reserved_calls, or read from both "
            "endpoints (feed.list_endpoints)"
        )
    return FeedPlan(
        endpoints=used,
        limits={e: limits[e] for e in wanted},
        reserved={e: reserved.get(e, 0) for e in wanted},
        live_calls={e: live[e] for e in used},
        fastest_s=fastest,
        cadence_s=cadence,
        configured=configured_s is not None,
        interval_s={e: WINDOW_S / max(1.0, limits[e] * (1.0 - headroom)) for e in wanted},
    )


class Pacer:
    """When each endpoint may be called next (see the module doc); ``note`` every call made on it."""

    def __init__(self, interval_s: Mapping[str, float], tolerance: float = TOLERANCE_INTERVALS) -> None:
        self.interval_s = dict(interval_s)
        self.tolerance = tolerance
        self._tat: dict[str, float] = {}  # theoretical arrival time of the next call, per endpoint

    def note(self, endpoint: str, at: float) -> None:
        interval = self.interval_s.get(endpoint)
        if interval is None:
            return  # an endpoint the plan does not pace (teams, leagues, ...)
        self._tat[endpoint] = max(self._tat.get(endpoint, -math.inf), at) + interval

    def ready_at(self, endpoint: str) -> float:
        """The earliest time a call on ``endpoint`` conforms (-inf when it may go now)."""
        interval = self.interval_s.get(endpoint)
        if interval is None:
            return -math.inf
        return self._tat.get(endpoint, -math.inf) - self.tolerance * interval

    def snapshot(self, now: float) -> dict[str, float]:
        return {e: round(max(0.0, self.ready_at(e) - now), 3) for e in self.interval_s}


def next_poll(
    *,
    now: float,
    last_poll_at: float,
    cadence_s: float,
    endpoints: Iterable[str],
    ready_at: Mapping[str, float],
    resting_until: Mapping[str, float],
    shares: Mapping[str, float],
    made: Mapping[str, int],
) -> tuple[str | None, float]:
    """Which endpoint the next live poll goes to, and when: a cadence after the last poll, on the endpoint
    whose pace allows it soonest, never one that is resting (a 429, an error); among those ready then, the
    one furthest behind its share of the polls (``shares``: the plan's live calls an hour; ``made``: polls
    so far), so the endpoints take turns in proportion to what each has left. (None, when one comes back)
    while every endpoint rests."""
    best: tuple[float, float, str] | None = None
    for endpoint in endpoints:
        rest = resting_until.get(endpoint, -math.inf)
        if rest > now:
            continue
        at = max(last_poll_at + cadence_s, ready_at.get(endpoint, -math.inf), now)
        share = shares.get(endpoint, 0.0)
        behind = (made.get(endpoint, 0) + 1) / share if share > 0 else math.inf
        key = (at, behind, endpoint)
        if best is None or key < best:
            best = key
    if best is None:
        back = min((resting_until.get(e, math.inf) for e in endpoints), default=math.inf)
        return None, back
    return best[2], best[0]
