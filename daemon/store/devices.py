"""``cricket-devices``: a user's registered device (push tokens and diagnostics).

Owns the device items: ``userId`` (partition key), ``deviceToken`` (sort key: the APNs device token),
``platform``, ``apnsToken``, ``pushToStartToken`` (ActivityKit push-to-start), ``osVersion``,
``appVersion``, ``lastSeenAt`` (ISO-8601 UTC), ``ttl`` (epoch seconds; default 90 days after the last
registration, as the platform docs give for device records).

The seed is the authority and enforces single-device-per-user: ``register_device`` queries the user's
records, deletes every one with another ``deviceToken``, then upserts the current one. Two registrations
of one user racing with different tokens can both survive; the next registration removes the loser.

A device token also belongs to one user at a time: the latest registration of a token owns it (a phone
signed out of one account and into another is the other account's phone now). Who holds a token is kept
on a claim item in the same table, ``userId = "TOKEN#{deviceToken}"`` (``#`` never occurs in a user id),
``deviceToken``, ``ownerId``, ``ttl``; a registration moves the claim and deletes the previous owner's
record of the token in one TransactWriteItems conditioned on the claim being as it was read, so the
earlier owner's follows stop reaching the phone the moment the new owner's record exists. A record written
without a claim (imported) is found by no other user until its owner registers again (the app registers
at each launch). See docs/api.md "Devices".

Which token a plain alert goes to: ``apnsToken`` if the record has one, else ``deviceToken`` (the sort key
is the APNs device token itself) - see ``alert_token``. Push-to-start goes to ``pushToStartToken``.

The seed's "update push-to-start token" is GetItem + UpdateItem; here it is one UpdateItem conditioned on
``attribute_exists(deviceToken)``, which is the same check made atomic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import trio
from botocore.exceptions import ClientError

from daemon.logs import get_logger
from daemon.metrics import DEVICE_TOKEN_TRANSFERS
from daemon.store.base import Item, Repository
from daemon.store.codec import UpdateBuilder, iso, to_attr, to_item
from daemon.store.dynamo import TRANSACT_MAX_ACTIONS, StoreError, cancellation_codes
from daemon.store.tables import DEVICES

log = get_logger("daemon.store")

DEFAULT_DEVICE_TTL_S = 90 * 24 * 3600
TOKEN_CLAIM_PREFIX = "TOKEN#"
"""The partition of a device token's claim item: ``TOKEN#{deviceToken}``."""
REGISTER_ATTEMPTS = 8
"""A registration re-reads the claim and tries again when another registration moved it in between; each
retry follows a registration that succeeded, so a handful is plenty."""


class DeviceRegistrationConflict(StoreError, RuntimeError):
    """The token's claim kept moving under this registration (other registrations of it in a tight loop)."""


def token_claim_user(device_token: str) -> str:
    return TOKEN_CLAIM_PREFIX + device_token


def alert_token(device: dict[str, Any]) -> str | None:
    """The APNs token for plain alerts of a device record: ``apnsToken`` if present, else ``deviceToken``."""
    token = device.get("apnsToken") or device.get("deviceToken")
    return token if isinstance(token, str) and token else None


class DeviceRepository(Repository):
    logical = DEVICES

    async def get_device_for_user(self, user_id: str, *, now: float | None = None) -> Item | None:
        """The user's device (Query ``Limit: 1``, expired records skipped - paging on until one is found)."""
        items = await self._query(
            "#uid = :uid",
            names={"#uid": "userId"},
            values={":uid": user_id},
            now=now,
            max_items=1,
            Limit=1,
        )
        return items[0] if items else None

    async def get_devices(
        self, keys: Iterable[tuple[str, str]], *, now: float | None = None
    ) -> dict[str, Item]:
        """The devices named by (userId, deviceToken) pairs, by user id (BatchGetItem, 100 a call): how a
        match's owner reads the devices its followers' follows name (``deviceToken`` on the follow, written
        when the user followed). A pair whose record is gone (the user registered another device since) is
        simply absent: the caller falls back to ``get_device_for_user``."""
        found = await self._batch_get(keys, now=now)
        return {str(item["userId"]): item for item in found}

    async def get_devices_of_users(
        self,
        users: Iterable[str],
        named: Mapping[str, str],
        *,
        concurrency: int,
        now: float | None = None,
    ) -> dict[str, Item]:
        """The device of each of ``users`` that has one, by user id: by the device their follow names
        (``named``: user id to device token; ``get_devices``, 100 a call), else by ``get_device_for_user``
        (at most ``concurrency`` Queries in flight). A user without a device is absent."""
        users = list(users)
        pairs = [(u, named[u]) for u in users if named.get(u)]
        found = await self.get_devices(pairs, now=now) if pairs else {}
        missing = [u for u in users if u not in found]
        if missing:
            limiter = trio.CapacityLimiter(concurrency)

            async def one(user_id: str) -> None:
                async with limiter:
                    device = await self.get_device_for_user(user_id, now=now)
                if device is not None:
                    found[user_id] = device

            async with trio.open_nursery() as nursery:
                for user_id in missing:
                    nursery.start_soon(one, user_id)
        return found

    async def get_devices_for_user(self, user_id: str, *, now: float | None = None) -> list[Item]:
        """Every unexpired record of the user (normally one)."""
        return await self._query("#uid = :uid", names={"#uid": "userId"}, values={":uid": user_id}, now=now)

    async def register_device(
        self,
        user_id: str,
        device_token: str,
        *,
        platform: str = "ios",
        os_version: str | None = None,
        app_version: str | None = None,
        apns_token: str | None = None,
        push_to_start_token: str | None = None,
        ttl: int | None = None,
        now: float | None = None,
    ) -> Item:
        """Upsert the user's one device and take the token from whoever held it, atomically.

        Reads the token's claim and the user's records, then one TransactWriteItems: the claim put with this
        user as ``ownerId`` (conditioned on the claim being as read), this record updated, the previous
        owner's record of the token deleted, the user's records with other tokens deleted. A claim moved in
        between cancels the transaction, which is tried again from the reads. Optional fields left as None
        keep their stored value. ``ttl`` is absolute epoch seconds (the record's and the claim's). Returns
        the record as stored."""
        if user_id.startswith(TOKEN_CLAIM_PREFIX):
            raise ValueError("userId: must not start with the claim prefix")
        t = self._now(now)
        expires = int(t + DEFAULT_DEVICE_TTL_S) if ttl is None else int(ttl)
        table = self.dynamo.table(self.logical)
        for _ in range(REGISTER_ATTEMPTS):
            claim = await self.dynamo.call(
                self.logical,
                "get_item",
                Key=self._key(token_claim_user(device_token), device_token),
                ConsistentRead=True,
            )
            raw_owner = (claim.get("Item") or {}).get("ownerId", {}).get("S")
            previous = raw_owner if isinstance(raw_owner, str) and raw_owner else None
            existing = await self._query(
                "#uid = :uid",
                names={"#uid": "userId"},
                values={":uid": user_id},
                include_expired=True,
                fields=("userId", "deviceToken"),
                ConsistentRead=True,
            )
            others = [str(old["deviceToken"]) for old in existing if old["deviceToken"] != device_token]
            # a user holds one record; many are left-overs: those past the transaction's room go first
            room = TRANSACT_MAX_ACTIONS - 3
            for extra in others[room:]:
                await self._delete(self._key(user_id, extra))
            claim_put: dict[str, Any] = {
                "TableName": table,
                "Item": to_item(
                    {
                        "userId": token_claim_user(device_token),
                        "deviceToken": device_token,
                        "ownerId": user_id,
                        "claimedAt": iso(t),
                        "ttl": expires,
                    }
                ),
            }
            if "Item" in claim:
                claim_put["ConditionExpression"] = "ownerId = :previous"
                claim_put["ExpressionAttributeValues"] = {":previous": to_attr(raw_owner)}
            else:
                claim_put["ConditionExpression"] = "attribute_not_exists(userId)"
            u = UpdateBuilder().set("platform", platform).set("lastSeenAt", iso(t)).set("ttl", expires)
            for attr, value in (
                ("osVersion", os_version),
                ("appVersion", app_version),
                ("apnsToken", apns_token),
                ("pushToStartToken", push_to_start_token),
            ):
                if value is not None:
                    u.set(attr, value)
            actions: list[dict[str, Any]] = [
                {"Put": claim_put},
                {"Update": {"TableName": table, "Key": self._key(user_id, device_token), **u.kwargs()}},
            ]
            if previous is not None and previous != user_id:
                actions.append({"Delete": {"TableName": table, "Key": self._key(previous, device_token)}})
            actions += [
                {"Delete": {"TableName": table, "Key": self._key(user_id, old)}} for old in others[:room]
            ]
            try:
                await self.dynamo.call(self.logical, "transact_write_items", TransactItems=actions)
            except ClientError as exc:
                codes = cancellation_codes(exc)
                if codes and codes[0] == "ConditionalCheckFailed":
                    continue  # another registration moved the claim since it was read: read again
                raise
            if previous is not None and previous != user_id:
                DEVICE_TOKEN_TRANSFERS.inc()
                log.info(
                    "device_token_transferred",
                    token=device_token[:8],
                    to_user=user_id[:8],
                    from_user=previous[:8],
                )
            for old in others:  # their claims, where still this user's (another user may hold one since)
                await self._release_claim(user_id, old)
            stored = await self._get(user_id, device_token, consistent=True, now=t)
            return stored if stored is not None else {"userId": user_id, "deviceToken": device_token}
        raise DeviceRegistrationConflict(
            f"deviceToken {device_token[:8]}...: its claim moved under {REGISTER_ATTEMPTS} attempts in a row"
        )

    async def token_owner(self, device_token: str) -> str | None:
        """The user whose registration holds ``device_token`` (its claim), or None."""
        claim = await self._get(token_claim_user(device_token), device_token, consistent=True)
        owner = claim.get("ownerId") if claim else None
        return owner if isinstance(owner, str) else None

    async def _release_claim(self, user_id: str, device_token: str) -> None:
        """Delete the token's claim if ``user_id`` still holds it."""
        await self._delete(
            self._key(token_claim_user(device_token), device_token),
            condition="ownerId = :owner",
            ExpressionAttributeValues={":owner": to_attr(user_id)},
        )

    async def update_push_to_start_token(self, user_id: str, device_token: str, token: str) -> bool:
        """Store a new push-to-start token. False when the device is not registered."""
        if not token:
            raise ValueError("pushToStartToken: must be non-empty")
        u = UpdateBuilder().set("pushToStartToken", token)
        cond = f"attribute_exists({u.name('deviceToken')})"
        return await self._update(self._key(user_id, device_token), u.kwargs(cond)) is not None

    async def clear_push_to_start_token(
        self, user_id: str, device_token: str, *, expected_token: str | None = None
    ) -> bool:
        """Remove the push-to-start token (APNs rejected it). With ``expected_token``, only if the stored
        token is still that one, so a token the app rotated in meanwhile is kept. False otherwise."""
        u = UpdateBuilder().remove("pushToStartToken")
        cond = f"attribute_exists({u.name('deviceToken')})"
        if expected_token is not None:
            cond += f" AND {u.name('pushToStartToken')} = {u.value(expected_token)}"
        return await self._update(self._key(user_id, device_token), u.kwargs(cond)) is not None

    async def delete_device(self, user_id: str, device_token: str) -> Item | None:
        """Delete the record and the token's claim if this user holds it; returns the record as it was
        (``ReturnValues: ALL_OLD``), or None if there was none."""
        _, old = await self._delete(self._key(user_id, device_token))
        await self._release_claim(user_id, device_token)
        return old
