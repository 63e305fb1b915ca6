"""Settings of the orchestrator (``[orchestrator]``), of match actors (``[match]``) and of a hot match's shared
fan-out (``[fanout]``)."""

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


class FanoutSettings(BaseModel):
    """A hot match's fan-out shared by every engine of the region: when a match is hot, how its fan-outs are
    cut into shards, how fast helpers learn of new work, and the shards' leases."""

    model_config = ConfigDict(extra="forbid")

    share_above: int = Field(
        35_000,
        ge=0,
        le=10_000_000,
        description="a match whose per-token audience (Live Activity sessions pushed one by one) is above this "
        "is hot: its routine updates, alerts and push-to-starts are cut into shards that any engine of the "
        "region delivers, while its owner alone decides what is sent. The default is what one engine fans out "
        "within the 2.5 s marquee cadence at 72 us of CPU per push, an engine's average over a whole run with "
        "its polls and audience reads counted (docs/cost.md: 2.5 s / 72 us = 34,700). 0: never share",
    )
    cool_below: float = Field(
        0.8,
        gt=0,
        le=1,
        description="a hot match stays hot until its per-token audience falls below share_above * cool_below, "
        "so a match near the line does not flip at each session refresh",
    )
    shard_size: int = Field(
        5_000,
        ge=1,
        le=1_000_000,
        description="sessions (or, for push-to-starts, followers) per shard at most: one engine's work of "
        "about 0.4 s at that 72 us a push; smaller shards spread better and cost more DynamoDB calls per ball "
        "(a claim, an owner check and a completion each)",
    )
    shards_at_once: int = Field(
        2,
        ge=1,
        le=16,
        description="shards an engine delivers at once (a helper, and the owner for its own match): with one, "
        "its sender idles while a shard's last answers come back, its record is settled and the next shard is "
        "claimed (four DynamoDB round trips); two keep it busy. More take shards from the rest of the fleet",
    )
    board_poll_s: float = Field(
        0.1,
        ge=0.01,
        le=10,
        description="how often every engine reads the board of each hot match (one strongly consistent "
        "GetItem): a shard waits this long on average plus a read to be taken, counted in the lag; the owner "
        "polls its shards' progress at the same pace while none of its own is in delivery",
    )
    hot_list_poll_s: float = Field(
        1.0,
        ge=0.1,
        le=60,
        description="how often every engine reads the region's list of hot matches (one GetItem)",
    )
    shard_lease_s: float = Field(
        5.0,
        gt=0,
        le=600,
        description="a shard's lease: a helper that dies or stalls holds its shard this long at most, then "
        "another engine resumes it from its watermark. Must exceed shard_renew_every_s + "
        "[orchestrator].clock_skew_bound_s",
    )
    shard_renew_every_s: float = Field(
        1.25,
        gt=0,
        le=300,
        description="a helper renews its shard's lease, and reads the match lock to confirm the owner it "
        "delivers for, this often; an alerting chunk is handed over only while the owner's lease lasts this "
        "long more (orchestrator.lease_s must exceed it plus the owner's renewal period and the skew bound)",
    )
    helper_word_s: float = Field(
        10.0,
        ge=1,
        le=600,
        description="while an engine follows another engine's hot match it says so on the region's hot list "
        "this often (one UpdateItem), its word good for three times as long. An owner that holds no such word "
        "of another engine fans its hot match out alone, as a match below share_above (its shards would only "
        "add DynamoDB round trips); it shares again from the first work item after a word comes",
    )
    board_ttl_s: float = Field(
        3600.0,
        ge=60,
        le=7 * 86400,
        description="a board not published again for this long is removed by DynamoDB's TTL; a hot list "
        "entry whose board is gone or older than stale_board_s is taken off by any engine",
    )
    stale_board_s: float = Field(
        900.0,
        ge=10,
        le=86400,
        description="a hot match whose board has not been published for this long is not followed by helpers "
        "(its owner lists it again with its next work item)",
    )
    done_hold_s: float = Field(
        3600.0,
        ge=60,
        le=86400,
        description="a delivered shard's record is held this long (nobody takes it up again), then removed by "
        "the table's TTL",
    )

    @model_validator(mode="after")
    def _renewal_fits(self) -> FanoutSettings:
        if self.shard_renew_every_s >= self.shard_lease_s:
            raise ValueError("shard_renew_every_s must be below shard_lease_s")
        return self
