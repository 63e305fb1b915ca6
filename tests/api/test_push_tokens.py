"""One owner per push token in every field that names one (``deviceToken``, ``apnsToken``,
``pushToStartToken``), compared without regard to case and stored in lower case; a takeover ends the earlier
owner's Live Activity sessions on that phone. The engine's readers (the device a follow names, the janitor's
clean-up of a dead token) find the records by the stored string."""

from __future__ import annotations

from typing import Any

import httpx

from daemon.store.devices import token_claim_user
from tests.api.conftest import Api, seed_matches

A = "user-aaaa-1111"
B = "user-bbbb-2222"
PHONE_A, PHONE_B = "ab" * 32, "cd" * 32
P2S_A = "ef" * 32
UPD = "12" * 32


def device(token: str, **fields: str) -> dict[str, Any]:
    return {"deviceToken": token, "osVersion": "18.2", "appVersion": "3.1", **fields}


async def register(client: httpx.AsyncClient, api: Api, user: str, body: dict[str, Any]) -> httpx.Response:
    return await client.post("/user/device", json=body, headers=api.headers(user))


async def test_a_device_token_in_another_case_is_the_same_phone(api: Api, client: httpx.AsyncClient) -> None:
    assert (await register(client, api, A, device(PHONE_A.upper()))).json()["deviceToken"] == PHONE_A
    taken = await register(client, api, B, device(PHONE_A))
    assert taken.status_code == 200 and taken.json()["deviceToken"] == PHONE_A
    assert (await client.get("/user/device", headers=api.headers(A))).status_code == 404
    assert await api.repos.devices.token_owner(PHONE_A) == B


async def test_an_alert_token_naming_another_users_phone_takes_the_phone(
    api: Api, client: httpx.AsyncClient
) -> None:
    """B points her alerts at A's phone: the phone answers to one account, the latest to register it."""
    await register(client, api, A, device(PHONE_A))
    resp = await register(client, api, B, device(PHONE_B, apnsToken=PHONE_A.upper()))
    assert resp.status_code == 200 and resp.json()["apnsToken"] == PHONE_A
    assert (await client.get("/user/device", headers=api.headers(A))).status_code == 404
    assert await api.repos.devices.token_owner(PHONE_A) == B


async def test_a_push_to_start_token_has_one_owner_too(api: Api, client: httpx.AsyncClient) -> None:
    await register(client, api, A, device(PHONE_A, pushToStartToken=P2S_A))
    await register(client, api, B, device(PHONE_B))
    put = await client.put(
        "/user/device/push-to-start", json={"pushToStartToken": P2S_A.upper()}, headers=api.headers(B)
    )
    assert put.status_code == 200 and put.json()["pushToStartToken"] == P2S_A
    assert (await client.get("/user/device", headers=api.headers(A))).status_code == 404
    assert (await client.get("/user/device", headers=api.headers(B))).json()["pushToStartToken"] == P2S_A


async def test_a_token_its_owner_replaced_is_not_claimed_from_their_new_record(
    api: Api, client: httpx.AsyncClient
) -> None:
    """A's alert token moved on; a later registration of the old one by B must not delete A's record."""
    await register(client, api, A, device(PHONE_A, apnsToken="aa" * 32))
    await register(client, api, A, device(PHONE_A, apnsToken="bb" * 32))
    await register(client, api, B, device(PHONE_B, apnsToken="aa" * 32))
    assert (await client.get("/user/device", headers=api.headers(A))).json()["apnsToken"] == "bb" * 32
    assert await api.repos.devices.token_owner("aa" * 32) == B


async def test_a_takeover_ends_the_earlier_owners_live_activities(
    api: Api, client: httpx.AsyncClient
) -> None:
    await seed_matches(api.repos, "1001")
    await register(client, api, A, device(PHONE_A))
    resp = await client.post(
        "/user/activity/1001", json={"deviceId": "iphone-a", "updateToken": UPD}, headers=api.headers(A)
    )
    assert resp.status_code == 201
    await register(client, api, B, device(PHONE_A))
    session = await api.repos.live_activities.get_la_session("1001", A, "iphone-a")
    assert session["status"] == "ended" and session["endReason"] == "device_transferred"
    assert await api.repos.live_activities.get_all_la_sessions_for_match("1001", status="active") == []


async def test_a_claim_stored_in_another_case_before_is_moved(api: Api, client: httpx.AsyncClient) -> None:
    """A record and claim written in upper case (before tokens were stored in one case; seeded directly as
    that version wrote them: no product path writes upper case now) are found and taken over."""
    upper = PHONE_A.upper()
    table = api.repos.devices.dynamo.table("cricket-devices")
    await api.repos.devices.dynamo.call(
        "cricket-devices",
        "transact_write_items",
        TransactItems=[
            {"Put": {"TableName": table, "Item": {"userId": {"S": A}, "deviceToken": {"S": upper}}}},
            {
                "Put": {
                    "TableName": table,
                    "Item": {
                        "userId": {"S": token_claim_user(upper)},
                        "deviceToken": {"S": upper},
                        "ownerId": {"S": A},
                    },
                }
            },
        ],
    )
    assert (await register(client, api, B, device(PHONE_A))).status_code == 200
    assert (await client.get("/user/device", headers=api.headers(A))).status_code == 404
    assert await api.repos.devices.token_owner(upper) is None  # the old spelling's claim is gone
    assert await api.repos.devices.token_owner(PHONE_A) == B


async def test_the_engine_finds_a_device_by_its_stored_token(api: Api, client: httpx.AsyncClient) -> None:
    """The janitor deletes a dead device by the token the engine pushed, the stored one: the same string."""
    await register(client, api, A, device(PHONE_A.upper(), pushToStartToken=P2S_A.upper()))
    stored = await api.repos.devices.get_device_for_user(A)
    assert (stored["deviceToken"], stored["pushToStartToken"]) == (PHONE_A, P2S_A)
    assert await api.repos.devices.clear_push_to_start_token(A, stored["deviceToken"], expected_token=P2S_A)
    assert await api.repos.devices.delete_device(A, stored["deviceToken"]) is not None
    assert await api.repos.devices.token_owner(PHONE_A) is None
