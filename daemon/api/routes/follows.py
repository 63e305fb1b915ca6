"""Follows: whether the user follows a match, follow (optionally supporting a team), change the team,
unfollow."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from daemon.api.models import Follow, FollowIn, FollowPatchIn, FollowStatus
from daemon.api.openapi import answers
from daemon.api.responses import json_response
from daemon.api.routes.deps import MatchId, User, api_state, invalid, not_found

router = APIRouter()


@router.get(
    "/user/follow/{matchId}",
    tags=["follows"],
    response_model=FollowStatus,
    responses=answers(422),
    summary="whether you follow a match: {following, follow}",
)
async def get_follow(request: Request, user: User, matchId: MatchId) -> Response:
    item = await api_state(request).repos.follows.check_if_user_follows_match(matchId, user.sub)
    return json_response({"following": item is not None, "follow": item})


@router.post(
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
    api = api_state(request)
    if body is None and (await request.body()).strip():  # a JSON null: no body this API takes
        raise invalid("body", "send a follow object, or no body at all; null is neither")
    team_id = body.teamId if body is not None else None
    fixture = await api.repos.fixtures.get_fixture(matchId)
    if fixture is None:
        raise not_found("match")
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


@router.patch(
    "/user/follow/{matchId}",
    tags=["follows"],
    response_model=Follow,
    responses=answers(404, body=True),
    summary="change the team you support in a match you follow",
)
async def patch_follow(request: Request, user: User, matchId: MatchId, body: FollowPatchIn) -> Response:
    if not await api_state(request).repos.follows.update_follow_team(matchId, user.sub, body.teamId):
        raise not_found("follow")
    return json_response({"matchId": matchId, "userId": user.sub, "teamId": body.teamId})


@router.delete(
    "/user/follow/{matchId}",
    tags=["follows"],
    response_model=Follow,
    responses=answers(404, 422),
    summary="unfollow a match; answers the follow as it was",
)
async def unfollow(request: Request, user: User, matchId: MatchId) -> Response:
    old = await api_state(request).repos.follows.unfollow_match(matchId, user.sub)
    if old is None:
        raise not_found("follow")
    return json_response(old)


def _check_team(fixture: Mapping[str, Any], team_id: str | None) -> None:
    if team_id is None:
        return
    teams = {str(fixture[k]) for k in ("localteamId", "visitorteamId") if fixture.get(k) is not None}
    if teams and team_id not in teams:
        raise invalid("body.teamId", f"not a team of this match (one of {sorted(teams)})")


def _follow_expiry(fixture: Mapping[str, Any], after_start_s: float) -> float:
    start = fixture.get("startTime")
    if isinstance(start, str):
        try:
            from datetime import datetime

            return datetime.fromisoformat(start.replace("Z", "+00:00")).timestamp() + after_start_s
        except ValueError:
            pass
    return time.time() + after_start_s
