"""The API served by hypercorn on trio over real HTTP: as the daemon's child (role api), its graceful stop,
and the limits enforced on the wire."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from daemon.api.errors import ApiConfigError
from daemon.api.server import ApiServer
from daemon.api.settings import ApiSettings, AuthSettings
from daemon.config import Config
from daemon.demo.issuer import LocalIssuer
from daemon.store.local import MotoServer
from tests.api.conftest import seed_matches


def _auth(issuer: LocalIssuer) -> AuthSettings:
    return AuthSettings(issuer=issuer.issuer, jwks_url=issuer.jwks_url, client_ids=[issuer.client_id])


async def test_served_over_http_with_a_graceful_stop(repos: Any, issuer: LocalIssuer) -> None:
    server = ApiServer(repos, ApiSettings(listen="127.0.0.1:0", shutdown_grace_s=5.0), _auth(issuer))
    release = trio.Event()
    started = trio.Event()

    async def slow() -> dict[str, str]:  # a request still in flight when the stop comes
        started.set()
        await release.wait()
        return {"finished": "yes"}

    inner: Any = server.app
    while not hasattr(inner, "add_api_route"):  # through the ASGI middlewares to the FastAPI app
        inner = inner.app
    inner.add_api_route("/test-slow", slow)
    token = issuer.mint("served-user")
    await seed_matches(repos, "1001")
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        assert server.url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.get("/healthz")).status_code == 200
            assert (await http.get("/readyz")).json()["ready"] is True
            resp = await http.post(
                "/user/activity/1001",
                json={"deviceId": "d1", "updateToken": "ab" * 32},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert resp.status_code == 201
            big = await http.post(
                "/user/device",
                content=b"{" + b" " * 20000 + b"}",
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )
            assert big.status_code == 413

            answers: list[httpx.Response] = []

            async def in_flight() -> None:
                async with httpx.AsyncClient(base_url=server.url) as own:
                    answers.append(await own.get("/test-slow", headers={"Authorization": f"Bearer {token}"}))

            nursery.start_soon(in_flight)
            await started.wait()
            server.stop()
            await trio.sleep(0.3)
            with pytest.raises(httpx.ConnectError):  # no longer accepting
                async with httpx.AsyncClient(base_url=server.url) as fresh:
                    await fresh.get("/healthz")
            assert not server.stopped.is_set()  # waiting for the request in flight
            release.set()
            with trio.fail_after(5):
                await server.stopped.wait()
    assert answers and answers[0].status_code == 200 and answers[0].json() == {"finished": "yes"}
    assert await repos.live_activities.get_la_session("1001", "served-user", "d1") is not None


async def test_the_api_refuses_to_start_without_an_issuer_or_clients(repos: Any) -> None:
    with pytest.raises(ApiConfigError, match="auth.user_pool_id"):
        ApiServer(repos, ApiSettings(listen="127.0.0.1:0"), AuthSettings(client_ids=["x"]))
    with pytest.raises(ApiConfigError, match="auth.client_ids"):
        ApiServer(repos, ApiSettings(listen="127.0.0.1:0"), AuthSettings(user_pool_id="eu-west-1_abc"))


def test_cognito_issuer_and_jwks_url_come_from_region_and_pool() -> None:
    auth = AuthSettings(region="eu-west-1", user_pool_id="eu-west-1_AbC123", client_ids=["app"])
    assert auth.effective_issuer() == "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_AbC123"
    assert (
        auth.effective_jwks_url()
        == "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_AbC123/.well-known/jwks.json"
    )
    over = AuthSettings(issuer="http://127.0.0.1:9/", client_ids=["app"])
    assert over.effective_jwks_url() == "http://127.0.0.1:9/.well-known/jwks.json"


@pytest.mark.parametrize(
    "section,values",
    [
        ("api", {"rate_per_s": float("inf")}),
        ("api", {"display_cache_s": float("nan")}),
        ("api", {"max_body_bytes": 10}),
        ("api", {"listen": "8080"}),
        ("auth", {"leeway_s": -1}),
        ("auth", {"client_ids": [""]}),
        ("auth", {"jwks_url": "ftp://x"}),
        ("instance", {"roles": ["web"]}),
        ("instance", {"roles": []}),
    ],
)
def test_bad_api_settings_are_refused_by_the_config(section: str, values: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Config.model_validate({section: values})


def test_the_api_role_needs_a_listen_address_and_an_issuer() -> None:
    with pytest.raises(ValueError, match="api.listen"):
        Config.model_validate({"instance": {"roles": ["api"]}})
    with pytest.raises(ValueError, match="auth.client_ids"):
        Config.model_validate(
            {"instance": {"roles": ["api"]}, "api": {"listen": "127.0.0.1:0"}, "auth": {"user_pool_id": "p"}}
        )
    assert Config.model_validate({}).instance.roles == ["engine"]


async def test_an_api_only_daemon_serves_the_api_and_takes_no_match(
    moto_server: MotoServer, table_prefix: str, repos: Any, issuer: LocalIssuer
) -> None:
    from daemon.runtime.assembly import Daemon

    config = Config.model_validate(
        {
            "instance": {"id": "api-only-1", "roles": ["api"]},
            "dynamodb": {"endpoint_url": moto_server.url, "table_prefix": table_prefix},
            "sportmonks": {"base_url": "http://127.0.0.1:9/never-called", "api_token": "x"},
            "api": {"listen": "127.0.0.1:0"},
            "auth": {"issuer": issuer.issuer, "jwks_url": issuer.jwks_url, "client_ids": [issuer.client_id]},
            "admin": {"socket_path": ""},
        }
    )
    daemon = Daemon(config)
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        assert daemon.orchestrator is None
        assert daemon.supervisor is not None and set(daemon.supervisor.children) == {"api"}
        async with httpx.AsyncClient(base_url=daemon.api.url) as http:
            resp = await http.get(
                "/user/activities", headers={"Authorization": f"Bearer {issuer.mint('u1')}"}
            )
            assert resp.status_code == 200
        ready = await daemon.readiness()
        assert ready["ready"] is True and set(ready["checks"]) == {"dynamodb", "api_keys"}
        daemon.shutdown()
        with trio.fail_after(15):
            await daemon.finished.wait()
    assert await repos.active_matches.get_all_active_matches() == []


def test_the_engine_never_imports_the_api() -> None:
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys, daemon.runtime.assembly, actors.orchestrator, actors.match, actors.jobs.prematch; "
        "print(sorted(m for m in sys.modules if m.startswith('daemon.api') and m != 'daemon.api.settings' "
        "and m != 'daemon.api'))"
    )
    env_path = str(Path(__file__).resolve().parents[2])
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**__import__("os").environ, "PYTHONPATH": env_path},
    )
    assert out.stdout.strip() == "[]"
