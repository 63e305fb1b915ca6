"""APNs sender settings (``[apns]``). Owned by the APNs package."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class ApnsSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field("https://api.push.apple.com", description="https://HOST[:PORT] of APNs (sandbox or production)")
    ca_file: str | None = Field(None, description="extra CA bundle (the local APNs server's CA in tests/demo)")
    team_id: str = ""
    key_id: str = ""
    private_key: SecretStr | None = Field(None, description="the .p8 key's PEM; prefer private_key_file")
    private_key_file: str | None = None
    topic: str = Field("", description="the app's bundle id; Live Activity pushes add .push-type.liveactivity")
    connections: int = Field(2, ge=1, le=32)
    inbox_size: int = Field(10000, ge=1)
    request_timeout_s: float = Field(10.0, gt=0)
    max_retries: int = Field(5, ge=0)
