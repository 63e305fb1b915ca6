"""Client-side fault injection for data-layer tests, through botocore's event hooks.

No DynamoDB peer ever throttles or returns unprocessed batch items on its own (see the project's DynamoDB
notes), so these hooks make the *client* see them while the real moto server stays the database:
- ``throttle``: answer the first N sends of an operation with an HTTP 400 throttling error, without
  reaching the server (botocore's retry handler sees exactly what DynamoDB would send);
- ``unprocessed_batches``: before a BatchWriteItem/BatchGetItem is serialised, hold back part of its
  requests and, after the server answered, report them as ``UnprocessedItems``/``UnprocessedKeys`` - so
  the server really did process only the rest, as DynamoDB does under load;
- ``page_size``: force a small ``Limit`` on every Query/Scan so pagination is exercised with few items.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from botocore.awsrequest import AWSResponse


class _Body:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Any:
        yield self._data


@dataclass
class Throttle:
    operation: str
    times: int
    code: str = "ProvisionedThroughputExceededException"
    injected: int = 0
    sends: int = 0

    def __call__(self, request: Any, **_: Any) -> AWSResponse | None:
        self.sends += 1
        if self.injected >= self.times:
            return None
        self.injected += 1
        body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{self.code}", "message": "injected"})
        headers = {
            "Content-Type": "application/x-amz-json-1.0",
            "x-amzn-RequestId": f"injected-{self.injected}",
        }
        return AWSResponse(request.url, 400, headers, _Body(body.encode()))


def throttle(
    client: Any, operation: str, times: int, code: str = "ProvisionedThroughputExceededException"
) -> Throttle:
    hook = Throttle(operation, times, code)
    client.meta.events.register(f"before-send.dynamodb.{operation}", hook)
    return hook


@dataclass
class UnprocessedBatches:
    """Holds back every other request of the first ``calls`` batch calls (at least one is sent)."""

    calls: int
    held_back: int = 0
    batch_calls: int = 0
    _seen: int = 0
    sizes: list[int] = field(default_factory=list)

    def before(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        self.batch_calls += 1
        ((table, req),) = params["RequestItems"].items()
        entries = req if isinstance(req, list) else req["Keys"]
        self.sizes.append(len(entries))
        if self._seen >= self.calls or len(entries) < 2:
            return
        self._seen += 1
        keep, hold = entries[::2], entries[1::2]
        if isinstance(req, list):
            params["RequestItems"][table] = keep
        else:
            req["Keys"] = keep
        context["held_back"] = (table, hold, model.name)
        self.held_back += len(hold)

    def after(self, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        held = context.pop("held_back", None)
        if held is None:
            return
        table, hold, op = held
        if op == "BatchWriteItem":
            parsed.setdefault("UnprocessedItems", {})[table] = hold
        else:
            parsed.setdefault("UnprocessedKeys", {})[table] = {"Keys": hold}


def unprocessed_batches(client: Any, calls: int) -> UnprocessedBatches:
    hook = UnprocessedBatches(calls)
    for op in ("BatchWriteItem", "BatchGetItem"):
        client.meta.events.register(f"before-parameter-build.dynamodb.{op}", hook.before)
        client.meta.events.register(f"after-call.dynamodb.{op}", hook.after)
    return hook


def page_size(client: Any, limit: int) -> None:
    def force(params: dict[str, Any], **_: Any) -> None:
        params["Limit"] = limit

    for op in ("Query", "Scan"):
        client.meta.events.register(f"before-parameter-build.dynamodb.{op}", force)


def always_unprocessed(client: Any) -> None:
    """Every batch call reports all of its requests unprocessed (the server may still have applied them):
    for testing the give-up deadline."""

    def after(
        params: Any = None,
        parsed: dict[str, Any] | None = None,
        model: Any = None,
        context: dict[str, Any] | None = None,
        **_: Any,
    ) -> None:
        assert parsed is not None and context is not None
        table, req = context["all_requests"]
        if model.name == "BatchWriteItem":
            parsed["UnprocessedItems"] = {table: req}
        else:
            parsed["UnprocessedKeys"] = {table: req}

    def before(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        ((table, req),) = params["RequestItems"].items()
        context["all_requests"] = (table, req)

    for op in ("BatchWriteItem", "BatchGetItem"):
        client.meta.events.register(f"before-parameter-build.dynamodb.{op}", before)
        client.meta.events.register(f"after-call.dynamodb.{op}", after)
