"""A local token issuer standing in for a Cognito user pool: the demo's and the tests' Cognito.

It holds RSA keys of its own, serves their JWKS over HTTP on loopback (``/.well-known/jwks.json``, counting
each fetch) and mints access tokens shaped like a user pool's: header ``kid`` + ``RS256``; claims ``sub``,
``iss``, ``client_id``, ``token_use`` = ``access``, ``scope``, ``auth_time``, ``iat``, ``exp``, ``jti``,
``username`` and ``cognito:groups`` when the user is in groups. Everything a test needs to forge a bad
token (another key, a kid it does not publish, other claims, another algorithm) goes through ``mint``'s
keyword arguments.

The demo writes its issuer to a state directory (``save``: the private key with mode 0600 and
``issuer.json``); ``sightscreen api-token`` loads it from there (``load``) to mint a token a person can
use with curl. The JWKS server is a stdlib ``ThreadingHTTPServer`` on its own thread, so it answers
whatever event loop (or none) the process runs.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

DEFAULT_CLIENT_ID = "sightscreen-local-app"
STATE_FILE = "issuer.json"
KEY_FILE = "issuer-key.pem"


def default_state_dir() -> Path:
    """Where the demo leaves its issuer for ``sightscreen api-token``: ``$SIGHTSCREEN_DEMO_STATE``, else
    ``$XDG_STATE_HOME/sightscreen/demo`` (``~/.local/state/sightscreen/demo``)."""
    env = os.environ.get("SIGHTSCREEN_DEMO_STATE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "sightscreen" / "demo"


@dataclass
class SigningKey:
    kid: str
    private: rsa.RSAPrivateKey

    def public_jwk(self) -> dict[str, Any]:
        jwk: dict[str, Any] = json.loads(RSAAlgorithm.to_jwk(self.private.public_key()))
        jwk.update(kid=self.kid, alg="RS256", use="sig")
        return jwk

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def private_pem(self) -> bytes:
        return self.private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )


def new_key(kid: str | None = None) -> SigningKey:
    return SigningKey(
        kid or f"local-{secrets.token_hex(6)}", rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )


class LocalIssuer:
    """RSA keys, their JWKS on loopback, and user-pool-shaped access tokens."""

    def __init__(
        self,
        keys: Iterable[SigningKey] | None = None,
        *,
        issuer: str | None = None,
        client_id: str = DEFAULT_CLIENT_ID,
    ) -> None:
        self.keys: list[SigningKey] = list(keys) if keys is not None else [new_key()]
        self.client_id = client_id
        self._issuer = issuer
        self.jwks_hits = 0
        self.jwks_status = 200  # tests make the server fail (500) or redirect (302) with this
        self.jwks_redirect_to = ""
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ identity
    @property
    def issuer(self) -> str:
        if self._issuer:
            return self._issuer
        if self._server is None:
            raise RuntimeError("the issuer URL is its JWKS server's: start it with serve() first")
        return self.base_url

    @property
    def base_url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)  # an AF_INET server's address
        return f"http://{host}:{port}"

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/.well-known/jwks.json"

    def jwks(self) -> dict[str, Any]:
        return {"keys": [k.public_jwk() for k in self.keys]}

    def rotate(self, kid: str | None = None) -> SigningKey:
        """Publish a new key (first in the JWKS, used by ``mint`` from now on); old keys stay published."""
        key = new_key(kid)
        self.keys.insert(0, key)
        return key

    # ------------------------------------------------------------------ tokens
    def mint(
        self,
        sub: str,
        *,
        groups: Iterable[str] = (),
        ttl_s: float = 3600.0,
        now: float | None = None,
        client_id: str | None = None,
        token_use: str = "access",
        issuer: str | None = None,
        key: SigningKey | None = None,
        kid: str | None = None,
        claims: Mapping[str, Any] | None = None,
        drop: Iterable[str] = (),
    ) -> str:
        """An access token for ``sub``. ``key`` signs (default: the newest); ``kid`` overrides the header's;
        ``claims`` add or replace claims; ``drop`` removes some."""
        t = time.time() if now is None else now
        signer = key or self.keys[0]
        payload: dict[str, Any] = {
            "sub": sub,
            "iss": issuer or self.issuer,
            "client_id": client_id or self.client_id,
            "token_use": token_use,
            "scope": "aws.cognito.signin.user.admin",
            "auth_time": int(t),
            "iat": int(t),
            "exp": int(t + ttl_s),
            "jti": str(uuid.uuid4()),
            "username": sub,
        }
        groups = list(groups)
        if groups:
            payload["cognito:groups"] = groups
        payload.update(claims or {})
        for name in drop:
            payload.pop(name, None)
        return jwt.encode(payload, signer.private, algorithm="RS256", headers={"kid": kid or signer.kid})

    # ------------------------------------------------------------------ the JWKS server
    def serve(self, host: str = "127.0.0.1", port: int = 0) -> LocalIssuer:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/.well-known/jwks.json":
                    self._answer(404, b'{"error":"not_found"}')
                    return
                with issuer._lock:
                    issuer.jwks_hits += 1
                    status, location = issuer.jwks_status, issuer.jwks_redirect_to
                    body = json.dumps(issuer.jwks()).encode()
                if status in (301, 302, 307, 308):
                    self._answer(status, b"", location=location or "/")
                elif status != 200:
                    self._answer(status, b'{"error":"unavailable"}')
                else:
                    self._answer(200, body)

            def _answer(self, status: int, body: bytes, location: str = "") -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                if location:
                    self.send_header("Location", location)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-issuer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> LocalIssuer:
        return self.serve() if self._server is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ state for `sightscreen api-token`
    def save(self, state_dir: Path, *, api_url: str = "") -> Path:
        """Write the signing key (0600) and ``issuer.json`` (issuer, client id, kid, the API's URL)."""
        state_dir.mkdir(parents=True, exist_ok=True)
        key_path = state_dir / KEY_FILE
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(self.keys[0].private_pem())
        os.chmod(key_path, 0o600)
        state = {
            "issuer": self.issuer,
            "client_id": self.client_id,
            "kid": self.keys[0].kid,
            "key_file": KEY_FILE,
            "api_url": api_url,
        }
        path = state_dir / STATE_FILE
        path.write_text(json.dumps(state, indent=2) + "\n")
        return path

    @classmethod
    def load(cls, state_dir: Path) -> tuple[LocalIssuer, dict[str, Any]]:
        """The issuer a demo saved (it mints tokens; its JWKS server is the demo's), and the state file."""
        path = state_dir / STATE_FILE
        try:
            state = json.loads(path.read_text())
            pem = (state_dir / str(state.get("key_file", KEY_FILE))).read_bytes()
            private = serialization.load_pem_private_key(pem, password=None)
        except (OSError, ValueError, TypeError) as exc:
            raise ValueError(f"no usable issuer state in {state_dir}: {exc}") from exc
        if not isinstance(private, rsa.RSAPrivateKey):
            raise ValueError(f"{state_dir / KEY_FILE}: not an RSA private key")
        for field in ("issuer", "client_id", "kid"):
            if not isinstance(state.get(field), str) or not state[field]:
                raise ValueError(f"{path}: {field} missing")
        issuer = cls(
            [SigningKey(state["kid"], private)], issuer=state["issuer"], client_id=state["client_id"]
        )
        return issuer, state
