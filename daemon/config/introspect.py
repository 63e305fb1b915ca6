"""Walking the settings models by dotted path: which model or field a key names, and whether it is secret.

Loading uses it to place environment overrides and to word errors; the example generator uses it to find
each section's model.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, SecretStr

from daemon.config.models import Config

# Keys whose values must never be echoed back, even when they are wrong.
_SECRET_NAME_RE = re.compile(r"(token|secret|password|private_key|credential)", re.IGNORECASE)


def unwrap_optional(annotation: Any) -> list[Any]:
    """The non-None members of ``X | None`` / ``Optional[X]`` / ``Union[...]``; ``[annotation]`` otherwise."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    return [annotation]


def submodel(annotation: Any) -> type[BaseModel] | None:
    for member in unwrap_optional(annotation):
        if isinstance(member, type) and issubclass(member, BaseModel):
            return member
    return None


def model_at(path: Sequence[str | int]) -> type[BaseModel] | None:
    """The settings model found by following ``path`` from ``Config``; None if the path leaves the models."""
    model: type[BaseModel] | None = Config
    for part in path:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return None
        model = submodel(model.model_fields[part].annotation)
    return model


def field_annotation(path: Sequence[str]) -> Any:
    parent = model_at(path[:-1])
    if parent is None or path[-1] not in parent.model_fields:
        return None
    return parent.model_fields[path[-1]].annotation


def is_secret_path(path: Sequence[str | int]) -> bool:
    """True if the value at ``path`` is, or is inside, a secret (pydantic may append union tags to a loc)."""
    names = [p for p in path if isinstance(p, str)]
    for end in range(len(names), 0, -1):
        annotation = field_annotation(names[:end])
        if annotation is not None and any(m is SecretStr for m in unwrap_optional(annotation)):
            return True
        if _SECRET_NAME_RE.search(names[end - 1]) and not names[end - 1].endswith("_file"):
            return True
    return False


def is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def wants_raw_string(annotation: Any) -> bool:
    """True for fields typed str / SecretStr (optionally ``| None``): an env value is taken verbatim."""
    members = unwrap_optional(annotation)
    return bool(members) and all(m is str or m is SecretStr for m in members)


def suggest_key(model: type[BaseModel] | None, name: str) -> str:
    if model is None:
        return ""
    names = list(model.model_fields)
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (valid keys: {', '.join(names)})" if names else " (this section takes no keys yet)"
