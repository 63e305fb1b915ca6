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
from daemon.api.routes.deps import (
    PAGE_DEFAULT,
    Cursor,
    Limit,
    MatchId,
    User,
    api_state,
    invalid,
    not_found,
    page,
)
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
    """The ids of ``?ids=``, once each, in order; 422 past ``most`` (an entry that is no id is looked up as
    none: it comes back among ``missing``)."""
    ids = list(dict.fromkeys(p.strip() for p in raw.split(",") if p.strip()))
    if not ids:
        raise invalid("query.ids", "give at least one id")
    if len(ids) > most:
        raise invalid("query.ids", f"at most {most} ids")
    return ids


async def match_channels(api: ApiState, match_id: str, wanted: str) -> frozenset[str]:
    """The broadcast channel ids the fixture names (``broadcastChannels``), remembered for
    ``[api].reference_cache_s``; read again once when ``wanted`` is not among them (the match's owner
    creates its channels as the match starts)."""

    async def load() -> frozenset[str]:
        fixture = await api.repos.fixtures.get_fixture(match_id) or {}
        channels = fixture.get("broadcastChannels")
        return frozenset(str(c) for c in channels.values()) if isinstance(channels, dict) else frozenset()

    channels = await api.channel_cache.get(match_id, load)
    if wanted not in channels:
        api.channel_cache.invalidate(match_id)
        channels = await api.channel_cache.get(match_id, load)
    return channels


OPEN_FROM, OPEN_TO = "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"
IDS_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}(,[A-Za-z0-9_.:-]{1,64}){0,99}$"


def _bound(value: str | None, name: str, open_end: str) -> str:
    if value is None:
        return open_end
    try:
        return parse_iso_utc(value, name)
    except ValueError as exc:
        raise invalid(f"query.{name}", str(exc)) from None


async def _active_league_codes(api: ApiState) -> list[str]:
    leagues = await api.scan_cache.get("leagues", api.repos.leagues.get_all_leagues)
    return sorted({str(lg["code"]) for lg in leagues if lg.get("code") and lg.get("active") is not False})


@router.get(
    "/matches",
    tags=["matches"],
    response_model=FixtureList,
    responses=answers(404, 422),
    summary="fixtures: by ids, by league and start time, every active league's by start time, or a league's "
    "cached SportMonks fixtures; a page at a time",
    description="Every combination of the parameters is one of these:\n\n"
    "- `ids`: those fixtures (BatchGetItem; at most [api].max_match_ids); `league`, `from` and `to` narrow "
    "them; ids not found are listed in `missing`.\n"
    "- `league` with `from` and/or `to`: the league's fixtures starting in the range (a bound left out is "
    "open), by start time.\n"
    "- `league` alone: the league's cached SportMonks fixtures (`rawFixture`); 404 when no league has the "
    "code.\n"
    "- neither `ids` nor `league`: every active league's fixtures starting in the range (open bounds), by "
    "start time.\n\n"
    "`from` after `to` is an empty range. `include=raw` adds each fixture's cached SportMonks fixture. The "
    "list is paged (`limit`, `cursor`; `next` is the next page's cursor).",
)
async def list_matches(
    request: Request,
    user: User,
    ids: Annotated[
        str | None,
        Query(pattern=IDS_PATTERN, max_length=7000, description="comma-separated match ids (at most 100)"),
    ] = None,
    league: Annotated[str | None, Query(pattern=r"^[A-Za-z0-9_-]{1,32}$", description="league code")] = None,
    from_: Annotated[
        str | None,
        Query(
            alias="from",
            max_length=40,
            description="fixtures starting at or after this time (ISO 8601; UTC without an offset)",
            json_schema_extra={"format": "date-time"},
        ),
    ] = None,
    to: Annotated[
        str | None,
        Query(
            max_length=40,
            description="fixtures starting at or before this time (ISO 8601; UTC without an offset)",
            json_schema_extra={"format": "date-time"},
        ),
    ] = None,
    include: Annotated[str | None, Query(pattern=r"^raw$", description="'raw': add cached fixtures")] = None,
    limit: Limit = PAGE_DEFAULT,
    cursor: Cursor = None,
) -> Response:
    api = api_state(request)
    start, end = _bound(from_, "from", OPEN_FROM), _bound(to, "to", OPEN_TO)
    missing: list[str] = []
    if ids is not None:
        wanted = ids_param(ids, api.settings.max_match_ids)
        looked = [i for i in wanted if is_id(i)]
        found = await api.repos.fixtures.batch_get_fixtures(looked) if looked else {}
        missing = [m for m in wanted if m not in found]
        items = [
            found[m]
            for m in wanted
            if m in found
            and (league is None or found[m].get("leagueCode") == league)
            and start <= str(found[m].get("startTime") or OPEN_FROM) <= end
        ]
    elif league is not None and from_ is None and to is None:
        cached, after = page(await league_cached_fixtures(api, league), limit, cursor)
        return json_response({"matches": cached, "missing": [], "next": after})
    else:
        codes = [league] if league is not None else await _active_league_codes(api)
        items = []
        if start <= end:
            for code in codes:
                items += await api.repos.fixtures.get_matches_by_date_range(code, start, end)
        if len(codes) > 1:
            items.sort(key=lambda i: (str(i.get("startTime") or ""), str(i.get("matchId"))))
    items, after = page(items, limit, cursor)
    raws: dict[str, dict[str, Any]] = {}
    if include == "raw" and items:
        raws = await api.repos.fixture_cache.batch_get_cached_fixtures([str(i["matchId"]) for i in items])
    matches = []
    for item in items:
        out = dict(item)
        out.pop("broadcastChannelsClaim", None)  # the owner's internal claim, not for the app
        mid = str(item["matchId"])
        if mid in raws:
            out["rawFixture"] = raws[mid]
        matches.append(out)
    return json_response({"matches": matches, "missing": missing, "next": after})


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
