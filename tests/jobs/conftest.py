"""Fixtures of the jobs' tests: the shared SportMonks fake on loopback and the real client pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import trio

from tests.doubles import FakeSportMonks
from tests.jobs.prematch_world import ApnsWorld, start_apns_world
from tests.jobs.sportmonks_data import LEAGUES


@pytest.fixture
async def sportmonks(nursery: trio.Nursery) -> FakeSportMonks:
    """The shared fake on loopback with SportMonks' page size and the three leagues of the jobs' data."""
    fake = FakeSportMonks(token="test-token", per_page=100, leagues=LEAGUES)
    await nursery.start(fake.serve)
    return fake


@pytest.fixture
async def sm_client(sportmonks: FakeSportMonks) -> AsyncIterator[object]:
    """The project's ``SportMonksClient`` against the fake: no retries inside a call (the jobs' own
    resume/backoff is what these tests exercise) and a breaker that stays closed."""
    from daemon.sportmonks.client import SportMonksClient
    from daemon.sportmonks.settings import SportMonksSettings

    settings = SportMonksSettings(
        base_url=sportmonks.base_url,
        api_token="test-token",
        max_retries=0,
        backoff_base_s=0.01,
        backoff_max_s=0.02,
        breaker_failure_threshold=1000,
        timeout_s=5.0,
    )
    client = SportMonksClient(settings)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def start_apns(nursery: trio.Nursery) -> Callable[..., Awaitable[ApnsWorld]]:
    """``await start_apns(janitor=...)``: the project's APNs test server and an ``ApnsSender`` on it."""

    async def start(**kwargs: object) -> ApnsWorld:
        return await start_apns_world(nursery, **kwargs)

    return start
