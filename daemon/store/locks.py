"""``cricket-locks``: leased locks, one item per lock (``lockKey`` = ``match:{matchId}``).

Owns the lock item only; what the lock protects is fenced separately (``active-matches.ownerEpoch``, see
``active_matches.py``), because a lease alone cannot stop a paused former holder from writing.

Attributes: ``lockKey`` (key), ``owner`` (instance id), ``expiresAt`` (epoch seconds, a number; also the
table's TTL attribute so crashed locks are eventually deleted), ``acquiredAt`` (epoch seconds).

Reading of the data model: its conditions name ``lockId`` and ``holder``, but the table's attributes are
``lockKey`` and ``owner``; the attributes are the consistent reading, so the conditions here are
``attribute_not_exists(lockKey) OR expiresAt < :now`` (acquire) and ``owner = :owner`` (extend, release).

One addition to acquire: ``OR owner = :owner``. botocore retries a PutItem whose response was lost; the
retry would then fail its own condition and report "held by another instance" for a lock we hold. With
the owner clause an acquire is idempotent for its owner (it simply renews the lease). Owners must
therefore be unique per process, never shared: ``owner_identity`` makes one from the configured instance id
(kept for people: logs, ``status``) and a random per-process nonce, so a restarted process, or two processes
started from one configuration by mistake, never take each other's lease (or ``active-matches`` fence) as
their own.

Clock skew: ``expiresAt`` is written with the *writer's* clock and compared with the *acquirer's* clock.
If the acquirer's clock runs ``d`` seconds ahead, it can take a lock ``d`` seconds before the holder's
lease really ends. Safety therefore assumes NTP-synchronised hosts with skew much smaller than the lease,
and holders renew well before expiry (the match actor renews at a fraction of the lease and stops pushing
as soon as a renewal fails or its own clock passes ``expiresAt``). Writes made under the lock are fenced
by ``ownerEpoch`` in ``active-matches``, which does not depend on clocks at all.
"""

from __future__ import annotations

import secrets
from typing import Any

from daemon.store.base import Repository
from daemon.store.codec import to_attr
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
