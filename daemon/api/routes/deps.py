"""What the routes share: the state, the user, the admin, the path parameters and the two usual errors.

``api_state`` is the ``ApiState`` the app factory put on the application; ``User`` is the principal the
gate admitted (``daemon.api.gate``), ``Admin`` one in the configured admin group. The user is always the
token's ``sub``: no route takes a user id from the path or the body.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, TypeVar

from fastapi import Depends, Path, Query, Request

from daemon.api.auth import Principal
from daemon.api.errors import ApiError
from daemon.api.gate import PRINCIPAL
from daemon.api.models import ID_MAX, ID_PATTERN
from daemon.api.state import ApiState


def api_state(request: Request) -> ApiState:
    state: ApiState = request.app.state.api
    return state


async def current_user(request: Request) -> Principal:
    """The principal the gate admitted (``daemon.api.gate``): every route but the public ones is behind it."""
    principal: Principal | None = request.scope.get(PRINCIPAL)
    if principal is None:  # a route reached without the gate: a wiring bug, refused rather than served
        raise ApiError(401, "invalid_token", "the access token is missing or not valid")
    return principal


async def admin_user(request: Request, user: Annotated[Principal, Depends(current_user)]) -> Principal:
    group = api_state(request).auth.admin_group
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


PAGE_MAX = 100
PAGE_DEFAULT = 50
Limit = Annotated[
    int, Query(ge=1, le=PAGE_MAX, description=f"items per page (at most {PAGE_MAX})", examples=[20])
]
T = TypeVar("T")
Cursor = Annotated[
    str | None,
    Query(
        pattern=r"^[0-9]{1,9}$",
        description="the `next` of the previous page (where the page starts); none for the first page",
    ),
]


def page(items: Sequence[T], limit: int, cursor: str | None) -> tuple[list[T], str | None]:
    """One page of a list the handler holds whole (a bounded list): the items from the cursor (an offset;
    past the end, an empty page) and the next page's cursor (None on the last)."""
    start = int(cursor) if cursor else 0
    end = start + limit
    return list(items[start:end]), (str(end) if end < len(items) else None)


def not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", f"no such {what}")


def invalid(field_name: str, reason: str) -> ApiError:
    """422 naming one field and why."""
    return ApiError(
        422, "invalid_request", f"{field_name}: {reason}", fields=[{"field": field_name, "reason": reason}]
    )
