"""One user must not multiply a match's pushes: one session per update token, a bounded number of sessions
per user and match, no revival of an ended session by a retry, and the user's list a page at a time. The
engine's own read of a match's sessions sees only sessions (the bookkeeping items live elsewhere)."""

from __future__ import annotations

from typing import Any

import httpx
import trio

from tests.api.conftest import Api, MakeApi, seed_matches

A = "user-aaaa-1111"
B = "user-bbbb-2222"
UPD = "ef" * 32


def register(
    client: httpx.AsyncClient, api: Api, user: str, device: str, token: str, match: str = "1001"
) -> Any:
    return client.post(
        f"/user/activity/{match}", json={"deviceId": device, "updateToken": token}, headers=api.headers(user)
    )


async def active(api: Api, match: str = "1001") -> list[dict[str, Any]]:
    """The match's active sessions as the engine reads them (its audience query)."""
    return await api.repos.live_activities.get_all_la_sessions_for_match(match, status="active")


async def test_one_update_token_is_one_session_however_many_device_ids_name_it(
    make_api: MakeApi,
) -> None:
    """The attack: 28 registrations of one token under 28 device ids, all at once, made 28 pushes a tick."""
    api: Api = await make_api(api={"rate_burst": 100})
    await seed_matches(api.repos, "1001")
    async with api.client() as client:
        async with trio.open_nursery() as nursery:
            for i in range(28):
                nursery.start_soon(register, client, api, A, f"iphone-{i}", UPD)
        sessions = await active(api)
        assert [s["updateToken"] for s in sessions] == [UPD]
        # and one more, later, under yet another id: still one
        assert (await register(client, api, A, "iphone-99", UPD)).status_code == 201
        sessions = await active(api)
        assert [(s["deviceId"], s["updateToken"]) for s in sessions] == [("iphone-99", UPD)]


async def test_another_users_registration_of_a_token_ends_the_session_that_held_it(
    api: Api, client: httpx.AsyncClient
) -> None:
    await seed_matches(api.repos, "1001")
    assert (await register(client, api, A, "iphone-a", UPD)).status_code == 201
    assert (await register(client, api, B, "iphone-b", UPD.upper())).status_code == 201  # any case
    sessions = await active(api)
    assert [(s["userId"], s["updateToken"]) for s in sessions] == [(B, UPD)]
    old = await api.repos.live_activities.get_la_session("1001", A, "iphone-a")
    assert old["status"] == "ended" and old["endReason"] == "replaced"


async def test_a_user_holds_at_most_the_configured_sessions_in_a_match(make_api: MakeApi) -> None:
    api: Api = await make_api(api={"max_sessions_per_match": 3})
    await seed_matches(api.repos, "1001", "1002")
    async with api.client() as client:
        for i in range(5):
            assert (await register(client, api, A, f"device-{i}", f"{i:02x}" * 32)).status_code == 201
        assert sorted(s["deviceId"] for s in await active(api)) == ["device-2", "device-3", "device-4"]
        ended = await api.repos.live_activities.get_la_session("1001", A, "device-0")
        assert ended["status"] == "ended" and ended["endReason"] == "replaced"
        # a device re-registering (a rotated activity) is not a further device
        assert (await register(client, api, A, "device-2", "aa" * 32)).status_code == 201
        assert sorted(s["deviceId"] for s in await active(api)) == ["device-2", "device-3", "device-4"]
        # the limit is per match, and per user
        assert (await register(client, api, A, "device-0", "bb" * 32, match="1002")).status_code == 201
        assert (await register(client, api, B, "device-0", "cc" * 32)).status_code == 201
        assert len(await active(api, "1002")) == 1 and len(await active(api)) == 4


async def test_a_retried_registration_after_the_session_ended_does_not_revive_it(
    api: Api, client: httpx.AsyncClient
) -> None:
    await seed_matches(api.repos, "1001")
    assert (await register(client, api, A, "iphone-1", UPD)).status_code == 201
    ended = await client.delete(
        "/user/activity/1001", params={"deviceId": "iphone-1"}, headers=api.headers(A)
    )
    assert ended.status_code == 200
    retried = await register(client, api, A, "iphone-1", UPD)
    assert retried.status_code == 409 and retried.json()["error"]["code"] == "session_ended"
    session = await api.repos.live_activities.get_la_session("1001", A, "iphone-1")
    assert session["status"] == "ended" and session["endReason"] == "user"
    assert await active(api) == []
    # a new activity on the same device has a new token: registered
    assert (await register(client, api, A, "iphone-1", "12" * 32)).status_code == 201
    assert [s["updateToken"] for s in await active(api)] == ["12" * 32]


async def test_a_rotated_token_another_session_held_ends_that_session(
    api: Api, client: httpx.AsyncClient
) -> None:
    await seed_matches(api.repos, "1001")
    await register(client, api, A, "iphone-a", UPD)
    await register(client, api, B, "iphone-b", "34" * 32)
    resp = await client.patch(
        "/user/activity/1001", json={"deviceId": "iphone-b", "updateToken": UPD}, headers=api.headers(B)
    )
    assert resp.status_code == 200
    assert [(s["userId"], s["updateToken"]) for s in await active(api)] == [(B, UPD)]


async def test_the_users_activities_come_a_page_at_a_time(make_api: MakeApi) -> None:
    api: Api = await make_api(api={"max_sessions_per_match": 8, "rate_burst": 100})
    await seed_matches(api.repos, "1001", "1002", "1003")
    async with api.client() as client:
        for m in ("1001", "1002", "1003"):
            for d in range(2):
                assert (
                    await register(client, api, A, f"d{d}", f"{int(m) % 100:02x}{d:02x}" * 16, m)
                ).status_code == 201
        seen: list[tuple[str, str]] = []
        cursor = None
        while True:
            params = {"limit": "4", **({"cursor": cursor} if cursor else {})}
            resp = await client.get("/user/activities", params=params, headers=api.headers(A))
            assert resp.status_code == 200
            body = resp.json()
            assert len(body["activities"]) <= 4
            seen += [(a["matchId"], a["deviceId"]) for a in body["activities"]]
            cursor = body["next"]
            if cursor is None:
                break
        assert sorted(seen) == sorted((m, f"d{d}") for m in ("1001", "1002", "1003") for d in range(2))
        # a cursor names a place in the caller's own list (the user is the token's): any of its shape is
        # taken, whether or not such a session exists, and another user's list is not reached by one
        later = await client.get("/user/activities", params={"cursor": "1002~d9"}, headers=api.headers(A))
        assert later.status_code == 200
        theirs = await client.get("/user/activities", params={"cursor": "1001~d0"}, headers=api.headers(B))
        assert theirs.status_code == 200 and theirs.json()["activities"] == []
        bad = await client.get("/user/activities", params={"cursor": "AAAA"}, headers=api.headers(A))
        assert bad.status_code == 422


async def test_the_registrations_fast_path_answers_as_the_route_does(
    api: Api, client: httpx.AsyncClient
) -> None:
    """A well-formed registration is answered before FastAPI; every other shape falls through to the route,
    and both answer alike."""
    await seed_matches(api.repos, "1001")
    h = api.headers(A)
    fast = await client.post("/user/activity/1001", json={"deviceId": "d1", "updateToken": UPD}, headers=h)
    # a query string takes the request to the route: the same answer
    routed = await client.post(
        "/user/activity/1001", params={"x": "1"}, json={"deviceId": "d2", "updateToken": "56" * 32}, headers=h
    )
    assert fast.status_code == routed.status_code == 201
    assert fast.json() == {"matchId": "1001", "userId": A, "deviceId": "d1", "status": "active"}
    assert routed.json() == {"matchId": "1001", "userId": A, "deviceId": "d2", "status": "active"}
    assert fast.headers["cache-control"] == routed.headers["cache-control"] == "no-store"
    missing = await client.post("/user/activity/4040", json={"deviceId": "d1", "updateToken": UPD}, headers=h)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    bad = await client.post("/user/activity/1001", json={"deviceId": "d1", "updateToken": "xyz"}, headers=h)
    assert bad.status_code == 422 and bad.json()["error"]["fields"][0]["field"] == "body.updateToken"
    extra = await client.post(
        "/user/activity/1001", json={"deviceId": "d1", "updateToken": UPD, "userId": B}, headers=h
    )
    assert extra.status_code == 422
    assert sorted(s["deviceId"] for s in await active(api)) == ["d1", "d2"]
