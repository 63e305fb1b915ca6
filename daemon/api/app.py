"""The ASGI application: the app factory. It wires; the routes are in ``daemon.api.routes``.

Built on FastAPI (see docs/api.md for why): routes declare their path parameters, query parameters and
bodies as pydantic types, so a wrong shape is refused with the field and the reason before a handler runs,
and the OpenAPI document at ``/openapi.json`` is generated from the same declarations. Handlers call the
repositories of ``daemon.store`` (one call per access pattern) and answer JSON with the items' own
camelCase attribute names; they return ready-made responses (no second validation pass on the way out).

Errors all have one shape, ``{"error": {"status", "code", "message", "fields": [{"field", "reason"}]}}``,
from every layer (the handlers below answer what the routes raise: ``daemon.api.errors`` lists the
package's exceptions); ``daemon.api.openapi`` lists which statuses each route answers. The layers around
the routes, outermost first: ``AccessLog`` and ``HttpRules`` (``daemon.api.middleware``), the ``Gate``
(``daemon.api.gate``: token, per-user and per-address limits, before any body is read), ``DisplayFastPath``
(``daemon.api.display``), ``BodyLimit``, ``RegistrationFastPath`` (``daemon.api.routes.activities``). The
connection-level limits (head, idle, answer timeouts; the HTTP parser's own refusals in the error shape)
are in ``daemon.api.transport``.
"""

from __future__ import annotations

import functools

from botocore.exceptions import BotoCoreError, ClientError
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from daemon import __version__
from daemon.api.display import DisplayFastPath
from daemon.api.errors import ApiError
from daemon.api.gate import Gate
from daemon.api.middleware import AccessLog, BodyLimit, HttpRules
from daemon.api.openapi import install_openapi, operation_id
from daemon.api.responses import ASGIApp, Scope, error_response
from daemon.api.routes import ROUTERS, include_routes
from daemon.api.routes.activities import RegistrationFastPath, register_token_activity
from daemon.api.state import ApiState
from daemon.logs import get_logger

log = get_logger("daemon.api")


# --- the application --------------------------------------------------------------------------------------


def build_app(state: ApiState) -> ASGIApp:
    """The ASGI application over ``state``, wrapped in the body limit and the access log."""
    app = FastAPI(
        title="Sightscreen app API",
        version=__version__,
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
        # a path with a trailing slash is another path (404): a redirect would be built from the Host header
        redirect_slashes=False,
        generate_unique_id_function=operation_id,
    )
    app.state.api = state
    _install_error_handlers(app)
    include_routes(app)
    install_openapi(app)
    s = state.settings
    registrations = RegistrationFastPath(app, functools.partial(register_token_activity, state))
    inner = DisplayFastPath(BodyLimit(registrations, s.max_body_bytes, s.body_timeout_s), state.displays.get)
    gate = Gate(
        inner,
        auth=state.auth,
        limiter=state.limiter,
        refusals=state.refusals,
        trusted_hops=s.trusted_proxy_hops,
    )
    return AccessLog(HttpRules(gate), state.in_flight, state.refusals, s.trusted_proxy_hops)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> Response:
        return error_response(exc.status, exc.code, exc.message, exc.fields, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        fields = []
        status = 422
        for err in exc.errors():
            loc = [str(p) for p in err.get("loc", ())]
            if err.get("type") == "json_invalid":
                status = 400
            fields.append({"field": ".".join(loc) or "body", "reason": str(err.get("msg", "invalid"))})
        code = "malformed_json" if status == 400 else "invalid_request"
        message = "the body is not valid JSON" if status == 400 else "the request has invalid fields"
        return error_response(status, code, message, fields)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 404:
            return error_response(404, "not_found", "no such path", headers=headers)
        if exc.status_code == 405:
            allowed = allowed_methods(request.scope)
            headers["Allow"] = ", ".join(allowed)
            return error_response(
                405, "method_not_allowed", f"this path answers {', '.join(allowed)}", headers=headers
            )
        return error_response(exc.status_code, "http_error", str(exc.detail), headers=headers)

    @app.exception_handler(ClientError)
    async def _dynamo(request: Request, exc: ClientError) -> Response:
        code = exc.response.get("Error", {}).get("Code", "?")
        log.error("api_store_error", path=request.url.path, code=code, error=str(exc)[:300])
        return error_response(
            503, "unavailable", "the data store is unavailable; retry later", headers={"Retry-After": "1"}
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.error("api_unexpected_error", path=request.url.path, error=repr(exc)[:300])
        return error_response(500, "internal_error", "the server failed to answer this request")

    @app.exception_handler(BotoCoreError)
    async def _boto(request: Request, exc: BotoCoreError) -> Response:
        log.error("api_store_error", path=request.url.path, error=str(exc)[:300])
        return error_response(
            503, "unavailable", "the data store is unavailable; retry later", headers={"Retry-After": "1"}
        )


def allowed_methods(scope: Scope) -> list[str]:
    """Every method some route answers on this scope's path, whichever route declares it (Starlette's own
    405 names the first route's only), and HEAD wherever GET is (``HttpRules``)."""
    methods: set[str] = set()
    for route in (r for router in ROUTERS for r in router.routes):
        if route.matches(scope)[0] != Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)
