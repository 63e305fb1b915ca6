"""What every repository shares: its table spec, the clock, typed reads/writes, and TTL filtering.

Owns the translation of plain-dict reads and writes into DynamoDB calls for one table, and the rule that
expired items are invisible: DynamoDB deletes TTL-expired items up to two days late (and local peers never
do), so every read of a table with a TTL filters them itself - server-side with a FilterExpression on
Query/Scan, client-side on GetItem/BatchGetItem. An item without the TTL attribute never expires.
It does not know any access pattern; those live in the per-table modules.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from botocore.exceptions import ClientError

from daemon.store.codec import from_item, to_attr, to_item
from daemon.store.dynamo import Dynamo, Lane, is_condition_failed
from daemon.store.tables import TABLE_SPECS, TableSpec

Clock = Callable[[], float]
"""Wall-clock epoch seconds; injectable so expiry is tested without sleeping."""

Item = dict[str, Any]


class Repository:
    """Base for one repository per table."""

    logical: str = ""

    def __init__(self, dynamo: Dynamo, *, clock: Clock = time.time) -> None:
        self.dynamo = dynamo
        self.clock = clock
        self.spec: TableSpec = TABLE_SPECS[self.logical]

    # --- helpers ----------------------------------------------------------------------------------------

    def _now(self, now: float | None) -> float:
        return self.clock() if now is None else now

    def _key(self, *values: str) -> dict[str, Any]:
        names = self.spec.key.attributes()
        if len(values) != len(names):
            raise ValueError(f"{self.logical}: key needs {names}, got {len(values)} value(s)")
        key: dict[str, Any] = {}
        for name, value in zip(names, values, strict=True):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name}: must be a non-empty string, got {value!r}")
            key[name] = {"S": value}
        return key

    def _key_of(self, item: Mapping[str, Any]) -> tuple[str, ...]:
        out = []
        for name in self.spec.key.attributes():
            value = item.get(name)
            if not isinstance(value, str) or not value:
                raise ValueError(
                    f"{name}: every {self.logical} item needs a non-empty string {name}, got {value!r}"
                )
            out.append(value)
        return tuple(out)

    def _alive(self, item: Mapping[str, Any], now: float) -> bool:
        attr = self.spec.ttl_attribute
        if attr is None:
            return True
        expires = item.get(attr)
        # a non-numeric TTL attribute is ignored by DynamoDB's TTL too
        return not isinstance(expires, int | float) or isinstance(expires, bool) or expires > now

    def _ttl_filter(self, now: float) -> tuple[str, dict[str, str], dict[str, Any]] | None:
        attr = self.spec.ttl_attribute
        if attr is None:
            return None
        return (
            "(attribute_not_exists(#ttl_attr) OR #ttl_attr > :ttl_now)",
            {"#ttl_attr": attr},
            {":ttl_now": to_attr(now)},
        )

    # --- single-item operations ---------------------------------------------------------------------------

    async def _get(
        self, *key: str, consistent: bool = False, now: float | None = None, lane: Lane = "bulk"
    ) -> Item | None:
        resp = await self.dynamo.call(
            self.logical, "get_item", lane=lane, Key=self._key(*key), ConsistentRead=consistent
        )
        raw = resp.get("Item")
        if raw is None:
            return None
        item = from_item(raw)
        return item if self._alive(item, self._now(now)) else None

    async def _put(self, item: Mapping[str, Any], *, condition: str | None = None, **kwargs: Any) -> bool:
        """PutItem; with a condition, False when it failed."""
        ok, _ = await self._put_or_old(item, condition=condition, **kwargs)
        return ok

    async def _put_or_old(
        self, item: Mapping[str, Any], *, condition: str | None = None, **kwargs: Any
    ) -> tuple[bool, Item | None]:
        """PutItem; on a failed condition (False, the item as it is), read from the error response
        (``ReturnValuesOnConditionCheckFailure=ALL_OLD``, no second call)."""
        self._key_of(item)
        params: dict[str, Any] = {"Item": to_item(item), **kwargs}
        if condition:
            params["ConditionExpression"] = condition
            params["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        try:
            await self.dynamo.call(self.logical, "put_item", **params)
        except ClientError as exc:
            if is_condition_failed(exc):
                old = exc.response.get("Item")
                if not isinstance(old, dict):
                    # a peer that ignores ReturnValuesOnConditionCheckFailure (dynalite): read it instead
                    return False, await self._get(*self._key_of(item), consistent=True)
                return False, from_item(old)
            raise
        return True, None

    async def _update(
        self, key: dict[str, Any], update: dict[str, Any], *, lane: Lane = "bulk", **kwargs: Any
    ) -> dict[str, Any] | None:
        """UpdateItem; returns the response, or None when the condition failed."""
        try:
            return await self.dynamo.call(self.logical, "update_item", Key=key, lane=lane, **update, **kwargs)
        except ClientError as exc:
            if is_condition_failed(exc):
                return None
            raise

    async def _delete(
        self, key: dict[str, Any], *, condition: str | None = None, **kwargs: Any
    ) -> tuple[bool, Item | None]:
        """DeleteItem returning the old item; (False, None) when the condition failed."""
        params: dict[str, Any] = {"Key": key, "ReturnValues": "ALL_OLD", **kwargs}
        if condition:
            params["ConditionExpression"] = condition
        try:
            resp = await self.dynamo.call(self.logical, "delete_item", **params)
        except ClientError as exc:
            if is_condition_failed(exc):
                return False, None
            raise
        old = resp.get("Attributes")
        return True, (from_item(old) if old else None)

    # --- multi-item operations ----------------------------------------------------------------------------

    async def _query_or_scan(
        self,
        operation: str,
        *,
        filter_expression: str | None = None,
        names: Mapping[str, str] | None = None,
        values: Mapping[str, Any] | None = None,
        now: float | None = None,
        max_items: int | None = None,
        include_expired: bool = False,
        fields: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> list[Item]:
        """Every page of a Query or Scan, expired items filtered out server-side; ``fields``: only those
        attributes come back (a ProjectionExpression: less to read, parse and hold)."""
        names = dict(names or {})
        if fields:
            for i, attr in enumerate(fields):
                names[f"#f{i}"] = attr
            kwargs["ProjectionExpression"] = ", ".join(f"#f{i}" for i in range(len(fields)))
        raw_values = {k: to_attr(v, k) for k, v in (values or {}).items()}
        filters = [f"({filter_expression})"] if filter_expression else []
        ttl = None if include_expired else self._ttl_filter(self._now(now))
        if ttl is not None:
            filters.append(ttl[0])
            names.update(ttl[1])
            raw_values.update(ttl[2])
        if filters:
            kwargs["FilterExpression"] = " AND ".join(filters)
        if names:
            kwargs["ExpressionAttributeNames"] = names
        if raw_values:
            kwargs["ExpressionAttributeValues"] = raw_values
        return await self.dynamo.paginate(
            self.logical, operation, max_items=max_items, transform=from_item, **kwargs
        )

    async def _query(self, key_condition: str, *, index: str | None = None, **kwargs: Any) -> list[Item]:
        """Query every page; ``key_condition`` uses ``names``/``values`` placeholders."""
        if index is not None:
            kwargs["IndexName"] = index
        return await self._query_or_scan("query", KeyConditionExpression=key_condition, **kwargs)

    async def _scan(self, **kwargs: Any) -> list[Item]:
        return await self._query_or_scan("scan", **kwargs)

    async def _batch_put(self, items: Iterable[Mapping[str, Any]]) -> int:
        """BatchWriteItem puts (25 a call, unprocessed retried). A key given twice keeps the last item,
        since DynamoDB rejects a batch naming one key twice. Returns the number of items written."""
        by_key: dict[tuple[str, ...], dict[str, Any]] = {}
        for item in items:
            by_key[self._key_of(item)] = to_item(item)
        await self.dynamo.batch_write(self.logical, [{"PutRequest": {"Item": it}} for it in by_key.values()])
        return len(by_key)

    async def import_items(self, items: Iterable[Mapping[str, Any]]) -> int:
        """Bulk load whole items, overwriting (BatchWriteItem, 25 a call): for migrations from the legacy
        backend and for seeding local clusters. Not an access pattern of the daemon itself."""
        return await self._batch_put(items)

    async def _batch_delete(self, keys: Iterable[Sequence[str]]) -> int:
        unique = list(dict.fromkeys(tuple(k) for k in keys))
        await self.dynamo.batch_write(
            self.logical, [{"DeleteRequest": {"Key": self._key(*k)}} for k in unique]
        )
        return len(unique)

    async def _batch_get(self, keys: Iterable[Sequence[str]], *, now: float | None = None) -> list[Item]:
        unique = list(dict.fromkeys(tuple(k) for k in keys))
        raw = await self.dynamo.batch_get(self.logical, [self._key(*k) for k in unique])
        t = self._now(now)
        return [item for item in (from_item(r) for r in raw) if self._alive(item, t)]
