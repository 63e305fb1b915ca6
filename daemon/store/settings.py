"""DynamoDB settings (the ``[dynamodb]`` section of the configuration). Owned by the data layer."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class DynamoSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    endpoint_url: str | None = Field(None, description="DynamoDB endpoint; unset means AWS's regional endpoint")
    region: str = "us-east-1"
    table_prefix: str = Field("", description="prefix for every table name, so environments can share an account")
    retry_mode: Literal["standard", "adaptive"] = "standard"
    max_attempts: int = Field(5, ge=1, le=20, description="botocore attempts per call, first included")
    max_threads: int = Field(8, ge=1, le=64, description="worker threads running boto3 calls")
    connect_timeout_s: float = Field(2.0, gt=0)
    read_timeout_s: float = Field(5.0, gt=0)
    batch_deadline_s: float = Field(30.0, gt=0, description="give up retrying unprocessed batch items after this")
