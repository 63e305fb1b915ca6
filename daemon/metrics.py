"""Every Prometheus metric the daemon exports, in one registry.

Metrics are defined here, once, so that names and labels stay consistent across actors; actors import the
objects they update. The admin socket's ``metrics`` command renders ``REGISTRY`` in the text format.
Label values are bounded: match ids (5-20 live at once), table and operation names, endpoint names, outcomes.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

REGISTRY = CollectorRegistry(auto_describe=True)
# process_resident_memory_bytes, process_cpu_seconds_total, process_open_fds, process_start_time_seconds:
# memory growth, CPU saturation and restart loops are read from these (Linux /proc; absent elsewhere).
ProcessCollector(registry=REGISTRY)


class EventLoopHistogram:
    """A histogram without labels that is observed from the event loop's thread only, exported as a Prometheus
    histogram (cumulative ``le`` buckets, ``_sum``, ``_count``) when the registry is collected.

    ``prometheus_client.Histogram.observe`` takes a lock and walks the buckets for every observation, more
    than a microsecond each: the sender observes one per push. Here an observation is a bisect and two
    additions; collecting (a scrape, in the same thread) adds the buckets up. A value counts in every bucket
    whose bound is at least the value, as Prometheus defines ``le``."""

    def __init__(
        self, name: str, documentation: str, *, buckets: Sequence[float], registry: CollectorRegistry
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._bounds = tuple(sorted(float(b) for b in buckets))
        self._counts = [0] * (len(self._bounds) + 1)  # the last one: above every bound (+Inf only)
        self._sum = 0.0
        registry.register(self)

    def observe(self, value: float) -> None:
        self._counts[bisect_left(self._bounds, value)] += 1
        self._sum += value

    def collect(self) -> Iterator[Metric]:
        cumulative: list[tuple[str, float]] = []
        total = 0
        for bound, count in zip(self._bounds, self._counts, strict=False):
            total += count
            cumulative.append((floatToGoString(bound), total))  # type: ignore[no-untyped-call]
        cumulative.append(("+Inf", total + self._counts[-1]))
        yield HistogramMetricFamily(self._name, self._documentation, buckets=cumulative, sum_value=self._sum)

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self._name, self._documentation)


# --- Readiness ------------------------------------------------------------------------------------------
READY = Gauge(
    "sightscreen_ready",
    "1 while the instance is ready (DynamoDB answers, an APNs connection is open, the SportMonks breaker is "
    "not open, not stopping), else 0; refreshed every few seconds and on each admin 'ready'",
    registry=REGISTRY,
)
READY_CHECK = Gauge(
    "sightscreen_ready_check",
    "Each readiness check: 1 passing, 0 failing (dynamodb, apns, feed)",
    ["check"],
    registry=REGISTRY,
)

# --- APNs -----------------------------------------------------------------------------------------------
PUSHES = Counter(
    "sightscreen_pushes",
    "Pushes by kind (start, update, end, alert) and outcome (accepted, rejected, failed)",
    ["kind", "outcome"],
    registry=REGISTRY,
)
PUSH_LATENCY = EventLoopHistogram(
    "sightscreen_push_latency_seconds",
    "From a push entering the sender's inbox to APNs's answer",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
    registry=REGISTRY,
)
APNS_CONNECTIONS = Gauge("sightscreen_apns_connections", "Open HTTP/2 connections to APNs", registry=REGISTRY)
APNS_ERRORS = Counter(
    "sightscreen_apns_errors",
    "APNs error answers by what they mean (dead_token, retry, retry_new_connection, refresh_provider_token, "
    "configuration: provider key, team or topic refused, payload_bug, bug)",
    ["action"],
    registry=REGISTRY,
)
APNS_STREAMS = Gauge("sightscreen_apns_streams_in_flight", "HTTP/2 streams open to APNs", registry=REGISTRY)
DEAD_TOKENS = Counter(
    "sightscreen_dead_tokens", "Tokens APNs rejected for good, by reason", ["reason"], registry=REGISTRY
)

BROADCASTS = Counter(
    "sightscreen_broadcasts",
    "iOS 18 channel broadcasts by kind (update, end) and outcome (accepted, rejected: channel gone or limit, "
    "failed)",
    ["kind", "outcome"],
    registry=REGISTRY,
)
CHANNEL_REQUESTS = Counter(
    "sightscreen_channel_requests",
    "Channel-management requests by operation (create, read, delete, list) and outcome (ok, error)",
    ["op", "outcome"],
    registry=REGISTRY,
)
CHANNELS = Gauge(
    "sightscreen_broadcast_channels",
    "Broadcast channels held by each owned match",
    ["match_id"],
    registry=REGISTRY,
)
SESSIONS_BY_PATH = Gauge(
    "sightscreen_sessions_by_path",
    "Live Activity sessions of each owned match by delivery path (token: one push per device; channel: broadcast)",
    ["match_id", "path"],
    registry=REGISTRY,
)

# --- Match actors --------------------------------------------------------------------------------------
TICKS = Counter("sightscreen_ticks", "Match actor ticks", ["match_id"], registry=REGISTRY)
TICK_DURATION = Histogram(
    "sightscreen_tick_duration_seconds",
    "Time a match actor spends on one tick (diff, persist, hand-off)",
    ["match_id"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
    registry=REGISTRY,
)
DYNAMODB_CALLS_PER_TICK = Histogram(
    "sightscreen_dynamodb_calls_per_tick",
    "DynamoDB calls one match tick made (bounded whatever the number of followers)",
    buckets=(0, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 50),
    registry=REGISTRY,
)
KEY_EVENTS = Counter("sightscreen_key_events", "Key events pushed, by type", ["type"], registry=REGISTRY)
EVENT_LOOP_LAG = Histogram(
    "sightscreen_event_loop_lag_seconds",
    "How late the trio loop woke a 1 s sleep: time every task waited behind work that did not yield",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=REGISTRY,
)
GC_PAUSE = Histogram(
    "sightscreen_gc_pause_seconds",
    "How long each garbage collection held the process, by generation (2 walks the whole heap)",
    ["generation"],
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
    registry=REGISTRY,
)
OWNED_MATCHES = Gauge("sightscreen_owned_matches", "Matches this instance owns", registry=REGISTRY)
BALL_TO_PUSH = Histogram(
    "sightscreen_ball_to_push_seconds",
    "For a tick that pushed: from the feed receiving the fixture to the tick done (APNs answered every push, "
    "state persisted), a routine tick's wait after the poll (match.routine_after_s) included; the poll "
    "interval before the fetch is not included",
    buckets=(0.1, 0.25, 0.5, 1.0, 2.0, 3.5, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0),
    registry=REGISTRY,
)
MATCH_OWNER_EPOCH = Gauge(
    "sightscreen_match_owner_epoch",
    "One series per match this instance owns, valued at its ownership epoch (the fencing token). Summed over "
    "instances: a match with two series is owned twice; the epoch rising counts ownership changes",
    ["match_id"],
    registry=REGISTRY,
)
MATCH_WANTED = Gauge(
    "sightscreen_match_wanted",
    "One series per match the orchestrator's last full cycle found should be processed now (active, live in "
    "/livescores or cricket-fixtures, or starting within the pre-start window), whoever owns it",
    ["match_id"],
    registry=REGISTRY,
)
# Every series an owned match adds (the metric and the labels beside its id): removed when its actor exits
# (``forget_match``), so a process that carries a season of matches keeps the series of those it runs only.
PER_MATCH_SERIES: tuple[tuple[Counter | Gauge | Histogram, tuple[str, ...]], ...] = (
    (TICKS, ()),
    (TICK_DURATION, ()),
    (CHANNELS, ()),
    (SESSIONS_BY_PATH, ("token",)),
    (SESSIONS_BY_PATH, ("channel",)),
    (MATCH_OWNER_EPOCH, ()),
)


def forget_match(match_id: str) -> None:
    """Remove every series of ``match_id`` (its actor exited: the match ended, moved to another instance or
    was let go); a series never exported is skipped."""
    for metric, rest in PER_MATCH_SERIES:
        try:
            metric.remove(match_id, *rest)
        except KeyError:
            pass


TAKEOVERS = Counter(
    "sightscreen_takeovers",
    "Matches this instance claimed from another owner (dead, drained or paused past its lease)",
    registry=REGISTRY,
)

# --- SportMonks ----------------------------------------------------------------------------------------
SPORTMONKS_CALLS = Counter(
    "sightscreen_sportmonks_calls",
    "SportMonks calls by endpoint and outcome (ok, error, retry, skipped_budget, skipped_breaker)",
    ["endpoint", "outcome"],
    registry=REGISTRY,
)
SPORTMONKS_BUDGET_REMAINING = Gauge(
    "sightscreen_sportmonks_budget_remaining",
    "Calls left in the current hourly window, per endpoint",
    ["endpoint"],
    registry=REGISTRY,
)
SPORTMONKS_BUDGET_LIMIT = Gauge(
    "sightscreen_sportmonks_budget_limit",
    "Calls allowed per sliding hour, per endpoint (the configured budget; remaining / limit is the share left)",
    ["endpoint"],
    registry=REGISTRY,
)
SPORTMONKS_BREAKER_STATE = Gauge(
    "sightscreen_sportmonks_breaker_open",
    "1 while the SportMonks circuit breaker is open, 0.5 half-open, 0 closed",
    registry=REGISTRY,
)
SPORTMONKS_BUDGET_DELAYS = Counter(
    "sightscreen_sportmonks_budget_delays",
    "SportMonks calls that waited for room in the hourly budget before going out, per endpoint",
    ["endpoint"],
    registry=REGISTRY,
)


# --- One fleet per region ------------------------------------------------------------------------------
FEED_LEADER = Gauge(
    "sightscreen_feed_leader",
    "1 while this instance leads the region's SportMonks feed, else 0",
    registry=REGISTRY,
)
FEED_LEADER_CHANGES = Counter(
    "sightscreen_feed_leader_changes",
    "Times this instance took the region's feed lease (summed over the fleet: the region's leader changes)",
    registry=REGISTRY,
)
FIXTURE_CACHE_AGE = Histogram(
    "sightscreen_fixture_cache_age_seconds",
    "Age of a changed cached fixture when a non-leading instance read it (from the leader's fetch)",
    buckets=(0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0),
    registry=REGISTRY,
)
SPORTMONKS_REGION_CALLS = Gauge(
    "sightscreen_sportmonks_region_calls_last_hour",
    "SportMonks calls the region made in the last hour, per endpoint (the leader's count; followers show "
    "the leader's last heartbeat)",
    ["endpoint"],
    registry=REGISTRY,
)
LEASED_JOB_RUNS = Counter(
    "sightscreen_leased_job_runs",
    "Times this instance took a region-wide job's lease and started it",
    ["job"],
    registry=REGISTRY,
)

# --- DynamoDB ------------------------------------------------------------------------------------------
DYNAMODB_CALLS = Counter(
    "sightscreen_dynamodb_calls",
    "DynamoDB calls by table and operation",
    ["table", "operation"],
    registry=REGISTRY,
)
DYNAMODB_ERRORS = Counter(
    "sightscreen_dynamodb_errors",
    "DynamoDB calls that raised, by table, operation and error code",
    ["table", "operation", "code"],
    registry=REGISTRY,
)

# --- Ownership and supervision ---------------------------------------------------------------------------
LOCK_RENEWALS = Counter(
    "sightscreen_lock_renewals", "Lock renewals by outcome (ok, lost, error)", ["outcome"], registry=REGISTRY
)
LOCK_LOSSES = Counter("sightscreen_lock_losses", "Leases lost by a match actor", registry=REGISTRY)
LEASES_LEFT_TO_EXPIRE = Counter(
    "sightscreen_leases_left_to_expire",
    "Leases this process gave up without a release DynamoDB confirmed (they run out on their own)",
    registry=REGISTRY,
)
ACTOR_RESTARTS = Counter(
    "sightscreen_actor_restarts", "Actor restarts by the supervisor", ["actor"], registry=REGISTRY
)


# --- Background jobs (fixture sync, reference sync, prematch) ---------------------------------------------
JOB_CYCLES = Counter(
    "sightscreen_job_cycles",
    "Job cycles (or resumable steps) by job and outcome (ok, error)",
    ["job", "outcome"],
    registry=REGISTRY,
)
JOB_LAST_SUCCESS = Gauge(
    "sightscreen_job_last_success_timestamp_seconds",
    "Unix time of each job's last successful cycle",
    ["job"],
    registry=REGISTRY,
)
SYNC_RECORDS = Counter(
    "sightscreen_sync_records",
    "Records seen by the sync jobs, by table and result (created, updated, unchanged, invalid)",
    ["table", "result"],
    registry=REGISTRY,
)
PREMATCH_NOTIFICATIONS = Counter(
    "sightscreen_prematch_notifications",
    "Prematch work per follower by result (claimed, recovered, skipped, accepted, rejected, failed, "
    "no_device, token_removed)",
    ["result"],
    registry=REGISTRY,
)
LIVE_FANOUTS = Gauge(
    "sightscreen_live_fanouts",
    "Rounds of Live Activity pushes in progress (background jobs give way)",
    registry=REGISTRY,
)
BACKGROUND_GAVE_WAY = Counter(
    "sightscreen_background_gave_way_seconds",
    "Seconds background jobs waited for live fan-outs to end, by job",
    ["job"],
    registry=REGISTRY,
)


# --- A hot match's fan-out shared by the region's engines (actors.share, actors.shard, actors.share_worker) --
SHARE_HOT_MATCHES = Gauge(
    "sightscreen_share_hot_matches",
    "One series (1) per hot match this instance owns: its fan-outs are cut into shards that every engine of "
    "the region delivers ([fanout].share_above)",
    ["match_id"],
    registry=REGISTRY,
)
SHARE_HELPED_MATCHES = Gauge(
    "sightscreen_share_helped_matches",
    "Hot matches of other instances this instance follows, ready to deliver their shards",
    registry=REGISTRY,
)
SHARE_HELPERS = Gauge(
    "sightscreen_share_helpers",
    "Other engines of the region whose word on the hot list says they follow hot matches, ready to deliver "
    "shards (as this instance last read it). This instance's hot matches are fanned out by their owner alone "
    "while it is 0",
    registry=REGISTRY,
)
SHARE_PUSHES = Counter(
    "sightscreen_share_pushes",
    "Per-token pushes of hot matches' shards this instance delivered, by role (owner: a shard of its own "
    "match; helper: of another instance's) and outcome",
    ["role", "outcome"],
    registry=REGISTRY,
)
SHARE_SHARDS = Counter(
    "sightscreen_share_shards",
    "Shards this instance took, by role (owner, helper) and event: claimed (first taken), resumed (taken up "
    "from another holder's watermark), done, abandoned (its owner changed or its lease was lost midway)",
    ["role", "event"],
    registry=REGISTRY,
)
SHARE_SHARD_WAIT = Histogram(
    "sightscreen_share_shard_wait_seconds",
    "From a work item's publication by the owner to the first claim of each of its shards, by lane (tick, "
    "start): the wait a hot match's fan-out adds to the lag",
    ["lane"],
    buckets=(0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
    registry=REGISTRY,
)
SHARE_WAIT_CADENCES = Gauge(
    "sightscreen_share_shard_wait_cadences",
    "Per hot match this instance owns: the longest any shard of its last work item waited to be taken "
    "(publication to first claim, or to now while none has), in poll cadences of the match",
    ["match_id"],
    registry=REGISTRY,
)

# --- The app's HTTP API (daemon.api) ------------------------------------------------------------------------
API_REQUESTS = Counter(
    "sightscreen_api_requests",
    "API requests by route template (unmatched paths: 'unmatched') and status code",
    ["route", "status"],
    registry=REGISTRY,
)
API_LATENCY = Histogram(
    "sightscreen_api_request_duration_seconds",
    "From an API request's arrival to its answer, by route template",
    ["route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
    registry=REGISTRY,
)
API_RATE_LIMITED = Counter(
    "sightscreen_api_rate_limited",
    "API requests refused with 429 by the per-user rate limit",
    registry=REGISTRY,
)
API_AUTH_FAILURES = Counter(
    "sightscreen_api_auth_failures",
    "API requests refused with 401, by the check that failed (never shown to the client)",
    ["reason"],
    registry=REGISTRY,
)
JWKS_FETCHES = Counter(
    "sightscreen_jwks_fetches",
    "JWKS fetches by cause (start, refresh, unknown_kid) and outcome (ok, error)",
    ["cause", "outcome"],
    registry=REGISTRY,
)
JWKS_KEYS = Gauge("sightscreen_jwks_keys", "Signing keys currently held from the JWKS", registry=REGISTRY)

API_REFUSED = Counter(
    "sightscreen_api_refused",
    "API requests refused before a handler, by why: invalid_token, token_expired (our issuer's token, past "
    "its time), address_limited (the client address's refusal bucket is empty and the token fails its "
    "signature), rate_limited (the user's bucket, or the address's for public paths), malformed_json, "
    "unsupported_media_type, body_too_large, body_timeout, bad_framing (Content-Length with "
    "Transfer-Encoding), bad_http, bad_transfer_encoding and headers_too_large (refused by the HTTP layer)",
    ["reason"],
    registry=REGISTRY,
)
API_CONNECTIONS_CUT = Counter(
    "sightscreen_api_connections_cut",
    "API connections the server closed on a timeout: header_timeout (a request head too slow), idle "
    "(keep-alive past [api].keep_alive_s), send_timeout (a client not taking its answer)",
    ["reason"],
    registry=REGISTRY,
)
API_CONNECTIONS_OPEN = Gauge(
    "sightscreen_api_connections_open",
    "API client connections open now (at most [api].max_connections, sized from the descriptor limit)",
    registry=REGISTRY,
)
API_CONNECTIONS_REFUSED = Counter(
    "sightscreen_api_connections_refused",
    "API connections closed at accept, before a byte was read: per_address (the client address, an IPv6 "
    "/64, holds [api].max_connections_per_address already)",
    ["reason"],
    registry=REGISTRY,
)
DEVICE_TOKEN_TRANSFERS = Counter(
    "sightscreen_device_token_transfers",
    "Device registrations that took a device token from the user who held it (the latest registration owns "
    "a token)",
    registry=REGISTRY,
)


def render() -> bytes:
    """The registry in Prometheus text exposition format."""
    return generate_latest(REGISTRY)


APNS_USABLE_CONNECTIONS = Gauge(
    "sightscreen_apns_usable_connections",
    "APNs connections open and answering (heard from within [apns].ping_silence_s while waiting), by pool: "
    "push, broadcast, management",
    ["pool"],
    registry=REGISTRY,
)
APNS_CONNECTIONS_RETIRED = Counter(
    "sightscreen_apns_connections_retired",
    "APNs connections retired because the server stopped answering, by pool and cause (ping_unanswered, "
    "silent, requests_unanswered)",
    ["pool", "cause"],
    registry=REGISTRY,
)
# ---- the feed's live polls ------------------------------------------------------------------------------
FEED_POLLS = Counter(
    "sightscreen_feed_polls",
    "Live polls of the region's feed leader by endpoint (livescores, fixtures) and outcome (ok; failover: "
    "failed and carried by the other endpoint; failed: no endpoint answered)",
    ["endpoint", "outcome"],
    registry=REGISTRY,
)
FEED_CADENCE = Gauge(
    "sightscreen_feed_cadence_seconds",
    "The live poll period in use (derived from the SportMonks plan unless configured)",
    registry=REGISTRY,
)
FEED_ANSWERS_HELD = Counter(
    "sightscreen_feed_answers_held",
    "Fixtures the feed did not hand on because their content was older than what it had delivered (behind), "
    "or showed a change at the same stamp one answer alone (unconfirmed)",
    ["verdict"],
    registry=REGISTRY,
)
