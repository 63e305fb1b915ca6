"""The local issuer: its tokens look like a user pool's, and `sightscreen api-token` mints from a saved one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jwt

from daemon.api.auth import keys_from_jwks, verify_token
from daemon.demo.issuer import LocalIssuer


def test_tokens_have_the_user_pool_access_token_shape() -> None:
    iss = LocalIssuer(issuer="https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_X")
    token = iss.mint("abc-123", groups=["admin"])
    header = jwt.get_unverified_header(token)
    claims = jwt.decode(token, options={"verify_signature": False})
    assert header["alg"] == "RS256" and header["kid"] == iss.keys[0].kid
    assert claims["token_use"] == "access" and claims["client_id"] == iss.client_id and "aud" not in claims
    assert claims["cognito:groups"] == ["admin"] and claims["sub"] == "abc-123"
    assert {"iat", "exp", "auth_time", "jti", "scope", "username", "iss"} <= set(claims)


def test_api_token_mints_from_the_state_the_demo_saved(tmp_path: Path) -> None:
    with LocalIssuer().serve() as iss:
        iss.save(tmp_path, api_url="http://127.0.0.1:1")
        assert oct((tmp_path / "issuer-key.pem").stat().st_mode & 0o777) == "0o600"
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "daemon",
                "api-token",
                "--sub",
                "curl-user",
                "--admin",
                "--state-dir",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=True,
        )
        principal = verify_token(
            out.stdout.strip(),
            keys_from_jwks(iss.jwks()),
            issuer=iss.issuer,
            client_ids={iss.client_id},
            leeway_s=0,
        )
        assert principal.sub == "curl-user" and principal.groups == ("admin",)


def test_api_token_says_clearly_when_no_demo_state_exists(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run(
        [sys.executable, "-m", "daemon", "api-token", "--sub", "u", "--state-dir", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 2 and "sightscreen demo" in out.stderr and out.stdout == ""
