"""Match engine settings (``[engine]``): cooldowns, staleness thresholds, definitions. Owned by the engine.

Every number here is a product decision, so each has a default, a description and a reason. The engine reads
them only through ``EngineSettings``; nothing else in the daemon depends on their values. The cooldowns and
the alert-worthy types default to the event registry's (``daemon.cricket.registry``, which says why);
the settings override them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from daemon.cricket.registry import DEFAULT_ALERT_WORTHY, DEFAULT_COOLDOWNS, NAMES

MAX_COOLDOWN_S = 7 * 24 * 3600.0
"""The longest cooldown accepted (a week: longer than any match); also refuses inf and nan."""


class EngineSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cooldowns_s: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_COOLDOWNS),
        description="cooldown in seconds per event type; an event key cannot fire again before it expires",
    )
    alert_worthy: list[str] = Field(
        default_factory=lambda: list(DEFAULT_ALERT_WORTHY),
        description="event types pushed at APNs priority 10 with an alert title and body",
    )
    new_batsman_stale_after_balls: int = Field(
        default=3, ge=1, description="a new_batsman event is stale once the batter has faced this many balls"
    )
    ball_event_max_age: int = Field(
        default=12,
        ge=1,
        description="four, six, maiden, consecutive_sixes are stale once this many deliveries were bowled "
        "after them (a long outage does not replay old boundaries); wickets never go stale",
    )
    batter_on_fire_min_runs: int = Field(
        default=30, ge=1, description="batsman_on_fire: at least this many runs in the innings ..."
    )
    batter_on_fire_min_strike_rate: float = Field(
        default=200.0, gt=0, le=1000, description="... at a strike rate (runs per 100 balls) of at least this"
    )
    bowler_on_fire_wickets: int = Field(
        default=3,
        ge=1,
        description="bowler_on_fire fires when a bowler reaches this many wickets, and at each one after",
    )
    consecutive_sixes_min: int = Field(
        default=2,
        ge=2,
        description="consecutive_sixes: sixes off this many consecutive balls faced by one batter",
    )
    recent_event_balls: int = Field(
        default=6,
        ge=0,
        description="the display keeps showing the last key event's text for this many legal balls",
    )
    reported_wickets_max: int = Field(
        default=64,
        ge=10,
        le=10_000,
        description="how many reported wicket keys the match state keeps (bounds the record)",
    )
    first_look_news_balls: int = Field(
        default=6,
        ge=0,
        le=60,
        description="a match first seen in its first innings with at most this many legal balls bowled is taken "
        "as just begun: its balls are news (a first-ball wicket alerts), not history; 0: every first look is "
        "history",
    )
    confirm_polls: int = Field(
        default=3,
        ge=1,
        le=100,
        description="a doubtful tick (a final status the fixture does not corroborate, a score going back "
        "further than a correction can) is believed only once seen on this many consecutive polls ...",
    )
    confirm_s: float = Field(
        default=30.0,
        ge=0,
        le=3600,
        description="... spanning at least this many seconds; until then the match goes on as before "
        "(nothing pushed, nothing written for the doubt itself)",
    )
    correction_max_runs: int = Field(
        default=12,
        ge=0,
        le=100,
        description="an innings total may go back by at most this many runs in one tick (a corrected ball); "
        "a bigger drop is a doubtful tick",
    )
    correction_max_wickets: int = Field(
        default=1,
        ge=0,
        le=10,
        description="an innings may lose at most this many wickets in one tick (a "
        "withdrawn dismissal); more is a doubtful tick",
    )
    correction_max_balls: int = Field(
        default=6,
        ge=0,
        le=60,
        description="an innings may go back by at most this many legal balls in one tick; more is doubtful",
    )

    @field_validator("cooldowns_s")
    @classmethod
    def _known_cooldowns(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(NAMES))
        if unknown:
            raise ValueError(f"unknown event type(s) {unknown}; known: {list(NAMES)}")
        out_of_range = sorted(k for k, v in value.items() if not 0 <= v <= MAX_COOLDOWN_S)
        if out_of_range:
            raise ValueError(f"cooldown must be between 0 and {MAX_COOLDOWN_S:g} s for {out_of_range}")
        return {**DEFAULT_COOLDOWNS, **value}

    @field_validator("alert_worthy")
    @classmethod
    def _known_alerts(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(NAMES))
        if unknown:
            raise ValueError(f"unknown event type(s) {unknown}; known: {list(NAMES)}")
        return value

    def cooldown(self, event_type: str) -> float:
        return float(self.cooldowns_s.get(event_type, DEFAULT_COOLDOWNS.get(event_type, 0.0)))
