"""Live Activity sessions: register one of the user's devices for a match (by its update token, or on one
of the match's broadcast channels), rotate its update token, end it, list the user's sessions.

The rules a registration keeps are the store's (``daemon.store.live_activities``): one session per update
token (a registration of the same token under another device id replaces the earlier session, whoever's
it was), at most ``[api].max_sessions_per_match`` sessions per user and match (a further device replaces
the user's oldest), and a retried registration of a session that has ended does not revive it (409).
Registrations arriving together (a match's start) are written together (``daemon.api.coalesce``); one
user's registrations for one match are taken one after another on an instance, so the roster each reads
is the one the previous wrote.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable, Callable
from typing import Annotated

from botocore.exceptions import BotoCoreError, ClientError
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from daemon.api.auth import Principal
from daemon.api.errors import ApiError
from daemon.api.gate import PRINCIPAL
from daemon.api.middleware import replay
from daemon.api.models import (
    ID_MAX,
    ID_PATTERN,
    TOKEN_PATTERN,
    Activity,
    ActivityEnded,
    ActivityIn,
    ActivityList,
    ActivityTokenIn,
    ActivityTokenUpdated,
    ChannelActivityIn,
    is_id,
)
from daemon.api.openapi import answers
from daemon.api.responses import ASGIApp, Receive, Scope, Send, error_response, json_response
from daemon.api.routes.deps import (
    PAGE_DEFAULT,
    Limit,
    MatchId,
    User,
    api_state,
    invalid,
    not_found,
)
from daemon.api.routes.matches import match_channels, match_exists
from daemon.api.state import ApiState
from daemon.logs import get_logger
from daemon.store.live_activities import CURSOR_PATTERN, STATUS_ENDED, SessionRegistration, visitor_key

log = get_logger("daemon.api")

END_REASON_USER = "user"
SessionCursor = Annotated[
    str | None,
    Query(
        pattern=CURSOR_PATTERN,
        max_length=200,
        description="the `next` of the previous page (`{matchId}~{deviceId}` of its last session); none "
        "for the first page",
    ),
]

router = APIRouter()


@router.post(
    "/user/activity/{matchId}",
    tags=["activities"],
    response_model=Activity,
    status_code=201,
    responses=answers(404, 409, body=True),
    summary="register the Live Activity of one of your devices for a match by its update token (status "
    "active); the token's earlier session, and past the per-match limit your oldest, are replaced",
)
async def register_activity(request: Request, user: User, matchId: MatchId, body: ActivityIn) -> Response:
    return await register_token_activity(
        api_state(request), matchId, user.sub, body.deviceId, body.updateToken
    )


async def register_token_activity(
    api: ApiState, match_id: str, user_id: str, device_id: str, update_token: str
) -> Response:
    """The registration of a token-based activity, from the route or from ``RegistrationFastPath``: 201,
    or ApiError (404 for a match that does not exist, 409 for a retry of an ended session)."""
    if not await match_exists(api, match_id):
        raise not_found("match")
    await _register(api, SessionRegistration(match_id, user_id, device_id, update_token, _ttl(api)))
    return json_response(
        {"matchId": match_id, "userId": user_id, "deviceId": device_id, "status": "active"}, 201
    )


@router.post(
    "/user/activity/{matchId}/channel",
    tags=["activities"],
    response_model=Activity,
    status_code=201,
    responses=answers(404, 409, body=True),
    summary="register the Live Activity of one of your devices started on one of the match's broadcast "
    "channels (iOS 18; status active)",
)
async def register_channel_activity(
    request: Request, user: User, matchId: MatchId, body: ChannelActivityIn
) -> Response:
    api = api_state(request)
    if not await match_exists(api, matchId):
        raise not_found("match")
    if body.channelId not in await match_channels(api, matchId, body.channelId):
        raise invalid("body.channelId", "not a broadcast channel of this match")
    await _register(
        api, SessionRegistration(matchId, user.sub, body.deviceId, None, _ttl(api), body.channelId)
    )
    return json_response(
        {
            "matchId": matchId,
            "userId": user.sub,
            "deviceId": body.deviceId,
            "status": "active",
            "channelId": body.channelId,
        },
        201,
    )


def _ttl(api: ApiState) -> int:
    return int(time.time() + api.settings.session_ttl_s)


async def _register(api: ApiState, registration: SessionRegistration) -> None:
    async with api.user_matches.hold((registration.match_id, registration.user_id)):
        outcome = await api.registrations.submit(registration)
    if outcome == STATUS_ENDED:
        raise ApiError(
            409,
            "session_ended",
            "this Live Activity's session has ended and is not revived; a new activity registers with its "
            "own update token",
        )


@router.patch(
    "/user/activity/{matchId}",
    tags=["activities"],
    response_model=ActivityTokenUpdated,
    responses=answers(404, 409, body=True),
    summary="store a rotated update token of your token-based Live Activity",
)
async def rotate_activity_token(
    request: Request, user: User, matchId: MatchId, body: ActivityTokenIn
) -> Response:
    outcome = await api_state(request).repos.live_activities.update_token(
        matchId, user.sub, body.deviceId, body.updateToken
    )
    if outcome == "missing":
        raise not_found("Live Activity session")
    if outcome == "channel":
        raise ApiError(
            409,
            "channel_session",
            "this Live Activity listens on a broadcast channel; it has no update token to rotate",
        )
    return json_response({"matchId": matchId, "userId": user.sub, "deviceId": body.deviceId, "updated": True})


@router.delete(
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
        Query(pattern=ID_PATTERN, max_length=ID_MAX, description="the device's id", examples=["iphone-1"]),
    ],
) -> Response:
    if not await api_state(request).repos.live_activities.end_la_session(
        matchId, visitor_key(user.sub, deviceId), END_REASON_USER
    ):
        raise not_found("Live Activity session")
    return json_response(
        {
            "matchId": matchId,
            "userId": user.sub,
            "deviceId": deviceId,
            "status": "ended",
            "endReason": END_REASON_USER,
        }
    )


@router.get(
    "/user/activities",
    tags=["activities"],
    response_model=ActivityList,
    responses=answers(422),
    summary="your Live Activity sessions across matches, a page at a time",
)
async def list_activities(
    request: Request, user: User, limit: Limit = PAGE_DEFAULT, cursor: SessionCursor = None
) -> Response:
    items, after = await api_state(request).repos.live_activities.get_user_la_sessions_page(
        user.sub, limit=limit, cursor=cursor
    )
    return json_response({"activities": items, "next": after})


# --- the registration's fast path ------------------------------------------------------------------------

ACTIVITY_ROUTE = "/user/activity/{matchId}"
_ACTIVITY_PATH = re.compile(r"/user/activity/([^/]{1,64})")
_TOKEN = re.compile(TOKEN_PATTERN)
Register = Callable[[str, str, str, str], Awaitable[Response]]


class RegistrationFastPath:
    """``POST /user/activity/{matchId}`` with a well-formed body, answered before FastAPI's routing, its
    dependency resolution and its model validation.

    A match's start brings every follower's registration at once, so this route's cost per request is the
    burst's capacity. It sits behind the gate (the principal is on the scope) and the body limit (the body
    is JSON, whole, in one message), and answers exactly as the route does (``register_token_activity``,
    the same errors); a request of any other shape (a query string, another key or type in the body, an id
    or token of the wrong shape) falls through to the route, which answers it (422 naming the field, ...)."""

    def __init__(self, app: ASGIApp, register: Register) -> None:
        self.app = app
        self.register = register

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal: Principal | None = scope.get(PRINCIPAL)
        m = (
            _ACTIVITY_PATH.fullmatch(scope.get("path", ""))
            if scope["type"] == "http" and scope.get("method") == "POST" and not scope.get("query_string")
            else None
        )
        if m is None or principal is None or not is_id(m.group(1)):
            await self.app(scope, receive, send)
            return
        message = await receive()
        fields = _registration(message.get("body", b"")) if message["type"] == "http.request" else None
        if fields is None:
            await self.app(scope, replay([message], receive), send)
            return
        scope["sightscreen.route"] = ACTIVITY_ROUTE
        try:
            response = await self.register(m.group(1), principal.sub, *fields)
        except ApiError as exc:
            response = error_response(exc.status, exc.code, exc.message, exc.fields, exc.headers)
        except (ClientError, BotoCoreError) as exc:
            log.error("api_store_error", path=scope.get("path"), error=str(exc)[:300])
            response = error_response(
                503, "unavailable", "the data store is unavailable; retry later", headers={"Retry-After": "1"}
            )
        await response(scope, receive, send)


def _registration(body: bytes) -> tuple[str, str] | None:
    """(deviceId, updateToken) of a body that is exactly ``{"deviceId": <id>, "updateToken": <token>}``;
    None for anything else (the route answers it)."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.keys() != {"deviceId", "updateToken"}:
        return None
    device_id, token = data["deviceId"], data["updateToken"]
    if not isinstance(device_id, str) or not isinstance(token, str):
        return None
    if not is_id(device_id) or _TOKEN.fullmatch(token) is None:
        return None
    return device_id, token
