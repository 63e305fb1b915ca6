"""The cost benchmark's meter bills requests as on-demand DynamoDB does, and the benchmark's API mode runs end
to end and prints its JSON line (figures beyond the units' rules are not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from tests.harness.aws_peer import AwsPeer
from tests.harness.dynamodb_iam import role_credentials

ROOT = Path(__file__).resolve().parents[2]


def test_the_meter_bills_request_units_from_item_sizes(tmp_path: Path) -> None:
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
    lines = [json.loads(x) for x in meter.read_text().splitlines()]
    units = [(x["op"], x["rru"], x["wru"]) for x in lines if x["op"] != "CreateTable"]
    assert units == [
        ("PutItem", 0.0, 5.0),  # 5 KB started: 5 write units
        ("GetItem", 1.0, 0.0),  # eventually consistent: half a unit per 4 KB started (2 x 4 KB)
        ("GetItem", 2.0, 0.0),  # strongly consistent: a unit per 4 KB started
        ("UpdateItem", 0.0, 5.0),  # billed on the stored item
        ("DeleteItem", 0.0, 5.0),
    ]
    assert {x["table"] for x in lines} == {"active-matches"}


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
