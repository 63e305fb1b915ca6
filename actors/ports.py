"""The Protocols actors use of the layers around them and of each other: each actor's constructor names its
dependencies by what it needs of them, the runtime (``daemon.runtime.assembly``) hands in the concrete parts
(the repositories of ``daemon.store``, the SportMonks client, the sender, the feed, the supervisor), and tests
hand in the shared doubles of ``tests/doubles.py`` or the real thing. A Protocol lists only what actors call:
the store's repositories have more.

Where a Protocol lives (docs/architecture.md states the same rule):
- here, every Protocol an actor uses of something it does not own: a table of the store, the SportMonks
  client, the APNs sender, the feed, the supervisor, or another actor;
- next to its owner, a Protocol one part of an actor uses of a sibling part that the same owner builds and
  hands in (``actors.match_starts.StartChannels``: what a match's push-to-starts need of its broadcasts).

Where one Protocol is another plus a few methods it extends it (``MatchStateStore`` is ``ActiveMatchReads``
and the owner's fenced writes), so each signature is written once. Types only: no behaviour here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import trio

from daemon.apns import broadcast
from daemon.apns.types import Push
from daemon.store.caches import CacheEntry, CachePut, LivescoresSummary, RegionStamps
from daemon.store.locks import HotList, Lease

if TYPE_CHECKING:
    from actors.feed import FeedUpdate, PollSummary

Item = dict[str, Any]


# --- supervision -------------------------------------------------------------------------------------------


class Actor(Protocol):
    """Anything the supervisor runs: ``run`` reports ready through ``task_status`` and runs until done (the
    supervisor takes whatever value it reports, hence ``object``: an actor may say ``started(port)``)."""

    async def run(self, *, task_status: trio.TaskStatus[object] = trio.TASK_STATUS_IGNORED) -> None: ...


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


class RegionJob(Actor, Protocol):
    """A job run once per region under its lease (``actors.jobs.lease.LeasedJob``). It carries its schedule
    across holders (``schedule_state``: None for a job that keeps none; ``adopt_schedule``: what the last
    holder left) and says how it is doing (``stats``)."""

    def schedule_state(self) -> Mapping[str, Any] | None: ...

    def adopt_schedule(self, state: Mapping[str, Any]) -> None: ...

    def stats(self) -> Mapping[str, Any]: ...


class Described(Protocol):
    """A part that says how it is doing, for ``ctl`` (the jobs, the feed's parts)."""

    def describe(self) -> Mapping[str, Any]: ...


class DescribedActor(Actor, Described, Protocol):
    """An actor ``ctl`` asks how it is doing (the daemon's jobs)."""


# --- the sender ---------------------------------------------------------------------------------------------


class PushSender(Protocol):
    """The shared APNs sender as producers use it: pushes in (bounded: it waits while its inbox is full),
    results back on each push's ``reply_to``."""

    async def send(self, push: Push) -> None: ...

    async def send_many(self, pushes: list[Push]) -> None: ...


class ChannelRequests(Protocol):
    """Channel management (create, read, list, delete broadcast channels): one request, its parsed answer
    (``broadcast.parse_answer``: a channel id, a ``ChannelInfo``, a list of ids or None, by operation)."""

    async def request(self, req: broadcast.Request) -> Any: ...


# --- SportMonks ---------------------------------------------------------------------------------------------


class HourlyBudget(Protocol):
    """The client's calls left this hour per endpoint (``daemon.sportmonks.budget.CallBudget``)."""

    def remaining(self, endpoint: str) -> int: ...


class FixturesClient(Protocol):
    """The SportMonks client as the fixture sync calls it."""

    @property
    def budget(self) -> HourlyBudget: ...

    async def fixtures(
        self, *, filters: Mapping[str, str] = ..., include: Sequence[str] = ..., sort: str | None = ...
    ) -> list[dict[str, Any]]: ...

    async def livescores(self, include: Sequence[str] = ...) -> list[dict[str, Any]]: ...


class ReferenceClient(Protocol):
    """The SportMonks client as the reference sync calls it."""

    async def teams(self, include: Sequence[str] = ...) -> list[dict[str, Any]]: ...

    async def leagues(self, include: Sequence[str] = ...) -> list[dict[str, Any]]: ...

    async def season(self, season_id: int | str, include: Sequence[str] = ...) -> dict[str, Any]: ...


# --- the feed -----------------------------------------------------------------------------------------------


class FixtureSource(Protocol):
    """What a match actor needs to get its fixture each tick: the feed (in process on the leader, from the
    region's cache elsewhere)."""

    def subscribe(self, match_id: str, *, marquee: bool) -> trio.MemoryReceiveChannel[FeedUpdate]: ...

    def unsubscribe(self, match_id: str) -> None: ...


class Livescores(Protocol):
    """The region's latest ``/livescores`` as the feed serves it (its own poll, or the leader's summary)."""

    async def livescores(self, *, max_age_s: float | None = None) -> list[dict[str, Any]]: ...


class LiveFeed(Livescores, Protocol):
    """What the orchestrator asks of the feed: what is live, and what it has let go."""

    def is_released(self, match_id: str) -> bool: ...


class NotFoundVerdicts(Protocol):
    """The feed's 404 verdicts handed in from the region's leader (``FeedActor.adopt_not_found``)."""

    def adopt_not_found(self, state: Mapping[str, Any] | None, *, to_wall: float) -> list[str]: ...


class RegionFeed(NotFoundVerdicts, Protocol):
    """The feed as one member of the region's fleet: whether it polls for the region now."""

    @property
    def leading(self) -> bool: ...


class FollowerFeed(RegionFeed, Protocol):
    """The feed as the cache reader serves it where another instance leads."""

    def local_subscriptions(self) -> dict[str, bool]: ...

    def cadence_for(self, *, marquee: bool) -> float: ...

    def offer_cached(self, update: FeedUpdate) -> bool: ...


class LeaderFeed(RegionFeed, Protocol):
    """The feed as the region's leadership switches it: polling or not, for which matches, with the region's
    call record."""

    @property
    def budget(self) -> RegionBudget: ...

    def set_leading(self, leading: bool) -> None: ...

    def set_region_matches(self, wanted: Mapping[str, bool]) -> None: ...


class RegionBudget(HourlyBudget, Protocol):
    """The region's SportMonks call record, handed from leader to leader (``CallBudget.export``/``seed``)."""

    def export(self, *, to_wall: float) -> dict[str, list[list[float]]]: ...

    def seed(
        self, record: Mapping[str, list[list[float]]], *, to_wall: float, recorded_at: float
    ) -> None: ...


class FixtureCache(Protocol):
    """Where the leading feed writes what its polls changed (``actors.feed_leader.FencedFixtureCache``)."""

    async def put_poll(self, puts: Sequence[CachePut], summary: PollSummary | None) -> None:
        """A poll's changed fixtures and its ``/livescores`` summary (None when the poll left none), in one
        write: a reader that sees the summary sees the fixtures."""
        ...


class LeaderSummaries(Protocol):
    """The leader's ``/livescores`` summary as a follower's feed reads it
    (``actors.cache_reader.LeaderSummary``)."""

    async def livescores(
        self, max_age_s: float, *, reread_after_s: float, adopt: NotFoundVerdicts
    ) -> list[dict[str, Any]]: ...


# --- the store: cricket-locks -------------------------------------------------------------------------------


class LeaseStore(Protocol):
    """The lock operations a lease needs (``daemon.store.locks.LockRepository``)."""

    async def acquire_fenced(
        self, lock_key: str, owner: str, lease_s: float, *, fields: dict[str, Any] | None = None
    ) -> tuple[Lease | None, dict[str, Any] | None]: ...

    async def extend_fenced(
        self, lease: Lease, lease_s: float, *, fields: dict[str, Any] | None = None
    ) -> Lease | None: ...

    async def release_fenced(self, lease: Lease) -> bool: ...


class LeaseConditions(Protocol):
    """A lease as a transaction's ConditionCheck (``LockRepository.lease_condition``)."""

    def lease_condition(self, lease: Lease) -> dict[str, Any]: ...


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


class ShareBoards(Protocol):
    """``cricket-locks`` as a hot match's shared fan-out uses it: the region's hot list, each hot match's
    board, its shards' items, and the match lock as a helper reads it to confirm the owner it delivers for."""

    async def get_hot_list(self, region: str) -> HotList: ...

    async def say_helping(
        self, region: str, helper: str, *, until: float, stale: dict[str, float] | None = None
    ) -> bool: ...

    async def stop_helping(self, region: str, helper: str) -> None: ...

    async def put_hot_match(self, region: str, match_id: str, *, owner: str, epoch: int) -> bool: ...

    async def remove_hot_match(self, region: str, match_id: str, *, epoch: int) -> bool: ...

    async def publish_share_board(
        self, match_id: str, lane: str, board: dict[str, Any], *, lease_epoch: int, ttl_s: float
    ) -> bool: ...

    async def get_share_boards(
        self, match_ids: Collection[str], lanes: Sequence[str]
    ) -> dict[tuple[str, str], Item]: ...

    async def remove_share_board(self, match_id: str, lane: str, *, lease_epoch: int) -> bool: ...

    async def get_shards(self, keys: Sequence[str]) -> dict[str, Item]: ...

    async def read(self, lock_key: str) -> Item | None: ...


class ShardLocks(LeaseStore, ShareBoards, StartClaims, Protocol):
    """``cricket-locks`` as an engine delivering shards uses it: the shards' leases, the boards, and the
    push-to-start claims of a round of starts."""


class LeaseAndClaims(LeaseStore, StartClaims, ShareBoards, Protocol):
    """``cricket-locks`` as a match's owner uses it: its lease, its followers' push-to-start claims and, when
    the match is hot, its shared fan-out's items."""


class PrematchLocks(StartClaims, Protocol):
    """``cricket-locks`` as the prematch job uses it: the per-match prematch lock (plain, not fenced) and the
    followers' push-to-start claims."""

    async def acquire(self, lock_key: str, owner: str, lease_s: float) -> bool: ...

    async def extend(self, lock_key: str, owner: str, lease_s: float) -> bool: ...

    async def release(self, lock_key: str, owner: str) -> bool: ...


# --- the store: active-matches ------------------------------------------------------------------------------


class ActiveMatchReads(Protocol):
    """``active-matches`` read: one match's record, or all of them."""

    async def get_active_match_state(self, match_id: str) -> Item | None: ...

    async def get_all_active_matches(self) -> list[Item]: ...


class MatchStateStore(ActiveMatchReads, Protocol):
    """``active-matches`` as a match's owner writes it: every write fenced on owner and epoch."""

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


class MatchRegistry(ActiveMatchReads, Protocol):
    """``active-matches`` as the orchestrator takes matches."""

    async def register_active_match(
        self, match_id: str, instance_id: str, *, fields: Mapping[str, Any] | None = None
    ) -> bool: ...

    async def claim_active_match(self, match_id: str, instance_id: str) -> int | None: ...

    async def reopen_ended_match(self, match_id: str, instance_id: str) -> int | None: ...

    async def mark_follows_removed(self, match_id: str, ended_at: str) -> bool: ...


# --- the store: cricket-fixtures ----------------------------------------------------------------------------


class FixtureBatchReads(Protocol):
    async def batch_get_fixtures(self, match_ids: Iterable[str]) -> dict[str, Item]: ...


class FixtureFieldWrites(Protocol):
    async def update_fixture_fields(self, match_id: str, fields: Mapping[str, Any]) -> bool: ...


class ChannelRecords(FixtureBatchReads, Protocol):
    """``cricket-fixtures`` as a match's broadcast channels are recorded on it (``actors.channels``)."""

    async def get_fixture(self, match_id: str) -> Item | None: ...

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


class FixtureStore(ChannelRecords, FixtureFieldWrites, Protocol):
    """``cricket-fixtures`` as a match's owner reads and writes it: its live fields and broadcast channels."""


class FixtureSyncStore(FixtureBatchReads, FixtureFieldWrites, Protocol):
    """``cricket-fixtures`` as the fixture sync writes it."""

    async def batch_write_fixtures(self, items: Iterable[Mapping[str, Any]]) -> None: ...


class FixtureArchive(FixtureFieldWrites, Protocol):
    """``cricket-fixtures`` as the reconciler archives a fixture that left ``/livescores``."""

    async def archive_fixture(self, match_id: str) -> bool: ...


class ScheduleStore(Protocol):
    """``cricket-fixtures`` by league and date."""

    async def get_matches_by_date_range(self, league_code: str, from_iso: str, to_iso: str) -> list[Item]: ...


# --- the store: cricket-fixture-cache -----------------------------------------------------------------------


class SummaryReads(Protocol):
    """The region's ``/livescores`` summary and the feed state written with it."""

    async def get_livescores_summary_and_state(
        self, region: str
    ) -> tuple[list[dict[str, Any]], float, dict[str, Any]] | None: ...


class CacheReads(Protocol):
    """The cached fixtures as a follower reads them: the change stamps (with the region's verdicts and last
    poll), then the entries that moved."""

    async def batch_get_region_stamps(self, match_ids: Iterable[str], region: str) -> RegionStamps: ...

    async def batch_get_entries(self, match_ids: Iterable[str]) -> dict[str, CacheEntry]: ...


class FencedCacheWrites(Protocol):
    """A poll's fixtures and summary written beside the feed lease's ConditionCheck."""

    async def put_fixtures_fenced(
        self,
        puts: Sequence[CachePut],
        condition: Callable[[], dict[str, Any]],
        epoch: int,
        *,
        summary: LivescoresSummary | None = None,
    ) -> int: ...


# --- the store: the rest -----------------------------------------------------------------------------------


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


class DeviceCleanup(Protocol):
    """``cricket-devices`` as a rejected token is cleaned from it."""

    async def clear_push_to_start_token(
        self, user_id: str, device_token: str, *, expected_token: str | None = None
    ) -> bool: ...

    async def delete_device(self, user_id: str, device_token: str) -> Item | None: ...


class SessionSuspension(Protocol):
    async def suspend_la_session(self, match_id: str, visitor_key: str) -> bool: ...


class DisplayStore(Protocol):
    """``DisplayStateCache``: every perspective's display state, for the app's API."""

    async def set_cached_display_state(
        self, match_id: str, team_id: str, display_state: Mapping[str, Any], *, ttl_s: float
    ) -> None: ...


class FollowRemoval(Protocol):
    async def remove_all_follows_for_match(self, match_id: str) -> int: ...


class ActiveLeagues(Protocol):
    """``cricket-leagues`` read: the active leagues, or all of them."""

    async def get_active_leagues(self) -> list[Item]: ...

    async def get_all_leagues(self) -> list[Item]: ...


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


# --- the tables each actor is handed (``daemon.store.Repositories`` has them all) ---------------------------


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
    def locks(self) -> LeaseAndClaims: ...


class HelperStores(AudienceStore, Protocol):
    """What an engine delivering other engines' hot matches' shards reads and writes: each match's sessions
    and followers, the followers' devices, and ``cricket-locks``."""

    @property
    def devices(self) -> DeviceStore: ...

    @property
    def locks(self) -> ShardLocks: ...


class TokenCleanup(Protocol):
    """The tables a rejected token is cleaned from (the janitor)."""

    @property
    def devices(self) -> DeviceCleanup: ...

    @property
    def live_activities(self) -> SessionSuspension: ...


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
    def locks(self) -> LeaseStore: ...


class ReconcilerStores(Protocol):
    @property
    def active_matches(self) -> ActiveMatchReads: ...

    @property
    def fixtures(self) -> FixtureArchive: ...


class FeedLeaderStores(Protocol):
    """The feed leadership: the region's active matches, the summary the last leader left."""

    @property
    def active_matches(self) -> ActiveMatchReads: ...

    @property
    def fixture_cache(self) -> SummaryReads: ...


class FencedCacheStores(Protocol):
    """The fenced cache writes: the cache, and the lock whose ConditionCheck rides with each write."""

    @property
    def fixture_cache(self) -> FencedCacheWrites: ...

    @property
    def locks(self) -> LeaseConditions: ...


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
