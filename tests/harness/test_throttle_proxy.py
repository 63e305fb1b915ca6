"""The DynamoDB throttling proxy in front of moto's server: what passes reaches DynamoDB unchanged over kept-alive
connections, what is throttled comes back as DynamoDB's throttling error and botocore retries it."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from botocore.exceptions import ClientError

from daemon.store import Dynamo, DynamoSettings, create_tables
from tests.harness.throttle_proxy import ThrottleProxy


async def _proxied(
    nursery: trio.Nursery, moto_url: str, prefix: str, **settings: Any
) -> tuple[ThrottleProxy, Dynamo]:
    from urllib.parse import urlsplit

    target = urlsplit(moto_url)
    proxy = ThrottleProxy(target.hostname or "127.0.0.1", int(target.port or 80), seed=1)
    await nursery.start(proxy.serve)
    dynamo = Dynamo(
        DynamoSettings(endpoint_url=f"http://127.0.0.1:{proxy.port}", table_prefix=prefix, **settings)
    )
    return proxy, dynamo


async def test_requests_pass_unchanged_until_a_share_is_throttled_and_then_come_back_as_dynamodbs_error(
    moto_server: Any, table_prefix: str
) -> None:
    async with trio.open_nursery() as nursery:
        proxy, dynamo = await _proxied(nursery, moto_server.url, table_prefix, max_attempts=1)
        await create_tables(dynamo)
        for n in range(5):  # one kept-alive connection carries them all
            await dynamo.call("cricket-locks", "put_item", Item={"lockKey": {"S": f"k{n}"}})
        assert proxy.passed["PutItem"] == 5 and not proxy.throttled
        proxy.set(share=1.0, operations={"GetItem"})
        with pytest.raises(ClientError) as caught:
            await dynamo.call("cricket-locks", "get_item", Key={"lockKey": {"S": "k1"}})
        assert caught.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
        assert proxy.throttled["GetItem"] == 1
        await dynamo.call("cricket-locks", "put_item", Item={"lockKey": {"S": "k9"}})  # not named: passes
        proxy.clear()
        got = await dynamo.call("cricket-locks", "get_item", Key={"lockKey": {"S": "k9"}})
        assert got["Item"]["lockKey"]["S"] == "k9"
        dynamo.close()
        nursery.cancel_scope.cancel()


async def test_a_share_of_throttled_calls_is_absorbed_by_botocores_retries(
    moto_server: Any, table_prefix: str
) -> None:
    async with trio.open_nursery() as nursery:
        proxy, dynamo = await _proxied(nursery, moto_server.url, table_prefix, max_attempts=10)
        await create_tables(dynamo)
        proxy.set(share=0.5, code="ThrottlingException")
        for n in range(10):
            await dynamo.call("cricket-locks", "put_item", Item={"lockKey": {"S": f"k{n}"}})
        assert proxy.throttled["PutItem"] > 0 and proxy.passed["PutItem"] == 10
        dynamo.close()
        nursery.cancel_scope.cancel()


def test_a_share_outside_0_to_1_or_an_unknown_code_is_refused() -> None:
    proxy = ThrottleProxy("127.0.0.1", 1)
    with pytest.raises(ValueError, match="share"):
        proxy.set(share=1.5)
    with pytest.raises(ValueError, match="code"):
        proxy.set(share=0.5, code="SlowDown")
