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

import time
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from daemon.api.errors import ApiError
from daemon.api.models import (
    ID_MAX,
    ID_PATTERN,
    Activity,
    ActivityEnded,
    ActivityIn,
    ActivityList,
    ActivityTokenIn,
    ActivityTokenUpdated,
    ChannelActivityIn,
)
from daemon.api.openapi import answers
from daemon.api.responses import json_response
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
from daemon.store.live_activities import CURSOR_PATTERN, STATUS_ENDED, SessionRegistration, visitor_key

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
    api = api_state(request)
    if not await match_exists(api, matchId):
        raise not_found("match")
    await _register(api, SessionRegistration(matchId, user.sub, body.deviceId, body.updateToken, _ttl(api)))
    return json_response(
        {"matchId": matchId, "userId": user.sub, "deviceId": body.deviceId, "status": "active"}, 201
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
