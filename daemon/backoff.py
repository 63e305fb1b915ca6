"""The retry delay every part of the daemon uses: exponential from a base, capped, optionally jittered.

One convention everywhere: ``retry`` counts retries from 1 (the delay before the first retry is ``base_s``,
before the second ``2 * base_s``, ...), and ``retry <= 0`` means no wait. ``jitter`` is the fraction of the
delay that is random: the delay is drawn uniformly from ``[(1 - jitter) * ceiling, ceiling]``, so 0 is a
deterministic schedule, 0.5 keeps at least half the delay ("equal jitter") and 1 is "full jitter".

Jitter spreads the retries of many callers that failed together (a 5xx storm at APNs, unprocessed batch
items when a DynamoDB partition is throttled, several daemons after a shared outage) so they do not come
back in one burst; a background job that retries one thing per process needs none.

Pure: no I/O, no clock; the random source can be passed in for reproducible tests.
"""

from __future__ import annotations

import random

# 2**40 times any sensible base is past every cap; bounding the exponent keeps a long failure streak
# from overflowing a float.
_MAX_DOUBLINGS = 40


def backoff_delay(
    retry: int, *, base_s: float, cap_s: float, jitter: float = 0.0, rng: random.Random | None = None
) -> float:
    """Seconds to wait before retry number ``retry`` (1-based): ``base_s * 2**(retry - 1)`` capped at
    ``cap_s``, of which the fraction ``jitter`` (0 to 1) is drawn at random; 0 when ``retry <= 0``."""
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"jitter must be between 0 and 1, not {jitter}")
    if retry <= 0:
        return 0.0
    ceiling = min(cap_s, base_s * 2.0 ** min(retry - 1, _MAX_DOUBLINGS))
    if jitter == 0.0:
        return ceiling
    r = rng.random() if rng is not None else random.random()
    return ceiling * (1.0 - jitter * r)
