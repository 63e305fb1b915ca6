"""The ASGI application: every User and Both access pattern of the data model as an HTTP endpoint.

Built on FastAPI (see docs/api.md for why): routes declare their path parameters, query parameters and
bodies as pydantic types, so a wrong shape is refused with the field and the reason before a handler runs,
and the OpenAPI document at ``/openapi.json`` is generated from the same declarations. Handlers call the
repositories of ``daemon.store`` (one call per access pattern) and answer JSON with the items' own
camelCase attribute names; they return ready-made responses (no second validation pass on the way out).

The user is always the token's ``sub``: no route takes a user id from the path or the body, so a user can
neither see nor change another user's device, follows or sessions.

Errors all have one shape, ``{"error": {"status", "code", "message", "fields": [{"field", "reason"}]}}``,
from every layer; ``daemon.api.openapi`` lists which statuses each route answers. The layers around the
routes, outermost first: ``AccessLog`` and ``HttpRules`` (``daemon.api.middleware``), the ``Gate``
(``daemon.api.gate``: token, per-user and per-address limits, before any body is read), ``DisplayFastPath``
(below), ``BodyLimit``. The connection-level limits (head, idle, answer timeouts; the HTTP parser's own
refusals in the error shape) are in ``daemon.api.transport``.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import trio
from botocore.exceptions import BotoCoreError, ClientError
from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from daemon import __version__
from daemon.api.auth import Authenticator, JwksKeys, Principal
from daemon.api.cache import TtlCache
from daemon.api.coalesce import Coalescer
from daemon.api.gate import PRINCIPAL, Gate
from daemon.api.middleware import AccessLog, BodyLimit, HttpRules
from daemon.api.models import (
    ID_MAX,
    ID_PATTERN,
    Activity,
    ActivityEnded,
    ActivityIn,
    ActivityList,
    ActivityTokenIn,
    ActivityTokenUpdated,
    Device,
    DeviceIn,
    Display,
    Fixture,
    FixtureList,
    Follow,
    FollowIn,
    FollowPatchIn,
    FollowStatus,
    Health,
    League,
    LeagueList,
    LeaguePatch,
    PushToStartIn,
    Readiness,
    Team,
    TeamList,
    TeamPatch,
    TeamSeasonList,
    is_id,
    parse_iso_utc,
)
from daemon.api.openapi import answers, install_openapi
from daemon.api.ratelimit import RateLimiter
from daemon.api.responses import ApiError, ASGIApp, Receive, Scope, Send, error_response, json_response
from daemon.api.settings import ApiSettings
from daemon.cricket.display import NEUTRAL
from daemon.logs import get_logger
from daemon.store import Repositories
from daemon.store.devices import DeviceRegistrationConflict
from daemon.store.live_activities import visitor_key

log = get_logger("daemon.api")

END_REASON_USER = "user"


@dataclass
class ApiState:
    """What the handlers share: the repositories, the authenticator, the rate limiter, the caches."""

    repos: Repositories
    auth: Authenticator
    keys: JwksKeys
    settings: ApiSettings
    limiter: RateLimiter = field(init=False)
    refusals: RateLimiter = field(init=False)
    match_cache: TtlCache[bool] = field(init=False)
    display_cache: TtlCache[DisplayAnswer | None] = field(init=False)
    scan_cache: TtlCache[list[dict[str, Any]]] = field(init=False)
    registrations: Coalescer[tuple[str, str, str, str | None, int | None, str | None]] = field(init=False)
    in_flight: int = 0

    def __post_init__(self) -> None:
        s = self.settings
        self.limiter = RateLimiter(s.rate_per_s, s.rate_burst, max_users=s.rate_max_users)
        self.refusals = RateLimiter(s.refused_per_s, s.refused_burst, max_users=s.refused_max_addresses)
        # whether a match exists, for the Live Activity registrations of a match's start (a burst for one id)
        self.match_cache = TtlCache(s.reference_cache_s, max_entries=1000)
        self.display_cache = TtlCache(s.display_cache_s)
        self.scan_cache = TtlCache(s.reference_cache_s, max_entries=16)
        self.registrations = Coalescer(
            self.repos.live_activities.register_la_sessions,
            max_batch=s.write_batch_max,
            parallel=s.write_parallel,
        )


# --- dependencies -----------------------------------------------------------------------------------------


def _state(request: Request) -> ApiState:
    state: ApiState = request.app.state.api
    return state


async def current_user(request: Request) -> Principal:
    """The principal the gate admitted (``daemon.api.gate``): every route but the public ones is behind it."""
    principal: Principal | None = request.scope.get(PRINCIPAL)
    if principal is None:  # a route reached without the gate: a wiring bug, refused rather than served
        raise ApiError(401, "invalid_token", "the access token is missing or not valid")
    return principal


@dataclass(frozen=True)
class DisplayAnswer:
    """One display state encoded once per cache load: the JSON body, its ETag and the ASGI header lists of
    a 200 and of a 304, ready to send as they are. ``Cache-Control: private, no-cache``: a client (or
    URLSession's cache) keeps the answer and revalidates it with ``If-None-Match``; a shared cache never
    stores it (it answers a bearer token)."""

    body: bytes
    etag: str
    headers: list[tuple[bytes, bytes]]
    not_modified_headers: list[tuple[bytes, bytes]]

    @classmethod
    def encode(cls, body: bytes) -> DisplayAnswer:
        etag = '"' + hashlib.blake2b(body, digest_size=12).hexdigest() + '"'
        validators = [(b"etag", etag.encode()), (b"cache-control", DISPLAY_CACHE_CONTROL)]
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *validators,
        ]
        return cls(body, etag, headers, validators)

    def messages(self, if_none_match: str | None) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """(status, headers, body): 304 without a body when ``If-None-Match`` names this answer's ETag."""
        if if_none_match is not None and etag_matches(if_none_match, self.etag):
            return 304, self.not_modified_headers, b""
        return 200, self.headers, self.body


DISPLAY_CACHE_CONTROL = b"private, no-cache"


def etag_matches(if_none_match: str, etag: str) -> bool:
    """``If-None-Match`` against one strong ETag, by weak comparison as RFC 9110 has it for this header:
    ``*`` or any listed tag equal to it, a ``W/`` prefix ignored."""
    value = if_none_match.strip()
    if value == "*":
        return True
    for tag in value.split(","):
        tag = tag.strip()
        if tag.startswith("W/"):
            tag = tag[2:]
        if tag == etag:
            return True
    return False


class RawResponse(Response):
    """A response whose status, headers and body are sent as given (the display answer's prebuilt ones)."""

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.status_code = status
        self.raw_headers = headers
        self.body = self.raw_body = body
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_raw(send, self.status_code, self.raw_headers, self.raw_body)


async def send_raw(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def display_answer(api: ApiState, match_id: str, team: str | None) -> DisplayAnswer:
    """The display state the engine cached for ``team`` (neutral without one), from memory within
    ``[api].display_cache_s``: what is cached is the encoded answer (body, ETag, headers), so a read costs
    no DynamoDB call and no encoding; concurrent misses of one key share one read. 404 when the engine has
    cached none."""
    perspective = team or NEUTRAL

    async def load() -> DisplayAnswer | None:
        state = await api.repos.display_cache.get_cached_display_state(match_id, perspective)
        if state is None:
            return None
        body = json_response({"matchId": match_id, "team": perspective, "displayState": state}).body
        return DisplayAnswer.encode(bytes(body))

    answer = await api.display_cache.get(("display", match_id, perspective), load)
    if answer is None:
        raise _not_found("display state for this match and team")
    return answer


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
        raise _not_found("league with this code")
    matches: list[dict[str, Any]] = []
    for league_id in league_ids:
        for raw in await api.repos.fixture_cache.get_fixtures_by_league(league_id):
            if raw.get("id") is not None:
                matches.append({"matchId": str(raw["id"]), "leagueCode": code, "rawFixture": raw})
    if len(league_ids) > 1:  # each query is in start-time order; several leagues are merged into one
        matches.sort(key=lambda m: str(m["rawFixture"].get("starting_at") or ""))
    return matches


async def admin_user(request: Request, user: Annotated[Principal, Depends(current_user)]) -> Principal:
    group = _state(request).auth.admin_group
    if not user.in_group(group):
        raise ApiError(403, "forbidden", f"this endpoint is for the {group!r} group")
    return user


User = Annotated[Principal, Depends(current_user)]
Admin = Annotated[Principal, Depends(admin_user)]
MatchId = Annotated[
    str,
    Path(pattern=ID_PATTERN, max_length=ID_MAX, description="the SportMonks fixture id", examples=["1001"]),
]
TeamId = Annotated[str, Path(pattern=ID_PATTERN, max_length=ID_MAX, description="a team id", examples=["10"])]
LeagueId = Annotated[
    str, Path(pattern=ID_PATTERN, max_length=ID_MAX, description="a league id", examples=["5"])
]
SeasonId = Annotated[
    str, Path(pattern=ID_PATTERN, max_length=ID_MAX, description="a season id", examples=["99"])
]


def _not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", f"no such {what}")


async def _admin_change(
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
        raise _not_found(table.removesuffix("s"))
    api.scan_cache.invalidate(table)
    log.info("api_admin_change", table=table, id=item_id, fields=sorted(fields), user=user.short_sub)
    return json_response({id_name: item_id, **fields})


def _invalid(field_name: str, reason: str) -> ApiError:
    return ApiError(
        422, "invalid_request", f"{field_name}: {reason}", fields=[{"field": field_name, "reason": reason}]
    )


# --- the application --------------------------------------------------------------------------------------


def build_app(state: ApiState) -> ASGIApp:
    """The ASGI application over ``state``, wrapped in the body limit and the access log."""
    app = FastAPI(
        title="Sightscreen app API",
        version=__version__,
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
        # a path with a trailing slash is another path (404): a redirect would be built from the Host header
        redirect_slashes=False,
    )
    app.state.api = state
    _install_error_handlers(app)
    _add_routes(app)
    install_openapi(app)
    s = state.settings
    inner = DisplayFastPath(BodyLimit(app, s.max_body_bytes, s.body_timeout_s), state)
    gate = Gate(
        inner,
        auth=state.auth,
        limiter=state.limiter,
        refusals=state.refusals,
        trusted_hops=s.trusted_proxy_hops,
    )
    return AccessLog(HttpRules(gate), state)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> Response:
        return error_response(exc.status, exc.code, exc.message, exc.fields, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        fields = []
        status = 422
        for err in exc.errors():
            loc = [str(p) for p in err.get("loc", ())]
            if err.get("type") == "json_invalid":
                status = 400
            fields.append({"field": ".".join(loc) or "body", "reason": str(err.get("msg", "invalid"))})
        code = "malformed_json" if status == 400 else "invalid_request"
        message = "the body is not valid JSON" if status == 400 else "the request has invalid fields"
        return error_response(status, code, message, fields)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 404:
            return error_response(404, "not_found", "no such path", headers=headers)
        if exc.status_code == 405:
            allowed = allowed_methods(app, request.scope)
            headers["Allow"] = ", ".join(allowed)
            return error_response(
                405, "method_not_allowed", f"this path answers {', '.join(allowed)}", headers=headers
            )
        return error_response(exc.status_code, "http_error", str(exc.detail), headers=headers)

    @app.exception_handler(ClientError)
    async def _dynamo(request: Request, exc: ClientError) -> Response:
        code = exc.response.get("Error", {}).get("Code", "?")
        log.error("api_store_error", path=request.url.path, code=code, error=str(exc)[:300])
        return error_response(
            503, "unavailable", "the data store is unavailable; retry later", headers={"Retry-After": "1"}
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.error("api_unexpected_error", path=request.url.path, error=repr(exc)[:300])
        return error_response(500, "internal_error", "the server failed to answer this request")

    @app.exception_handler(BotoCoreError)
    async def _boto(request: Request, exc: BotoCoreError) -> Response:
        log.error("api_store_error", path=request.url.path, error=str(exc)[:300])
        return error_response(
            503, "unavailable", "the data store is unavailable; retry later", headers={"Retry-After": "1"}
        )


def allowed_methods(app: FastAPI, scope: Scope) -> list[str]:
    """Every method some route answers on this scope's path, whichever route declares it (Starlette's own
    405 names the first route's only), and HEAD wherever GET is (``HttpRules``)."""
    methods: set[str] = set()
    for route in app.router.routes:
        if route.matches(scope)[0] != Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


def _ids_param(raw: str, most: int) -> list[str]:
    ids = [p.strip() for p in raw.split(",") if p.strip()]
    if not ids:
        raise _invalid("query.ids", "give at least one id")
    if len(ids) > most:
        raise _invalid("query.ids", f"at most {most} ids")
    for i in ids:
        if not is_id(i):
            raise _invalid("query.ids", f"not an id: {i[:40]!r}")
    return list(dict.fromkeys(ids))


def _add_routes(app: FastAPI) -> None:
    # --- health ---------------------------------------------------------------------------------------------
    @app.get(
        "/healthz",
        tags=["health"],
        response_model=Health,
        responses=answers(public=True),
        summary="the process is up",
    )
    async def healthz() -> Response:
        return json_response({"status": "ok"})

    @app.get(
        "/readyz",
        tags=["health"],
        response_model=Readiness,
        responses={**answers(public=True), 503: {"model": Readiness, "description": "a check fails"}},
        summary="DynamoDB reachable and signing keys loaded",
    )
    async def readyz(request: Request) -> Response:
        api = _state(request)
        checks: dict[str, Any] = {"keys": api.keys.loaded or "no signing keys loaded from the JWKS"}
        try:
            with trio.fail_after(3):
                await api.repos.locks.get("health:probe")
            checks["dynamodb"] = True
        except (ClientError, BotoCoreError, trio.TooSlowError) as exc:
            checks["dynamodb"] = f"unreachable: {type(exc).__name__}"
        ready = all(v is True for v in checks.values())
        return json_response({"ready": ready, "checks": checks}, 200 if ready else 503)

    # --- matches --------------------------------------------------------------------------------------------
    @app.get(
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
        league: Annotated[
            str | None, Query(pattern=r"^[A-Za-z0-9_-]{1,32}$", description="league code")
        ] = None,
        from_: Annotated[str | None, Query(alias="from", max_length=40)] = None,
        to: Annotated[str | None, Query(max_length=40)] = None,
        include: Annotated[
            str | None, Query(pattern=r"^raw$", description="'raw': add cached fixtures")
        ] = None,
    ) -> Response:
        api = _state(request)
        if ids is not None:
            if league is not None or from_ is not None or to is not None:
                raise _invalid("query", "give either ids or league with from and to, not both")
            wanted = _ids_param(ids, api.settings.max_match_ids)
            found = await api.repos.fixtures.batch_get_fixtures(wanted)
        elif league is not None and from_ is None and to is None:
            return json_response({"matches": await league_cached_fixtures(api, league), "missing": []})
        elif league is not None:
            if from_ is None or to is None:
                raise _invalid("query.from" if from_ is None else "query.to", "required with league")
            try:
                start, end = parse_iso_utc(from_, "from"), parse_iso_utc(to, "to")
            except ValueError as exc:
                name = "query.from" if str(exc).startswith("from") else "query.to"
                raise _invalid(name, str(exc)) from None
            if start > end:
                raise _invalid("query.to", "must not be before from")
            items = await api.repos.fixtures.get_matches_by_date_range(league, start, end)
            wanted = [str(i["matchId"]) for i in items]
            found = {str(i["matchId"]): i for i in items}
        else:
            raise _invalid("query", "give ids, or league with from and to")
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

    @app.get(
        "/matches/{matchId}",
        tags=["matches"],
        response_model=Fixture,
        responses=answers(404, 422),
        summary="one fixture with its live fields and the cached raw fixture where one exists",
    )
    async def get_match(request: Request, user: User, matchId: MatchId) -> Response:
        api = _state(request)
        item = await api.repos.fixtures.get_fixture(matchId)
        if item is None:
            raise _not_found("match")
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

    @app.get(
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
        answer = await display_answer(_state(request), matchId, team)
        return RawResponse(*answer.messages(request.headers.get("if-none-match")))

    # --- reference data -------------------------------------------------------------------------------------
    @app.get("/teams", tags=["reference"], response_model=TeamList, responses=answers(), summary="every team")
    async def list_teams(request: Request, user: User) -> Response:
        api = _state(request)
        teams = await api.scan_cache.get("teams", api.repos.teams.get_all_teams)
        return json_response({"teams": teams})

    @app.get(
        "/teams/{teamId}",
        tags=["reference"],
        response_model=Team,
        responses=answers(404, 422),
        summary="one team",
    )
    async def get_team(request: Request, user: User, teamId: TeamId) -> Response:
        item = await _state(request).repos.teams.get_team(teamId)
        if item is None:
            raise _not_found("team")
        return json_response(item)

    @app.patch(
        "/teams/{teamId}",
        tags=["reference", "admin"],
        response_model=Team,
        responses=answers(403, 404, body=True),
        summary="change a team's fields (admin)",
    )
    async def patch_team(request: Request, user: Admin, teamId: TeamId, body: TeamPatch) -> Response:
        api = _state(request)
        return await _admin_change(
            api, user, "teams", "teamId", teamId, body.fields(), api.repos.teams.update_team_fields
        )

    @app.get(
        "/seasons/{seasonId}/teams",
        tags=["reference"],
        response_model=TeamSeasonList,
        responses=answers(422),
        summary="the teams of a season with their season stats",
    )
    async def season_teams(request: Request, user: User, seasonId: SeasonId) -> Response:
        return json_response(
            {"teams": await _state(request).repos.team_seasons.get_teams_for_season(seasonId)}
        )

    @app.get(
        "/leagues", tags=["reference"], response_model=LeagueList, responses=answers(), summary="every league"
    )
    async def list_leagues(request: Request, user: User) -> Response:
        api = _state(request)
        return json_response(
            {"leagues": await api.scan_cache.get("leagues", api.repos.leagues.get_all_leagues)}
        )

    @app.get(
        "/leagues/{leagueId}",
        tags=["reference"],
        response_model=League,
        responses=answers(404, 422),
        summary="one league",
    )
    async def get_league(request: Request, user: User, leagueId: LeagueId) -> Response:
        item = await _state(request).repos.leagues.get_league(leagueId)
        if item is None:
            raise _not_found("league")
        return json_response(item)

    @app.patch(
        "/leagues/{leagueId}",
        tags=["reference", "admin"],
        response_model=League,
        responses=answers(403, 404, body=True),
        summary="change a league's fields (admin)",
    )
    async def patch_league(request: Request, user: Admin, leagueId: LeagueId, body: LeaguePatch) -> Response:
        api = _state(request)
        return await _admin_change(
            api, user, "leagues", "leagueId", leagueId, body.fields(), api.repos.leagues.update_league_fields
        )

    @app.delete(
        "/leagues/{leagueId}",
        tags=["reference", "admin"],
        response_model=League,
        responses=answers(403, 404, 422),
        summary="delete a league (admin); answers the league as it was",
    )
    async def delete_league(request: Request, user: Admin, leagueId: LeagueId) -> Response:
        api = _state(request)
        old = await api.repos.leagues.delete_league(leagueId)
        if old is None:
            raise _not_found("league")
        api.scan_cache.invalidate("leagues")
        log.info("api_admin_change", table="leagues", id=leagueId, deleted=True, user=user.short_sub)
        return json_response(old)

    # --- the user's device ----------------------------------------------------------------------------------
    @app.get(
        "/user/device", tags=["device"], response_model=Device, responses=answers(404), summary="your device"
    )
    async def get_device(request: Request, user: User) -> Response:
        item = await _state(request).repos.devices.get_device_for_user(user.sub)
        if item is None:
            raise _not_found("device")
        return json_response(item)

    @app.post(
        "/user/device",
        tags=["device"],
        response_model=Device,
        responses=answers(409, body=True),
        summary="register your device: one per user, and the latest registration of a device token owns it",
    )
    async def register_device(request: Request, user: User, body: DeviceIn) -> Response:
        try:
            item = await _state(request).repos.devices.register_device(
                user.sub,
                body.deviceToken,
                platform=body.platform,
                os_version=body.osVersion,
                app_version=body.appVersion,
                apns_token=body.apnsToken,
                push_to_start_token=body.pushToStartToken,
            )
        except DeviceRegistrationConflict:
            raise ApiError(
                409,
                "conflict",
                "this device token is being registered by others at this moment; retry",
                headers={"Retry-After": "1"},
            ) from None
        return json_response(item)

    @app.put(
        "/user/device/push-to-start",
        tags=["device"],
        response_model=Device,
        responses=answers(404, body=True),
        summary="store a new push-to-start token on your device",
    )
    async def put_push_to_start(request: Request, user: User, body: PushToStartIn) -> Response:
        repos = _state(request).repos
        device = await repos.devices.get_device_for_user(user.sub)
        if device is None or not await repos.devices.update_push_to_start_token(
            user.sub, str(device["deviceToken"]), body.pushToStartToken
        ):
            raise _not_found("device")
        return json_response({**device, "pushToStartToken": body.pushToStartToken})

    @app.delete(
        "/user/device",
        tags=["device"],
        response_model=Device,
        responses=answers(404),
        summary="delete your device; answers it as it was",
    )
    async def delete_device(request: Request, user: User) -> Response:
        repos = _state(request).repos
        device = await repos.devices.get_device_for_user(user.sub)
        old = (
            None
            if device is None
            else await repos.devices.delete_device(user.sub, str(device["deviceToken"]))
        )
        if old is None:
            raise _not_found("device")
        return json_response(old)

    # --- follows --------------------------------------------------------------------------------------------
    @app.get(
        "/user/follow/{matchId}",
        tags=["follows"],
        response_model=FollowStatus,
        responses=answers(422),
        summary="whether you follow a match: {following, follow}",
    )
    async def get_follow(request: Request, user: User, matchId: MatchId) -> Response:
        item = await _state(request).repos.follows.check_if_user_follows_match(matchId, user.sub)
        return json_response({"following": item is not None, "follow": item})

    @app.post(
        "/user/follow/{matchId}",
        tags=["follows"],
        response_model=Follow,
        status_code=201,
        responses=answers(404, body=True),
        summary="follow a match (optionally supporting one of its teams)",
    )
    async def follow(
        request: Request,
        user: User,
        matchId: MatchId,
        body: FollowIn | None = None,
    ) -> Response:
        api = _state(request)
        team_id = body.teamId if body is not None else None
        fixture = await api.repos.fixtures.get_fixture(matchId)
        if fixture is None:
            raise _not_found("match")
        _check_team(fixture, team_id)
        expires = _follow_expiry(fixture, api.settings.follow_ttl_after_start_s)
        # the follow names the user's device: the match's owner reads its followers' devices in batches
        device = await api.repos.devices.get_device_for_user(user.sub)
        item = await api.repos.follows.follow_match(
            matchId,
            user.sub,
            team_id,
            expires,
            device_token=str(device["deviceToken"]) if device else None,
        )
        return json_response(item, 201)

    @app.patch(
        "/user/follow/{matchId}",
        tags=["follows"],
        response_model=Follow,
        responses=answers(404, body=True),
        summary="change the team you support in a match you follow",
    )
    async def patch_follow(request: Request, user: User, matchId: MatchId, body: FollowPatchIn) -> Response:
        if not await _state(request).repos.follows.update_follow_team(matchId, user.sub, body.teamId):
            raise _not_found("follow")
        return json_response({"matchId": matchId, "userId": user.sub, "teamId": body.teamId})

    @app.delete(
        "/user/follow/{matchId}",
        tags=["follows"],
        response_model=Follow,
        responses=answers(404, 422),
        summary="unfollow a match; answers the follow as it was",
    )
    async def unfollow(request: Request, user: User, matchId: MatchId) -> Response:
        old = await _state(request).repos.follows.unfollow_match(matchId, user.sub)
        if old is None:
            raise _not_found("follow")
        return json_response(old)

    # --- Live Activity sessions -----------------------------------------------------------------------------
    @app.post(
        "/user/activity/{matchId}",
        tags=["activities"],
        response_model=Activity,
        status_code=201,
        responses=answers(404, body=True),
        summary="register the Live Activity of one of your devices for a match (status active)",
    )
    async def register_activity(request: Request, user: User, matchId: MatchId, body: ActivityIn) -> Response:
        api = _state(request)
        if not await match_exists(api, matchId):
            raise _not_found("match")
        # registrations arriving together (a match's start) leave together: see daemon.api.coalesce
        ttl = int(time.time() + api.settings.session_ttl_s)
        await api.registrations.submit(
            (matchId, user.sub, body.deviceId, body.updateToken, ttl, body.channelId)
        )
        path = {"channelId": body.channelId} if body.channelId else {}
        return json_response(
            {"matchId": matchId, "userId": user.sub, "deviceId": body.deviceId, "status": "active", **path},
            201,
        )

    @app.patch(
        "/user/activity/{matchId}",
        tags=["activities"],
        response_model=ActivityTokenUpdated,
        responses=answers(404, body=True),
        summary="store a rotated update token of your Live Activity",
    )
    async def rotate_activity_token(
        request: Request, user: User, matchId: MatchId, body: ActivityTokenIn
    ) -> Response:
        if not await _state(request).repos.live_activities.update_token(
            matchId, user.sub, body.deviceId, body.updateToken
        ):
            raise _not_found("Live Activity session")
        return json_response(
            {"matchId": matchId, "userId": user.sub, "deviceId": body.deviceId, "updated": True}
        )

    @app.delete(
        "/user/activity/{matchId}",
        tags=["activities"],
        response_model=ActivityEnded,
        responses=answers(404, 422),
        summary="end your Live Activity for a match (endReason user)",
    )
    async def end_activity(
        request: Request,
        user: User,
        matchId: MatchId,
        deviceId: Annotated[
            str,
            Query(
                pattern=ID_PATTERN, max_length=ID_MAX, description="the device's id", examples=["iphone-1"]
            ),
        ],
    ) -> Response:
        if not await _state(request).repos.live_activities.end_la_session(
            matchId, visitor_key(user.sub, deviceId), END_REASON_USER
        ):
            raise _not_found("Live Activity session")
        return json_response(
            {
                "matchId": matchId,
                "userId": user.sub,
                "deviceId": deviceId,
                "status": "ended",
                "endReason": END_REASON_USER,
            }
        )

    @app.get(
        "/user/activities",
        tags=["activities"],
        response_model=ActivityList,
        responses=answers(),
        summary="your Live Activity sessions across matches",
    )
    async def list_activities(request: Request, user: User) -> Response:
        items = await _state(request).repos.live_activities.get_user_la_sessions(user.sub)
        return json_response({"activities": items})


def _check_team(fixture: Mapping[str, Any], team_id: str | None) -> None:
    if team_id is None:
        return
    teams = {str(fixture[k]) for k in ("localteamId", "visitorteamId") if fixture.get(k) is not None}
    if teams and team_id not in teams:
        raise _invalid("body.teamId", f"not a team of this match (one of {sorted(teams)})")


def _follow_expiry(fixture: Mapping[str, Any], after_start_s: float) -> float:
    start = fixture.get("startTime")
    if isinstance(start, str):
        try:
            from datetime import datetime

            return datetime.fromisoformat(start.replace("Z", "+00:00")).timestamp() + after_start_s
        except ValueError:
            pass
    return time.time() + after_start_s


# --- ASGI middlewares -------------------------------------------------------------------------------------


DISPLAY_ROUTE = "/matches/{matchId}/display"
_DISPLAY_PATH = re.compile(r"/matches/([^/]{1,64})/display")


class DisplayFastPath:
    """``GET /matches/{matchId}/display`` answered before FastAPI's routing and dependency resolution.

    It is the route every open app polls during a match, so its cost per request is the API's capacity. It
    sits behind the gate (authorisation and rate limit done), and its answer is the FastAPI route's (same
    cache, ETag and error shape), sent as the
    prebuilt ASGI messages of the cached answer; a request of any other shape (another query parameter, an
    id that does not match, HEAD) falls through to the FastAPI route, which answers it (422 with the field,
    ...)."""

    def __init__(self, app: ASGIApp, state: ApiState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") == "GET":
            m = _DISPLAY_PATH.fullmatch(scope.get("path", ""))
            team = _team_param(scope.get("query_string", b"")) if m and is_id(m.group(1)) else False
            if m and team is not False:
                scope["sightscreen.route"] = DISPLAY_ROUTE
                if_none_match = None
                for key, value in scope.get("headers", ()):
                    if key == b"if-none-match":
                        if_none_match = bytes(value).decode("latin-1")
                try:
                    answer = await display_answer(self.state, m.group(1), team)
                except ApiError as exc:
                    response = error_response(exc.status, exc.code, exc.message, exc.fields, exc.headers)
                except (ClientError, BotoCoreError) as exc:
                    log.error("api_store_error", path=scope.get("path"), error=str(exc)[:300])
                    response = error_response(
                        503,
                        "unavailable",
                        "the data store is unavailable; retry later",
                        headers={"Retry-After": "1"},
                    )
                else:
                    await send_raw(send, *answer.messages(if_none_match))
                    return
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _team_param(query: bytes) -> str | None | Literal[False]:
    """The ``team`` of a display query (None without one); False for any other query (left to FastAPI)."""
    if not query:
        return None
    name, sep, value = query.decode("latin-1").partition("=")
    if name != "team" or not sep or "&" in value or not is_id(value):
        return False
    return value
