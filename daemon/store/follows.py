"""``cricket-match-follows``: which users follow which match.

Owns the follow items: ``matchId`` (partition key), ``userId`` (sort key), ``teamId`` (the team the user
supports), ``expiresAt`` (epoch seconds; the table's TTL attribute - the seed sets it to match start +
48 h), ``createdAt`` (ISO-8601 UTC, written once), and the prematch dedup marker ``prematchFor`` (the
start time the user was notified for) + ``prematchAt``.

The prematch marker fixes the legacy flow's defects (seed 003): it is per user, not per match, so a late
follower is still notified; it is a conditional *claim* taken before sending, so two workers never both
notify one user; it is keyed on the start time, so a rescheduled match notifies again; and
``clear_prematch_mark`` hands a claim back when the send failed. It lives on the follow itself, so it
expires with it (no separate 48 h table).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from daemon.store.base import Item, Repository
from daemon.store.codec import UpdateBuilder, iso
from daemon.store.tables import MATCH_FOLLOWS


class MatchFollowRepository(Repository):
    logical = MATCH_FOLLOWS

    async def check_if_user_follows_match(
        self, match_id: str, user_id: str, *, now: float | None = None
    ) -> Item | None:
        """The follow (truthy) or None (GetItem, expired follows count as absent)."""
        return await self._get(match_id, user_id, now=now)

    async def get_followers_for_match(
        self, match_id: str, *, now: float | None = None, fields: Sequence[str] | None = None
    ) -> list[Item]:
        """Every unexpired follow of a match (Query, every page); only the attributes in ``fields`` if given."""
        return await self._query(
            "#mid = :mid", names={"#mid": "matchId"}, values={":mid": match_id}, now=now, fields=fields
        )

    async def follow_match(
        self, match_id: str, user_id: str, team_id: str | None, expires_at: float, *, now: float | None = None
    ) -> None:
        """Upsert a follow: SET ``teamId``, ``expiresAt``; ``createdAt`` only the first time."""
        t = self._now(now)
        u = UpdateBuilder().set("expiresAt", int(expires_at)).set_if_not_exists("createdAt", iso(t))
        if team_id is not None:
            u.set("teamId", team_id)
        await self._update(self._key(match_id, user_id), u.kwargs())

    async def unfollow_match(self, match_id: str, user_id: str) -> Item | None:
        """Delete the follow; returns it as it was (``ALL_OLD``), or None if there was none."""
        _, old = await self._delete(self._key(match_id, user_id))
        return old

    async def update_follow_team(self, match_id: str, user_id: str, team_id: str) -> bool:
        """Change the supported team of an existing follow. False when there is no such follow."""
        u = UpdateBuilder().set("teamId", team_id)
        cond = f"attribute_exists({u.name('matchId')})"
        return await self._update(self._key(match_id, user_id), u.kwargs(cond)) is not None

    async def remove_all_follows_for_match(self, match_id: str) -> int:
        """Delete every follow of a match (expired ones too): Query the keys, BatchWriteItem deletes in 25s.
        Returns how many were deleted."""
        keys = await self._query(
            "#mid = :mid", names={"#mid": "matchId", "#uid": "userId"}, values={":mid": match_id},
            include_expired=True, ProjectionExpression="#mid, #uid",
        )
        return await self._batch_delete((k["matchId"], k["userId"]) for k in keys)

    async def mark_prematch_notified(
        self, match_id: str, user_id: str, start_time: str, *, now: float | None = None
    ) -> bool:
        """Claim the prematch notification of this follow for ``start_time``. True exactly once per
        (follow, start time): False when the follow does not exist or is already marked for that time."""
        t = self._now(now)
        u = UpdateBuilder().set("prematchFor", start_time).set("prematchAt", iso(t))
        pf, start = u.name("prematchFor"), u.value(start_time)
        cond = f"attribute_exists({u.name('userId')}) AND (attribute_not_exists({pf}) OR {pf} <> {start})"
        return await self._update(self._key(match_id, user_id), u.kwargs(cond)) is not None

    async def clear_prematch_mark(self, match_id: str, user_id: str, *, start_time: str | None = None) -> bool:
        """Give a claim back (the send failed, retry later). With ``start_time``, only that claim."""
        u = UpdateBuilder().remove("prematchFor").remove("prematchAt")
        cond = f"attribute_exists({u.name('userId')})"
        if start_time is not None:
            cond += f" AND {u.name('prematchFor')} = {u.value(start_time)}"
        return await self._update(self._key(match_id, user_id), u.kwargs(cond)) is not None


def follower_ids(follows: list[dict[str, Any]]) -> list[str]:
    return [f["userId"] for f in follows]
