"""``cricket-devices``: a user's registered device (push tokens and diagnostics).

Owns the device items: ``userId`` (partition key), ``deviceToken`` (sort key: the APNs device token),
``platform``, ``apnsToken``, ``pushToStartToken`` (ActivityKit push-to-start), ``osVersion``,
``appVersion``, ``lastSeenAt`` (ISO-8601 UTC), ``ttl`` (epoch seconds; default 90 days after the last
registration, as the platform docs give for device records).

The seed is the authority and enforces single-device-per-user: ``register_device`` queries the user's
records, deletes every one with another ``deviceToken``, then upserts the current one. Two registrations
of one user racing with different tokens can both survive; the next registration removes the loser.

A push token also belongs to one user at a time, in every field that names one (``deviceToken``,
``apnsToken``, ``pushToStartToken``): the latest registration of a token owns it (a phone signed out of one
account and into another is the other account's phone now). Tokens are APNs hex, compared
case-insensitively: the repository stores them in lower case (APNs takes either; the engine pushes the
stored string, and the janitor's clean-up finds the record by that same string). Who holds a token is kept
on a claim item in the same table, ``userId = "TOKEN#{token}"`` (``#`` never occurs in a user id),
``deviceToken`` (the token), ``ownerId``, ``recordToken`` (the sort key of the owner's record: the token
itself for a device token), ``ttl``. A registration puts the claim of each of its tokens and deletes each
previous owner's record that still names the token, in one TransactWriteItems conditioned on every claim
being as it was read, so the earlier owner's follows and alerts stop reaching the phone the moment the new
owner's record exists; the API then ends the earlier owner's Live Activity sessions (``DeviceClaim``).
Claims of a token stored in another case than lower are read too, and moved to lower case.
A record written without a claim (imported) is found by no other user until its owner registers again
(the app registers at each launch). See docs/api.md "Devices".

Which token a plain alert goes to: ``apnsToken`` if the record has one, else ``deviceToken`` (the sort key
is the APNs device token itself) - see ``alert_token``. Push-to-start goes to ``pushToStartToken``.

The seed's "update push-to-start token" is GetItem + UpdateItem; here it is one UpdateItem conditioned on
``attribute_exists(deviceToken)``, which is the same check made atomic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import trio
from botocore.exceptions import ClientError

from daemon.logs import get_logger
from daemon.metrics import DEVICE_TOKEN_TRANSFERS
from daemon.store.base import Item, Repository
from daemon.store.codec import UpdateBuilder, from_item, iso, to_attr, to_item
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


TOKEN_FIELDS = ("deviceToken", "apnsToken", "pushToStartToken")
"""The fields of a device record that name an APNs token: each has one owner (its claim)."""


def token_claim_user(device_token: str) -> str:
    return TOKEN_CLAIM_PREFIX + device_token


def normal_token(token: str) -> str:
    """A push token as stored: APNs tokens are hex, so case carries nothing; lower case."""
    return token.lower()


def token_spellings(token: str) -> list[str]:
    """The spellings a token's claim may be stored under: lower case (as this code stores it), and upper case
    and the spelling given, for claims stored in another case."""
    return list(dict.fromkeys((token.lower(), token.upper(), token)))


def names_token(record: Mapping[str, Any], token: str) -> bool:
    """Whether a device record names ``token`` (any case) in one of its token fields."""
    want = token.lower()
    return any(isinstance(record.get(f), str) and str(record[f]).lower() == want for f in TOKEN_FIELDS)


@dataclass
class DeviceClaim:
    """A registration's outcome: the record as stored, and the users it took a token from (their records
    that named it are gone)."""

    item: Item
    taken_from: list[str] = field(default_factory=list)


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
        """``claim_device``'s record as stored."""
        claim = await self.claim_device(
            user_id,
            device_token,
            platform=platform,
            os_version=os_version,
            app_version=app_version,
            apns_token=apns_token,
            push_to_start_token=push_to_start_token,
            ttl=ttl,
            now=now,
        )
        return claim.item

    async def claim_device(
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
    ) -> DeviceClaim:
        """Upsert the user's one device and take each of its tokens from whoever held it, atomically.

        Reads the claims of the record's tokens (every spelling, BatchGetItem), the records they name and the
        user's own records, then one TransactWriteItems: each claim put with this user as ``ownerId``
        (conditioned on the claim being as read; a claim in another spelling deleted, likewise), this
        record updated, each previous owner's record that names the token deleted, the user's records with
        other device tokens deleted. A claim moved in between cancels the transaction, which is tried again
        from the reads. Optional fields left as None keep their stored value. ``ttl`` is absolute epoch
        seconds (the record's and the claims'). Tokens are stored in lower case."""
        if user_id.startswith(TOKEN_CLAIM_PREFIX):
            raise ValueError("userId: must not start with the claim prefix")
        device_token = normal_token(device_token)
        apns_token = normal_token(apns_token) if apns_token is not None else None
        push_to_start_token = normal_token(push_to_start_token) if push_to_start_token is not None else None
        t = self._now(now)
        expires = int(t + DEFAULT_DEVICE_TTL_S) if ttl is None else int(ttl)
        table = self.dynamo.table(self.logical)
        for _ in range(REGISTER_ATTEMPTS):
            existing = await self._query(
                "#uid = :uid",
                names={"#uid": "userId"},
                values={":uid": user_id},
                include_expired=True,
                fields=("userId", *TOKEN_FIELDS),
                ConsistentRead=True,
            )
            own = next((r for r in existing if r["deviceToken"] == device_token), {})
            tokens = list(
                dict.fromkeys(
                    tok
                    for tok in (
                        device_token,
                        apns_token if apns_token is not None else own.get("apnsToken"),
                        push_to_start_token
                        if push_to_start_token is not None
                        else own.get("pushToStartToken"),
                    )
                    if isinstance(tok, str) and tok
                )
            )
            spellings = list(dict.fromkeys(sp for tok in tokens for sp in token_spellings(tok)))
            raw_claims = await self.dynamo.batch_get(
                self.logical,
                [self._key(token_claim_user(sp), sp) for sp in spellings],
                consistent=True,
            )
            claims = {str(c["deviceToken"]["S"]): c for c in raw_claims}
            # the previous owners' records the claims name, read to see they still name the token
            named: dict[tuple[str, str], str] = {}  # (owner, record token) -> the token it is claimed for
            for spelling, claim in claims.items():
                owner = claim.get("ownerId", {}).get("S")
                if isinstance(owner, str) and owner and owner != user_id:
                    record = claim.get("recordToken", {}).get("S") or spelling
                    named[(owner, str(record))] = spelling
            records = {
                (str(r["userId"]["S"]), str(r["deviceToken"]["S"])): from_item(r)
                for r in (
                    await self.dynamo.batch_get(self.logical, [self._key(*k) for k in named], consistent=True)
                    if named
                    else []
                )
            }
            taken = {
                key
                for key, spelling in named.items()
                if key in records and names_token(records[key], spelling)
            }
            others = [str(old["deviceToken"]) for old in existing if old["deviceToken"] != device_token]
            # a user holds one record; many are left-overs: those past the transaction's room go first
            room = TRANSACT_MAX_ACTIONS - 2 * len(spellings) - len(taken) - 1
            for extra in others[room:]:
                await self._delete(self._key(user_id, extra))
            actions: list[dict[str, Any]] = []
            for spelling in spellings:
                held = claims.get(spelling)
                if spelling in tokens:
                    put: dict[str, Any] = {
                        "TableName": table,
                        "Item": to_item(
                            {
                                "userId": token_claim_user(spelling),
                                "deviceToken": spelling,
                                "ownerId": user_id,
                                "recordToken": device_token,
                                "claimedAt": iso(t),
                                "ttl": expires,
                            }
                        ),
                    }
                    if held is not None:
                        put["ConditionExpression"] = "ownerId = :previous"
                        put["ExpressionAttributeValues"] = {":previous": held.get("ownerId", {"NULL": True})}
                    else:
                        put["ConditionExpression"] = "attribute_not_exists(userId)"
                    actions.append({"Put": put})
                elif held is not None:  # the same token in another case, from before: moved
                    actions.append(
                        {
                            "Delete": {
                                "TableName": table,
                                "Key": self._key(token_claim_user(spelling), spelling),
                                "ConditionExpression": "ownerId = :previous",
                                "ExpressionAttributeValues": {
                                    ":previous": held.get("ownerId", {"NULL": True})
                                },
                            }
                        }
                    )
            u = UpdateBuilder().set("platform", platform).set("lastSeenAt", iso(t)).set("ttl", expires)
            for attr, value in (
                ("osVersion", os_version),
                ("appVersion", app_version),
                ("apnsToken", apns_token),
                ("pushToStartToken", push_to_start_token),
            ):
                if value is not None:
                    u.set(attr, value)
            actions.append(
                {"Update": {"TableName": table, "Key": self._key(user_id, device_token), **u.kwargs()}}
            )
            actions += [{"Delete": {"TableName": table, "Key": self._key(*key)}} for key in sorted(taken)]
            actions += [
                {"Delete": {"TableName": table, "Key": self._key(user_id, old)}}
                for old in others[:room]
                if (user_id, old) not in taken
            ]
            try:
                await self.dynamo.call(self.logical, "transact_write_items", TransactItems=actions)
            except ClientError as exc:
                if "ConditionalCheckFailed" in (cancellation_codes(exc) or []):
                    continue  # another registration moved a claim since it was read: read again
                raise
            taken_from = sorted({owner for owner, _ in taken})
            for owner in taken_from:
                DEVICE_TOKEN_TRANSFERS.inc()
                log.info(
                    "device_token_transferred",
                    token=device_token[:8],
                    to_user=user_id[:8],
                    from_user=owner[:8],
                )
            # the claims this user no longer needs: its other records' tokens, tokens the record replaced
            kept = set(tokens)
            for old in existing:
                for f in TOKEN_FIELDS:
                    value = old.get(f)
                    if isinstance(value, str) and value and value not in kept and value.lower() not in kept:
                        await self._release_claim(user_id, value)
            stored = await self._get(user_id, device_token, consistent=True, now=t)
            item = stored if stored is not None else {"userId": user_id, "deviceToken": device_token}
            return DeviceClaim(item, taken_from)
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
        u = UpdateBuilder().set("pushToStartToken", normal_token(token))
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
        """Delete the record and its tokens' claims where this user holds them; returns the record as it was
        (``ReturnValues: ALL_OLD``), or None if there was none."""
        _, old = await self._delete(self._key(user_id, device_token))
        tokens = {device_token, *(str(old[f]) for f in TOKEN_FIELDS if old and old.get(f))}
        for token in sorted(tokens):
            await self._release_claim(user_id, token)
        return old
