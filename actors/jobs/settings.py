"""Settings of the background jobs (the ``[jobs]`` section: ``[jobs.fixture_sync]``, ``[jobs.reference_sync]``,
``[jobs.prematch]``). Owned by the jobs package; the ops engineer composes ``JobsSettings`` into the config.

Every field has a default and a description, so an empty ``[jobs]`` section gives the documented behaviour.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class FixtureSyncSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="run the fixture sync job at all")
    near_interval_s: float = Field(
        default=60.0, gt=0, le=86400, description="cadence of the near-window sync (live + upcoming)"
    )
    near_ahead_h: float = Field(
        default=48.0, gt=0, le=720, description="the near window reaches this many hours ahead of now"
    )
    near_behind_h: float = Field(
        default=12.0,
        ge=0,
        le=720,
        description="and this many hours back, so a match that just left /livescores gets its final status",
    )
    include_livescores: bool = Field(
        default=True, description="also take the matches of /livescores in the near window"
    )
    livescores_budget_reserve: int = Field(
        default=300,
        ge=0,
        description="skip the job's own /livescores call while fewer calls than this are left in the hour "
        "(the feed needs that endpoint; the daemon may hand the job the feed's cached view instead)",
    )
    full_interval_s: float = Field(
        default=6 * 3600.0, gt=0, le=7 * 86400, description="cadence of the full sync through /fixtures"
    )
    full_behind_days: int = Field(default=7, ge=0, description="the full sync reaches this many days back")
    full_ahead_days: int = Field(default=90, ge=1, description="and this many days ahead")
    full_chunk_days: int = Field(
        default=7,
        ge=1,
        le=31,
        description="the full sync asks /fixtures one date range of this many days at a time",
    )
    include: list[str] = Field(
        default_factory=lambda: ["league"],
        description="SportMonks includes for /fixtures (league gives the league code for the GSI)",
    )
    retention_days: float = Field(
        default=0.0,
        ge=0,
        le=3650,
        description="set the fixture item's ttl to startTime + this many days; 0 means no ttl",
    )
    backoff_base_s: float = Field(
        default=5.0, gt=0, le=600, description="first retry delay after a failed cycle or chunk"
    )
    backoff_max_s: float = Field(
        default=600.0, gt=0, le=86400, description="longest retry delay after repeated failures"
    )
    max_chunk_failures: int = Field(
        default=8,
        ge=1,
        description="a full-sync chunk failing this many times in a row is skipped until the next full sync, "
        "so one bad range cannot stall the rest",
    )
    hash_cache_size: int = Field(
        default=20000,
        ge=0,
        description="syncHashes remembered in memory so unchanged fixtures cost no DynamoDB read",
    )


class ReferenceSyncSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        default=True, description="run the reference sync job (teams, leagues, team-seasons)"
    )
    interval_s: float = Field(
        default=86400.0, gt=0, le=30 * 86400, description="cadence of the reference sync (daily)"
    )
    active_leagues_cache_s: float = Field(
        default=600.0,
        gt=0,
        le=86400,
        description="how long the list of active leagues read from DynamoDB is reused",
    )
    active_league_ids: list[int] = Field(
        default_factory=list,
        description="leagues created active=true when first synced (admins set `active` afterwards; never overwritten)",
    )
    backoff_base_s: float = Field(
        default=30.0, gt=0, le=600, description="first retry delay after a failed step"
    )
    backoff_max_s: float = Field(
        default=3600.0, gt=0, le=86400, description="longest retry delay after repeated failures"
    )
    max_step_failures: int = Field(
        default=8,
        ge=1,
        description="a step (leagues, teams, one season) failing this many times in a row is left for the next "
        "cycle, so one bad season cannot stall the others",
    )


class PrematchSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="run the prematch notifier")
    interval_s: float = Field(default=60.0, gt=0, le=30 * 86400, description="cadence of the prematch check")
    window_s: float = Field(
        default=1800.0, gt=0, le=86400, description="followers are told when the match starts within this"
    )
    window_s_by_league: dict[str, float] = Field(
        default_factory=dict,
        description="per-league window in seconds, keyed by league code (e.g. T20I = 3600)",
    )
    catch_up_s: float = Field(
        default=600.0,
        ge=0,
        le=86400,
        description="a match that started at most this long ago still gets its notification (downtime catch-up)",
    )
    restart_notify_threshold_s: float = Field(
        default=900.0,
        gt=0,
        le=86400,
        description="a start time moved by more than this notifies the followers again",
    )
    marker_grace_s: float = Field(
        default=3600.0,
        ge=0,
        le=86400,
        description="a prematch marker is ignored once startTime + catch_up_s + this has passed",
    )
    claim_lease_s: float = Field(
        default=120.0,
        gt=0,
        le=3600,
        description="a claim not confirmed within this is taken as a crash, and the alert is sent again "
        "(same apns-collapse-id, so the device shows one)",
    )
    result_timeout_s: float = Field(
        default=30.0, gt=0, le=600, description="how long to wait for the sender's results"
    )
    send_concurrency: int = Field(
        default=8, ge=1, le=64, description="followers handled at once (DynamoDB + sender)"
    )
    batch_size: int = Field(
        default=200, ge=1, le=5000, description="followers handled per batch of one match"
    )
    give_way_s: float = Field(
        default=2.0,
        ge=0,
        le=600,
        description="before each follower, wait while a live fan-out is in progress on this instance, at most "
        "this long (0: never); a wicket's updates go first, and the job still moves under continuous live load",
    )
    live_followers_per_s: float = Field(
        default=100.0,
        ge=0,
        le=100000,
        description="while this instance runs live matches, at most this many followers a second (0: no "
        "bound): between fan-outs a catch-up's DynamoDB calls would otherwise run flat out beside every tick's; "
        "with no match live the job goes as fast as send_concurrency allows",
    )
    match_lock_s: float = Field(
        default=120.0,
        gt=0,
        le=3600,
        description="one instance at a time works through a match's followers: it holds the cricket-locks "
        "lock prematch:{matchId} this long, renewed after every batch; the other instances skip the match "
        "that cycle instead of racing it claim by claim (the claims keep it correct if two ever overlap)",
    )
    settled_recheck_s: float = Field(
        default=60.0,
        ge=0,
        le=3600,
        description="a match whose followers were all told for this start keeps its prematch lock this "
        "long (before the start at most half the time left): the fleet reads its followers, a scan of "
        "every follow of the match, once in that time rather than every instance every cycle; a follower "
        "who comes meanwhile is told after it (0: read every cycle)",
    )
    push_to_start: bool = Field(
        default=True, description="also send a Live Activity push-to-start where the device has a token"
    )
    push_to_start_hold_s: float = Field(
        default=600.0,
        ge=0,
        le=86400,
        description="a follower this job sends a push-to-start is claimed (start:{matchId}:{userId} in "
        "cricket-locks, the match owner's claim) until this long after the match's start: the owner does not "
        "start it again while its activity registers, and one the owner already started gets the alert only",
    )
    ios18_waits_for_channels: bool = Field(
        default=True,
        description="a device on iOS 18 or later gets no push-to-start from this job while the match has no "
        "broadcast channels recorded (its alert still goes): the match's owner starts it on its perspective's "
        "channel once it takes the match, rather than this job starting it on a token for the whole match",
    )
    topic: str = Field(
        default="",
        description="apns-topic (bundle id); empty means the [apns] topic handed in by the supervisor",
    )
    attributes_type: str = Field(
        default="MatchActivityAttributes", description="ActivityKit attributes type for push-to-start"
    )
    unfollowed_memo_size: int = Field(
        default=2000,
        ge=0,
        description="matches nobody follows, remembered so they cost few reads in their window",
    )
    unfollowed_recheck_s: float = Field(
        default=300.0,
        gt=0,
        le=86400,
        description="a match nobody followed is looked at again after this long, then after twice as long "
        "each time, but before the start never after half the time left (a late follower is still notified, "
        "and one who follows inside the window before the start)",
    )
    active_leagues_cache_s: float = Field(
        default=600.0, gt=0, le=86400, description="how long the list of active leagues is reused"
    )
    league_codes: list[str] = Field(
        default_factory=list,
        description="league codes to watch; empty means the active leagues of cricket-leagues",
    )
    backoff_base_s: float = Field(
        default=5.0, gt=0, le=600, description="first retry delay after a failed cycle"
    )
    backoff_max_s: float = Field(
        default=300.0, gt=0, le=86400, description="longest retry delay after repeated failures"
    )

    @model_validator(mode="after")
    def _lease_outlives_results(self) -> PrematchSettings:
        # A claim must not look abandoned while its own results are still awaited, or the same
        # alert would be sent twice by two overlapping cycles.
        if self.claim_lease_s <= self.result_timeout_s:
            raise ValueError(
                f"claim_lease_s ({self.claim_lease_s}) must exceed result_timeout_s ({self.result_timeout_s})"
            )
        return self

    @field_validator("window_s_by_league")
    @classmethod
    def _windows_in_range(cls, value: dict[str, float]) -> dict[str, float]:
        bad = sorted(k for k, v in value.items() if not 0 < v <= 86400)
        if bad:
            raise ValueError(f"a window must be more than 0 and at most 86400 s for {bad}")
        return value

    def window_for(self, league_code: str | None) -> float:
        if league_code is not None and league_code in self.window_s_by_league:
            return self.window_s_by_league[league_code]
        return self.window_s

    @property
    def longest_window_s(self) -> float:
        return max([self.window_s, *self.window_s_by_league.values()])


class JobsSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fixture_sync: FixtureSyncSettings = Field(
        default_factory=FixtureSyncSettings,
        description="FixtureSyncJob: near window every minute, full sync every 6 h",
    )
    reference_sync: ReferenceSyncSettings = Field(
        default_factory=ReferenceSyncSettings, description="teams, leagues and team-seasons, daily"
    )
    prematch: PrematchSettings = Field(
        default_factory=PrematchSettings, description="prematch notifications to the followers of a match"
    )
