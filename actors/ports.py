"""The Protocols actors use of the layers around them: each actor's constructor names its dependencies by what
it needs of them, the runtime (``daemon.runtime.assembly``) hands in the concrete parts (the repositories of
``daemon.store``, the sender, the feed), and tests hand in the shared doubles of ``tests/doubles.py`` or the
real thing. A Protocol lists only what actors call: the store's repositories have more.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import trio

from daemon.apns import broadcast
from daemon.apns.types import Push
from daemon.store.locks import Lease

if TYPE_CHECKING:
    from actors.feed import FeedUpdate

Item = dict[str, Any]


# --- supervision -------------------------------------------------------------------------------------------


class Actor(Protocol):
    """Anything the supervisor runs: ``run`` reports ready through ``task_status`` and runs until done."""

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None: ...


class Supervision(Protocol):
    """What the orchestrator asks of the supervisor that runs its match actors (``daemon.runtime.supervisor``)."""

    async def start(
        self,
        name: str,
        factory: Callable[[], Actor],
        *,
        kind: str = ...,
        normal_exits: tuple[type[BaseException], ...] = ...,
        on_give_up: Callable[[str, BaseException], Awaitable[None]] | None = ...,
        on_exit: Callable[[str], Awaitable[None]] | None = ...,
    ) -> None: ...

    async def stop_and_wait(self, name: str) -> None: ...

    def actor(self, name: str) -> Actor | None: ...


# --- the sender ----------------------------------------------------------------------------------------------


class PushSender(Protocol):
    """The shared APNs sender as producers use it: pushes in (bounded: it waits while its inbox is full),
    results back on each push's ``reply_to``."""

    async def send(self, push: Push) -> None: ...

    async def send_many(self, pushes: list[Push]) -> None: ...


class ChannelRequests(Protocol):
    """Channel management (create, read, list, delete broadcast channels): one request, its parsed answer."""

    async def request(self, req: broadcast.Request) -> Any: ...


# --- the feed ------------------------------------------------------------------------------------------------


class FixtureSource(Protocol):
    """What a match actor needs to get its fixture each tick: the feed (in process on the leader, from the
    region's cache elsewhere)."""

    def subscribe(self, match_id: str, *, marquee: bool) -> trio.MemoryReceiveChannel[FeedUpdate]: ...

    def unsubscribe(self, match_id: str) -> None: ...


# --- the store -----------------------------------------------------------------------------------------------


class LeaseStore(Protocol):
    """The lock operations a lease needs (``daemon.store.locks.LockRepository``)."""

    async def acquire_fenced(
        self, lock_key: str, owner: str, lease_s: float, *, fields: dict[str, Any] | None = None
    ) -> tuple[Lease | None, dict[str, Any] | None]: ...

    async def extend_fenced(
        self, lease: Lease, lease_s: float, *, fields: dict[str, Any] | None = None
    ) -> Lease | None: ...

    async def release_fenced(self, lease: Lease) -> bool: ...


class StartClaims(Protocol):
    """The push-to-start claims per follower and match (``cricket-locks``), shared by the match's owner and the
    prematch job."""

    async def claim_push_to_starts(
        self,
        match_id: str,
        user_ids: Sequence[str],
        *,
        owner: str,
        hold_s: float,
        now: float | None = None,
        force: Collection[str] = (),
    ) -> list[str]: ...

    async def confirm_push_to_starts(
        self, match_id: str, user_ids: Sequence[str], *, owner: str, hold_s: float, now: float | None = None
    ) -> int: ...

    async def release_push_to_starts(self, match_id: str, user_ids: Sequence[str], *, owner: str) -> int: ...


class MatchLocks(LeaseStore, StartClaims, Protocol):
    """``cricket-locks`` as a match actor uses it: its lease and its followers' push-to-start claims."""


class MatchStateStore(Protocol):
    """``active-matches`` as a match's owner writes it: every write fenced on owner and epoch."""

    async def get_active_match_state(self, match_id: str) -> Item | None: ...

    async def get_all_active_matches(self) -> list[Item]: ...

    async def update_match_state(
        self, match_id: str, instance_id: str, epoch: int, state: Mapping[str, Any]
    ) -> bool: ...

    async def move_alert_watermark(
        self, match_id: str, instance_id: str, epoch: int, handed: str
    ) -> bool: ...

    async def clear_alert_intent(self, match_id: str, instance_id: str, epoch: int) -> bool: ...

    async def deactivate_match(
        self, match_id: str, instance_id: str, epoch: int, *, ttl_s: float
    ) -> bool: ...

    async def release_match(self, match_id: str, instance_id: str, epoch: int, *, ttl_s: float) -> bool: ...


class SessionStore(Protocol):
    """``live-activities`` by match."""

    async def get_all_la_sessions_for_match(
        self, match_id: str, *, fields: Sequence[str] | None = None
    ) -> list[Item]: ...

    async def end_la_sessions(
        self, match_id: str, sessions: list[Item], end_reason: str, *, ttl_s: float | None = None
    ) -> int: ...


class FollowerStore(Protocol):
    """``follows`` by match."""

    async def get_followers_for_match(
        self, match_id: str, *, fields: Sequence[str] | None = None
    ) -> list[Item]: ...


class DeviceStore(Protocol):
    """``cricket-devices``: the devices of followers."""

    async def get_devices_of_users(
        self, users: Iterable[str], named: Mapping[str, str], *, concurrency: int, now: float | None = None
    ) -> dict[str, Item]: ...


class FixtureStore(Protocol):
    """``cricket-fixtures`` as a match's owner reads and writes it: its live fields, its broadcast channels."""

    async def get_fixture(self, match_id: str) -> Item | None: ...

    async def batch_get_fixtures(self, match_ids: Iterable[str]) -> dict[str, Item]: ...

    async def update_fixture_fields(self, match_id: str, fields: Mapping[str, Any]) -> bool: ...

    async def swap_broadcast_channels(
        self,
        match_id: str,
        old: Mapping[str, str] | None,
        new: Mapping[str, str] | None,
        *,
        claim: Mapping[str, Any] | None = None,
    ) -> bool: ...

    async def claim_broadcast_channels(
        self, match_id: str, recorded: Mapping[str, str] | None, claim: Mapping[str, Any] | None
    ) -> bool: ...


class DisplayStore(Protocol):
    """``DisplayStateCache``: every perspective's display state, for the app's API."""

    async def set_cached_display_state(
        self, match_id: str, team_id: str, display_state: Mapping[str, Any], *, ttl_s: float
    ) -> None: ...


class AudienceStore(Protocol):
    """What a match's audience reads: its sessions and its followers."""

    @property
    def live_activities(self) -> SessionStore: ...

    @property
    def follows(self) -> FollowerStore: ...


class MatchStore(AudienceStore, Protocol):
    """Every table a match actor (with its starts and channels) reads or writes."""

    @property
    def active_matches(self) -> MatchStateStore: ...

    @property
    def fixtures(self) -> FixtureStore: ...

    @property
    def display_cache(self) -> DisplayStore: ...

    @property
    def devices(self) -> DeviceStore: ...

    @property
    def locks(self) -> MatchLocks: ...


class ChannelRecords(Protocol):
    """``cricket-fixtures`` as a match's channels are recorded on it (``actors.channels``)."""

    async def get_fixture(self, match_id: str) -> Item | None: ...

    async def batch_get_fixtures(self, match_ids: Iterable[str]) -> dict[str, Item]: ...

    async def swap_broadcast_channels(
        self,
        match_id: str,
        old: Mapping[str, str] | None,
        new: Mapping[str, str] | None,
        *,
        claim: Mapping[str, Any] | None = None,
    ) -> bool: ...

    async def claim_broadcast_channels(
        self, match_id: str, recorded: Mapping[str, str] | None, claim: Mapping[str, Any] | None
    ) -> bool: ...


# --- what the janitor cleans ---------------------------------------------------------------------------------


class TokenCleanup(Protocol):
    """The tables a rejected token is cleaned from."""

    @property
    def devices(self) -> DeviceCleanup: ...

    @property
    def live_activities(self) -> SessionSuspension: ...


class DeviceCleanup(Protocol):
    async def clear_push_to_start_token(
        self, user_id: str, device_token: str, *, expected_token: str | None = None
    ) -> bool: ...

    async def delete_device(self, user_id: str, device_token: str) -> Item | None: ...


class SessionSuspension(Protocol):
    async def suspend_la_session(self, match_id: str, visitor_key: str) -> bool: ...


# --- the orchestrator ----------------------------------------------------------------------------------------


class LiveFeed(Protocol):
    """What the orchestrator asks of the feed: what is live, and what it has let go."""

    async def livescores(self, *, max_age_s: float | None = None) -> list[dict[str, Any]]: ...

    def is_released(self, match_id: str) -> bool: ...


class MatchRegistry(Protocol):
    """``active-matches`` as the orchestrator takes matches."""

    async def get_active_match_state(self, match_id: str) -> Item | None: ...

    async def get_all_active_matches(self) -> list[Item]: ...

    async def register_active_match(
        self, match_id: str, instance_id: str, *, fields: Mapping[str, Any] | None = None
    ) -> bool: ...

    async def claim_active_match(self, match_id: str, instance_id: str) -> int | None: ...

    async def reopen_ended_match(self, match_id: str, instance_id: str) -> int | None: ...

    async def mark_follows_removed(self, match_id: str, ended_at: str) -> bool: ...


class ScheduleStore(Protocol):
    """``cricket-fixtures`` by league and date."""

    async def get_matches_by_date_range(self, league_code: str, from_iso: str, to_iso: str) -> list[Item]: ...


class FollowRemoval(Protocol):
    async def remove_all_follows_for_match(self, match_id: str) -> int: ...


class ActiveLeagues(Protocol):
    async def get_active_leagues(self) -> list[Item]: ...

    async def get_all_leagues(self) -> list[Item]: ...


class MatchLock(LeaseStore, Protocol):
    """``cricket-locks`` as the orchestrator takes and lets go of match locks."""

    async def release(self, lock_key: str, owner: str) -> bool: ...


class OrchestratorStore(Protocol):
    @property
    def active_matches(self) -> MatchRegistry: ...

    @property
    def fixtures(self) -> ScheduleStore: ...

    @property
    def follows(self) -> FollowRemoval: ...

    @property
    def leagues(self) -> ActiveLeagues: ...

    @property
    def locks(self) -> MatchLock: ...


# --- the region jobs -----------------------------------------------------------------------------------------


class LeagueStore(ActiveLeagues, Protocol):
    """``cricket-leagues`` as the reference sync writes it."""

    async def put_league(self, item: Mapping[str, Any]) -> None: ...

    async def update_league_fields(self, league_id: str, fields: Mapping[str, Any]) -> bool: ...


class TeamStore(Protocol):
    async def get_team(self, team_id: str) -> Item | None: ...

    async def get_all_teams(self) -> list[Item]: ...

    async def batch_write_teams(self, items: Iterable[Mapping[str, Any]]) -> None: ...

    async def update_team_fields(self, team_id: str, fields: Mapping[str, Any]) -> bool: ...


class TeamSeasonStore(Protocol):
    async def get_teams_for_season(self, season_id: str) -> list[Item]: ...

    async def write_season_team_records(self, items: Iterable[Mapping[str, Any]]) -> None: ...


class FixtureSyncStore(Protocol):
    """``cricket-fixtures`` as the fixture sync writes it."""

    async def batch_get_fixtures(self, match_ids: Iterable[str]) -> dict[str, Item]: ...

    async def batch_write_fixtures(self, items: Iterable[Mapping[str, Any]]) -> None: ...

    async def update_fixture_fields(self, match_id: str, fields: Mapping[str, Any]) -> bool: ...


class FixtureSyncStores(Protocol):
    @property
    def fixtures(self) -> FixtureSyncStore: ...

    @property
    def leagues(self) -> ActiveLeagues: ...


class ReferenceStores(Protocol):
    @property
    def leagues(self) -> LeagueStore: ...

    @property
    def teams(self) -> TeamStore: ...

    @property
    def team_seasons(self) -> TeamSeasonStore: ...


class PrematchFollows(Protocol):
    """``follows`` as the prematch job claims, sends and confirms its notifications."""

    async def get_prematch_pending(
        self, match_id: str, *, start_epoch: float, threshold_s: float, now: float | None = None
    ) -> list[Item]: ...

    async def has_followers(self, match_id: str, *, now: float | None = None) -> bool: ...

    async def claim_prematch(
        self,
        match_id: str,
        user_id: str,
        *,
        start_iso: str,
        start_epoch: float,
        now: float,
        threshold_s: float,
        expires_at: float,
        settled: str | None = None,
    ) -> int | None: ...

    async def reclaim_prematch(
        self, match_id: str, user_id: str, *, seen_ms: int | None, now: float
    ) -> int | None: ...

    async def confirm_prematch(
        self, match_id: str, user_id: str, *, claimed_ms: int, result: str
    ) -> bool: ...


class PrematchDevices(DeviceStore, DeviceCleanup, Protocol):
    """``cricket-devices`` as the prematch job reads and cleans them."""


class PrematchLocks(StartClaims, Protocol):
    """``cricket-locks``: the per-match prematch lock and the followers' push-to-start claims."""

    async def acquire(self, lock_key: str, owner: str, lease_s: float) -> bool: ...

    async def extend(self, lock_key: str, owner: str, lease_s: float) -> bool: ...

    async def release(self, lock_key: str, owner: str) -> bool: ...


class PrematchStores(Protocol):
    @property
    def follows(self) -> PrematchFollows: ...

    @property
    def devices(self) -> PrematchDevices: ...

    @property
    def fixtures(self) -> ScheduleStore: ...

    @property
    def locks(self) -> PrematchLocks: ...

    @property
    def teams(self) -> TeamStore: ...

    @property
    def leagues(self) -> ActiveLeagues: ...
