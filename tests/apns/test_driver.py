"""The APNs connection driver (``daemon.apns.driver``) under trio's autojump clock: the project's APNs server
serves each connection over an in-memory stream (``ApnsTestServer.serve_stream``), and a dialer decides
when the peer is reachable, so outages of minutes run in milliseconds and every time below is virtual.

What is checked: after an outage, delivery resumes within the reconnect cap of the peer's return, without
hammering it meanwhile; a connection that answers brings the pool's other positions back at once; a
connection left open but dead (the server's ``freeze``) is PINGed and retired, its requests re-sent on a
fresh one, and the pool reports itself unusable meanwhile (metric and health) and usable again after.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
import trio.testing

from daemon import metrics
from daemon.apns.certs import SigningKeyPair
from daemon.apns.connection import Answered, ApnsConnection, Outcome, Unanswered
from daemon.apns.driver import ConnectionPool, Link, Traffic
from daemon.apns.server import ApnsTestServer
from daemon.apns.settings import ApnsSettings
from daemon.apns.token import ProviderTokens, load_signing_key
from daemon.apns.types import Push
from tests.apns.conftest import BUNDLE_ID, TEAM_ID, la_payload


@dataclass
class MemoryDialer:
    """Connections to an in-process ``ApnsTestServer`` over in-memory streams, refused until ``up_at``."""

    server: ApnsTestServer
    nursery: trio.Nursery
    up_at: float = 0.0
    attempts: list[float] = field(default_factory=list)

    @property
    def authority(self) -> str:
        return "api.sandbox.push.apple.com"

    async def open(self) -> trio.abc.Stream:
        now = trio.current_time()
        self.attempts.append(now)
        if now < self.up_at:
            raise OSError("connection refused")
        client, server_side = trio.testing.memory_stream_pair()
        self.nursery.start_soon(self.server.serve_stream, server_side)
        return client


class Pushes:
    """A minimal owner of requests: a queue in, answers out; anything unanswered goes back in the queue.
    ``any_status``: every answer is final (else only 200s are expected)."""

    def __init__(self, *, any_status: bool = False) -> None:
        self.any_status = any_status
        self.queue: deque[Push] = deque()
        self.accepted: list[tuple[float, int, Push]] = []  # (virtual time, link, push)
        self.unanswered: list[str] = []
        self.changed = trio.Event()

    def traffic(self) -> Traffic:
        return Traffic(
            pending=lambda: bool(self.queue), fill=self.fill, settle=self.settle, closed=self.closed
        )

    def fill(self, link: Link, conn: ApnsConnection, now: float) -> int:
        sent = 0
        while self.queue and conn.can_send():
            push = self.queue.popleft()
            conn.send(push, push, now)
            sent += 1
        return sent

    def settle(self, link: Link, outcome: Outcome, now: float = 0.0) -> None:
        if isinstance(outcome, Answered) and (outcome.status == 200 or self.any_status):
            self.accepted.append((trio.current_time(), link.index, outcome.exchange))
        else:
            assert isinstance(outcome, Unanswered)
            self.unanswered.append(outcome.cause)
            self.queue.appendleft(outcome.exchange)
        self.changed.set()
        self.changed = trio.Event()

    def closed(self, link: Link, orphans: list[Unanswered]) -> None:
        for orphan in orphans:
            self.settle(link, orphan)

    async def wait_accepted(self, n: int) -> None:
        while len(self.accepted) < n:
            await self.changed.wait()


def sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def push(i: int) -> Push:
    return Push(f"{i:064x}", "liveactivity", BUNDLE_ID, la_payload(runs=i), 5, "update")


def settings(**overrides: Any) -> ApnsSettings:
    return ApnsSettings(url="https://api.sandbox.push.apple.com", **overrides)


def tokens(key: SigningKeyPair) -> ProviderTokens:
    return ProviderTokens(load_signing_key(key.private_pem), team_id=TEAM_ID, key_id=key.key_id)


def make_server(key: SigningKeyPair) -> ApnsTestServer:
    return ApnsTestServer(team_id=TEAM_ID, keys={key.key_id: key.public_pem}, topics=[BUNDLE_ID])


def pool(
    dialer: MemoryDialer,
    pushes: Pushes,
    key: SigningKeyPair,
    config: ApnsSettings,
    size: int = 1,
    seed: int = 7,
) -> ConnectionPool:
    def refuse(reason: str, status: int | None, detail: str) -> None:
        raise AssertionError(f"configuration error {reason} {status} {detail}")

    return ConnectionPool(
        "push",
        dialer,
        settings=config,
        tokens=tokens(key),
        traffic=pushes.traffic(),
        on_configuration_error=refuse,
        size=size,
        rng=random.Random(seed),
    )


@pytest.mark.parametrize("seed", range(6))
async def test_delivery_resumes_within_the_reconnect_cap_of_the_peers_return_without_hammering_it(
    autojump_clock: trio.abc.Clock, nursery: trio.Nursery, signing_key: SigningKeyPair, seed: int
) -> None:
    # APNs unreachable for 30 s (as in the outage where connections came back after 7.6 s and 13.2 s), one
    # connection, whatever the jitter draws.
    server = make_server(signing_key)
    dialer = MemoryDialer(server, nursery, up_at=30.0)
    pushes = Pushes()
    config = settings()
    driver = pool(dialer, pushes, signing_key, config, size=1, seed=seed)
    nursery.start_soon(driver.run)
    pushes.queue.append(push(1))
    driver.wake_writers()
    with trio.fail_after(120):
        await pushes.wait_accepted(1)
    accepted_at = pushes.accepted[0][0]
    # "within a few seconds of the peer's return": the default cap, 4 s, bounds it
    assert 30.0 <= accepted_at <= 30.0 + min(4.0, config.reconnect_backoff_max_s), dialer.attempts
    during = [t for t in dialer.attempts if t < 30.0]
    # Each position waits at least half the cap between attempts once its backoff has grown: a peer that
    # is down sees a few connection attempts a second from the whole pool at most, never a storm.
    ceiling = 30.0 / (config.reconnect_backoff_max_s / 2) + 5
    assert 2 <= len(during) <= ceiling, dialer.attempts


async def test_a_connection_that_answers_brings_the_pools_other_positions_back_at_once(
    autojump_clock: trio.abc.Clock, nursery: trio.Nursery, signing_key: SigningKeyPair
) -> None:
    server = make_server(signing_key)
    dialer = MemoryDialer(server, nursery, up_at=30.0)
    pushes = Pushes()
    config = settings(reconnect_backoff_max_s=60.0)  # a long cap: only the wake-up can bring both back soon
    driver = pool(dialer, pushes, signing_key, config, size=2)
    nursery.start_soon(driver.run)
    pushes.queue.append(push(1))
    driver.wake_writers()
    with trio.fail_after(300):
        await pushes.wait_accepted(1)
        answered_at = pushes.accepted[0][0]
        while driver.stats()["connections"] < 2:
            await trio.sleep(0.001)
    assert trio.current_time() - answered_at < 0.01, "the second position came back with the first answer"
    after = [t for t in dialer.attempts if t >= 30.0]
    assert len(after) == 2, dialer.attempts


async def test_a_connection_left_open_but_dead_is_pinged_retired_and_its_requests_go_out_on_a_fresh_one(
    autojump_clock: trio.abc.Clock, nursery: trio.Nursery, signing_key: SigningKeyPair
) -> None:
    server = make_server(signing_key)
    dialer = MemoryDialer(server, nursery)
    pushes = Pushes()
    config = settings(request_timeout_s=60.0)  # the deadline alone would leave them waiting a minute
    driver = pool(dialer, pushes, signing_key, config)
    retired_before = sample(
        "sightscreen_apns_connections_retired_total", pool="push", cause="ping_unanswered"
    )
    nursery.start_soon(driver.run)
    pushes.queue.append(push(0))
    driver.wake_writers()
    with trio.fail_after(10):
        await pushes.wait_accepted(1)
    assert driver.health() == (True, "")
    server.freeze_connections()  # what a NAT's dropped flow looks like: open, silent, for good
    frozen_at = trio.current_time()
    pushes.queue.extend(push(i) for i in range(1, 11))
    driver.wake_writers()
    # silent for ping_silence_s: unusable (no new request goes there), a PING asks
    await trio.sleep(config.ping_silence_s + 0.01)
    healthy, why = driver.health()
    assert not healthy and "no usable connection" in why and "nothing heard" in why, why
    assert sample("sightscreen_apns_usable_connections", pool="push") == 0
    with trio.fail_after(config.ping_silence_s + config.ping_timeout_s + 5):
        await pushes.wait_accepted(11)
    resumed_at = pushes.accepted[-1][0]
    assert resumed_at - frozen_at <= config.ping_silence_s + config.ping_timeout_s + 0.1
    assert resumed_at - frozen_at < config.request_timeout_s
    assert pushes.unanswered == ["lost"] * 10, "retired with its requests in flight: they went round again"
    retired = sample("sightscreen_apns_connections_retired_total", pool="push", cause="ping_unanswered")
    assert retired == retired_before + 1
    assert driver.connects == 2 and driver.health() == (True, "")
    assert sample("sightscreen_apns_usable_connections", pool="push") == 1
    assert sorted(int(p.token, 16) for _, _, p in pushes.accepted) == list(range(11))


async def test_an_idle_connection_left_dead_is_found_by_its_idle_ping(
    autojump_clock: trio.abc.Clock, nursery: trio.Nursery, signing_key: SigningKeyPair
) -> None:
    server = make_server(signing_key)
    dialer = MemoryDialer(server, nursery)
    pushes = Pushes()
    config = settings(ping_idle_s=600.0)
    driver = pool(dialer, pushes, signing_key, config)
    nursery.start_soon(driver.run)
    pushes.queue.append(push(0))
    driver.wake_writers()
    with trio.fail_after(10):
        await pushes.wait_accepted(1)
    server.freeze_connections()
    await trio.sleep(config.ping_idle_s + config.ping_timeout_s + 1)
    assert driver.connects == 2, "the idle PING went unanswered and the connection was replaced"
    assert driver.health() == (True, "")


async def test_a_slow_server_that_answers_pings_keeps_its_connection(
    autojump_clock: trio.abc.Clock, nursery: trio.Nursery, signing_key: SigningKeyPair
) -> None:
    # Answers held 8 s (past the silence and the PING's deadline): the PINGs come back, so the connection is
    # slow, not dead, and it is kept.
    server = make_server(signing_key)
    dialer = MemoryDialer(server, nursery)
    pushes = Pushes()
    config = settings(request_timeout_s=30.0)
    driver = pool(dialer, pushes, signing_key, config)
    nursery.start_soon(driver.run)
    pushes.queue.append(push(0))
    driver.wake_writers()
    with trio.fail_after(10):
        await pushes.wait_accepted(1)
    server.delay(8.0)
    pushes.queue.extend(push(i) for i in range(1, 4))
    driver.wake_writers()
    with trio.fail_after(30):
        await pushes.wait_accepted(4)
    assert driver.connects == 1 and pushes.unanswered == []


@pytest.mark.parametrize("cap", [4.0, 1.0])
async def test_reconnects_to_a_peer_that_stays_down_stay_spaced_by_the_backoff(
    autojump_clock: trio.abc.Clock, nursery: trio.Nursery, signing_key: SigningKeyPair, cap: float
) -> None:
    server = make_server(signing_key)
    dialer = MemoryDialer(server, nursery, up_at=float("inf"))
    pushes = Pushes()
    driver = pool(dialer, pushes, signing_key, settings(reconnect_backoff_max_s=cap))
    nursery.start_soon(driver.run)
    await trio.sleep(600)
    gaps = [b - a for a, b in zip(dialer.attempts, dialer.attempts[1:], strict=False)]
    assert min(gaps) >= settings().reconnect_backoff_s / 2  # jitter keeps at least half of each delay
    assert min(gaps[10:]) >= cap / 2 and max(gaps) <= cap
    healthy, why = driver.health()
    assert not healthy and "OSError: connection refused" in why, why


@dataclass
class CountingDialer(MemoryDialer):
    """``MemoryDialer`` whose connections count the reads the driver makes on them."""

    reads: int = 0

    async def open(self) -> trio.abc.Stream:
        stream = await super().open()
        dialer = self

        class Counting(trio.abc.Stream):
            async def send_all(self, data: bytes | bytearray | memoryview) -> None:
                await stream.send_all(data)

            async def wait_send_all_might_not_block(self) -> None:
                await stream.wait_send_all_might_not_block()

            async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
                dialer.reads += 1
                return await stream.receive_some(max_bytes)

            async def aclose(self) -> None:
                await stream.aclose()

        return Counting()


async def test_answers_that_trickle_in_while_many_are_owed_are_read_in_batches(
    autojump_clock: trio.abc.Clock, nursery: trio.Nursery, signing_key: SigningKeyPair
) -> None:
    # 300 pushes in flight, answered one every 0.1 ms (the server's per-token delays, on scripted 410s): read
    # as they come, that is a read (and a wake-up of the writer and of every producer) per answer; the reader
    # lets them gather instead, a few ms at most.
    server = make_server(signing_key)
    dialer = CountingDialer(server, nursery)
    pushes = Pushes(any_status=True)
    driver = pool(dialer, pushes, signing_key, settings())
    nursery.start_soon(driver.run)
    pushes.queue.append(push(0))  # the connection opens and is answered (its stream limit then rises)
    driver.wake_writers()
    with trio.fail_after(10):
        await pushes.wait_accepted(1)
    for i in range(1, 301):
        server.set_token_status(f"{i:064x}", 410, "Unregistered", delay_s=0.1 + i * 0.0001)
        pushes.queue.append(push(i))
    reads_before, sent_at = dialer.reads, trio.current_time()
    driver.wake_writers()
    with trio.fail_after(10):
        await pushes.wait_accepted(301)
    reads = dialer.reads - reads_before
    assert reads <= 30, f"{reads} reads for 300 answers"
    # and none waited long for it: the last was due 0.13 s after the batch went out
    assert max(t for t, _, _ in pushes.accepted) - sent_at <= 0.13 + 0.05
