"""The Dynamo client shell: naming, thread offload, metrics, call counting, pagination, batch limits."""

from __future__ import annotations

import gc
import threading
import types

import pytest
import trio
from botocore.exceptions import ClientError

from daemon.metrics import REGISTRY
from daemon.store import TABLE_SPECS, Dynamo, DynamoSettings, count_calls, create_tables
from daemon.store.dynamo import BatchIncomplete
from tests.store import faults


def _calls(table: str, op: str) -> float:
    return (
        REGISTRY.get_sample_value("sightscreen_dynamodb_calls_total", {"table": table, "operation": op})
        or 0.0
    )


def test_table_names_take_the_prefix():
    d = Dynamo(DynamoSettings(endpoint_url="http://127.0.0.1:1", table_prefix="staging-"))
    assert d.table("active-matches") == "staging-active-matches"
    assert d.table("DisplayStateCache") == "staging-DisplayStateCache"


def test_retry_mode_and_attempts_reach_botocore():
    d = Dynamo(DynamoSettings(endpoint_url="http://127.0.0.1:1", retry_mode="adaptive", max_attempts=7))
    assert d.client.meta.config.retries == {"mode": "adaptive", "total_max_attempts": 7}


async def test_calls_run_off_the_trio_thread_and_are_counted(dynamo: Dynamo):
    seen: list[str] = []
    dynamo.client.meta.events.register(
        "before-send.dynamodb.GetItem", lambda **_: seen.append(threading.current_thread().name)
    )
    before = _calls("cricket-teams", "GetItem")
    await dynamo.call("cricket-teams", "get_item", Key={"teamId": {"S": "1"}})
    await dynamo.call("cricket-teams", "GetItem", Key={"teamId": {"S": "1"}})
    assert _calls("cricket-teams", "GetItem") == before + 2
    assert seen and all(name != threading.main_thread().name for name in seen)


async def test_count_calls_counts_this_task_and_its_children_not_siblings(dynamo: Dynamo):
    key = {"teamId": {"S": "1"}}
    sibling_done = trio.Event()

    async def sibling():
        for _ in range(3):
            await dynamo.call("cricket-teams", "get_item", Key=key)
        sibling_done.set()

    async def child():
        await dynamo.call("cricket-teams", "get_item", Key=key)

    async with trio.open_nursery() as outer:
        outer.start_soon(sibling)
        with count_calls() as c:
            await dynamo.call("cricket-teams", "get_item", Key=key)
            with count_calls() as inner:
                async with trio.open_nursery() as n:
                    n.start_soon(child)
                    n.start_soon(child)
            await sibling_done.wait()
    assert inner.n == 2
    assert c.n == 3


async def test_errors_propagate_and_are_counted(dynamo: Dynamo):
    before = (
        REGISTRY.get_sample_value(
            "sightscreen_dynamodb_errors_total",
            {"table": "no-such", "operation": "GetItem", "code": "ResourceNotFoundException"},
        )
        or 0.0
    )
    with pytest.raises(ClientError):
        await dynamo.call("no-such", "get_item", Key={"x": {"S": "1"}})
    after = REGISTRY.get_sample_value(
        "sightscreen_dynamodb_errors_total",
        {"table": "no-such", "operation": "GetItem", "code": "ResourceNotFoundException"},
    )
    assert after == before + 1


async def test_a_refused_conditional_write_leaves_nothing_for_the_garbage_collector(repos):
    # A lock held by another instance refuses every renewal but the owner's: several a second on a busy
    # instance. The refusal must be freed by reference counting, not left in a cycle of frames.
    assert await repos.locks.extend("match:gc", "someone-else", 10) is False  # warm: botocore's lazy set-up
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(5):
            assert await repos.locks.extend("match:gc", "someone-else", 10) is False
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, (BaseException, types.FrameType, types.TracebackType))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == []


async def test_a_client_error_keeps_its_answer_and_an_unexpected_error_its_stack(dynamo: Dynamo):
    with pytest.raises(ClientError) as caught:
        await dynamo.call("no-such", "get_item", Key={"x": {"S": "1"}})
    assert caught.value.response["Error"]["Code"] == "ResourceNotFoundException"
    with pytest.raises(Exception) as unexpected:  # a parameter botocore rejects before sending
        await dynamo.call("cricket-teams", "get_item", Key="not-a-map")
    assert not isinstance(unexpected.value, ClientError)
    frames = [tb.tb_frame.f_code.co_name for tb in _walk(unexpected.value.__traceback__)]
    assert "_make_api_call" in frames  # where inside botocore it went wrong is still there


def _walk(tb: types.TracebackType | None) -> list[types.TracebackType]:
    out = []
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out


async def test_unknown_operation_is_a_clear_error(dynamo: Dynamo):
    with pytest.raises(ValueError, match="unknown DynamoDB operation 'fly'"):
        await dynamo.call("cricket-teams", "fly")


async def test_batch_write_chunks_to_25_and_batch_get_to_100(dynamo: Dynamo):
    hook = faults.unprocessed_batches(dynamo.client, calls=0)  # observe sizes only
    items = [{"PutRequest": {"Item": {"teamId": {"S": str(i)}}}} for i in range(130)]
    calls = await dynamo.batch_write("cricket-teams", items)
    assert calls == 6
    assert hook.sizes == [25, 25, 25, 25, 25, 5]
    hook.sizes.clear()
    got = await dynamo.batch_get("cricket-teams", [{"teamId": {"S": str(i)}} for i in range(250)])
    assert hook.sizes == [100, 100, 50]
    assert sorted(int(x["teamId"]["S"]) for x in got) == list(range(130))


async def test_batch_gives_up_at_the_deadline_naming_what_is_left(moto_server, table_prefix):
    d = Dynamo(
        DynamoSettings(
            endpoint_url=moto_server.url,
            table_prefix=table_prefix,
            batch_deadline_s=0.05,
            batch_backoff_base_s=0.01,
            batch_backoff_max_s=0.02,
        )
    )
    await create_tables(d, {"cricket-teams": TABLE_SPECS["cricket-teams"]})
    faults.always_unprocessed(d.client)
    with pytest.raises(
        BatchIncomplete, match=r"BatchWriteItem on cricket-teams: \d+ request\(s\) still unprocessed"
    ):
        await d.batch_write(
            "cricket-teams", [{"PutRequest": {"Item": {"teamId": {"S": str(i)}}}} for i in range(8)]
        )


async def test_paginate_follows_every_page(dynamo: Dynamo):
    await dynamo.batch_write(
        "cricket-teams", [{"PutRequest": {"Item": {"teamId": {"S": str(i)}}}} for i in range(7)]
    )
    faults.page_size(dynamo.client, 2)
    with count_calls() as c:
        items = await dynamo.paginate("cricket-teams", "scan")
    assert len(items) == 7
    assert c.n == 4


# --- Query/Scan pages skip botocore's shape walk ----------------------------------------------------------

_EVERY_TYPE = {
    "matchId": {"S": "m1"},
    "n": {"N": "12.5"},
    "flag": {"BOOL": True},
    "nothing": {"NULL": True},
    "nested": {"M": {"list": {"L": [{"S": "a"}, {"N": "3"}, {"M": {"deep": {"SS": ["x", "y"]}}}]}}},
    "numbers": {"NS": ["1", "2"]},
    "quote": {"S": 'a "B" inside a string'},
}


def _botocore_only(dynamo: Dynamo):  # type: ignore[no-untyped-def]
    """A client for the same server without the page hook: botocore's own parse, to compare against."""
    import boto3

    return boto3.session.Session().client(
        "dynamodb",
        endpoint_url=dynamo.settings.endpoint_url,
        region_name=dynamo.settings.region,
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


async def test_query_pages_decode_exactly_as_botocore_does(dynamo: Dynamo):
    table = dynamo.table("live-activities")
    items = [dict(_EVERY_TYPE, visitorKey={"S": f"u{i}#d"}) for i in range(5)]
    await dynamo.batch_write("live-activities", [{"PutRequest": {"Item": it}} for it in items])
    query = {"KeyConditionExpression": "matchId = :m", "ExpressionAttributeValues": {":m": {"S": "m1"}}}
    plain = await trio.to_thread.run_sync(lambda: _botocore_only(dynamo).query(TableName=table, **query))
    raw_pages: list[int] = []  # pages whose Items the hook took, seen by a handler registered after it
    dynamo.client.meta.events.register(
        "before-parse.dynamodb.Query",
        lambda customized_response_dict, **_: raw_pages.append(
            len(customized_response_dict.get("Items", []))
        ),
    )
    ours = await dynamo.call("live-activities", "query", **query)
    assert ours["Items"] == plain["Items"] and len(ours["Items"]) == 5
    assert ours["Count"] == plain["Count"] == 5
    assert raw_pages == [5]
    # and paging still follows LastEvaluatedKey, which botocore parses as before
    faults.page_size(dynamo.client, 2)
    paged = await dynamo.paginate("live-activities", "query", **query)
    assert paged == plain["Items"]


async def test_a_page_with_binary_attributes_takes_botocores_path(dynamo: Dynamo):
    await dynamo.call("cricket-teams", "put_item", Item={"teamId": {"S": "1"}, "blob": {"B": b"\x00\xffraw"}})
    items = await dynamo.paginate("cricket-teams", "scan")
    assert items == [{"teamId": {"S": "1"}, "blob": {"B": b"\x00\xffraw"}}]


def test_the_page_hook_leaves_errors_and_odd_bodies_alone():
    from daemon.store.dynamo import _items_as_sent

    for response in (
        {"status_code": 400, "body": b'{"__type": "ValidationException", "Items": []}'},
        {"status_code": 200, "body": b"not json"},
        {"status_code": 200, "body": b'{"Count": 0}'},
        {"status_code": 200, "body": b'{"Items": [{"k": {"B": "AAE="}}]}'},
    ):
        before = dict(response)
        custom: dict[str, object] = {}
        _items_as_sent(response_dict=response, customized_response_dict=custom)
        assert custom == {} and response == before
    response = {"status_code": 200, "body": b'{"Items": [{"k": {"S": "v"}}], "Count": 1}'}
    custom = {}
    _items_as_sent(response_dict=response, customized_response_dict=custom)
    assert custom == {"Items": [{"k": {"S": "v"}}]}
    assert response["body"] == b'{"Count": 1}'
