"""What the API's handlers share: ``ApiState``, built once per server from the settings.

The routes reach it through ``daemon.api.routes.deps.api_state``; the layers around the routes are handed
only their parts (the gate its authenticator and buckets, the access log the in-flight counter, the display
fast path the display answers), never the whole state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from daemon.api.auth import Authenticator, JwksKeys
from daemon.api.cache import TtlCache
from daemon.api.coalesce import Coalescer
from daemon.api.display import DisplayAnswers
from daemon.api.middleware import InFlight
from daemon.api.ratelimit import RateLimiter
from daemon.api.settings import ApiSettings
from daemon.store import Repositories

Registration = tuple[str, str, str, str | None, int | None, str | None]
"""A Live Activity registration as the coalescer batches it: (matchId, userId, deviceId, updateToken, ttl,
channelId)."""


@dataclass
class ApiState:
    """The repositories, the authenticator, the rate limiters, the caches and the write coalescer."""

    repos: Repositories
    auth: Authenticator
    keys: JwksKeys
    settings: ApiSettings
    limiter: RateLimiter = field(init=False)
    refusals: RateLimiter = field(init=False)
    match_cache: TtlCache[bool] = field(init=False)
    displays: DisplayAnswers = field(init=False)
    scan_cache: TtlCache[list[dict[str, Any]]] = field(init=False)
    registrations: Coalescer[Registration] = field(init=False)
    in_flight: InFlight = field(init=False)

    def __post_init__(self) -> None:
        s = self.settings
        self.limiter = RateLimiter(s.rate_per_s, s.rate_burst, max_users=s.rate_max_users)
        self.refusals = RateLimiter(s.refused_per_s, s.refused_burst, max_users=s.refused_max_addresses)
        # whether a match exists, for the Live Activity registrations of a match's start (a burst for one id)
        self.match_cache = TtlCache(s.reference_cache_s, max_entries=1000)
        self.displays = DisplayAnswers(self.repos.display_cache.get_cached_display_state, s.display_cache_s)
        self.scan_cache = TtlCache(s.reference_cache_s, max_entries=16)
        self.registrations = Coalescer(
            self.repos.live_activities.register_la_sessions,
            max_batch=s.write_batch_max,
            parallel=s.write_parallel,
        )
        self.in_flight = InFlight()
