"""Structured logging (structlog): JSON when stderr is not a terminal, readable when it is.

Every line can carry ``instance_id`` and ``match_id`` (bound with ``structlog.contextvars`` or
``log.bind``). ``short_token`` shortens device tokens; secrets are never passed to a logger.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

_configured = False


def short_token(token: str | None) -> str:
    """A device token as logs show it: enough to correlate, never enough to push to."""
    if not token:
        return "-"
    return f"{token[:6]}…{token[-4:]}" if len(token) > 12 else "…"


def configure(level: str = "info", json: bool | None = None, **context: Any) -> None:
    """Configure structlog once per process. ``json=None`` picks JSON unless stderr is a terminal."""
    global _configured
    if json is None:
        json = not sys.stderr.isatty()
    numeric = getattr(logging, level.upper(), logging.INFO)
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
    ]
    processors.append(structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer())
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    structlog.contextvars.clear_contextvars()
    if context:
        structlog.contextvars.bind_contextvars(**context)
    _configured = True


def get_logger(name: str, **bind: Any) -> Any:
    return structlog.get_logger(name).bind(**bind) if bind else structlog.get_logger(name)
