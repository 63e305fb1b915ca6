"""Settings of the orchestrator (``[orchestrator]``) and of match actors (``[match]``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class OrchestratorSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cycle_s: float = Field(
        30.0, gt=0, le=3600, description="how often live matches are reconciled (and at start-up)"
    )
    lease_s: float = Field(
        10.0, gt=0, le=600, description="lock lease on a match; a dead owner's match moves after it"
    )
    renew_fraction: float = Field(
        1 / 4,
        gt=0,
        le=0.5,
        description="renew the lease every lease_s * renew_fraction, sooner when DynamoDB answers slowly: a "
        "renewal sent then still lands inside the lease when its answer takes most of the rest (2.5 s and 6.5 "
        "s with the 10 s lease and 1 s skew bound)",
    )
    clock_skew_bound_s: float = Field(
        1.0,
        ge=0,
        le=60,
        description="the most two instances' clocks may disagree; an owner stops pushing this long before "
        "its lease ends by its own clock, so a new owner (whose clock may be ahead) never overlaps it",
    )
    max_restarts: int = Field(
        5, ge=0, description="restarts of one match actor allowed within restart_window_s"
    )
    restart_window_s: float = Field(60.0, gt=0, le=86400)
    quarantine_s: float = Field(
        120.0,
        ge=0,
        le=86400,
        description="a match whose actor exhausted its restarts is left alone this long by this instance, so "
        "another instance may try it (a crash loop here is a bug, logged loudly; not an outage)",
    )
    restart_backoff_s: float = Field(
        1.0, ge=0, le=600, description="pause before restarting a crashed match actor"
    )
    max_matches: int = Field(64, ge=1, description="matches one instance takes at most")
    fixture_lookback_s: float = Field(
        12 * 3600,
        ge=0,
        le=7 * 86400,
        description="cricket-fixtures: matches that started this long ago may still be live",
    )
    prestart_s: float = Field(
        900.0,
        ge=0,
        le=86400,
        description="a fixture starting within this many seconds is taken before it goes live, so its first "
        "balls are diffed against the pre-match state (a match picked up mid-way reports no history)",
    )
    live_statuses: list[str] = Field(
        default_factory=lambda: [
            "1st Innings",
            "2nd Innings",
            "3rd Innings",
            "4th Innings",
            "Innings Break",
            "Int.",
            "Stump Day 1",
            "Stump Day 2",
            "Stump Day 3",
            "Stump Day 4",
            "Delayed",
        ],
        description="fixture statuses that mean the match is in progress",
    )
    ended_ttl_s: int = Field(48 * 3600, gt=0, description="TTL of an ended active-matches record")
    follows_grace_s: float = Field(
        1800.0,
        ge=0,
        le=47 * 3600,
        description="an ended match's follows are removed once its end has stood this long and the feed does "
        "not show it live (a match ended wrongly and taken again re-starts its followers' Live Activities)",
    )

    @property
    def renew_every_s(self) -> float:
        return self.lease_s * self.renew_fraction

    @model_validator(mode="after")
    def _skew_fits_in_lease(self) -> OrchestratorSettings:
        if self.clock_skew_bound_s + self.renew_every_s >= self.lease_s:
            raise ValueError("clock_skew_bound_s + lease_s * renew_fraction must be below lease_s")
        return self


class MatchActorSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session_refresh_s: float = Field(
        15.0,
        gt=0,
        le=3600,
        description="how often the actor re-reads the match's Live Activity sessions, on average: each pause "
        "is spread within 15% either side (the first after the load falls in its second half), so matches "
        "taken together do not re-read together",
    )
    session_refresh_items_per_s: float = Field(
        250.0,
        gt=0,
        le=10_000_000,
        description="a big match re-reads its sessions no faster than this many per second on average "
        "(10,000 sessions: every 40 s); reading and decoding a session costs ~50 us of CPU",
    )
    follower_refresh_s: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="how often the actor re-reads the match's followers (their team picks the perspective; "
        "a follower without a session gets a push-to-start)",
    )
    heal_every_s: float = Field(
        30.0, gt=0, le=3600, description="how often followers without an active session get a push-to-start"
    )
    push_to_start_min_interval_s: float = Field(
        600.0,
        ge=0,
        le=86400,
        description="per device: at most one push-to-start per this interval (self-healing)",
    )
    dismissal_after_s: int = Field(
        900, ge=0, description="after match end the Live Activity stays on the Lock Screen this long"
    )
    display_cache_ttl_s: int = Field(3600, gt=0, description="TTL of DisplayStateCache entries")
    session_ttl_after_end_s: int = Field(48 * 3600, gt=0, description="TTL of ended live-activities records")
    push_result_timeout_s: float = Field(
        60.0,
        gt=0,
        le=600,
        description="a tick's pushes still unanswered when no result at all has come back for this long are "
        "sent again (the sender lost them, e.g. it was restarted); a queue that is moving is waited for",
    )
    push_retry_max_s: float = Field(
        900.0,
        gt=0,
        le=3600,
        description="a tick whose pushes failed (APNs down past the sender's retries) is re-sent, same payload "
        "and timestamp, for up to this long before it is given up; its state is persisted only after",
    )
    push_retry_backoff_max_s: float = Field(
        30.0, gt=0, le=600, description="cap of the backoff between such re-sends"
    )
    alert_chunk_first: int = Field(
        16,
        ge=1,
        description="an alerting tick hands its sessions to the sender in chunks, each after a DynamoDB write "
        "of its watermark: the first chunk's size (an owner dying mid fan-out leaves at most the chunk in "
        "flight uncertain; those sessions get the update without its alert from the next owner)",
    )
    alert_chunk_max: int = Field(
        2048, ge=1, description="chunks double from alert_chunk_first up to this size"
    )
    heal_chunk: int = Field(
        100,
        ge=1,
        le=4096,
        description="push-to-start (self-healing) works through followers in chunks of this size: a chunk's "
        "devices are read and its claims taken by the hundred (BatchGetItem, BatchWriteItem), then its pushes "
        "are sent and waited for before the next chunk is claimed (an owner dying leaves at most one chunk "
        "claimed and perhaps unsent)",
    )
    heal_concurrency: int = Field(
        4,
        ge=1,
        le=1024,
        description="Queries in flight at once for the devices of a chunk's followers whose follow names no "
        "device (kept low so they never crowd out the owner's lease renewals and tick writes)",
    )
    attributes_type: str = Field("MatchAttributes", description="the app's ActivityAttributes type name")
    broadcast_channels: bool = Field(
        True,
        description="iOS 18 broadcast channels: followers on iOS 18 or later are started on their perspective's "
        "channel (one broadcast per perspective and tick instead of one push per device); older ones stay on "
        "update tokens",
    )
    channel_sweep_s: float = Field(
        300.0,
        gt=0,
        le=86400,
        description="how often one instance of the region compares APNs's channels with those the "
        "active matches record and deletes leaks (a channel unrecorded at two sweeps in a row)",
    )
    channel_retry_s: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="after channels could not be had (limit reached, management host down), wait "
        "this long before trying again; meanwhile iOS 18 followers are started on update tokens",
    )
    routine_after_s: float = Field(
        1.0,
        ge=0,
        le=60,
        description="a routine update (no alert) goes out no sooner than this long after the feed leader "
        "fetched its poll, so that the poll's key events, on every instance of the region, have the CPU and "
        "the APNs connections first; at most 40% of the fastest poll cadence is used, so that a held tick "
        "never delays its match's next one (0: at once)",
    )
    stale_after_s: int = Field(
        900,
        ge=0,
        description="stale-date on updates: the Lock Screen greys out data older than this (0: none)",
    )

    @model_validator(mode="after")
    def _chunks_grow(self) -> MatchActorSettings:
        if self.alert_chunk_max < self.alert_chunk_first:
            raise ValueError("alert_chunk_max must be at least alert_chunk_first")
        return self


ROUTINE_HOLD_SHARE = 0.4  # of the fastest poll cadence


def with_routine_hold_capped(match: MatchActorSettings, fastest_cadence_s: float) -> MatchActorSettings:
    """``match`` with ``routine_after_s`` at most ``ROUTINE_HOLD_SHARE`` of the fastest cadence the feed
    polls at: a routine tick held longer could still be waiting when its match's next poll comes, and a key
    event in that poll would wait behind it."""
    cap = ROUTINE_HOLD_SHARE * fastest_cadence_s
    if match.routine_after_s <= cap:
        return match
    return match.model_copy(update={"routine_after_s": cap})
