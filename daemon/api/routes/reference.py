"""Reference data: teams, a season's teams, leagues; the admin group's changes to teams and leagues."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from daemon.api.auth import Principal
from daemon.api.models import League, LeagueList, LeaguePatch, Team, TeamList, TeamPatch, TeamSeasonList
from daemon.api.openapi import answers
from daemon.api.responses import json_response
from daemon.api.routes.deps import (
    PAGE_DEFAULT,
    Admin,
    Cursor,
    LeagueId,
    Limit,
    SeasonId,
    TeamId,
    User,
    api_state,
    not_found,
    page,
)
from daemon.api.state import ApiState
from daemon.logs import get_logger

log = get_logger("daemon.api")

router = APIRouter()


async def admin_change(
    api: ApiState,
    user: Principal,
    table: str,
    id_name: str,
    item_id: str,
    fields: dict[str, Any],
    update: Callable[[str, dict[str, Any]], Awaitable[bool]],
) -> Response:
    """An admin's change of a reference item's fields: conditioned on the item existing (404 otherwise), the
    table's scan cache dropped on this instance, the change logged, and the item's id with the new fields
    answered."""
    if not await update(item_id, fields):
        raise not_found(table.removesuffix("s"))
    api.scan_cache.invalidate(table)
    log.info("apiadmin_change", table=table, id=item_id, fields=sorted(fields), user=user.short_sub)
    return json_response({id_name: item_id, **fields})


@router.get(
    "/teams",
    tags=["reference"],
    response_model=TeamList,
    responses=answers(422),
    summary="every team, a page at a time",
)
async def list_teams(
    request: Request, user: User, limit: Limit = PAGE_DEFAULT, cursor: Cursor = None
) -> Response:
    api = api_state(request)
    teams, after = page(await api.scan_cache.get("teams", api.repos.teams.get_all_teams), limit, cursor)
    return json_response({"teams": teams, "next": after})


@router.get(
    "/teams/{teamId}",
    tags=["reference"],
    response_model=Team,
    responses=answers(404, 422),
    summary="one team",
)
async def get_team(request: Request, user: User, teamId: TeamId) -> Response:
    item = await api_state(request).repos.teams.get_team(teamId)
    if item is None:
        raise not_found("team")
    return json_response(item)


@router.patch(
    "/teams/{teamId}",
    tags=["reference", "admin"],
    response_model=Team,
    responses=answers(403, 404, body=True),
    summary="change a team's fields (admin)",
)
async def patch_team(request: Request, user: Admin, teamId: TeamId, body: TeamPatch) -> Response:
    api = api_state(request)
    return await admin_change(
        api, user, "teams", "teamId", teamId, body.fields(), api.repos.teams.update_team_fields
    )


@router.get(
    "/seasons/{seasonId}/teams",
    tags=["reference"],
    response_model=TeamSeasonList,
    responses=answers(422),
    summary="the teams of a season with their season stats",
)
async def season_teams(
    request: Request, user: User, seasonId: SeasonId, limit: Limit = PAGE_DEFAULT, cursor: Cursor = None
) -> Response:
    teams = await api_state(request).repos.team_seasons.get_teams_for_season(seasonId)
    items, after = page(teams, limit, cursor)
    return json_response({"teams": items, "next": after})


@router.get(
    "/leagues",
    tags=["reference"],
    response_model=LeagueList,
    responses=answers(422),
    summary="every league, a page at a time",
)
async def list_leagues(
    request: Request, user: User, limit: Limit = PAGE_DEFAULT, cursor: Cursor = None
) -> Response:
    api = api_state(request)
    leagues = await api.scan_cache.get("leagues", api.repos.leagues.get_all_leagues)
    items, after = page(leagues, limit, cursor)
    return json_response({"leagues": items, "next": after})


@router.get(
    "/leagues/{leagueId}",
    tags=["reference"],
    response_model=League,
    responses=answers(404, 422),
    summary="one league",
)
async def get_league(request: Request, user: User, leagueId: LeagueId) -> Response:
    item = await api_state(request).repos.leagues.get_league(leagueId)
    if item is None:
        raise not_found("league")
    return json_response(item)


@router.patch(
    "/leagues/{leagueId}",
    tags=["reference", "admin"],
    response_model=League,
    responses=answers(403, 404, body=True),
    summary="change a league's fields (admin)",
)
async def patch_league(request: Request, user: Admin, leagueId: LeagueId, body: LeaguePatch) -> Response:
    api = api_state(request)
    return await admin_change(
        api, user, "leagues", "leagueId", leagueId, body.fields(), api.repos.leagues.update_league_fields
    )


@router.delete(
    "/leagues/{leagueId}",
    tags=["reference", "admin"],
    response_model=League,
    responses=answers(403, 404, 422),
    summary="delete a league (admin); answers the league as it was",
)
async def delete_league(request: Request, user: Admin, leagueId: LeagueId) -> Response:
    api = api_state(request)
    old = await api.repos.leagues.delete_league(leagueId)
    if old is None:
        raise not_found("league")
    api.scan_cache.invalidate("leagues")
    log.info("api_admin_change", table="leagues", id=leagueId, deleted=True, user=user.short_sub)
    return json_response(old)
