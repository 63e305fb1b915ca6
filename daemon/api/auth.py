"""Access-token verification: Cognito user-pool access tokens checked against the pool's JWKS.

Three parts:

- ``keys_from_jwks`` (pure): a JWKS document to the usable signing keys by ``kid`` (``PyJWKSet``; only RSA
  keys meant for signatures with RS256 or no ``alg``; everything else is skipped).
- ``verify_token`` (pure, no I/O): one token against those keys: RS256 only whatever the header says (so
  ``alg: none`` and an HS256 token "signed" with the public key both fail), the key chosen by the header's
  ``kid``, ``iss`` exactly, ``exp``/``nbf``/``iat`` with a leeway and as JSON numbers (not strings, not
  booleans), ``exp`` at most ``max_lifetime_s`` ahead (a token is remembered until its ``exp``, so that
  bounds the memory of it too), ``token_use`` = ``access``,
  ``client_id`` among the configured app clients, a ``sub``. Access tokens carry no ``aud``, so pyjwt is
  not given an audience and ``client_id`` is compared here. Every failure is an ``AuthError`` whose
  ``reason`` goes to the log and a metric, never to the client.
- ``JwksKeys`` (the shell): holds the keys, fetches the JWKS with httpx (no redirects followed) at start-up
  and in the background, and refetches on an unknown ``kid`` at most once per cooldown, so a flood of
  made-up ``kid``\\ s costs one fetch, not one per request. A fetch that fails or yields no usable key keeps
  the keys it had.

``Authenticator`` ties them together for the HTTP layer and remembers tokens it has verified (until their
expiry, while their key is still published), so a client's repeated requests cost one signature check.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import jwt
import trio
from jwt import PyJWK, PyJWKSet

from daemon.api.errors import AuthError, UnknownKid
from daemon.api.settings import AuthSettings
from daemon.logs import get_logger
from daemon.metrics import API_AUTH_FAILURES, JWKS_FETCHES, JWKS_KEYS

log = get_logger("daemon.api.auth")

ALGORITHM = "RS256"
MAX_TOKEN_CHARS = 8192


@dataclass(frozen=True)
class Principal:
    """Who a verified token speaks for."""

    sub: str
    groups: tuple[str, ...]
    client_id: str
    exp: float
    kid: str

    def in_group(self, group: str) -> bool:
        return group in self.groups

    @property
    def short_sub(self) -> str:
        return self.sub[:8]


def keys_from_jwks(doc: Any) -> dict[str, PyJWK]:
    """The signing keys of a JWKS document usable for RS256, by ``kid``. Raises ValueError when none is."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("keys"), list):
        raise ValueError("JWKS: expected an object with a 'keys' list")
    try:
        PyJWKSet.from_dict(dict(doc))  # the set's own checks: at least one key PyJWT can use
    except jwt.PyJWTError as exc:
        raise ValueError(f"JWKS: {exc}") from exc
    keys: dict[str, PyJWK] = {}
    for data in doc["keys"]:
        if not isinstance(data, Mapping):
            continue
        data = dict(data)
        try:
            key = PyJWK(data)
        except jwt.PyJWTError:
            continue  # a key PyJWT cannot use (another algorithm family): the set's others still serve
        kid = key.key_id
        if not isinstance(kid, str) or not kid:
            continue
        if key.key_type != "RSA" or key.algorithm_name != ALGORITHM or data.get("use", "sig") != "sig":
            continue
        keys[kid] = PyJWK(data, algorithm=ALGORITHM)
    if not keys:
        raise ValueError("JWKS: no RSA signing key for RS256 with a kid")
    return keys


def token_kid(token: str) -> str:
    """The header's ``kid`` of a well-formed JWT; AuthError otherwise (nothing is verified here)."""
    if not token or len(token) > MAX_TOKEN_CHARS or token.count(".") != 2:
        raise AuthError("malformed", "not a JWT")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise AuthError("malformed", str(exc)) from exc
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise AuthError("malformed", "no kid in the header")
    return kid


def _numeric_date(claims: Mapping[str, Any], name: str) -> float | None:
    """A NumericDate claim (RFC 7519 §2: a JSON number of seconds) as a float; None when absent. pyjwt
    reads these claims with ``int()``, which also takes ``"9999999999"`` and ``1e30``: refused here."""
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise AuthError("bad_claim", f"{name} must be a finite JSON number, got {type(value).__name__}")
    return float(value)


def verify_token(
    token: str,
    keys: Mapping[str, PyJWK],
    *,
    issuer: str,
    client_ids: frozenset[str] | set[str],
    leeway_s: float,
    max_lifetime_s: float = 86400.0,
    now: float | None = None,
) -> Principal:
    """Verify one access token against ``keys``; the claims it stands for, or AuthError (UnknownKid when the
    header names a key that is not there). ``exp`` further than ``max_lifetime_s`` (plus the leeway) from
    ``now`` is refused."""
    kid = token_kid(token)
    key = keys.get(kid)
    if key is None:
        raise UnknownKid(kid)
    try:
        claims = jwt.decode(
            token,
            key.key,
            algorithms=[ALGORITHM],
            issuer=issuer,
            leeway=leeway_s,
            options={"require": ["exp", "iss", "sub", "token_use", "client_id"], "verify_aud": False},
        )
    except jwt.ExpiredSignatureError as exc:
        raise AuthError("expired", str(exc)) from exc
    except jwt.ImmatureSignatureError as exc:
        raise AuthError("not_yet_valid", str(exc)) from exc
    except jwt.InvalidIssuerError as exc:
        raise AuthError("wrong_issuer", str(exc)) from exc
    except jwt.InvalidSignatureError as exc:
        raise AuthError("bad_signature", str(exc)) from exc
    except jwt.InvalidAlgorithmError as exc:
        raise AuthError("wrong_algorithm", str(exc)) from exc
    except jwt.MissingRequiredClaimError as exc:
        raise AuthError("missing_claim", str(exc)) from exc
    except jwt.PyJWTError as exc:
        raise AuthError("invalid", str(exc)) from exc
    exp = _numeric_date(claims, "exp")
    for name in ("nbf", "iat"):
        _numeric_date(claims, name)
    if exp is None:
        raise AuthError("missing_claim", "exp")
    if exp > (time.time() if now is None else now) + max_lifetime_s + leeway_s:
        raise AuthError("exp_too_far", f"exp is more than {max_lifetime_s:.0f} s ahead")
    if claims.get("token_use") != "access":
        raise AuthError("wrong_use", f"token_use {str(claims.get('token_use'))[:20]!r}")
    client_id = claims.get("client_id")
    if not isinstance(client_id, str) or client_id not in client_ids:
        raise AuthError("wrong_client", f"client_id {str(client_id)[:40]!r}")
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub or "#" in sub or len(sub) > 128:
        raise AuthError("bad_sub", "sub must be a non-empty string of at most 128 characters without '#'")
    groups = claims.get("cognito:groups") or []
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise AuthError("bad_groups", "cognito:groups must be a list of strings")
    return Principal(sub=sub, groups=tuple(groups), client_id=client_id, exp=exp, kid=kid)


class JwksKeys:
    """The JWKS of the issuer, fetched at start-up and refreshed in the background (``run``)."""

    def __init__(
        self,
        url: str,
        *,
        refresh_s: float,
        refetch_cooldown_s: float,
        timeout_s: float = 5.0,
        retry_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.refresh_s = refresh_s
        self.refetch_cooldown_s = refetch_cooldown_s
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self.clock = clock
        self.keys: dict[str, PyJWK] = {}
        self.fetches = 0
        self.failures = 0
        self.last_ok_at: float | None = None
        self._last_refetch: float | None = None
        self._lock = trio.Lock()
        self._http: httpx.AsyncClient | None = None

    @property
    def loaded(self) -> bool:
        return bool(self.keys)

    async def fetch(self, cause: str) -> bool:
        """Fetch the JWKS once; True when it gave usable keys (they replace the old), False otherwise (the old
        keys stay)."""
        self.fetches += 1
        try:
            if self._http is None:
                self._http = httpx.AsyncClient(follow_redirects=False, timeout=self.timeout_s)
            resp = await self._http.get(self.url, headers={"Accept": "application/json"})
            if resp.status_code != 200:
                raise ValueError(f"HTTP {resp.status_code} from the JWKS URL (redirects are not followed)")
            keys = keys_from_jwks(resp.json())
        except (httpx.HTTPError, ValueError) as exc:
            self.failures += 1
            JWKS_FETCHES.labels(cause, "error").inc()
            log.warning(
                "jwks_fetch_failed", cause=cause, url=self.url, error=str(exc)[:300], keys_kept=len(self.keys)
            )
            return False
        changed = set(keys) != set(self.keys)
        self.keys = keys
        self.last_ok_at = self.clock()
        JWKS_FETCHES.labels(cause, "ok").inc()
        JWKS_KEYS.set(len(keys))
        if changed:
            log.info("jwks_keys", cause=cause, kids=sorted(keys))
        return True

    async def refetch_for(self, kid: str) -> bool:
        """An unknown ``kid`` arrived: refetch unless one was made within the cooldown. True when ``kid`` is
        known afterwards. Concurrent callers share one fetch."""
        async with self._lock:
            if kid in self.keys:
                return True
            now = self.clock()
            if self._last_refetch is not None and now - self._last_refetch < self.refetch_cooldown_s:
                return False
            self._last_refetch = now
            await self.fetch("unknown_kid")
            return kid in self.keys

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """First fetch, then a refresh every ``refresh_s`` (every ``retry_s`` while fetches fail). Reports
        started after the first attempt whatever its outcome: readiness says whether keys are loaded."""
        try:
            ok = await self.fetch("start")
            task_status.started()
            while True:
                await trio.sleep(self.refresh_s if ok else min(self.retry_s, self.refresh_s))
                ok = await self.fetch("refresh")
        finally:
            if self._http is not None:
                with trio.CancelScope(shield=True):
                    await self._http.aclose()
                self._http = None


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value; None for any other value."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class Authenticator:
    """Bearer-token authentication for the HTTP layer: verification, the unknown-``kid`` refetch, a memo of
    tokens already verified."""

    def __init__(self, keys: JwksKeys, settings: AuthSettings, *, memo_size: int = 50_000) -> None:
        self.keys = keys
        self.issuer = settings.effective_issuer()
        self.client_ids = frozenset(settings.client_ids)
        self.leeway_s = settings.leeway_s
        self.max_lifetime_s = settings.max_token_lifetime_s
        self.admin_group = settings.admin_group
        self.memo_size = memo_size
        self._memo: dict[str, Principal] = {}

    def _verify(self, token: str) -> Principal:
        return verify_token(
            token,
            self.keys.keys,
            issuer=self.issuer,
            client_ids=self.client_ids,
            leeway_s=self.leeway_s,
            max_lifetime_s=self.max_lifetime_s,
        )

    async def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an ``Authorization: Bearer ...`` header value, or AuthError."""
        try:
            return await self._authenticate(authorization)
        except AuthError as exc:
            API_AUTH_FAILURES.labels(exc.reason).inc()
            raise

    async def _authenticate(self, authorization: str | None) -> Principal:
        if not authorization:
            raise AuthError("missing", "no Authorization header")
        token = bearer_token(authorization)
        if token is None:
            raise AuthError("malformed", "expected 'Bearer <token>'")
        known = self._memo.get(token)
        if known is not None:
            if known.exp + self.leeway_s > time.time() and known.kid in self.keys.keys:
                return known
            del self._memo[token]
        try:
            principal = self._verify(token)
        except UnknownKid as exc:
            if not await self.keys.refetch_for(exc.kid):
                raise
            principal = self._verify(token)
        if len(self._memo) >= self.memo_size:
            self._memo.pop(next(iter(self._memo)))
        self._memo[token] = principal
        return principal
