"""``cricket-locks``: leased locks, one item per lock (``lockKey``), and per-follower push-to-start claims.

Owns the lock items only (``owner``, ``expiresAt``: epoch seconds by the writer's clock and the table's TTL,
``acquiredAt``, ``epoch``: the fencing token ``acquire_fenced`` increments, kept across expiry). What a lock
protects is fenced elsewhere (``active-matches.ownerEpoch``, or ``lease_condition`` in the writer's
transaction). Owners are unique per process (``owner_identity``). The lease built on these items, its clock
and its renewals, is ``actors.lease``; docs/delivery.md and docs/architecture.md have why.

Push-to-start claims (``start:{matchId}:{userId}``) are holds of the same shape, claimed by the hundred
(``claim_push_to_starts``), held or given up by the hundred (``confirm_push_to_starts``,
``release_push_to_starts``).

A hot match's shared fan-out lives here too (``daemon.cricket.share`` has what each item means): the region's
hot list (``hot:{region}``, one attribute per hot match naming its owner and lease epoch, and one per engine
that follows another's hot match, ready to deliver its shards, saying until when), each hot match's
boards (``share:{matchId}:{lane}``, written by its owner only, never over a newer owner's) and each shard's lease
(``shard:{matchId}:{lane}:{seq}:{i}``, taken and renewed with ``acquire_fenced``/``extend_fenced`` like any
lease, its watermark and outcome counts set in the same writes). Reading of the data model: its conditions name ``lockId`` and ``holder``; the
table's attributes, ``lockKey`` and ``owner``, are the consistent reading.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from daemon.store.base import Repository
from daemon.store.codec import from_item, to_attr, to_item
from daemon.store.dynamo import TRANSACT_MAX_ACTIONS, cancellation_codes
from daemon.store.tables import LOCKS

OWNER_SEPARATOR = "#"  # not allowed in a configured instance id, so the split below is unambiguous


def owner_identity(instance_id: str, nonce: str | None = None) -> str:
    """The owner this process writes on locks and ``active-matches``: ``{instance_id}#{nonce}``, the nonce
    random per process (48 bits) unless given."""
    if not instance_id or OWNER_SEPARATOR in instance_id:
        raise ValueError(f"instance_id: {instance_id!r} must be non-empty and free of {OWNER_SEPARATOR!r}")
    return f"{instance_id}{OWNER_SEPARATOR}{nonce or secrets.token_hex(6)}"


def instance_of(owner: str) -> str:
    """The configured instance id inside an owner identity (the owner itself when it carries no nonce)."""
    return owner.split(OWNER_SEPARATOR, 1)[0]


def match_lock_key(match_id: str) -> str:
    """The lock key of a match, as the data model spells it."""
    return f"match:{match_id}"


def prematch_lock_key(match_id: str) -> str:
    """The lock under which one instance at a time works through a match's prematch notifications."""
    return f"prematch:{match_id}"


def push_to_start_claim_key(match_id: str, user_id: str) -> str:
    """The hold under which a match's owner starts one follower's Live Activity (see ``claim_push_to_starts``)."""
    return f"start:{match_id}:{user_id}"


def feed_lock_key(region: str) -> str:
    """The lease of the region's SportMonks feed leader."""
    return f"feed:{region}"


def job_lock_key(name: str, region: str) -> str:
    """The lease under which one instance of the region runs the job ``name``."""
    return f"job:{name}:{region}"


def hot_list_key(region: str) -> str:
    """The region's list of hot matches (their fan-out shared by every engine of the region)."""
    return f"hot:{region}"


def share_board_key(match_id: str, lane: str) -> str:
    """A hot match's board for one lane (``tick``, ``start``): its owner's current work item there."""
    return f"share:{match_id}:{lane}"


def shard_key(match_id: str, lane: str, seq: int, index: int) -> str:
    """The lease under which one engine delivers shard ``index`` of a hot match's work item ``(lane, seq)``."""
    return f"shard:{match_id}:{lane}:{seq}:{index}"


HOT_PREFIX = "m:"  # a hot list attribute per match: "m:{matchId}"
HELPER_PREFIX = "h:"  # a hot list attribute per engine ready to help: "h:{owner}" -> until (epoch seconds)


@dataclass(frozen=True)
class HotList:
    """The region's hot list as read: each hot match (``{owner, epoch, since}``) and each engine that said
    it follows another's hot match (its owner identity -> until when, by its clock)."""

    matches: dict[str, dict[str, Any]]
    helpers: dict[str, float]


@dataclass(frozen=True)
class Lease:
    """A region-wide lease as acquired or renewed: the fencing token is ``epoch``."""

    key: str
    owner: str
    epoch: int
    expires_at: float  # epoch seconds, the writer's clock


def lease_is_free(item: dict[str, Any] | None, now: float) -> bool:
    """Whether anyone may take the lease described by ``item`` at ``now`` (the acquire condition)."""
    return item is None or float(item.get("expiresAt", 0)) < now


def lease_holds(item: dict[str, Any] | None, lease: Lease, now: float) -> bool:
    """Whether a write fenced on ``lease`` is allowed at ``now`` (what ``lease_condition`` checks)."""
    return (
        item is not None
        and item.get("owner") == lease.owner
        and int(item.get("epoch", 0)) == lease.epoch
        and float(item.get("expiresAt", 0)) > now
    )


class LockRepository(Repository):
    logical = LOCKS

    async def acquire(self, lock_key: str, owner: str, lease_s: float, *, now: float | None = None) -> bool:
        """Take the lock for ``lease_s`` seconds if it is free, expired, or already ours. False when another
        owner holds an unexpired lease (expected, not an error)."""
        t = self._now(now)
        if not owner:
            raise ValueError("owner: must be a non-empty string")
        if lease_s <= 0:
            raise ValueError(f"lease_s: must be positive, got {lease_s!r}")
        item = {"lockKey": lock_key, "owner": owner, "expiresAt": t + lease_s, "acquiredAt": t}
        return await self._put(
            item,
            condition="attribute_not_exists(#k) OR #exp < :now OR #owner = :owner",
            ExpressionAttributeNames={"#k": "lockKey", "#exp": "expiresAt", "#owner": "owner"},
            ExpressionAttributeValues={":now": to_attr(t), ":owner": to_attr(owner)},
        )

    async def extend(self, lock_key: str, owner: str, lease_s: float, *, now: float | None = None) -> bool:
        """Renew our lease to ``now + lease_s``. False when the lock is gone or someone else owns it."""
        t = self._now(now)
        if lease_s <= 0:
            raise ValueError(f"lease_s: must be positive, got {lease_s!r}")
        resp = await self._update(
            self._key(lock_key),
            {
                "UpdateExpression": "SET #exp = :exp",
                "ConditionExpression": "#owner = :owner",
                "ExpressionAttributeNames": {"#exp": "expiresAt", "#owner": "owner"},
                "ExpressionAttributeValues": {":exp": to_attr(t + lease_s), ":owner": to_attr(owner)},
            },
        )
        return resp is not None

    async def release(self, lock_key: str, owner: str) -> bool:
        """Delete the lock if we own it. False when it is gone or someone else owns it."""
        ok, _ = await self._delete(
            self._key(lock_key),
            condition="#owner = :owner",
            ExpressionAttributeNames={"#owner": "owner"},
            ExpressionAttributeValues={":owner": to_attr(owner)},
        )
        return ok

    async def get(self, lock_key: str, *, now: float | None = None) -> dict[str, Any] | None:
        """The lock item (strongly consistent), or None when there is none or its lease has run out."""
        return await self._get(lock_key, consistent=True, now=now)

    # --- push-to-start claims ----------------------------------------------------------------------------

    async def claim_push_to_starts(
        self,
        match_id: str,
        user_ids: Sequence[str],
        *,
        owner: str,
        hold_s: float,
        now: float | None = None,
        force: Collection[str] = (),
    ) -> list[str]:
        """Claim the push-to-start of each of ``user_ids`` (followers of ``match_id``) for ``hold_s`` seconds;
        returns those claimed, in the order given: every one without an unexpired claim (whoever wrote it),
        and every one in ``force`` (started again on purpose: its channel was recreated). The push must not
        be sent to the others.

        One strongly consistent BatchGetItem per 100 followers reads the claims; the free ones are written in
        TransactWriteItems of up to 100 conditional puts (``attribute_not_exists(lockKey) OR expiresAt <
        :now``), so a claim another writer took between the read and the write (the prematch job starting
        the follower before the match, an owner's successor) is never overwritten: its transaction is
        cancelled, the cancellation reasons name the claims taken, and the rest are written again without
        them. A forced claim is written without a condition."""
        if hold_s < 0:
            raise ValueError(f"hold_s: must be >= 0, got {hold_s!r}")
        t = self._now(now)
        users = list(dict.fromkeys(user_ids))
        if not users:
            return []
        forced = set(force)
        keys = [push_to_start_claim_key(match_id, u) for u in users if u not in forced]
        held: set[str] = set()
        if keys:
            raw = await self.dynamo.batch_get(self.logical, [self._key(k) for k in keys], consistent=True)
            for item in (from_item(r) for r in raw):
                if self._alive(item, t):
                    held.add(str(item["lockKey"]))
        free = [u for u in users if u in forced or push_to_start_claim_key(match_id, u) not in held]
        won: set[str] = set()
        for i in range(0, len(free), TRANSACT_MAX_ACTIONS):
            won.update(
                await self._claim_chunk(
                    match_id, free[i : i + TRANSACT_MAX_ACTIONS], owner, hold_s, t, forced
                )
            )
        return [u for u in users if u in won]

    async def _claim_chunk(
        self, match_id: str, users: list[str], owner: str, hold_s: float, t: float, forced: set[str]
    ) -> list[str]:
        """Write the claims of ``users`` in one transaction; a claim found taken meanwhile is left out and the
        transaction tried again without it. Returns the users whose claim was written."""
        table = self.dynamo.table(self.logical)

        def put(u: str) -> dict[str, Any]:
            action: dict[str, Any] = {
                "TableName": table,
                "Item": to_item(
                    {
                        "lockKey": push_to_start_claim_key(match_id, u),
                        "owner": owner,
                        "expiresAt": t + hold_s,
                        "claimedAt": t,
                    }
                ),
            }
            if u not in forced:
                action["ConditionExpression"] = "attribute_not_exists(lockKey) OR expiresAt < :now"
                action["ExpressionAttributeValues"] = {":now": to_attr(t)}
            return {"Put": action}

        return await self._transact_each(users, put)

    async def confirm_push_to_starts(
        self, match_id: str, user_ids: Sequence[str], *, owner: str, hold_s: float, now: float | None = None
    ) -> int:
        """Hold ``owner``'s claims of ``user_ids`` until ``now + hold_s``: their push-to-start was delivered.

        A claim is taken for a short hold (about a lease) before the push is sent and held for the whole
        interval only once APNs accepted it, so the claim of an owner that died before sending runs out within
        a lease and its successor starts the follower then. Claims no longer ``owner``'s are left alone; how
        many were held."""
        t = self._now(now)
        table = self.dynamo.table(self.logical)

        def hold(u: str) -> dict[str, Any]:
            return {
                "Update": {
                    "TableName": table,
                    "Key": self._key(push_to_start_claim_key(match_id, u)),
                    "UpdateExpression": "SET expiresAt = :exp, confirmedAt = :now",
                    "ConditionExpression": "#owner = :owner",
                    "ExpressionAttributeNames": {"#owner": "owner"},
                    "ExpressionAttributeValues": {
                        ":exp": to_attr(t + hold_s),
                        ":now": to_attr(t),
                        ":owner": to_attr(owner),
                    },
                }
            }

        users = list(dict.fromkeys(user_ids))
        held = 0
        for i in range(0, len(users), TRANSACT_MAX_ACTIONS):
            held += len(await self._transact_each(users[i : i + TRANSACT_MAX_ACTIONS], hold))
        return held

    async def release_push_to_starts(self, match_id: str, user_ids: Sequence[str], *, owner: str) -> int:
        """Give ``owner``'s claims of ``user_ids`` up (their push-to-start was not delivered: the next attempt,
        by whichever owner or the prematch job, may start them); how many were released."""
        table = self.dynamo.table(self.logical)

        def free(u: str) -> dict[str, Any]:
            return {
                "Delete": {
                    "TableName": table,
                    "Key": self._key(push_to_start_claim_key(match_id, u)),
                    "ConditionExpression": "#owner = :owner",
                    "ExpressionAttributeNames": {"#owner": "owner"},
                    "ExpressionAttributeValues": {":owner": to_attr(owner)},
                }
            }

        users = list(dict.fromkeys(user_ids))
        freed = 0
        for i in range(0, len(users), TRANSACT_MAX_ACTIONS):
            freed += len(await self._transact_each(users[i : i + TRANSACT_MAX_ACTIONS], free))
        return freed

    async def _transact_each(self, users: list[str], action: Callable[[str], dict[str, Any]]) -> list[str]:
        """One TransactWriteItems of ``action(u)`` for each of ``users`` (at most 100); an action whose condition
        fails is left out and the transaction tried again without it. Returns the users whose action was
        written."""
        pending = list(users)
        while pending:  # each cancellation for a failed condition removes at least one
            try:
                await self.dynamo.call(
                    self.logical, "transact_write_items", TransactItems=[action(u) for u in pending]
                )
                return pending
            except ClientError as exc:
                codes = cancellation_codes(exc)
                if codes is None:
                    raise
                failed = {
                    pending[i]
                    for i, code in enumerate(codes[: len(pending)])
                    if code == "ConditionalCheckFailed"
                }
                if not failed:
                    raise  # cancelled for another reason (a conflicting transaction): botocore retried already
                pending = [u for u in pending if u not in failed]
        return []

    # --- fenced region-wide leases -------------------------------------------------------------------------

    async def acquire_fenced(
        self,
        lock_key: str,
        owner: str,
        lease_s: float,
        *,
        now: float | None = None,
        fields: dict[str, Any] | None = None,
    ) -> tuple[Lease | None, dict[str, Any] | None]:
        """Take the lease if it is free or run out, with a new epoch. Returns (the lease, the lock item as
        written: what the last holder left on it survives) on success, else (None, the lock item as it
        stands) so a follower learns who leads without a second call.

        A lost-response retry of our own successful acquire fails the condition and finds the lock ours:
        that is reported as success with the epoch the lock holds, never as a second bump."""
        t = self._now(now)
        if not owner:
            raise ValueError("owner: must be a non-empty string")
        if lease_s <= 0:
            raise ValueError(f"lease_s: must be positive, got {lease_s!r}")
        names = {
            "#k": "lockKey",
            "#exp": "expiresAt",
            "#owner": "owner",
            "#acq": "acquiredAt",
            "#ep": "epoch",
        }
        values: dict[str, Any] = {
            ":now": to_attr(t),
            ":owner": to_attr(owner),
            ":exp": to_attr(t + lease_s),
            ":one": to_attr(1),
        }
        sets = ["#owner = :owner", "#exp = :exp", "#acq = :now"]
        for i, (name, value) in enumerate((fields or {}).items()):
            names[f"#f{i}"] = name
            values[f":f{i}"] = to_attr(value, name)
            sets.append(f"#f{i} = :f{i}")
        resp = await self._update(
            self._key(lock_key),
            lane="lease",
            update={
                "UpdateExpression": "SET " + ", ".join(sets) + " ADD #ep :one",
                "ConditionExpression": "attribute_not_exists(#k) OR #exp < :now",
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
                "ReturnValues": "ALL_NEW",
            },
        )
        if resp is not None:
            item = from_item(resp["Attributes"])
            return Lease(lock_key, owner, int(item["epoch"]), float(item["expiresAt"])), item
        current = await self._get(lock_key, consistent=True, now=t, lane="lease")
        if current is not None and current.get("owner") == owner:
            return Lease(lock_key, owner, int(current.get("epoch", 0)), float(current["expiresAt"])), current
        return None, current

    async def extend_fenced(
        self, lease: Lease, lease_s: float, *, now: float | None = None, fields: dict[str, Any] | None = None
    ) -> Lease | None:
        """Renew ``lease`` to ``now + lease_s`` (and set ``fields`` on the lock item: a leader's heartbeat);
        None when the lock has another owner or epoch (the lease is lost)."""
        t = self._now(now)
        if lease_s <= 0:
            raise ValueError(f"lease_s: must be positive, got {lease_s!r}")
        names = {"#exp": "expiresAt", "#owner": "owner", "#ep": "epoch"}
        values: dict[str, Any] = {
            ":exp": to_attr(t + lease_s),
            ":owner": to_attr(lease.owner),
            ":ep": to_attr(lease.epoch),
        }
        sets = ["#exp = :exp"]
        for i, (name, value) in enumerate((fields or {}).items()):
            names[f"#f{i}"] = name
            values[f":f{i}"] = to_attr(value, name)
            sets.append(f"#f{i} = :f{i}")
        resp = await self._update(
            self._key(lease.key),
            lane="lease",
            update={
                "UpdateExpression": "SET " + ", ".join(sets),
                "ConditionExpression": "#owner = :owner AND #ep = :ep",
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            },
        )
        return None if resp is None else Lease(lease.key, lease.owner, lease.epoch, t + lease_s)

    async def release_fenced(self, lease: Lease) -> bool:
        """Give the lease up at once (``expiresAt = 0``) but keep the item, so the next holder's epoch is
        still higher. False when it was no longer ours."""
        resp = await self._update(
            self._key(lease.key),
            lane="lease",
            update={
                "UpdateExpression": "SET #exp = :zero",
                "ConditionExpression": "#owner = :owner AND #ep = :ep",
                "ExpressionAttributeNames": {"#exp": "expiresAt", "#owner": "owner", "#ep": "epoch"},
                "ExpressionAttributeValues": {
                    ":zero": to_attr(0),
                    ":owner": to_attr(lease.owner),
                    ":ep": to_attr(lease.epoch),
                },
            },
        )
        return resp is not None

    async def read(self, lock_key: str) -> dict[str, Any] | None:
        """The lock item whether or not its lease has run out (strongly consistent): who led last."""
        return await self._get(lock_key, consistent=True, now=float("-inf"))

    # --- a hot match's shared fan-out ----------------------------------------------------------------------

    async def get_hot_list(self, region: str) -> HotList:
        """The region's hot matches and its helpers' words (strongly consistent, one GetItem)."""
        item = await self._get(hot_list_key(region), consistent=True, now=float("-inf")) or {}
        matches = {
            key[len(HOT_PREFIX) :]: dict(value)
            for key, value in item.items()
            if key.startswith(HOT_PREFIX) and isinstance(value, dict)
        }
        helpers = {
            key[len(HELPER_PREFIX) :]: float(value)
            for key, value in item.items()
            if key.startswith(HELPER_PREFIX) and isinstance(value, int | float)
        }
        return HotList(matches, helpers)

    async def say_helping(
        self, region: str, helper: str, *, until: float, stale: dict[str, float] | None = None
    ) -> bool:
        """Say on the region's hot list that ``helper`` (an owner identity) follows other engines' hot matches,
        ready to deliver their shards, until ``until`` (epoch seconds), and take off ``stale`` helpers' words
        (owner -> the value read), each only if it still is what was read: a helper that spoke again since
        keeps its word. False when one had (nothing written; the caller says it again without it)."""
        names = {"#me": HELPER_PREFIX + helper}
        values: dict[str, Any] = {":until": to_attr(float(until))}
        conditions = []
        for i, (other, seen) in enumerate(sorted((stale or {}).items())):
            names[f"#s{i}"] = HELPER_PREFIX + other
            values[f":s{i}"] = to_attr(float(seen))
            conditions.append(f"#s{i} = :s{i}")
        update: dict[str, Any] = {
            "UpdateExpression": "SET #me = :until"
            + (" REMOVE " + ", ".join(f"#s{i}" for i in range(len(conditions))) if conditions else ""),
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        if conditions:
            update["ConditionExpression"] = " AND ".join(conditions)
        return await self._update(self._key(hot_list_key(region)), update) is not None

    async def stop_helping(self, region: str, helper: str) -> None:
        """Take ``helper``'s word off the region's hot list (it stops following hot matches)."""
        await self._update(
            self._key(hot_list_key(region)),
            {"UpdateExpression": "REMOVE #me", "ExpressionAttributeNames": {"#me": HELPER_PREFIX + helper}},
        )

    async def put_hot_match(
        self, region: str, match_id: str, *, owner: str, epoch: int, now: float | None = None
    ) -> bool:
        """List ``match_id`` as hot, owned by ``owner`` under its match lease's ``epoch``; False when a newer
        owner (a higher epoch) listed it already."""
        t = self._now(now)
        resp = await self._update(
            self._key(hot_list_key(region)),
            {
                "UpdateExpression": "SET #m = :entry",
                "ConditionExpression": "attribute_not_exists(#m) OR #m.#ep <= :ep",
                "ExpressionAttributeNames": {"#m": HOT_PREFIX + match_id, "#ep": "epoch"},
                "ExpressionAttributeValues": {
                    ":entry": to_attr({"owner": owner, "epoch": int(epoch), "since": t}),
                    ":ep": to_attr(int(epoch)),
                },
            },
        )
        return resp is not None

    async def remove_hot_match(self, region: str, match_id: str, *, epoch: int) -> bool:
        """Take ``match_id`` off the hot list, unless a newer owner (a higher epoch) listed it since; False
        then (or when it was not listed)."""
        resp = await self._update(
            self._key(hot_list_key(region)),
            {
                "UpdateExpression": "REMOVE #m",
                "ConditionExpression": "attribute_exists(#m) AND #m.#ep <= :ep",
                "ExpressionAttributeNames": {"#m": HOT_PREFIX + match_id, "#ep": "epoch"},
                "ExpressionAttributeValues": {":ep": to_attr(int(epoch))},
            },
        )
        return resp is not None

    async def publish_share_board(
        self,
        match_id: str,
        lane: str,
        board: dict[str, Any],
        *,
        lease_epoch: int,
        ttl_s: float,
        now: float | None = None,
    ) -> bool:
        """Write a hot match's board for ``lane`` (``daemon.cricket.share.Board.to_item``), unless a newer
        owner's is there (its ``leaseEpoch`` above ``lease_epoch``): a stale owner never overwrites its
        successor's work. ``expiresAt`` (the table's TTL) is ``ttl_s`` from now. False when refused."""
        t = self._now(now)
        item = {**board, "lockKey": share_board_key(match_id, lane), "publishedAt": t, "expiresAt": t + ttl_s}
        return await self._put(
            item,
            condition="attribute_not_exists(#k) OR #ep <= :ep",
            ExpressionAttributeNames={"#k": "lockKey", "#ep": "leaseEpoch"},
            ExpressionAttributeValues={":ep": to_attr(int(lease_epoch))},
        )

    async def get_share_boards(
        self, match_ids: Collection[str], lanes: Sequence[str]
    ) -> dict[tuple[str, str], dict[str, Any]]:
        """The boards of ``match_ids`` in ``lanes`` that exist, by (match, lane): one strongly consistent
        BatchGetItem per 100 (whatever their ``expiresAt``: the table's TTL removes them)."""
        keys = [share_board_key(m, lane) for m in dict.fromkeys(match_ids) for lane in lanes]
        if not keys:
            return {}
        raw = await self.dynamo.batch_get(self.logical, [self._key(k) for k in keys], consistent=True)
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for item in (from_item(r) for r in raw):
            out[(str(item.get("matchId")), str(item.get("lane")))] = item
        return out

    async def remove_share_board(self, match_id: str, lane: str, *, lease_epoch: int) -> bool:
        """Delete a hot match's board for ``lane`` (it cooled or ended), unless a newer owner's is there."""
        ok, _ = await self._delete(
            self._key(share_board_key(match_id, lane)),
            condition="#ep <= :ep",
            ExpressionAttributeNames={"#ep": "leaseEpoch"},
            ExpressionAttributeValues={":ep": to_attr(int(lease_epoch))},
        )
        return ok

    async def get_shards(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The shard items of ``keys`` that exist, by key (one strongly consistent BatchGetItem per 100):
        whether each is claimed, by whom, until when, its watermark and, once delivered, its counts."""
        unique = list(dict.fromkeys(keys))
        if not unique:
            return {}
        raw = await self.dynamo.batch_get(self.logical, [self._key(k) for k in unique], consistent=True)
        items = (from_item(r) for r in raw)
        return {str(item["lockKey"]): item for item in items}

    def lease_condition(self, lease: Lease, *, now: float | None = None) -> dict[str, Any]:
        """A TransactWriteItems ConditionCheck: ``lease`` still holds (owner, epoch, not run out at ``now``)."""
        return {
            "ConditionCheck": {
                "TableName": self.dynamo.table(self.logical),
                "Key": self._key(lease.key),
                "ConditionExpression": "#owner = :owner AND #ep = :ep AND #exp > :now",
                "ExpressionAttributeNames": {"#owner": "owner", "#ep": "epoch", "#exp": "expiresAt"},
                "ExpressionAttributeValues": {
                    ":owner": to_attr(lease.owner),
                    ":ep": to_attr(lease.epoch),
                    ":now": to_attr(self._now(now)),
                },
            }
        }
