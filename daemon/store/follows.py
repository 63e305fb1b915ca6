"""``cricket-match-follows``: which users follow which match.

Owns the follow items: ``matchId`` (partition key), ``userId`` (sort key), ``teamId`` (the team the user
supports), ``expiresAt`` (epoch seconds; the table's TTL attribute - the seed sets it to match start +
48 h), ``createdAt`` (ISO-8601 UTC, written once), ``deviceToken`` (the sort key of the user's
``cricket-devices`` record when they followed: the match's owner reads its followers' devices by the
hundred with BatchGetItem instead of one Query each, and falls back to the Query when that record is gone),
and the prematch dedup marker ``prematchFor`` (the start time the user was notified for) + ``prematchAt``.
The owner's push-to-start claims live in ``cricket-locks`` (``LockRepository.claim_push_to_starts``).

The prematch marker is per user, not per match, so a late
follower is still notified; it is a conditional *claim* taken before sending, so two workers never both
notify one user; it is keyed on the start time, so a rescheduled match notifies again; and
``clear_prematch_mark`` hands a claim back when the send failed. It lives on the follow itself, so it
expires with it (no separate table to clean up).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from daemon.store.base import Item, Repository
from daemon.store.codec import UpdateBuilder, from_item, iso
from daemon.store.tables import MATCH_FOLLOWS

PREMATCH_CLAIMED = "claimed"
PREMATCH_SENT = "sent"


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
        self,
        match_id: str,
        user_id: str,
        team_id: str | None,
        expires_at: float,
        *,
        now: float | None = None,
        device_token: str | None = None,
    ) -> Item:
        """Upsert a follow: SET ``teamId``, ``expiresAt``, ``deviceToken`` (the user's registered device, when
        given); ``createdAt`` only the first time. Returns the follow as stored (``ALL_NEW``)."""
        t = self._now(now)
        u = UpdateBuilder().set("expiresAt", int(expires_at)).set_if_not_exists("createdAt", iso(t))
        if team_id is not None:
            u.set("teamId", team_id)
        if device_token:
            u.set("deviceToken", device_token)
        resp = await self._update(self._key(match_id, user_id), u.kwargs(), ReturnValues="ALL_NEW")
        return from_item((resp or {}).get("Attributes") or {})

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
            "#mid = :mid",
            names={"#mid": "matchId"},
            values={":mid": match_id},
            include_expired=True,
            fields=("matchId", "userId"),
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

    async def clear_prematch_mark(
        self, match_id: str, user_id: str, *, start_time: str | None = None
    ) -> bool:
        """Give a claim back (the send failed, retry later). With ``start_time``, only that claim."""
        u = UpdateBuilder().remove("prematchFor").remove("prematchAt")
        cond = f"attribute_exists({u.name('userId')})"
        if start_time is not None:
            cond += f" AND {u.name('prematchFor')} = {u.value(start_time)}"
        return await self._update(self._key(match_id, user_id), u.kwargs(cond)) is not None

    # --- the prematch marker (actors.jobs.prematch): claim, take over a lapsed claim, confirm ---------------
    # Attributes on the follow item: prematchFor (start time, ISO; shared with mark_prematch_notified, so
    # clear_prematch_mark still hands a notification back), prematchStart (epoch s), prematchState
    # (claimed|sent), prematchClaimedMs (the claim's stamp: a fencing token), prematchExpiresAt,
    # prematchAt, prematchResult.

    async def get_prematch_pending(
        self, match_id: str, *, start_epoch: float, threshold_s: float, now: float | None = None
    ) -> list[Item]:
        """The follows of a match whose prematch marker is not settled for a start at ``start_epoch``: no
        marker, an expired one, one for a start more than ``threshold_s`` away, or a claim not confirmed (a
        FilterExpression, so the settled majority is neither sent nor parsed; ``actors.jobs.prematch.decide``
        judges each one returned). The job's read every cycle: once a match's followers are notified, a
        cycle costs the Query's pages and nothing more."""
        t = self._now(now)
        names = {
            "#mid": "matchId",
            "#pf": "prematchFor",
            "#ps": "prematchStart",
            "#pst": "prematchState",
            "#pe": "prematchExpiresAt",
        }
        values = {
            ":mid": match_id,
            ":n": "N",
            ":sent": PREMATCH_SENT,
            ":lo": start_epoch - threshold_s,
            ":hi": start_epoch + threshold_s,
            ":now": t,
        }
        pending = (
            "attribute_not_exists(#pf) OR NOT attribute_type(#ps, :n)"
            " OR (attribute_exists(#pst) AND #pst <> :sent)"  # (no state reads as sent)
            " OR #ps < :lo OR #ps > :hi OR #pe <= :now"
        )
        return await self._query("#mid = :mid", filter_expression=pending, names=names, values=values, now=t)

    async def has_followers(self, match_id: str, *, now: float | None = None) -> bool:
        """Whether anyone follows the match (a Query of one item's key)."""
        found = await self._query(
            "#mid = :mid",
            names={"#mid": "matchId"},
            values={":mid": match_id},
            now=now,
            fields=["userId"],
            max_items=1,
            Limit=1,
        )
        return bool(found)

    async def claim_prematch(
        self,
        match_id: str,
        user_id: str,
        *,
        start_iso: str,
        start_epoch: float,
        now: float,
        threshold_s: float,
        expires_at: float,
        settled: str | None = None,
    ) -> int | None:
        """A fresh claim of this follow's prematch notification for this start time: the claim stamp (ms),
        or None when the marker forbids it (a claim or a send for a start time within ``threshold_s`` of
        this one that has not expired, or no such follow).

        With ``settled`` (a result, e.g. "no_device": there is nothing to send) the marker is written as
        settled at once, under the same condition: claim and confirmation in one write."""
        stamp = int(now * 1000)
        u = (
            UpdateBuilder()
            .set("prematchFor", start_iso)
            .set("prematchStart", start_epoch)
            .set("prematchState", PREMATCH_CLAIMED if settled is None else PREMATCH_SENT)
            .set("prematchClaimedMs", stamp)
            .set("prematchExpiresAt", expires_at)
            .set("prematchAt", iso(now))
        )
        if settled is None:
            u.remove("prematchResult")
        else:
            u.set("prematchResult", settled)
        pfor, pstart, pexp = u.name("prematchFor"), u.name("prematchStart"), u.name("prematchExpiresAt")
        cond = (
            f"attribute_exists({u.name('userId')}) AND (attribute_not_exists({pfor}) OR "
            f"attribute_not_exists({pstart}) OR {pexp} <= {u.value(now)} OR "
            f"{pstart} < {u.value(start_epoch - threshold_s)} OR {pstart} > {u.value(start_epoch + threshold_s)})"
        )
        return stamp if await self._update(self._key(match_id, user_id), u.kwargs(cond)) is not None else None

    async def reclaim_prematch(
        self, match_id: str, user_id: str, *, seen_ms: int | None, now: float
    ) -> int | None:
        """Take over a claim whose lease ran out, only if it is still exactly the claim we saw (``seen_ms``
        None: a claim written without a stamp, taken over only while it still has none). The new stamp."""
        stamp = int(now * 1000) if seen_ms is None else max(int(now * 1000), seen_ms + 1)
        u = UpdateBuilder().set("prematchClaimedMs", stamp).set("prematchAt", iso(now))
        state, ms = u.name("prematchState"), u.name("prematchClaimedMs")
        cond = f"{state} = {u.value(PREMATCH_CLAIMED)} AND "
        cond += f"attribute_not_exists({ms})" if seen_ms is None else f"{ms} = {u.value(seen_ms)}"
        return stamp if await self._update(self._key(match_id, user_id), u.kwargs(cond)) is not None else None

    async def confirm_prematch(self, match_id: str, user_id: str, *, claimed_ms: int, result: str) -> bool:
        """The claim's notification is settled (``result``: the push outcome); False if the claim is no
        longer ours (taken over)."""
        u = UpdateBuilder().set("prematchState", PREMATCH_SENT).set("prematchResult", result)
        cond = f"{u.name('prematchClaimedMs')} = {u.value(claimed_ms)}"
        return await self._update(self._key(match_id, user_id), u.kwargs(cond)) is not None


def follower_ids(follows: list[dict[str, Any]]) -> list[str]:
    return [f["userId"] for f in follows]
