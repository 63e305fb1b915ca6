"""Provider tokens as APNs checks them: ES256 signature, team, key id, age, and the per-connection token policy."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey

from daemon.apns.server.validation import PROVIDER_TOKEN_MAX_AGE_S, Verdict

# Sans-I/O core: provider tokens


@dataclass(frozen=True, slots=True)
class TokenCheck:
    """What a provider token says, and why it is refused if it is (``reason`` None means valid)."""

    token: str
    kid: str | None = None
    iat: int | None = None
    reason: str | None = None

    @property
    def valid(self) -> bool:
        return self.reason is None


class ProviderTokenVerifier:
    """Verifies ``authorization: bearer <JWT>`` once per distinct token (the signature is the costly part)."""

    # A sender mints about one token per key per 50 minutes; the cap only guards against a runaway client.
    CACHE_LIMIT = 10_000

    def __init__(self, team_id: str, keys: Mapping[str, str | bytes]) -> None:
        self.team_id = team_id
        self._keys: dict[str, EllipticCurvePublicKey] = {}
        for kid, pem in keys.items():
            key = serialization.load_pem_public_key(pem.encode() if isinstance(pem, str) else pem)
            if not isinstance(key, EllipticCurvePublicKey):
                raise ValueError(f"key {kid!r} is not an EC (P-256) public key")
            self._keys[kid] = key
        self._cache: dict[str, TokenCheck] = {}

    def check(self, authorization: str | None, now: float) -> TokenCheck:
        """The token's identity and, if refused, the APNs reason (403 for all of them)."""
        if authorization is None:
            return TokenCheck("", reason="MissingProviderToken")
        cached = self._cache.get(authorization)
        if cached is None:
            cached = self._verify(authorization)
            if len(self._cache) >= self.CACHE_LIMIT:
                self._cache.clear()
            self._cache[authorization] = cached
        if cached.reason is None and cached.iat is not None and now - cached.iat > PROVIDER_TOKEN_MAX_AGE_S:
            return TokenCheck(cached.token, cached.kid, cached.iat, "ExpiredProviderToken")
        return cached

    def _verify(self, authorization: str) -> TokenCheck:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return TokenCheck(authorization, reason="MissingProviderToken")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return TokenCheck(token, reason="InvalidProviderToken")
        kid = header.get("kid")
        if header.get("alg") != "ES256" or not isinstance(kid, str):
            return TokenCheck(token, kid if isinstance(kid, str) else None, reason="InvalidProviderToken")
        key = self._keys.get(kid)
        if key is None:
            return TokenCheck(token, kid, reason="InvalidProviderToken")
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=["ES256"],
                # iat's age is checked at every use (the cached answer outlives the hour); the rest is ours.
                options={"verify_iat": False, "verify_exp": False, "verify_nbf": False, "verify_aud": False},
            )
        except jwt.PyJWTError:
            return TokenCheck(token, kid, reason="InvalidProviderToken")
        iat = claims.get("iat")
        if not isinstance(iat, int) or isinstance(iat, bool):
            return TokenCheck(token, kid, reason="InvalidProviderToken")
        if claims.get("iss") != self.team_id:
            return TokenCheck(token, kid, iat, reason="InvalidProviderToken")
        return TokenCheck(token, kid, iat)


@dataclass
class ConnectionAuth:
    """One connection's provider-token state (§1.5): the adopted token, its kid, and churn poisoning."""

    token: str | None = None
    kid: str | None = None
    adopted_at: float = 0.0
    poisoned: bool = False
    adoptions: int = 0

    def admit(self, check: TokenCheck, now: float, *, min_interval_s: float, pin_key: bool) -> Verdict | None:
        if self.poisoned:
            return Verdict(429, "TooManyProviderTokenUpdates", "connection is unusable after token churn")
        if check.reason is not None:
            return Verdict(403, check.reason)
        if check.token == self.token:
            return None
        if self.token is not None:
            if pin_key and check.kid != self.kid:
                return Verdict(403, "UnrelatedKeyIdInToken", f"connection is bound to kid {self.kid!r}")
            if now - self.adopted_at < min_interval_s:
                self.poisoned = True
                return Verdict(429, "TooManyProviderTokenUpdates", "provider token changed too soon")
        self.token, self.kid, self.adopted_at = check.token, check.kid, now
        self.adoptions += 1
        return None


def redact_authorization(check: TokenCheck | None, raw: str | None) -> str | None:
    """Records keep which token was used (kid, iat), never the token itself."""
    if raw is None:
        return None
    if check is None or check.kid is None:
        return "bearer <unverifiable>"
    return f"bearer <kid={check.kid} iat={check.iat}>"
