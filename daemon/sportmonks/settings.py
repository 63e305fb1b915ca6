"""SportMonks client and feed settings (``[sportmonks]`` and ``[feed]``). Owned by the SportMonks package."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

MAX_HOURLY_BUDGET = 1_000_000
BUDGET_ENDPOINTS: tuple[str, ...] = ("livescores", "fixtures", "teams", "leagues", "seasons")
"""The endpoints the hourly budget is kept for (``client.endpoint_of``: /fixtures/{id} counts as fixtures)."""
ListEndpoint = Literal["livescores", "fixtures"]
LIST_ENDPOINTS: tuple[ListEndpoint, ...] = ("livescores", "fixtures")
"""The endpoints the live matches can be read from: ``/livescores`` and ``/fixtures?filter[status]=...``."""
# The fixture sync's near window (a page a minute), its full sync (about 14 chunks every 6 h)
# and the feed's reads of fixtures off the live lists (an ended match's last reads, a 404's tries, a ghost's
# looks): about 80 an hour on a busy day, 120 kept.
DEFAULT_RESERVED_CALLS: dict[str, int] = {"fixtures": 120}


class SportMonksSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(
        "https://cricket.sportmonks.com/api/v2.0",
        description="API root; the replay server's URL in demo and tests",
    )
    api_token: SecretStr | None = Field(
        None, description="API token; prefer api_token_file or the environment"
    )
    api_token_file: str | None = Field(
        None, description="file holding the API token (surrounding whitespace ignored)"
    )
    api_token_env: str = Field(
        "SPORTMONKS_API_TOKEN",
        description="environment variable read for the token when no token or file is set",
    )
    timeout_s: float = Field(
        10.0, gt=0, le=120, description="deadline of one HTTP attempt (connect + full body)"
    )
    max_retries: int = Field(
        3, ge=0, le=10, description="retries after the first attempt, on 429, 5xx and timeouts"
    )
    backoff_base_s: float = Field(
        0.5, gt=0, le=60, description="first retry delay; doubles per retry, with jitter"
    )
    backoff_max_s: float = Field(30.0, gt=0, le=600, description="cap on one retry delay")
    retry_after_max_s: float = Field(
        60.0,
        ge=0,
        le=3600,
        description="longest Retry-After honoured by sleeping inside a call; a longer one fails the call at once "
        "and blocks the endpoint's budget until then",
    )
    breaker_failure_threshold: int = Field(
        5, ge=1, description="consecutive failed attempts that open the breaker"
    )
    breaker_cooldown_s: float = Field(
        30.0, gt=0, le=3600, description="time open before one half-open trial call"
    )
    hourly_budget: int = Field(
        2000,
        ge=1,
        description="the region's calls per endpoint per hour, never exceeded: only the region's feed leader "
        "calls SportMonks (the feed and the sync jobs run there) and the count moves with the lease, so set it "
        "to the plan's limit for the token, not split between instances",
    )
    endpoint_budgets: dict[str, int] = Field(
        default_factory=dict,
        description="per-endpoint overrides of hourly_budget, e.g. {fixtures = 1500}; endpoints are livescores, "
        "fixtures, teams, leagues, seasons",
    )
    reserved_calls: dict[str, int] = Field(
        default_factory=lambda: dict(DEFAULT_RESERVED_CALLS),
        description="calls an hour per endpoint kept out of the feed's plan for the region's other work: the "
        "fixture sync (a near-window page a minute, the full sync's chunks every 6 h), the reference sync and "
        "the feed's own reads of fixtures off the live lists (a match's end, a 404's tries); the feed derives "
        "its cadence from what is left (the defaults fit the default jobs)",
    )
    budget_max_wait_s: float = Field(
        10.0,
        ge=0,
        le=3600,
        description="how long a call may wait for budget before BudgetExhausted (the feed passes 0: it skips)",
    )
    max_pages: int = Field(
        100, ge=1, le=10_000, description="safety cap on pages followed for one paginated list"
    )
    max_body_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        le=1024**3,
        description="largest response body read (decoded); a bigger one is cut off with ResponseTooLarge. "
        "it must hold /livescores with balls for every match live at once",
    )
    offload_parse_bytes: int = Field(
        262144,
        ge=0,
        description="bodies at least this large are decoded and validated in a worker thread, off the event loop",
    )

    def limit(self, endpoint: str) -> int:
        """The plan's calls an hour on ``endpoint``."""
        return self.endpoint_budgets.get(endpoint, self.hourly_budget)

    @field_validator("endpoint_budgets", "reserved_calls")
    @classmethod
    def _known_endpoints(cls, value: dict[str, int]) -> dict[str, int]:
        unknown = sorted(set(value) - set(BUDGET_ENDPOINTS))
        if unknown:
            raise ValueError(f"unknown endpoint(s) {unknown}; known: {list(BUDGET_ENDPOINTS)}")
        out_of_range = sorted(k for k, v in value.items() if not 0 <= v <= MAX_HOURLY_BUDGET)
        if out_of_range:
            raise ValueError(
                f"a budget must be between 0 and {MAX_HOURLY_BUDGET} calls an hour for {out_of_range}"
            )
        return value


def _period(default: float | None, description: str) -> Any:
    """A poll period field: more than 0, at most 5 minutes."""
    return Field(default, gt=0, le=300, description=description)


class FeedSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    list_endpoints: list[ListEndpoint] = Field(
        default_factory=lambda: list(LIST_ENDPOINTS),
        min_length=1,
        description="the endpoints the region's feed leader reads the live matches from, in turn, each within "
        "its own hourly budget: /livescores and /fixtures filtered to live statuses (both: a poll twice as "
        "often as one allows)",
    )
    livescores_cadence_s: float | None = _period(
        None,
        "poll period while no marquee match is live; unset: the fastest the plan allows "
        "(ctl feed shows it); a period faster than the plan allows is refused at start",
    )
    marquee_cadence_s: float | None = _period(
        None,
        "poll period (with balls) while a marquee match is live; unset: the fastest the plan allows",
    )
    fastest_cadence_s: float = _period(
        0.5,
        "the derived cadence is never faster than this, whatever the budgets allow",
    )
    slowest_cadence_s: float = _period(
        2.5,
        "a plan whose budgets (after reserved_calls) cannot poll the live matches at least this "
        "often is refused at start",
    )
    budget_headroom: float = Field(
        0.01,
        ge=0,
        lt=0.5,
        description="share of each endpoint's hourly budget the plan leaves unused (the edge of SportMonks' "
        "window, calls in flight at a leader change)",
    )
    poll_timeout_s: float = Field(
        3.0,
        gt=0,
        le=120,
        description="deadline of one live poll; past it, or on a 429 or an error, the same poll goes to the "
        "other endpoint at once",
    )
    endpoint_rest_s: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="the longest an endpoint whose polls keep failing (5xx, timeout, a bad body) is left alone "
        "while the other carries the polls: the rest is one cadence step after a failure and doubles with each "
        "failure in a row up to this; a 429 rests it for its Retry-After",
    )
    sparse_fields: bool = Field(
        True,
        description="ask only for the fields the engine and the cache use (fields[...]): smaller answers, less "
        "decoding; the cached fixture the app reads has those fields only",
    )
    marquee_leagues: list[int] = Field(
        default_factory=list, description="league ids whose matches get ball-by-ball"
    )
    marquee_source: Literal["livescores", "fixture"] = Field(
        "livescores",
        description="'livescores': one /livescores call with balls per marquee cadence serves every match "
        "(cost independent of the number of matches); 'fixture': /fixtures/{id} per marquee match per marquee "
        "cadence (cost grows with marquee matches, bounded by the budget)",
    )
    strip_balls_for_non_marquee: bool = Field(
        True,
        description="non-marquee subscribers get fixtures without balls[] even when the call carried them",
    )
    off_livescores_cadence_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="refetch period of /fixtures/{id} for a subscribed match that no live list shows and that "
        "is not under way (not started, or over); one under way is read at the live cadence",
    )
    not_found_max_tries: int = Field(
        3,
        ge=1,
        le=20,
        description="a subscribed fixture whose /fixtures/{id} answers 404 this many times running is released "
        "(a corrupted id in /livescores): at most this many calls are spent on it per not_found_release_s",
    )
    not_found_backoff_s: float = Field(
        5.0, gt=0, le=600, description="wait before the second 404 try; doubled before each later one"
    )
    not_found_release_s: float = Field(
        3600.0,
        ge=0,
        le=7 * 24 * 3600,
        description="how long a released id is not taken again, even if /livescores still lists it",
    )
    ghost_max_tries: int = Field(
        6,
        ge=2,
        le=50,
        description="a fixture /livescores listed that shows no play and no change (daemon.sportmonks.ghost) "
        "is released after this many looks, spanning at least ghost_min_s",
    )
    ghost_min_s: float = Field(
        1200.0, ge=0, le=7 * 24 * 3600, description="the least time such a fixture stays blank before release"
    )
    ghost_early_s: float = Field(
        3600.0,
        ge=0,
        le=7 * 24 * 3600,
        description="a fixture whose starting_at is at most this far ahead is in its pre-ball phase: never released",
    )
    ghost_late_s: float = Field(
        12 * 3600.0,
        ge=0,
        le=7 * 24 * 3600,
        description="a fixture whose starting_at is at most this far behind is in its pre-ball phase "
        "(a delayed start, rain): never released",
    )
    ghost_backoff_max_s: float = Field(
        600.0,
        gt=0,
        le=24 * 3600,
        description="the /fixtures/{id} period of a fixture under suspicion doubles from "
        "off_livescores_cadence_s up to this",
    )
    fixture_fetch_concurrency: int = Field(4, ge=1, description="parallel /fixtures/{id} calls per feed tick")
    subscriber_buffer: int = Field(
        1, ge=0, description="updates buffered per subscriber beyond the newest one"
    )
    cache_ttl_live_s: int = Field(
        600, ge=1, description="cricket-fixture-cache TTL while a match is not over"
    )
    cache_ttl_final_s: int = Field(
        7 * 24 * 3600,
        ge=1,
        description="cricket-fixture-cache TTL once the status is terminal (Finished, ...)",
    )
