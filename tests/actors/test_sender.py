"""The sender actor against the project's APNs server (real HTTP/2 over TLS, scripted faults).

Every scripted fault has its expected outcome: no push to a valid token is lost across GOAWAY, dropped
connections or refused streams; a dead token is reported once and never retried; the stream limit and the
windows are never exceeded (the server records any violation as a protocol error); deadlines fire.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from actors.sender import ApnsSender
from daemon import metrics
from daemon.apns.certs import SigningKeyPair, generate_signing_key
from daemon.apns.server import ApnsTestServer
from daemon.apns.settings import ApnsSettings
from daemon.apns.types import ApnsConfigurationError, Fence, Push, PushResult
from tests.apns.conftest import BUNDLE_ID, TEAM_ID
from tests.doubles import Clock, sample

StartServer = Callable[..., Awaitable[ApnsTestServer]]


def payload(i: int = 0, pad: int = 0) -> bytes:
    return json.dumps(
        {
            "aps": {
                "timestamp": 1_700_000_000 + i,
                "event": "update",
                "content-state": {"score": f"{i}/3", "p": "x" * pad},
            }
        }
    ).encode()


def la_push(i: int, **kw: Any) -> Push:
    base: dict[str, Any] = {
        "token": f"{i:0160x}",
        "push_type": "liveactivity",
        "topic": BUNDLE_ID,
        "payload": payload(i),
        "priority": 5,
        "kind": "update",
        "context": i,
    }
    base.update(kw)
    return Push(**base)


def sender_settings(server: ApnsTestServer, key: SigningKeyPair, **overrides: Any) -> ApnsSettings:
    values: dict[str, Any] = {
        "url": server.url,
        "team_id": TEAM_ID,
        "key_id": key.key_id,
        "private_key": key.private_pem,
        "topic": BUNDLE_ID,
        "connections": 1,
        "inbox_size": 1000,
        "request_timeout_s": 5.0,
        "max_retries": 3,
        "retry_backoff_s": 0.01,
        "retry_backoff_max_s": 0.05,
        "reconnect_backoff_s": 0.01,
        "reconnect_backoff_max_s": 0.1,
        "connect_timeout_s": 5.0,
    }
    values.update(overrides)
    return ApnsSettings(**values)


class Harness:
    def __init__(self, sender: ApnsSender, janitor: trio.MemoryReceiveChannel[PushResult]) -> None:
        self.sender = sender
        self.janitor = janitor

    async def send_all(self, pushes: list[Push]) -> list[PushResult]:
        """Send every push with a reply channel; wait for exactly one result each."""
        reply_send, reply_recv = trio.open_memory_channel[PushResult](len(pushes) + 1)
        for push in pushes:
            await self.sender.send(Push(**{**_fields(push), "reply_to": reply_send}))
        results: list[PushResult] = []
        with trio.fail_after(20):
            for _ in pushes:
                results.append(await reply_recv.receive())
        await trio.sleep(0.01)
        with pytest.raises(trio.WouldBlock):
            reply_recv.receive_nowait()  # exactly one result per push, no duplicate
        return results

    def janitor_results(self) -> list[PushResult]:
        out = []
        while True:
            try:
                out.append(self.janitor.receive_nowait())
            except trio.WouldBlock:
                return out


def _fields(push: Push) -> dict[str, Any]:
    return {name: getattr(push, name) for name in Push.__dataclass_fields__}


@pytest.fixture
def start_sender(nursery: trio.Nursery, signing_key: SigningKeyPair) -> Callable[..., Awaitable[Harness]]:
    async def start(server: ApnsTestServer, **overrides: Any) -> Harness:
        janitor_send, janitor_recv = trio.open_memory_channel[PushResult](1000)
        key = overrides.pop("key", signing_key)
        clock = overrides.pop("clock", None)
        kwargs: dict[str, Any] = {"janitor": janitor_send, "ssl_context": server.ssl_context_for_clients()}
        if clock is not None:
            kwargs["clock"] = clock
        sender = ApnsSender(sender_settings(server, key, **overrides), **kwargs)
        await nursery.start(sender.run)
        return Harness(sender, janitor_recv)

    return start


def assert_clean(server: ApnsTestServer) -> None:
    """The server saw no protocol violation (stream limit, flow control, framing)."""
    assert server.stats()["protocol_errors"] == []


async def test_push_is_accepted_and_arrives_as_apns_expects(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    harness = await start_sender(server)
    before = sample("sightscreen_pushes_total", {"kind": "update", "outcome": "accepted"})
    apns_id = "123e4567-e89b-12d3-a456-426614174000"
    result = await harness.sender.send_and_wait(
        la_push(1, collapse_id="c1", expiration=1_900_000_000, apns_id=apns_id)
    )
    assert (result.outcome, result.status, result.attempts) == ("accepted", 200, 1)
    assert result.apns_id == apns_id and result.push.context == 1 and result.latency_s >= 0
    (record,) = server.records
    assert record["token"] == f"{1:0160x}" and record["status"] == 200
    assert sample("sightscreen_pushes_total", {"kind": "update", "outcome": "accepted"}) == before + 1
    assert harness.sender.connected


async def test_many_pushes_over_a_pool_each_get_exactly_one_result(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server(max_concurrent_streams=50)
    harness = await start_sender(server, connections=2)
    results = await harness.send_all([la_push(i) for i in range(600)])
    assert sorted(r.push.context for r in results) == list(range(600))
    assert {r.outcome for r in results} == {"accepted"}
    stats = harness.sender.stats()
    assert stats["pushes"]["accepted"] == 600 and stats["latency_ms"]["p99"] is not None
    assert server.stats()["max_open_streams"] <= 50
    assert_clean(server)


async def test_dead_token_is_rejected_reported_once_and_never_sent_again(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    dead = f"{7:0160x}"
    server.set_token_status(dead, 410, "Unregistered", timestamp_ms=1_700_000_000_000)
    harness = await start_sender(server)
    first = await harness.send_all([la_push(7), la_push(8)])
    by_ctx = {r.push.context: r for r in first}
    assert (by_ctx[7].outcome, by_ctx[7].status, by_ctx[7].reason) == ("rejected", 410, "Unregistered")
    assert by_ctx[8].outcome == "accepted"
    requests_before = server.records_total
    again = await harness.send_all([la_push(7), la_push(7)])
    assert [r.outcome for r in again] == ["rejected", "rejected"] and all(r.attempts == 0 for r in again)
    assert server.records_total == requests_before  # no request for a known-dead token
    reported = harness.janitor_results()
    assert [r.push.token for r in reported] == [dead]


async def test_bad_device_token_and_wrong_topic_are_final(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    server.set_token_status(f"{1:0160x}", 400, "BadDeviceToken")
    server.set_token_status(f"{2:0160x}", 400, "DeviceTokenNotForTopic")
    harness = await start_sender(server)
    results = await harness.send_all([la_push(1), la_push(2), la_push(3)])
    outcomes = {r.push.context: (r.outcome, r.reason, r.attempts) for r in results}
    assert outcomes[1] == ("rejected", "BadDeviceToken", 1)
    assert outcomes[2] == ("rejected", "DeviceTokenNotForTopic", 1)
    assert outcomes[3][0] == "accepted"
    assert sorted(r.push.context for r in harness.janitor_results()) == [1, 2]


async def test_too_many_requests_is_retried_with_backoff_then_accepted(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    server.set_token_status(f"{1:0160x}", 429, "TooManyRequests", count=2)
    harness = await start_sender(server)
    (result,) = await harness.send_all([la_push(1)])
    assert (result.outcome, result.attempts) == ("accepted", 3)


async def test_5xx_storm_is_retried_and_then_fails_once_the_budget_is_spent(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    harness = await start_sender(server, max_retries=2)
    server.storm(500, count=2)
    (survived,) = await harness.send_all([la_push(1)])
    assert (survived.outcome, survived.attempts) == ("accepted", 3)
    server.storm(503)  # unending
    (failed,) = await harness.send_all([la_push(2)])
    assert (failed.outcome, failed.status, failed.reason, failed.attempts) == (
        "failed",
        503,
        "ServiceUnavailable",
        3,
    )
    assert harness.janitor_results() == []  # a failure is not a dead token


@pytest.mark.parametrize("graceful", [True, False])
async def test_goaway_loses_no_push_and_the_sender_reconnects(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]], graceful: bool
) -> None:
    server = await start_apns_server()
    harness = await start_sender(server)
    await harness.send_all([la_push(0)])  # connection up, stream limit raised
    server.goaway("Shutdown", after=20, graceful=graceful)
    results = await harness.send_all([la_push(i) for i in range(1, 301)])
    assert {r.outcome for r in results} == {"accepted"}
    assert harness.sender.stats()["connects"] >= 2
    assert_clean(server)


async def test_dropped_connections_lose_no_push(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    harness = await start_sender(server, connections=2, max_retries=5)
    await harness.send_all([la_push(0)])
    server.drop_connections(after=50)
    results = await harness.send_all([la_push(i) for i in range(1, 401)])
    assert {r.outcome for r in results} == {"accepted"}
    assert harness.sender.stats()["connects"] >= 3


async def test_refused_streams_are_resent_without_using_the_retry_budget(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    harness = await start_sender(server, max_retries=0)
    await harness.send_all([la_push(0)])
    server.refuse_streams(10)
    results = await harness.send_all([la_push(i) for i in range(1, 41)])
    assert {r.outcome for r in results} == {"accepted"}
    assert harness.sender.stats()["requeues"] == 10


async def test_request_deadline_fires_and_the_push_is_retried(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    harness = await start_sender(server, request_timeout_s=0.3)
    await harness.send_all([la_push(0)])
    server.delay(30.0, count=1)  # the next request hangs far beyond the deadline
    (result,) = await harness.send_all([la_push(1)])
    assert (result.outcome, result.attempts) == ("accepted", 2)
    assert harness.sender.stats()["retries"] == 1


async def test_a_request_that_may_have_been_delivered_is_re_sent_with_its_resend_payload(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    harness = await start_sender(server, request_timeout_s=0.3)
    await harness.send_all([la_push(0)])
    loud = json.loads(payload(1))
    loud["aps"]["alert"] = {"title": "WICKET!", "body": "29/2", "sound": "default"}
    push = la_push(
        1, payload=json.dumps(loud).encode(), collapse_id="500:wicket:S1:914", resend_payload=payload(1)
    )
    server.delay(30.0, count=1)  # its first request hangs past the deadline: APNs may have delivered it
    (result,) = await harness.send_all([push])
    assert (result.outcome, result.attempts) == ("accepted", 2)
    assert result.push.payload == push.payload, "the result names the push as its producer made it"
    (accepted,) = [r for r in server.records if r["token"] == push.token and r["status"] == 200]
    assert "alert" not in accepted["payload"]["aps"], "the re-send does not show the alert again"
    assert accepted["payload"]["aps"]["timestamp"] == loud["aps"]["timestamp"]
    assert "apns-collapse-id" not in accepted["headers"]


async def test_deadline_on_every_attempt_ends_in_failed(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    harness = await start_sender(server, request_timeout_s=0.2, max_retries=1)
    await harness.send_all([la_push(0)])
    server.delay(30.0)
    (result,) = await harness.send_all([la_push(1)])
    assert (result.outcome, result.reason, result.attempts) == ("failed", "Timeout", 2)


async def test_small_flow_control_window_is_respected(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    server.set_window(100, connection_window=1000, update_delay_s=0.01)
    harness = await start_sender(server)
    pushes = [la_push(i, payload=payload(i, pad=700)) for i in range(20)]
    results = await harness.send_all(pushes)
    assert {r.outcome for r in results} == {"accepted"}
    assert_clean(server)


async def test_stream_limit_dropping_to_one_after_rejections_is_never_exceeded(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server(max_concurrent_streams=100)
    server.script(drop_streams_on_rejection=True)
    for i in range(0, 200, 10):
        server.set_token_status(f"{i:0160x}", 400, "BadDeviceToken")
    harness = await start_sender(server)
    results = await harness.send_all([la_push(i) for i in range(200)])
    rejected = sorted(r.push.context for r in results if r.outcome == "rejected")
    assert rejected == list(range(0, 200, 10))
    assert sum(r.outcome == "accepted" for r in results) == 180
    assert_clean(server)


async def test_priority_10_goes_ahead_of_queued_priority_5(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server(max_concurrent_streams=1)
    harness = await start_sender(server)
    await harness.send_all([la_push(0)])
    server.delay(0.05, count=1)  # hold the one stream while the queue fills
    low = [la_push(i, priority=5) for i in range(1, 11)]
    high = [la_push(100, priority=10, kind="alert", push_type="alert", topic=BUNDLE_ID)]
    await harness.send_all(low + high)
    order = [int(r["token"], 16) for r in server.records[1:]]
    assert order.index(100) <= 1  # only the push already on the wire may precede it


async def test_push_to_starts_queued_go_after_every_update_even_a_routine_one(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    # A match going live queues thousands of push-to-starts (priority 10 too). A match actor's ticks go one
    # after the other, so neither a wicket's update nor a routine one (which the next tick waits for) may
    # wait behind them.
    server = await start_apns_server(max_concurrent_streams=1)
    harness = await start_sender(server)
    await harness.send_all([la_push(0)])
    server.delay(0.05, count=1)  # hold the one stream while the queues fill
    starts = [la_push(i, priority=10, kind="start") for i in range(10, 16)]
    routine = [la_push(i, priority=5) for i in range(1, 6)]
    wicket = [la_push(100, priority=10, kind="update")]
    await harness.send_all(starts + routine + wicket)
    order = [int(r["token"], 16) for r in server.records[1:]]
    assert sorted(order) == [*range(1, 6), *range(10, 16), 100]
    rest = order[1:]  # the push already on the wire when the rest arrived may precede everything
    assert rest[0] == 100 or order[0] == 100, order
    updates = [t for t in order if t < 10 or t == 100]
    assert order.index(updates[-1]) < order.index(max(t for t in order if 10 <= t < 16)), order
    assert [t for t in rest if 10 <= t < 16] == rest[-len([t for t in rest if 10 <= t < 16]) :], order


async def test_priority_10_is_not_held_behind_a_full_inbox_of_priority_5(
    nursery: trio.Nursery, start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    # Another match's fan-out has filled the routine inbox and its queue, and its producer is blocked on
    # the rest; a wicket's alert from a second producer must still go next, not after that whole backlog.
    server = await start_apns_server(max_concurrent_streams=1)
    harness = await start_sender(server, inbox_size=2)
    await harness.send_all([la_push(0)])
    server.delay(0.02)
    reply_send, reply_recv = trio.open_memory_channel[PushResult](100)
    low = [la_push(i, priority=5, reply_to=reply_send) for i in range(1, 21)]
    nursery.start_soon(harness.sender.send_many, low)
    await trio.testing.wait_all_tasks_blocked()
    assert harness.sender.stats()["inbox"]["low"] == 2  # full: the producer is blocked on the rest
    high = la_push(100, priority=10, kind="alert", push_type="alert", topic=BUNDLE_ID, reply_to=reply_send)
    with trio.fail_after(5):
        await harness.sender.send(high)  # its own inbox has room: no wait behind the routine backlog
        results = [await reply_recv.receive() for _ in range(21)]
    assert {r.outcome for r in results} == {"accepted"}
    order = [int(r["token"], 16) for r in server.records[1:]]
    assert sorted(order) == [*range(1, 21), 100]
    assert order.index(100) <= 1  # only the push already on the wire may precede it


async def test_full_inbox_blocks_the_producer(
    start_sender: Callable[..., Awaitable[Harness]], start_apns_server: StartServer
) -> None:
    server = await start_apns_server()
    harness = await start_sender(server, inbox_size=3, url="https://127.0.0.1:9")  # nothing listens there
    sent = 0
    with trio.move_on_after(0.5) as scope:
        for i in range(50):
            await harness.sender.send(la_push(i))
            sent += 1
    assert scope.cancelled_caught
    assert sent <= 3 + 3 + 1  # inbox + internal queue (same bound) + the one in the intake's hands
    assert not harness.sender.connected


async def test_drain_fails_what_cannot_be_delivered_within_grace_and_stops(
    nursery: trio.Nursery, start_apns_server: StartServer, signing_key: SigningKeyPair
) -> None:
    server = await start_apns_server()
    settings = sender_settings(server, signing_key, url="https://127.0.0.1:9", reconnect_backoff_s=0.05)
    sender = ApnsSender(settings, ssl_context=server.ssl_context_for_clients())
    done = trio.Event()

    async def run(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await sender.run(task_status=task_status)
        done.set()

    await nursery.start(run)
    reply_send, reply_recv = trio.open_memory_channel[PushResult](10)
    for i in range(5):
        await sender.send(la_push(i, reply_to=reply_send))
    await sender.drain(0.2)
    with trio.fail_after(5):
        await done.wait()
    results = [reply_recv.receive_nowait() for _ in range(5)]
    assert {(r.outcome, r.reason) for r in results} == {("failed", "ShuttingDown")}
    with pytest.raises(trio.BrokenResourceError):
        await sender.send(la_push(9))


async def test_drain_finishes_in_flight_work_before_stopping(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    harness = await start_sender(server)
    reply_send, reply_recv = trio.open_memory_channel[PushResult](100)
    server.delay(0.05, count=20)
    for i in range(20):
        await harness.sender.send(la_push(i, reply_to=reply_send))
    await harness.sender.drain(10.0)
    results = [reply_recv.receive_nowait() for _ in range(20)]
    assert {r.outcome for r in results} == {"accepted"}


async def test_invalid_provider_token_stops_the_sender_with_a_clear_error(
    start_apns_server: StartServer, signing_key: SigningKeyPair
) -> None:
    server = await start_apns_server()
    stranger = generate_signing_key(signing_key.key_id)  # same kid, different key: signature fails
    sender = ApnsSender(sender_settings(server, stranger), ssl_context=server.ssl_context_for_clients())
    refused_before = metrics.REGISTRY.get_sample_value(
        "sightscreen_apns_errors_total", {"action": "configuration"}
    )
    assert refused_before is not None, "the series exists at 0 before any error, so the alert sees the first"
    reply_send, reply_recv = trio.open_memory_channel[PushResult](10)
    caught: list[BaseException] = []
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(sender.run)
            await sender.send(la_push(1, reply_to=reply_send))
            await sender.send(la_push(2, reply_to=reply_send))
    except* ApnsConfigurationError as group:
        caught.extend(group.exceptions)
    (error,) = caught
    assert "InvalidProviderToken" in str(error) and "key_id" in str(error)
    results = [reply_recv.receive_nowait() for _ in range(2)]
    assert {r.outcome for r in results} == {"failed"}
    assert {r.reason for r in results} == {"InvalidProviderToken"}
    refused = metrics.REGISTRY.get_sample_value("sightscreen_apns_errors_total", {"action": "configuration"})
    assert refused is not None and refused > refused_before


async def test_expired_provider_token_is_refreshed_and_the_push_retried_once(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    # Our clock runs 90 minutes slow until APNs has answered once: the first token is born expired.
    harness = await start_sender(
        server, clock=lambda: time.time() - (5400 if server.records_total == 0 else 0)
    )
    (result,) = await harness.send_all([la_push(1)])
    assert (result.outcome, result.attempts) == ("accepted", 2)
    assert [r["status"] for r in server.records] == [403, 200]
    assert harness.sender.stats()["provider_tokens_minted"] == 2


async def test_expired_provider_token_is_retried_only_once(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    harness = await start_sender(server, clock=lambda: time.time() - 5400)
    (result,) = await harness.send_all([la_push(1)])
    assert (result.outcome, result.reason, result.attempts) == ("failed", "ExpiredProviderToken", 2)


async def test_token_churn_429_replaces_the_connection_and_delivers(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    clock = Clock(running=time.time)  # real time, moved on below
    harness = await start_sender(server, clock=clock)
    await harness.send_all([la_push(0)])
    clock.advance(51 * 60)  # our token ages out: the connection switches (allowed by our 20-minute rule)
    # ...but the server saw the first token only moments ago in real time: 429 TooManyProviderTokenUpdates.
    (result,) = await harness.send_all([la_push(1)])
    assert result.outcome == "accepted"
    statuses = [r["status"] for r in server.records]
    assert 429 in statuses and harness.sender.stats()["connects"] >= 2


async def test_unreachable_apns_does_not_block_start_up(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    harness = await start_sender(server, url="https://127.0.0.1:9")
    assert not harness.sender.connected
    assert harness.sender.stats()["connections"] == 0


async def test_invalid_push_fails_locally_without_a_request(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    harness = await start_sender(server)
    results = await harness.send_all([la_push(1, payload=b"x" * 5000), la_push(2, token="zz")])
    assert sorted((r.outcome, r.reason, r.attempts) for r in results) == [
        ("failed", "BadDeviceToken", 0),
        ("failed", "PayloadTooLarge", 0),
    ]
    assert server.records_total == 0


async def test_idle_connection_is_kept_alive_with_pings(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    harness = await start_sender(server, ping_idle_s=0.05, ping_timeout_s=5.0)
    await harness.send_all([la_push(0)])
    await trio.sleep(0.5)  # ten idle periods
    stats = harness.sender.stats()
    assert stats["pings"] >= 1 and stats["connects"] == 1 and harness.sender.connected
    (result,) = await harness.send_all([la_push(1)])
    assert result.outcome == "accepted"


async def test_a_slow_result_consumer_loses_nothing_and_stalls_nothing(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    harness = await start_sender(server)
    slow_send, slow_recv = trio.open_memory_channel[PushResult](0)  # no buffer: every result waits for us
    for i in range(50):
        await harness.sender.send(la_push(i, reply_to=slow_send))
    await server.wait_for_records(50)  # all answered while nobody reads the results
    got = []
    with trio.fail_after(10):
        for _ in range(50):
            got.append(await slow_recv.receive())
    assert sorted(r.push.context for r in got) == list(range(50))


async def test_dead_token_metric_and_stats_count_what_happened(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    server.set_token_status(f"{5:0160x}", 410, "ExpiredToken")
    harness = await start_sender(server)
    before = sample("sightscreen_dead_tokens_total", {"reason": "ExpiredToken"})
    await harness.send_all([la_push(5), la_push(6)])
    assert sample("sightscreen_dead_tokens_total", {"reason": "ExpiredToken"}) == before + 1
    stats = harness.sender.stats()
    assert stats["pushes"] == {"accepted": 1, "rejected": 1, "failed": 0}
    assert stats["dead_tokens"] == 1 and stats["connections"] == 1 and stats["streams_in_flight"] == 0


async def test_413_is_failed_not_retried_and_not_a_dead_token(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    server.set_token_status(f"{3:0160x}", 413, "PayloadTooLarge")
    harness = await start_sender(server)
    (result,) = await harness.send_all([la_push(3)])
    assert (result.outcome, result.status, result.reason, result.attempts) == (
        "failed",
        413,
        "PayloadTooLarge",
        1,
    )
    assert harness.janitor_results() == []


async def test_goaway_with_a_configuration_reason_stops_the_sender(
    start_apns_server: StartServer, signing_key: SigningKeyPair
) -> None:
    server = await start_apns_server()
    sender = ApnsSender(sender_settings(server, signing_key), ssl_context=server.ssl_context_for_clients())
    caught: list[BaseException] = []
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(sender.run)
            assert (await sender.send_and_wait(la_push(1))).outcome == "accepted"
            server.goaway("BadCertificateEnvironment")
            await trio.sleep_forever()
    except* ApnsConfigurationError as group:
        caught.extend(group.exceptions)
    (error,) = caught
    assert "BadCertificateEnvironment" in str(error)


async def test_a_push_past_its_fence_is_failed_without_a_request(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    harness = await start_sender(server)
    late = await harness.sender.send_and_wait(la_push(1, fence=Fence(trio.current_time() - 0.001)))
    assert (late.outcome, late.reason, late.attempts) == ("failed", "NotAfterPassed", 0)
    in_time = await harness.sender.send_and_wait(la_push(2, fence=Fence(trio.current_time() + 60)))
    assert in_time.outcome == "accepted"
    assert [r["token"] for r in server.records] == [f"{2:0160x}"]  # the late one never went out


async def test_a_fence_moved_while_its_pushes_wait_in_the_queue_lets_them_out(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    # Seen in the target soak: a match's 10,000 pushes waited behind other matches' longer than one lease;
    # with the lease end copied into each push they all failed (NotAfterPassed), were re-sent, waited
    # again. The fence is read when the push leaves the queue: a renewing owner's pushes go out, a stopped
    # owner's do not.
    server = await start_apns_server(max_concurrent_streams=1)
    harness = await start_sender(server)
    server.delay(0.5)  # one stream, each answer held 0.5 s: the 2nd push leaves at ~0.5 s, the 3rd at ~1 s...
    start = trio.current_time()
    renewed, stopped = Fence(start + 0.75), Fence(start + 0.75)

    async def renew() -> None:
        while True:
            renewed.until = trio.current_time() + 0.75
            await trio.sleep(0.05)

    pushes = [
        la_push(1, fence=renewed),
        la_push(2, fence=stopped),
        la_push(3, fence=renewed),
        la_push(4, fence=stopped),
    ]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(renew)
        results = {r.push.token: r for r in await harness.send_all(pushes)}
        nursery.cancel_scope.cancel()
    outcome = {int(token, 16): (r.outcome, r.reason) for token, r in results.items()}
    assert outcome == {
        1: ("accepted", None),
        2: ("accepted", None),  # left at ~0.5 s, before its fence
        3: ("accepted", None),  # left at ~1 s: after the fence it was built with, but that fence moved on
        4: ("failed", "NotAfterPassed"),  # due at ~1.5 s, its fence stood still at 0.75 s
    }
    assert len(server.records) == 3


async def test_a_goaway_with_a_full_pipeline_and_a_queue_does_not_freeze_the_loop(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    # Seen in the soak: a GOAWAY lands while the connection's streams are nearly all in flight and pushes
    # are still queued. The draining connection's writer then looped without ever yielding, so its reader
    # never took the answers and the whole process stood still until the request deadline expired them.
    server = await start_apns_server(max_concurrent_streams=8)
    harness = await start_sender(server, request_timeout_s=5.0)
    await harness.send_all([la_push(0)])
    server.delay(0.5)  # every answer is held: the pipeline is full when the GOAWAY lands
    results: list[PushResult] = []

    async def send() -> None:
        results.extend(await harness.send_all([la_push(i) for i in range(1, 25)]))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send)
        await trio.sleep(0.2)
        assert harness.sender.stats()["streams_in_flight"] == 8
        server.goaway("Shutdown", graceful=False)  # now, keeping every stream it has (<= last_stream_id)
    assert len(results) == 24 and {r.outcome for r in results} == {"accepted"}
    assert harness.sender.stats()["retries"] == 0  # nothing sat unread until its deadline
    assert_clean(server)
