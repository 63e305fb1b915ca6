"""Reference data synced from SportMonks: ``cricket-teams``, ``cricket-team-seasons``, ``cricket-leagues``.

Owns the items of those three tables; keys are SportMonks ids as strings (``teamId``; ``seasonId`` +
``teamId``; ``leagueId``). Leagues carry ``active`` (a boolean) which ``get_active_leagues`` filters on.
None of these tables has a TTL.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from daemon.store.base import Item, Repository
from daemon.store.codec import UpdateBuilder
from daemon.store.tables import LEAGUES, TEAM_SEASONS, TEAMS


def _no_nones(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if v is not None}


class TeamRepository(Repository):
    logical = TEAMS

    async def get_team(self, team_id: str) -> Item | None:
        return await self._get(team_id)

    async def get_all_teams(self) -> list[Item]:
        """Scan, every page (the seed: < 100 items)."""
        return await self._scan()

    async def batch_write_teams(self, items: Iterable[Mapping[str, Any]]) -> None:
        await self._batch_put(_no_nones(it) for it in items)

    async def update_team_fields(self, team_id: str, fields: Mapping[str, Any]) -> bool:
        """SET fields (None removes one) on an existing team. False when it does not exist."""
        u = UpdateBuilder().fields(fields, refuse=("teamId",))
        cond = f"attribute_exists({u.name('teamId')})"
        return await self._update(self._key(team_id), u.kwargs(cond)) is not None


class TeamSeasonRepository(Repository):
    logical = TEAM_SEASONS

    async def get_teams_for_season(self, season_id: str) -> list[Item]:
        """Every team record of a season (Query, every page)."""
        return await self._query("#sid = :sid", names={"#sid": "seasonId"}, values={":sid": season_id})

    async def write_season_team_records(self, items: Iterable[Mapping[str, Any]]) -> None:
        """Put season-team records (each needs ``seasonId`` and ``teamId``), BatchWriteItem in 25s."""
        await self._batch_put(_no_nones(it) for it in items)


class LeagueRepository(Repository):
    logical = LEAGUES

    async def get_league(self, league_id: str) -> Item | None:
        return await self._get(league_id)

    async def get_all_leagues(self) -> list[Item]:
        return await self._scan()

    async def get_active_leagues(self) -> list[Item]:
        """Scan with ``FilterExpression: active = true``, every page."""
        return await self._scan(filter_expression="#a = :t", names={"#a": "active"}, values={":t": True})

    async def put_league(self, item: Mapping[str, Any]) -> None:
        """Create or replace a league (PutItem)."""
        await self._put(_no_nones(item))

    async def update_league_fields(self, league_id: str, fields: Mapping[str, Any]) -> bool:
        """SET fields (None removes one) on an existing league. False when it does not exist."""
        u = UpdateBuilder().fields(fields, refuse=("leagueId",))
        cond = f"attribute_exists({u.name('leagueId')})"
        return await self._update(self._key(league_id), u.kwargs(cond)) is not None

    async def delete_league(self, league_id: str) -> Item | None:
        """Delete a league; returns it as it was, or None if there was none."""
        _, old = await self._delete(self._key(league_id))
        return old
