"""Live Activity sessions: register one of the user's devices for a match, rotate its update token, end it,
list the user's sessions."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from daemon.api.models import (
    ID_MAX,
    ID_PATTERN,
    Activity,
    ActivityEnded,
    ActivityIn,
    ActivityList,
    ActivityTokenIn,
    ActivityTokenUpdated,
)
from daemon.api.openapi import answers
from daemon.api.responses import json_response
from daemon.api.routes.deps import MatchId, User, api_state, not_found
from daemon.api.routes.matches import match_exists
from daemon.store.live_activities import visitor_key

END_REASON_USER = "user"

router = APIRouter()


@router.post(
    "/user/activity/{matchId}",
    tags=["activities"],
    response_model=Activity,
    status_code=201,
    responses=answers(404, body=True),
    summary="register the Live Activity of one of your devices for a match (status active)",
)
async def register_activity(request: Request, user: User, matchId: MatchId, body: ActivityIn) -> Response:
    api = api_state(request)
    if not await match_exists(api, matchId):
        raise not_found("match")
    # registrations arriving together (a match's start) leave together: see daemon.api.coalesce
    ttl = int(time.time() + api.settings.session_ttl_s)
    await api.registrations.submit((matchId, user.sub, body.deviceId, body.updateToken, ttl, body.channelId))
    path = {"channelId": body.channelId} if body.channelId else {}
    return json_response(
        {"matchId": matchId, "userId": user.sub, "deviceId": body.deviceId, "status": "active", **path},
        201,
    )


@router.patch(
    "/user/activity/{matchId}",
    tags=["activities"],
    response_model=ActivityTokenUpdated,
    responses=answers(404, body=True),
    summary="store a rotated update token of your Live Activity",
)
async def rotate_activity_token(
    request: Request, user: User, matchId: MatchId, body: ActivityTokenIn
) -> Response:
    if not await api_state(request).repos.live_activities.update_token(
        matchId, user.sub, body.deviceId, body.updateToken
    ):
        raise not_found("Live Activity session")
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
    responses=answers(),
    summary="your Live Activity sessions across matches",
)
async def list_activities(request: Request, user: User) -> Response:
    items = await api_state(request).repos.live_activities.get_user_la_sessions(user.sub)
    return json_response({"activities": items})
