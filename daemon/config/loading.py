"""Reading configuration: the TOML file, ``SIGHTSCREEN_<SECTION>__<KEY>`` overrides, secret files, errors.

Precedence, lowest first: field defaults, the file, the environment. Secrets (fields typed ``SecretStr``)
come inline, from the environment (``SIGHTSCREEN_APNS__PRIVATE_KEY``) or from the file named by the sibling
``<name>_file`` key; ``load_config`` reads that file so components only ever look at the ``SecretStr``. Secret
values never appear in an error message, in ``check-config`` output or in logs (they are registered with
``daemon.logs`` so the log pipeline scrubs them even if some code passes them by mistake).

A wrong key is reported with its dotted path (or the environment variable it came from) and why; every
problem is listed, not only the first. Loading has no side effects beyond reading files.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr, ValidationError

from daemon import logs
from daemon.config.introspect import (
    is_scalar,
    is_secret_path,
    model_at,
    suggest_key,
    unwrap_optional,
    wants_raw_string,
)
from daemon.config.models import ENV_PREFIX, Config

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


# --- environment overrides -------------------------------------------------------------------------------


def _parse_env_value(raw: str, annotation: Any) -> Any:
    """An env value as the field wants it: verbatim for strings and secrets, else a TOML scalar or array."""
    if wants_raw_string(annotation):
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
        path = [part.lower() for part in name[len(ENV_PREFIX) :].split("__")]
        if any(not part for part in path) or len(path) < 2:
            problems.append(ConfigProblem(f"environment {name}", "expected SIGHTSCREEN_<SECTION>__<KEY>"))
            continue
        parent = model_at(path[:-1])
        if parent is None or path[-1] not in parent.model_fields:
            # Find the first part that is not a known name, to point at it.
            for depth in range(len(path)):
                model = model_at(path[:depth])
                if model is None or path[depth] not in model.model_fields:
                    dotted = ".".join(path[: depth + 1])
                    problems.append(
                        ConfigProblem(
                            f"environment {name}", f"unknown key {dotted}{suggest_key(model, path[depth])}"
                        )
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
        if not any(m is SecretStr for m in unwrap_optional(field.annotation)):
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
            text = read_secret_file(secret_path).strip()
        except ValueError as exc:
            problems.append(ConfigProblem(dotted, str(exc)))
            continue
        if not text:
            problems.append(ConfigProblem(dotted, f"{secret_path} is empty"))
            continue
        setattr(model, name, SecretStr(text))


MAX_SECRET_FILE_BYTES = 64 * 1024
"""A key, token or CA bundle is a few KB; more means the path names something else (a log, /dev/zero)."""


def read_secret_file(path: str | os.PathLike[str]) -> str:
    """The text of a small regular file (a key, a token, a CA bundle); ValueError saying why not."""
    return read_text_file(path, MAX_SECRET_FILE_BYTES, "a secret file")


MAX_CONFIG_FILE_BYTES = 1024 * 1024
"""The annotated example is about 30 KB; a configuration a thousand times that is not one."""


def read_text_file(path: str | os.PathLike[str], max_bytes: int, what: str) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes``; ValueError saying why not (never blocks,
    never reads past the cap). Opened non-blocking and checked on the open descriptor: a FIFO with no writer
    or a device answers at once with a clear error instead of hanging start-up or exhausting memory."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path} is not a regular file (it is {_file_kind(info.st_mode)})")
        if info.st_size > max_bytes:
            raise ValueError(f"{path} is {info.st_size} bytes; {what} holds at most {max_bytes}")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, max_bytes + 1 - size):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise ValueError(f"{path} holds more than {max_bytes} bytes")
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"cannot read {path}: not UTF-8 text") from None


def _why_unreadable(message: str, source: str) -> str:
    """``read_text_file``'s reason without the path the problem already names."""
    reason = message.replace(f"cannot read {source}: ", "").replace(f"{source} ", "")
    return {
        "No such file or directory": "file not found",
        "Is a directory": "is a directory, not a TOML file",
        "Permission denied": "permission denied",
        "not UTF-8 text": "not valid UTF-8",
    }.get(reason, reason)


def _file_kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


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
        secret = is_secret_path(loc)
        shown = error.get("input")
        # Only a plain value is echoed: a section-level error's input is the whole section, secrets included.
        echo = (
            not secret
            and kind not in {"missing", "extra_forbidden"}
            and (is_scalar(shown) or (isinstance(shown, list) and all(is_scalar(v) for v in shown)))
        )
        got = f" (got {_shown(shown)})" if echo else ""
        if kind == "extra_forbidden":
            parent = model_at([p for p in loc[:-1] if isinstance(p, str)])
            reason = f"unknown key{suggest_key(parent, str(loc[-1]))}"
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
        tuple(p.lower() for p in name[len(ENV_PREFIX) :].split("__")): name
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
            text = read_text_file(file_path, MAX_CONFIG_FILE_BYTES, "a configuration file")
        except ValueError as exc:
            raise ConfigError(source, [ConfigProblem(source, _why_unreadable(str(exc), source))]) from None
        try:
            # An editor's UTF-8 byte-order mark is not TOML, but it is not the operator's meaning either.
            data = tomllib.loads(text.removeprefix("\ufeff"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(source, [ConfigProblem(source, f"not valid TOML: {exc}")]) from None
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
