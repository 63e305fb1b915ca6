"""What a hostile client or a careless one found, each answered as the contract says: no 5xx, the one error
shape, nothing written by a refused request; and the HTTP details an app developer relies on."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
import trio

from daemon.api.gate import address_key, client_address
from daemon.api.middleware import AccessLog
from daemon.demo.issuer import new_key
from daemon.metrics import API_AUTH_FAILURES, API_REFUSED
from tests.api.conftest import Api, MakeApi, seed_matches

A = "user-aaaa-1111"
B = "user-bbbb-2222"
PHONE = "ab" * 32
UPD = "ef" * 32


def count(metric: Any, label: str) -> float:
    return float(metric.labels(label)._value.get())


# --- bodies and parameters that used to answer 500 or the wrong thing ---------------------------------------


async def test_a_deeply_nested_body_is_400_with_a_token_and_401_without(
    api: Api, client: httpx.AsyncClient
) -> None:
    nested = b"[" * 1000 + b"]" * 1000
    json_type = {"Content-Type": "application/json"}
    for path in ("/user/device", "/user/activity/1001", "/no/such/path"):
        resp = await client.post(path, content=nested, headers={**api.headers(A), **json_type})
        assert resp.status_code == 400, path
        assert resp.json()["error"]["code"] == "malformed_json"
        assert resp.json()["error"]["fields"] == [{"field": "body", "reason": "nested too deeply"}]
        anonymous = await client.post(path, content=nested, headers=json_type)
        assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "invalid_token"


@pytest.mark.parametrize(
    "params,field",
    [
        ({"from": "0001-01-01T00:00:00+01:00", "to": "2027-01-01T00:00:00Z"}, "query.from"),
        ({"from": "2026-01-01T00:00:00Z", "to": "9999-12-31T23:59:59-01:00"}, "query.to"),
    ],
)
async def test_times_outside_the_calendar_once_in_utc_are_422(
    api: Api, client: httpx.AsyncClient, params: dict[str, str], field: str
) -> None:
    resp = await client.get("/matches", params={"league": "BBL", **params}, headers=api.headers(A))
    assert resp.status_code == 422
    assert resp.json()["error"]["fields"][0]["field"] == field


async def test_a_three_digit_year_sorts_before_four_digit_ones(api: Api, client: httpx.AsyncClient) -> None:
    await api.repos.fixtures.batch_write_fixtures(
        [{"matchId": "1001", "leagueCode": "BBL", "startTime": "2026-12-20T08:00:00Z"}]
    )
    resp = await client.get(
        "/matches", params={"league": "BBL", "from": "0999-01-01", "to": "2027-01-01"}, headers=api.headers(A)
    )
    assert resp.status_code == 200
    assert [m["matchId"] for m in resp.json()["matches"]] == ["1001"]


async def test_an_activity_for_a_match_that_does_not_exist_is_404_and_stores_nothing(
    api: Api, client: httpx.AsyncClient
) -> None:
    body = {"deviceId": "iphone", "updateToken": UPD}
    resp = await client.post("/user/activity/424242", json=body, headers=api.headers(A))
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"
    assert await api.repos.live_activities.get_user_la_sessions(A) == []
    # the fixture sync adds the match: not remembered as missing, so the next registration is taken
    await seed_matches(api.repos, "424242")
    assert (await client.post("/user/activity/424242", json=body, headers=api.headers(A))).status_code == 201


async def test_patch_with_null_is_refused_and_changes_nothing(api: Api, client: httpx.AsyncClient) -> None:
    await api.repos.teams.batch_write_teams([{"teamId": "10", "name": "Sixers", "code": "SIX"}])
    resp = await client.patch("/teams/10", json={"name": None}, headers=api.headers(A, admin=True))
    assert resp.status_code == 422
    assert "name: null is not a value here" in resp.json()["error"]["fields"][0]["reason"]
    assert (await api.repos.teams.get_team("10"))["name"] == "Sixers"
    ok = await client.patch("/teams/10", json={"code": "SXR"}, headers=api.headers(A, admin=True))
    assert ok.status_code == 200 and (await api.repos.teams.get_team("10"))["name"] == "Sixers"


# --- HTTP details ------------------------------------------------------------------------------------------


async def test_405_names_every_method_of_the_path(api: Api, client: httpx.AsyncClient) -> None:
    resp = await client.put("/user/device", headers=api.headers(A))
    assert resp.status_code == 405
    assert resp.headers["allow"] == "DELETE, GET, HEAD, POST"
    assert resp.json()["error"]["code"] == "method_not_allowed"
    resp = await client.post("/matches/1001/display", headers=api.headers(A))
    assert resp.status_code == 405 and resp.headers["allow"] == "GET, HEAD"


async def test_head_is_answered_as_get_without_the_body(api: Api, client: httpx.AsyncClient) -> None:
    await api.repos.devices.register_device(A, PHONE, os_version="18.2")
    await api.repos.display_cache.set_cached_display_state("1001", "neutral", {"score": "1/0"}, ttl_s=60)
    for path in ("/user/device", "/matches/1001/display", "/user/follow/1001", "/healthz"):
        get = await client.get(path, headers=api.headers(A))
        head = await client.head(path, headers=api.headers(A))
        assert head.status_code == get.status_code == 200, path
        assert head.content == b"" and head.headers["content-length"] == str(len(get.content)), path
        assert head.headers.get("etag") == get.headers.get("etag"), path
    assert (await client.head("/user/nothing-here", headers=api.headers(A))).status_code == 404


async def test_a_trailing_slash_is_another_path_not_a_redirect(api: Api, client: httpx.AsyncClient) -> None:
    resp = await client.get("/user/device/", headers={**api.headers(A), "Host": "evil.example"})
    assert resp.status_code == 404 and "location" not in resp.headers
    assert resp.json()["error"]["code"] == "not_found"


async def test_user_answers_are_not_stored_by_caches(api: Api, client: httpx.AsyncClient) -> None:
    await api.repos.devices.register_device(A, PHONE)
    for path in ("/user/device", "/user/activities", "/user/follow/1001", "/user/nothing-here"):
        resp = await client.get(path, headers=api.headers(A))
        assert resp.headers["cache-control"] == "no-store", path
    display = await client.get("/matches/1001/display", headers=api.headers(A))
    assert display.status_code == 404 and "no-store" not in display.headers.get("cache-control", "")


async def test_two_authorization_headers_are_refused_on_every_route(
    api: Api, client: httpx.AsyncClient
) -> None:
    await api.repos.display_cache.set_cached_display_state("1001", "neutral", {"score": "1/0"}, ttl_s=60)
    good = f"Bearer {api.token(A)}"
    before = count(API_AUTH_FAILURES, "duplicate_header")
    for path in ("/matches/1001/display", "/user/activities"):  # the display fast path and a route
        for pair in ((good, "Bearer x.y.z"), ("Bearer x.y.z", good), (good, good)):
            resp = await client.get(path, headers=[("Authorization", pair[0]), ("Authorization", pair[1])])
            assert resp.status_code == 401, (path, pair)
        assert (await client.get(path, headers={"Authorization": good})).status_code == 200
    assert count(API_AUTH_FAILURES, "duplicate_header") == before + 6


@pytest.mark.parametrize(
    "exp,reason",
    [("9999999999", "bad_claim"), (1e30, "exp_too_far"), (None, "exp_too_far")],
)
async def test_exp_must_be_a_number_within_a_day(
    api: Api, client: httpx.AsyncClient, exp: Any, reason: str
) -> None:
    value = int(time.time()) + 30 * 86400 if exp is None else exp  # None: a month ahead
    token = api.issuer.mint(A, claims={"exp": value})
    before = count(API_AUTH_FAILURES, reason)
    resp = await client.get("/user/activities", headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 401
    assert count(API_AUTH_FAILURES, reason) == before + 1
    # a token within the bound is good
    fine = api.issuer.mint(A, claims={"exp": int(time.time()) + 3600})
    assert (
        await client.get("/user/activities", headers={"Authorization": f"Bearer {fine}"})
    ).status_code == 200


# --- the limit on refused requests per client address ------------------------------------------------------


JSON_TYPE = {"Content-Type": "application/json"}


async def test_an_address_out_of_refusals_is_refused_only_what_fails_its_signature(make_api: MakeApi) -> None:
    """The limit throttles what fails, not who: while a neighbour's bad tokens have used up the address's
    refusals, every token our issuer signed is answered as anywhere else (a user never verified on this
    instance included), and only unsigned ones get 429, their bodies never read."""
    api: Api = await make_api(api={"refused_per_s": 0.01, "refused_burst": 3})
    async with api.client() as client:
        limited_before = count(API_REFUSED, "address_limited")
        bad = {"Authorization": "Bearer not.a.token"}
        codes = [(await client.get("/user/activities", headers=bad)).status_code for _ in range(3)]
        assert codes == [401, 401, 401]
        resp = await client.post("/user/device", content=b"{not json", headers={**bad, **JSON_TYPE})
        assert resp.status_code == 429 and resp.json()["error"]["code"] == "too_many_refused"
        assert int(resp.headers["retry-after"]) >= 1
        assert count(API_REFUSED, "address_limited") == limited_before + 1
        # a fresh sign-in (a token this instance never verified): admitted
        assert (await client.get("/user/activities", headers=api.headers(B))).status_code == 200
        # the hourly refresh: an expired token of our issuer is a 401 (refresh it), not a 429
        expired = {"Authorization": f"Bearer {api.issuer.mint(B, now=time.time() - 7200)}"}
        resp = await client.get("/user/activities", headers=expired)
        assert resp.status_code == 401 and resp.json()["error"]["code"] == "invalid_token"
        # a token signed by someone else is unsigned for us: 429 while the address is out of refusals
        forged = {"Authorization": f"Bearer {api.issuer.mint(B, key=new_key(api.issuer.keys[0].kid))}"}
        assert (await client.get("/user/activities", headers=forged)).status_code == 429
        # another address is not touched
        other = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=api.app, client=("198.51.100.7", 5000)), base_url="http://a"
        )
        async with other:
            assert (await other.get("/user/activities", headers=bad)).status_code == 401
    assert await api.repos.devices.get_devices_for_user(B) == []


async def test_malformed_bodies_count_against_the_address_too(make_api: MakeApi) -> None:
    api: Api = await make_api(api={"refused_per_s": 0.01, "refused_burst": 2})
    async with api.client() as client:
        before = count(API_REFUSED, "malformed_json")
        for _ in range(2):
            resp = await client.post("/user/device", content=b"{", headers={**api.headers(A), **JSON_TYPE})
            assert resp.status_code == 400
        assert count(API_REFUSED, "malformed_json") == before + 2
        bad = {"Authorization": "Bearer not.a.token"}
        assert (await client.get("/user/activities", headers=bad)).status_code == 429


async def test_ipv6_clients_are_one_client_per_64(make_api: MakeApi) -> None:
    api: Api = await make_api(api={"refused_per_s": 0.01, "refused_burst": 2})
    bad = {"Authorization": "Bearer not.a.token"}

    def at(address: str) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=api.app, client=(address, 5000))
        return httpx.AsyncClient(transport=transport, base_url="http://a")

    for host in ("2001:db8:1:2::1", "2001:db8:1:2:ffff::9"):  # one /64: the refusals add up
        async with at(host) as client:
            assert (await client.get("/user/activities", headers=bad)).status_code == 401
    async with at("2001:db8:1:2:abcd::7") as client:  # a third address in the same /64: limited
        assert (await client.get("/user/activities", headers=bad)).status_code == 429
    async with at("2001:db8:1:3::1") as client:  # the next /64 is another client
        assert (await client.get("/user/activities", headers=bad)).status_code == 401
    assert address_key("2001:db8:1:2:abcd::7") == "2001:db8:1:2::/64"
    assert address_key("::ffff:203.0.113.9") == "203.0.113.9" and address_key("203.0.113.9") == "203.0.113.9"


async def test_public_paths_are_inside_the_address_limits(make_api: MakeApi) -> None:
    api: Api = await make_api(
        api={"refused_per_s": 0.01, "refused_burst": 2, "rate_per_s": 0.01, "rate_burst": 3}
    )
    async with api.client() as client:
        # anonymous requests take from their address's bucket: the per-user rate, keyed by the address
        codes = [(await client.get("/healthz")).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        assert (await client.get("/openapi.json")).json()["error"]["code"] == "rate_limited"
    api = await make_api(api={"refused_per_s": 0.01, "refused_burst": 2})
    async with api.client() as client:
        bad = {"Authorization": "Bearer not.a.token"}
        for _ in range(2):
            await client.get("/user/activities", headers=bad)
        resp = await client.get("/readyz")  # an address out of refusals is refused the public paths too
        assert resp.status_code == 429 and resp.json()["error"]["code"] == "too_many_refused"


async def test_readiness_is_checked_at_most_once_a_second(
    api: Api, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    probes = 0
    real = api.repos.locks.get

    async def counted(key: str) -> Any:
        nonlocal probes
        probes += 1
        return await real(key)

    monkeypatch.setattr(api.repos.locks, "get", counted)
    for _ in range(10):
        assert (await client.get("/readyz")).status_code == 200
    assert probes == 1
    await trio.sleep(1.1)
    assert (await client.get("/readyz")).status_code == 200
    assert probes == 2


def test_the_client_address_is_the_peer_or_the_one_the_trusted_proxy_saw() -> None:
    scope: dict[str, Any] = {
        "client": ("10.0.0.5", 4000),
        "headers": [(b"x-forwarded-for", b"6.6.6.6, 203.0.113.9")],
    }
    assert client_address(scope, 0) == "10.0.0.5"  # no proxy trusted: a client's own header is ignored
    assert client_address(scope, 1) == "203.0.113.9"  # what the load balancer appended
    assert client_address(scope, 2) == "6.6.6.6"
    assert client_address({"client": ("10.0.0.5", 1), "headers": []}, 1) == "10.0.0.5"


async def test_an_exception_in_any_layer_is_the_json_500(api: Api) -> None:
    async def broken(scope: Any, receive: Any, send: Any) -> None:
        raise RecursionError("a bug")

    app = AccessLog(broken, api.state.in_flight, api.state.refusals, 0)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://a") as client:
        resp = await client.get("/anything")
    assert resp.status_code == 500 and resp.json()["error"]["code"] == "internal_error"


# --- devices: one owner per device token --------------------------------------------------------------------


async def test_registering_another_users_device_token_takes_the_phone_from_them(
    api: Api, client: httpx.AsyncClient
) -> None:
    """The phone signed into B now: A's record of it is gone, so A's follows no longer reach it."""
    body = {"deviceToken": PHONE, "osVersion": "18.2", "appVersion": "3.1"}
    assert (await client.post("/user/device", json=body, headers=api.headers(A))).status_code == 200
    taken = await client.post("/user/device", json=body, headers=api.headers(B))
    assert taken.status_code == 200 and taken.json()["userId"] == B
    assert A not in json.dumps(taken.json())  # nothing of the earlier owner is shown
    assert (await client.get("/user/device", headers=api.headers(A))).status_code == 404
    assert (await client.get("/user/device", headers=api.headers(B))).json()["deviceToken"] == PHONE


# --- the OpenAPI document as the contract -------------------------------------------------------------------


async def test_the_openapi_document_states_security_statuses_and_one_of_rules(
    client: httpx.AsyncClient,
) -> None:
    doc = (await client.get("/openapi.json")).json()
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    paths = doc["paths"]
    for path, item in paths.items():
        for method, op in item.items():
            public = path in ("/healthz", "/readyz")
            assert ("security" in op) != public, (method, path)
            for status, answer in op["responses"].items():
                if status not in ("304", "204"):
                    assert answer.get("content", {}).get("application/json", {}).get("schema"), (
                        method,
                        path,
                        status,
                    )
            if not public:
                assert {"400", "401", "429", "431", "503"} <= set(op["responses"]), (method, path)
    assert "201" in paths["/user/follow/{matchId}"]["post"]["responses"]
    assert "201" in paths["/user/activity/{matchId}"]["post"]["responses"]
    assert "304" in paths["/matches/{matchId}/display"]["get"]["responses"]
    assert "503" in paths["/readyz"]["get"]["responses"]
    assert (
        "405" in json.dumps(doc["components"]["responses"])
        or "MethodNotAllowed" in doc["components"]["responses"]
    )
    schemas = doc["components"]["schemas"]
    assert (
        schemas["ActivityIn"]["required"] == ["deviceId", "updateToken"]
        and "oneOf" not in schemas["ActivityIn"]
    )
    assert schemas["ChannelActivityIn"]["required"] == ["deviceId", "channelId"]
    assert schemas["TeamPatch"]["minProperties"] == 1
    get_follow = paths["/user/follow/{matchId}"]["get"]["responses"]["200"]["content"]["application/json"]
    assert get_follow["schema"] == {"$ref": "#/components/schemas/FollowStatus"}
    end = paths["/user/activity/{matchId}"]["delete"]["responses"]["200"]["content"]["application/json"]
    assert end["schema"] == {"$ref": "#/components/schemas/ActivityEnded"}
    assert "Every combination of `GET /matches`" in doc["info"]["description"]
    assert "neither `ids` nor `league`" in paths["/matches"]["get"]["description"]
    ids = {op["operationId"] for item in paths.values() for op in item.values()}
    assert {
        "registerDevice",
        "follow",
        "registerActivity",
        "registerChannelActivity",
        "listActivities",
    } <= ids
    assert all("__" not in i and "_" not in i for i in ids)  # named, not the framework's path-derived ids
    for path, item in paths.items():
        for method, op in item.items():
            if "requestBody" in op:
                assert "415" in op["responses"], (method, path)
                schema = op["requestBody"]["content"]["application/json"]["schema"]
                assert set(schema) == {"$ref"}, (method, path, schema)  # a typed body, no anyOf with null


async def test_a_registration_that_keeps_losing_its_token_is_409_not_500(
    api: Api, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from daemon.store.devices import DeviceRegistrationConflict

    async def always_moved(*args: Any, **kwargs: Any) -> Any:
        raise DeviceRegistrationConflict("the claim moved under every attempt")

    monkeypatch.setattr(api.repos.devices, "claim_device", always_moved)
    body = {"deviceToken": PHONE, "osVersion": "18.2", "appVersion": "3.1"}
    resp = await client.post("/user/device", json=body, headers=api.headers(A))
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "conflict"
    assert resp.headers["retry-after"] == "1"
