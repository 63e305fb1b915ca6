"""The admin socket's protocol: one JSON request per line, one JSON answer per line (docs/operations.md).

Owns request parsing (``parse_request``), answer encoding (``encode_answer``) and the handler contract
(``Handler``, ``AdminError``, ``expect_args``). No I/O: the server (``daemon.runtime.admin.server``) and the
client (``daemon.runtime.admin.client``) move the bytes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import math
import shlex
from collections.abc import Awaitable, Callable, Sequence
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from daemon.runtime.errors import DaemonRuntimeError

Handler = Callable[[list[str]], Awaitable[Any]]
"""A command: takes the request's args, returns a JSON-able result; raises ``AdminError`` for a user error."""

_CMD_MAX = 64
_ARGS_MAX = 32


class AdminError(DaemonRuntimeError):
    """A user error: the message is sent to the client as ``{"ok": false, "error": message}``."""


class AdminRequest(BaseModel):
    """One request line in its JSON form. Unknown fields are refused so typos do not pass silently."""

    model_config = ConfigDict(extra="forbid")

    cmd: str = Field(min_length=1, max_length=_CMD_MAX, pattern=r"^[A-Za-z0-9_.-]+$")
    args: list[str] = Field(default_factory=list, max_length=_ARGS_MAX)
    id: str | int | None = None

    @field_validator("args", mode="before")
    @classmethod
    def _scalars_as_text(cls, value: Any) -> Any:
        # {"cmd": "match", "args": [71344]} means the same as ["71344"]; objects and nulls stay errors.
        if isinstance(value, list):
            return [str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v for v in value]
        return value


def parse_request(line: bytes) -> AdminRequest:
    """A request line (JSON object or bare words) as an ``AdminRequest``; ``AdminError`` says what is wrong."""
    try:
        text = line.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise AdminError("request is not valid UTF-8") from None
    if not text:
        raise AdminError("empty request")
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise AdminError(f"bad JSON: {exc.msg} at column {exc.colno}") from None
        except RecursionError:  # [[[[... thousands deep: the parser gives up before the line limit does
            raise AdminError("bad JSON: nested too deeply") from None
        if not isinstance(data, dict):
            raise AdminError("request must be a JSON object")
        try:
            return AdminRequest.model_validate(data)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"]) or "request"
            kind = first["type"]
            reason = "unknown field" if kind == "extra_forbidden" else first["msg"].lower()
            raise AdminError(f"bad request: {where}: {reason}") from None
    if text[0] in '["':
        raise AdminError("request must be a JSON object or a bare command line")
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise AdminError(f"bad command line: {exc}") from None
    try:
        return AdminRequest(cmd=words[0], args=words[1:])
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = "cmd" if first["loc"][:1] == ("cmd",) else "args"
        raise AdminError(f"bad request: {where}: {first['msg'].lower()}") from None


def jsonable(value: Any) -> Any:
    """``json.dumps`` default: the types handlers naturally return (DynamoDB gives Decimal, etc.)."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, SecretStr):
        return str(value)  # '**********', never the secret
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _finite(value: Any) -> Any:
    # JSON has no NaN/Infinity; a percentile over no samples is "no value", i.e. null.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def encode_answer(*, ok: bool, result: Any = None, error: str | None = None, request_id: Any = None) -> bytes:
    """One answer line. Raises TypeError/ValueError if ``result`` cannot be made JSON."""
    answer: dict[str, Any] = {"ok": ok}
    if ok:
        answer["result"] = result
    else:
        answer["error"] = error or "error"
    if request_id is not None:
        answer["id"] = request_id
    try:
        text = json.dumps(answer, default=jsonable, ensure_ascii=False, allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(json.loads(json.dumps(answer, default=jsonable))), ensure_ascii=False)
    return text.encode("utf-8") + b"\n"


def expect_args(cmd: str, args: Sequence[str], *names: str, optional: Sequence[str] = ()) -> list[str]:
    """``args`` if their count fits ``names`` (+ up to len(optional)); else AdminError with the usage."""
    if not len(names) <= len(args) <= len(names) + len(optional):
        usage = " ".join([cmd, *names, *(f"[{o}]" for o in optional)])
        raise AdminError(f"usage: {usage}")
    return list(args)
