"""What IAM allows a DynamoDB request to need: each request as the (action, table, index) permissions IAM
checks, the role a request's access key stands for, and what an IAM policy document grants. Pure.

The rules are the service authorization reference's and the DynamoDB developer guide's:

- a plain call needs ``dynamodb:<Operation>`` on its table, or on ``table/T/index/I`` when it names an index
  (Query and Scan);
- BatchGetItem and BatchWriteItem need ``dynamodb:BatchGetItem`` / ``dynamodb:BatchWriteItem`` on every table
  of ``RequestItems``;
- TransactWriteItems has no action of its own: each ``Put``, ``Update``, ``Delete`` needs ``PutItem``,
  ``UpdateItem``, ``DeleteItem`` on its table and each ``ConditionCheck`` needs ``ConditionCheckItem``
  ("Using IAM with DynamoDB transactions"); TransactGetItems needs ``GetItem`` on each table.

Table names in requests are physical (the prefix of an environment or a test, then the logical name);
permissions are kept by logical name, so one recording serves every prefix. Used by the recording layer of
the test DynamoDB (``tests/harness/aws_peer.py``) and by the policy checks in ``tests/deploy``; nothing here
is shipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from daemon.store.tables import TABLE_SPECS

# The access key ids the end-to-end rigs give each service role's processes (AWS_ACCESS_KEY_ID): the test
# DynamoDB attributes every request to the role whose key signed it, as IAM does in production.
ROLE_ACCESS_KEYS: dict[str, str] = {
    "engine": "AKIASIGHTSCREENENGIN",
    "api": "AKIASIGHTSCREENAPI00",
}
_ROLE_OF_KEY = {key: role for role, key in ROLE_ACCESS_KEYS.items()}

TRANSACT_WRITE_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")
_TABLE_ARN = re.compile(r"^arn:[^:]+:dynamodb:[^:]*:[^:]*:table/([^/]+)(?:/index/([^/]+))?$")


@dataclass(frozen=True, order=True)
class Permission:
    """One thing IAM checks: ``dynamodb:<action>`` on a table (by logical name), or on one of its indexes."""

    action: str
    table: str
    index: str | None = None

    def __str__(self) -> str:
        where = self.table if self.index is None else f"{self.table}/index/{self.index}"
        return f"dynamodb:{self.action} on {where}"


def role_credentials(role: str) -> dict[str, str]:
    """The environment a process of ``role`` runs with against the test DynamoDB."""
    return {"AWS_ACCESS_KEY_ID": ROLE_ACCESS_KEYS[role], "AWS_SECRET_ACCESS_KEY": f"{role}-secret"}


ROLE_PATH = "/_role/"


def role_endpoint(url: str, role: str) -> str:
    """A DynamoDB endpoint URL that names ``role`` in its path: for a daemon that runs inside the test's own
    process, which shares one credential chain with the test's other clients. The test DynamoDB takes the
    role from the path and hands moto the request without it."""
    return f"{url.rstrip('/')}{ROLE_PATH}{role}"


def role_of(authorization: str) -> str | None:
    """The service role whose access key signed a request (its SigV4 ``Authorization`` header), else None."""
    found = _CREDENTIAL.search(authorization or "")
    return _ROLE_OF_KEY.get(found.group(1)) if found else None


def logical_table(physical: str) -> str | None:
    """The logical table a physical name ends with (the longest match), or None for a table not in the specs."""
    names = [name for name in TABLE_SPECS if physical.endswith(name)]
    return max(names, key=len) if names else None


def required_permissions(operation: str, body: Mapping[str, Any]) -> list[Permission]:
    """The permissions one request needs: ``operation`` is the X-Amz-Target's operation (``PutItem``), ``body``
    the JSON request. Tables outside the specs are left out (they are no role's)."""
    pairs: list[tuple[str, str, str | None]] = []
    if operation in ("BatchGetItem", "BatchWriteItem"):
        pairs = [(operation, name, None) for name in body.get("RequestItems") or {}]
    elif operation == "TransactWriteItems":
        for item in body.get("TransactItems") or []:
            for kind, request in item.items():
                pairs.append((TRANSACT_WRITE_ACTIONS[kind], request["TableName"], None))
    elif operation == "TransactGetItems":
        pairs = [("GetItem", item["Get"]["TableName"], None) for item in body.get("TransactItems") or []]
    elif "TableName" in body:
        pairs = [(operation, body["TableName"], body.get("IndexName"))]
    out: list[Permission] = []
    for action, physical, index in pairs:
        logical = logical_table(physical)
        if logical is not None:
            out.append(Permission(action, logical, index))
    return out


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def granted_permissions(
    document: Mapping[str, Any], physical_prefix: str
) -> tuple[set[Permission], list[str]]:
    """The DynamoDB permissions an IAM policy document grants on the tables named ``{physical_prefix}{logical}``,
    and what in it is not exact (a wildcard action or resource, a Deny, a NotAction, a table outside the
    specs): least privilege means that list is empty."""
    granted: set[Permission] = set()
    loose: list[str] = []
    for statement in _listed(document.get("Statement") or []):
        actions = [a for a in _listed(statement.get("Action") or []) if str(a).startswith("dynamodb:")]
        if not actions:
            continue
        if statement.get("Effect") != "Allow" or "NotAction" in statement or "NotResource" in statement:
            loose.append(f"statement {statement.get('Sid', '?')}: only plain Allow statements are expected")
            continue
        for action in actions:
            if "*" in action or "?" in action:
                loose.append(f"wildcard action {action}")
        for resource in _listed(statement.get("Resource") or []):
            match = _TABLE_ARN.match(str(resource))
            if match is None or "*" in str(resource):
                loose.append(f"resource {resource} is not one table or index")
                continue
            physical, index = match.groups()
            logical = physical[len(physical_prefix) :] if physical.startswith(physical_prefix) else None
            if logical not in TABLE_SPECS:
                loose.append(f"resource {resource} is not a table of prefix {physical_prefix!r}")
                continue
            for action in actions:
                granted.add(Permission(str(action).split(":", 1)[1], logical, index))
    return granted, loose


def compare(
    used: Iterable[Permission], granted: Iterable[Permission]
) -> tuple[list[Permission], list[Permission]]:
    """(used but not granted, granted but never used), each sorted."""
    used_set, granted_set = set(used), set(granted)
    return sorted(used_set - granted_set), sorted(granted_set - used_set)


def read_recording(lines: Iterable[str]) -> Iterator[tuple[str, Permission]]:
    """(role, permission) from the recording's JSON lines (``{"role", "action", "table", "index"}``)."""
    import json

    for line in lines:
        if line.strip():
            entry = json.loads(line)
            yield entry["role"], Permission(entry["action"], entry["table"], entry.get("index"))
