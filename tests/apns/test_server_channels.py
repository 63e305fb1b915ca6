"""The APNs server's channel management host and broadcasts, against Apple's documented rules (apns.md §2.6,
§8), driven by the independent h2 test client; and the fan-out of a broadcast to the simulated devices
subscribed to its channel."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from daemon.apns.server import ApnsTestServer
from daemon.apns.server.channels import ChannelStore, decide_broadcast, decide_management
from tests.apns.conftest import BUNDLE_ID, H2TestClient, la_payload, open_h2_client

StartServer = Callable[..., Awaitable[ApnsTestServer]]
CHANNELS = f"/1/apps/{BUNDLE_ID}/channels"
ALL = f"/1/apps/{BUNDLE_ID}/all-channels"
BROADCAST = f"/4/broadcasts/apps/{BUNDLE_ID}"
CREATE = json.dumps({"message-storage-policy": 0, "push-type": "LiveActivity"}).encode()


@asynccontextmanager
async def management(server: ApnsTestServer, nursery: trio.Nursery) -> AsyncIterator[H2TestClient]:
    if not server.management_port:
        await nursery.start(server.serve_management)
    async with open_h2_client(server.management_port, server.ssl_context_for_clients()) as client:
        yield client


def auth(token: str, **extra: str) -> dict[str, str]:
    return {"authorization": f"bearer {token}", **extra}


def bheaders(token: str, channel: str, **extra: str) -> dict[str, str]:
    headers = {
        "authorization": f"bearer {token}",
        "apns-channel-id": channel,
        "apns-push-type": "liveactivity",
        "apns-priority": "5",
        "apns-expiration": "0",
    }
    headers.update({k.replace("_", "-"): v for k, v in extra.items()})
    return {k: v for k, v in headers.items() if v != ""}


async def create(client: H2TestClient, token: str, body: bytes = CREATE) -> Any:
    return await client.request(CHANNELS, auth(token), body)


async def test_channel_lifecycle_create_read_list_delete(
    start_apns_server: StartServer, nursery: trio.Nursery, provider_token: str
) -> None:
    server = await start_apns_server()
    async with management(server, nursery) as client:
        created = await create(client, provider_token)
        assert created.status == 201 and created.body == b""
        channel = created.headers["apns-channel-id"]
        assert "apns-request-id" in created.headers
        read = await client.request(
            CHANNELS, auth(provider_token, **{"apns-channel-id": channel}), method="GET"
        )
        assert (read.status, read.json()) == (200, {"message-storage-policy": 0, "push-type": "LiveActivity"})
        listed = await client.request(ALL, auth(provider_token), method="GET")
        assert (listed.status, listed.json()) == (200, {"channels": [channel]})
        deleted = await client.request(
            CHANNELS, auth(provider_token, **{"apns-channel-id": channel}), method="DELETE"
        )
        assert deleted.status == 204
        again = await client.request(
            CHANNELS, auth(provider_token, **{"apns-channel-id": channel}), method="GET"
        )
        assert (again.status, again.reason) == (400, "ChannelNotRegistered")
    assert server.stats()["channels"] == {"open": 0, "created": 1, "deleted": 1}


async def test_request_id_is_echoed(
    start_apns_server: StartServer, nursery: trio.Nursery, provider_token: str
) -> None:
    server = await start_apns_server()
    request_id = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
    async with management(server, nursery) as client:
        created = await client.request(
            CHANNELS, auth(provider_token, **{"apns-request-id": request_id}), CREATE
        )
        assert created.headers["apns-request-id"] == request_id


@pytest.mark.parametrize(
    ("method", "path", "headers", "body", "status", "reason"),
    [
        ("POST", "/1/apps/com.sightscreen.app/nope", {}, CREATE, 404, "BadPath"),
        ("PUT", CHANNELS, {}, CREATE, 405, "MethodNotAllowed"),
        ("POST", ALL, {}, b"", 405, "MethodNotAllowed"),
        ("POST", CHANNELS, {}, b"", 400, "PayloadEmpty"),
        ("POST", CHANNELS, {}, b"{not json", 400, "BadRequestPayload"),
        (
            "POST",
            CHANNELS,
            {},
            b'{"message-storage-policy":0,"push-type":"LiveActivity","x":1}',
            400,
            "BadRequestParams",
        ),
        ("POST", CHANNELS, {}, b'{"message-storage-policy":0}', 400, "MissingPushType"),
        ("POST", CHANNELS, {}, b'{"message-storage-policy":0,"push-type":"Alert"}', 400, "InvalidPushType"),
        (
            "POST",
            CHANNELS,
            {},
            b'{"message-storage-policy":2,"push-type":"LiveActivity"}',
            400,
            "MissingChannelQueueSize",
        ),
        (
            "POST",
            "/1/apps/com.sightscreen.app.push-type.liveactivity/channels",
            {},
            CREATE,
            400,
            "TopicDisallowed",
        ),
        ("POST", "/1/apps/com.other.app/channels", {}, CREATE, 403, "TopicMismatch"),
        ("POST", CHANNELS, {"apns-request-id": "nope"}, CREATE, 400, "BadMessageId"),
        ("GET", CHANNELS, {}, b"", 400, "MissingChannelId"),
        ("GET", CHANNELS, {"apns-channel-id": "!!not-base64"}, b"", 400, "BadChannelId"),
        (
            "DELETE",
            CHANNELS,
            {"apns-channel-id": "AAAAAAAAAAAAAAAAAAAAAA=="},
            b"",
            400,
            "ChannelNotRegistered",
        ),
    ],
)
async def test_management_validation(
    start_apns_server: StartServer,
    nursery: trio.Nursery,
    provider_token: str,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes,
    status: int,
    reason: str,
) -> None:
    server = await start_apns_server()
    async with management(server, nursery) as client:
        answer = await client.request(path, auth(provider_token, **headers), body, method=method)
    assert (answer.status, answer.reason) == (status, reason)
    assert server.channels.count() == 0


async def test_management_checks_the_provider_token(
    start_apns_server: StartServer, nursery: trio.Nursery
) -> None:
    server = await start_apns_server()
    async with management(server, nursery) as client:
        missing = await client.request(CHANNELS, {}, CREATE)
        bad = await client.request(CHANNELS, {"authorization": "bearer not.a.jwt"}, CREATE)
    assert (missing.status, missing.reason) == (403, "MissingProviderToken")
    assert (bad.status, bad.reason) == (403, "InvalidProviderToken")


async def test_channel_limit_answers_cannot_create_channel_config(
    start_apns_server: StartServer, nursery: trio.Nursery, provider_token: str
) -> None:
    server = await start_apns_server(channel_limit=2)
    async with management(server, nursery) as client:
        assert (await create(client, provider_token)).status == 201
        second = await create(client, provider_token)
        assert second.status == 201
        third = await create(client, provider_token)
        assert (third.status, third.reason) == (400, "CannotCreateChannelConfig")
        await client.request(
            CHANNELS,
            auth(provider_token, **{"apns-channel-id": second.headers["apns-channel-id"]}),
            method="DELETE",
        )
        assert (await create(client, provider_token)).status == 201


async def test_hosts_serve_only_their_own_paths(
    start_apns_server: StartServer, nursery: trio.Nursery, open_client: Any, provider_token: str
) -> None:
    server = await start_apns_server()
    async with management(server, nursery) as client:
        on_management = await client.request(
            BROADCAST, bheaders(provider_token, "AAAAAAAAAAAAAAAAAAAAAA=="), la_payload()
        )
    async with open_client(server) as client:
        on_push = await client.request(CHANNELS, auth(provider_token), CREATE)
    assert (on_management.status, on_management.reason) == (404, "BadPath")
    assert (on_push.status, on_push.reason) == (404, "BadPath")


async def test_broadcast_reaches_every_subscribed_device_once(
    start_apns_server: StartServer, nursery: trio.Nursery, open_client: Any, provider_token: str
) -> None:
    server = await start_apns_server()
    async with management(server, nursery) as client:
        channel = (await create(client, provider_token)).headers["apns-channel-id"]
        other = (await create(client, provider_token)).headers["apns-channel-id"]
    for device in ("d1", "d2", "d3"):
        server.subscribe(device, channel)
    server.subscribe("d4", other)
    async with open_client(server) as client:
        answer = await client.request(BROADCAST, bheaders(provider_token, channel), la_payload(runs=77))
    assert answer.status == 200
    assert "apns-request-id" in answer.headers and "apns-unique-id" in answer.headers
    assert [len(server.seen_by(d)) for d in ("d1", "d2", "d3", "d4")] == [1, 1, 1, 0]
    assert server.seen_by("d1")[0]["content-state"]["score"] == "77/3"
    record = server.records[-1]
    assert (record["channel_id"], record["devices"], record["token"]) == (channel, 3, "")


@pytest.mark.parametrize(
    ("overrides", "body", "status", "reason"),
    [
        ({"apns_channel_id": ""}, None, 400, "MissingChannelId"),
        ({"apns_channel_id": "@@@"}, None, 400, "BadChannelId"),
        ({"apns_channel_id": "AAAAAAAAAAAAAAAAAAAAAA=="}, None, 400, "ChannelNotRegistered"),
        ({"apns_push_type": ""}, None, 400, "MissingPushType"),
        ({"apns_push_type": "alert"}, None, 400, "InvalidPushType"),
        ({"apns_priority": "7"}, None, 400, "BadPriority"),
        ({"apns_priority": ""}, None, 400, "BadPriority"),
        ({"apns_expiration": ""}, None, 400, "BadExpirationDate"),
        ({"apns_expiration": "1900000000"}, None, 400, "BadExpirationDate"),
        ({"apns_topic": BUNDLE_ID}, None, 400, "TopicDisallowed"),
        ({}, b"", 400, "PayloadEmpty"),
        ({}, b"{nope", 400, "BadRequestPayload"),
        ({}, la_payload("start"), 400, "BadRequestPayload"),
        ({}, la_payload(pad=5200), 413, "PayloadTooLarge"),
        ({}, la_payload(pad=4800), 200, None),  # over the 4 KB of token pushes, within the 5 KB of broadcasts
        ({"apns_push_type": "Liveactivity"}, None, 200, None),  # Apple's spelling in one place
    ],
)
async def test_broadcast_validation(
    start_apns_server: StartServer,
    nursery: trio.Nursery,
    open_client: Any,
    provider_token: str,
    overrides: dict[str, str],
    body: bytes | None,
    status: int,
    reason: str | None,
) -> None:
    server = await start_apns_server()
    async with management(server, nursery) as client:
        channel = (await create(client, provider_token)).headers["apns-channel-id"]
    server.subscribe("d1", channel)
    async with open_client(server) as client:
        answer = await client.request(
            BROADCAST, bheaders(provider_token, channel, **overrides), la_payload() if body is None else body
        )
    assert (answer.status, answer.reason) == (status, reason)
    assert len(server.seen_by("d1")) == (1 if status == 200 else 0)


async def test_policy_one_channel_accepts_an_expiration(
    start_apns_server: StartServer, nursery: trio.Nursery, open_client: Any, provider_token: str
) -> None:
    server = await start_apns_server()
    async with management(server, nursery) as client:
        created = await create(
            client, provider_token, b'{"message-storage-policy":1,"push-type":"LiveActivity"}'
        )
    async with open_client(server) as client:
        answer = await client.request(
            BROADCAST,
            bheaders(provider_token, created.headers["apns-channel-id"], apns_expiration="1900000000"),
            la_payload(),
        )
    assert answer.status == 200


def test_broadcast_path_and_method_rules_without_io() -> None:
    store = ChannelStore()
    topics = frozenset({BUNDLE_ID})
    assert decide_broadcast("GET", BROADCAST, {}, b"", store, topics).verdict.reason == "MethodNotAllowed"
    assert decide_broadcast("POST", "/4/broadcasts/apps/", {}, b"", store, topics).verdict.reason == "BadPath"
    assert decide_broadcast(
        "POST", "/4/broadcasts/apps/com.other", {}, b"", store, topics
    ).verdict.reason == ("TopicMismatch")
    assert decide_management("GET", ALL, {}, b"", store, topics).body == b'{"channels":[]}'
