"""Token buckets by key (a user, a client address): pure, no I/O, the clock passed in.

The API keeps two sets: one per user (every authenticated request takes a token) and one per client
address for refused requests (``peek`` before the costly work, ``take`` once a request was refused).

Each user has a bucket of ``burst`` tokens refilled at ``rate_per_s``; a request takes one token or is
refused with the seconds until one is back (the ``Retry-After`` of a 429). Buckets are created full, so a
user's first ``burst`` requests always pass: a registration burst at a match's start is a handful of
requests per user, not per user per second. Memory is bounded by ``max_users``: when full, the buckets
that have refilled completely (they behave exactly like a fresh bucket) are dropped, then the oldest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Decision:
    allowed: bool
    retry_after_s: float = 0.0

    def retry_after_header(self) -> str:
        """Whole seconds, at least 1 (HTTP's Retry-After takes integers)."""
        return str(max(1, math.ceil(self.retry_after_s)))


class RateLimiter:
    def __init__(self, rate_per_s: float, burst: int, *, max_users: int = 200_000) -> None:
        if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
            raise ValueError(f"rate_per_s: must be a finite number > 0, got {rate_per_s!r}")
        if burst < 1:
            raise ValueError(f"burst: must be >= 1, got {burst!r}")
        self.rate = float(rate_per_s)
        self.burst = float(burst)
        self.max_users = max_users
        # user -> (tokens, last refill time); dict order is insertion order, oldest first
        self._buckets: dict[str, tuple[float, float]] = {}

    def __len__(self) -> int:
        return len(self._buckets)

    def peek(self, key: str, now: float) -> Decision:
        """Whether ``take`` would allow a request now, taking nothing."""
        tokens, last = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + max(0.0, now - last) * self.rate)
        if tokens >= 1.0:
            return Decision(True)
        return Decision(False, (1.0 - tokens) / self.rate)

    def take(self, user: str, now: float) -> Decision:
        tokens, last = self._buckets.pop(user, (self.burst, now))
        tokens = min(self.burst, tokens + max(0.0, now - last) * self.rate)
        if tokens >= 1.0:
            self._store(user, tokens - 1.0, now)
            return Decision(True)
        self._store(user, tokens, now)
        return Decision(False, (1.0 - tokens) / self.rate)

    def _store(self, user: str, tokens: float, now: float) -> None:
        if len(self._buckets) >= self.max_users:
            self._prune(now)
        self._buckets[user] = (tokens, now)

    def _prune(self, now: float) -> None:
        full_after = self.burst / self.rate
        for user in [u for u, (_, last) in self._buckets.items() if now - last >= full_after]:
            del self._buckets[user]
        while len(self._buckets) >= self.max_users:
            del self._buckets[next(iter(self._buckets))]
