"""The pace of a match: how long after one ball the next one comes, as real matches have it.

Owns the distribution of the gaps between consecutive deliveries of an innings that synthesised tapes draw
from, and how it is derived from a real fixture (``ball_gaps``, ``quantile_table``). Pure: no I/O, no clock;
randomness comes from the caller's ``random.Random``.

Why not a fixed interval: a schedule that knows when the next ball comes (one every 40 s, say) can poll just
after it and look faster than it is. Real balls come 1 s apart (a wide, then the legal ball) or 4 minutes
apart (a review, drinks), with a median near 45 s.

``BALL_GAP_QUANTILES_S`` is the table of the real fixture 71344 (``../shared/data/sportmonks``, 133 gaps
within its innings: median 46 s, 5th percentile 3 s, 95th 114 s, mean 52 s), every 5th percentile from the 0th to the
100th. It is a summary, not the data: ``tests/replay/test_pace.py`` derives it from the fixture again and
fails if the two differ. ``draw_gap_s`` samples it by inverse transform, linear between the quantiles.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

QUANTILE_STEP = 0.05  # the table gives every 5th percentile
BALL_GAP_QUANTILES_S: tuple[float, ...] = (
    1.0,
    3.0,
    4.2,
    6.0,
    17.0,
    25.0,
    30.0,
    33.0,
    36.8,
    42.0,
    46.0,
    52.0,
    55.2,
    58.8,
    65.0,
    71.0,
    78.6,
    87.2,
    94.8,
    114.4,
    243.0,
)


def ball_gaps(fixture: Mapping[str, Any]) -> list[float]:
    """Seconds between consecutive deliveries (by id) of the same innings, from their ``updated_at``: the
    gap across an innings break is not a ball gap and is left out, as are balls without a readable stamp."""
    raw = fixture.get("data", fixture)
    balls = raw.get("balls") or []
    if isinstance(balls, Mapping):
        balls = balls.get("data") or []
    timed = []
    for ball in balls:
        try:
            at = datetime.fromisoformat(str(ball["updated_at"]).replace("Z", "+00:00")).timestamp()
        except (KeyError, ValueError):
            continue
        timed.append((int(ball["id"]), str(ball.get("scoreboard")), at))
    timed.sort()
    return [b[2] - a[2] for a, b in zip(timed, timed[1:], strict=False) if a[1] == b[1]]


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ``values``, linear between the order statistics (the "inclusive" method:
    the 0th is the least, the 100th the greatest)."""
    if not values:
        raise ValueError("quantile of no values")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def quantile_table(values: Sequence[float]) -> tuple[float, ...]:
    """Every 5th percentile of ``values``, rounded to 0.1 s: the shape of ``BALL_GAP_QUANTILES_S``."""
    steps = round(1 / QUANTILE_STEP)
    return tuple(round(quantile(values, i / steps), 1) for i in range(steps + 1))


def draw_gap_s(rng: random.Random, table: Sequence[float] = BALL_GAP_QUANTILES_S) -> float:
    """One gap drawn from the distribution the quantile ``table`` describes."""
    u = rng.random() * (len(table) - 1)
    low = int(u)
    high = min(low + 1, len(table) - 1)
    return table[low] + (table[high] - table[low]) * (u - low)


def mean_gap_s(table: Sequence[float] = BALL_GAP_QUANTILES_S) -> float:
    """The mean of the distribution ``draw_gap_s`` samples (the integral of the piecewise-linear inverse)."""
    return sum((a + b) / 2 for a, b in zip(table, table[1:], strict=False)) / (len(table) - 1)
