"""The API's routes, one ``APIRouter`` per resource; ``include_routes`` joins them on the application.

- ``health``: ``/healthz``, ``/readyz`` (public)
- ``matches``: ``/matches``, ``/matches/{matchId}``, ``/matches/{matchId}/display``
- ``reference``: ``/teams``, ``/seasons/{seasonId}/teams``, ``/leagues`` (admin changes included)
- ``devices``: ``/user/device``, ``/user/device/push-to-start``
- ``follows``: ``/user/follow/{matchId}``
- ``activities``: ``/user/activity/{matchId}``, ``/user/activities``

``deps`` holds what they share (the state, the user, path parameters). An endpoint is added in its
resource's module; the contract's shared answers are ``daemon.api.openapi.answers``.
"""

from __future__ import annotations

from fastapi import FastAPI

from daemon.api.routes import activities, devices, follows, health, matches, reference

ROUTERS = (
    health.router,
    matches.router,
    reference.router,
    devices.router,
    follows.router,
    activities.router,
)


def include_routes(app: FastAPI) -> None:
    for router in ROUTERS:
        app.include_router(router)
