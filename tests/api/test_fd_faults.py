"""One address must not stop the daemon: a real ``sightscreen run`` with both roles (the engine playing a
match from the replay server to the project's APNs server, the API beside it) under the descriptor limit
systemd gives a unit without ``LimitNOFILE`` (1024, soft and hard), meets

- a connect-and-close flood (connections opened and closed without a byte, as fast as one process can), and
- an idle-connection hold (1,500 connections opened from twenty addresses and left silent),

and through both the engine keeps pushing the match's ticks (the APNs server keeps accepting its pushes), a
client on an established connection keeps being answered, a new client is answered during the hold within
the header timeout, and afterwards; the daemon's log shows no descriptor ran out. The attackers and the
real client use their own loopback addresses (127.0.0.x), so each is its own client to the API.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from daemon.demo.issuer import LocalIssuer
from daemon.replay.synth import synthesise
from daemon.store.local import free_port
from tests.harness.cluster import Cluster

NOFILE = 1024
HEADER_TIMEOUT_S = 3.0
STARVED = ("EMFILE", "Too many open files", "api_accept_failed")


def accepted(cluster: Cluster) -> int:
    return sum(1 for r in cluster.apns.records if r.get("status") == 200)


@contextlib.asynccontextmanager
async def daemon_with_api(
    tmp_path: Path, moto_url: str, issuer: LocalIssuer
) -> AsyncIterator[tuple[Cluster, str]]:
    port = free_port()
    cluster = Cluster(
        tmp_path / "cluster",
        moto_url=moto_url,
        tapes=[synthesise("T20", seed=41)],
        table_prefix="fd41-",
        speed=80.0,
        followers_per_match=4,
        nofile=NOFILE,
        dynamodb_role=None,  # both roles in one process: no one role's policy answers for its calls
        extra_config={
            "instance": {"roles": ["engine", "api"]},
            "api": {"listen": f"127.0.0.1:{port}", "header_timeout_s": HEADER_TIMEOUT_S},
            "auth": {"issuer": issuer.issuer, "jwks_url": issuer.jwks_url, "client_ids": [issuer.client_id]},
        },
    )
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery, instances=1)
        try:
            yield cluster, f"http://127.0.0.1:{port}"
        finally:
            await cluster.stop_all()
            nursery.cancel_scope.cancel()


async def open_from(source: str, port: int) -> trio.socket.SocketType:
    sock = trio.socket.socket()
    await sock.bind((source, 0))
    await sock.connect(("127.0.0.1", port))
    return sock


async def flood(port: int, seconds: float, most: int) -> int:
    """Connect and close, without a byte, from 127.0.0.2: as many as four tasks manage in ``seconds``, at
    most ``most``."""
    done = 0
    with trio.move_on_after(seconds):

        async def one_task() -> None:
            nonlocal done
            while done < most:
                try:
                    sock = await open_from("127.0.0.2", port)
                except OSError:
                    await trio.sleep(0.01)
                    continue
                sock.close()
                done += 1

        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(one_task)
    return done


async def check_answers(
    http: httpx.AsyncClient, headers: dict[str, str], until: trio.Event, answers: list[int]
) -> None:
    """The real client on its established connection: one request every quarter second until ``until``."""
    while not until.is_set():
        answers.append((await http.get("/user/activities", headers=headers)).status_code)
        await trio.sleep(0.25)


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_flood_and_a_hold_of_connections_stop_neither_the_engine_nor_the_api(
    tmp_path: Path, moto_server: Any
) -> None:
    with LocalIssuer().serve() as issuer:
        async with daemon_with_api(tmp_path, moto_server.url, issuer) as (cluster, url):
            port = int(url.rsplit(":", 1)[1])
            headers = {"Authorization": f"Bearer {issuer.mint('a-real-user')}"}
            transport = httpx.AsyncHTTPTransport(local_address="127.0.0.1")
            async with httpx.AsyncClient(base_url=url, transport=transport, timeout=30) as http:
                with trio.fail_after(120):
                    while accepted(cluster) < 5:  # the match is on: the engine pushes its ticks
                        await trio.sleep(0.2)
                assert (await http.get("/user/activities", headers=headers)).status_code == 200

                # the connect-and-close flood, with the real client asking throughout
                before, answers, stop = accepted(cluster), [], trio.Event()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(check_answers, http, headers, stop, answers)
                    flooded = await flood(port, seconds=20.0, most=3 * NOFILE)
                    stop.set()
                assert flooded > NOFILE, flooded  # more than the descriptors: each had to be given back
                assert answers and set(answers) == {200}, answers
                assert accepted(cluster) > before, "the engine pushed nothing during the flood"

                # the idle hold: far more silent connections than the API may hold, from twenty addresses
                before, answers, stop = accepted(cluster), [], trio.Event()
                held: list[trio.socket.SocketType] = []
                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(check_answers, http, headers, stop, answers)

                        async def hold(source: str) -> None:
                            for _ in range(75):
                                with contextlib.suppress(OSError):
                                    held.append(await open_from(source, port))

                        async with trio.open_nursery() as holders:
                            for n in range(10, 30):
                                holders.start_soon(hold, f"127.0.0.{n}")
                        # a new client is taken within the header timeout, whoever holds the slots
                        fresh = httpx.AsyncClient(
                            base_url=url,
                            transport=httpx.AsyncHTTPTransport(local_address="127.0.0.3"),
                            timeout=30,
                        )
                        async with fresh:
                            assert (await fresh.get("/user/activities", headers=headers)).status_code == 200
                        await trio.sleep(2 * HEADER_TIMEOUT_S)
                        stop.set()
                finally:
                    for sock in held:
                        sock.close()
                assert len(held) > NOFILE, len(held)
                assert answers and set(answers) == {200}, answers
                assert accepted(cluster) > before, "the engine pushed nothing during the hold"

                # afterwards: the engine goes on, and so does the API, to a new connection too
                before = accepted(cluster)
                with trio.fail_after(60):
                    while accepted(cluster) == before:
                        await trio.sleep(0.2)
                async with httpx.AsyncClient(base_url=url, timeout=30) as after:
                    assert (await after.get("/user/activities", headers=headers)).status_code == 200
                    metrics_ok = (await after.get("/readyz")).status_code
                assert metrics_ok == 200
            logs = "".join(inst.log_path.read_text() for inst in cluster.all_instances())
            assert not [word for word in STARVED if word in logs], [w for w in STARVED if w in logs]
            assert '"api_connection_caps"' in logs and f'"descriptor_limit": {NOFILE}' in logs
