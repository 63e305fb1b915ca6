"""``active-matches``: which matches are being processed, by whom, and each match's previous state.

Owns the record of a live match: ``matchId`` (key), ``status`` (``active`` | ``ended``; ``idle`` may be
written by operators, or by an owner letting go of a fixture SportMonks does not know, to free a record for
re-registration; an ``ended`` record is reopened when the feed shows the match live again), ``instanceId`` (owner), ``ownerEpoch`` (the
fencing token), ``registeredAt``, ``claimedAt``, ``lastTickAt``, ``endedAt`` (ISO-8601 UTC strings), the
state the engine diffs against (``previousScore``, ``previousBatting``, ``previousBowling``,
``last30Balls``, ``previousBallId``, ``previousStatus``, ``matchPhase``, ...), ``cooldowns`` (event key ->
expiry, epoch seconds), ``ttl`` (epoch seconds, set when the match is deactivated), and while an alerting
tick's pushes are going out, its ``alertIntent`` (the payloads, see ``daemon.cricket.intent``) and
``alertHanded`` (the fan-out's watermark): written with the tick's state before its first push, the watermark
moved before each chunk, both removed when the fan-out is over; ``followsRemovedAt`` once the follows of an
ended match were removed after its grace period (``mark_follows_removed``; a reopen clears it).

Fencing: the lock (``locks.py``) decides who *should* own a match; ``ownerEpoch`` makes sure only that
owner's writes land. Registration writes ownerEpoch 1; a takeover (``claim_active_match``) atomically sets
``instanceId`` to the new owner and increments ``ownerEpoch``. Every state write is conditioned on
``instanceId = :me AND ownerEpoch = :epoch AND status = :active``, so a paused former owner - even one
that still believes it holds the lease - can no longer write once someone else claimed the match. A
failed fence returns False: the actor must stop at once.

Not touched here: the lock item, Live Activity sessions, follows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from daemon.cricket.intent import HANDED_ATTRIBUTE, INTENT_ATTRIBUTE
from daemon.store.base import Item, Repository
from daemon.store.codec import UpdateBuilder, iso, to_attr
from daemon.store.tables import ACTIVE_MATCHES

STATUS_ACTIVE = "active"
STATUS_ENDED = "ended"
STATUS_IDLE = "idle"

# Attributes only the registration/claim/deactivate paths may write: the key and the fence.
FENCE_ATTRIBUTES = frozenset({"matchId", "instanceId", "ownerEpoch", "status"})

DEFAULT_ENDED_TTL_S = 24 * 3600.0
"""How long an ended match's record stays readable (the seed: "expire after the match ends + buffer")."""


class ActiveMatchRepository(Repository):
    logical = ACTIVE_MATCHES

    async def get_active_match_state(self, match_id: str, *, now: float | None = None) -> Item | None:
        """The match's record (strongly consistent, so an owner reads its own last write), or None."""
        return await self._get(match_id, consistent=True, now=now)

    async def get_all_active_matches(self, *, now: float | None = None) -> list[Item]:
        """Every record, all statuses, expired ones filtered (Scan, every page)."""
        return await self._scan(now=now, ConsistentRead=True)

    async def register_active_match(
        self,
        match_id: str,
        instance_id: str,
        *,
        fields: Mapping[str, Any] | None = None,
        now: float | None = None,
    ) -> bool:
        """Register a match as active and owned by ``instance_id`` with ``ownerEpoch`` 1.

        PutItem conditioned on ``attribute_not_exists(matchId) OR status = :idle``. False when the match
        is already registered (expected: another instance has it). A retried PutItem whose first attempt
        succeeded would fail its own condition; the item returned on the failure tells us, and such a
        register counts as done (same instance, still epoch 1, still active).
        """
        t = self._now(now)
        extra = dict(fields or {})
        for k in extra:
            if k in FENCE_ATTRIBUTES or k == "registeredAt":
                raise ValueError(f"fields.{k}: is written by register_active_match itself")
        item = {
            **{k: v for k, v in extra.items() if v is not None},
            "matchId": match_id,
            "status": STATUS_ACTIVE,
            "instanceId": instance_id,
            "ownerEpoch": 1,
            "registeredAt": iso(t),
        }
        ok, old = await self._put_or_old(
            item,
            condition="attribute_not_exists(#k) OR #s = :idle",
            ExpressionAttributeNames={"#k": "matchId", "#s": "status"},
            ExpressionAttributeValues={":idle": to_attr(STATUS_IDLE)},
        )
        if ok:
            return True
        return bool(
            old
            and old.get("instanceId") == instance_id
            and old.get("status") == STATUS_ACTIVE
            and old.get("ownerEpoch") == 1
        )

    async def claim_active_match(
        self, match_id: str, instance_id: str, *, now: float | None = None
    ) -> int | None:
        """Take over an active match (the caller just acquired its lock): set ``instanceId`` to us and
        increment ``ownerEpoch``. Returns the new epoch - the fencing token for every later write - or
        None when the match is not registered or not active."""
        t = self._now(now)
        u = UpdateBuilder().set("instanceId", instance_id).set("claimedAt", iso(t)).add("ownerEpoch", 1)
        cond = f"attribute_exists({u.name('matchId')}) AND {u.name('status')} = {u.value(STATUS_ACTIVE)}"
        resp = await self._update(self._key(match_id), u.kwargs(cond), ReturnValues="UPDATED_NEW")
        if resp is None:
            return None
        return int(resp["Attributes"]["ownerEpoch"]["N"])

    def _fenced(self, u: UpdateBuilder, instance_id: str, epoch: int) -> str:
        return (
            f"{u.name('instanceId')} = {u.value(instance_id)} AND {u.name('ownerEpoch')} = {u.value(epoch)}"
            f" AND {u.name('status')} = {u.value(STATUS_ACTIVE)}"
        )

    async def update_match_state(
        self,
        match_id: str,
        instance_id: str,
        epoch: int,
        state: Mapping[str, Any],
        *,
        now: float | None = None,
    ) -> bool:
        """Write the tick's state (every key of ``state``; a None value removes the attribute) plus
        ``lastTickAt``, fenced on owner, epoch and status. False when the fence failed: we are no longer
        the owner and must stop."""
        t = self._now(now)
        for k in state:
            if k in FENCE_ATTRIBUTES or k == "lastTickAt":
                raise ValueError(
                    f"state.{k}: key, fence and lastTickAt attributes cannot be written as state"
                )
        u = UpdateBuilder().fields(state).set("lastTickAt", iso(t))
        return (
            await self._update(self._key(match_id), u.kwargs(self._fenced(u, instance_id, epoch))) is not None
        )

    async def move_alert_watermark(self, match_id: str, instance_id: str, epoch: int, handed: str) -> bool:
        """Move the alert intent's watermark to ``handed`` (every session key up to it may be pushed next),
        with the fence. False when the fence failed."""
        return await self.update_match_state(match_id, instance_id, epoch, {HANDED_ATTRIBUTE: handed})

    async def clear_alert_intent(self, match_id: str, instance_id: str, epoch: int) -> bool:
        """Remove the finished alert intent and its watermark, with the fence. False when the fence failed."""
        return await self.update_match_state(
            match_id, instance_id, epoch, {INTENT_ATTRIBUTE: None, HANDED_ATTRIBUTE: None}
        )

    async def update_cooldowns(
        self, match_id: str, instance_id: str, epoch: int, cooldowns: Mapping[str, float]
    ) -> bool:
        """Replace the ``cooldowns`` map (event key -> expiry), with the same fence."""
        u = UpdateBuilder().set("cooldowns", dict(cooldowns))
        return (
            await self._update(self._key(match_id), u.kwargs(self._fenced(u, instance_id, epoch))) is not None
        )

    async def deactivate_match(
        self,
        match_id: str,
        instance_id: str,
        epoch: int,
        *,
        ttl_s: float = DEFAULT_ENDED_TTL_S,
        now: float | None = None,
    ) -> bool:
        """Mark the match ended (``status=ended``, ``endedAt``, ``ttl = now + ttl_s``), with the fence."""
        t = self._now(now)
        u = UpdateBuilder().set("status", STATUS_ENDED).set("endedAt", iso(t)).set("ttl", int(t + ttl_s))
        return (
            await self._update(self._key(match_id), u.kwargs(self._fenced(u, instance_id, epoch))) is not None
        )

    async def reopen_ended_match(
        self, match_id: str, instance_id: str, *, now: float | None = None
    ) -> int | None:
        """Take an ended match back (the feed ended it wrongly and shows it live again; the caller holds its
        lock): ``status`` active, ``instanceId`` us, ``ownerEpoch`` incremented, ``ttl`` and ``endedAt``
        removed, the engine's state kept. Returns the new epoch, or None when the record is not ended."""
        t = self._now(now)
        u = (
            UpdateBuilder()
            .set("status", STATUS_ACTIVE)
            .set("instanceId", instance_id)
            .set("claimedAt", iso(t))
            .add("ownerEpoch", 1)
            .remove("ttl")
            .remove("endedAt")
            .remove("followsRemovedAt")
        )
        cond = f"attribute_exists({u.name('matchId')}) AND {u.name('status')} = {u.value(STATUS_ENDED)}"
        resp = await self._update(self._key(match_id), u.kwargs(cond), ReturnValues="UPDATED_NEW")
        if resp is None:
            return None
        return int(resp["Attributes"]["ownerEpoch"]["N"])

    async def mark_follows_removed(self, match_id: str, ended_at: str, *, now: float | None = None) -> bool:
        """Record that the follows of the match that ended at ``ended_at`` are removed (``followsRemovedAt``);
        False when the record is no longer that ended match (reopened, or ended again since)."""
        u = UpdateBuilder().set("followsRemovedAt", iso(self._now(now)))
        cond = f"{u.name('status')} = {u.value(STATUS_ENDED)} AND {u.name('endedAt')} = {u.value(ended_at)}"
        return await self._update(self._key(match_id), u.kwargs(cond)) is not None

    async def release_match(
        self,
        match_id: str,
        instance_id: str,
        epoch: int,
        *,
        ttl_s: float = DEFAULT_ENDED_TTL_S,
        now: float | None = None,
    ) -> bool:
        """Let a match go without ending it (``status=idle``, ``ttl = now + ttl_s``), with the fence: it may be
        registered again by anyone, as when an operator idles it."""
        t = self._now(now)
        u = UpdateBuilder().set("status", STATUS_IDLE).set("ttl", int(t + ttl_s))
        return (
            await self._update(self._key(match_id), u.kwargs(self._fenced(u, instance_id, epoch))) is not None
        )

    async def delete_active_match(self, match_id: str) -> None:
        """Delete the record (manual cleanup)."""
        await self._delete(self._key(match_id))
