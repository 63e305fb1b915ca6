"""The API side of iOS 18 broadcast channels: an activity registered with ``channelId`` instead of
``updateToken`` (stored for counts and the lifecycle, never pushed per device), and ``GET /matches/{id}``
answering the match's ``broadcastChannels``."""

from __future__ import annotations

import httpx

from tests.api.conftest import Api, seed_matches

A = "user-aaaa-1111"
UPD = "ef" * 32
CHANNEL = "dHN1LMUT8eIXOOaqdvUt5HwhDrIJCxT7AAAAAAAAAAA="


async def match_with_channel(api: Api, match_id: str = "1001") -> None:
    """A fixture whose owner created its broadcast channel (the engine's part, seeded here: no product path
    of the API makes one)."""
    await seed_matches(api.repos, match_id)
    assert await api.repos.fixtures.swap_broadcast_channels(match_id, None, {"neutral": CHANNEL})


async def test_activity_on_a_channel_is_stored_with_its_channel_and_no_token(
    api: Api, client: httpx.AsyncClient
) -> None:
    h = api.headers(A)
    await match_with_channel(api)
    resp = await client.post(
        "/user/activity/1001/channel", json={"deviceId": "iphone-1", "channelId": CHANNEL}, headers=h
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


async def test_a_token_activity_and_a_channel_activity_each_have_their_own_operation(
    api: Api, client: httpx.AsyncClient
) -> None:
    h = api.headers(A)
    await match_with_channel(api)
    both = await client.post(
        "/user/activity/1001",
        headers=h,
        json={"deviceId": "iphone-1", "updateToken": UPD, "channelId": CHANNEL},
    )
    channel_on_token_path = await client.post(
        "/user/activity/1001", json={"deviceId": "iphone-1", "channelId": CHANNEL}, headers=h
    )
    neither = await client.post("/user/activity/1001", json={"deviceId": "iphone-1"}, headers=h)
    token_on_channel_path = await client.post(
        "/user/activity/1001/channel", json={"deviceId": "iphone-1", "updateToken": UPD}, headers=h
    )
    bad = await client.post(
        "/user/activity/1001/channel", json={"deviceId": "iphone-1", "channelId": "not base64!"}, headers=h
    )
    rotate = await client.patch(
        "/user/activity/1001", json={"deviceId": "iphone-1", "channelId": CHANNEL}, headers=h
    )
    answers = (both, channel_on_token_path, neither, token_on_channel_path, bad, rotate)
    assert [r.status_code for r in answers] == [422] * 6
    assert "/channel" in channel_on_token_path.json()["error"]["fields"][0]["reason"]
    assert await api.repos.live_activities.get_la_session("1001", A, "iphone-1") is None


async def test_a_channel_the_match_does_not_have_is_refused(api: Api, client: httpx.AsyncClient) -> None:
    h = api.headers(A)
    await match_with_channel(api)
    other = CHANNEL[::-1].lstrip("=") + "A="
    resp = await client.post(
        "/user/activity/1001/channel", json={"deviceId": "iphone-1", "channelId": other}, headers=h
    )
    assert resp.status_code == 422
    assert resp.json()["error"]["fields"] == [
        {"field": "body.channelId", "reason": "not a broadcast channel of this match"}
    ]
    await seed_matches(api.repos, "1002")  # a match without channels takes none
    resp = await client.post(
        "/user/activity/1002/channel", json={"deviceId": "iphone-1", "channelId": CHANNEL}, headers=h
    )
    assert resp.status_code == 422
    assert await api.repos.live_activities.get_user_la_sessions(A) == []


async def test_a_channel_session_cannot_be_given_an_update_token(api: Api, client: httpx.AsyncClient) -> None:
    h = api.headers(A)
    await match_with_channel(api)
    await client.post(
        "/user/activity/1001/channel", json={"deviceId": "iphone-1", "channelId": CHANNEL}, headers=h
    )
    resp = await client.patch(
        "/user/activity/1001", json={"deviceId": "iphone-1", "updateToken": UPD}, headers=h
    )
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "channel_session"
    session = await api.repos.live_activities.get_la_session("1001", A, "iphone-1")
    assert session["channelId"] == CHANNEL and "updateToken" not in session


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
