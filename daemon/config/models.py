"""The configuration's shape: the ``Config`` model and the sections this package owns.

``[instance]``, ``[admin]``, ``[logging]`` and ``[metrics]`` are defined here. Every other section is the
settings class of the component that uses it, imported here and never redefined: a component changes its
own keys without touching this package. Field defaults live only here (and in those classes): code that
runs the daemon reads them from the models, never with a default of its own.
"""

from __future__ import annotations

import os
import re
import socket
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from actors.jobs.settings import JobsSettings
from actors.settings import FanoutSettings, MatchActorSettings, OrchestratorSettings
from daemon.api.settings import ApiSettings, AuthSettings
from daemon.apns.settings import ApnsSettings
from daemon.cricket.settings import EngineSettings
from daemon.sportmonks.settings import FeedSettings, SportMonksSettings
from daemon.store.settings import DynamoSettings

ENV_PREFIX = "SIGHTSCREEN_"
DEFAULT_CONFIG_PATH = "/etc/sightscreen/sightscreen.toml"
DEFAULT_ADMIN_SOCKET = "/run/sightscreen/admin.sock"
ADMIN_MODE_MAX = 0o660  # the admin socket can drain and stop the daemon: never others, never execute

# An instance id is printed in every log line and, with a per-process nonce, written to DynamoDB (lock owner,
# instanceId); '#' separates the two, so it is not allowed here.
_INSTANCE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")


def default_instance_id() -> str:
    """``<hostname>-<pid>``: unique on a host, readable in logs, stable for the life of the process."""
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()) or "host"
    return f"{host}-{os.getpid()}"


def parse_listen(listen: str, *, any_port: bool = False) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9464`` for IPv6) as (host, port); ValueError says what is wrong.

    ``any_port`` admits port 0 (the kernel picks one: tests); a configured scrape target needs a real port.
    """
    host, sep, port_text = listen.rpartition(":")
    lowest = 0 if any_port else 1
    if not sep or not host or not port_text.isdigit() or not lowest <= int(port_text) < 65536:
        raise ValueError("expected HOST:PORT, such as 127.0.0.1:9464")
    return host.strip("[]"), int(port_text)


class InstanceSettings(BaseModel):
    """This process as one member of the fleet: who it is and how it stops."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(
        default_factory=default_instance_id,
        description="this instance's name, for people: in every log line and in `status`. Match locks and "
        "active-matches records carry it with a random per-process suffix (<id>#<nonce>), so a restarted "
        "process, or two started from one configuration, never take each other's lease as their own. "
        "Default: <hostname>-<pid>",
        examples=["sightscreen-eu-1"],
    )
    roles: list[Literal["engine", "api"]] = Field(
        default_factory=lambda: list[Literal["engine", "api"]](["engine"]),
        min_length=1,
        description='what this instance runs: "engine" (matches, feed, pushes, jobs) and/or "api" (the app\'s '
        "HTTP API, on [api].listen); one binary and one image, the role is configuration",
    )
    region: str = Field(
        default="",
        description="the fleet this instance belongs to (e.g. eu-west-1): instances of one region share one "
        "SportMonks feed leader (lease feed:{region}) and run the sync jobs once (job:{name}:{region}); they "
        'find each other through DynamoDB only. Empty means "default". DynamoDB\'s own region is '
        "[dynamodb].region",
    )
    shutdown_grace_s: float = Field(
        default=8.0,
        ge=4,
        le=3600,
        description="on SIGTERM: the whole stop (finishing in-flight pushes, flushing state, releasing every "
        "lock) ends within this, whatever DynamoDB and APNs do: what cannot be done by then is abandoned, and a "
        "lock not released runs out on its own (counted and logged). 8 s fits inside `docker stop`'s default "
        "10 s before SIGKILL; under systemd TimeoutStopSec must stay above it",
    )
    stall_dump_s: float = Field(
        default=5.0,
        ge=0,
        le=3600,
        description="when the event loop has not run for this long (every lease, deadline and admin answer is "
        "waiting), write every thread's Python stack to stderr, once per stall, so the cause can be found; "
        "0 turns it off. Loop lag is also in the sightscreen_event_loop_lag_seconds histogram and any stall "
        "over 1 s is logged as event_loop_stalled",
    )
    gc_young_threshold: int = Field(
        default=1_000_000,
        ge=0,
        le=10_000_000,
        description="net allocations of container objects between two collections of the youngest generation "
        "(CPython's default is 700). A fan-out keeps a few objects alive per push until it is answered (a "
        "hot match's 100,000 pushes: more than 100,000); a collection meanwhile walks them all and "
        "promotes them, so the threshold sits above what one fan-out keeps (at 700 the collector walks them "
        "hundreds of times and soon walks the whole heap: bench/gc_fanout.py; at 100,000 a 100,000-push "
        "fan-out cost 3-4 us a push more: bench/fanout_cpu.py). 0 keeps CPython's default",
    )
    malloc_arenas: int = Field(
        default=2,
        ge=0,
        le=64,
        description="the most malloc arenas glibc keeps (mallopt M_ARENA_MAX, set at start before any worker "
        "thread): by default glibc gives each thread that allocates its own arena, up to 8 per core, and the "
        "DynamoDB worker threads' allocations then leave free pages scattered over all of them, so a process "
        "that carries match after match grows in RSS while Python holds no more (bench/season.py). 0 leaves "
        "glibc's own rule (and a MALLOC_ARENA_MAX in the environment)",
    )
    gc_sweep_s: float = Field(
        default=10.0,
        ge=0,
        le=3600,
        description="every this many seconds, collect the young generations (gc.collect(1)): with a high "
        "gc_young_threshold the collector seldom runs on its own, and garbage only it can free (an HTTP "
        "response is a reference cycle holding its body) would pile up; 0 turns it off",
    )
    gc_full_every_s: float = Field(
        default=60.0,
        ge=0,
        le=86400,
        description="a sweep at least this long after the last full one collects every generation: garbage "
        "that was alive at a young collection has been promoted and would otherwise wait for CPython's own "
        "full collection, rare with a high gc_young_threshold, while the process's memory grows; "
        "0 leaves full collections to CPython",
    )
    gc_freeze_at_ready: bool = Field(
        default=True,
        description="once the daemon is up, freeze what start-up built (gc.freeze: modules, service models, "
        "configuration) so that full collections stop walking it",
    )
    drain_timeout_s: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="`drain`: how long to wait for other instances to take over the matches handed back "
        "before exiting anyway (their leases then run out and they are taken over after lease_s)",
    )

    @field_validator("id")
    @classmethod
    def _id_is_a_plain_name(cls, value: str) -> str:
        if not _INSTANCE_ID_RE.match(value):
            raise ValueError(
                "must be 1-128 characters of letters, digits and . _ : @ - (starting alphanumeric)"
            )
        return value


class AdminSettings(BaseModel):
    """The admin Unix socket (`sightscreen ctl`, socat): one JSON request per line, one JSON answer per line."""

    model_config = ConfigDict(extra="forbid")

    socket_path: str = Field(
        default=DEFAULT_ADMIN_SOCKET,
        description="path of the admin socket; under systemd it lives in RuntimeDirectory=sightscreen. "
        "`sightscreen ctl` reads $SIGHTSCREEN_ADMIN_SOCKET or this default",
    )
    mode: int = Field(
        default=0o660,
        ge=0,
        le=0o777,
        description="permissions set on the socket after bind: owner and group may connect, others may not "
        "(add operators to the daemon's group). At most 0o660: the socket drains and stops the daemon, so "
        'others and execute bits are refused. TOML takes 0o660; the environment also takes "0660"',
    )
    max_line_bytes: int = Field(
        default=65536,
        ge=256,
        le=16 * 1024 * 1024,
        description="longest request line accepted; a longer one gets an error answer and the connection is "
        "closed, so a client cannot make the daemon buffer without bound",
    )
    client_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="a client idle this long between requests, or not reading an answer for this long, is "
        "disconnected: a stuck client never holds a slot or memory for long",
    )
    max_clients: int = Field(
        default=64,
        ge=1,
        le=4096,
        description="connections served at once; one more gets an error answer and is closed",
    )

    @field_validator("mode", mode="before")
    @classmethod
    def _octal_string(cls, value: Any) -> Any:
        # Operators write modes the chmod way ("0660"); TOML integers can't have a leading zero.
        if isinstance(value, str):
            text = value.strip().lower().removeprefix("0o")
            if not re.fullmatch(r"[0-7]{1,4}", text):
                raise ValueError('must be an octal file mode such as 0o660 or "0660"')
            return int(text, 8)
        return value

    @field_validator("mode")
    @classmethod
    def _at_most_0660(cls, value: int) -> int:
        extra = value & ~ADMIN_MODE_MAX
        if extra:
            raise ValueError(
                f"must grant at most 0o660 (owner and group read/write); {oct(value)} also grants {oct(extra)}"
            )
        return value


class LoggingSettings(BaseModel):
    """Structured logs on stderr (journald and `docker logs` collect stderr)."""

    model_config = ConfigDict(extra="forbid")

    level: Literal["debug", "info", "warning", "error", "critical"] = Field(
        default="info", description="lowest level written by the daemon's own loggers"
    )
    format: Literal["auto", "json", "console"] = Field(
        default="auto",
        description="auto: JSON when stderr is not a terminal (journald, containers, files), readable "
        "console lines when it is",
    )
    stdlib_level: Literal["debug", "info", "warning", "error", "critical"] = Field(
        default="warning",
        description="level for libraries that log through the standard logging module (botocore, httpx, "
        "urllib3); below warning they are chatty and can print request details",
    )

    @field_validator("level", "stdlib_level", "format", mode="before")
    @classmethod
    def _lowercase(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


class MetricsSettings(BaseModel):
    """Prometheus metrics. The admin socket's `metrics` command always answers; HTTP is for scrapers."""

    model_config = ConfigDict(extra="forbid")

    listen: str = Field(
        default="",
        description="HOST:PORT serving GET /metrics over HTTP for a Prometheus scraper, e.g. 127.0.0.1:9464; "
        "empty: no HTTP listener (nothing but the admin socket is exposed). Bind to loopback or a private "
        "interface: metrics name match ids and call volumes",
        examples=["127.0.0.1:9464"],
    )

    @field_validator("listen")
    @classmethod
    def _host_and_port(cls, value: str) -> str:
        if value:
            parse_listen(value)
        return value


class Config(BaseModel):
    """The whole configuration. Each attribute is one TOML section."""

    model_config = ConfigDict(extra="forbid")

    instance: InstanceSettings = Field(default_factory=InstanceSettings)
    dynamodb: DynamoSettings = Field(default_factory=DynamoSettings)
    sportmonks: SportMonksSettings = Field(default_factory=SportMonksSettings)
    feed: FeedSettings = Field(default_factory=FeedSettings)
    apns: ApnsSettings = Field(default_factory=ApnsSettings)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    orchestrator: OrchestratorSettings = Field(default_factory=OrchestratorSettings)
    match: MatchActorSettings = Field(default_factory=MatchActorSettings)
    fanout: FanoutSettings = Field(default_factory=FanoutSettings)
    jobs: JobsSettings = Field(default_factory=JobsSettings)
    admin: AdminSettings = Field(default_factory=AdminSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)

    @model_validator(mode="after")
    def _api_role_is_usable(self) -> Config:
        if "api" in self.instance.roles:
            if not self.api.listen:
                raise ValueError('instance.roles includes "api" but api.listen is empty (set "host:port")')
            problems = self.auth.problems()
            if problems:
                raise ValueError("; ".join(f"{f}: {r}" for f, r in problems))
        return self

    @model_validator(mode="after")
    def _shard_lease_fits(self) -> Config:
        f, skew = self.fanout, self.orchestrator.clock_skew_bound_s
        if f.shard_renew_every_s + skew >= f.shard_lease_s:
            raise ValueError(
                "fanout.shard_lease_s must exceed fanout.shard_renew_every_s + orchestrator.clock_skew_bound_s "
                f"({f.shard_renew_every_s} + {skew})"
            )
        o = self.orchestrator
        if f.shard_renew_every_s + o.renew_every_s + skew >= o.lease_s:
            # an alerting chunk is handed only while its owner's lease lasts a shard renewal more
            raise ValueError(
                "orchestrator.lease_s must exceed fanout.shard_renew_every_s + its renewal period "
                "(lease_s * renew_fraction) + orchestrator.clock_skew_bound_s "
                f"({f.shard_renew_every_s} + {o.renew_every_s} + {skew}): a live owner's lease must always "
                "last a shard renewal more, or helpers hold each alerting chunk until its next renewal"
            )
        return self

    def runs(self, role: str) -> bool:
        """Whether this instance runs ``role`` (``engine`` or ``api``)."""
        return role in self.instance.roles

    def redacted(self) -> dict[str, Any]:
        """The effective configuration as plain data, secrets shown as ``**********``."""
        return self.model_dump(mode="json")
