"""APNs sender settings (``[apns]``). Owned by the APNs package."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class ApnsSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        "https://api.push.apple.com", description="https://HOST[:PORT] of APNs (sandbox or production)"
    )
    broadcast_host: str = Field(
        "",
        description="HOST[:PORT] for iOS 18 broadcasts (POST /4/broadcasts/apps/...); empty: they ride the push "
        "connections to url (Apple's prose says the push hosts, its examples show api-broadcast...: configurable)",
    )
    management_host: str = Field(
        "",
        description="channel management host; empty: Apple's for url's environment "
        "(api-manage-broadcast.sandbox.push.apple.com or api-manage-broadcast.push.apple.com)",
    )
    management_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="channel management port; 0: Apple's for the environment (2195 sandbox, 2196 production)",
    )
    ca_file: str | None = Field(
        None, description="extra CA bundle (the local APNs server's CA in tests/demo)"
    )
    team_id: str = Field("", description="Apple developer team id (10 characters), the JWT's iss")
    key_id: str = Field("", description="id of the .p8 signing key (10 characters), the JWT's kid")
    private_key: SecretStr | None = Field(None, description="the .p8 key's PEM; prefer private_key_file")
    private_key_file: str | None = Field(None, description="path of the .p8 signing key (PEM)")
    topic: str = Field(
        "", description="the app's bundle id; Live Activity pushes add .push-type.liveactivity"
    )
    connections: int = Field(2, ge=1, le=32, description="HTTP/2 connections in the pool")
    inbox_size: int = Field(
        10000,
        ge=1,
        description="capacity of each of the sender's three inboxes (priority-10 updates and alerts, "
        "priority-5 updates, push-to-starts) and of the queue behind each; a full inbox blocks its producers",
    )
    request_timeout_s: float = Field(
        10.0, gt=0, le=120, description="deadline for one request, from send to answer"
    )
    max_retries: int = Field(
        5, ge=0, description="retries of a transient failure (429, 5xx, lost connection, deadline)"
    )
    retry_backoff_s: float = Field(
        1.0, gt=0, le=60, description="first retry delay; doubles per attempt (with jitter)"
    )
    retry_backoff_max_s: float = Field(60.0, gt=0, le=3600, description="cap of the retry delay")
    connect_timeout_s: float = Field(
        10.0, gt=0, le=120, description="deadline for TCP+TLS+SETTINGS of a new connection"
    )
    reconnect_backoff_s: float = Field(
        0.5, gt=0, le=60, description="first delay before reconnecting; doubles per failure"
    )
    reconnect_backoff_max_s: float = Field(
        4.0,
        gt=0,
        le=3600,
        description="cap of the reconnect delay: after an outage, delivery resumes within about this long of "
        "APNs's return (a connection that answers again brings the pool's others back at once)",
    )
    ping_idle_s: float = Field(
        300.0,
        gt=0,
        le=3600,
        description="with nothing outstanding, send a PING after this long without a byte from APNs: below the "
        "idle timeout of NAT gateways and load balancers on the way (AWS's NAT gateway forgets a flow after "
        "350 s), so an idle connection's flow is kept",
    )
    ping_silence_s: float = Field(
        3.0,
        gt=0,
        le=300,
        description="with requests outstanding, send a PING after this long without a byte from APNs; the "
        "connection takes no new request (and counts as unusable for readiness) until it hears again",
    )
    ping_timeout_s: float = Field(
        5.0,
        gt=0,
        le=300,
        description="a PING unanswered this long means the connection is dead: it is retired and its "
        "requests are re-sent on a fresh one",
    )
    max_streams_per_connection: int = Field(
        1000, ge=1, description="local cap on concurrent streams, below the server's MAX_CONCURRENT_STREAMS"
    )
    batch_window_s: float = Field(
        0.01,
        ge=0,
        le=0.5,
        description="under a stream of pushes, gather them this long before writing (a little latency for "
        "much less CPU per push); a lone push is sent at once",
    )
    token_refresh_s: float = Field(
        3000.0, ge=1200, lt=3600, description="mint a new provider token once the current one is this old"
    )

    def manages_channels(self) -> bool:
        """Whether channel management has a host: Apple's (url is Apple's) or one configured. A sender pointed
        at another APNs (a local test server) without ``management_host`` has no channels."""
        return bool(self.management_host) or ".push.apple.com" in self.url

    def management_address(self) -> tuple[str, int]:
        """(host, port) of the channel-management service, Apple's per environment unless set."""
        production = "api.push.apple.com" in self.url and "sandbox" not in self.url
        host = self.management_host or (
            "api-manage-broadcast.push.apple.com"
            if production
            else "api-manage-broadcast.sandbox.push.apple.com"
        )
        port = self.management_port or (2196 if production else 2195)
        return host, port

    def signing_key_pem(self) -> str:
        """The .p8 PEM from ``private_key`` or ``private_key_file``; the error names the field, never the key."""
        if self.private_key is not None:
            return self.private_key.get_secret_value()
        if self.private_key_file:
            path = Path(self.private_key_file)
            try:
                return path.read_text()
            except OSError as exc:
                raise ValueError(f"apns.private_key_file: cannot read {path}: {exc.strerror}") from exc
        raise ValueError("apns: set private_key_file (or private_key) to the .p8 signing key")
