"""daemon.store: the DynamoDB data layer.

Every other part of the daemon reads and writes DynamoDB through the repositories here - one per table,
one method per access pattern of the data model - and never through boto3 directly. ``Dynamo`` is the
thread-pooled client shell, ``tables`` the declarative table specs.

Conventions shared by every repository:
- items in and out are plain dicts (numbers come back ``int`` when integral, else ``float``; never Decimal);
- every ``now=`` argument is wall-clock epoch seconds (default: the repository's clock, ``time.time``);
- ``*At`` attributes are ISO-8601 UTC strings; ``ttl``/``expiresAt`` are epoch seconds (numbers);
- a failed condition the data model expects (lock held, match already registered, fence lost, no such
  item) is a ``False``/``None`` result, never an exception; other DynamoDB errors raise botocore's
  ``ClientError``, and a batch that cannot finish by its deadline raises ``BatchIncomplete``;
- reads of a table with a TTL never return expired items.

Usage::

    dynamo = Dynamo(settings.dynamodb)
    repos = Repositories(dynamo)
    lease, _ = await repos.locks.acquire_fenced(match_lock_key(mid), instance_id, lease_s=30)
    if lease is not None:
        ...
"""

from __future__ import annotations

from daemon.store.active_matches import ActiveMatchRepository
from daemon.store.base import Clock
from daemon.store.caches import DisplayStateCacheRepository, FixtureCacheRepository
from daemon.store.devices import DeviceRepository, alert_token
from daemon.store.dynamo import (
    BatchIncomplete,
    CallCounter,
    Dynamo,
    StoreError,
    count_calls,
    is_condition_failed,
)
from daemon.store.fixtures import FixtureRepository
from daemon.store.follows import MatchFollowRepository
from daemon.store.live_activities import LiveActivityRepository, split_visitor_key, visitor_key
from daemon.store.locks import LockRepository, match_lock_key
from daemon.store.reference import LeagueRepository, TeamRepository, TeamSeasonRepository
from daemon.store.settings import DynamoSettings
from daemon.store.tables import TABLE_SPECS, check_tables, create_tables

__all__ = [
    "TABLE_SPECS",
    "ActiveMatchRepository",
    "BatchIncomplete",
    "CallCounter",
    "Clock",
    "DeviceRepository",
    "DisplayStateCacheRepository",
    "Dynamo",
    "DynamoSettings",
    "FixtureCacheRepository",
    "FixtureRepository",
    "LeagueRepository",
    "LiveActivityRepository",
    "LockRepository",
    "MatchFollowRepository",
    "Repositories",
    "StoreError",
    "TeamRepository",
    "TeamSeasonRepository",
    "alert_token",
    "check_tables",
    "count_calls",
    "create_tables",
    "is_condition_failed",
    "match_lock_key",
    "split_visitor_key",
    "visitor_key",
]


class Repositories:
    """One repository per table over one ``Dynamo``; ``clock`` (epoch seconds) is shared by all."""

    def __init__(self, dynamo: Dynamo, *, clock: Clock | None = None) -> None:
        kw = {} if clock is None else {"clock": clock}
        self.dynamo = dynamo
        self.fixtures = FixtureRepository(dynamo, **kw)
        self.live_activities = LiveActivityRepository(dynamo, **kw)
        self.active_matches = ActiveMatchRepository(dynamo, **kw)
        self.teams = TeamRepository(dynamo, **kw)
        self.team_seasons = TeamSeasonRepository(dynamo, **kw)
        self.leagues = LeagueRepository(dynamo, **kw)
        self.devices = DeviceRepository(dynamo, **kw)
        self.follows = MatchFollowRepository(dynamo, **kw)
        self.locks = LockRepository(dynamo, **kw)
        self.display_cache = DisplayStateCacheRepository(dynamo, **kw)
        self.fixture_cache = FixtureCacheRepository(dynamo, **kw)
