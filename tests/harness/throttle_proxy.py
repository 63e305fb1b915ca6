"""DynamoDB throttling for daemons in their own processes: an HTTP/1.1 proxy in front of the DynamoDB peer
that answers a share of the requests with a throttling error instead of forwarding them.

``DynamoThrottle`` (a botocore hook) throttles a client in the test's own process; a ``sightscreen run``
process has its own clients, so its requests are throttled on the way: each is read whole (``h11``), and
either answered at once with HTTP 400 and ``ProvisionedThroughputExceededException`` (or
``ThrottlingException``), exactly as DynamoDB answers a throttled call, or forwarded unchanged on the
client's own upstream connection and its answer relayed. botocore retries a throttled call as it would in
production, and past its attempts the caller gets the ``ClientError``.

``set(share=...)``: the share of requests throttled (0 to 1, drawn from a seeded generator), optionally only
for the operations named; ``clear()`` forwards everything again. ``throttled`` and ``passed`` count per
operation. Only ever listens on loopback. Nothing here is imported by production code.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Collection
from typing import Any

import h11
import trio

from tests.harness.dynamo_throttle import THROTTLING_CODES

_READ = 65536


class ThrottleProxy:
    def __init__(self, target_host: str, target_port: int, *, seed: int = 0) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.share = 0.0
        self.code = "ProvisionedThroughputExceededException"
        self.operations: frozenset[str] | None = None
        self.throttled: Counter[str] = Counter()
        self.passed: Counter[str] = Counter()
        self._rng = random.Random(seed)

    def set(
        self,
        *,
        share: float,
        code: str = "ProvisionedThroughputExceededException",
        operations: Collection[str] | None = None,
    ) -> None:
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"share: must be within 0 and 1, got {share}")
        if code not in THROTTLING_CODES:
            raise ValueError(f"code: expected one of {sorted(THROTTLING_CODES)}, got {code!r}")
        self.share, self.code = share, code
        self.operations = frozenset(operations) if operations is not None else None

    def clear(self) -> None:
        self.share = 0.0

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(self.port)
            await trio.serve_listeners(self._handle, listeners, handler_nursery=nursery)

    def _throttles(self, operation: str) -> bool:
        hit = self.share > 0 and (self.operations is None or operation in self.operations)
        return hit and self._rng.random() < self.share

    async def _handle(self, client: trio.SocketStream) -> None:
        server = h11.Connection(h11.SERVER)
        upstream: trio.SocketStream | None = None
        upstream_conn: h11.Connection | None = None
        try:
            async with client:
                while True:
                    request = await _read_message(client, server)
                    if request is None:
                        return
                    head, body = request
                    headers = [(bytes(k), bytes(v)) for k, v in head.headers]
                    target = dict(headers).get(b"x-amz-target", b"").decode()
                    operation = target.rsplit(".", 1)[-1]
                    if self._throttles(operation):
                        self.throttled[operation] += 1
                        await _send(client, server, *self._throttle_answer())
                    else:
                        self.passed[operation] += 1
                        if upstream is None or upstream_conn is None:
                            upstream = await trio.open_tcp_stream(*self.target)
                            upstream_conn = h11.Connection(h11.CLIENT)
                        await _send(
                            upstream,
                            upstream_conn,
                            h11.Request(method=head.method, target=head.target, headers=headers),
                            body,
                        )
                        answer = await _read_message(upstream, upstream_conn)
                        if answer is None:
                            return  # the peer went away: so does the client's connection
                        status, answer_body = answer
                        await _send(
                            client,
                            server,
                            h11.Response(status_code=status.status_code, headers=list(status.headers)),
                            answer_body,
                        )
                        if upstream_conn.our_state is h11.MUST_CLOSE:
                            await upstream.aclose()
                            upstream = upstream_conn = None
                        else:
                            upstream_conn.start_next_cycle()
                    if server.our_state is h11.MUST_CLOSE:
                        return
                    server.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, h11.ProtocolError):
            return
        finally:
            if upstream is not None:
                await upstream.aclose()

    def _throttle_answer(self) -> tuple[h11.Response, bytes]:
        body = json.dumps(
            {
                "__type": f"com.amazonaws.dynamodb.v20120810#{self.code}",
                "message": "Rate of requests exceeds the allowed throughput.",
            }
        ).encode()
        headers = [
            (b"content-type", b"application/x-amz-json-1.0"),
            (b"content-length", str(len(body)).encode()),
            (b"x-amzn-requestid", b"throttle-proxy"),
        ]
        return h11.Response(status_code=400, headers=headers), body


async def _read_message(stream: trio.SocketStream, conn: h11.Connection) -> tuple[Any, bytes] | None:
    """One whole request or response (its head and body) from ``stream``; None when the peer closed."""
    head: Any = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(_READ)
            conn.receive_data(data)
            if not data and head is None:
                return None
            continue
        if isinstance(event, h11.Request | h11.Response):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            return head, bytes(body)
        elif isinstance(event, h11.ConnectionClosed):
            return None


async def _send(stream: trio.SocketStream, conn: h11.Connection, head: Any, body: bytes) -> None:
    headers = [(k, v) for k, v in head.headers if k.lower() not in (b"content-length", b"transfer-encoding")]
    headers.append((b"content-length", str(len(body)).encode()))
    if isinstance(head, h11.Request):
        message: Any = h11.Request(method=head.method, target=head.target, headers=headers)
    else:
        message = h11.Response(status_code=head.status_code, headers=headers)
    data = conn.send(message) + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
    await stream.send_all(data)
