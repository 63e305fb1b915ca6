"""The cost benchmark's meter bills requests as on-demand DynamoDB does (item sizes, the larger of before and
after, global secondary index writes), the summary adds them up per table, index and operation, and the
benchmark's API mode runs end to end and prints its JSON line (figures beyond the units' rules are not
asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.harness.aws_peer import AwsPeer
from tests.harness.dynamodb_iam import role_credentials

ROOT = Path(__file__).resolve().parents[2]


def test_the_meter_bills_request_units_from_item_sizes(tmp_path: Path) -> None:
    def calls(client: Any) -> None:
        client.create_table(
            TableName="m-active-matches",
            KeySchema=[{"AttributeName": "matchId", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "matchId", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        big = {"matchId": {"S": "1"}, "state": {"S": "x" * 5000}}  # about 5 KB
        client.put_item(TableName="m-active-matches", Item=big)
        client.get_item(TableName="m-active-matches", Key={"matchId": {"S": "1"}})
        client.get_item(TableName="m-active-matches", Key={"matchId": {"S": "1"}}, ConsistentRead=True)
        client.update_item(
            TableName="m-active-matches",
            Key={"matchId": {"S": "1"}},
            UpdateExpression="SET n = :n",
            ExpressionAttributeValues={":n": {"N": "1"}},
        )
        client.delete_item(TableName="m-active-matches", Key={"matchId": {"S": "1"}})

    lines = _metered(tmp_path, calls)
    units = [(x["op"], x["rru"], x["wru"]) for x in lines]
    assert units == [
        ("PutItem", 0.0, 5.0),  # 5 KB started: 5 write units
        ("GetItem", 1.0, 0.0),  # eventually consistent: half a unit per 4 KB started (2 x 4 KB)
        ("GetItem", 2.0, 0.0),  # strongly consistent: a unit per 4 KB started
        ("UpdateItem", 0.0, 5.0),  # the larger of the item before and after: 5 KB both
        ("DeleteItem", 0.0, 5.0),
    ]
    assert {x["table"] for x in lines} == {"active-matches"}


def test_a_batch_get_bills_every_key_read_found_or_not_and_its_consistency(tmp_path: Path) -> None:
    def calls(client: Any) -> None:
        client.create_table(
            TableName="m-cricket-locks",
            KeySchema=[{"AttributeName": "lockKey", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "lockKey", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        client.put_item(TableName="m-cricket-locks", Item={"lockKey": {"S": "a"}, "v": {"S": "x" * 5000}})
        keys = [{"lockKey": {"S": k}} for k in ("a", "b", "c")]  # one item of 5 KB, two keys with none
        client.batch_get_item(RequestItems={"m-cricket-locks": {"Keys": keys}})
        client.batch_get_item(RequestItems={"m-cricket-locks": {"Keys": keys, "ConsistentRead": True}})

    lines = _metered(tmp_path, calls)
    units = [(x["op"], x["rru"]) for x in lines if x["op"] == "BatchGetItem"]
    assert units == [
        ("BatchGetItem", 0.5 * 2 + 0.5 * 2),  # the 5 KB item: 2 x 4 KB started; each missing key the minimum
        ("BatchGetItem", 1.0 * 2 + 1.0 * 2),  # strongly consistent: twice that
    ]


def _metered(tmp_path: Path, calls: Any) -> list[dict[str, Any]]:
    """The meter's lines for what ``calls`` does with an engine-keyed client, table creation left out."""
    meter = tmp_path / "meter.jsonl"
    with AwsPeer(meter=meter) as peer:
        creds = role_credentials("engine")
        client = boto3.client(
            "dynamodb",
            endpoint_url=peer.url,
            region_name="eu-west-1",
            aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"],
        )
        calls(client)
    lines = [json.loads(x) for x in meter.read_text().splitlines()]
    return [x for x in lines if x["op"] != "CreateTable"]


def test_an_update_is_billed_on_the_larger_of_the_item_before_and_after(tmp_path: Path) -> None:
    def calls(client: Any) -> None:
        client.create_table(
            TableName="m-active-matches",
            KeySchema=[{"AttributeName": "matchId", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "matchId", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        key = {"matchId": {"S": "1"}}
        client.put_item(TableName="m-active-matches", Item={**key, "state": {"S": "x" * 5000}})
        client.update_item(
            TableName="m-active-matches",
            Key=key,
            UpdateExpression="REMOVE #s",
            ExpressionAttributeNames={"#s": "state"},
        )  # 5 KB before, a few bytes after
        client.update_item(
            TableName="m-active-matches",
            Key=key,
            UpdateExpression="SET #s = :s",
            ExpressionAttributeNames={"#s": "state"},
            ExpressionAttributeValues={":s": {"S": "y" * 3000}},
        )  # a few bytes before, 3 KB after
        client.put_item(TableName="m-active-matches", Item=key)  # replaces 3 KB with a few bytes

    units = [(x["op"], x["wru"]) for x in _metered(tmp_path, calls)]
    assert units == [("PutItem", 5.0), ("UpdateItem", 5.0), ("UpdateItem", 3.0), ("PutItem", 3.0)]


def test_a_write_of_an_item_carrying_an_indexs_keys_is_billed_again_for_the_index(tmp_path: Path) -> None:
    """cricket-fixtures and its leagueCode-startTime-index (projecting ALL): each successful write of an item
    that carries, or carried, both index keys writes the index too, as its own line."""
    index = "leagueCode-startTime-index"
    big = {"S": "z" * 1500}  # the item is about 1.5 KB: 2 units a write

    def fixture(match: str, **extra: Any) -> dict[str, Any]:
        return {"matchId": {"S": match}, "blob": big, **extra}

    def calls(client: Any) -> None:
        client.create_table(
            TableName="m-cricket-fixtures",
            KeySchema=[{"AttributeName": "matchId", "KeyType": "HASH"}],
            AttributeDefinitions=[
                {"AttributeName": "matchId", "AttributeType": "S"},
                {"AttributeName": "leagueCode", "AttributeType": "S"},
                {"AttributeName": "startTime", "AttributeType": "S"},
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": index,
                    "KeySchema": [
                        {"AttributeName": "leagueCode", "KeyType": "HASH"},
                        {"AttributeName": "startTime", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        keys = {"leagueCode": {"S": "IPL"}, "startTime": {"S": "2026-04-01T14:00:00Z"}}
        client.put_item(TableName="m-cricket-fixtures", Item=fixture("1", **keys))  # a new index entry
        client.put_item(TableName="m-cricket-fixtures", Item=fixture("2"))  # no index key: no entry
        client.update_item(  # the entry's projected attributes change: one entry write
            TableName="m-cricket-fixtures",
            Key={"matchId": {"S": "1"}},
            UpdateExpression="SET live = :t",
            ExpressionAttributeValues={":t": {"BOOL": True}},
        )
        client.update_item(  # the index key changes: the old entry deleted, a new one put
            TableName="m-cricket-fixtures",
            Key={"matchId": {"S": "1"}},
            UpdateExpression="SET startTime = :s",
            ExpressionAttributeValues={":s": {"S": "2026-04-02T14:00:00Z"}},
        )
        with pytest.raises(client.exceptions.ConditionalCheckFailedException):  # refused: nothing written
            client.put_item(
                TableName="m-cricket-fixtures",
                Item=fixture("1", **keys),
                ConditionExpression="attribute_not_exists(matchId)",
            )
        client.transact_write_items(  # in a transaction: twice, for the table and the index
            TransactItems=[{"Put": {"TableName": "m-cricket-fixtures", "Item": fixture("3", **keys)}}]
        )
        client.batch_write_item(
            RequestItems={"m-cricket-fixtures": [{"DeleteRequest": {"Key": {"matchId": {"S": "3"}}}}]}
        )  # the entry leaves the index
        client.delete_item(TableName="m-cricket-fixtures", Key={"matchId": {"S": "2"}})  # it had no entry

    lines = _metered(tmp_path, calls)
    units = [(x["op"], x.get("index"), x["wru"]) for x in lines]
    assert units == [
        ("PutItem", None, 2.0),
        ("PutItem", index, 2.0),
        ("PutItem", None, 2.0),
        ("UpdateItem", None, 2.0),
        ("UpdateItem", index, 2.0),
        ("UpdateItem", None, 2.0),
        ("UpdateItem", index, 4.0),
        ("PutItem", None, 2.0),
        ("TransactWriteItems", None, 4.0),
        ("TransactWriteItems", index, 4.0),
        ("BatchWriteItem", None, 2.0),
        ("BatchWriteItem", index, 2.0),
        ("DeleteItem", None, 2.0),
    ]
    assert {x["table"] for x in lines} == {"cricket-fixtures"}


def test_the_summary_adds_index_units_to_their_table_and_counts_a_call_once(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    import aws_cost

    meter = [
        {"role": "engine", "op": "PutItem", "table": "cricket-fixtures", "rru": 0.0, "wru": 2.0},
        {
            "role": "engine",
            "op": "PutItem",
            "table": "cricket-fixtures",
            "index": "i",
            "rru": 0.0,
            "wru": 2.0,
        },
    ]
    path = tmp_path / "meter.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in meter))
    summary = aws_cost.summarise(path, 1.0)["engine"]
    assert summary["calls"] == 1.0 and summary["wru"] == 4.0
    assert summary["by_table_op"] == {
        "cricket-fixtures PutItem": {"calls": 1.0, "rru": 0.0, "wru": 2.0},
        "cricket-fixtures/index/i PutItem": {"calls": 0.0, "rru": 0.0, "wru": 2.0},
    }


@pytest.mark.slow
def test_the_api_mode_prints_units_per_registration() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "aws_cost.py"), "api", "--users", "5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    per = result["per_registration"]["api"]
    assert result["users"] == 5 and per["wru"] >= 3 and per["calls"] >= 3
