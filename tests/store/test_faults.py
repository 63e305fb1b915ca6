"""Throttling and unprocessed batch items, injected on the client side: the data layer retries and loses
nothing. (No local DynamoDB peer produces either fault by itself; see tests/store/faults.py.)"""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from daemon.store import Dynamo, DynamoSettings, Repositories, count_calls
from tests.store import faults

T0 = 1_800_000_000.0


async def _all_fixture_ids(repos: Repositories) -> list[str]:
    return sorted(x["matchId"] for x in await repos.fixtures._scan())


async def test_unprocessed_items_are_retried_until_every_write_lands(repos: Repositories):
    hook = faults.unprocessed_batches(repos.dynamo.client, calls=12)
    items = [{"matchId": f"{i:04d}", "leagueCode": "IPL", "startTime": "2027-04-01"} for i in range(120)]
    with count_calls() as c:
        await repos.fixtures.batch_write_fixtures(items)
    assert hook.held_back > 60  # the fault really fired, many times
    assert c.n > 5  # more calls than the 5 a clean run needs
    assert await _all_fixture_ids(repos) == [f"{i:04d}" for i in range(120)]


async def test_unprocessed_keys_are_retried_until_every_item_is_read(repos: Repositories):
    await repos.fixtures.batch_write_fixtures(
        [{"matchId": f"{i:04d}", "leagueCode": "IPL", "startTime": "2027-04-01"} for i in range(230)]
    )
    hook = faults.unprocessed_batches(repos.dynamo.client, calls=8)
    got = await repos.fixtures.batch_get_fixtures(f"{i:04d}" for i in range(230))
    assert hook.held_back > 100
    assert sorted(got) == [f"{i:04d}" for i in range(230)]


async def test_throttled_conditional_write_is_retried_by_botocore(repos: Repositories):
    hook = faults.throttle(repos.dynamo.client, "PutItem", times=1)
    assert await repos.locks.acquire("match:1", "inst-a", 10, now=T0) is True
    assert hook.injected == 1 and hook.sends == 2
    assert (await repos.locks.get("match:1", now=T0))["owner"] == "inst-a"


async def test_throttled_and_partially_processed_batches_lose_nothing(repos: Repositories):
    throttled = faults.throttle(repos.dynamo.client, "BatchWriteItem", times=1, code="ThrottlingException")
    partial = faults.unprocessed_batches(repos.dynamo.client, calls=4)
    items = [{"matchId": str(i), "leagueCode": "IPL", "startTime": "2027"} for i in range(60)]
    await repos.fixtures.batch_write_fixtures(items)
    assert throttled.injected == 1 and partial.held_back > 0
    assert await _all_fixture_ids(repos) == sorted(str(i) for i in range(60))


async def test_throttling_past_max_attempts_raises_instead_of_losing_the_write(
    moto_server, table_prefix, dynamo
):
    d = Dynamo(DynamoSettings(endpoint_url=moto_server.url, table_prefix=table_prefix, max_attempts=2))
    repos = Repositories(d)
    hook = faults.throttle(d.client, "UpdateItem", times=10)
    with pytest.raises(ClientError) as info:
        await repos.follows.follow_match("m1", "u1", "t1", T0 + 100)
    assert info.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert hook.sends == 2


async def test_adaptive_retry_mode_also_retries_throttling(moto_server, table_prefix, dynamo):
    d = Dynamo(DynamoSettings(endpoint_url=moto_server.url, table_prefix=table_prefix, retry_mode="adaptive"))
    repos = Repositories(d)
    hook = faults.throttle(d.client, "GetItem", times=1, code="RequestLimitExceeded")
    assert await repos.teams.get_team("1") is None
    assert hook.sends == 2
