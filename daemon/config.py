"""The daemon's configuration: one TOML file, environment overrides, secrets, and ``sightscreen check-config``.

This module owns how configuration is *read*: the file, the ``SIGHTSCREEN_<SECTION>__<KEY>`` environment
overrides, the ``*_file`` secret indirection, and how a wrong key is reported (its dotted path and why). It
owns the ``[instance]``, ``[admin]``, ``[logging]`` and ``[metrics]`` sections. Every other section is the settings class
of the component that uses it, imported here and never redefined: a component changes its own keys without
touching this file.

Precedence, lowest first: field defaults, the file, the environment. Secrets (fields typed ``SecretStr``)
come inline, from the environment (``SIGHTSCREEN_APNS__PRIVATE_KEY``) or from the file named by the sibling
``<name>_file`` key; ``load_config`` reads that file so components only ever look at the ``SecretStr``. Secret
values never appear in an error message, in ``check-config`` output or in logs (they are registered with
``daemon.logs`` so the log pipeline scrubs them even if some code passes them by mistake).

It must not start anything: loading configuration has no side effects beyond reading files.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import socket
import sys
import textwrap
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from daemon import logs
from daemon.apns.settings import ApnsSettings
from daemon.cricket.settings import EngineSettings
from daemon.sportmonks.settings import FeedSettings, SportMonksSettings
from daemon.store.settings import DynamoSettings

# Sections owned by actors that may not exist yet in a given checkout (they are written in parallel): until
# they do, the section takes no keys, and `check-config` says "unknown key" for any it is given.
try:
    from actors.settings import MatchActorSettings, OrchestratorSettings
except ImportError:  # pragma: no cover - depends on the checkout

    class OrchestratorSettings(BaseModel):  # type: ignore[no-redef]
        model_config = ConfigDict(extra="forbid")

    class MatchActorSettings(BaseModel):  # type: ignore[no-redef]
        model_config = ConfigDict(extra="forbid")


try:
    from actors.jobs.settings import JobsSettings
except ImportError:  # pragma: no cover - depends on the checkout

    class JobsSettings(BaseModel):  # type: ignore[no-redef]
        model_config = ConfigDict(extra="forbid")


ENV_PREFIX = "SIGHTSCREEN_"
DEFAULT_CONFIG_PATH = "/etc/sightscreen/sightscreen.toml"
DEFAULT_ADMIN_SOCKET = "/run/sightscreen/admin.sock"

# An instance id is written to DynamoDB (lock owner, instanceId) and printed in every log line.
_INSTANCE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
# Keys whose values must never be echoed back, even when they are wrong.
_SECRET_NAME_RE = re.compile(r"(token|secret|password|private_key|credential)", re.IGNORECASE)


def default_instance_id() -> str:
    """``<hostname>-<pid>``: unique on a host, readable in logs, stable for the life of the process."""
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()) or "host"
    return f"{host}-{os.getpid()}"


class InstanceSettings(BaseModel):
    """This process as one member of the fleet: who it is and how it stops."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(
        default_factory=default_instance_id,
        description="the owner name written on match locks and active-matches records; must be unique across "
        "the fleet at any moment. Default: <hostname>-<pid>, so a restarted process is a new owner and never "
        "mistakes a dead predecessor's lease for its own",
        examples=["sightscreen-eu-1"],
    )
    region: str = Field(
        default="",
        description="a label for where this instance runs (e.g. eu-west-1); reported by `status` and in "
        "logs, informational only (DynamoDB's own region is [dynamodb].region)",
    )
    shutdown_grace_s: float = Field(
        default=8.0,
        gt=0,
        le=3600,
        description="on SIGTERM: time allowed to finish in-flight pushes, flush state and release every lock "
        "before the rest is cancelled. 8 s fits inside `docker stop`'s default 10 s before SIGKILL; under "
        "systemd TimeoutStopSec must stay above it",
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
        default=100_000,
        ge=0,
        le=10_000_000,
        description="net allocations of container objects between two collections of the youngest generation "
        "(CPython's default is 700). A 10,000-push fan-out keeps ~100,000 objects alive for a second or two; "
        "at 700 the collector walks them hundreds of times, promotes them and soon walks the whole heap "
        "(bench/gc_fanout.py: 63% of a model instance's time). 0 keeps CPython's default",
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
        "full collection, rare with a high gc_young_threshold (RSS grew by ~100 MB in 5 minutes of the soak); "
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
            raise ValueError("must be 1-128 characters of letters, digits and . _ : @ - (starting alphanumeric)")
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
        "(add operators to the daemon's group). TOML takes 0o660; the environment also takes \"0660\"",
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
                raise ValueError("must be an octal file mode such as 0o660 or \"0660\"")
            return int(text, 8)
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
            from daemon.admin import parse_listen

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
    jobs: JobsSettings = Field(default_factory=JobsSettings)
    admin: AdminSettings = Field(default_factory=AdminSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)

    def redacted(self) -> dict[str, Any]:
        """The effective configuration as plain data, secrets shown as ``**********``."""
        return self.model_dump(mode="json")


# --- errors ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigProblem:
    """One wrong key: where (dotted path, or the environment variable / file it came from) and why."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class ConfigError(Exception):
    """The configuration cannot be used; ``problems`` lists every wrong key, not only the first."""

    def __init__(self, source: str, problems: Sequence[ConfigProblem]) -> None:
        self.source = source
        # Sorted by path so a section's problems read together, in the same order on every run.
        self.problems = sorted(problems, key=lambda p: p.path)
        lines = [f"{source}: {len(self.problems)} problem(s)"] + [f"  {p}" for p in self.problems]
        super().__init__("\n".join(lines))


# --- model introspection ---------------------------------------------------------------------------------


def _unwrap_optional(annotation: Any) -> list[Any]:
    """The non-None members of ``X | None`` / ``Optional[X]`` / ``Union[...]``; ``[annotation]`` otherwise."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    return [annotation]


def _submodel(annotation: Any) -> type[BaseModel] | None:
    for member in _unwrap_optional(annotation):
        if isinstance(member, type) and issubclass(member, BaseModel):
            return member
    return None


def _model_at(path: Sequence[str | int]) -> type[BaseModel] | None:
    """The settings model found by following ``path`` from ``Config``; None if the path leaves the models."""
    model: type[BaseModel] | None = Config
    for part in path:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return None
        model = _submodel(model.model_fields[part].annotation)
    return model


def _field_annotation(path: Sequence[str]) -> Any:
    parent = _model_at(path[:-1])
    if parent is None or path[-1] not in parent.model_fields:
        return None
    return parent.model_fields[path[-1]].annotation


def _is_secret_path(path: Sequence[str | int]) -> bool:
    """True if the value at ``path`` is, or is inside, a secret (pydantic may append union tags to a loc)."""
    names = [p for p in path if isinstance(p, str)]
    for end in range(len(names), 0, -1):
        annotation = _field_annotation(names[:end])
        if annotation is not None and any(m is SecretStr for m in _unwrap_optional(annotation)):
            return True
        if _SECRET_NAME_RE.search(names[end - 1]) and not names[end - 1].endswith("_file"):
            return True
    return False


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _wants_raw_string(annotation: Any) -> bool:
    """True for fields typed str / SecretStr (optionally ``| None``): an env value is taken verbatim."""
    members = _unwrap_optional(annotation)
    return bool(members) and all(m is str or m is SecretStr for m in members)


def _suggest(model: type[BaseModel] | None, name: str) -> str:
    if model is None:
        return ""
    names = list(model.model_fields)
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (valid keys: {', '.join(names)})" if names else " (this section takes no keys yet)"


# --- environment overrides -------------------------------------------------------------------------------


def _parse_env_value(raw: str, annotation: Any) -> Any:
    """An env value as the field wants it: verbatim for strings and secrets, else a TOML scalar or array."""
    if _wants_raw_string(annotation):
        return raw
    try:
        parsed = tomllib.loads(f"v = {raw}")
    except tomllib.TOMLDecodeError:
        return raw
    # "1\nother = 2" parses into two keys: that was never meant as one TOML value.
    return parsed["v"] if list(parsed) == ["v"] else raw


def _apply_env(data: dict[str, Any], env: Mapping[str, str]) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue  # SIGHTSCREEN_ADMIN_SOCKET and friends are not config overrides
        path = [part.lower() for part in name[len(ENV_PREFIX):].split("__")]
        if any(not part for part in path) or len(path) < 2:
            problems.append(ConfigProblem(f"environment {name}", "expected SIGHTSCREEN_<SECTION>__<KEY>"))
            continue
        parent = _model_at(path[:-1])
        if parent is None or path[-1] not in parent.model_fields:
            # Find the first part that is not a known name, to point at it.
            for depth in range(len(path)):
                model = _model_at(path[:depth])
                if model is None or path[depth] not in model.model_fields:
                    dotted = ".".join(path[: depth + 1])
                    problems.append(
                        ConfigProblem(f"environment {name}", f"unknown key {dotted}{_suggest(model, path[depth])}")
                    )
                    break
            continue
        value = _parse_env_value(env[name], parent.model_fields[path[-1]].annotation)
        node = data
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[path[-1]] = value
    return problems


# --- secrets from files ----------------------------------------------------------------------------------

_VAR_RE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def _expand_vars(text: str, env: Mapping[str, str]) -> str:
    """``$VAR`` / ``${VAR}`` from ``env`` (for ``$CREDENTIALS_DIRECTORY`` under systemd); unset is an error."""

    def one(match: re.Match[str]) -> str:
        var = match.group(1) or match.group(2)
        if var not in env:
            raise ValueError(f"environment variable {var} is not set")
        return env[var]

    return _VAR_RE.sub(one, text)


def _resolve_paths(
    model: BaseModel, path: list[str], base_dir: Path, env: Mapping[str, str], problems: list[ConfigProblem]
) -> None:
    """Every ``*_file`` / ``*_path`` value: ``$VAR`` expanded, and made absolute against the config's folder.

    A config file that names ``run/admin.sock`` or ``secrets/apns.p8`` means beside itself, whatever the
    daemon's working directory (systemd starts it in /, a container in its WORKDIR).
    """
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            _resolve_paths(value, [*path, name], base_dir, env, problems)
            continue
        if not name.endswith(("_file", "_path")) or not isinstance(value, str) or not value:
            continue
        try:
            expanded = Path(_expand_vars(value, env))
        except ValueError as exc:
            problems.append(ConfigProblem(".".join([*path, name]), str(exc)))
            continue
        setattr(model, name, str(expanded if expanded.is_absolute() else base_dir / expanded))


def _resolve_secret_files(model: BaseModel, path: list[str], problems: list[ConfigProblem]) -> None:
    """For every ``X: SecretStr`` with a sibling ``X_file`` set: read the file into ``X``. Recurses."""
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            _resolve_secret_files(value, [*path, name], problems)
            continue
        if not any(m is SecretStr for m in _unwrap_optional(field.annotation)):
            continue
        file_key = f"{name}_file"
        if file_key not in type(model).model_fields:
            continue
        file_value = getattr(model, file_key)
        if not file_value:
            continue
        dotted = ".".join([*path, file_key])
        if value is not None and value.get_secret_value():
            problems.append(
                ConfigProblem(dotted, f"both {name} and {file_key} are set; keep one (the file is preferred)")
            )
            continue
        secret_path = Path(file_value)
        try:
            text = secret_path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
            problems.append(ConfigProblem(dotted, f"cannot read {secret_path}: {reason}"))
            continue
        if not text:
            problems.append(ConfigProblem(dotted, f"{secret_path} is empty"))
            continue
        setattr(model, name, SecretStr(text))


def register_secrets(model: BaseModel) -> None:
    """Register every ``SecretStr`` in ``model`` with ``daemon.logs`` for scrubbing.

    ``load_config`` does it; code that builds a ``Config`` itself (``Config.model_validate``) calls this.
    """
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            register_secrets(value)
        elif isinstance(value, SecretStr):
            logs.register_secret(value.get_secret_value())


# --- validation errors -> problems -----------------------------------------------------------------------


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _problems_from(exc: ValidationError, env_paths: Mapping[tuple[str, ...], str]) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    for error in exc.errors(include_url=False):
        loc = [str(p) if not isinstance(p, int) else p for p in error["loc"]]
        dotted = ".".join(str(p) for p in loc) or "(top level)"
        origin = env_paths.get(tuple(str(p) for p in loc))
        where = f"{dotted} (from {origin})" if origin else dotted
        kind = error["type"]
        message = error["msg"]
        secret = _is_secret_path(loc)
        shown = error.get("input")
        # Only a plain value is echoed: a section-level error's input is the whole section, secrets included.
        echo = not secret and kind not in {"missing", "extra_forbidden"} and (
            _scalar(shown) or (isinstance(shown, list) and all(_scalar(v) for v in shown)))
        got = f" (got {_shown(shown)})" if echo else ""
        if kind == "extra_forbidden":
            parent = _model_at([p for p in loc[:-1] if isinstance(p, str)])
            reason = f"unknown key{_suggest(parent, str(loc[-1]))}"
        elif kind == "missing":
            reason = "required key is missing"
        elif kind in {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "multiple_of"}:
            reason = f"out of range: {message.lower()}{got}"
        elif kind.endswith(("_type", "_parsing")) or kind in {"model_attributes_type", "dict_type"}:
            reason = f"wrong type: {message.lower()}{got}"
        elif kind == "value_error":
            reason = f"{message.removeprefix('Value error, ')}{got}"
        else:
            reason = f"{message}{got}"
        problems.append(ConfigProblem(where, reason))
    return problems


def _collect_env_paths(env: Mapping[str, str]) -> dict[tuple[str, ...], str]:
    return {
        tuple(p.lower() for p in name[len(ENV_PREFIX):].split("__")): name
        for name in env
        if name.startswith(ENV_PREFIX) and "__" in name
    }


# --- loading ---------------------------------------------------------------------------------------------


def load_config(path: str | os.PathLike[str] | None, env: Mapping[str, str] = os.environ) -> Config:
    """Read ``path`` (None: defaults only), apply ``SIGHTSCREEN_*`` overrides from ``env``, read secret files.

    Raises ``ConfigError`` listing every problem found (not only the first); never a bare exception for
    bad input. Secret values end up as ``SecretStr`` and are registered with ``daemon.logs`` for scrubbing.
    """
    source = str(path) if path is not None else "(defaults)"
    data: dict[str, Any] = {}
    base_dir = Path.cwd()
    if path is not None:
        file_path = Path(path)
        base_dir = file_path.resolve().parent
        try:
            with file_path.open("rb") as handle:
                data = tomllib.load(handle)
        except FileNotFoundError:
            raise ConfigError(source, [ConfigProblem(source, "file not found")]) from None
        except IsADirectoryError:
            raise ConfigError(source, [ConfigProblem(source, "is a directory, not a TOML file")]) from None
        except PermissionError:
            raise ConfigError(source, [ConfigProblem(source, "permission denied")]) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(source, [ConfigProblem(source, f"not valid TOML: {exc}")]) from None
        except UnicodeDecodeError:
            raise ConfigError(source, [ConfigProblem(source, "not valid UTF-8")]) from None
    problems = _apply_env(data, env)
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        problems.extend(_problems_from(exc, _collect_env_paths(env)))
        raise ConfigError(source, problems) from None
    if problems:
        raise ConfigError(source, problems)
    _resolve_paths(config, [], base_dir, env, problems)
    if not problems:
        _resolve_secret_files(config, [], problems)
    if problems:
        raise ConfigError(source, problems)
    register_secrets(config)
    return config


# --- the annotated example -------------------------------------------------------------------------------

_EXAMPLE_HEADER = """\
# Sightscreen daemon configuration: every key, its default, and why.
#
# Generated from the settings classes by `sightscreen check-config --example`; regenerate it when a
# component adds a key (a test fails until the file matches). The values below ARE the defaults, so this
# file loads as-is; a commented-out key is unset by default.
#
# Environment overrides: SIGHTSCREEN_<SECTION>__<KEY>=value (double underscore between section and key)
# wins over this file, e.g. SIGHTSCREEN_ADMIN__SOCKET_PATH=/tmp/admin.sock or
# SIGHTSCREEN_FEED__MARQUEE_LEAGUES="[3, 5]". Values are read as TOML scalars or arrays; keys that take
# text (and secrets) take the value verbatim.
#
# Secrets (the APNs key, the SportMonks token) are never written here in production: point the
# *_file key at a file (for systemd's LoadCredential=: "$CREDENTIALS_DIRECTORY/apns.p8"), or set
# SIGHTSCREEN_APNS__PRIVATE_KEY / SIGHTSCREEN_SPORTMONKS__API_TOKEN. Secrets are never logged nor printed by
# check-config.
#
# Paths (keys ending in _file or _path) may use $VARS from the environment; a relative path is relative to
# the folder of the configuration file, not to the daemon's working directory.
#
# Check a file with: sightscreen check-config FILE   (exit 0: OK; exit 2: each wrong key and why)
"""


def _toml_value(value: Any) -> str:
    if isinstance(value, SecretStr):
        return '"..."'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def _type_name(annotation: Any) -> str:
    """A reader's name for a field's type: string, number, "a" | "b", secret, list[int]..."""
    names = []
    for member in _unwrap_optional(annotation):
        if typing.get_origin(member) is Literal:
            names.append(" | ".join(json.dumps(a) for a in typing.get_args(member)))
        elif member is SecretStr:
            names.append("secret")
        elif isinstance(member, type):
            plain = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}
            names.append(plain.get(member.__name__, member.__name__))
        else:
            names.append(str(member).replace("typing.", ""))
    text = " | ".join(names)
    return f"{text}, optional" if type(None) in typing.get_args(annotation) else text


def _constraints(field: Any) -> str:
    parts = []
    for item in field.metadata:
        for attr, symbol in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            bound = getattr(item, attr, None)
            if bound is not None:
                parts.append(f"{symbol} {bound}")
    return ", ".join(parts)


def _wrap(text: str, width: int = 106) -> list[str]:
    return textwrap.wrap(text, width=width) or [""]


def _render_table(dotted: str, model: type[BaseModel], intro: str, out: list[str]) -> None:
    out.append(f"[{dotted}]")
    doc = intro or (model.__doc__ or "").strip()
    if doc:
        out.extend(f"# {line}" for line in _wrap(" ".join(doc.split())))
    tables: list[tuple[str, type[BaseModel], str]] = []
    scalars = 0
    for name, field in model.model_fields.items():
        sub = _submodel(field.annotation)
        if sub is not None:
            tables.append((f"{dotted}.{name}", sub, field.description or ""))
            continue
        scalars += 1
        out.append("")
        if field.description:
            out.extend(f"# {line}" for line in _wrap(" ".join(field.description.split())))
        kind = _type_name(field.annotation)
        bounds = _constraints(field)
        if model is InstanceSettings and name == "id":
            default_text, value = "<hostname>-<pid>", None
        elif model is AdminSettings and name == "mode":
            value = field.get_default()
            default_text, bounds = f"0o{value:o}", "an octal file mode"
        else:
            value = field.get_default(call_default_factory=True)
            default_text = "unset" if value is None else _toml_value(value)
        out.append(f"# ({kind}{'; ' + bounds if bounds else ''}; default: {default_text})")
        if value is None:
            example = (field.examples or ["..."])[0]
            out.append(f"# {name} = {_toml_value(example)}")
        elif model is AdminSettings and name == "mode":
            out.append(f"{name} = 0o{value:o}")
        else:
            out.append(f"{name} = {_toml_value(value)}")
    if not scalars and not tables:
        out.append("# (no keys yet)")
    out.append("")
    out.append("")
    for sub_dotted, sub_model, sub_intro in tables:
        _render_table(sub_dotted, sub_model, sub_intro, out)


def render_example() -> str:
    """The annotated example configuration (``config/sightscreen.example.toml``), from the models."""
    out = [_EXAMPLE_HEADER]
    for section, section_field in Config.model_fields.items():
        model = _submodel(section_field.annotation)
        assert model is not None
        _render_table(section, model, "", out)
    return "\n".join(out).rstrip() + "\n"


# --- sightscreen check-config ----------------------------------------------------------------------------


def check_main(argv: list[str]) -> int:
    """``sightscreen check-config FILE``: exit 0 with one line, or exit 2 naming each wrong key and why."""
    parser = argparse.ArgumentParser(
        prog="sightscreen check-config",
        description="Validate a configuration file (with the SIGHTSCREEN_* environment overrides applied).",
    )
    parser.add_argument("file", nargs="?", help="the TOML file to check")
    parser.add_argument("--show", action="store_true", help="also print the effective configuration (secrets hidden)")
    parser.add_argument("--example", action="store_true", help="print the annotated example configuration")
    args = parser.parse_args(argv)
    if args.example:
        sys.stdout.write(render_example())
        return 0
    if not args.file:
        parser.error("FILE is required (or --example)")
    try:
        config = load_config(args.file, os.environ)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    print(f"OK: {args.file} is valid (instance {config.instance.id}, admin socket {config.admin.socket_path})")
    if args.show:
        print(json.dumps(config.redacted(), indent=2, sort_keys=False))
    return 0
