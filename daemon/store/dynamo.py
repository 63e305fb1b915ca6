"""The DynamoDB client shell: one boto3 client, run in worker threads, counted and measured.

Owns: the low-level boto3 client and its botocore ``Config`` (retry mode, attempts, timeouts, pool size),
the capacity limiter that bounds the worker threads, the prefixed physical table names, the per-task call
counter (``count_calls``), the ``DYNAMODB_CALLS``/``DYNAMODB_ERRORS`` metrics, and the generic batch and
pagination loops every repository uses. It does not know any table's attributes or access patterns (those
are in the repositories) and never touches the trio loop from a worker thread.

Why threads: boto3 is blocking. Every call runs in ``trio.to_thread.run_sync`` under one
``CapacityLimiter`` (``DynamoSettings.max_threads``), so the trio loop never blocks and a burst of calls
queues instead of spawning unbounded threads. A botocore client is thread-safe; one client is shared.
Calls are not abandoned on cancellation: a cancelled caller waits for its in-flight request (bounded by
the read timeout times the attempts), so nothing outlives its parent task.

Retries: botocore retries throttling (``ProvisionedThroughputExceededException``, ``ThrottlingException``,
``RequestLimitExceeded``) and 5xx itself, in ``standard`` or ``adaptive`` mode. The SDK does not retry the
``UnprocessedItems``/``UnprocessedKeys`` of a batch; ``batch_write``/``batch_get`` here do, with
exponential backoff and full jitter, until done or ``batch_deadline_s``, then raise ``BatchIncomplete``
naming how many requests were left (never a silent loss).
"""

from __future__ import annotations

import contextvars
import json
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import boto3
import trio
from botocore.config import Config
from botocore.exceptions import ClientError

from daemon.backoff import backoff_delay
from daemon.logs import get_logger
from daemon.metrics import DYNAMODB_CALLS, DYNAMODB_ERRORS
from daemon.store.settings import DynamoSettings

log = get_logger("daemon.store")

# DynamoDB's per-call limits (API Reference: BatchWriteItem, BatchGetItem, TransactWriteItems).
BATCH_WRITE_MAX = 25
BATCH_GET_MAX = 100
Lane = Literal["bulk", "lease"]
TRANSACT_MAX_ACTIONS = 100

CONDITIONAL_CHECK_FAILED = "ConditionalCheckFailedException"


class StoreError(Exception):
    """The store's error root: a data-layer failure that is not a botocore error (those propagate as they
    are): a batch left incomplete, a fenced write refused, a registration that lost a race."""


class BatchIncomplete(StoreError):
    """A batch still had unprocessed requests when its deadline passed."""

    def __init__(self, table: str, operation: str, remaining: int, deadline_s: float) -> None:
        super().__init__(
            f"{operation} on {table}: {remaining} request(s) still unprocessed after {deadline_s:g}s of retries"
        )
        self.table = table
        self.operation = operation
        self.remaining = remaining


def is_condition_failed(exc: BaseException) -> bool:
    """True for a failed ``ConditionExpression``: a normal outcome for conditional writes."""
    return (
        isinstance(exc, ClientError) and exc.response.get("Error", {}).get("Code") == CONDITIONAL_CHECK_FAILED
    )


def cancellation_codes(exc: BaseException) -> list[str | None] | None:
    """For a cancelled TransactWriteItems (``TransactionCanceledException``): each action's cancellation
    reason code, in the order of the actions (None where it gave none). None for any other error."""
    if not isinstance(exc, ClientError) or exc.response.get("Error", {}).get("Code") != (
        "TransactionCanceledException"
    ):
        return None
    return [(reason or {}).get("Code") for reason in exc.response.get("CancellationReasons") or []]


# --- per-task call counting ---------------------------------------------------------------------------


@dataclass
class CallCounter:
    """Calls made inside a ``count_calls()`` block (and by tasks spawned from inside it)."""

    n: int = 0


_counters: contextvars.ContextVar[tuple[CallCounter, ...]] = contextvars.ContextVar(
    "sightscreen_dynamodb_counters", default=()
)


@contextmanager
def count_calls() -> Iterator[CallCounter]:
    """Count the DynamoDB calls this task makes inside the block.

    A ContextVar holds the active counters: trio copies the context into tasks spawned after entering, so
    their calls count too, while sibling tasks (other match actors) never see this counter. Blocks nest:
    a call counts in every enclosing block.
    """
    counter = CallCounter()
    token = _counters.set((*_counters.get(), counter))
    try:
        yield counter
    finally:
        _counters.reset(token)


# --- page decoding ---------------------------------------------------------------------------------------

# Operations whose pages skip botocore's response parser (see ``_items_as_sent``).
RAW_PAGE_OPERATIONS = ("Query", "Scan")
# A binary attribute ({"B": base64} or {"BS": [...]}) needs botocore's base64 decoding; a page that might
# hold one (or merely contains the text) takes botocore's path. JSON escapes a quote inside a string, so
# these bytes appear only as a type tag or as an attribute named "B"/"BS".
_BINARY_TAGS = (b'"B"', b'"BS"')


def _items_as_sent(response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_: Any) -> None:
    """botocore ``before-parse`` hook for Query and Scan: hand the page's ``Items`` over as DynamoDB sent them.

    botocore walks every attribute value of every item through the service model's shapes to produce
    ``{"S": "..."}`` dicts that are exactly the JSON it received (for every type but binary). For a match's
    10,000 Live Activity sessions that walk costs more CPU than all its pushes (``bench/dynamodb_pages.py``
    compares the two paths). Here the body is decoded once with the C JSON decoder, ``Items`` goes
    straight into the parsed response (botocore merges ``customized_response_dict`` into it), and botocore
    parses only the rest (``Count``, ``LastEvaluatedKey``, ``ConsumedCapacity``). Errors, non-JSON bodies and
    pages with binary attributes are left entirely to botocore; its CRC32 check reads the HTTP response
    itself, which is untouched.
    """
    body = response_dict.get("body")
    if response_dict.get("status_code") != 200 or not isinstance(body, bytes | bytearray):
        return
    if any(tag in body for tag in _BINARY_TAGS):
        return
    try:
        page = json.loads(body)
    except ValueError:
        return
    if not isinstance(page, dict) or not isinstance(page.get("Items"), list):
        return
    customized_response_dict["Items"] = page.pop("Items")
    response_dict["body"] = json.dumps(page).encode()


# --- the client ---------------------------------------------------------------------------------------


_session: boto3.session.Session | None = None


def _shared_session() -> boto3.session.Session:
    """One boto3 session per process: it caches the service model, so each new client (tests make many)
    costs milliseconds instead of re-reading the model. Clients are created on the caller's thread."""
    global _session
    if _session is None:
        _session = boto3.session.Session()
    return _session


def _captured(method: Callable[..., dict[str, Any]], kwargs: dict[str, Any]) -> tuple[Any, Exception | None]:
    """``method(**kwargs)`` in the worker thread, its exception returned rather than raised.

    An exception's traceback holds the frames it went through, each frame its caller (``f_back``, up to the
    thread's job loop) and their locals, among them the outcome that carries the exception back: a reference
    cycle of ~130 objects that only the garbage collector can free, for every refused conditional write (a
    lock held by another instance, a claim already made), several a second on a busy instance. A
    ``ClientError`` is DynamoDB's answer, not a bug, and where inside botocore it was raised tells nothing:
    it comes back without that traceback, and ``Dynamo.call`` re-raises it without keeping a reference, so
    it is freed as soon as its caller is done with it. Any other exception keeps its traceback (it may be
    a bug worth the stack)."""
    try:
        return method(**kwargs), None
    except ClientError as exc:
        return None, exc.with_traceback(None)
    except Exception as exc:  # noqa: BLE001 - handed back and re-raised as it was
        return None, exc


class Dynamo:
    """One DynamoDB client for the process (or one per test)."""

    def __init__(self, settings: DynamoSettings) -> None:
        self.settings = settings
        config = Config(
            region_name=settings.region,
            retries={"mode": settings.retry_mode, "total_max_attempts": settings.max_attempts},
            connect_timeout=settings.connect_timeout_s,
            read_timeout=settings.read_timeout_s,
            # one pooled connection per worker thread, so threads never wait on the pool
            max_pool_connections=settings.max_threads + settings.lease_threads,
        )
        session = _shared_session()
        key_id = secret = None  # None: boto3's own credential chain
        if settings.endpoint_url and session.get_credentials() is None:
            # a local peer (moto, dynalite) accepts any key; AWS's own endpoint never gets here
            key_id = secret = "local"
        self.client: Any = session.client(
            "dynamodb",
            endpoint_url=settings.endpoint_url,
            region_name=settings.region,
            config=config,
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
        )
        for operation in RAW_PAGE_OPERATIONS:
            self.client.meta.events.register(f"before-parse.dynamodb.{operation}", _items_as_sent)
        self._limiter = trio.CapacityLimiter(settings.max_threads)
        # Lease renewals run on threads of their own: with DynamoDB slow, the bulk lane fills up with reads
        # and writes that each take seconds, and a renewal queued behind them would land after its lease.
        self._lease_limiter = trio.CapacityLimiter(settings.lease_threads)
        self._api_names: dict[str, str] = dict(self.client.meta.method_to_api_mapping)
        self._snake_names: dict[str, str] = {api: snake for snake, api in self._api_names.items()}

    def table(self, logical: str) -> str:
        """The physical table name of a logical one (``active-matches`` -> ``{prefix}active-matches``)."""
        return f"{self.settings.table_prefix}{logical}"

    def close(self) -> None:
        self.client.close()

    def _resolve(self, operation: str) -> tuple[str, str]:
        if operation in self._api_names:
            return operation, self._api_names[operation]
        if operation in self._snake_names:
            return self._snake_names[operation], operation
        raise ValueError(f"unknown DynamoDB operation {operation!r}")

    async def call(
        self, logical_table: str, operation: str, *, lane: Lane = "bulk", **kwargs: Any
    ) -> dict[str, Any]:
        """``client.<operation>(TableName=<physical>, **kwargs)`` in a worker thread.

        ``operation`` is the method (``put_item``) or API name (``PutItem``). Operations without a
        ``TableName`` parameter (batches, ``list_tables``) get none; ``logical_table`` then only labels
        the metrics. ``lane`` "lease" runs the call on the threads kept for taking and renewing leases.
        Raises botocore's ``ClientError`` as it is.
        """
        method_name, api_name = self._resolve(operation)
        members = self.client.meta.service_model.operation_model(api_name).input_shape.members
        if "TableName" in members and "TableName" not in kwargs:
            kwargs["TableName"] = self.table(logical_table)
        method: Callable[..., dict[str, Any]] = getattr(self.client, method_name)
        DYNAMODB_CALLS.labels(table=logical_table, operation=api_name).inc()
        for counter in _counters.get():
            counter.n += 1
        limiter = self._lease_limiter if lane == "lease" else self._limiter
        # A cancelled caller does not wait for its call: the thread finishes on its own (its slot in the
        # limiter with it) and its answer is dropped. Every write the daemon makes is safe to leave in that
        # unknown state, as a crash would (conditional, fenced, idempotent), and without this a caller that
        # must stop (a lost lease, a SIGTERM) would wait out botocore's timeouts and retries first.
        response, error = await trio.to_thread.run_sync(
            _captured, method, kwargs, limiter=limiter, abandon_on_cancel=True
        )
        if error is None:
            return response  # type: ignore[no-any-return]
        try:
            if isinstance(error, ClientError):
                code = error.response.get("Error", {}).get("Code", "Unknown")
                if code != CONDITIONAL_CHECK_FAILED:
                    DYNAMODB_ERRORS.labels(table=logical_table, operation=api_name, code=code).inc()
            raise error
        finally:
            del error  # this frame is in the error's traceback: holding it here would make a reference cycle

    # --- pagination -----------------------------------------------------------------------------------

    async def paginate(
        self,
        logical_table: str,
        operation: str,
        *,
        max_items: int | None = None,
        transform: Callable[[dict[str, Any]], Any] | None = None,
        **kwargs: Any,
    ) -> list[Any]:
        """Every raw item of a Query or Scan, following ``LastEvaluatedKey`` until the end.

        A page may be empty and still have a next page (``Limit`` counts items before the filter), so the
        loop ends only when there is no ``LastEvaluatedKey`` - or once ``max_items`` items are in hand.
        ``transform`` is applied to each item as its page arrives, so a raw page is dropped before the
        next one is read (10,000 raw items cost several times their decoded size).
        """
        items: list[Any] = []
        while True:
            resp = await self.call(logical_table, operation, **kwargs)
            page = resp.pop("Items", [])
            items.extend(page if transform is None else map(transform, page))
            del page
            if max_items is not None and len(items) >= max_items:
                return items[:max_items]
            lek = resp.get("LastEvaluatedKey")
            if not lek:
                return items
            kwargs["ExclusiveStartKey"] = lek

    # --- batches --------------------------------------------------------------------------------------

    async def _in_batches(
        self,
        logical_table: str,
        operation: str,
        requests: Sequence[Mapping[str, Any]],
        size: int,
        send: Callable[[list[Mapping[str, Any]]], Awaitable[list[Mapping[str, Any]]]],
    ) -> int:
        """Send ``requests`` ``size`` at a time through ``send``, which returns what DynamoDB left
        unprocessed: that goes to the front of the queue and is resent after a backoff (full jitter, growing
        while calls keep leaving requests behind). Returns the number of calls made; raises
        ``BatchIncomplete`` once ``batch_deadline_s`` has passed with requests still unprocessed."""
        s = self.settings
        pending: deque[Mapping[str, Any]] = deque(requests)
        deadline = trio.current_time() + s.batch_deadline_s
        retry = 0
        calls = 0
        while pending:
            chunk = [pending.popleft() for _ in range(min(size, len(pending)))]
            unprocessed = await send(chunk)
            calls += 1
            if not unprocessed:
                retry = 0
                continue
            pending.extendleft(reversed(unprocessed))
            if trio.current_time() >= deadline:
                raise BatchIncomplete(logical_table, operation, len(pending), s.batch_deadline_s)
            log.info("dynamodb.unprocessed", table=logical_table, operation=operation, n=len(unprocessed))
            retry += 1
            await trio.sleep(
                backoff_delay(retry, base_s=s.batch_backoff_base_s, cap_s=s.batch_backoff_max_s, jitter=1.0)
            )
        return calls

    async def batch_write(self, logical_table: str, requests: Sequence[Mapping[str, Any]]) -> int:
        """BatchWriteItem of raw write requests (``{"PutRequest": ...}``/``{"DeleteRequest": ...}``).

        Sends 25 per call; whatever comes back unprocessed goes to the front of the queue and is resent
        after a backoff. Returns the number of calls made. Raises ``BatchIncomplete`` at the deadline.
        Callers must not put two requests for one key in the list (DynamoDB rejects such a call).
        """
        table = self.table(logical_table)

        async def send(chunk: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
            resp = await self.call(logical_table, "batch_write_item", RequestItems={table: chunk})
            unprocessed: list[Mapping[str, Any]] = resp.get("UnprocessedItems", {}).get(table, [])
            return unprocessed

        return await self._in_batches(logical_table, "BatchWriteItem", requests, BATCH_WRITE_MAX, send)

    async def batch_get(
        self,
        logical_table: str,
        keys: Sequence[Mapping[str, Any]],
        *,
        projection: str | None = None,
        names: Mapping[str, str] | None = None,
        consistent: bool = False,
    ) -> list[dict[str, Any]]:
        """BatchGetItem of raw keys, 100 per call, retrying ``UnprocessedKeys`` with backoff.

        Returns the raw items found (missing keys are simply absent). Raises ``BatchIncomplete`` at the
        deadline. Callers must not pass a key twice (DynamoDB rejects such a call).
        """
        table = self.table(logical_table)
        found: list[dict[str, Any]] = []

        async def send(chunk: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
            request: dict[str, Any] = {"Keys": chunk, "ConsistentRead": consistent}
            if projection:
                request["ProjectionExpression"] = projection
            if names:
                request["ExpressionAttributeNames"] = dict(names)
            resp = await self.call(logical_table, "batch_get_item", RequestItems={table: request})
            found.extend(resp.get("Responses", {}).get(table, []))
            left: dict[str, Any] = resp.get("UnprocessedKeys", {}).get(table, {})
            unprocessed: list[Mapping[str, Any]] = left.get("Keys", [])
            return unprocessed

        await self._in_batches(logical_table, "BatchGetItem", keys, BATCH_GET_MAX, send)
        return found
