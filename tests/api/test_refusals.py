"""What the API refuses: every kind of bad token (401), bad bodies (400/422, nothing written), bodies over
the limit (413), too many requests (429), unknown paths (404): all in the one JSON error shape."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

import httpx
import jwt

from daemon.demo.issuer import new_key
from tests.api.conftest import Api, seed_matches

U = "user-cccc-3333"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _forged(api: Api, alg: str) -> str:
    claims = jwt.decode(api.token(U), options={"verify_signature": False})
    head = _b64(json.dumps({"alg": alg, "typ": "JWT", "kid": api.issuer.keys[0].kid}).encode())
    body = _b64(json.dumps(claims).encode())
    if alg == "none":
        return f"{head}.{body}."
    sig = hmac.new(api.issuer.keys[0].public_pem(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(sig)}"


BAD_TOKENS: dict[str, Any] = {
    "missing": lambda api: None,
    "not bearer": lambda api: f"Basic {_b64(b'u:p')}",
    "empty bearer": lambda api: "Bearer ",
    "malformed": lambda api: "Bearer not.a.jwt",
    "garbage": lambda api: "Bearer abc",
    "expired": lambda api: f"Bearer {api.issuer.mint(U, now=time.time() - 7200)}",
    "wrong signature": lambda api: f"Bearer {api.issuer.mint(U, key=new_key(api.issuer.keys[0].kid))}",
    "wrong issuer": lambda api: (
        f"Bearer {api.issuer.mint(U, issuer='https://cognito-idp.eu-west-1.amazonaws.com/other')}"
    ),
    "wrong client": lambda api: f"Bearer {api.issuer.mint(U, client_id='someone-elses-app')}",
    "wrong use (id token)": lambda api: f"Bearer {api.issuer.mint(U, token_use='id')}",
    "alg none": lambda api: f"Bearer {_forged(api, 'none')}",
    "HS256 with the public key": lambda api: f"Bearer {_forged(api, 'HS256')}",
    "unknown kid": lambda api: f"Bearer {api.issuer.mint(U, kid='not-a-published-kid')}",
}


async def test_every_bad_token_is_401_with_the_bearer_challenge_and_no_detail(
    api: Api, client: httpx.AsyncClient
) -> None:
    for case, make in BAD_TOKENS.items():
        value = make(api)
        headers = {} if value is None else {"Authorization": value}
        resp = await client.post(
            "/user/activity/1001", json={"deviceId": "d1", "updateToken": "ab" * 32}, headers=headers
        )
        assert resp.status_code == 401, case
        assert resp.headers["www-authenticate"] == 'Bearer error="invalid_token"', case
        assert resp.json()["error"] == {
            "status": 401,
            "code": "invalid_token",
            "message": "the access token is missing or not valid",
            "fields": [],
        }, case
    assert await api.repos.live_activities.get_user_la_sessions(U) == []


async def test_a_good_token_passes_the_same_request(api: Api, client: httpx.AsyncClient) -> None:
    await seed_matches(api.repos, "1001")
    resp = await client.post(
        "/user/activity/1001", json={"deviceId": "d1", "updateToken": "ab" * 32}, headers=api.headers(U)
    )
    assert resp.status_code == 201


async def test_an_unauthenticated_bad_body_is_401_not_422(api: Api, client: httpx.AsyncClient) -> None:
    resp = await client.post("/user/device", json={"nonsense": True})
    assert resp.status_code == 401


BAD_BODIES: list[tuple[str, str, Any, int, str]] = [
    ("POST", "/user/device", b"{not json", 400, "body"),
    ("POST", "/user/device", b"[1, 2", 400, "body"),
    ("POST", "/user/device", b"\xff\xfe", 400, "body"),
    ("POST", "/user/device", [1, 2], 422, "body"),
    (
        "POST",
        "/user/device",
        {"deviceToken": "ab" * 32, "osVersion": "18", "appVersion": 2},
        422,
        "body.appVersion",
    ),
    (
        "POST",
        "/user/device",
        {"deviceToken": "zz" * 32, "osVersion": "18", "appVersion": "1"},
        422,
        "body.deviceToken",
    ),
    (
        "POST",
        "/user/device",
        {"deviceToken": "ab" * 32, "osVersion": "18", "appVersion": "1", "userId": "x"},
        422,
        "body.userId",
    ),
    (
        "POST",
        "/user/device",
        {"deviceToken": "ab" * 32, "osVersion": "18", "appVersion": "1", "platform": "android"},
        422,
        "body.platform",
    ),
    ("PUT", "/user/device/push-to-start", {"pushToStartToken": 12}, 422, "body.pushToStartToken"),
    ("POST", "/user/follow/1001", {"teamId": 10}, 422, "body.teamId"),
    ("POST", "/user/activity/1001", {"deviceId": "d1"}, 422, "body.updateToken"),
    ("POST", "/user/activity/1001", {"deviceId": "a#b", "updateToken": "ab" * 32}, 422, "body.deviceId"),
    ("POST", "/user/activity/1001", {"deviceId": "d1", "updateToken": "abc"}, 422, "body.updateToken"),
    (
        "POST",
        "/user/activity/1001",
        {"deviceId": "d1", "updateToken": "ab" * 32, "status": "ended"},
        422,
        "body.status",
    ),
    ("POST", "/user/activity/bad%23id", {"deviceId": "d1", "updateToken": "ab" * 32}, 422, "path.matchId"),
    ("POST", "/user/activity/" + "9" * 65, {"deviceId": "d1", "updateToken": "ab" * 32}, 422, "path.matchId"),
]


async def test_bad_input_names_the_field_and_writes_nothing(api: Api, client: httpx.AsyncClient) -> None:
    await api.repos.fixtures.batch_write_fixtures(
        [{"matchId": "1001", "localteamId": "10", "visitorteamId": "11"}]
    )
    for method, path, body, status, field in BAD_BODIES:
        case = f"{method} {path} {body!r}"
        kw: dict[str, Any] = {"content": body} if isinstance(body, bytes) else {"json": body}
        resp = await client.request(
            method, path, headers={**api.headers(U), "Content-Type": "application/json"}, **kw
        )
        assert resp.status_code == status, case
        error = resp.json()["error"]
        assert error["status"] == status, case
        assert field in [f["field"] for f in error["fields"]], case
    assert await api.repos.devices.get_devices_for_user(U) == []
    assert await api.repos.follows.check_if_user_follows_match("1001", U) is None
    assert await api.repos.live_activities.get_user_la_sessions(U) == []


async def test_a_body_over_the_limit_is_413_and_writes_nothing(api: Api, client: httpx.AsyncClient) -> None:
    body = json.dumps({"deviceId": "d1", "updateToken": "ab" * 32, "pad": "x" * 17000}).encode()
    json_type = {"Content-Type": "application/json"}
    resp = await client.post("/user/activity/1001", content=body, headers={**api.headers(U), **json_type})
    assert resp.status_code == 413
    assert resp.json()["error"]["code"] == "body_too_large"

    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(20):
            yield b" " * 1024  # no Content-Length: the limit counts what arrives

    resp = await client.post("/user/activity/1001", content=chunks(), headers={**api.headers(U), **json_type})
    assert resp.status_code == 413
    assert await api.repos.live_activities.get_user_la_sessions(U) == []


async def test_a_body_that_is_not_json_by_its_content_type_is_415_and_writes_nothing(
    api: Api, client: httpx.AsyncClient
) -> None:
    await seed_matches(api.repos, "1001")
    body = json.dumps({"deviceId": "d1", "updateToken": "ab" * 32}).encode()
    for content_type in (None, "text/plain", "application/x-www-form-urlencoded", "application/jsonx"):
        headers = {**api.headers(U), **({"Content-Type": content_type} if content_type else {})}
        resp = await client.post("/user/activity/1001", content=body, headers=headers)
        assert resp.status_code == 415, content_type
        assert resp.json()["error"]["code"] == "unsupported_media_type"
    assert await api.repos.live_activities.get_user_la_sessions(U) == []
    for content_type in ("application/json", "application/json; charset=utf-8", "Application/JSON"):
        resp = await client.post(
            "/user/activity/1001", content=body, headers={**api.headers(U), "Content-Type": content_type}
        )
        assert resp.status_code == 201, content_type


async def test_the_rate_limit_answers_429_with_retry_after_per_user(make_api: Any) -> None:
    api: Api = await make_api(api={"rate_per_s": 0.5, "rate_burst": 3})
    async with api.client() as client:
        h, other = api.headers(U), api.headers("someone-else")
        codes = [(await client.get("/user/activities", headers=h)).status_code for _ in range(5)]
        assert codes == [200, 200, 200, 429, 429]
        refused = await client.get("/user/activities", headers=h)
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"]["code"] == "rate_limited"
        display = await client.get("/matches/1001/display", headers=h)  # the display's fast path counts too
        assert display.status_code == 429 and int(display.headers["retry-after"]) >= 1
        assert (await client.get("/user/activities", headers=other)).status_code == 200


async def test_unknown_paths_and_methods_answer_in_the_error_shape(
    api: Api, client: httpx.AsyncClient
) -> None:
    resp = await client.get("/no/such/path", headers=api.headers(U))
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"
    resp = await client.put("/user/activities", headers=api.headers(U))
    assert resp.status_code == 405 and resp.json()["error"]["code"] == "method_not_allowed"
