"""The user's device: read, register (one per user; the latest registration of a token owns it), the
push-to-start token, delete."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from daemon.api.errors import ApiError
from daemon.api.models import Device, DeviceIn, PushToStartIn
from daemon.api.openapi import answers
from daemon.api.responses import json_response
from daemon.api.routes.deps import User, api_state, not_found
from daemon.api.state import ApiState
from daemon.store.devices import DeviceClaim, DeviceRegistrationConflict

END_REASON_TRANSFERRED = "device_transferred"

router = APIRouter()


@router.get(
    "/user/device", tags=["device"], response_model=Device, responses=answers(404), summary="your device"
)
async def get_device(request: Request, user: User) -> Response:
    item = await api_state(request).repos.devices.get_device_for_user(user.sub)
    if item is None:
        raise not_found("device")
    return json_response(item)


@router.post(
    "/user/device",
    tags=["device"],
    response_model=Device,
    responses=answers(409, body=True),
    summary="register your device: one per user; the latest registration of a push token (device, alert or "
    "push-to-start) owns it, and the earlier owner's Live Activities on that phone end",
)
async def register_device(request: Request, user: User, body: DeviceIn) -> Response:
    claim = await claim_device(
        api_state(request),
        user.sub,
        body.deviceToken,
        platform=body.platform,
        os_version=body.osVersion,
        app_version=body.appVersion,
        apns_token=body.apnsToken,
        push_to_start_token=body.pushToStartToken,
    )
    return json_response(claim.item)


async def claim_device(api: ApiState, user_id: str, device_token: str, **fields: Any) -> DeviceClaim:
    """The store's ``claim_device`` (each of the record's tokens taken from whoever held it), then the Live
    Activity sessions of each user it was taken from ended (``endReason: device_transferred``): their phone
    is this user's now. 409 when the claim kept moving under the registration."""
    try:
        claim = await api.repos.devices.claim_device(user_id, device_token, **fields)
    except DeviceRegistrationConflict:
        raise ApiError(
            409,
            "conflict",
            "this device token is being registered by others at this moment; retry",
            headers={"Retry-After": "1"},
        ) from None
    for previous in claim.taken_from:
        await api.repos.live_activities.end_user_sessions(previous, END_REASON_TRANSFERRED)
    return claim


@router.put(
    "/user/device/push-to-start",
    tags=["device"],
    response_model=Device,
    responses=answers(404, 409, body=True),
    summary="store a new push-to-start token on your device (its owner is you: see POST /user/device)",
)
async def put_push_to_start(request: Request, user: User, body: PushToStartIn) -> Response:
    api = api_state(request)
    device = await api.repos.devices.get_device_for_user(user.sub)
    if device is None:
        raise not_found("device")
    platform = device.get("platform")
    claim = await claim_device(
        api,
        user.sub,
        str(device["deviceToken"]),
        platform=platform if isinstance(platform, str) else "ios",
        push_to_start_token=body.pushToStartToken,
    )
    return json_response(claim.item)


@router.delete(
    "/user/device",
    tags=["device"],
    response_model=Device,
    responses=answers(404),
    summary="delete your device; answers it as it was",
)
async def delete_device(request: Request, user: User) -> Response:
    repos = api_state(request).repos
    device = await repos.devices.get_device_for_user(user.sub)
    old = None if device is None else await repos.devices.delete_device(user.sub, str(device["deviceToken"]))
    if old is None:
        raise not_found("device")
    return json_response(old)
