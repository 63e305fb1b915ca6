"""Alert intents: a tick's alert reaches each device at most once, whatever moment its owner dies.

An *alerting* tick is one whose payloads carry an ``alert`` (an alert-worthy headline event, on an update or on
the match's end). Before any of its pushes goes out, its owner records an ``AlertIntent`` in the match's
``active-matches`` record, in the same fenced write as the tick's new state: the event keys, the exact payload
per perspective (so the timestamp, content-state, stale or dismissal date and alert are fixed), the priority
and the collapse id. Sessions are then pushed in one fixed order (by visitor key) and in chunks; before a
chunk is handed to the sender, the intent's *watermark* (``handed``: the last visitor key handed so far) is
moved past it. When the fan-out is over, the intent is removed.

An owner that finds an intent when it takes the match (its predecessor died or was cut off mid-fan-out)
completes it before anything else, with the same payloads:

- a session whose key is at or below the watermark may already have been reached: it gets the payload
  *without* its alert (same timestamp and content-state, so the event is on the device either way and the
  alert is never shown twice);
- a session above the watermark was certainly never pushed: it gets the payload with its alert, through the
  same chunk-and-watermark sequence, so a successor of the successor decides the same way.

Chunks grow geometrically (``first``, then doubling up to ``most``): few watermark writes for a big match, and
a small uncertain set (at most the chunk in flight) when an owner dies early in a fan-out.

Pure: no I/O, no clock. ``daemon.store.active_matches`` persists the record; ``actors.match`` runs the fan-out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from daemon.cricket.errors import EngineError

INTENT_ATTRIBUTE = "alertIntent"
HANDED_ATTRIBUTE = "alertHanded"
KINDS = frozenset({"update", "end"})


class IntentError(EngineError):
    """A persisted intent that cannot be read back: named, never guessed at."""


@dataclass(frozen=True)
class Chunk:
    """Sessions handed to the sender together, and the watermark persisted before they are."""

    keys: tuple[str, ...]
    watermark: str


@dataclass(frozen=True)
class Plan:
    """How an intent's fan-out goes on from its watermark: ``quiet`` keys (may have been reached) get the
    payload without its alert, in one hand-off and without a write; ``chunks`` get the alert, each after its
    watermark is persisted."""

    quiet: tuple[str, ...]
    chunks: tuple[Chunk, ...]


@dataclass(frozen=True)
class AlertIntent:
    kind: str  # "update" | "end"
    timestamp: int
    priority: int
    events: tuple[str, ...]  # the key events' keys, for people reading the record
    payloads: Mapping[str, bytes]  # perspective ("neutral" or a team id) -> the payload with its alert
    collapse_id: str | None = None
    handed: str | None = None  # every session key <= handed may have been pushed; None: none was
    # a hot match's intent is fanned out as a shared work item (``daemon.cricket.share``): its seq and shard
    # bounds, recorded with the intent so that a successor continues that very item, each shard from its own
    # watermark (``handed`` is then unused); None: the owner fans it out alone
    share_seq: int | None = None
    share_bounds: tuple[str, ...] = ()
    quiet_payloads: dict[str, bytes] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise IntentError(f"kind: {self.kind!r} is not one of {sorted(KINDS)}")
        if not self.payloads:
            raise IntentError("payloads: an intent needs at least one perspective's payload")
        for key, payload in self.payloads.items():
            self.quiet_payloads[key] = without_alert(payload)

    def payload_for(self, perspective: str, *, alert: bool) -> bytes:
        return self.payloads[perspective] if alert else self.quiet_payloads[perspective]

    def to_item(self) -> dict[str, Any]:
        """The ``alertIntent`` attribute (the watermark is its own attribute, ``alertHanded``, so that moving
        it is a one-attribute write)."""
        item: dict[str, Any] = {
            "kind": self.kind,
            "timestamp": int(self.timestamp),
            "priority": int(self.priority),
            "events": list(self.events),
            "payloads": {k: v.decode("utf-8") for k, v in self.payloads.items()},
        }
        if self.collapse_id:
            item["collapseId"] = self.collapse_id
        if self.share_seq is not None:
            item["share"] = {"seq": int(self.share_seq), "bounds": list(self.share_bounds)}
        return item

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> AlertIntent | None:
        """The unfinished intent of an ``active-matches`` record, or None when there is none."""
        raw = record.get(INTENT_ATTRIBUTE)
        if raw is None:
            return None
        if not isinstance(raw, Mapping):
            raise IntentError(f"{INTENT_ATTRIBUTE}: expected a map, got {type(raw).__name__}")
        try:
            payloads = raw["payloads"]
            if not isinstance(payloads, Mapping):
                raise IntentError(f"{INTENT_ATTRIBUTE}.payloads: expected a map")
            handed = record.get(HANDED_ATTRIBUTE)
            return cls(
                kind=str(raw["kind"]),
                timestamp=int(raw["timestamp"]),
                priority=int(raw["priority"]),
                events=tuple(str(e) for e in raw.get("events") or ()),
                payloads={str(k): str(v).encode("utf-8") for k, v in payloads.items()},
                collapse_id=str(raw["collapseId"]) if raw.get("collapseId") else None,
                handed=None if handed in (None, "") else str(handed),
                **_share_of(raw.get("share")),
            )
        except KeyError as exc:
            raise IntentError(f"{INTENT_ATTRIBUTE}.{exc.args[0]}: missing") from None
        except (TypeError, ValueError) as exc:
            if isinstance(exc, IntentError):
                raise
            raise IntentError(f"{INTENT_ATTRIBUTE}: {exc}") from None


def _share_of(raw: Any) -> dict[str, Any]:
    """The ``share`` part of a persisted intent as ``AlertIntent`` fields ({} when it has none)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not isinstance(raw.get("bounds", []), list):
        raise IntentError(f"{INTENT_ATTRIBUTE}.share: expected a map with a seq and a list of bounds")
    return {"share_seq": int(raw["seq"]), "share_bounds": tuple(str(b) for b in raw.get("bounds") or ())}


def has_alert(payload: bytes) -> bool:
    """Whether an APNs payload carries an alert (the device then shows it, once per receipt)."""
    aps = json.loads(payload).get("aps") or {}
    return "alert" in aps


def without_alert(payload: bytes) -> bytes:
    """The same payload without ``aps.alert``: same timestamp and content-state, nothing shown. Compact JSON,
    as the payload builders encode it."""
    body = json.loads(payload)
    if not isinstance(body, dict) or not isinstance(body.get("aps"), dict):
        raise IntentError("payload: not an APNs body (no aps object)")
    body["aps"].pop("alert", None)
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def alert_due(key: str, handed: str | None) -> bool:
    """True when the session ``key`` was certainly never pushed under the intent (it is above the
    watermark), so its alert may be shown."""
    return handed is None or key > handed


def chunk_sizes(n: int, *, first: int, most: int) -> list[int]:
    """Sizes of the chunks ``n`` sessions are handed over in: ``first``, then doubling, capped at ``most``."""
    if first < 1 or most < first:
        raise ValueError(f"chunks: need 1 <= first <= most, got first={first}, most={most}")
    sizes: list[int] = []
    size = first
    left = n
    while left > 0:
        take = min(size, left)
        sizes.append(take)
        left -= take
        size = min(size * 2, most)
    return sizes


def plan(keys: Sequence[str], handed: str | None, *, first: int, most: int) -> Plan:
    """Split the sessions' keys (any order) into the quiet ones and the alerting chunks, in visitor-key order."""
    ordered = sorted(set(keys))
    quiet = tuple(k for k in ordered if not alert_due(k, handed))
    due = [k for k in ordered if alert_due(k, handed)]
    chunks: list[Chunk] = []
    start = 0
    for size in chunk_sizes(len(due), first=first, most=most):
        part = tuple(due[start : start + size])
        chunks.append(Chunk(part, part[-1]))
        start += size
    return Plan(quiet, tuple(chunks))


def watermark_writes(n: int, *, first: int, most: int) -> int:
    """DynamoDB writes an alerting tick pays for ``n`` sessions beyond a routine tick's one state write: the
    first chunk's watermark rides on the intent's write, each later chunk costs one, and removing the intent
    costs one (the state itself is written with the intent)."""
    return max(len(chunk_sizes(n, first=first, most=most)) - 1, 0) + 1
