"""ES256 provider tokens (JWT) for APNs token authentication, with Apple's timing rules as a pure policy.

Owns: signing-key loading and generation, minting JWTs, the one-token-per-(team, key) cache, and the rule
for when a connection may switch tokens (apns.md §1.5). Must not touch: I/O, connections, sockets; the clock
is injected so every rule is testable without waiting.

Timing (apns.md §1.5): APNs rejects a token whose ``iat`` is over an hour old (403 ExpiredProviderToken) and
punishes a connection that changes tokens more often than every 20 minutes (429 TooManyProviderTokenUpdates,
after which the connection stays unusable). So: one token per (team, key) refreshed about every 50 minutes
(Pushy and sideshow use 50), and each connection keeps the token it adopted for at least 20 minutes. A
connection only *adopts* a token young enough to outlive that 20-minute hold with a margin; otherwise a
fresh token is minted early. That keeps every token on the wire under an hour old.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

Clock = Callable[[], float]


def generate_signing_key() -> tuple[str, str]:
    """A fresh P-256 key pair as (private PEM in PKCS#8, like Apple's .p8 files; public PEM), for demo and tests."""
    key = ec.generate_private_key(ec.SECP256R1())
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public_pem = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private_pem, public_pem


def load_signing_key(pem: str | bytes) -> ec.EllipticCurvePrivateKey:
    """Parse a .p8 PEM; the error names what is wrong without echoing the key."""
    data = pem.encode() if isinstance(pem, str) else pem
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(
            "apns private_key: not a PEM-encoded private key (expected Apple's .p8 file)"
        ) from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError("apns private_key: APNs provider tokens need a P-256 (ES256) key")
    return key


@dataclass(frozen=True, slots=True)
class ProviderTokenPolicy:
    """Apple's timing rules, with the daemon's choices. Seconds throughout."""

    refresh_after_s: float = 50 * 60  # mint a new token once the current one is this old
    max_age_s: float = 60 * 60  # APNs: iat older than an hour -> ExpiredProviderToken
    min_switch_interval_s: float = 20 * 60  # APNs: at most one token change per connection per 20 minutes
    safety_margin_s: float = 5 * 60  # clock skew and in-flight time

    @property
    def max_adoptable_age_s(self) -> float:
        """A token older than this could expire while a connection is still bound to it by the 20-minute rule."""
        return self.max_age_s - self.min_switch_interval_s - self.safety_margin_s


@dataclass(frozen=True, slots=True)
class ProviderToken:
    team_id: str
    key_id: str
    issued_at: int  # the JWT's iat, epoch seconds
    jwt: str

    @property
    def authorization(self) -> bytes:
        """The ``authorization`` header value, built once per token."""
        return b"bearer " + self.jwt.encode("ascii")

    def age(self, now: float) -> float:
        return now - self.issued_at


def mint_token(key: ec.EllipticCurvePrivateKey, team_id: str, key_id: str, issued_at: int) -> ProviderToken:
    encoded = jwt.encode({"iss": team_id, "iat": issued_at}, key, algorithm="ES256", headers={"kid": key_id})
    return ProviderToken(team_id=team_id, key_id=key_id, issued_at=issued_at, jwt=encoded)


@dataclass(frozen=True, slots=True)
class TokenChoice:
    """What a connection should do about its token now."""

    token: ProviderToken
    switched: bool  # the connection must start using ``token`` (and note ``now`` as its switch time)
    recycle: bool = False  # the connection can neither keep nor switch safely: replace it with a new one


class ProviderTokens:
    """The one current token for each (team, key); minted lazily, shared by all connections of the process."""

    def __init__(
        self,
        key: ec.EllipticCurvePrivateKey,
        *,
        team_id: str,
        key_id: str,
        policy: ProviderTokenPolicy | None = None,
        clock: Clock = time.time,
    ) -> None:
        if len(team_id) != 10 or len(key_id) != 10:
            # Apple's ids are 10 characters; a wrong one only surfaces later as InvalidProviderToken.
            raise ValueError(
                f"apns team_id and key_id must be 10 characters (got {len(team_id)}, {len(key_id)})"
            )
        self._key = key
        self.team_id = team_id
        self.key_id = key_id
        self.policy = policy or ProviderTokenPolicy()
        self._clock = clock
        self._current: ProviderToken | None = None
        self._last_issued = 0
        self.minted = 0

    def now(self) -> float:
        """The policy's clock (epoch seconds): connections note their token switches on it."""
        return self._clock()

    def current(self) -> ProviderToken:
        """The token to use for a fresh adoption: refreshed when older than ``refresh_after_s``."""
        now = self._clock()
        token = self._current
        if token is None or token.age(now) >= self.policy.refresh_after_s:
            token = self._mint(now)
        return token

    def _mint(self, now: float) -> ProviderToken:
        # Never two different tokens with one iat, so a server tracking token changes sees a real change.
        issued = max(int(now), self._last_issued + 1)
        self._last_issued = issued
        self._current = mint_token(self._key, self.team_id, self.key_id, issued)
        self.minted += 1
        return self._current

    def invalidate(self, token: ProviderToken) -> None:
        """APNs called ``token`` expired (clock skew or a stale cache): the next ``current()`` mints a new one."""
        if self._current is not None and self._current.jwt == token.jwt:
            self._current = None

    def for_connection(self, held: ProviderToken | None, switched_at: float | None) -> TokenChoice:
        """Which token a connection should use, given the one it holds and when it last switched."""
        now = self._clock()
        policy = self.policy
        if held is None:
            fresh = self.current()
            if fresh.age(now) > policy.max_adoptable_age_s:
                fresh = self._mint(now)
            return TokenChoice(fresh, switched=True)
        current = self.current()
        if current.jwt == held.jwt:
            return TokenChoice(held, switched=False)
        may_switch = switched_at is None or now - switched_at >= policy.min_switch_interval_s
        if may_switch:
            if current.age(now) > policy.max_adoptable_age_s:
                current = self._mint(now)
            return TokenChoice(current, switched=True)
        if held.age(now) < policy.max_age_s - policy.safety_margin_s:
            return TokenChoice(held, switched=False)  # the old token is still good: wait out the 20 minutes
        return TokenChoice(held, switched=False, recycle=True)
