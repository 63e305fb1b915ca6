"""The gate every request passes before anything reads its body: the client's address, the limit on refused
requests per address, the bearer token and the per-user rate limit.

The per-address limit throttles what fails, not who: every refusal, here or in the layers inside (which
mark it on the scope with ``refuse``), is counted in ``sightscreen_api_refused{reason}`` and taken from the
address's bucket (``account``, called by the access log once the answer is sent); while an address's
bucket is empty, its requests are still verified, and a token our issuer signed (a valid signature, even
an expired one) is answered as it would be anywhere (admitted, or 401 so the app refreshes it); only
requests whose token fails its signature are answered 429. So users behind one NAT are never locked out by
a neighbour sending bad tokens, whoever has verified their token before. A token is verified before the
body is read, so a flood of bad tokens costs a signature check each at most, never a body. Addresses are
keyed by ``address_key`` (an IPv6 /64 as one client).

The public paths (``/healthz``, ``/readyz``, ``/openapi.json``) are inside the limits too: an address whose
refusal bucket is empty gets 429 there, and anonymous requests take from a bucket per address (the
per-user rate, keyed by the address). The principal goes on the scope (``PRINCIPAL``) for the routes. See
docs/api.md "Limits".
"""

from __future__ import annotations

import functools
import ipaddress
from typing import Protocol

import trio

from daemon.api.auth import Principal
from daemon.api.errors import ApiError, AuthError
from daemon.api.ratelimit import Decision
from daemon.api.responses import ASGIApp, Receive, Scope, Send, error_response
from daemon.logs import get_logger
from daemon.metrics import API_AUTH_FAILURES, API_RATE_LIMITED, API_REFUSED

log = get_logger("daemon.api")

PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json"})
"""Paths answered without a token; every other path, an unknown one included, needs one (so a client
without a token learns nothing about which paths exist)."""
PRINCIPAL = "sightscreen.principal"
REFUSED = "sightscreen.refused"
BEARER_CHALLENGE = {"WWW-Authenticate": 'Bearer error="invalid_token"'}


def refuse(scope: Scope, reason: str) -> None:
    """Mark the request as refused (``reason`` is the metric's label): the gate counts it and charges the
    client's address once the answer is sent."""
    scope[REFUSED] = reason


def client_address(scope: Scope, trusted_hops: int) -> str:
    """The client's address: the connection's peer, or with ``trusted_hops`` proxies in front (each
    appending the address it saw to X-Forwarded-For), the entry the outermost of them appended. A header
    shorter than that (a client's own X-Forwarded-For cannot push an address in) falls back to the peer."""
    client = scope.get("client")
    peer = str(client[0]) if client else "?"
    if trusted_hops <= 0:
        return peer
    entries: list[str] = []
    for name, value in scope.get("headers", ()):
        if name == b"x-forwarded-for":
            entries.extend(p.strip() for p in bytes(value).decode("latin-1").split(","))
    if len(entries) < trusted_hops:
        return peer
    return entries[-trusted_hops] or peer


@functools.lru_cache(maxsize=65536)
def address_key(address: str) -> str:
    """The key a client address is counted under (refusals, connections): an IPv4 address as it is (an
    IPv4-mapped IPv6 address as its IPv4 one), an IPv6 address by its /64 (one subscriber's network: an
    address rotated within it is the same client); anything else as it is. Remembered for the last 65,536
    addresses: every request asks, and parsing an address costs more than the rest of the gate."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def authorization_of(scope: Scope) -> tuple[str | None, int]:
    """The Authorization header's value and how many Authorization headers the request has."""
    value: str | None = None
    count = 0
    for name, raw in scope.get("headers", ()):
        if name == b"authorization":
            count += 1
            value = bytes(raw).decode("latin-1")
    return value, count


def account(scope: Scope, refusals: Buckets, trusted_hops: int) -> None:
    """Once a request is answered: its refusal, if any layer refused it, counted by reason and taken from
    its address's bucket (not the limit refusals themselves: the bucket refills while an address is
    limited, so a client that keeps trying gets ``refused_per_s`` checks a second, no more)."""
    reason = scope.get(REFUSED)
    if reason is not None:
        API_REFUSED.labels(reason).inc()
        if reason not in ("address_limited", "rate_limited", "token_expired"):
            refusals.take(address_key(client_address(scope, trusted_hops)), trio.current_time())


class Authenticates(Protocol):
    async def authenticate(self, authorization: str | None) -> Principal: ...


SIGNED_REFUSALS = frozenset({"expired", "not_yet_valid"})
"""AuthError reasons of a token whose signature was verified (pyjwt checks the signature before the
times): our issuer's token, refused for its time only; never answered 429 for its address's refusals and
not charged to the address (the hourly refresh of every user behind a NAT would otherwise drain it)."""
ANONYMOUS = "address:"
"""The rate limiter's key prefix for a public path's requests, by address key."""


class Buckets(Protocol):
    def peek(self, key: str, now: float) -> Decision: ...

    def take(self, key: str, now: float) -> Decision: ...


class Gate:
    """The ASGI layer that admits a request to the routes (see the module docstring): handed the
    authenticator, the per-user buckets (``limiter``), the per-address refusal buckets (``refusals``) and
    the number of trusted proxies, not the API's whole state."""

    def __init__(
        self, app: ASGIApp, *, auth: Authenticates, limiter: Buckets, refusals: Buckets, trusted_hops: int
    ) -> None:
        self.app = app
        self.auth = auth
        self.limiter = limiter
        self.refusals = refusals
        self.trusted_hops = trusted_hops

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            if scope["path"] in PUBLIC_PATHS:
                self._admit_anonymous(scope)
            else:
                scope[PRINCIPAL] = await self._admit(scope)
        except ApiError as exc:
            response = error_response(exc.status, exc.code, exc.message, exc.fields, exc.headers)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _address_limited(self, scope: Scope, room: Decision) -> ApiError:
        refuse(scope, "address_limited")
        return ApiError(
            429,
            "too_many_refused",
            "too many refused requests from this address; retry later",
            headers={"Retry-After": room.retry_after_header()},
        )

    def _rate_limited(self, scope: Scope, decision: Decision) -> ApiError:
        API_RATE_LIMITED.inc()
        refuse(scope, "rate_limited")
        return ApiError(
            429,
            "rate_limited",
            "too many requests; retry later",
            headers={"Retry-After": decision.retry_after_header()},
        )

    def _admit_anonymous(self, scope: Scope) -> None:
        now = trio.current_time()
        address = address_key(client_address(scope, self.trusted_hops))
        room = self.refusals.peek(address, now)
        if not room.allowed:
            raise self._address_limited(scope, room)
        decision = self.limiter.take(ANONYMOUS + address, now)
        if not decision.allowed:
            raise self._rate_limited(scope, decision)

    async def _admit(self, scope: Scope) -> Principal:
        authorization, count = authorization_of(scope)
        now = trio.current_time()
        address = address_key(client_address(scope, self.trusted_hops))
        room = self.refusals.peek(address, now)
        try:
            if count > 1:  # a singleton header given twice: refusing it is safer than picking one
                API_AUTH_FAILURES.labels("duplicate_header").inc()
                raise AuthError("duplicate_header", f"{count} Authorization headers")
            principal = await self.auth.authenticate(authorization)
        except AuthError as exc:
            signed = exc.reason in SIGNED_REFUSALS
            if not room.allowed and not signed:
                raise self._address_limited(scope, room) from None
            log.info("api_token_refused", reason=exc.reason, detail=exc.detail[:200], path=scope.get("path"))
            refuse(scope, "token_expired" if signed else "invalid_token")
            raise ApiError(
                401, "invalid_token", "the access token is missing or not valid", headers=BEARER_CHALLENGE
            ) from None
        scope["sightscreen.user"] = principal.short_sub
        decision = self.limiter.take(principal.sub, now)
        if not decision.allowed:
            raise self._rate_limited(scope, decision)
        return principal
