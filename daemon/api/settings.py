"""Settings of the app's HTTP API: the ``[api]`` and ``[auth]`` sections of the configuration.

``[api]`` is the server (where it listens, the timeouts that bound a connection's head, body, idle time and
answer, body and rate limits, the limit on refused requests per client address, in-memory cache lifetimes,
shutdown grace); ``[auth]`` is how access tokens are verified (the Cognito user pool, or an explicit issuer and
JWKS URL for other OIDC issuers and the local issuer of the demo and the tests). Every float is finite and
bounded; ``ApiSettings.listen`` empty means no API on this instance.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

COGNITO_ISSUER = "https://cognito-idp.{region}.amazonaws.com/{pool}"
JWKS_PATH = "/.well-known/jwks.json"


class ApiSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    listen: str = Field(
        "",
        description='"host:port" the API listens on (e.g. "0.0.0.0:8080"); empty: no API on this instance',
    )
    max_body_bytes: int = Field(16384, ge=256, le=1_048_576, description="largest request body; larger: 413")
    max_header_bytes: int = Field(
        16384,
        ge=4096,
        le=262_144,
        description="largest request head (request line and headers); larger: 431 and the connection closed",
    )
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        le=300,
        description="a request's head must arrive within this long of its first byte, and a new connection's "
        "first request within this long of its accept; else the connection is closed",
    )
    body_timeout_s: float = Field(
        15.0,
        gt=0,
        le=300,
        description="a request's body must arrive whole within this long of its head; else 408 and the "
        "connection is closed",
    )
    keep_alive_s: float = Field(
        75.0,
        gt=0,
        le=3600,
        description="an idle keep-alive connection is closed after this long without a request (keep it "
        "above a load balancer's idle timeout: an AWS ALB's is 60 s)",
    )
    send_timeout_s: float = Field(
        30.0,
        gt=0,
        le=600,
        description="a client must take each part of an answer within this long; else the connection is "
        "closed",
    )
    max_connections: int = Field(
        0,
        ge=0,
        le=1_000_000,
        description="client connections open at once; past it new ones wait in the kernel's backlog. 0: "
        "sized from the descriptor limit at start-up (the soft RLIMIT_NOFILE less fd_reserve); a number is "
        "also capped by that",
    )
    max_connections_per_address: int = Field(
        128,
        ge=1,
        le=1_000_000,
        description="client connections one address (an IPv6 /64) may hold at once; past it a new one is "
        "closed at accept. Applies to the connection's peer, so only with trusted_proxy_hops = 0 (behind a "
        "load balancer every peer is the balancer)",
    )
    fd_reserve: int = Field(
        256,
        ge=16,
        le=1_000_000,
        description="file descriptors the API's connections leave to the rest of the daemon (DynamoDB, APNs "
        "and SportMonks connections, logs, the admin socket): the connection cap is the descriptor limit "
        "less this",
    )
    refused_per_s: float = Field(
        2.0,
        gt=0,
        le=10_000,
        description="per client address (an IPv6 /64): refused requests (bad tokens, malformed or slow "
        "bodies) allowed per second, sustained; past it, requests whose token fails its signature, and "
        "anonymous requests to the public paths, get 429 (a token our issuer signed is still answered)",
    )
    refused_burst: int = Field(
        20, ge=1, le=100_000, description="per client address: refused requests allowed at once"
    )
    refused_max_addresses: int = Field(
        100_000, ge=100, le=10_000_000, description="client addresses whose refusal buckets are kept"
    )
    trusted_proxy_hops: int = Field(
        0,
        ge=0,
        le=8,
        description="proxies in front of the API that append to X-Forwarded-For (1 behind an AWS ALB); the "
        "client address is the one the outermost of them saw; 0: the connection's peer",
    )
    rate_per_s: float = Field(
        5.0, gt=0, le=10_000, description="per-user token bucket: sustained requests per second"
    )
    rate_burst: int = Field(
        30, ge=1, le=100_000, description="per-user token bucket: requests allowed at once before 429"
    )
    rate_max_users: int = Field(
        200_000, ge=100, le=10_000_000, description="users whose buckets are kept; idle full buckets go first"
    )
    display_cache_s: float = Field(
        1.0, ge=0, le=60, description="how long a display state read is served from memory (0: never)"
    )
    reference_cache_s: float = Field(
        30.0,
        ge=0,
        le=3600,
        description="how long the team and league scans are served from memory (0: never); also how long "
        "another API instance may serve a list from before an admin's change (the instance that made the "
        "change drops its copy at once; instances are not told of each other's changes)",
    )
    max_match_ids: int = Field(100, ge=1, le=100, description="most ids one GET /matches?ids= may name")
    follow_ttl_after_start_s: float = Field(
        48 * 3600.0, gt=0, le=30 * 86400, description="a follow expires this long after the match's start"
    )
    session_ttl_s: float = Field(
        3 * 86400.0,
        gt=0,
        le=30 * 86400,
        description="a Live Activity session registered through the API expires this long after registration",
    )
    max_sessions_per_match: int = Field(
        4,
        ge=1,
        le=32,
        description="Live Activity sessions one user may hold in one match (one per device: an iPhone, an "
        "iPad, a new install); a registration of a further device ends the user's oldest in that match",
    )
    write_batch_max: int = Field(
        25,
        ge=1,
        le=25,
        description="Live Activity registrations arriving together are written up to this many per "
        "BatchWriteItem (25 is DynamoDB's limit)",
    )
    write_parallel: int = Field(
        4, ge=1, le=64, description="registration batches in flight at once; further requests queue and batch"
    )
    shutdown_grace_s: float = Field(
        10.0, gt=0, le=600, description="on shutdown, in-flight requests get this long to finish"
    )

    @field_validator("listen")
    @classmethod
    def _listen_shape(cls, value: str) -> str:
        if not value:
            return value
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f'expected "host:port" with a port 0-65535, got {value!r}')
        return value

    def connection_cap(self, nofile: int) -> int:
        """Client connections open at once under a descriptor limit of ``nofile``: ``nofile - fd_reserve``
        (a quarter of ``nofile`` when the reserve leaves less than that), lowered to ``max_connections``
        when set."""
        cap = max(nofile - self.fd_reserve, nofile // 4, 1)
        return min(cap, self.max_connections) if self.max_connections else cap

    def host_port(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)


class AuthSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    region: str = Field("us-east-1", description="AWS region of the Cognito user pool")
    user_pool_id: str = Field("", description="Cognito user pool id (gives the issuer and the JWKS URL)")
    issuer: str = Field("", description="overrides the issuer derived from region and user_pool_id")
    jwks_url: str = Field("", description="overrides the JWKS URL ({issuer}/.well-known/jwks.json)")
    client_ids: list[str] = Field(
        default_factory=list, description="app client ids whose access tokens are accepted (client_id claim)"
    )
    admin_group: str = Field("admin", min_length=1, description="Cognito group allowed on admin endpoints")
    leeway_s: float = Field(30.0, ge=0, le=300, description="clock skew allowed on exp/nbf/iat, seconds")
    max_token_lifetime_s: float = Field(
        86400.0,
        ge=60,
        le=7 * 86400,
        description="a token whose exp is further ahead than this (plus the leeway) is refused; Cognito's "
        "access tokens live at most a day",
    )
    jwks_refresh_s: float = Field(
        3600.0, ge=1, le=86400, description="the JWKS is refetched in the background this often"
    )
    jwks_refetch_cooldown_s: float = Field(
        60.0,
        ge=0.01,
        le=86400,
        description="an unknown kid triggers at most one JWKS refetch per this many seconds",
    )
    jwks_timeout_s: float = Field(5.0, gt=0, le=60, description="timeout of one JWKS fetch, seconds")
    jwks_retry_s: float = Field(
        5.0, gt=0, le=3600, description="after a failed fetch, the background refresh retries this soon"
    )

    @field_validator("client_ids")
    @classmethod
    def _client_ids(cls, value: list[str]) -> list[str]:
        for i, cid in enumerate(value):
            if not cid or not cid.strip():
                raise ValueError(f"client_ids[{i}]: must be a non-empty string")
        return value

    @field_validator("issuer", "jwks_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if value and not value.startswith(("https://", "http://")):
            raise ValueError(f"must be an http(s) URL, got {value!r}")
        return value.rstrip("/") if value else value

    def effective_issuer(self) -> str:
        if self.issuer:
            return self.issuer
        return COGNITO_ISSUER.format(region=self.region, pool=self.user_pool_id) if self.user_pool_id else ""

    def effective_jwks_url(self) -> str:
        if self.jwks_url:
            return self.jwks_url
        issuer = self.effective_issuer()
        return issuer + JWKS_PATH if issuer else ""

    def problems(self) -> list[tuple[str, str]]:
        """What keeps these settings from verifying tokens: (field, reason) pairs; empty when usable."""
        out: list[tuple[str, str]] = []
        if not self.effective_issuer():
            out.append(
                ("auth.user_pool_id", "the API needs a user pool id (or auth.issuer) to verify tokens")
            )
        if not self.client_ids:
            out.append(("auth.client_ids", "the API needs at least one app client id"))
        return out
