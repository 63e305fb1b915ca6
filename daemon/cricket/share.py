"""A hot match's shared fan-out: the decisions, pure. What a shard is, how the owner cuts its audience into
shards, what the owner publishes for the fleet (the board) and what each shard's record says, and which of a
shard's sessions get an alert when whoever delivers it may have been preceded by a delivery that died.

Terms (docs/delivery.md, "A hot match shared by the fleet", has the argument):

- the *owner* of a match (the holder of its lease) alone decides what is sent: the tick, the alert intent,
  the payload of each perspective;
- a *work item* is one fan-out the owner decided, in one of two *lanes*: ``tick`` (a routine or alerting
  tick's update or end, one at a time per match) and ``start`` (a round of push-to-starts, beside the ticks).
  It is named by its lane and its ``seq``, which only grows (``next_seq``);
- its *shards*: the item's key space (session visitor keys for a tick, follower user ids for a start) cut at
  the item's ``bounds``: shard ``i`` holds the keys in ``(bounds[i-1], bounds[i]]``, the first from the
  start of the key space, the last to its end, so a key belongs to exactly one shard whoever reads the
  audience and whenever;
- the *board* (``Board``, one per lane) is the owner's publication of its match's current work item in that
  lane, with the exact payloads, so any engine of the region (a *helper*, the owner included) can deliver a
  shard;
- each shard is delivered under a lease of its own (``cricket-locks``, the one lease implementation); its
  record (``ShardRecord``) carries the lease, the alert watermark ``handed`` (every key up to it may have
  been handed to a sender, written before the chunk it covers is handed) and, once delivered, ``done`` with
  the outcome counts.

A shard of an alerting item is planned from its watermark exactly as an alert intent's fan-out is
(``shard_plan``, by ``daemon.cricket.intent.plan``): keys at or below ``handed`` get the update without its
alert, keys above it get the alert in chunks whose watermark is persisted before each is handed over.

Pure: no I/O, no clock (times are handed in). ``daemon.store.locks`` stores what this module encodes;
``actors.share`` and ``actors.shard`` run it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from daemon.cricket.errors import EngineError
from daemon.cricket.intent import AlertIntent, Plan, plan, without_alert

TICK = "tick"
START = "start"
LANES = (TICK, START)
TICK_KINDS = frozenset({"update", "end"})
OUTCOMES = ("accepted", "rejected", "failed")


class ShareError(EngineError):
    """A board or a shard record that cannot be read back: named, never guessed at."""


# ------------------------------------------------------------------------------------------------ shards


def plan_bounds(keys: Iterable[str], shard_size: int) -> tuple[str, ...]:
    """Cut ``keys`` (any order, repeats allowed) into shards of at most ``shard_size`` keys each, as even as
    they come: the bounds, one fewer than the shards (none for one shard). Every key is non-empty."""
    if shard_size < 1:
        raise ValueError(f"shard_size: must be at least 1, got {shard_size}")
    ordered = sorted(set(keys))
    if any(not k for k in ordered):
        raise ValueError("keys: an empty key cannot be placed in a shard")
    n = len(ordered)
    shards = max(1, math.ceil(n / shard_size))
    return tuple(ordered[(i + 1) * n // shards - 1] for i in range(shards - 1))


def shard_count(bounds: Sequence[str]) -> int:
    return len(bounds) + 1


def shard_index(key: str, bounds: Sequence[str]) -> int:
    """The shard ``key`` belongs to: the first ``i`` with ``key <= bounds[i]``, else the last."""
    return bisect.bisect_left(bounds, key)


def shard_range(bounds: Sequence[str], index: int) -> tuple[str | None, str | None]:
    """Shard ``index`` as ``(after, through)``: its keys are above ``after`` (None: from the start) and at or
    below ``through`` (None: to the end)."""
    if not 0 <= index < shard_count(bounds):
        raise ValueError(f"shard {index}: there are {shard_count(bounds)} shards")
    after = bounds[index - 1] if index > 0 else None
    through = bounds[index] if index < len(bounds) else None
    return after, through


def in_shard(key: str, after: str | None, through: str | None) -> bool:
    return (after is None or key > after) and (through is None or key <= through)


def shard_keys(keys: Iterable[str], bounds: Sequence[str], index: int) -> list[str]:
    """The keys of shard ``index``, sorted."""
    after, through = shard_range(bounds, index)
    return sorted(k for k in set(keys) if in_shard(k, after, through))


def shard_slice(sorted_keys: Sequence[str], bounds: Sequence[str], index: int) -> Sequence[str]:
    """``shard_keys`` of keys already sorted and without repeats, found by bisection: a slice, in
    O(log n) plus the shard's size instead of a pass over every key."""
    after, through = shard_range(bounds, index)
    low = 0 if after is None else bisect.bisect_right(sorted_keys, after)
    high = len(sorted_keys) if through is None else bisect.bisect_right(sorted_keys, through)
    return sorted_keys[low:high]


def shard_plan(keys: Iterable[str], handed: str | None, *, first: int, most: int) -> Plan:
    """How an alerting shard is delivered from its watermark: the quiet keys (at or below ``handed``: a
    delivery before this one may have handed them over, so they get the update without its alert) and the
    alerting chunks above it, each to be handed over only after its watermark is persisted."""
    return plan(list(keys), handed, first=first, most=most)


def claim_order(n: int, start: int) -> list[int]:
    """The shards ``0..n-1`` from ``start`` on, round: helpers starting at different shards claim apart."""
    return [(start + i) % n for i in range(n)] if n else []


def next_seq(previous: int | None, now_ms: int) -> int:
    """The seq of a lane's next work item: above the last one the board shows, and at least the wall clock in
    milliseconds, so an item published after a board was removed never reuses an old item's shards."""
    return max(now_ms, (previous or 0) + 1)


# ------------------------------------------------------------------------------------------------ work items


def _payloads_in(raw: Any, where: str) -> dict[str, bytes]:
    if not isinstance(raw, Mapping) or not raw:
        raise ShareError(f"{where}.payloads: expected a non-empty map")
    return {str(k): str(v).encode("utf-8") for k, v in raw.items()}


def _bounds_in(raw: Any, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list | tuple):
        raise ShareError(f"{where}.bounds: expected a list")
    bounds = tuple(str(b) for b in raw)
    if list(bounds) != sorted(set(bounds)) or any(not b for b in bounds):
        raise ShareError(f"{where}.bounds: expected distinct non-empty keys in order")
    return bounds


@dataclass(frozen=True)
class TickWork:
    """A tick's fan-out as the owner decided it: its kind, priority, the exact payload of each perspective
    (with its alert when ``alert``), the collapse id an alert carries, and the shard bounds. ``stamp`` names
    the alert intent it delivers (the intent's timestamp; None for a routine tick)."""

    seq: int
    kind: str
    priority: int
    payloads: Mapping[str, bytes]
    alert: bool
    bounds: tuple[str, ...]
    published_at: float
    collapse_id: str | None = None
    stamp: int | None = None
    quiet_payloads: dict[str, bytes] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in TICK_KINDS:
            raise ShareError(f"tick.kind: {self.kind!r} is not one of {sorted(TICK_KINDS)}")
        if not self.payloads:
            raise ShareError("tick.payloads: a work item needs at least one perspective's payload")
        for key, payload in self.payloads.items():
            self.quiet_payloads[key] = without_alert(payload) if self.alert else payload

    @property
    def shards(self) -> int:
        return shard_count(self.bounds)

    def payload_for(self, perspective: str, *, alert: bool) -> bytes:
        return self.payloads[perspective] if alert else self.quiet_payloads[perspective]

    def to_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {
            "seq": self.seq,
            "kind": self.kind,
            "priority": self.priority,
            "alert": self.alert,
            "payloads": {k: v.decode("utf-8") for k, v in self.payloads.items()},
            "bounds": list(self.bounds),
            "publishedAt": self.published_at,
        }
        if self.collapse_id:
            item["collapseId"] = self.collapse_id
        if self.stamp is not None:
            item["stamp"] = self.stamp
        return item

    @classmethod
    def from_item(cls, raw: Any) -> TickWork:
        if not isinstance(raw, Mapping):
            raise ShareError(f"tick: expected a map, got {type(raw).__name__}")
        try:
            return cls(
                seq=int(raw["seq"]),
                kind=str(raw["kind"]),
                priority=int(raw["priority"]),
                payloads=_payloads_in(raw.get("payloads"), "tick"),
                alert=bool(raw["alert"]),
                bounds=_bounds_in(raw.get("bounds"), "tick"),
                published_at=float(raw["publishedAt"]),
                collapse_id=str(raw["collapseId"]) if raw.get("collapseId") else None,
                stamp=int(raw["stamp"]) if raw.get("stamp") is not None else None,
            )
        except KeyError as exc:
            raise ShareError(f"tick.{exc.args[0]}: missing") from None
        except ShareError:
            raise
        except (TypeError, ValueError) as exc:
            raise ShareError(f"tick: {exc}") from None


@dataclass(frozen=True)
class StartWork:
    """A round of push-to-starts as the owner decided it: the activity's attributes, the content-state of
    each perspective, the broadcast channel of each perspective (an iOS 18 device starts on it), the
    timestamp, and the shard bounds over follower user ids."""

    seq: int
    bounds: tuple[str, ...]
    published_at: float
    timestamp: int
    attributes: Mapping[str, Any]
    content: Mapping[str, Mapping[str, Any]]
    channels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.content:
            raise ShareError("start.content: a round of starts needs at least one perspective's content")

    @property
    def shards(self) -> int:
        return shard_count(self.bounds)

    def to_item(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "bounds": list(self.bounds),
            "publishedAt": self.published_at,
            "timestamp": self.timestamp,
            "attributes": dict(self.attributes),
            "content": {k: dict(v) for k, v in self.content.items()},
            "channels": dict(self.channels),
        }

    @classmethod
    def from_item(cls, raw: Any) -> StartWork:
        if not isinstance(raw, Mapping):
            raise ShareError(f"start: expected a map, got {type(raw).__name__}")
        try:
            content = raw["content"]
            if not isinstance(content, Mapping) or not all(isinstance(v, Mapping) for v in content.values()):
                raise ShareError("start.content: expected a map of maps")
            attributes = raw.get("attributes") or {}
            channels = raw.get("channels") or {}
            if not isinstance(attributes, Mapping) or not isinstance(channels, Mapping):
                raise ShareError("start: attributes and channels must be maps")
            return cls(
                seq=int(raw["seq"]),
                bounds=_bounds_in(raw.get("bounds"), "start"),
                published_at=float(raw["publishedAt"]),
                timestamp=int(raw["timestamp"]),
                attributes=dict(attributes),
                content={str(k): dict(v) for k, v in content.items()},
                channels={str(k): str(v) for k, v in channels.items()},
            )
        except KeyError as exc:
            raise ShareError(f"start.{exc.args[0]}: missing") from None
        except ShareError:
            raise
        except (TypeError, ValueError) as exc:
            raise ShareError(f"start: {exc}") from None


Work = TickWork | StartWork


@dataclass(frozen=True)
class Board:
    """What the owner of a hot match publishes for one lane (one item in ``cricket-locks`` per match and
    lane): who it is (its owner identity, its lease's epoch on the match lock, its ``ownerEpoch`` on
    ``active-matches``) and the lane's current work item. A helper delivers a shard of it only while the match
    lock shows that same owner and epoch. One item per lane, so that a round of starts published beside a
    tick never overwrites the tick's item, nor the other way round."""

    match_id: str
    lane: str
    owner: str
    lease_epoch: int
    owner_epoch: int
    work: Work

    def __post_init__(self) -> None:
        if self.lane not in LANES:
            raise ShareError(f"board.lane: {self.lane!r} is not one of {LANES}")
        if isinstance(self.work, TickWork) != (self.lane == TICK):
            raise ShareError(f"board.work: a {self.lane} lane holds {type(self.work).__name__}")

    def to_item(self) -> dict[str, Any]:
        return {
            "matchId": self.match_id,
            "lane": self.lane,
            "owner": self.owner,
            "leaseEpoch": self.lease_epoch,
            "ownerEpoch": self.owner_epoch,
            "work": self.work.to_item(),
        }

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Board:
        try:
            lane = str(item["lane"])
            if lane not in LANES:
                raise ShareError(f"board.lane: {lane!r} is not one of {LANES}")
            work: Work = (
                TickWork.from_item(item["work"]) if lane == TICK else StartWork.from_item(item["work"])
            )
            return cls(
                match_id=str(item["matchId"]),
                lane=lane,
                owner=str(item["owner"]),
                lease_epoch=int(item["leaseEpoch"]),
                owner_epoch=int(item["ownerEpoch"]),
                work=work,
            )
        except KeyError as exc:
            raise ShareError(f"board.{exc.args[0]}: missing") from None
        except ShareError:
            raise
        except (TypeError, ValueError) as exc:
            raise ShareError(f"board: {exc}") from None


# ------------------------------------------------------------------------------------------------ shard records


@dataclass(frozen=True)
class ShardRecord:
    """A shard's item as read back: its lease (owner, epoch, expiry by the writer's clock), the alert
    watermark, and, once delivered, the outcome counts."""

    owner: str
    epoch: int
    expires_at: float
    handed: str | None = None
    done: bool = False
    counts: Mapping[str, int] = field(default_factory=dict)
    acquired_at: float | None = None  # when its current holder claimed it (wall clock, the claimer's)

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> ShardRecord:
        try:
            handed = item.get("handed")
            return cls(
                owner=str(item["owner"]),
                epoch=int(item.get("epoch", 0)),
                expires_at=float(item.get("expiresAt", 0)),
                handed=None if handed in (None, "") else str(handed),
                done=item.get("doneAt") is not None,
                counts={k: int(item.get(k, 0)) for k in (*OUTCOMES, "total") if item.get(k) is not None},
                acquired_at=float(item["acquiredAt"]) if item.get("acquiredAt") is not None else None,
            )
        except KeyError as exc:
            raise ShareError(f"shard.{exc.args[0]}: missing") from None
        except (TypeError, ValueError) as exc:
            raise ShareError(f"shard: {exc}") from None


def alerting(work: Work) -> bool:
    """Whether ``work`` carries an alert: its shards are delivered one at a time per process, and each
    chunk's watermark is written before it goes, so a process that dies cost its followers one chunk."""
    return isinstance(work, TickWork) and work.alert


def claimable(record: ShardRecord | None, now: float) -> bool:
    """Whether a shard may be claimed at ``now`` (wall clock): never claimed, or not done and its lease run
    out (its holder died, stalled or gave it up). The claim's own condition decides for certain."""
    return record is None or (not record.done and record.expires_at < now)


def done_fields(counts: Mapping[str, int], total: int, now: float) -> dict[str, Any]:
    """What a delivered shard's record carries: when, and the outcome counts (the owner sums them)."""
    return {"doneAt": now, "total": int(total), **{k: int(counts.get(k, 0)) for k in OUTCOMES}}


def summed(records: Iterable[ShardRecord]) -> tuple[int, dict[str, int]]:
    """The pushes built and the outcome counts of a work item's delivered shards, summed."""
    total = 0
    counts = dict.fromkeys(OUTCOMES, 0)
    for record in records:
        total += int(record.counts.get("total", 0))
        for k in OUTCOMES:
            counts[k] += int(record.counts.get(k, 0))
    return total, counts


def first_claim(record: ShardRecord | None, seen_at: float) -> float | None:
    """When a shard was first claimed, as far as its record tells: its claim time when the record is of its
    first claim (epoch 1), else ``seen_at`` (when the reader first saw it claimed); None when unclaimed."""
    if record is None:
        return None
    if record.epoch == 1 and record.acquired_at is not None:
        return record.acquired_at
    return seen_at


def longest_wait(published_at: float, first_claims: Mapping[int, float], shards: int, now: float) -> float:
    """The longest any of a work item's ``shards`` waited to be taken: from publication to its first claim
    (``first_claims``: shard -> when, wall clock), or to ``now`` for one not taken yet."""
    waits = [max(0.0, first_claims.get(i, now) - published_at) for i in range(shards)]
    return max(waits, default=0.0)


# ------------------------------------------------------------------------------------------------ hot or not


def is_hot(per_token: int, *, was_hot: bool, share_above: int, cool_below: float) -> bool:
    """Whether a match's fan-out is shared: its per-token audience is above ``share_above`` (0: never), and a
    hot match stays hot until its audience falls below ``share_above * cool_below`` (so a match near the line
    does not flip at every session refresh)."""
    if share_above <= 0:
        return False
    if was_hot:
        return per_token >= share_above * cool_below
    return per_token > share_above


def tick_of_intent(intent: AlertIntent, *, published_at: float) -> TickWork:
    """The work item of a hot match's alert intent, as the intent records it (its seq and bounds with it): the
    item a successor of its owner continues, each shard from its own watermark."""
    if intent.share_seq is None:
        raise ShareError("intent: its fan-out was not shared (no seq recorded with it)")
    return TickWork(
        seq=intent.share_seq,
        kind=intent.kind,
        priority=intent.priority,
        payloads=intent.payloads,
        alert=True,
        bounds=intent.share_bounds,
        published_at=published_at,
        collapse_id=intent.collapse_id,
        stamp=intent.timestamp,
    )
