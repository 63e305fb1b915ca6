"""Match engine settings (``[engine]``): cooldowns, staleness thresholds, definitions. Owned by the engine."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class EngineSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
