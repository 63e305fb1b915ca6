"""``cricket-devices``: a user's registered device (push tokens and diagnostics).

Owns the device items: ``userId`` (partition key), ``deviceToken`` (sort key: the APNs device token),
``platform``, ``apnsToken``, ``pushToStartToken`` (ActivityKit push-to-start), ``osVersion``,
``appVersion``, ``lastSeenAt`` (ISO-8601 UTC), ``ttl`` (epoch seconds; default 90 days after the last
registration, as the platform docs give for device records).

The seed is the authority and enforces single-device-per-user: ``register_device`` queries the user's
records, deletes every one with another ``deviceToken``, then upserts the current one. Two registrations
racing with different tokens can both survive; the next registration removes the loser.

Which token a plain alert goes to: ``apnsToken`` if the record has one, else ``deviceToken`` (the sort key
is the APNs device token itself) - see ``alert_token``. Push-to-start goes to ``pushToStartToken``.

The seed's "update push-to-start token" is GetItem + UpdateItem; here it is one UpdateItem conditioned on
``attribute_exists(deviceToken)``, which is the same check made atomic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import trio

from daemon.store.base import Item, Repository
from daemon.store.codec import UpdateBuilder, from_item, iso
from daemon.store.tables import DEVICES

DEFAULT_DEVICE_TTL_S = 90 * 24 * 3600


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
        """Upsert the user's one device: delete records with another token, then update this one.
        Optional fields left as None keep their stored value. ``ttl`` is absolute epoch seconds. Returns the
        record as stored (the UpdateItem's ``ALL_NEW``)."""
        t = self._now(now)
        key = self._key(user_id, device_token)
        existing = await self._query(
            "#uid = :uid",
            names={"#uid": "userId"},
            values={":uid": user_id},
            include_expired=True,
            fields=("userId", "deviceToken"),
            ConsistentRead=True,
        )
        for old in existing:
            if old["deviceToken"] != device_token:
                await self._delete(self._key(user_id, old["deviceToken"]))
        u = UpdateBuilder().set("platform", platform).set("lastSeenAt", iso(t))
        u.set("ttl", int(t + DEFAULT_DEVICE_TTL_S) if ttl is None else int(ttl))
        for attr, value in (
            ("osVersion", os_version),
            ("appVersion", app_version),
            ("apnsToken", apns_token),
            ("pushToStartToken", push_to_start_token),
        ):
            if value is not None:
                u.set(attr, value)
        resp = await self._update(key, u.kwargs(), ReturnValues="ALL_NEW")
        return from_item((resp or {}).get("Attributes") or {})

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
        """Delete the record; returns it as it was (``ReturnValues: ALL_OLD``), or None if there was none."""
        _, old = await self._delete(self._key(user_id, device_token))
        return old
