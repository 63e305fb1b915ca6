"""``cricket-fixtures``: every match the system knows about.

Owns the fixture items: ``matchId`` (key), ``leagueCode`` + ``startTime`` (the ``leagueCode-startTime-index``
GSI keys: strings, ``startTime`` ISO-8601 so it sorts), ``live``, ``displayState``, ``liveUpdatedAt``,
``archivedAt``, ``ttl`` (optional; an item without it never expires), ``broadcastChannels`` (display
perspective -> iOS 18 broadcast channel id, written by the match's owner only through
``swap_broadcast_channels``), ``broadcastChannelsClaim`` (``{"id", "epoch"}``: the owner creating channels
right now or that died doing so; see ``claim_broadcast_channels``) and whatever else FixtureSync writes.
GSI key attributes must be strings when present: a non-string is refused with the field named, instead of
DynamoDB's batch-wide ValidationException.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from daemon.store.base import Item, Repository
from daemon.store.codec import UpdateBuilder, iso
from daemon.store.tables import FIXTURES, FIXTURES_BY_LEAGUE_INDEX

_GSI_KEYS = ("leagueCode", "startTime")


def _check_gsi_keys(item: Mapping[str, Any], where: str) -> None:
    for k in _GSI_KEYS:
        if k in item and item[k] is not None and not (isinstance(item[k], str) and item[k]):
            raise ValueError(f"{where}.{k}: must be a non-empty string (a GSI key), got {item[k]!r}")


class FixtureRepository(Repository):
    logical = FIXTURES

    async def get_fixture(self, match_id: str, *, now: float | None = None) -> Item | None:
        return await self._get(match_id, now=now)

    async def batch_get_fixtures(
        self, match_ids: Iterable[str], *, now: float | None = None
    ) -> dict[str, Item]:
        """The fixtures found, by matchId (BatchGetItem in 100s, unprocessed keys retried)."""
        items = await self._batch_get(((m,) for m in match_ids), now=now)
        return {it["matchId"]: it for it in items}

    async def get_matches_by_date_range(
        self, league_code: str, from_iso: str, to_iso: str, *, now: float | None = None
    ) -> list[Item]:
        """A league's fixtures with ``from_iso <= startTime <= to_iso``, sorted by start time (GSI Query)."""
        return await self._query(
            "#lc = :lc AND #st BETWEEN :from AND :to",
            index=FIXTURES_BY_LEAGUE_INDEX,
            names={"#lc": "leagueCode", "#st": "startTime"},
            values={":lc": league_code, ":from": from_iso, ":to": to_iso},
            now=now,
        )

    async def batch_write_fixtures(self, items: Iterable[Mapping[str, Any]]) -> None:
        """Put every fixture (BatchWriteItem in 25s; a put replaces the whole item)."""
        checked = []
        for i, item in enumerate(items):
            _check_gsi_keys(item, f"items[{i}]")
            checked.append({k: v for k, v in item.items() if v is not None})
        await self._batch_put(checked)

    async def update_fixture_fields(self, match_id: str, fields: Mapping[str, Any]) -> bool:
        """SET the given fields (None removes one) on an existing fixture. False when it does not exist."""
        _check_gsi_keys(fields, "fields")
        u = UpdateBuilder().fields(fields, refuse=("matchId",))
        cond = f"attribute_exists({u.name('matchId')})"
        return await self._update(self._key(match_id), u.kwargs(cond)) is not None

    async def archive_fixture(self, match_id: str, *, now: float | None = None) -> bool:
        """The match left /livescores: SET ``archivedAt``, REMOVE ``liveUpdatedAt``. False if absent."""
        u = UpdateBuilder().set("archivedAt", iso(self._now(now))).remove("liveUpdatedAt")
        cond = f"attribute_exists({u.name('matchId')})"
        return await self._update(self._key(match_id), u.kwargs(cond)) is not None

    async def swap_broadcast_channels(
        self,
        match_id: str,
        old: Mapping[str, str] | None,
        new: Mapping[str, str] | None,
        *,
        claim: Mapping[str, Any] | None = None,
    ) -> bool:
        """Replace ``broadcastChannels`` with ``new`` (None or empty removes it) only if it is still ``old``
        (None: absent) and, given ``claim``, only if ``broadcastChannelsClaim`` is still that claim; the claim
        is removed in the same write. False when either changed meanwhile or the fixture does not exist: the
        caller re-reads."""
        u = UpdateBuilder()
        if new:
            u.set("broadcastChannels", dict(new))
        else:
            u.remove("broadcastChannels")
        u.remove("broadcastChannelsClaim")
        cond = f"attribute_exists({u.name('matchId')}) AND " + self._channels_condition(u, old)
        if claim is not None:  # claim ids are random: the id alone names the claim
            cond += f" AND {u.name('broadcastChannelsClaim')}.{u.name('id')} = {u.value(str(claim['id']))}"
        return await self._update(self._key(match_id), u.kwargs(cond)) is not None

    async def claim_broadcast_channels(
        self, match_id: str, recorded: Mapping[str, str] | None, claim: Mapping[str, Any] | None
    ) -> bool:
        """SET ``broadcastChannelsClaim`` to ``claim`` (None removes it), whatever claim was there, only if
        ``broadcastChannels`` is still ``recorded`` (None: absent). An owner writes its claim before creating
        channels at APNs: a claim left on the fixture says a creation may have happened that was never
        recorded. False when the record changed or the fixture does not exist."""
        u = UpdateBuilder()
        if claim:
            u.set("broadcastChannelsClaim", dict(claim))
        else:
            u.remove("broadcastChannelsClaim")
        cond = f"attribute_exists({u.name('matchId')}) AND " + self._channels_condition(u, recorded)
        return await self._update(self._key(match_id), u.kwargs(cond)) is not None

    @staticmethod
    def _channels_condition(u: UpdateBuilder, recorded: Mapping[str, str] | None) -> str:
        """``broadcastChannels`` is still ``recorded``: compared entry by entry, with its size, rather than as
        one map (the same test; a local peer such as dynalite never finds two maps equal)."""
        field_name = u.name("broadcastChannels")
        if recorded:
            parts = [f"size({field_name}) = {u.value(len(recorded))}"]
            for perspective, channel in sorted(recorded.items()):
                parts.append(f"{field_name}.{u.name(str(perspective))} = {u.value(str(channel))}")
            return "(" + " AND ".join(parts) + ")"
        return f"attribute_not_exists({field_name})"
