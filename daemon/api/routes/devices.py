"""The user's device: read, register (one per user; the latest registration of a token owns it), the
push-to-start token, delete."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from daemon.api.errors import ApiError
from daemon.api.models import Device, DeviceIn, PushToStartIn
from daemon.api.openapi import answers
from daemon.api.responses import json_response
from daemon.api.routes.deps import User, api_state, not_found
from daemon.store.devices import DeviceRegistrationConflict

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
    summary="register your device: one per user, and the latest registration of a device token owns it",
)
async def register_device(request: Request, user: User, body: DeviceIn) -> Response:
    try:
        item = await api_state(request).repos.devices.register_device(
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


@router.put(
    "/user/device/push-to-start",
    tags=["device"],
    response_model=Device,
    responses=answers(404, body=True),
    summary="store a new push-to-start token on your device",
)
async def put_push_to_start(request: Request, user: User, body: PushToStartIn) -> Response:
    repos = api_state(request).repos
    device = await repos.devices.get_device_for_user(user.sub)
    if device is None or not await repos.devices.update_push_to_start_token(
        user.sub, str(device["deviceToken"]), body.pushToStartToken
    ):
        raise not_found("device")
    return json_response({**device, "pushToStartToken": body.pushToStartToken})


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
