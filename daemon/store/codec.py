"""Plain Python values <-> DynamoDB attribute values, and the update-expression builder.

Owns the one translation between the daemon's plain dicts and DynamoDB's typed wire format, so that no
repository ever sees ``Decimal`` or ``{"S": ...}``. Pure: no I/O, no boto3 client, no knowledge of tables.

Rules (the interface other components code against):
- in: ``str``, ``bool``, ``int``, ``float`` (finite), ``Decimal``, ``bytes``, ``None``, ``list``/``tuple``,
  ``dict`` with string keys, and non-empty ``set``/``frozenset`` of strings or of numbers;
- out: numbers come back as ``int`` when integral, else ``float`` (never ``Decimal``); binary as ``bytes``;
  lists, dicts and sets as such.
- a value DynamoDB cannot hold (NaN, infinity, an empty set, a non-string map key, an unknown type) raises
  ``ValueError`` naming the path of the offending field, e.g. ``previousScore.overs[2]``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

AttributeValue = dict[str, Any]


def _number(value: int | float | Decimal, path: str) -> str:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path}: {value!r} cannot be stored (DynamoDB numbers must be finite)")
        # repr() is the shortest string that round-trips, so 0.1 is stored as 0.1, not 0.1000000000000000055…
        return repr(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{path}: {value!r} cannot be stored (DynamoDB numbers must be finite)")
        return str(value)
    return str(value)


def to_attr(value: Any, path: str = "value") -> AttributeValue:
    """One plain value as a DynamoDB attribute value; ``path`` names it in error messages."""
    if value is None:
        return {"NULL": True}
    if isinstance(value, bool):  # before int: bool is an int subclass
        return {"BOOL": value}
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, int | float | Decimal):
        return {"N": _number(value, path)}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"B": bytes(value)}
    if isinstance(value, Mapping):
        out: dict[str, AttributeValue] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{path}: map key {k!r} is not a string")
            out[k] = to_attr(v, f"{path}.{k}")
        return {"M": out}
    if isinstance(value, list | tuple):
        return {"L": [to_attr(v, f"{path}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, set | frozenset):
        if not value:
            raise ValueError(f"{path}: an empty set cannot be stored (DynamoDB sets must be non-empty)")
        if all(isinstance(v, str) for v in value):
            return {"SS": sorted(value)}
        if all(isinstance(v, int | float | Decimal) and not isinstance(v, bool) for v in value):
            return {"NS": [_number(v, path) for v in value]}
        raise ValueError(f"{path}: a set must hold only strings or only numbers")
    raise ValueError(f"{path}: values of type {type(value).__name__} cannot be stored")


def _from_number(text: str) -> int | float:
    try:
        d = Decimal(text)
    except InvalidOperation as exc:  # pragma: no cover - DynamoDB never sends a malformed number
        raise ValueError(f"malformed DynamoDB number {text!r}") from exc
    if d == d.to_integral_value():
        return int(d)
    return float(d)


def from_attr(av: Mapping[str, Any]) -> Any:
    """One DynamoDB attribute value as a plain value."""
    ((kind, v),) = av.items()
    if kind == "S":
        return v
    if kind == "N":
        return _from_number(v)
    if kind == "BOOL":
        return bool(v)
    if kind == "NULL":
        return None
    if kind == "M":
        return {k: from_attr(x) for k, x in v.items()}
    if kind == "L":
        return [from_attr(x) for x in v]
    if kind == "B":
        return bytes(v)
    if kind == "SS":
        return set(v)
    if kind == "NS":
        return {_from_number(x) for x in v}
    if kind == "BS":
        return {bytes(x) for x in v}
    raise ValueError(f"unknown DynamoDB attribute type {kind!r}")


def to_item(item: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """A plain dict as a DynamoDB item; attribute names are the error paths."""
    out: dict[str, AttributeValue] = {}
    for k, v in item.items():
        if not isinstance(k, str) or not k:
            raise ValueError(f"attribute name {k!r} must be a non-empty string")
        out[k] = to_attr(v, k)
    return out


def from_item(item: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A DynamoDB item as a plain dict. Strings (most of what a page holds: tokens, keys, ids) are taken
    without a call per attribute; this halves the decoding of a 10,000-session re-read."""
    out: dict[str, Any] = {}
    for k, v in item.items():
        s = v.get("S")
        out[k] = s if s is not None and len(v) == 1 else from_attr(v)
    return out


def iso(moment: float | datetime, *, timespec: Literal["seconds", "milliseconds"] = "milliseconds") -> str:
    """A moment (epoch seconds, or a datetime; naive means UTC) as the ISO-8601 UTC text the data model
    holds, with a ``Z``: milliseconds for the ``*At`` attributes (``2026-10-09T13:00:00.000Z``), seconds
    for ``startTime`` and the ranges queried against it (``2026-10-09T13:00:00Z``), whose text must sort
    as time."""
    if isinstance(moment, datetime):
        moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    else:
        moment = datetime.fromtimestamp(moment, UTC)
    return moment.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


@dataclass
class UpdateBuilder:
    """Builds an UpdateItem's expressions with placeholders for every name and value.

    Placeholders for all names mean any attribute name works (``status``, ``ttl`` and ``owner`` are
    DynamoDB reserved words). ``kwargs()`` gives ``UpdateExpression``, ``ExpressionAttributeNames`` and,
    when there are any, ``ExpressionAttributeValues``; conditions use ``name()``/``value()`` for their own
    placeholders so that both share one namespace.
    """

    sets: list[str] = field(default_factory=list)
    removes: list[str] = field(default_factory=list)
    adds: list[str] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    values: dict[str, AttributeValue] = field(default_factory=dict)
    _by_name: dict[str, str] = field(default_factory=dict)

    def name(self, attr: str) -> str:
        if not isinstance(attr, str) or not attr:
            raise ValueError(f"attribute name {attr!r} must be a non-empty string")
        if attr not in self._by_name:
            ph = f"#n{len(self._by_name)}"
            self._by_name[attr] = ph
            self.names[ph] = attr
        return self._by_name[attr]

    def value(self, v: Any, path: str = "value") -> str:
        ph = f":v{len(self.values)}"
        self.values[ph] = to_attr(v, path)
        return ph

    def set(self, attr: str, v: Any) -> UpdateBuilder:
        self.sets.append(f"{self.name(attr)} = {self.value(v, attr)}")
        return self

    def set_if_not_exists(self, attr: str, v: Any) -> UpdateBuilder:
        n = self.name(attr)
        self.sets.append(f"{n} = if_not_exists({n}, {self.value(v, attr)})")
        return self

    def remove(self, attr: str) -> UpdateBuilder:
        self.removes.append(self.name(attr))
        return self

    def add(self, attr: str, v: int | float) -> UpdateBuilder:
        self.adds.append(f"{self.name(attr)} {self.value(v, attr)}")
        return self

    def fields(self, fields: Mapping[str, Any], *, refuse: Iterable[str] = ()) -> UpdateBuilder:
        """SET every field; a ``None`` value REMOVEs the attribute (NULL is never what a caller means, and a
        NULL GSI key attribute would be rejected). Names in ``refuse`` are keys or fences: ValueError."""
        refused = set(refuse)
        for k, v in fields.items():
            if k in refused:
                raise ValueError(f"{k}: may not be written through this method (key or fence attribute)")
            if v is None:
                self.remove(k)
            else:
                self.set(k, v)
        return self

    def expression(self) -> str:
        parts = []
        if self.sets:
            parts.append("SET " + ", ".join(self.sets))
        if self.removes:
            parts.append("REMOVE " + ", ".join(self.removes))
        if self.adds:
            parts.append("ADD " + ", ".join(self.adds))
        if not parts:
            raise ValueError("an update must change at least one attribute")
        return " ".join(parts)

    def kwargs(self, condition: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"UpdateExpression": self.expression(), "ExpressionAttributeNames": self.names}
        if condition:
            out["ConditionExpression"] = condition
        if self.values:
            out["ExpressionAttributeValues"] = self.values
        return out
