"""The shared ``FakeSender`` (tests/doubles.py) held to the real ``ApnsSender``: the same cases run against
both, as trio's ``check_one_way_stream`` runs one set of checks on every stream. The real one sends to the
project's APNs server, scripted the way APNs answers in each case; the fake is told the same answers. Each must
give the one result a producer sees (outcome, status, reason, attempts) and so mean the same to it
(``daemon.apns.rules.resend``). Tests that drive match actors and jobs with the fake can then trust what it
says.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import trio

from actors.sender import ApnsSender
from daemon.apns import broadcast
from daemon.apns.certs import SigningKeyPair
from daemon.apns.rules import Resend, resend
from daemon.apns.server import ApnsTestServer
from daemon.apns.types import Push, PushResult
from tests.actors.test_sender import BUNDLE_ID, la_push, sender_settings
from tests.doubles import FakeSender

CHANNEL = "<the case's channel>"  # stands for the channel the case creates on the server


@dataclass(frozen=True)
class Case:
    """A push, what APNs does with it (a ``FaultScript`` for the server: ``tokens``, ``delay``) and what
    the fake is told to answer, and the result a producer must see."""

    name: str
    push: Push
    expect: tuple[str, int | None, str | None, int]  # outcome, status, reason, attempts
    meaning: Resend
    server: dict[str, Any] = field(default_factory=dict)
    fake: dict[str, Any] = field(default_factory=dict)
    channel: str | None = None  # "live": created on the server first; "gone": created, then deleted
    # the real sender's request deadline: long enough that a loaded machine's slow answer is no timeout,
    # short where the case is the timeout
    request_timeout_s: float = 5.0


def _token(i: int) -> str:
    return la_push(i).token


def _dead(i: int, status: int, reason: str) -> Case:
    token = _token(i)
    return Case(
        f"rejected {status} {reason}",
        la_push(i),
        ("rejected", status, reason, 1),
        Resend.SETTLED,
        server={"tokens": {token: {"status": status, "reason": reason}}},
        fake={"rejected": {token: (status, reason)}},
    )


CASES = [
    Case("accepted", la_push(1), ("accepted", 200, None, 1), Resend.SETTLED),
    _dead(2, 410, "Unregistered"),
    _dead(3, 410, "ExpiredToken"),
    _dead(4, 400, "BadDeviceToken"),
    _dead(5, 400, "DeviceTokenNotForTopic"),
    Case(
        "retried, then accepted",
        la_push(6),
        ("accepted", 200, None, 3),
        Resend.SETTLED,
        server={"tokens": {_token(6): {"status": 503, "reason": "ServiceUnavailable", "count": 2}}},
        fake={"accepted_after": {_token(6): 3}},
    ),
    Case(
        "retries spent",
        la_push(7),
        ("failed", 503, "ServiceUnavailable", 6),
        Resend.AS_IS,
        server={"tokens": {_token(7): {"status": 503, "reason": "ServiceUnavailable"}}},
        fake={"failing": {_token(7)}},
    ),
    Case(
        "unanswered",
        la_push(8),
        ("failed", None, "Timeout", 6),
        Resend.QUIET,
        server={"delay": {"seconds": 30.0}},
        fake={"timing_out": {_token(8)}},
        request_timeout_s=0.2,
    ),
    Case(
        "broadcast accepted",
        replace(la_push(9, token="", topic=BUNDLE_ID, expiration=0), channel_id=CHANNEL),
        ("accepted", 200, None, 1),
        Resend.SETTLED,
        channel="live",
    ),
    Case(
        "broadcast to a channel gone",
        replace(la_push(10, token="", topic=BUNDLE_ID, expiration=0), channel_id=CHANNEL),
        ("rejected", 400, "ChannelNotRegistered", 1),
        Resend.SETTLED,
        fake={"rejected": {CHANNEL: (400, "ChannelNotRegistered")}},
        channel="gone",
    ),
]

Send = Callable[[Case], Awaitable[PushResult]]


@pytest.fixture(params=["FakeSender", "ApnsSender"])
def send(
    request: pytest.FixtureRequest,
    nursery: trio.Nursery,
    start_apns_server: Callable[..., Awaitable[ApnsTestServer]],
    signing_key: SigningKeyPair,
) -> Send:
    """One case's push through the sender under test, scripted as the case says; its one result."""

    async def through_fake(case: Case) -> PushResult:
        sender = FakeSender(**case.fake)
        reply_send, reply_recv = trio.open_memory_channel[PushResult](2)
        await sender.send(replace(case.push, reply_to=reply_send))
        return reply_recv.receive_nowait()

    async def through_apns(case: Case) -> PushResult:
        server = await start_apns_server()
        await nursery.start(server.serve_management)
        # [apns] at its defaults where the fake states them (max_retries 5), quick where time only waits
        settings = sender_settings(
            server,
            signing_key,
            max_retries=5,
            request_timeout_s=case.request_timeout_s,
            management_host="127.0.0.1",
            management_port=server.management_port,
            ca_file=server.ca_file,
        )
        sender = ApnsSender(settings, ssl_context=server.ssl_context_for_clients())
        await nursery.start(sender.run)
        push = case.push
        if case.channel is not None:
            assert sender.channels is not None
            channel = await sender.channels.request(broadcast.create_channel(BUNDLE_ID))
            if case.channel == "gone":
                await sender.channels.request(broadcast.delete_channel(BUNDLE_ID, channel))
            push = replace(push, channel_id=channel)
        if case.server:
            server.script(**case.server)
        with trio.fail_after(20):
            return await sender.send_and_wait(push)

    return through_fake if request.param == "FakeSender" else through_apns


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_the_fake_and_the_real_sender_give_the_same_result(case: Case, send: Send) -> None:
    result = await send(case)
    assert (result.outcome, result.status, result.reason, result.attempts) == case.expect
    assert resend(result) is case.meaning
