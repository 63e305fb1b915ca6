"""What the API's handlers share: ``ApiState``, built once per server from the settings.

The routes reach it through ``daemon.api.routes.deps.api_state``; the layers around the routes are handed
only their parts (the gate its authenticator and buckets, the access log the in-flight counter, the display
fast path the display answers), never the whole state.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from daemon.api.auth import Authenticator, JwksKeys
from daemon.api.cache import TtlCache
from daemon.api.coalesce import Coalescer, KeyedLock
from daemon.api.display import DisplayAnswers
from daemon.api.middleware import InFlight
from daemon.api.ratelimit import RateLimiter
from daemon.api.settings import ApiSettings
from daemon.store import Repositories
from daemon.store.live_activities import SessionRegistration

READINESS_CACHE_S = 1.0


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
    readiness: TtlCache[dict[str, Any]] = field(init=False)
    channel_cache: TtlCache[frozenset[str]] = field(init=False)
    registrations: Coalescer[SessionRegistration, str] = field(init=False)
    user_matches: KeyedLock[tuple[str, str]] = field(init=False)
    in_flight: InFlight = field(init=False)

    def __post_init__(self) -> None:
        s = self.settings
        self.limiter = RateLimiter(s.rate_per_s, s.rate_burst, max_users=s.rate_max_users)
        self.refusals = RateLimiter(s.refused_per_s, s.refused_burst, max_users=s.refused_max_addresses)
        # whether a match exists, for the Live Activity registrations of a match's start (a burst for one id)
        self.match_cache = TtlCache(s.reference_cache_s, max_entries=1000)
        self.displays = DisplayAnswers(self.repos.display_cache.get_cached_display_state, s.display_cache_s)
        self.scan_cache = TtlCache(s.reference_cache_s, max_entries=16)
        # /readyz's checks, for about a second: a probe costs one DynamoDB read a second, whatever asks
        self.readiness = TtlCache(READINESS_CACHE_S, max_entries=1)
        # a match's broadcast channels, for the channel registrations of its start
        self.channel_cache = TtlCache(s.reference_cache_s, max_entries=1000)
        self.registrations = Coalescer(
            functools.partial(
                self.repos.live_activities.register_owned_sessions, per_user=s.max_sessions_per_match
            ),
            max_batch=s.write_batch_max,
            parallel=s.write_parallel,
        )
        self.user_matches = KeyedLock()
        self.in_flight = InFlight()
