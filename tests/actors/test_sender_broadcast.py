"""The sender's broadcasts and channel management against the project's APNs server: one provider token and
one connection logic for pushes, broadcasts and management; each answer goes through the rule table."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from actors.sender import ApnsSender
from daemon.apns import broadcast
from daemon.apns.certs import SigningKeyPair
from daemon.apns.rules import Action
from daemon.apns.server import ApnsTestServer
from daemon.apns.types import ApnsConfigurationError, Push
from tests.actors.test_sender import sender_settings
from tests.apns.conftest import BUNDLE_ID

StartServer = Callable[..., Awaitable[ApnsTestServer]]


def update(i: int = 0) -> bytes:
    return json.dumps(
        {"aps": {"timestamp": 1_700_000_000 + i, "event": "update", "content-state": {"score": f"{i}/1"}}}
    ).encode()


def bcast(channel: str, i: int = 0, **kw: Any) -> Push:
    fields: dict[str, Any] = dict(
        token="",
        push_type="liveactivity",
        topic=BUNDLE_ID,
        payload=update(i),
        priority=5,
        kind="update",
        expiration=0,
        channel_id=channel,
    )
    fields.update(kw)
    return Push(**fields)


async def start(
    nursery: trio.Nursery, server: ApnsTestServer, key: SigningKeyPair, **overrides: Any
) -> ApnsSender:
    if not server.management_port:
        await nursery.start(server.serve_management)
    settings = sender_settings(
        server,
        key,
        management_host="127.0.0.1",
        management_port=server.management_port,
        ca_file=server.ca_file,
        **overrides,
    )
    sender = ApnsSender(settings, ssl_context=server.ssl_context_for_clients())
    await nursery.start(sender.run)
    return sender


async def test_create_broadcast_list_delete_through_the_sender(
    start_apns_server: StartServer, nursery: trio.Nursery, signing_key: SigningKeyPair
) -> None:
    server = await start_apns_server()
    sender = await start(nursery, server, signing_key)
    channel = await sender.channels.request(broadcast.create_channel(BUNDLE_ID))
    assert server.channels.policy(BUNDLE_ID, channel) == 0
    server.subscribe("phone-1", channel)
    server.subscribe("phone-2", channel)
    result = await sender.send_and_wait(bcast(channel, 1))
    assert (result.outcome, result.status) == ("accepted", 200)
    record = server.records[-1]
    assert record["headers"][":path"] == f"/4/broadcasts/apps/{BUNDLE_ID}"
    assert "apns-topic" not in record["headers"]
    assert record["headers"]["apns-expiration"] == "0" and record["headers"]["apns-channel-id"] == channel
    assert [len(server.seen_by(d)) for d in ("phone-1", "phone-2")] == [1, 1]
    info = await sender.channels.request(broadcast.read_channel(BUNDLE_ID, channel))
    assert info == broadcast.ChannelInfo(0, "LiveActivity")
    assert await sender.channels.request(broadcast.list_channels(BUNDLE_ID)) == [channel]
    assert await sender.channels.request(broadcast.delete_channel(BUNDLE_ID, channel)) is None
    assert await sender.channels.request(broadcast.list_channels(BUNDLE_ID)) == []
    # a broadcast to the deleted channel is final for the channel: the producer recreates it
    gone = await sender.send_and_wait(bcast(channel, 2))
    assert (gone.outcome, gone.reason) == ("rejected", "ChannelNotRegistered")
    assert [len(server.seen_by(d)) for d in ("phone-1", "phone-2")] == [1, 1]
    # the management connection is one connection, reused
    assert sender.stats()["channel_requests"]["create_ok"] == 1


async def test_token_pushes_and_broadcasts_share_the_push_connection(
    start_apns_server: StartServer, nursery: trio.Nursery, signing_key: SigningKeyPair
) -> None:
    server = await start_apns_server()
    sender = await start(nursery, server, signing_key)
    channel = await sender.channels.request(broadcast.create_channel(BUNDLE_ID))
    token_push = Push("ab" * 32, "liveactivity", BUNDLE_ID, update(3), 5, "update")
    results = [await sender.send_and_wait(token_push), await sender.send_and_wait(bcast(channel, 3))]
    assert [r.outcome for r in results] == ["accepted", "accepted"]
    pushes = [r for r in server.records]
    assert len({r["connection_id"] for r in pushes}) == 1
    assert {r["headers"]["authorization"] for r in pushes} == {pushes[0]["headers"]["authorization"]}


async def test_management_errors_come_back_with_their_outcome(
    start_apns_server: StartServer, nursery: trio.Nursery, signing_key: SigningKeyPair
) -> None:
    server = await start_apns_server(channel_limit=1)
    sender = await start(nursery, server, signing_key)
    await sender.channels.request(broadcast.create_channel(BUNDLE_ID))
    with pytest.raises(broadcast.ChannelError) as limit:
        await sender.channels.request(broadcast.create_channel(BUNDLE_ID))
    assert (limit.value.reason, limit.value.action) == ("CannotCreateChannelConfig", Action.CHANNEL_LIMIT)
    with pytest.raises(broadcast.ChannelError) as gone:
        await sender.channels.request(broadcast.delete_channel(BUNDLE_ID, "AAAAAAAAAAAAAAAAAAAAAA=="))
    assert gone.value.action is Action.RECREATE_CHANNEL


async def test_management_retries_a_dropped_connection(
    start_apns_server: StartServer, nursery: trio.Nursery, signing_key: SigningKeyPair
) -> None:
    server = await start_apns_server()
    sender = await start(nursery, server, signing_key)
    first = await sender.channels.request(broadcast.create_channel(BUNDLE_ID))
    server.drop_connections()  # every open connection, the management one included
    await trio.sleep(0.05)
    second = await sender.channels.request(broadcast.create_channel(BUNDLE_ID))
    assert first != second and server.channels.count() == 2


async def test_broadcasts_on_their_own_host_when_configured(
    start_apns_server: StartServer, nursery: trio.Nursery, signing_key: SigningKeyPair
) -> None:
    pushes = await start_apns_server()
    broadcasts = await start_apns_server(ca=pushes.ca)
    broadcasts.channels = pushes.channels  # one APNs, two hosts: the channels are the same
    sender = await start(nursery, pushes, signing_key, broadcast_host=f"127.0.0.1:{broadcasts.port}")
    channel = await sender.channels.request(broadcast.create_channel(BUNDLE_ID))
    with trio.fail_after(10):
        result = await sender.send_and_wait(bcast(channel))
    token = await sender.send_and_wait(Push("ab" * 32, "liveactivity", BUNDLE_ID, update(), 5, "update"))
    assert (result.outcome, token.outcome) == ("accepted", "accepted")
    assert [r["channel_id"] for r in broadcasts.records] == [channel]
    assert [r["token"] for r in pushes.records] == ["ab" * 32]
    # one sender, a pool per host: the broadcast host's connection is the broadcast pool's
    assert sender.stats()["broadcast_pool"]["connects"] == 1 and sender.stats()["connects"] == 1


async def test_a_configuration_error_on_management_stops_the_sender(
    start_apns_server: StartServer, signing_key: SigningKeyPair
) -> None:
    server = await start_apns_server()
    stopped: list[BaseException] = []
    refused: list[broadcast.ChannelError] = []
    try:
        async with trio.open_nursery() as inner:
            await inner.start(server.serve_management)
            settings = sender_settings(
                server, signing_key, management_host="127.0.0.1", management_port=server.management_port
            )
            sender = ApnsSender(settings, ssl_context=server.ssl_context_for_clients())
            await inner.start(sender.run)
            try:  # the key does not cover another team's bundle: TopicMismatch
                await sender.channels.request(broadcast.create_channel("com.other.app"))
            except broadcast.ChannelError as exc:
                refused.append(exc)
            with trio.fail_after(5):
                await trio.sleep_forever()
    except* ApnsConfigurationError as group:
        stopped.extend(group.exceptions)
    assert [e.action for e in refused] == [Action.CONFIGURATION]
    assert [getattr(e, "reason", None) for e in stopped] == ["TopicMismatch"]
