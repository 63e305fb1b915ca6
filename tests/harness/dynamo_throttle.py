"""Client-side DynamoDB throttling for fault tests: a botocore ``before-send`` hook on one client.

``DynamoThrottle(client).install(...)`` answers chosen requests of that client with an HTTP 400 throttling
error (``ProvisionedThroughputExceededException`` or ``ThrottlingException``, as DynamoDB sends them) instead
of sending them. botocore parses the answer as it would a real one, so its retry handler (``standard`` or
``adaptive`` mode) retries it and, past ``max_attempts``, the caller gets the ``ClientError`` — exactly the
path a throttled table takes in production. Nothing reaches the server for a throttled attempt.

Which requests: every one (``every=1``), or one in ``every``; only the operations named (``operations``, API
names such as ``"UpdateItem"``); for at most ``count`` throttled attempts. ``clear()`` (or ``remove()``) stops it.
Counts are kept per operation in ``throttled`` and ``passed``. Thread-safe: boto3 calls run in worker threads.

Nothing here is imported by production code.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Collection, Iterator
from typing import Any

from botocore.awsrequest import AWSResponse, HTTPHeaders

THROTTLING_CODES = frozenset({"ProvisionedThroughputExceededException", "ThrottlingException"})


class _Body:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._data


class DynamoThrottle:
    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._installed = False
        self.code = "ProvisionedThroughputExceededException"
        self.every = 1
        self.remaining: int | None = None
        self.operations: frozenset[str] | None = None
        self.active = False
        self._seen = 0
        self.throttled: Counter[str] = Counter()
        self.passed: Counter[str] = Counter()

    def install(
        self,
        *,
        code: str = "ProvisionedThroughputExceededException",
        every: int = 1,
        count: int | None = None,
        operations: Collection[str] | None = None,
    ) -> DynamoThrottle:
        if code not in THROTTLING_CODES:
            raise ValueError(f"code: expected one of {sorted(THROTTLING_CODES)}, got {code!r}")
        if every < 1:
            raise ValueError(f"every: must be >= 1, got {every}")
        with self._lock:
            self.code, self.every, self.remaining = code, every, count
            self.operations = frozenset(operations) if operations is not None else None
            self._seen = 0
            self.active = True
        if not self._installed:
            self._client.meta.events.register("before-send.dynamodb", self._before_send)
            self._installed = True
        return self

    def clear(self) -> None:
        with self._lock:
            self.active = False

    def remove(self) -> None:
        self.clear()
        if self._installed:
            self._client.meta.events.unregister("before-send.dynamodb", self._before_send)
            self._installed = False

    @property
    def total_throttled(self) -> int:
        return sum(self.throttled.values())

    def _before_send(self, request: Any, **_: Any) -> AWSResponse | None:
        target = str(request.headers.get("X-Amz-Target", b"") or "")
        if isinstance(request.headers.get("X-Amz-Target"), bytes):
            target = request.headers["X-Amz-Target"].decode()
        operation = target.rsplit(".", 1)[-1]
        with self._lock:
            hit = self.active and (self.operations is None or operation in self.operations)
            if hit:
                self._seen += 1
                hit = (self._seen - 1) % self.every == 0
            if hit and self.remaining is not None:
                if self.remaining <= 0:
                    self.active = False
                    hit = False
                else:
                    self.remaining -= 1
            if not hit:
                self.passed[operation] += 1
                return None
            self.throttled[operation] += 1
            code = self.code
        body = json.dumps(
            {
                "__type": f"com.amazonaws.dynamodb.v20120810#{code}",
                "message": "Rate of requests exceeds the allowed throughput.",
            }
        ).encode()
        headers = HTTPHeaders()
        headers["Content-Type"] = "application/x-amz-json-1.0"
        headers["x-amzn-RequestId"] = "fault-throttle"
        return AWSResponse(request.url, 400, headers, _Body(body))
