"""The OpenAPI document as the contract: the answers each operation can give, the bearer security scheme,
and the rules the schema cannot hold.

``answers`` builds an operation's ``responses``: its own statuses plus those every operation can answer
(400 and 431 from the HTTP layer), every authenticated one (401, 429, 503) and every one with a body
(408, 413, 422), each with the error shape. ``install_openapi`` wraps FastAPI's generator: it declares the
``bearer`` scheme (a Cognito user-pool access token) on every operation but the public ones and 405 as a
shared answer (a path's other methods), and says in the description what no schema can: the one-of rules
between query parameters. Kept apart from the routes so the contract is read in one place. See
docs/api.md "The contract".
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

from daemon.api.gate import PUBLIC_PATHS
from daemon.api.models import ErrorAnswer

ERROR_ANSWERS: dict[int, str] = {
    400: "malformed: a body that is not JSON (or nested too deeply), Content-Length with Transfer-Encoding, "
    "or a request the HTTP parser refused (code bad_http); the connection is closed",
    409: "a conflict with the stored state: the device token's registration kept moving under this one "
    "(code conflict; retry after Retry-After), a retried registration of a Live Activity session that has "
    "ended (code session_ended), an update token for a session on a broadcast channel (code "
    "channel_session)",
    401: 'the access token is missing or not valid (WWW-Authenticate: Bearer error="invalid_token")',
    403: "the token's user is not in the admin group",
    404: "no such item",
    408: "the body did not arrive whole within [api].body_timeout_s; the connection is closed",
    413: "the body is larger than [api].max_body_bytes; the connection is closed",
    415: "a body whose Content-Type is not application/json",
    422: "a parameter or field of the wrong type or shape, an unknown or a missing field; `fields` names each",
    429: "too many requests (code rate_limited: the user's bucket; code too_many_refused: the client address's "
    "refusals); Retry-After in seconds",
    431: "the request head is larger than [api].max_header_bytes; the connection is closed",
    503: "DynamoDB is unavailable; Retry-After: 1",
}
SHARED = {400, 431}
AUTHENTICATED = {401, 429, 503}
WITH_BODY = {408, 413, 415, 422}

DESCRIPTION = """The app's endpoints: matches, reference data, the user's device, follows and Live Activity
sessions. Every endpoint but /healthz, /readyz and /openapi.json needs `Authorization: Bearer <access token>`
(a Cognito user-pool access token); every /user endpoint acts for the token's `sub` and answers with
`Cache-Control: no-store`.

Every error has one shape, `{"error": {"status", "code", "message", "fields"}}`, whichever layer answers it,
the HTTP parser's 400 and 431 included. A method a path does not have is answered 405 with `Allow`; HEAD is
answered wherever GET is, without the body.

Every combination of `GET /matches`'s parameters is answered; its description says which list each gives.
Lists are paged: `limit` and `cursor` in, `next` out (null on the last page). A request body is JSON
(`Content-Type: application/json`; any other type is 415); a PATCH of a team or league names at least one
field (`minProperties`), and no optional field is null. A token-based Live Activity registers at
`POST /user/activity/{matchId}`, one started on a broadcast channel at `POST /user/activity/{matchId}/channel`."""


def answers(*codes: int, body: bool = False, public: bool = False) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of one operation: ``codes`` (its own: 304, 403, 404, 422) plus the shared ones."""
    statuses = set(codes) | SHARED
    if not public:
        statuses |= AUTHENTICATED
    if body:
        statuses |= WITH_BODY
    out: dict[int | str, dict[str, Any]] = {}
    for status in sorted(statuses):
        if status == 304:
            out[304] = {"description": "not modified: If-None-Match names the current ETag (no body)"}
        else:
            out[status] = {"model": ErrorAnswer, "description": ERROR_ANSWERS[status]}
    return out


def operation_id(route: APIRoute) -> str:
    """An operation's id: its handler's name in lowerCamelCase (``register_device`` is ``registerDevice``),
    so a generated client's methods are named for what they do."""
    first, *rest = route.name.split("_")
    return first + "".join(part.capitalize() for part in rest)


def install_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` (and so ``/openapi.json``) the contract described in the module docstring."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = generate()
        doc["info"]["description"] = DESCRIPTION
        components = doc.setdefault("components", {})
        components.setdefault("securitySchemes", {})["bearer"] = {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": "a Cognito user-pool access token (RS256; token_use access; the user is its sub)",
        }
        components.setdefault("responses", {})["MethodNotAllowed"] = {
            "description": "the path does not answer this method; Allow lists those it does",
            "headers": {"Allow": {"schema": {"type": "string"}}},
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorAnswer"}}},
        }
        for path, item in doc.get("paths", {}).items():
            for operation in item.values():
                if isinstance(operation, dict) and path not in PUBLIC_PATHS:
                    operation["security"] = [{"bearer": []}]
                if isinstance(operation, dict):
                    _optional_body_as_its_schema(operation)
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]


def _optional_body_as_its_schema(operation: dict[str, Any]) -> None:
    """An optional body (``FollowIn | None``) is documented as its schema with ``required: false``, not as
    ``anyOf [schema, null]``: a client then sends the body or none at all (null is no body this API takes)."""
    body = operation.get("requestBody")
    if not body or body.get("required"):
        return
    for media in body.get("content", {}).values():
        schema = media.get("schema", {})
        branches = [b for b in schema.get("anyOf", []) if b.get("type") != "null"]
        if len(branches) == 1 and len(schema.get("anyOf", [])) == 2:
            media["schema"] = branches[0]
