"""SportMonks client and feed settings (``[sportmonks]`` and ``[feed]``). Owned by the SportMonks package."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class SportMonksSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str = "https://cricket.sportmonks.com/api/v2.0"
    api_token: SecretStr | None = Field(None, description="API token; prefer api_token_file or the environment")
    api_token_file: str | None = None
    timeout_s: float = Field(10.0, gt=0)
    max_retries: int = Field(3, ge=0, le=10)
    backoff_base_s: float = Field(0.5, gt=0)
    backoff_max_s: float = Field(30.0, gt=0)
    breaker_failure_threshold: int = Field(5, ge=1)
    breaker_cooldown_s: float = Field(30.0, gt=0)
    hourly_budget: int = Field(2000, ge=1, description="calls per endpoint per hour, never exceeded")


class FeedSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    livescores_cadence_s: float = Field(5.0, gt=0)
    marquee_cadence_s: float = Field(2.5, gt=0)
    marquee_leagues: list[int] = Field(default_factory=list, description="league ids whose matches get ball-by-ball")
