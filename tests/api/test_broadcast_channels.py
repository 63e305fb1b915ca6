"""The API side of iOS 18 broadcast channels: an activity registered with ``channelId`` instead of
``updateToken`` (stored for counts and the lifecycle, never pushed per device), and ``GET /matches/{id}``
answering the match's ``broadcastChannels``."""

from __future__ import annotations

import httpx

from tests.api.conftest import Api, seed_matches

A = "user-aaaa-1111"
UPD = "ef" * 32
CHANNEL = "dHN1LMUT8eIXOOaqdvUt5HwhDrIJCxT7AAAAAAAAAAA="


async def test_activity_on_a_channel_is_stored_with_its_channel_and_no_token(
    api: Api, client: httpx.AsyncClient
) -> None:
    h = api.headers(A)
    await seed_matches(api.repos, "1001")
    resp = await client.post(
        "/user/activity/1001", json={"deviceId": "iphone-1", "channelId": CHANNEL}, headers=h
    )
    assert resp.status_code == 201 and resp.json()["channelId"] == CHANNEL
    session = await api.repos.live_activities.get_la_session("1001", A, "iphone-1")
    assert session["status"] == "active" and session["channelId"] == CHANNEL and "updateToken" not in session
    # the same device moving to a token-based activity replaces the channel
    await client.post("/user/activity/1001", json={"deviceId": "iphone-1", "updateToken": UPD}, headers=h)
    session = await api.repos.live_activities.get_la_session("1001", A, "iphone-1")
    assert session["updateToken"] == UPD and "channelId" not in session
    ended = await client.delete("/user/activity/1001", params={"deviceId": "iphone-1"}, headers=h)
    assert ended.status_code == 200


async def test_activity_needs_exactly_one_of_token_and_channel(api: Api, client: httpx.AsyncClient) -> None:
    h = api.headers(A)
    both = await client.post(
        "/user/activity/1001",
        headers=h,
        json={"deviceId": "iphone-1", "updateToken": UPD, "channelId": CHANNEL},
    )
    neither = await client.post("/user/activity/1001", json={"deviceId": "iphone-1"}, headers=h)
    bad = await client.post(
        "/user/activity/1001", json={"deviceId": "iphone-1", "channelId": "not base64!"}, headers=h
    )
    rotate = await client.patch(
        "/user/activity/1001", json={"deviceId": "iphone-1", "channelId": CHANNEL}, headers=h
    )
    assert [r.status_code for r in (both, neither, bad, rotate)] == [422, 422, 422, 422]
    assert await api.repos.live_activities.get_la_session("1001", A, "iphone-1") is None


async def test_match_answers_its_broadcast_channels(api: Api, client: httpx.AsyncClient) -> None:
    await api.repos.fixtures.batch_write_fixtures(
        [{"matchId": "1001", "leagueCode": "T20", "startTime": "2026"}]
    )
    assert await api.repos.fixtures.swap_broadcast_channels(
        "1001", None, {"neutral": CHANNEL, "7": CHANNEL[::-1]}
    )
    body = (await client.get("/matches/1001", headers=api.headers(A))).json()
    assert body["broadcastChannels"] == {"neutral": CHANNEL, "7": CHANNEL[::-1]}
    assert not await api.repos.fixtures.swap_broadcast_channels(
        "1001", None, {"neutral": "x"}
    )  # not absent now


async def test_match_does_not_answer_the_owners_channel_creation_claim(
    api: Api, client: httpx.AsyncClient
) -> None:
    await api.repos.fixtures.batch_write_fixtures(
        [{"matchId": "1001", "leagueCode": "T20", "startTime": "2026"}]
    )
    assert await api.repos.fixtures.claim_broadcast_channels("1001", None, {"id": "ab", "epoch": 3})
    one = (await client.get("/matches/1001", headers=api.headers(A))).json()
    listed = (await client.get("/matches?ids=1001", headers=api.headers(A))).json()["matches"]
    assert one["matchId"] == "1001" and "broadcastChannelsClaim" not in one
    assert [m["matchId"] for m in listed] == ["1001"] and "broadcastChannelsClaim" not in listed[0]
