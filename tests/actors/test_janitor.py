"""The token janitor against moto's server: each kind of rejected token cleans exactly its own record, a
DynamoDB error is retried, and a cleanup that keeps failing is counted, not lost silently."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from actors.janitor import Janitor, TokenRef
from daemon.apns.types import Push, PushResult
from daemon.store import Dynamo, DynamoSettings, Repositories, create_tables
from daemon.store.live_activities import visitor_key
from daemon.store.local import MotoServer
from tests.store import faults


def rejected(token: str, context: Any, reason: str = "Unregistered") -> PushResult:
    push = Push(token=token, push_type="liveactivity", topic="app.test", payload=b"{}", context=context)
    return PushResult(push, "rejected", 410, reason, None, 1, 0.01)


@pytest.fixture
async def one_shot_repos(moto_server: MotoServer, table_prefix: str) -> AsyncIterator[Repositories]:
    """Repositories whose botocore client makes one attempt per call, so an injected throttle reaches the
    janitor as an error instead of being absorbed by botocore's own retries."""
    client = Dynamo(DynamoSettings(endpoint_url=moto_server.url, table_prefix=table_prefix, max_attempts=1))
    await create_tables(client)
    try:
        yield Repositories(client)
    finally:
        client.close()


async def test_a_rejected_update_token_suspends_only_that_session(repos: Any) -> None:
    await repos.live_activities.register_la_session("m1", "u1", "d1", "tok-1")
    await repos.live_activities.register_la_session("m1", "u2", "d2", "tok-2")
    janitor = Janitor(repos)
    await janitor.handle(
        rejected("tok-1", TokenRef("la", match_id="m1", visitor_key=visitor_key("u1", "d1")))
    )
    assert (await repos.live_activities.get_la_session("m1", "u1", "d1"))["status"] == "suspended"
    assert (await repos.live_activities.get_la_session("m1", "u2", "d2"))["status"] == "active"
    assert janitor.cleaned["la"] == 1 and janitor.cleaned["failed"] == 0


async def test_a_rejected_push_to_start_token_is_removed_and_the_device_kept(repos: Any) -> None:
    await repos.devices.register_device("u1", "dev-1", apns_token="alert-1", push_to_start_token="pts-1")
    janitor = Janitor(repos)
    await janitor.handle(rejected("pts-1", TokenRef("push_to_start", user_id="u1", device_token="dev-1")))
    device = await repos.devices.get_device_for_user("u1")
    assert device is not None
    assert "pushToStartToken" not in device
    assert device["apnsToken"] == "alert-1"
    assert janitor.cleaned["push_to_start"] == 1


async def test_a_rejected_alert_token_deletes_the_device_record(repos: Any) -> None:
    await repos.devices.register_device("u1", "dev-1", apns_token="alert-1")
    await repos.devices.register_device("u2", "dev-2", apns_token="alert-2")
    janitor = Janitor(repos)
    await janitor.handle(rejected("alert-1", TokenRef("device", user_id="u1", device_token="dev-1")))
    assert await repos.devices.get_device_for_user("u1") is None
    assert await repos.devices.get_device_for_user("u2") is not None
    assert janitor.cleaned["device"] == 1


async def test_a_result_without_a_token_reference_touches_nothing(repos: Any) -> None:
    await repos.devices.register_device("u1", "dev-1", apns_token="alert-1")
    janitor = Janitor(repos)
    await janitor.handle(rejected("alert-1", context=None))
    assert await repos.devices.get_device_for_user("u1") is not None
    assert janitor.cleaned == {"la": 0, "push_to_start": 0, "device": 0, "unknown": 1, "failed": 0}


async def test_an_incomplete_reference_is_counted_as_failed(
    repos: Any, autojump_clock: trio.abc.Clock
) -> None:
    janitor = Janitor(repos, attempts=2)
    await janitor.handle(rejected("tok", TokenRef("la", match_id="m1")))  # no visitor key
    assert janitor.cleaned["failed"] == 1 and janitor.cleaned["la"] == 0


async def test_a_dynamodb_error_is_retried_until_the_cleanup_lands(
    one_shot_repos: Repositories, autojump_clock: trio.abc.Clock
) -> None:
    repos = one_shot_repos
    await repos.live_activities.register_la_session("m1", "u1", "d1", "tok-1")
    hook = faults.throttle(repos.dynamo.client, "UpdateItem", times=2)
    janitor = Janitor(repos, attempts=5)
    await janitor.handle(
        rejected("tok-1", TokenRef("la", match_id="m1", visitor_key=visitor_key("u1", "d1")))
    )
    assert hook.injected == 2 and hook.sends == 3
    assert (await repos.live_activities.get_la_session("m1", "u1", "d1"))["status"] == "suspended"
    assert janitor.cleaned["la"] == 1 and janitor.cleaned["failed"] == 0


async def test_a_cleanup_that_keeps_failing_is_given_up_after_its_attempts(
    one_shot_repos: Repositories, autojump_clock: trio.abc.Clock
) -> None:
    repos = one_shot_repos
    await repos.devices.register_device("u1", "dev-1", apns_token="alert-1")
    hook = faults.throttle(repos.dynamo.client, "DeleteItem", times=100)
    janitor = Janitor(repos, attempts=3)
    await janitor.handle(rejected("alert-1", TokenRef("device", user_id="u1", device_token="dev-1")))
    assert hook.sends == 3
    assert janitor.cleaned["failed"] == 1 and janitor.cleaned["device"] == 0
    assert await repos.devices.get_device_for_user("u1") is not None


async def test_run_cleans_what_arrives_on_its_channel(repos: Any) -> None:
    await repos.live_activities.register_la_session("m1", "u1", "d1", "tok-1")
    janitor = Janitor(repos)
    async with trio.open_nursery() as nursery:
        await nursery.start(janitor.run)
        ref = TokenRef("la", match_id="m1", visitor_key=visitor_key("u1", "d1"))
        await janitor.send_channel.send(rejected("tok-1", ref))
        await janitor.send_channel.aclose()  # run() returns once the channel is drained
    assert (await repos.live_activities.get_la_session("m1", "u1", "d1"))["status"] == "suspended"
    assert janitor.cleaned["la"] == 1
