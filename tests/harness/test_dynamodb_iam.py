"""The recording that keeps the AWS template's role policies exact: which IAM permissions a DynamoDB request
needs, that the test DynamoDB notes them per role, and that the policy gate fails on a permission used but
not granted and on one granted but never used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3

from tests.harness.aws_peer import AwsPeer
from tests.harness.dynamodb_iam import (
    Permission,
    compare,
    granted_permissions,
    read_recording,
    required_permissions,
    role_credentials,
    role_endpoint,
    role_of,
)


def test_a_transaction_needs_each_items_own_action_and_a_batch_its_batch_action() -> None:
    body = {
        "TransactItems": [
            {"ConditionCheck": {"TableName": "p-cricket-locks", "Key": {}}},
            {"Put": {"TableName": "p-cricket-locks", "Item": {}}},
            {"Update": {"TableName": "p-active-matches", "Key": {}}},
            {"Delete": {"TableName": "p-cricket-match-follows", "Key": {}}},
        ]
    }
    assert required_permissions("TransactWriteItems", body) == [
        Permission("ConditionCheckItem", "cricket-locks"),
        Permission("PutItem", "cricket-locks"),
        Permission("UpdateItem", "active-matches"),
        Permission("DeleteItem", "cricket-match-follows"),
    ]
    assert required_permissions(
        "TransactGetItems", {"TransactItems": [{"Get": {"TableName": "x-cricket-teams"}}]}
    ) == [Permission("GetItem", "cricket-teams")]
    batch = {"RequestItems": {"p-live-activities": [], "p-cricket-devices": []}}
    assert required_permissions("BatchWriteItem", batch) == [
        Permission("BatchWriteItem", "live-activities"),
        Permission("BatchWriteItem", "cricket-devices"),
    ]


def test_a_query_on_an_index_needs_the_index_and_names_end_with_the_longest_logical_name() -> None:
    query = {"TableName": "t1-live-activities", "IndexName": "userId-index"}
    assert required_permissions("Query", query) == [Permission("Query", "live-activities", "userId-index")]
    # cricket-fixtures and cricket-fixture-cache: each physical name maps to its own table
    assert required_permissions("GetItem", {"TableName": "t-cricket-fixture-cache"}) == [
        Permission("GetItem", "cricket-fixture-cache")
    ]
    assert required_permissions("GetItem", {"TableName": "t-cricket-fixtures"}) == [
        Permission("GetItem", "cricket-fixtures")
    ]
    assert required_permissions("GetItem", {"TableName": "someone-elses"}) == []


def test_the_role_is_the_access_key_that_signed_the_request() -> None:
    key = role_credentials("api")["AWS_ACCESS_KEY_ID"]
    header = f"AWS4-HMAC-SHA256 Credential={key}/20261205/eu-west-1/dynamodb/aws4_request, SignedHeaders=host"
    assert role_of(header) == "api"
    assert role_of(header.replace(key, "testing")) is None
    assert role_of("") is None


def test_a_policy_is_exact_only_with_plain_allows_on_named_tables_and_indexes() -> None:
    arn = "arn:aws:dynamodb:eu-west-1:123456789012:table/"
    exact = {
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["dynamodb:GetItem", "dynamodb:Query"],
                "Resource": f"{arn}p-cricket-locks",
            },
            {
                "Effect": "Allow",
                "Action": "dynamodb:Query",
                "Resource": [f"{arn}p-live-activities/index/userId-index"],
            },
            {
                "Effect": "Allow",
                "Action": "aps:RemoteWrite",
                "Resource": "arn:aws:aps:eu-west-1:1:workspace/ws",
            },
        ]
    }
    granted, loose = granted_permissions(exact, "p-")
    assert loose == []
    assert granted == {
        Permission("GetItem", "cricket-locks"),
        Permission("Query", "cricket-locks"),
        Permission("Query", "live-activities", "userId-index"),
    }
    wide = {
        "Statement": [
            {"Effect": "Allow", "Action": "dynamodb:*", "Resource": f"{arn}p-cricket-locks"},
            {"Effect": "Allow", "Action": "dynamodb:GetItem", "Resource": "*"},
            {"Effect": "Allow", "Action": "dynamodb:GetItem", "Resource": f"{arn}p-*"},
            {"Effect": "Allow", "Action": "dynamodb:GetItem", "Resource": f"{arn}other-cricket-locks"},
        ]
    }
    _, loose = granted_permissions(wide, "p-")
    assert len(loose) == 4, loose


def test_compare_says_what_is_missing_and_what_is_unused() -> None:
    used = [Permission("GetItem", "cricket-locks"), Permission("PutItem", "cricket-locks")]
    granted = [Permission("GetItem", "cricket-locks"), Permission("Scan", "cricket-teams")]
    assert compare(used, granted) == (
        [Permission("PutItem", "cricket-locks")],
        [Permission("Scan", "cricket-teams")],
    )


def _dynamodb(url: str, role: str | None) -> Any:
    creds = role_credentials(role) if role else {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "x"}
    return boto3.client(
        "dynamodb",
        endpoint_url=url,
        region_name="eu-west-1",
        aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"],
    )


def test_the_test_dynamodb_records_each_roles_permissions_once(tmp_path: Path) -> None:
    record = tmp_path / "record.jsonl"
    with AwsPeer(record=record) as peer:
        admin = _dynamodb(peer.url, None)
        admin.create_table(
            TableName="r-cricket-locks",
            KeySchema=[{"AttributeName": "lockKey", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "lockKey", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        engine, api = _dynamodb(peer.url, "engine"), _dynamodb(peer.url, "api")
        for _ in range(3):
            engine.put_item(TableName="r-cricket-locks", Item={"lockKey": {"S": "a"}})
        api.get_item(TableName="r-cricket-locks", Key={"lockKey": {"S": "a"}})
        # an in-process daemon shares the test's credentials: its endpoint names the role instead
        named = boto3.client(
            "dynamodb",
            endpoint_url=role_endpoint(peer.url, "engine"),
            region_name="eu-west-1",
            aws_access_key_id="testing",
            aws_secret_access_key="x",
        )
        assert named.get_item(TableName="r-cricket-locks", Key={"lockKey": {"S": "a"}})["Item"]
        admin.delete_item(TableName="r-cricket-locks", Key={"lockKey": {"S": "a"}})  # no role: not recorded
    assert list(read_recording(record.read_text().splitlines())) == [
        ("engine", Permission("PutItem", "cricket-locks")),
        ("api", Permission("GetItem", "cricket-locks")),
        ("engine", Permission("GetItem", "cricket-locks")),
    ]


def test_the_gate_fails_on_a_permission_used_but_not_granted_and_on_one_granted_but_unused() -> None:
    from tests.harness.aws_policy_gate import check

    # the API's readiness probe, which the template grants; and one call no role is granted
    used = [("api", Permission("GetItem", "cricket-locks")), ("api", Permission("Scan", "live-activities"))]
    partial = check(used, complete=False)
    assert any("used dynamodb:Scan on live-activities but its policy does not grant it" in p for p in partial)
    assert not any("no test used" in p for p in partial)
    complete = check(used, complete=True)
    assert any("api (ApiTaskRole) is granted dynamodb:" in p and "no test used it" in p for p in complete)
    assert any("engine (EngineTaskRole) is granted" in p for p in complete)
