"""The Feed writing raw fixtures to cricket-fixture-cache on the moto DynamoDB server (real clock, loopback)."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from actors.feed import FeedActor
from daemon.sportmonks.client import SportMonksClient
from daemon.sportmonks.settings import FeedSettings, SportMonksSettings
from daemon.store.caches import CachePut
from tests.doubles import FakeSportMonks


class RepositorySink:
    """The feed's sink as the plain repository: each fixture of a poll written on its own, unfenced (the
    fleet's fenced, transactional sink is tested in test_feed_leader)."""

    def __init__(self, repos: Any) -> None:
        self._cache = repos.fixture_cache

    async def put_poll(self, puts: Sequence[CachePut], summary: Any) -> None:
        for put in puts:
            league = put.fixture.get("league_id")
            await self._cache.put_single_fixture(
                put.match_id,
                put.fixture,
                league_id=None if league is None else str(league),
                starting_at=put.fixture.get("starting_at"),
                ttl_s=put.ttl_s,
                fetched_at=put.fetched_at,
                source=put.source,
                in_livescores=put.in_livescores,
            )


@pytest.fixture(scope="module")
def real_fixture_data(real_fixture_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(real_fixture_path.read_text())["data"]
    return data


async def wait_cached(
    repos: Any, match_id: str, predicate: Any, *, now: float | None = None
) -> dict[str, Any]:
    with trio.fail_after(20):
        while True:
            cached = await repos.fixture_cache.get_cached_fixture(match_id, now=now)
            if cached is not None and predicate(cached):
                return dict(cached)
            await trio.sleep(0.02)


async def test_live_then_final_fixture_cached_with_short_then_long_ttl(
    repos: Any, real_fixture_data: dict[str, Any]
) -> None:
    live = copy.deepcopy(real_fixture_data)
    final = {**copy.deepcopy(real_fixture_data), "status": "Finished", "winner_team_id": 39}
    fake = FakeSportMonks()
    fake.live = [live]
    fake.fixtures_by_id[71344] = final
    client = SportMonksClient(
        SportMonksSettings(
            api_token="secret-token", base_url=fake.base_url, max_retries=0, hourly_budget=1_000_000
        ),
        http=httpx.AsyncClient(transport=fake.transport()),
    )
    settings = FeedSettings(
        list_endpoints=["livescores"],
        livescores_cadence_s=0.2,
        marquee_cadence_s=0.2,
        cache_ttl_live_s=600,
        cache_ttl_final_s=86400,
    )
    feed = FeedActor(client, settings, fixture_cache=RepositorySink(repos))
    async with trio.open_nursery() as nursery:
        await nursery.start(feed.run)
        updates = feed.subscribe("71344", marquee=True)
        with trio.fail_after(20):
            first = await updates.receive()
        assert first.fixture == live
        cached = await wait_cached(repos, "71344", lambda f: f["status"] == "2nd Innings")
        assert cached == live  # ball by ball, byte-for-byte the JSON SportMonks sent
        now = time.time()
        assert await repos.fixture_cache.get_cached_fixture("71344", now=now + 500) is not None
        assert await repos.fixture_cache.get_cached_fixture("71344", now=now + 700) is None
        assert [f["id"] for f in await repos.fixture_cache.get_fixtures_by_league("3")] == [71344]

        fake.live = []  # the match finished and left /livescores
        while (update := await updates.receive()).in_livescores:
            pass
        assert update.fixture == final and update.source == "fixture"
        cached = await wait_cached(
            repos, "71344", lambda f: f["status"] == "Finished", now=time.time() + 80000
        )
        assert cached == final
        nursery.cancel_scope.cancel()
    assert feed.cache_errors == 0
