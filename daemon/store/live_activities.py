"""``live-activities``: one Live Activity session per match, user and device.

Owns the session items: ``matchId`` (partition key), ``visitorKey`` (sort key, ``{userId}#{deviceId}`` -
the seed's composite ``userId#deviceId`` sort key, stored in a named attribute), ``userId`` and
``deviceId`` (stored separately so the ``userId-index`` GSI can find a user's sessions), ``updateToken``
(the APNs token of this one activity) or, for an activity started on an iOS 18 broadcast channel,
``channelId`` (the session is counted and ended like the others, and updated by the channel's broadcasts), ``status`` (``active`` | ``suspended`` | ``ended``),
``sessionStartedAt``, ``tokenUpdatedAt``, ``suspendedAt``, ``endedAt`` (ISO-8601 UTC), ``endReason``,
``ttl`` (epoch seconds).

A user id may not contain ``#`` (it would make the visitor key ambiguous); device ids may.
Register is an upsert that (re)activates the session: it clears ``suspendedAt``/``endedAt``/``endReason``,
and, unless a ``ttl`` is given, removes an old ``ttl`` so a restarted session is not filtered as expired.
A token update does not reactivate a suspended session: a new activity registers again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from daemon.store.base import Item, Repository
from daemon.store.codec import UpdateBuilder, iso
from daemon.store.tables import LIVE_ACTIVITIES, LIVE_ACTIVITIES_BY_USER_INDEX

STATUS_ACTIVE = "active"
STATUS_SUSPENDED = "suspended"
STATUS_ENDED = "ended"


def visitor_key(user_id: str, device_id: str) -> str:
    """The sort key of a session: ``{userId}#{deviceId}``."""
    if not user_id or "#" in user_id:
        raise ValueError(f"userId: must be non-empty and free of '#', got {user_id!r}")
    if not device_id:
        raise ValueError("deviceId: must be non-empty")
    return f"{user_id}#{device_id}"


def split_visitor_key(key: str) -> tuple[str, str]:
    """``(userId, deviceId)`` of a visitor key."""
    user_id, sep, device_id = key.partition("#")
    if not sep or not user_id or not device_id:
        raise ValueError(f"visitorKey: expected 'userId#deviceId', got {key!r}")
    return user_id, device_id


class LiveActivityRepository(Repository):
    logical = LIVE_ACTIVITIES

    async def get_all_la_sessions_for_match(
        self,
        match_id: str,
        *,
        status: str | None = None,
        now: float | None = None,
        fields: Sequence[str] | None = None,
    ) -> list[Item]:
        """Every session of a match (Query, every page, expired ones filtered); only ``status`` ones if given;
        only the attributes in ``fields`` if given."""
        values: dict[str, Any] = {":mid": match_id}
        names = {"#mid": "matchId"}
        filt = None
        if status is not None:
            names["#st"] = "status"
            values[":st"] = status
            filt = "#st = :st"
        return await self._query(
            "#mid = :mid",
            names=names,
            values=values,
            filter_expression=filt,
            now=now,
            fields=fields,
            ConsistentRead=True,
        )

    async def get_user_la_sessions(self, user_id: str, *, now: float | None = None) -> list[Item]:
        """Every session of a user across matches (Query on ``userId-index``, every page, expired filtered)."""
        return await self._query(
            "#uid = :uid",
            index=LIVE_ACTIVITIES_BY_USER_INDEX,
            names={"#uid": "userId"},
            values={":uid": user_id},
            now=now,
        )

    async def get_la_session(
        self, match_id: str, user_id: str, device_id: str, *, now: float | None = None
    ) -> Item | None:
        return await self._get(match_id, visitor_key(user_id, device_id), consistent=True, now=now)

    async def register_la_session(
        self,
        match_id: str,
        user_id: str,
        device_id: str,
        update_token: str | None,
        *,
        now: float | None = None,
        ttl: int | None = None,
        channel_id: str | None = None,
    ) -> None:
        """Upsert an active session with its update token, or with the broadcast channel its activity listens
        on (exactly one of the two) (UpdateItem). ``ttl`` is absolute epoch seconds."""
        if bool(update_token) == bool(channel_id):
            raise ValueError("updateToken or channelId: exactly one must be given")
        t = self._now(now)
        u = UpdateBuilder().set("userId", user_id).set("deviceId", device_id)
        if update_token:
            u.set("updateToken", update_token).remove("channelId")
        else:
            u.set("channelId", channel_id).remove("updateToken")
        u = (
            u.set("status", STATUS_ACTIVE)
            .set("sessionStartedAt", iso(t))
            .remove("suspendedAt")
            .remove("endedAt")
            .remove("endReason")
        )
        if ttl is None:
            u.remove("ttl")
        else:
            u.set("ttl", int(ttl))
        await self._update(self._key(match_id, visitor_key(user_id, device_id)), u.kwargs())

    async def register_la_sessions(
        self,
        sessions: Sequence[tuple[Any, ...]],
        *,
        now: float | None = None,
    ) -> int:
        """Register many sessions at once (``(matchId, userId, deviceId, updateToken, ttl[, channelId])`` each,
        exactly one of updateToken and channelId): the same
        upsert as ``register_la_session``, written as whole items 25 per BatchWriteItem. The item a register
        leaves is fully determined by its arguments (it sets every attribute a session has and removes
        ``suspendedAt``/``endedAt``/``endReason``/``ttl`` otherwise), so a put of that item is the same
        write; only ``tokenUpdatedAt``, which describes a token the registration replaces, is not kept. A key
        given twice keeps the last. Returns how many items were written."""
        t = self._now(now)
        items = []
        for entry in sessions:
            match_id, user_id, device_id, update_token, ttl = entry[:5]
            channel_id = entry[5] if len(entry) > 5 else None
            if bool(update_token) == bool(channel_id):
                raise ValueError("updateToken or channelId: exactly one must be given")
            item: dict[str, Any] = {
                "matchId": match_id,
                "visitorKey": visitor_key(user_id, device_id),
                "userId": user_id,
                "deviceId": device_id,
                "status": STATUS_ACTIVE,
                "sessionStartedAt": iso(t),
            }
            if update_token:
                item["updateToken"] = update_token
            else:
                item["channelId"] = channel_id
            if ttl is not None:
                item["ttl"] = int(ttl)
            items.append(item)
        return await self._batch_put(items) if items else 0

    async def update_token(self, match_id: str, user_id: str, device_id: str, update_token: str) -> bool:
        """Store a rotated update token. False when there is no such session."""
        if not update_token:
            raise ValueError("updateToken: must be non-empty")
        u = UpdateBuilder().set("updateToken", update_token).set("tokenUpdatedAt", iso(self.clock()))
        cond = f"attribute_exists({u.name('visitorKey')})"
        return (
            await self._update(self._key(match_id, visitor_key(user_id, device_id)), u.kwargs(cond))
            is not None
        )

    async def end_la_session(
        self,
        match_id: str,
        visitor_key: str,
        end_reason: str,
        *,
        now: float | None = None,
        ttl_s: float | None = None,
    ) -> bool:
        """Mark a session ended (``status=ended, endedAt, endReason``, and ``ttl = now + ttl_s`` if given).
        False when there is no such session. Ending an ended session again just rewrites the reason."""
        t = self._now(now)
        u = UpdateBuilder().set("status", STATUS_ENDED).set("endedAt", iso(t)).set("endReason", end_reason)
        if ttl_s is not None:
            u.set("ttl", int(t + ttl_s))
        cond = f"attribute_exists({u.name('visitorKey')})"
        return await self._update(self._key(match_id, visitor_key), u.kwargs(cond)) is not None

    async def end_la_sessions(
        self,
        match_id: str,
        sessions: list[Item],
        end_reason: str,
        *,
        now: float | None = None,
        ttl_s: float | None = None,
    ) -> int:
        """End many sessions of one match at once (match completion): the items just read by
        ``get_all_la_sessions_for_match`` are written back ended, 25 per BatchWriteItem, instead of one
        UpdateItem each (2,000 sessions: 80 calls, not 2,000). Sessions already ended are skipped, so a
        wind-up interrupted half-way resumes where it stopped. A token rotated in the instant between the
        read and the write is lost with the ended session, which no longer receives pushes anyway.
        Returns how many sessions were ended."""
        t = self._now(now)
        items = []
        for item in sessions:
            if item.get("status") == STATUS_ENDED or str(item.get("matchId")) != match_id:
                continue
            ended = dict(item)
            ended.update(status=STATUS_ENDED, endedAt=iso(t), endReason=end_reason)
            if ttl_s is not None:
                ended["ttl"] = int(t + ttl_s)
            items.append(ended)
        return await self._batch_put(items) if items else 0

    async def suspend_la_session(self, match_id: str, visitor_key: str, *, now: float | None = None) -> bool:
        """Suspend an active session (its token was rejected by APNs). False unless it is currently active."""
        t = self._now(now)
        u = UpdateBuilder().set("status", STATUS_SUSPENDED).set("suspendedAt", iso(t))
        cond = f"attribute_exists({u.name('visitorKey')}) AND {u.name('status')} = {u.value(STATUS_ACTIVE)}"
        return await self._update(self._key(match_id, visitor_key), u.kwargs(cond)) is not None
