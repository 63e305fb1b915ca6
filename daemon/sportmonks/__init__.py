"""daemon.sportmonks: the SportMonks cricket v2.0 client, its response models, call budget and breaker.

Only ``actors.feed`` (live data) and the sync jobs (schedule and reference data) use the client; match actors
get their fixtures from the feed, never from here.
"""

from daemon.sportmonks.breaker import CircuitBreaker
from daemon.sportmonks.budget import CallBudget
from daemon.sportmonks.client import (
    DEFAULT_FIXTURE_INCLUDE,
    DEFAULT_LIVE_INCLUDE,
    DEFAULT_SCHEDULE_INCLUDE,
    LiveScores,
    SportMonksClient,
)
from daemon.sportmonks.errors import (
    BreakerOpen,
    BudgetExhausted,
    MalformedPayload,
    ResponseTooLarge,
    SportMonksError,
    SportMonksHTTPError,
    SportMonksUnavailable,
)
from daemon.sportmonks.settings import FeedSettings, SportMonksSettings

__all__ = [
    "DEFAULT_FIXTURE_INCLUDE",
    "DEFAULT_LIVE_INCLUDE",
    "DEFAULT_SCHEDULE_INCLUDE",
    "BreakerOpen",
    "BudgetExhausted",
    "CallBudget",
    "CircuitBreaker",
    "FeedSettings",
    "LiveScores",
    "MalformedPayload",
    "ResponseTooLarge",
    "SportMonksClient",
    "SportMonksError",
    "SportMonksHTTPError",
    "SportMonksSettings",
    "SportMonksUnavailable",
]
