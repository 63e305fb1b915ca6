"""The API's responses: JSON encoding (sets as sorted lists, binary attributes left out, non-finite numbers
as null), the one error shape ``{"error": {"status", "code", "message", "fields"}}`` (``ApiError`` of
``daemon.api.errors`` is raised for it), and the ASGI types the application and its middlewares share."""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from fastapi.responses import Response

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _jsonable(value: Any) -> Any:
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    if isinstance(value, bytes | bytearray):
        return None  # binary attributes are internal encodings (the raw fixture), never shown as they are
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def json_response(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    try:
        data = json.dumps(body, separators=(",", ":"), default=_jsonable, allow_nan=False)
    except ValueError:
        data = json.dumps(_finite(body), separators=(",", ":"), default=_jsonable)
    return Response(data.encode(), status_code=status, media_type="application/json", headers=headers)


def error_body(
    status: int, code: str, message: str, fields: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    """The one error shape, whichever layer answers."""
    return {"error": {"status": status, "code": code, "message": message, "fields": fields or []}}


def error_response(
    status: int,
    code: str,
    message: str,
    fields: list[dict[str, str]] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    return json_response(error_body(status, code, message, fields), status, headers)
