"""The sender judges its connections by their answers, against the project's APNs server over real TLS:
connections left open but dead (the server's ``freeze``, or a black hole in a TCP proxy between them) are
PINGed, retired and replaced, the pushes they held are re-sent (an alert's without its alert), and
``health()`` says false, with why, while no connection is usable, and true again once one answers. The
same holds for channel management's connection."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from actors.sender import ApnsSender
from daemon import metrics
from daemon.apns import broadcast
from daemon.apns.certs import SigningKeyPair
from daemon.apns.server import ApnsTestServer
from daemon.apns.types import PushResult
from tests.actors.test_sender import Harness, la_push, payload, sender_settings
from tests.actors.test_sender import start_sender as start_sender  # the fixture
from tests.apns.conftest import BUNDLE_ID
from tests.harness.fault_proxy import FaultProxy
from tests.harness.nat_proxy import NatProxy

StartServer = Callable[..., Awaitable[ApnsTestServer]]

# Seconds: silence before a PING, and the PING's deadline. The request deadline is far longer, so only the
# judgement by answers can replace a dead connection within these tests' waits.
QUICK = {"ping_silence_s": 0.2, "ping_timeout_s": 0.3, "request_timeout_s": 30.0}


def retired(pool: str) -> float:
    """Connections of ``pool`` retired as dead so far, whatever the cause."""
    return sum(
        metrics.REGISTRY.get_sample_value(
            "sightscreen_apns_connections_retired_total", {"pool": pool, "cause": cause}
        )
        or 0.0
        for cause in ("ping_unanswered", "silent", "requests_unanswered")
    )


async def test_connections_left_open_but_dead_are_replaced_and_their_pushes_re_sent(
    start_apns_server: StartServer, start_sender: Callable[..., Awaitable[Harness]]
) -> None:
    server = await start_apns_server()
    harness = await start_sender(server, connections=2, **QUICK)
    await harness.send_all([la_push(i) for i in range(4)])  # both connections up
    before = retired("push")
    server.delay(5.0, count=2)  # two requests are in flight, unanswered, when the flows die...
    reply_send, reply_recv = trio.open_memory_channel[PushResult](10)
    loud = json.loads(payload(100))
    loud["aps"]["alert"] = {"title": "WICKET!", "body": "29/2"}
    alert = la_push(100, payload=json.dumps(loud).encode(), collapse_id="w1", resend_payload=payload(100))
    await harness.sender.send(la_push(101, reply_to=reply_send))
    await harness.sender.send(alert.__class__(**{**_fields(alert), "reply_to": reply_send}))
    await trio.sleep(0.05)
    server.freeze_connections()  # ...and never answer: open, silent, for good
    results = await harness.send_all([la_push(i) for i in range(200, 230)])
    assert {r.outcome for r in results} == {"accepted"}
    with trio.fail_after(10):
        held = [await reply_recv.receive(), await reply_recv.receive()]
    assert {r.outcome for r in held} == {"accepted"}
    stats = harness.sender.stats()
    assert stats["connects"] >= 4 and stats["pushes"]["failed"] == 0, stats
    assert retired("push") >= before + 2
    (wicket,) = [r for r in server.records if r["token"] == alert.token and r["status"] == 200]
    assert "alert" not in wicket["payload"]["aps"], "its fate was unknown: re-sent without the alert"
    assert harness.sender.health() == (True, "")


async def test_a_flow_a_nat_forgot_is_retired_even_with_the_writer_stuck_on_a_full_socket(
    nursery: trio.Nursery, start_apns_server: StartServer, signing_key: SigningKeyPair
) -> None:
    # Behind a NAT that dropped the flow nothing is acknowledged: once the socket buffers are full the
    # writer blocks in send_all, and only a watchdog apart from it can judge the connection.
    server = await start_apns_server(max_concurrent_streams=1000)
    nat = NatProxy("127.0.0.1", server.port)
    port = await nursery.start(nat.serve)
    settings = sender_settings(server, signing_key, url=f"https://127.0.0.1:{port}", max_retries=10, **QUICK)
    sender = ApnsSender(settings, ssl_context=server.ssl_context_for_clients())
    await nursery.start(sender.run)
    assert (await sender.send_and_wait(la_push(0))).outcome == "accepted"
    before = retired("push")
    nat.expire_flows()
    reply_send, reply_recv = trio.open_memory_channel[PushResult](2000)
    pushes = [la_push(i, payload=payload(i, pad=3000), reply_to=reply_send) for i in range(1, 1001)]
    await sender.send_many(pushes)  # ~3 MB: far more than the socket buffers of a flow nobody reads
    with trio.fail_after(30):
        results = [await reply_recv.receive() for _ in pushes]
    assert {r.outcome for r in results} == {"accepted"}
    assert retired("push") >= before + 1 and sender.stats()["connects"] >= 2
    assert sender.health() == (True, "")


async def test_health_is_false_with_why_while_no_connection_answers_and_true_again_once_one_does(
    nursery: trio.Nursery, start_apns_server: StartServer, signing_key: SigningKeyPair
) -> None:
    server = await start_apns_server()
    proxy = FaultProxy("127.0.0.1", server.port)
    port = await nursery.start(proxy.serve)
    settings = sender_settings(
        server, signing_key, url=f"https://127.0.0.1:{port}", connect_timeout_s=1.0, **QUICK
    )
    sender = ApnsSender(settings, ssl_context=server.ssl_context_for_clients())
    await nursery.start(sender.run)
    assert (await sender.send_and_wait(la_push(0))).outcome == "accepted"
    assert sender.health() == (True, "")

    def usable() -> float:
        return (
            metrics.REGISTRY.get_sample_value("sightscreen_apns_usable_connections", {"pool": "push"}) or 0.0
        )

    assert usable() == 1
    proxy.set(blackhole=True)  # nothing crosses, connections old and new are held open
    reply_send, reply_recv = trio.open_memory_channel[PushResult](5)
    await sender.send(la_push(1, reply_to=reply_send))
    with trio.fail_after(10):
        while sender.health()[0]:
            await trio.sleep(0.05)
    healthy, why = sender.health()
    assert not healthy and "push pool: no usable connection" in why, why
    assert not sender.stats()["healthy"] and sender.stats()["unhealthy_because"] == why
    with trio.fail_after(10):
        while usable() != 0:
            await trio.sleep(0.05)
    proxy.clear()
    with trio.fail_after(15):
        result = await reply_recv.receive()
        while not sender.health()[0]:
            await trio.sleep(0.05)
    assert result.outcome == "accepted"
    assert usable() >= 1


async def test_a_dead_management_connection_is_replaced(
    start_apns_server: StartServer, nursery: trio.Nursery, signing_key: SigningKeyPair
) -> None:
    server = await start_apns_server()
    await nursery.start(server.serve_management)
    settings = sender_settings(
        server,
        signing_key,
        management_host="127.0.0.1",
        management_port=server.management_port,
        ca_file=server.ca_file,
        **QUICK,
    )
    sender = ApnsSender(settings, ssl_context=server.ssl_context_for_clients())
    await nursery.start(sender.run)
    assert sender.channels is not None
    first = await sender.channels.request(broadcast.create_channel(BUNDLE_ID))
    before = retired("management")
    server.freeze_connections()  # the management connection among them
    with trio.fail_after(10):
        second = await sender.channels.request(broadcast.create_channel(BUNDLE_ID))
    assert first != second and server.channels.count() == 2
    assert retired("management") == before + 1
    assert sender.channels.stats()["connects"] == 2
    assert sender.health() == (True, "")


def _fields(push: Any) -> dict[str, Any]:
    return {name: getattr(push, name) for name in push.__dataclass_fields__}
