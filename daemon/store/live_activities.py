"""``live-activities``: one Live Activity session per match, user and device.

Owns the session items: ``matchId`` (partition key), ``visitorKey`` (sort key, ``{userId}#{deviceId}`` -
the seed's composite ``userId#deviceId`` sort key, stored in a named attribute), ``userId`` and
``deviceId`` (stored separately so the ``userId-index`` GSI can find a user's sessions), ``updateToken``
(the APNs token of this one activity) or, for an activity started on an iOS 18 broadcast channel,
``channelId`` (the session is counted and ended like the others, and updated by the channel's broadcasts), ``status`` (``active`` | ``suspended`` | ``ended``),
``sessionStartedAt``, ``tokenUpdatedAt``, ``suspendedAt``, ``endedAt`` (ISO-8601 UTC), ``endReason``,
``ttl`` (epoch seconds).

A user id may not contain ``#`` (it would make the visitor key ambiguous); device ids may. Update tokens are
APNs hex, stored in lower case (``normal_token``).

The app's registrations go through ``register_owned_sessions``, which keeps two rules with two kinds of
bookkeeping items in the same table, in partitions no match id can name (ids never contain ``#``) and
without a ``userId`` (so the ``userId-index`` never shows them):

- one session per update token: ``matchId = "TOKEN#{updateToken}"``, ``visitorKey = "claim"``, naming the
  session that holds it (``ownerMatch``, ``ownerKey``); a registration of the token for another session
  (another device id, another user) ends the one that held it (``endReason: replaced``);
- at most ``per_user`` sessions per user and match: ``matchId = "ROSTER#{matchId}"``,
  ``visitorKey = {userId}``, ``devices`` (device id to registration time); a registration of a further
  device ends the user's oldest in that match (``endReason: replaced``). An ended session may stay listed
  until the roster is next trimmed: it only counts for more than it is.

A registration that repeats the update token of a session that has ended does not revive it (a client's
retry after the match or the user ended it): its outcome is ``ended``.
Register is an upsert that (re)activates the session: it clears ``suspendedAt``/``endedAt``/``endReason``,
and, unless a ``ttl`` is given, removes an old ``ttl`` so a restarted session is not filtered as expired.
A token update does not reactivate a suspended session: a new activity registers again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from daemon.store.base import Item, Repository
from daemon.store.codec import UpdateBuilder, from_item, iso, to_attr
from daemon.store.devices import normal_token
from daemon.store.tables import LIVE_ACTIVITIES, LIVE_ACTIVITIES_BY_USER_INDEX

STATUS_ACTIVE = "active"
STATUS_SUSPENDED = "suspended"
STATUS_ENDED = "ended"
END_REASON_REPLACED = "replaced"
TOKEN_CLAIM_PREFIX = "TOKEN#"
ROSTER_PREFIX = "ROSTER#"
CLAIM_KEY = "claim"


@dataclass(frozen=True)
class SessionRegistration:
    """One registration from the app: exactly one of ``update_token`` and ``channel_id``; ``ttl`` absolute
    epoch seconds or None."""

    match_id: str
    user_id: str
    device_id: str
    update_token: str | None
    ttl: int | None
    channel_id: str | None = None


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


CURSOR_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}~.{1,128}$"
"""A page cursor of a user's sessions: ``{matchId}~{deviceId}`` of the last session of the page before (the
user is the caller's own, so the cursor names no user). Any string of this shape is a valid place to go
on from, whether or not such a session exists."""


def encode_cursor(key: Mapping[str, Any] | None) -> str | None:
    """A ``LastEvaluatedKey`` of the user index as a page cursor (None: the last page)."""
    if not key:
        return None
    match_id = str(key.get("matchId", {}).get("S", ""))
    _, device_id = split_visitor_key(str(key.get("visitorKey", {}).get("S", "")))
    return f"{match_id}~{device_id}"


def decode_cursor(user_id: str, cursor: str) -> dict[str, Any]:
    """The ``ExclusiveStartKey`` of a page cursor of ``user_id``'s sessions; ValueError when it has not the
    cursor's shape."""
    match_id, sep, device_id = cursor.partition("~")
    if not sep or not match_id or not device_id:
        raise ValueError("not a cursor: expected matchId~deviceId")
    return {
        "userId": to_attr(user_id),
        "matchId": to_attr(match_id),
        "visitorKey": to_attr(visitor_key(user_id, device_id)),
    }


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

    async def get_user_la_sessions_page(
        self, user_id: str, *, limit: int, cursor: str | None = None, now: float | None = None
    ) -> tuple[list[Item], str | None]:
        """One page of a user's sessions across matches (Query on ``userId-index`` with ``Limit``, expired
        ones filtered, so a page may hold fewer than ``limit``): the items and the next page's cursor (None on
        the last; ``CURSOR_PATTERN``). ValueError for a cursor without the cursor's shape."""
        kwargs: dict[str, Any] = {
            "IndexName": LIVE_ACTIVITIES_BY_USER_INDEX,
            "KeyConditionExpression": "#uid = :uid",
            "Limit": limit,
        }
        names = {"#uid": "userId"}
        values: dict[str, Any] = {":uid": to_attr(user_id)}
        ttl = self._ttl_filter(self._now(now))
        if ttl is not None:
            kwargs["FilterExpression"] = ttl[0]
            names.update(ttl[1])
            values.update(ttl[2])
        if cursor:
            kwargs["ExclusiveStartKey"] = decode_cursor(user_id, cursor)
        resp = await self.dynamo.call(
            self.logical,
            "query",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            **kwargs,
        )
        return [from_item(i) for i in resp.get("Items", [])], encode_cursor(resp.get("LastEvaluatedKey"))

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
            u.set("updateToken", normal_token(update_token)).remove("channelId")
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
                item["updateToken"] = normal_token(update_token)
            else:
                item["channelId"] = channel_id
            if ttl is not None:
                item["ttl"] = int(ttl)
            items.append(item)
        return await self._batch_put(items) if items else 0

    async def register_owned_sessions(
        self, registrations: Sequence[SessionRegistration], *, per_user: int, now: float | None = None
    ) -> list[str]:
        """Register the app's sessions under the module's rules: one BatchGetItem of the sessions, their
        tokens' claims and their users' rosters; one write of the sessions, claims and rosters (25 per
        BatchWriteItem); an UpdateItem for each session a registration replaces (conditioned on it still
        holding the token, or on it not having ended). The outcome of each registration, in order:
        ``active``, or ``ended`` for a retry of a session that has ended (nothing written for it)."""
        t = self._now(now)
        regs = [
            SessionRegistration(
                r.match_id,
                r.user_id,
                r.device_id,
                normal_token(r.update_token) if r.update_token else None,
                r.ttl,
                r.channel_id,
            )
            for r in registrations
        ]
        for r in regs:
            if bool(r.update_token) == bool(r.channel_id):
                raise ValueError("updateToken or channelId: exactly one must be given")
        keys: dict[tuple[str, str], None] = {}
        for r in regs:
            keys[(r.match_id, visitor_key(r.user_id, r.device_id))] = None
            keys[(ROSTER_PREFIX + r.match_id, r.user_id)] = None
            if r.update_token:
                keys[(TOKEN_CLAIM_PREFIX + r.update_token, CLAIM_KEY)] = None
        found: dict[tuple[str, str], Item] = {}
        for raw in await self.dynamo.batch_get(self.logical, [self._key(*k) for k in keys], consistent=True):
            item = from_item(raw)
            found[(str(item["matchId"]), str(item["visitorKey"]))] = item
        rosters: dict[tuple[str, str], dict[str, int]] = {}
        writes: dict[tuple[str, str], dict[str, Any]] = {}
        ends: list[tuple[str, str, str | None]] = []  # (match, visitor key, the token it must still hold)
        outcomes: list[str] = []
        for r in regs:
            key = visitor_key(r.user_id, r.device_id)
            own = found.get((r.match_id, key))
            if (
                own is not None
                and own.get("status") == STATUS_ENDED
                and r.update_token
                and own.get("updateToken") == r.update_token
                and (r.match_id, key) not in writes
            ):
                outcomes.append(STATUS_ENDED)
                continue
            roster_key = (ROSTER_PREFIX + r.match_id, r.user_id)
            roster = rosters.get(roster_key)
            if roster is None:
                stored = (found.get(roster_key) or {}).get("devices")
                roster = {str(d): int(v) for d, v in stored.items()} if isinstance(stored, dict) else {}
                rosters[roster_key] = roster
            if r.update_token:
                claim_key = (TOKEN_CLAIM_PREFIX + r.update_token, CLAIM_KEY)
                claim = writes.get(claim_key) or found.get(claim_key)
                holder = (str(claim.get("ownerMatch")), str(claim.get("ownerKey"))) if claim else None
                if holder is not None and holder != (r.match_id, key):
                    ends.append((holder[0], holder[1], r.update_token))
                    if holder[0] == r.match_id and holder[1].startswith(r.user_id + "#"):
                        roster.pop(holder[1][len(r.user_id) + 1 :], None)
                if holder != (r.match_id, key):  # a claim that names this session already stays as it is
                    writes[claim_key] = _bookkeeping(
                        claim_key, {"ownerMatch": r.match_id, "ownerKey": key}, r.ttl
                    )
            if r.device_id not in roster or roster_key in writes:
                while r.device_id not in roster and len(roster) >= max(1, per_user):
                    oldest = min(roster, key=lambda d: (roster[d], d))
                    del roster[oldest]
                    ends.append((r.match_id, visitor_key(r.user_id, oldest), None))
                roster.setdefault(r.device_id, int(t))
                old_ttl = (writes.get(roster_key) or found.get(roster_key) or {}).get("ttl")
                roster_ttl = r.ttl
                if roster_ttl is not None and isinstance(old_ttl, int | float):
                    roster_ttl = max(int(roster_ttl), int(old_ttl))
                # written when a device joins or leaves it (a device registering again keeps its place)
                writes[roster_key] = _bookkeeping(roster_key, {"devices": dict(roster)}, roster_ttl)
            session: dict[str, Any] = {
                "matchId": r.match_id,
                "visitorKey": key,
                "userId": r.user_id,
                "deviceId": r.device_id,
                "status": STATUS_ACTIVE,
                "sessionStartedAt": iso(t),
            }
            if r.update_token:
                session["updateToken"] = r.update_token
            else:
                session["channelId"] = r.channel_id
            if r.ttl is not None:
                session["ttl"] = int(r.ttl)
            writes[(r.match_id, key)] = session
            outcomes.append(STATUS_ACTIVE)
        if writes:
            await self._batch_put(writes.values())
        for match_id, key, token in dict.fromkeys(ends):
            if (match_id, key) in writes and token is None:
                continue  # registered again in this very batch: it stays
            if token is not None and writes.get((match_id, key), {}).get("updateToken") not in (None, token):
                continue  # registered again in this batch with another token: it stays
            await self.end_la_session(
                match_id, key, END_REASON_REPLACED, now=t, only_live=True, only_token=token
            )
        return outcomes

    async def update_token(self, match_id: str, user_id: str, device_id: str, update_token: str) -> str:
        """Store a rotated update token (lower case) and claim it (a session of another device that held it
        is ended, ``replaced``). ``updated``; ``missing`` when there is no such session; ``channel`` for a
        session on a broadcast channel (it has no update token, and gets none)."""
        if not update_token:
            raise ValueError("updateToken: must be non-empty")
        token = normal_token(update_token)
        key = visitor_key(user_id, device_id)
        u = UpdateBuilder().set("updateToken", token).set("tokenUpdatedAt", iso(self.clock()))
        cond = f"attribute_exists({u.name('visitorKey')}) AND attribute_not_exists({u.name('channelId')})"
        if await self._update(self._key(match_id, key), u.kwargs(cond)) is None:
            session = await self._get(match_id, key, consistent=True)
            return "missing" if session is None else "channel"
        claim_key = (TOKEN_CLAIM_PREFIX + token, CLAIM_KEY)
        claim = await self._get(*claim_key, consistent=True)
        if claim is not None and (claim.get("ownerMatch"), claim.get("ownerKey")) != (match_id, key):
            await self.end_la_session(
                str(claim.get("ownerMatch")),
                str(claim.get("ownerKey")),
                END_REASON_REPLACED,
                only_live=True,
                only_token=token,
            )
        session = await self._get(match_id, key, consistent=True)
        ttl = session.get("ttl") if session else None
        await self._put(
            _bookkeeping(
                claim_key,
                {"ownerMatch": match_id, "ownerKey": key},
                int(ttl) if isinstance(ttl, int | float) else None,
            )
        )
        return "updated"

    async def end_la_session(
        self,
        match_id: str,
        visitor_key: str,
        end_reason: str,
        *,
        now: float | None = None,
        ttl_s: float | None = None,
        only_live: bool = False,
        only_token: str | None = None,
    ) -> bool:
        """Mark a session ended (``status=ended, endedAt, endReason``, and ``ttl = now + ttl_s`` if given).
        False when there is no such session. Ending an ended session again just rewrites the reason, unless
        ``only_live`` (then False); with ``only_token``, only a session still holding that update token."""
        t = self._now(now)
        u = UpdateBuilder().set("status", STATUS_ENDED).set("endedAt", iso(t)).set("endReason", end_reason)
        if ttl_s is not None:
            u.set("ttl", int(t + ttl_s))
        cond = f"attribute_exists({u.name('visitorKey')})"
        if only_live:
            cond += f" AND {u.name('status')} <> {u.value(STATUS_ENDED)}"
        if only_token is not None:
            cond += f" AND {u.name('updateToken')} = {u.value(only_token)}"
        return await self._update(self._key(match_id, visitor_key), u.kwargs(cond)) is not None

    async def end_user_sessions(self, user_id: str, end_reason: str, *, now: float | None = None) -> int:
        """End every session of the user that has not ended (Query on ``userId-index``, an UpdateItem each,
        conditioned on it not having ended meanwhile): the user's phone is someone else's now. Returns how
        many were ended."""
        ended = 0
        for item in await self.get_user_la_sessions(user_id, now=now):
            if item.get("status") == STATUS_ENDED:
                continue
            if await self.end_la_session(
                str(item["matchId"]), str(item["visitorKey"]), end_reason, now=now, only_live=True
            ):
                ended += 1
        return ended

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


def _bookkeeping(key: tuple[str, str], fields: dict[str, Any], ttl: int | None) -> dict[str, Any]:
    item: dict[str, Any] = {"matchId": key[0], "visitorKey": key[1], **fields}
    if ttl is not None:
        item["ttl"] = int(ttl)
    return item
