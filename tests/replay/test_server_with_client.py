"""The replay server against an independent peer: the project's own SportMonks client (daemon.sportmonks).

Everything the daemon asks SportMonks for must come back in a shape the client accepts, and the fault
modes must look to it like the real API's failures.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from pydantic import SecretStr

from daemon.replay.server import ReplayServer
from daemon.replay.synth import synthesise
from daemon.replay.tape import Tape, builtin_tape_path, load_tape
from daemon.sportmonks.client import SportMonksClient
from daemon.sportmonks.errors import MalformedPayload, SportMonksError
from daemon.sportmonks.settings import SportMonksSettings
from tests.doubles import Clock


async def _client(
    nursery: trio.Nursery, tapes: list[Tape], **kw: Any
) -> tuple[ReplayServer, SportMonksClient]:
    server = ReplayServer(tapes, ms_per_ball=1000.0, innings_break_s=0.0, api_token="tok", **kw)
    port = await nursery.start(server.serve)
    settings = SportMonksSettings(
        base_url=f"http://127.0.0.1:{port}/api/v2.0",
        api_token=SecretStr("tok"),
        max_retries=2,
        backoff_base_s=0.01,
        backoff_max_s=0.05,
        timeout_s=2.0,
    )
    return server, SportMonksClient(settings)


async def test_every_endpoint_the_daemon_uses_is_accepted_by_the_client(nursery: trio.Nursery) -> None:
    demo = load_tape(builtin_tape_path())
    other = synthesise("ODI", 2)
    clock = Clock(1_000_000.0)
    server, client = await _client(nursery, [demo, other], clock=clock, page_size=1)
    try:
        clock.now += 40
        live = await client.livescores()
        assert {f["id"] for f in live} == {int(demo.fixture_id), int(other.fixture_id)}
        one = await client.fixture(demo.fixture_id)
        assert len(one["balls"]) == len(demo.fixture_at(40)["balls"])
        fixtures = await client.fixtures(filters={"league_id": "5"})  # two pages of one
        assert {f["id"] for f in fixtures} == {int(demo.fixture_id), int(other.fixture_id)}
        teams = await client.teams()
        assert {t["id"] for t in teams} >= {demo.localteam.id, demo.visitorteam.id}
        leagues = await client.leagues()
        assert [lg["id"] for lg in leagues] == [5]
        season = await client.season(demo.season_id, include=("teams",))
        assert {t["id"] for t in season["teams"]} >= {demo.localteam.id, demo.visitorteam.id}
    finally:
        await client.aclose()


async def test_faults_look_like_real_failures_to_the_client(nursery: trio.Nursery) -> None:
    demo = load_tape(builtin_tape_path())
    clock = Clock(1_000_000.0)
    server, client = await _client(nursery, [demo], clock=clock)
    try:
        clock.now += 10
        server.inject("5xx", endpoint="livescores", count=1)
        assert len(await client.livescores()) == 1  # retried past one 500
        server.inject("429", endpoint="livescores", count=1, retry_after=0)
        assert len(await client.livescores()) == 1  # retried after the 429
        server.inject("malformed", endpoint="fixture", count=10)
        with pytest.raises(SportMonksError):
            await client.fixture(demo.fixture_id)
        server.clear_faults()
        server.inject("wrong_type", endpoint="fixture", field="runs", value="oops", count=1)
        with pytest.raises(MalformedPayload):
            await client.fixture(demo.fixture_id)
        assert (await client.fixture(demo.fixture_id))["id"] == int(demo.fixture_id)
    finally:
        await client.aclose()
