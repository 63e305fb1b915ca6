"""Health: ``/healthz`` (the process is up) and ``/readyz`` (DynamoDB reachable, signing keys loaded); both
public (no token)."""

from __future__ import annotations

from typing import Any

import trio
from botocore.exceptions import BotoCoreError, ClientError
from fastapi import APIRouter, Request
from fastapi.responses import Response

from daemon.api.models import Health, Readiness
from daemon.api.openapi import answers
from daemon.api.responses import json_response
from daemon.api.routes.deps import api_state
from daemon.api.state import ApiState

router = APIRouter()


@router.get(
    "/healthz",
    tags=["health"],
    response_model=Health,
    responses=answers(public=True),
    summary="the process is up",
)
async def healthz() -> Response:
    return json_response({"status": "ok"})


@router.get(
    "/readyz",
    tags=["health"],
    response_model=Readiness,
    responses={**answers(public=True), 503: {"model": Readiness, "description": "a check fails"}},
    summary="DynamoDB reachable and signing keys loaded (checked at most once a second)",
)
async def readyz(request: Request) -> Response:
    checks = await api_state(request).readiness.get("checks", lambda: readiness_checks(api_state(request)))
    ready = all(v is True for v in checks.values())
    return json_response({"ready": ready, "checks": checks}, 200 if ready else 503)


async def readiness_checks(api: ApiState) -> dict[str, Any]:
    """Each check: True, or why it fails. Kept for ``READINESS_CACHE_S`` (``ApiState.readiness``), so
    probes cost one DynamoDB read a second at most."""
    checks: dict[str, Any] = {"keys": api.keys.loaded or "no signing keys loaded from the JWKS"}
    try:
        with trio.fail_after(3):
            await api.repos.locks.get("health:probe")
        checks["dynamodb"] = True
    except (ClientError, BotoCoreError, trio.TooSlowError) as exc:
        checks["dynamodb"] = f"unreachable: {type(exc).__name__}"
    return checks
