"""DynamoDB settings (the ``[dynamodb]`` section of the configuration). Owned by the data layer."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class DynamoSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    endpoint_url: str | None = Field(
        None, description="DynamoDB endpoint; unset means AWS's regional endpoint"
    )
    region: str = Field("us-east-1", description="AWS region of the tables")
    table_prefix: str = Field(
        "",
        max_length=200,
        description="prefix for every table name, so environments can share an account (DynamoDB's table-name "
        "characters only: letters, digits, '_', '-', '.')",
    )
    retry_mode: Literal["standard", "adaptive"] = Field(
        "standard",
        description="botocore retry mode; 'adaptive' adds client-side rate limiting when throttled",
    )
    max_attempts: int = Field(5, ge=1, le=20, description="botocore attempts per call, first included")
    max_threads: int = Field(8, ge=1, le=64, description="worker threads running boto3 calls")
    lease_threads: int = Field(
        16,
        ge=1,
        le=64,
        description="worker threads kept for taking and renewing leases, apart from max_threads: with DynamoDB "
        "slow, renewals queued behind seconds-long reads would land after their lease (one per lease held, "
        "each renewed every lease_s * renew_fraction, is plenty)",
    )
    connect_timeout_s: float = Field(2.0, gt=0, le=60, description="TCP connect timeout per attempt, seconds")
    read_timeout_s: float = Field(
        10.0,
        gt=0,
        le=300,
        description="read timeout per attempt, seconds: above the slowest answer a congested path gives (a call "
        "cut off by it starts again from scratch, so too short a timeout turns latency into an outage)",
    )
    batch_deadline_s: float = Field(
        30.0, gt=0, le=600, description="give up retrying unprocessed batch items after this"
    )
    batch_backoff_base_s: float = Field(
        0.05,
        gt=0,
        le=60,
        description="first backoff before resending unprocessed batch items (doubles, full jitter)",
    )
    batch_backoff_max_s: float = Field(
        2.0, gt=0, le=600, description="longest backoff between batch retries, seconds"
    )

    @field_validator("table_prefix")
    @classmethod
    def _table_name_characters(cls, value: str) -> str:
        bad = sorted({c for c in value if not (c.isascii() and (c.isalnum() or c in "_.-"))})
        if bad:
            raise ValueError(
                f"only letters, digits, '_', '-' and '.' may be in a DynamoDB table name; {bad!r} may not"
            )
        return value
