"""Matches: fixtures by ids, by league and start-time range, a league's cached SportMonks fixtures, one
fixture, and its display state (``daemon.api.display`` answers the polled shape before routing)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from daemon.api.display import RawResponse
from daemon.api.models import ID_MAX, ID_PATTERN, Display, Fixture, FixtureList, is_id, parse_iso_utc
from daemon.api.openapi import answers
from daemon.api.responses import json_response
from daemon.api.routes.deps import MatchId, User, api_state, invalid, not_found
from daemon.api.state import ApiState
from daemon.logs import get_logger

log = get_logger("daemon.api")

router = APIRouter()


async def match_exists(api: ApiState, match_id: str) -> bool:
    """Whether the fixture exists (Get fixture by ID), remembered for ``[api].reference_cache_s`` once it
    does: a match's start brings every follower's Live Activity registration for the same id at once. That a
    match does not exist is not remembered (the fixture sync may add it any moment)."""
    exists = await api.match_cache.get(match_id, lambda: _fixture_exists(api, match_id))
    if not exists:
        api.match_cache.invalidate(match_id)
    return exists


async def _fixture_exists(api: ApiState, match_id: str) -> bool:
    return await api.repos.fixtures.get_fixture(match_id) is not None


async def league_cached_fixtures(api: ApiState, code: str) -> list[dict[str, Any]]:
    """The cached SportMonks fixtures of the league with ``code`` (the data model's "Get fixtures by league"
    on the fixture cache, unexpired ones by start time), each as ``{"matchId", "leagueCode", "rawFixture"}``.
    The cache is keyed by the SportMonks league id, the app knows leagues by code: the code is resolved
    through the leagues scan (cached in memory); 404 when no league has it."""
    leagues = await api.scan_cache.get("leagues", api.repos.leagues.get_all_leagues)
    league_ids = sorted({str(item["leagueId"]) for item in leagues if item.get("code") == code})
    if not league_ids:
        raise not_found("league with this code")
    matches: list[dict[str, Any]] = []
    for league_id in league_ids:
        for raw in await api.repos.fixture_cache.get_fixtures_by_league(league_id):
            if raw.get("id") is not None:
                matches.append({"matchId": str(raw["id"]), "leagueCode": code, "rawFixture": raw})
    if len(league_ids) > 1:  # each query is in start-time order; several leagues are merged into one
        matches.sort(key=lambda m: str(m["rawFixture"].get("starting_at") or ""))
    return matches


def ids_param(raw: str, most: int) -> list[str]:
    ids = [p.strip() for p in raw.split(",") if p.strip()]
    if not ids:
        raise invalid("query.ids", "give at least one id")
    if len(ids) > most:
        raise invalid("query.ids", f"at most {most} ids")
    for i in ids:
        if not is_id(i):
            raise invalid("query.ids", f"not an id: {i[:40]!r}")
    return list(dict.fromkeys(ids))


@router.get(
    "/matches",
    tags=["matches"],
    response_model=FixtureList,
    responses=answers(404, 422),
    summary="fixtures by ids (BatchGetItem), by league and start-time range (GSI), or a league's cached "
    "SportMonks fixtures (league without from and to)",
)
async def list_matches(
    request: Request,
    user: User,
    ids: Annotated[str | None, Query(max_length=7000, description="comma-separated match ids")] = None,
    league: Annotated[str | None, Query(pattern=r"^[A-Za-z0-9_-]{1,32}$", description="league code")] = None,
    from_: Annotated[str | None, Query(alias="from", max_length=40)] = None,
    to: Annotated[str | None, Query(max_length=40)] = None,
    include: Annotated[str | None, Query(pattern=r"^raw$", description="'raw': add cached fixtures")] = None,
) -> Response:
    api = api_state(request)
    if ids is not None:
        if league is not None or from_ is not None or to is not None:
            raise invalid("query", "give either ids or league with from and to, not both")
        wanted = ids_param(ids, api.settings.max_match_ids)
        found = await api.repos.fixtures.batch_get_fixtures(wanted)
    elif league is not None and from_ is None and to is None:
        return json_response({"matches": await league_cached_fixtures(api, league), "missing": []})
    elif league is not None:
        if from_ is None or to is None:
            raise invalid("query.from" if from_ is None else "query.to", "required with league")
        try:
            start, end = parse_iso_utc(from_, "from"), parse_iso_utc(to, "to")
        except ValueError as exc:
            name = "query.from" if str(exc).startswith("from") else "query.to"
            raise invalid(name, str(exc)) from None
        if start > end:
            raise invalid("query.to", "must not be before from")
        items = await api.repos.fixtures.get_matches_by_date_range(league, start, end)
        wanted = [str(i["matchId"]) for i in items]
        found = {str(i["matchId"]): i for i in items}
    else:
        raise invalid("query", "give ids, or league with from and to")
    raws: dict[str, dict[str, Any]] = {}
    if include == "raw" and found:
        raws = await api.repos.fixture_cache.batch_get_cached_fixtures(list(found))
    matches = []
    for mid in wanted:
        item = found.get(mid)
        if item is None:
            continue
        out = dict(item)
        out.pop("broadcastChannelsClaim", None)  # the owner's internal claim, not for the app
        if mid in raws:
            out["rawFixture"] = raws[mid]
        matches.append(out)
    return json_response({"matches": matches, "missing": [m for m in wanted if m not in found]})


@router.get(
    "/matches/{matchId}",
    tags=["matches"],
    response_model=Fixture,
    responses=answers(404, 422),
    summary="one fixture with its live fields and the cached raw fixture where one exists",
)
async def get_match(request: Request, user: User, matchId: MatchId) -> Response:
    api = api_state(request)
    item = await api.repos.fixtures.get_fixture(matchId)
    if item is None:
        raise not_found("match")
    out = dict(item)
    out.pop("broadcastChannelsClaim", None)  # the owner's internal claim, not for the app
    try:
        raw = await api.repos.fixture_cache.get_cached_fixture(matchId)
    except ValueError as exc:  # an entry in an encoding this version cannot read: served without it
        log.warning("api_fixture_cache_unreadable", match_id=matchId, error=str(exc)[:200])
        raw = None
    if raw is not None:
        out["rawFixture"] = raw
    return json_response(out)


@router.get(
    "/matches/{matchId}/display",
    tags=["matches"],
    response_model=Display,
    responses=answers(304, 404, 422),
    summary="the display state the engine cached for a team's supporters (neutral without team)",
)
async def get_display(
    request: Request,
    user: User,
    matchId: MatchId,
    team: Annotated[
        str | None,
        Query(pattern=ID_PATTERN, max_length=ID_MAX, description="a team id; the neutral view without"),
    ] = None,
) -> Response:
    answer = await api_state(request).displays.get(matchId, team)
    return RawResponse(*answer.messages(request.headers.get("if-none-match")))
