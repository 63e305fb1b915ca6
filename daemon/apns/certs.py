"""Local TLS and provider-token credentials for the project's APNs server, the demo and the tests.

Owns: a throw-away certificate authority (trustme), the server certificate it issues, the client-side SSL
context that trusts it, and ES256 signing key pairs with a helper that mints provider tokens. Nothing here
is used against the real APNs: production trusts the system store and reads the real .p8 key from a file.
Must not touch: the sender's own token policy (refresh, per-connection switching) lives with the sender.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from daemon import extras

if TYPE_CHECKING:
    import trustme

# Every name a local client might dial: the loopback addresses and "localhost".
DEFAULT_HOSTNAMES: tuple[str, ...] = ("localhost", "127.0.0.1", "::1")


def make_ca() -> trustme.CA:
    """A fresh certificate authority, valid only for this process's lifetime of use.

    trustme comes with the demo extra; without it this raises ``extras.MissingExtra``.
    """
    ca: trustme.CA = extras.require("trustme", purpose="the APNs test server's certificate authority").CA()
    return ca


def server_ssl_context(ca: trustme.CA, hostnames: Iterable[str] = DEFAULT_HOSTNAMES) -> ssl.SSLContext:
    """A server-side context with a certificate for ``hostnames``, TLS 1.2+ and ALPN ``h2`` only (as APNs)."""
    names = list(dict.fromkeys(hostnames))  # issue_cert rejects nothing, but keep the SAN list tidy
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ca.issue_cert(*names).configure_cert(ctx)
    ctx.set_alpn_protocols(["h2"])
    return ctx


def write_ca_pem(ca: trustme.CA, path: str | Path) -> Path:
    """Write the CA certificate (PEM) to ``path`` so another process can trust the server."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    ca.cert_pem.write_to_path(str(target))
    return target


def client_ssl_context(ca_file: str | Path | None = None, *, ca: trustme.CA | None = None) -> ssl.SSLContext:
    """A client context that trusts the local CA (from a PEM file or the CA object) and offers ALPN ``h2``."""
    if (ca_file is None) == (ca is None):
        raise ValueError("give exactly one of ca_file or ca")
    ctx = ssl.create_default_context(cafile=str(ca_file) if ca_file is not None else None)
    if ca is not None:
        ca.configure_trust(ctx)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["h2"])
    return ctx


@dataclass(frozen=True)
class SigningKeyPair:
    """An APNs-style ES256 (P-256) key: ``key_id`` is the 10-character key ID a .p8 key comes with."""

    key_id: str
    private_pem: str
    public_pem: str


def generate_signing_key(key_id: str = "KEY0000001") -> SigningKeyPair:
    private = ec.generate_private_key(ec.SECP256R1())
    private_pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public_pem = (
        private.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return SigningKeyPair(key_id=key_id, private_pem=private_pem, public_pem=public_pem)


def write_key_files(pair: SigningKeyPair, directory: str | Path) -> tuple[Path, Path]:
    """Write ``AuthKey_<kid>.p8`` (private, mode 0600) and ``<kid>.pub.pem``; returns (private, public)."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    private_path = folder / f"AuthKey_{pair.key_id}.p8"
    private_path.write_text(pair.private_pem)
    private_path.chmod(0o600)
    public_path = folder / f"{pair.key_id}.pub.pem"
    public_path.write_text(pair.public_pem)
    return private_path, public_path


def make_provider_token(pair: SigningKeyPair, team_id: str, *, iat: int | None = None) -> str:
    """A provider token (compact JWS) as APNs expects: header {alg ES256, kid}, claims {iss, iat}."""
    issued = int(time.time()) if iat is None else iat
    return jwt.encode(
        {"iss": team_id, "iat": issued},
        pair.private_pem,
        algorithm="ES256",
        headers={"kid": pair.key_id},
    )
