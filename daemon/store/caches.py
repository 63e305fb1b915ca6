"""The two cache tables: ``DisplayStateCache`` and ``cricket-fixture-cache``.

``DisplayStateCache``: key attribute ``matchId`` holding ``DISPLAY#{matchId}#{teamId}`` (the seed's cache
key), ``displayState`` (the map the Live Activity shows), ``updatedAt``, ``ttl``. A read past ``ttl`` is a
miss even before DynamoDB deletes the item (the seed's client-side TTL validation).

``cricket-fixture-cache``: ``matchId`` (key), ``leagueId`` + ``startingAt`` (the
``leagueId-startingAt-index`` GSI keys, strings), ``rawFixture``, ``rawEncoding``, ``cachedAt``, ``ttl``.
``rawFixture`` is the SportMonks fixture as gzip-compressed JSON in a Binary attribute
(``rawEncoding = "gzip+json"``): a fixture with all its balls can approach DynamoDB's 400 KB item limit
and holds floats that DynamoDB's number type would turn into Decimals; compressed JSON is about a tenth
of the size and gives back exactly the JSON that was stored. A fixture still too large after compression
is refused with a clear error rather than failing the whole batch.

Neither cache owns the data it caches; the Feed and the match engine decide what and when.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from daemon.store.base import Repository
from daemon.store.codec import iso
from daemon.store.tables import DISPLAY_STATE_CACHE, FIXTURE_CACHE, FIXTURE_CACHE_BY_LEAGUE_INDEX

RAW_ENCODING = "gzip+json"
# 400 KB is the item limit including attribute names and the other attributes; keep a margin for them.
MAX_COMPRESSED_FIXTURE_BYTES = 390_000


def display_cache_key(match_id: str, team_id: str) -> str:
    return f"DISPLAY#{match_id}#{team_id}"


def encode_raw_fixture(raw: Mapping[str, Any], match_id: str = "?") -> bytes:
    data = gzip.compress(json.dumps(raw, separators=(",", ":"), allow_nan=False).encode(), compresslevel=6)
    if len(data) > MAX_COMPRESSED_FIXTURE_BYTES:
        raise ValueError(
            f"rawFixture of match {match_id}: {len(data)} bytes compressed exceeds {MAX_COMPRESSED_FIXTURE_BYTES}"
        )
    return data


def decode_raw_fixture(item: Mapping[str, Any]) -> dict[str, Any]:
    raw = item.get("rawFixture")
    encoding = item.get("rawEncoding", RAW_ENCODING)
    if encoding != RAW_ENCODING or not isinstance(raw, bytes):
        raise ValueError(f"rawFixture of match {item.get('matchId')}: unsupported encoding {encoding!r}")
    out: dict[str, Any] = json.loads(gzip.decompress(raw))
    return out


class DisplayStateCacheRepository(Repository):
    logical = DISPLAY_STATE_CACHE

    async def get_cached_display_state(
        self, match_id: str, team_id: str, *, now: float | None = None
    ) -> dict[str, Any] | None:
        """The cached display state, or None when absent or past its ``ttl``."""
        item = await self._get(display_cache_key(match_id, team_id), now=now)
        if item is None:
            return None
        state: dict[str, Any] = item.get("displayState") or {}
        return state

    async def set_cached_display_state(
        self, match_id: str, team_id: str, display_state: Mapping[str, Any], *, ttl_s: float,
        now: float | None = None,
    ) -> None:
        t = self._now(now)
        await self._put(
            {
                "matchId": display_cache_key(match_id, team_id),
                "displayState": dict(display_state),
                "updatedAt": iso(t),
                "ttl": int(t + ttl_s),
            }
        )


DEFAULT_FIXTURE_CACHE_TTL_S = 3600.0
"""TTL of a cached fixture when the caller gives none (the Feed passes shorter ones for live matches)."""

TtlPolicy = float | Callable[[Mapping[str, Any]], float]


class FixtureCacheRepository(Repository):
    logical = FIXTURE_CACHE

    def _item(
        self, match_id: str, raw: Mapping[str, Any], league_id: str | None, starting_at: str | None,
        ttl_s: float, t: float,
    ) -> dict[str, Any]:
        item: dict[str, Any] = {
            "matchId": match_id,
            "rawFixture": encode_raw_fixture(raw, match_id),
            "rawEncoding": RAW_ENCODING,
            "cachedAt": iso(t),
            "ttl": int(t + ttl_s),
        }
        # GSI keys must be non-empty strings when present; an item without them is simply not indexed
        if league_id:
            item["leagueId"] = str(league_id)
        if starting_at:
            item["startingAt"] = str(starting_at)
        return item

    async def get_cached_fixture(self, match_id: str, *, now: float | None = None) -> dict[str, Any] | None:
        """The raw SportMonks fixture as it was stored, or None when absent or expired."""
        item = await self._get(match_id, now=now)
        return None if item is None else decode_raw_fixture(item)

    async def batch_get_cached_fixtures(
        self, match_ids: Iterable[str], *, now: float | None = None
    ) -> dict[str, dict[str, Any]]:
        """Raw fixtures found, by matchId (BatchGetItem in 100s, unprocessed keys retried)."""
        items = await self._batch_get(((m,) for m in match_ids), now=now)
        return {it["matchId"]: decode_raw_fixture(it) for it in items}

    async def get_fixtures_by_league(self, league_id: str, *, now: float | None = None) -> list[dict[str, Any]]:
        """A league's unexpired raw fixtures by start time (GSI Query with ``ttl > :now``)."""
        items = await self._query(
            "#lid = :lid", index=FIXTURE_CACHE_BY_LEAGUE_INDEX, names={"#lid": "leagueId"},
            values={":lid": str(league_id)}, now=now,
        )
        return [decode_raw_fixture(it) for it in items]

    async def get_all_cached_fixtures(self, *, now: float | None = None) -> list[dict[str, Any]]:
        """Every unexpired raw fixture (Scan, every page)."""
        return [decode_raw_fixture(it) for it in await self._scan(now=now)]

    async def put_single_fixture(
        self, match_id: str, raw_fixture: Mapping[str, Any], *, league_id: str | None, starting_at: str | None,
        ttl_s: float, now: float | None = None,
    ) -> None:
        await self._put(self._item(match_id, raw_fixture, league_id, starting_at, ttl_s, self._now(now)))

    async def batch_put_fixtures(
        self,
        items: Iterable[Mapping[str, Any]],
        *,
        ttl_s: TtlPolicy = DEFAULT_FIXTURE_CACHE_TTL_S,
        now: float | None = None,
    ) -> int:
        """Cache many fixtures (BatchWriteItem in 25s, unprocessed retried); returns how many were written.

        Each item is either a raw SportMonks fixture (keys from its ``id``, ``league_id``, ``starting_at``)
        or an envelope ``{"matchId", "rawFixture", "leagueId"?, "startingAt"?, "ttl_s"?}``. ``ttl_s`` is
        seconds or a function of the raw fixture (live matches get shorter TTLs); an envelope's own
        ``ttl_s`` wins."""
        t = self._now(now)
        out = []
        for i, item in enumerate(items):
            if "rawFixture" in item:
                raw = item["rawFixture"]
                match_id, league, starting = item.get("matchId"), item.get("leagueId"), item.get("startingAt")
                where = f"items[{i}].matchId"
            else:
                raw = item
                match_id, league, starting = item.get("id"), item.get("league_id"), item.get("starting_at")
                where = f"items[{i}].id"
            if match_id is None or isinstance(match_id, bool) or str(match_id) == "":
                raise ValueError(f"{where}: missing; every cached fixture needs its SportMonks id")
            if not isinstance(raw, Mapping):
                raise ValueError(f"items[{i}].rawFixture: must be a JSON object, got {type(raw).__name__}")
            own_ttl = item.get("ttl_s") if "rawFixture" in item else None
            ttl = own_ttl if own_ttl is not None else (ttl_s(raw) if callable(ttl_s) else ttl_s)
            out.append(
                self._item(
                    str(match_id), raw, None if league is None else str(league),
                    None if starting is None else str(starting), float(ttl), t,
                )
            )
        return await self._batch_put(out)
