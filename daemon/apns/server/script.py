"""The fault script: what the server is told to do wrong, and the state that carries it out.

pydantic at the edge: ``POST /ctl/script`` bodies are untrusted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from daemon.apns.server.validation import DEFAULT_REASON_BY_STATUS, TOKEN_UPDATE_INTERVAL_S, Verdict

# Sans-I/O core: the fault script (pydantic at the edge: /ctl/script bodies are untrusted)


class _ScriptModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TokenFault(_ScriptModel):
    status: int = Field(410, ge=400, le=599, description="HTTP status for this device token")
    reason: str | None = Field(None, description="APNs reason; default by status (410 Unregistered ...)")
    count: int | None = Field(None, ge=1, description="answer this way N times, then normally; None = always")
    timestamp_ms: int | None = Field(None, ge=0, description="410 timestamp (ms); default: now")
    delay_s: float = Field(0.0, ge=0, description="extra delay before answering this token")


class StormFault(_ScriptModel):
    status: Literal[500, 503] = 500
    reason: str | None = Field(None, description="InternalServerError / ServiceUnavailable by default")
    count: int | None = Field(None, ge=1, description="the next N valid requests")
    duration_s: float | None = Field(None, gt=0, description="for this long")


class GoawayFault(_ScriptModel):
    after: int = Field(
        0,
        ge=0,
        description="the connection that answers the Nth next request (server-wide) "
        "sends it; 0 = every connection now",
    )
    reason: str = Field("Shutdown", description='GOAWAY debug data is {"reason": ...}')
    error_code: int = Field(0, ge=0, description="HTTP/2 error code (0 NO_ERROR)")
    graceful: bool = Field(True, description="answer streams <= last_stream_id before sending GOAWAY")


class DropFault(_ScriptModel):
    after: int = Field(
        0,
        ge=0,
        description="answer N more requests server-wide, then close the TCP "
        "connection that receives the next one; 0 = close every connection now",
    )


class DelayFault(_ScriptModel):
    seconds: float = Field(..., ge=0, description="delay before answering")
    count: int | None = Field(None, ge=1, description="the next N requests; None = all")


class WindowFault(_ScriptModel):
    initial_window_size: int = Field(
        ...,
        ge=1,
        le=2**31 - 1,
        description="SETTINGS_INITIAL_WINDOW_SIZE advertised to new connections (stream receive window)",
    )
    connection_window: int | None = Field(
        None,
        ge=1,
        le=2**31 - 1,
        description="connection receive window of new connections (HTTP/2 starts it at 65535)",
    )
    update_delay_s: float = Field(0.0, ge=0, description="delay every WINDOW_UPDATE by this long")


class FaultScript(_ScriptModel):
    """One ``script(...)`` call or one ``POST /ctl/script`` body; absent fields leave a setting alone."""

    tokens: dict[str, TokenFault] | None = Field(None, description="per-device-token answers")
    clear_tokens: list[str] | None = Field(None, description="forget these tokens' scripted answers")
    storm: StormFault | None = None
    goaway: GoawayFault | None = None
    drop: DropFault | None = None
    refuse_streams: int | None = Field(None, ge=0, description="RST_STREAM REFUSED_STREAM the next N")
    delay: DelayFault | None = None
    window: WindowFault | None = None
    max_concurrent_streams: int | None = Field(None, ge=1, description="the limit after the first accept")
    initial_streams: int | None = Field(None, ge=0, description="limit until the first accept; 0 = none")
    drop_streams_on_rejection: bool | None = Field(None, description="limit falls to 1 after a 4xx")
    token_update_interval_s: float | None = Field(None, ge=0, description="min time between token switches")
    pin_key_id: bool | None = Field(None, description="UnrelatedKeyIdInToken for a second kid")
    idle_timeout_s: float | None = Field(
        None, ge=0, description="GOAWAY IdleTimeout after this long without a request; 0 = never"
    )
    freeze: bool | None = Field(
        None,
        description="every connection open now goes silent for good, left open (what a NAT that dropped the "
        "flows looks like); new connections are served as usual",
    )

    @model_validator(mode="after")
    def _tokens_are_named(self) -> FaultScript:
        for token in self.tokens or {}:
            if not token:
                raise ValueError("tokens: empty device token")
        return self


@dataclass
class _TokenRule:
    status: int
    reason: str
    remaining: int | None
    timestamp_ms: int | None
    delay_s: float


@dataclass
class FaultState:
    """The server-wide scripted behaviour; mutated only by ``apply`` and by consuming a fault."""

    tokens: dict[str, _TokenRule] = field(default_factory=dict)
    storm_status: int = 0
    storm_reason: str = ""
    storm_remaining: int | None = None
    storm_until: float | None = None
    goaway: GoawayFault | None = None
    goaway_remaining: int = 0
    drop_after: int | None = None
    refuse_remaining: int = 0
    delay_s: float = 0.0
    delay_remaining: int | None = None
    window: WindowFault | None = None
    max_concurrent_streams: int = 1000
    initial_streams: int | None = 1
    drop_streams_on_rejection: bool = False
    token_update_interval_s: float = TOKEN_UPDATE_INTERVAL_S
    pin_key_id: bool = True
    idle_timeout_s: float = 0.0

    def apply(self, script: FaultScript, now: float) -> None:
        for token in script.clear_tokens or []:
            self.tokens.pop(token, None)
        for token, fault in (script.tokens or {}).items():
            reason = fault.reason or DEFAULT_REASON_BY_STATUS.get(fault.status, "InternalServerError")
            self.tokens[token] = _TokenRule(
                fault.status, reason, fault.count, fault.timestamp_ms, fault.delay_s
            )
        if script.storm is not None:
            storm = script.storm
            self.storm_status = storm.status
            self.storm_reason = storm.reason or DEFAULT_REASON_BY_STATUS[storm.status]
            self.storm_remaining = storm.count
            self.storm_until = now + storm.duration_s if storm.duration_s is not None else None
        if script.goaway is not None:
            self.goaway = script.goaway
            self.goaway_remaining = script.goaway.after
        if script.drop is not None:
            self.drop_after = script.drop.after
        if script.refuse_streams is not None:
            self.refuse_remaining = script.refuse_streams
        if script.delay is not None:
            self.delay_s = script.delay.seconds
            self.delay_remaining = script.delay.count
        if script.window is not None:
            self.window = script.window
        if script.max_concurrent_streams is not None:
            self.max_concurrent_streams = script.max_concurrent_streams
        if script.initial_streams is not None:
            self.initial_streams = script.initial_streams or None
        if script.drop_streams_on_rejection is not None:
            self.drop_streams_on_rejection = script.drop_streams_on_rejection
        if script.token_update_interval_s is not None:
            self.token_update_interval_s = script.token_update_interval_s
        if script.pin_key_id is not None:
            self.pin_key_id = script.pin_key_id
        if script.idle_timeout_s is not None:
            self.idle_timeout_s = script.idle_timeout_s

    def storm_verdict(self, now: float) -> Verdict | None:
        """Consume one request of a 5xx storm, if one is running."""
        if not self.storm_status:
            return None
        if self.storm_until is not None and now >= self.storm_until:
            self.storm_status = 0
            return None
        verdict = Verdict(self.storm_status, self.storm_reason, "scripted 5xx storm")
        if self.storm_remaining is not None:
            self.storm_remaining -= 1
            if self.storm_remaining <= 0:
                self.storm_status = 0  # this request was the storm's last
        return verdict

    def token_rule(self, token: str) -> _TokenRule | None:
        """Consume one use of this token's scripted answer, if any."""
        rule = self.tokens.get(token)
        if rule is None:
            return None
        if rule.remaining is not None:
            rule.remaining -= 1
            if rule.remaining <= 0:
                del self.tokens[token]
        return rule

    def take_delay(self) -> float:
        if self.delay_s <= 0:
            return 0.0
        delay = self.delay_s
        if self.delay_remaining is not None:
            self.delay_remaining -= 1
            if self.delay_remaining <= 0:
                self.delay_s, self.delay_remaining = 0.0, None
        return delay

    def take_refusal(self) -> bool:
        if self.refuse_remaining <= 0:
            return False
        self.refuse_remaining -= 1
        return True
