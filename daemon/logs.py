"""Structured logging (structlog): JSON when stderr is not a terminal, readable when it is.

This module owns the log pipeline of the process: the processors, the renderer, and the bridge that brings
standard-library loggers (botocore, httpx, urllib3, trio) into the same output. It must not decide *what* is
logged; callers do.

Every line carries ``instance_id`` (given to ``configure``) and, where there is one, ``match_id``: a match
actor binds it for its task with ``structlog.contextvars.bound_contextvars(match_id=...)`` (trio copies the
context into child tasks, so everything the actor spawns inherits it) or with ``log.bind(match_id=...)``.

Device tokens are logged only through ``short_token``; as a second line of defence, values under keys that
name a device token are shortened, values under keys that name a secret are replaced, and every secret
registered with ``register_secret`` (``daemon.config`` registers each one it loads) is scrubbed from every
line, wherever it appears.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

# the stdlib handler ``configure`` installed last (replaced, not added to, when configured again)
_INSTALLED: list[logging.Handler] = []
_configured = False
_static: dict[str, Any] = {}
_secrets: set[str] = set()
_secrets_lock = threading.Lock()  # boto3 worker threads log too
# Secrets shorter than this are not scrubbed by value: replacing "1" everywhere would wreck every line, and a
# real token or key is far longer.
_MIN_SECRET_LEN = 8
REDACTED = "[redacted]"

# Keys whose values are device tokens (shortened) or secrets (replaced), whatever the caller passed.
_TOKEN_KEY_RE = re.compile(r"(^|_)(device_token|push_token|push_to_start_token|update_token|token)$", re.I)
_SECRET_KEY_RE = re.compile(r"(secret|password|private_key|api_token|authorization|provider_token|jwt)", re.I)

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


def short_token(token: str | None) -> str:
    """A device token as logs show it: enough to correlate, never enough to push to."""
    if not token:
        return "-"
    return f"{token[:6]}…{token[-4:]}" if len(token) > 12 else "…"


def register_secret(value: str | None) -> None:
    """Scrub ``value`` from every log line from now on (config secrets, signed provider tokens...)."""
    if value and len(value) >= _MIN_SECRET_LEN:
        with _secrets_lock:
            _secrets.add(value)
            # A PEM key may be printed line by line (or with its newlines escaped): scrub its body lines too.
            for line in value.splitlines():
                line = line.strip()
                if len(line) >= 16 and not line.startswith("-----"):
                    _secrets.add(line)


def _scrub_text(text: str) -> str:
    with _secrets_lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _scrub_value(value: Any) -> Any:
    if isinstance(value, str):
        return _scrub_text(value)
    if isinstance(value, dict):
        return {k: _scrub_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_scrub_value(v) for v in value)
    if isinstance(value, bytes | bytearray):
        return _scrub_text(bytes(value).decode("utf-8", "replace"))
    # SecretStr renders as '**********'; other objects are rendered by the renderer with repr/str, so scrub
    # their text form when it contains a secret.
    if _secrets and not isinstance(value, int | float | bool | type(None)):
        text = str(value)
        scrubbed = _scrub_text(text)
        if scrubbed != text:
            return scrubbed
    return value


def _redact(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Shorten device tokens and hide secrets by key; scrub registered secret values everywhere."""
    for key, value in list(event_dict.items()):
        if isinstance(value, str) and _SECRET_KEY_RE.search(key):
            event_dict[key] = REDACTED
        elif isinstance(value, str) and _TOKEN_KEY_RE.search(key) and "…" not in value:
            event_dict[key] = short_token(value)
        else:
            event_dict[key] = _scrub_value(value)
    return event_dict


def _add_static(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    # Process-wide fields (instance_id) go on every line, stdlib ones included, whatever task logs it.
    for key, value in _static.items():
        event_dict.setdefault(key, value)
    return event_dict


class _NamedPrintLogger(structlog.PrintLogger):
    """A PrintLogger that knows the name it was asked for, so lines say which module wrote them."""

    def __init__(self, file: TextIO, name: str) -> None:
        super().__init__(file)
        self.name = name


def _add_logger_name(logger: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    record = event_dict.get("_record")
    name = record.name if record is not None else getattr(logger, "name", None)
    if name:
        event_dict.setdefault("logger", name)
    return event_dict


def _scrub_rendered(_: Any, __: str, rendered: Any) -> Any:
    # Last word: tracebacks (format_exc_info) and anything a renderer produced from a repr.
    return _scrub_text(rendered) if isinstance(rendered, str) and _secrets else rendered


def _shared_processors() -> list[Any]:
    return [
        structlog.contextvars.merge_contextvars,
        _add_static,
        _add_logger_name,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        _redact,
    ]


def configure(
    level: str = "info",
    json: bool | None = None,
    *,
    stdlib_level: str = "warning",
    stream: TextIO | None = None,
    **context: Any,
) -> None:
    """Configure the process's logging once (calling it again reconfigures).

    ``json=None`` picks JSON unless the stream is a terminal. ``context`` (e.g. ``instance_id=...``) is put
    on every line. Standard-library loggers are routed into the same output at ``stdlib_level``.
    """
    global _configured
    out = stream if stream is not None else sys.stderr
    tty = bool(getattr(out, "isatty", None) and out.isatty())
    if json is None:
        json = not tty
    numeric = _LEVELS.get(level.lower(), logging.INFO)
    renderer: Any = (
        structlog.processors.JSONRenderer(ensure_ascii=False)
        if json
        else structlog.dev.ConsoleRenderer(colors=tty)
    )
    structlog.configure(
        processors=[*_shared_processors(), renderer, _scrub_rendered],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=lambda *args: _NamedPrintLogger(out, str(args[0]) if args else ""),
        cache_logger_on_first_use=False,
    )
    _static.clear()
    _static.update(context)
    structlog.contextvars.clear_contextvars()

    # botocore, httpx, urllib3, trio: same renderer, same stream, their own (higher) level.
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=_shared_processors(),
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                renderer,
                _scrub_rendered,
            ],
        )
    )
    root = logging.getLogger()
    for old in _INSTALLED:
        root.removeHandler(old)
    _INSTALLED[:] = [handler]
    root.addHandler(handler)
    root.setLevel(_LEVELS.get(stdlib_level.lower(), logging.WARNING))
    _configured = True


def reset() -> None:
    """Undo ``configure`` (tests): structlog defaults, our stdlib handler removed, static context cleared."""
    global _configured
    structlog.reset_defaults()
    root = logging.getLogger()
    for old in _INSTALLED:
        root.removeHandler(old)
    _INSTALLED.clear()
    _static.clear()
    structlog.contextvars.clear_contextvars()
    _configured = False


def configure_from(settings: Any, *, stream: TextIO | None = None, **context: Any) -> None:
    """Configure from a ``daemon.config.LoggingSettings`` (level, format auto|json|console, stdlib_level)."""
    fmt = getattr(settings, "format", "auto")
    json = None if fmt == "auto" else fmt == "json"
    configure(
        settings.level,
        json,
        stdlib_level=getattr(settings, "stdlib_level", "warning"),
        stream=stream,
        **context,
    )


def get_logger(name: str, **bind: Any) -> Any:
    """A logger whose lines say which module wrote them (``logger=name``), with ``bind`` fields added.

    The logger is a lazy proxy: a module-level ``log = get_logger(__name__)`` follows a later ``configure``.
    """
    return structlog.get_logger(name, **bind)
