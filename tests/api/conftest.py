"""Fixtures of the API tests: a local issuer on loopback, the API over moto's server.

``issuer``: one ``LocalIssuer`` for the session, its JWKS served over HTTP on loopback. ``make_api`` builds
the API's state and ASGI app over the test's tables (``repos``) with the issuer's keys fetched over HTTP;
``client`` is an httpx client on the app through httpx's ASGI transport (the server itself is exercised in
test_server.py over real HTTP).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest

from daemon.api.app import build_app
from daemon.api.auth import Authenticator, JwksKeys
from daemon.api.settings import ApiSettings, AuthSettings
from daemon.api.state import ApiState
from daemon.demo.issuer import LocalIssuer


@pytest.fixture(scope="session")
def issuer() -> Iterator[LocalIssuer]:
    with LocalIssuer().serve() as iss:
        yield iss


def auth_settings_for(issuer: LocalIssuer, **overrides: Any) -> AuthSettings:
    values: dict[str, Any] = {
        "issuer": issuer.issuer,
        "jwks_url": issuer.jwks_url,
        "client_ids": [issuer.client_id],
        "jwks_refetch_cooldown_s": 60.0,
    }
    values.update(overrides)
    return AuthSettings(**values)


class Api:
    """The API's state and app over a test's tables, and the issuer minting its tokens."""

    def __init__(self, repos: Any, issuer: LocalIssuer, state: ApiState) -> None:
        self.repos = repos
        self.issuer = issuer
        self.state = state
        self.app = build_app(state)

    def token(self, sub: str, *, admin: bool = False, **kw: Any) -> str:
        return self.issuer.mint(sub, groups=["admin"] if admin else [], **kw)

    def headers(self, sub: str, *, admin: bool = False) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(sub, admin=admin)}"}

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://api.test")


MakeApi = Callable[..., Any]


async def seed_matches(repos: Any, *match_ids: str) -> None:
    """Fixtures for ``match_ids`` (the fixture sync's job): a Live Activity registers only for a match that
    exists."""
    await repos.fixtures.batch_write_fixtures([{"matchId": m, "leagueCode": "TST"} for m in match_ids])


@pytest.fixture
async def make_api(repos: Any, issuer: LocalIssuer) -> AsyncIterator[MakeApi]:
    async def make(
        api: dict[str, Any] | None = None, auth: dict[str, Any] | None = None, iss: LocalIssuer | None = None
    ) -> Api:
        use = iss or issuer
        auth_settings = auth_settings_for(use, **(auth or {}))
        keys = JwksKeys(
            auth_settings.effective_jwks_url(),
            refresh_s=auth_settings.jwks_refresh_s,
            refetch_cooldown_s=auth_settings.jwks_refetch_cooldown_s,
        )
        await keys.fetch("start")
        state = ApiState(
            repos=repos,
            auth=Authenticator(keys, auth_settings),
            keys=keys,
            settings=ApiSettings(**(api or {})),
        )
        return Api(repos, use, state)

    yield make


@pytest.fixture
async def api(make_api: MakeApi) -> Api:
    built: Api = await make_api()
    return built


@pytest.fixture
async def client(api: Api) -> AsyncIterator[httpx.AsyncClient]:
    async with api.client() as c:
        yield c
