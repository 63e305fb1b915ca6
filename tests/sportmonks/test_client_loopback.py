"""The client over real sockets: a small trio HTTP/1.1 SportMonks stand-in on loopback, real httpx."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from daemon.sportmonks.client import SportMonksClient
from daemon.sportmonks.errors import SportMonksHTTPError, SportMonksUnavailable
from daemon.sportmonks.settings import SportMonksSettings
from tests.doubles import FakeSportMonks, Scripted, minimal_fixture


async def test_real_http_round_trip_pagination_and_errors(real_fixture: dict[str, Any]) -> None:
    fake = FakeSportMonks(per_page=2)
    fake.live = [real_fixture]
    fake.schedule = [minimal_fixture(i) for i in range(1, 6)]
    async with trio.open_nursery() as nursery:
        await nursery.start(fake.serve)
        settings = SportMonksSettings(
            api_token="secret-token", base_url=fake.base_url, max_retries=0, offload_parse_bytes=1024
        )
        async with SportMonksClient(settings) as client:
            live = await client.livescores()
            assert live == [real_fixture]  # parsed in a worker thread (body above offload_parse_bytes)
            listed = await client.fixtures(filters={"season_id": "1715"})
            assert [f["id"] for f in listed] == [1, 2, 3, 4, 5]
            assert all(r.query.get("filter[season_id]") == "1715" for r in fake.calls("/fixtures"))
            with pytest.raises(SportMonksHTTPError) as info:
                await client.fixture(424242)
            assert info.value.status == 404
        nursery.cancel_scope.cancel()


async def test_real_timeout_is_a_cancel_scope_per_attempt() -> None:
    fake = FakeSportMonks()
    fake.answer_next(Scripted(200, {"data": []}, delay_s=30))
    async with trio.open_nursery() as nursery:
        await nursery.start(fake.serve)
        settings = SportMonksSettings(
            api_token="secret-token", base_url=fake.base_url, max_retries=0, timeout_s=0.2
        )
        async with SportMonksClient(settings) as client:
            with pytest.raises(SportMonksUnavailable, match="timed out"):
                await client.livescores()
        nursery.cancel_scope.cancel()
