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

The region's feed leader writes its fixtures fenced (``put_fixtures_fenced``): one TransactWriteItems per
batch, a ConditionCheck on its ``feed:{region}`` lease (owner, epoch, not run out) beside the puts, so a
leader that lost its lease writes nothing. Each such item carries its change stamp: ``feedEpoch`` (the
leader's lease epoch), ``feedSeq`` (that leader's write counter) and ``fetchedAt`` (epoch seconds when the
leader received it from SportMonks); readers compare the stamp to know whether anything changed. The item
``livescores:{region}`` holds the leader's last ``/livescores`` answer in short (id, status, league,
start per fixture) for the instances that do not lead, the leader's state (``feedState``: call record and
404 verdicts) and, apart, the 404 verdicts alone (``feedNotFound``, small): followers read that attribute
with their fixtures' change stamps on every read (``batch_get_region_stamps``), so a fixture the leader
released is let go everywhere within one read.

Neither cache owns the data it caches; the Feed and the match engine decide what and when.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from daemon.logs import get_logger
from daemon.store.base import Repository
from daemon.store.codec import from_item, iso, to_item
from daemon.store.dynamo import TRANSACT_MAX_ACTIONS, StoreError, cancellation_codes
from daemon.store.tables import DISPLAY_STATE_CACHE, FIXTURE_CACHE, FIXTURE_CACHE_BY_LEAGUE_INDEX

log = get_logger("daemon.store")

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
        self,
        match_id: str,
        team_id: str,
        display_state: Mapping[str, Any],
        *,
        ttl_s: float,
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


def livescores_cache_key(region: str) -> str:
    """The cache item holding the region leader's last ``/livescores`` answer in short."""
    return f"livescores:{region}"


# TransactWriteItems takes at most 100 actions and 4 MB: one action is the lease's ConditionCheck.
TRANSACT_MAX_PUTS = TRANSACT_MAX_ACTIONS - 1
TRANSACT_MAX_BYTES = 3_500_000


@dataclass(frozen=True)
class CacheEntry:
    """One ``cricket-fixture-cache`` item as a reader sees it: the stamp, and the fixture still encoded (a
    reader decodes only what changed)."""

    match_id: str
    epoch: int
    seq: int
    fetched_at: float
    source: str
    in_livescores: bool
    item: Mapping[str, Any]

    @property
    def stamp(self) -> tuple[int, int]:
        return (self.epoch, self.seq)

    def fixture(self) -> dict[str, Any]:
        return decode_raw_fixture(self.item)


@dataclass(frozen=True)
class LivescoresSummary:
    """The feed leader's ``/livescores`` in short for a region, written after (or with) the poll's fixtures."""

    region: str
    fixtures: Sequence[Mapping[str, Any]]
    fetched_at: float
    ttl_s: float
    state: Mapping[str, Any] | None = None  # the leader's call record and 404 verdicts (``feedState``)


@dataclass(frozen=True)
class CachePut:
    """A fixture the feed hands to its cache sink: what, from where, when it was fetched, and (once the
    feed leader's fenced cache stamps it) its change stamp's write counter."""

    match_id: str
    fixture: Mapping[str, Any]
    ttl_s: float
    fetched_at: float
    source: str = "livescores"
    in_livescores: bool = True
    seq: int = 0


@dataclass(frozen=True)
class RegionStamps:
    """One follower read: the change stamps of its matches and the leader's latest 404 verdicts."""

    stamps: dict[str, tuple[int, int, float]]  # match id -> (feedEpoch, feedSeq, fetchedAt)
    not_found: dict[str, Any] | None  # ``FeedActor.not_found_state``'s shape; None when absent or unreadable
    polled_at: float | None = None  # the summary's fetchedAt: the leader's last /livescores poll


class FenceLost(StoreError):
    """A fenced write was refused: the lease it carried no longer holds (another leader, or run out)."""


DEFAULT_FIXTURE_CACHE_TTL_S = 3600.0
"""TTL of a cached fixture when the caller gives none (the Feed passes shorter ones for live matches)."""

TtlPolicy = float | Callable[[Mapping[str, Any]], float]


class FixtureCacheRepository(Repository):
    logical = FIXTURE_CACHE

    def _item(
        self,
        match_id: str,
        raw: Mapping[str, Any],
        league_id: str | None,
        starting_at: str | None,
        ttl_s: float,
        t: float,
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

    async def get_fixtures_by_league(
        self, league_id: str, *, now: float | None = None
    ) -> list[dict[str, Any]]:
        """A league's unexpired raw fixtures by start time (GSI Query with ``ttl > :now``)."""
        items = await self._query(
            "#lid = :lid",
            index=FIXTURE_CACHE_BY_LEAGUE_INDEX,
            names={"#lid": "leagueId"},
            values={":lid": str(league_id)},
            now=now,
        )
        return [decode_raw_fixture(it) for it in items]

    async def get_all_cached_fixtures(self, *, now: float | None = None) -> list[dict[str, Any]]:
        """Every unexpired raw fixture (Scan, every page)."""
        return [decode_raw_fixture(it) for it in await self._scan(now=now)]

    async def put_single_fixture(
        self,
        match_id: str,
        raw_fixture: Mapping[str, Any],
        *,
        league_id: str | None,
        starting_at: str | None,
        ttl_s: float,
        fetched_at: float | None = None,
        source: str = "livescores",
        in_livescores: bool = True,
        now: float | None = None,
    ) -> None:
        """Cache one fixture, unfenced (a single instance's feed; the fleet's leader uses
        ``put_fixtures_fenced``)."""
        t = self._now(now)
        item = self._item(match_id, raw_fixture, league_id, starting_at, ttl_s, t)
        item.update(
            fetchedAt=t if fetched_at is None else fetched_at, source=source, inLivescores=in_livescores
        )
        await self._put(item)

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
                    str(match_id),
                    raw,
                    None if league is None else str(league),
                    None if starting is None else str(starting),
                    float(ttl),
                    t,
                )
            )
        return await self._batch_put(out)

    # --- the region feed leader's fenced writes and the readers' side ----------------------------------------

    def _fenced_item(self, put: CachePut, epoch: int, t: float) -> dict[str, Any]:
        league = put.fixture.get("league_id")
        starting = put.fixture.get("starting_at")
        item = self._item(
            put.match_id,
            put.fixture,
            None if league is None else str(league),
            None if starting is None else str(starting),
            put.ttl_s,
            t,
        )
        item.update(
            feedEpoch=epoch,
            feedSeq=put.seq,
            fetchedAt=put.fetched_at,
            source=put.source,
            inLivescores=put.in_livescores,
        )
        return item

    async def put_fixtures_fenced(
        self,
        puts: Sequence[CachePut],
        condition: Callable[[], dict[str, Any]],
        epoch: int,
        *,
        summary: LivescoresSummary | None = None,
        now: float | None = None,
    ) -> int:
        """Write ``puts`` in TransactWriteItems of at most 99 items, each beside ``condition()`` (the lease's
        ConditionCheck, see ``LockRepository.lease_condition``), and ``summary`` (the poll's ``/livescores``
        in short) in the last of them: a poll's fixtures and its summary are one transaction when they fit,
        so a reader that sees the summary sees every fixture of that poll. Raises ``FenceLost`` when the
        lease no longer holds: nothing of that transaction is written. Returns how many fixtures were
        written."""
        t = self._now(now)
        table = self.dynamo.table(self.logical)
        chunks: list[list[dict[str, Any]]] = [[]]
        size = 0
        for put in puts:
            item = to_item(self._fenced_item(put, epoch, t))
            n = len(item["rawFixture"]["B"]) + 512
            if chunks[-1] and (len(chunks[-1]) >= TRANSACT_MAX_PUTS or size + n > TRANSACT_MAX_BYTES):
                chunks.append([])
                size = 0
            chunks[-1].append({"Put": {"TableName": table, "Item": item}})
            size += n
        if summary is not None:
            item = to_item(self._summary_item(summary, epoch, t))
            n = len(item["rawFixture"]["B"]) + len(item.get("feedState", {}).get("S", "")) + 512
            if chunks[-1] and (len(chunks[-1]) >= TRANSACT_MAX_PUTS or size + n > TRANSACT_MAX_BYTES):
                chunks.append([])
            chunks[-1].append({"Put": {"TableName": table, "Item": item}})
        written = 0
        for chunk in chunks:
            if not chunk:
                continue
            try:
                await self.dynamo.call(
                    self.logical, "transact_write_items", TransactItems=[condition(), *chunk]
                )
            except ClientError as exc:
                codes = cancellation_codes(exc)
                if codes is not None and (codes or [None])[0] in ("ConditionalCheckFailed", None):
                    raise FenceLost(f"the feed lease no longer holds (epoch {epoch})") from None
                raise
            written += len(chunk)
        return written - (summary is not None)

    def _summary_item(self, summary: LivescoresSummary, epoch: int, t: float) -> dict[str, Any]:
        key = livescores_cache_key(summary.region)
        item = {
            "matchId": key,
            "rawFixture": encode_raw_fixture({"data": list(summary.fixtures)}, key),
            "rawEncoding": RAW_ENCODING,
            "cachedAt": iso(t),
            "ttl": int(t + summary.ttl_s),
            "feedEpoch": epoch,
            "fetchedAt": summary.fetched_at,
        }
        state = summary.state
        if state is not None:
            item["feedState"] = json.dumps(state, separators=(",", ":"))
            if state.get("notFound") is not None:
                item["feedNotFound"] = json.dumps(state["notFound"], separators=(",", ":"), sort_keys=True)
        return item

    async def put_livescores_summary(
        self,
        region: str,
        summary: Sequence[Mapping[str, Any]],
        fetched_at: float,
        condition: Callable[[], dict[str, Any]],
        epoch: int,
        *,
        ttl_s: float,
        now: float | None = None,
        state: Mapping[str, Any] | None = None,
    ) -> None:
        """The leader's last ``/livescores`` in short, fenced like the fixtures; ``state`` (JSON-able: the
        leader's call record and 404 verdicts) rides along as ``feedState``."""
        await self.put_fixtures_fenced(
            [],
            condition,
            epoch,
            summary=LivescoresSummary(region, summary, fetched_at, ttl_s, state),
            now=now,
        )

    async def get_livescores_summary(
        self, region: str, *, now: float | None = None
    ) -> tuple[list[dict[str, Any]], float] | None:
        """(the leader's last ``/livescores`` in short, when it was fetched), or None when absent."""
        item = await self._get(livescores_cache_key(region), now=now)
        if item is None:
            return None
        data: list[dict[str, Any]] = decode_raw_fixture(item).get("data") or []
        return data, float(item.get("fetchedAt", 0.0))

    async def get_livescores_summary_and_state(
        self, region: str, *, now: float | None = None
    ) -> tuple[list[dict[str, Any]], float, dict[str, Any]] | None:
        """``get_livescores_summary`` and the ``feedState`` the leader wrote with it ({} when absent or
        unreadable: a bad state is logged and ignored, the summary still served)."""
        item = await self._get(livescores_cache_key(region), now=now)
        if item is None:
            return None
        data: list[dict[str, Any]] = decode_raw_fixture(item).get("data") or []
        state: dict[str, Any] = {}
        if item.get("feedState"):
            try:
                loaded = json.loads(str(item["feedState"]))
                if not isinstance(loaded, dict):
                    raise ValueError("not an object")
                state = loaded
            except ValueError as exc:
                log.warning("feed_state_unreadable", region=region, error=str(exc))
        return data, float(item.get("fetchedAt", 0.0)), state

    async def batch_get_stamps(
        self, match_ids: Iterable[str], *, now: float | None = None
    ) -> dict[str, tuple[int, int, float]]:
        """Only the change stamps of ``match_ids`` (``feedEpoch``, ``feedSeq``, ``fetchedAt``): a
        ProjectionExpression, so a read that finds nothing new moves a few bytes, not the fixtures."""
        return (await self._stamps(match_ids, None, now)).stamps

    async def batch_get_region_stamps(
        self, match_ids: Iterable[str], region: str, *, now: float | None = None
    ) -> RegionStamps:
        """``batch_get_stamps`` and, in the same BatchGetItem, the 404 verdicts the region's leader wrote with
        its last summary (``feedNotFound``) and when that poll was (the summary's ``fetchedAt``): a
        follower's read each tick."""
        return await self._stamps(match_ids, region, now)

    async def _stamps(self, match_ids: Iterable[str], region: str | None, now: float | None) -> RegionStamps:
        unique = list(dict.fromkeys(match_ids))
        summary_key = None if region is None else livescores_cache_key(region)
        keys = unique if summary_key is None else [*unique, summary_key]
        if not keys:
            return RegionStamps({}, None)
        names = {"#m": "matchId", "#e": "feedEpoch", "#s": "feedSeq", "#f": "fetchedAt", "#t": "ttl"}
        projection = "#m, #e, #s, #f, #t"
        if summary_key is not None:
            names["#n"] = "feedNotFound"
            projection += ", #n"
        raw = await self.dynamo.batch_get(
            self.logical, [self._key(m) for m in keys], projection=projection, names=names
        )
        t = self._now(now)
        out: dict[str, tuple[int, int, float]] = {}
        not_found: dict[str, Any] | None = None
        polled_at: float | None = None
        for r in raw:
            item = from_item(r)
            if not self._alive(item, t):
                continue
            if item["matchId"] == summary_key:
                not_found = _not_found_verdicts(item.get("feedNotFound"), region)
                polled_at = float(item.get("fetchedAt", 0.0))
                continue
            out[str(item["matchId"])] = (
                int(item.get("feedEpoch", 0)),
                int(item.get("feedSeq", 0)),
                float(item.get("fetchedAt", 0.0)),
            )
        return RegionStamps(out, not_found, polled_at)

    async def batch_get_entries(
        self, match_ids: Iterable[str], *, now: float | None = None
    ) -> dict[str, CacheEntry]:
        """The cached items of ``match_ids`` with their change stamps (one BatchGetItem per 100 ids),
        not decoded: the reader decodes only those whose stamp moved."""
        unique = list(dict.fromkeys(match_ids))
        if not unique:
            return {}
        raw = await self.dynamo.batch_get(self.logical, [self._key(m) for m in unique])
        t = self._now(now)
        out: dict[str, CacheEntry] = {}
        for r in raw:
            item = from_item(r)
            if not self._alive(item, t):
                continue
            out[str(item["matchId"])] = CacheEntry(
                match_id=str(item["matchId"]),
                epoch=int(item.get("feedEpoch", 0)),
                seq=int(item.get("feedSeq", 0)),
                fetched_at=float(item.get("fetchedAt", 0.0)),
                source=str(item.get("source", "livescores")),
                in_livescores=bool(item.get("inLivescores", True)),
                item=item,
            )
        return out


def _not_found_verdicts(raw: Any, region: str | None) -> dict[str, Any] | None:
    """The ``feedNotFound`` attribute decoded; None when absent, or unreadable (logged: the verdicts then
    come with the next good summary, or the orchestrator's read of ``feedState``)."""
    if raw is None:
        return None
    try:
        loaded = json.loads(str(raw))
        if not isinstance(loaded, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        log.warning("feed_not_found_unreadable", region=region, error=str(exc))
        return None
    return loaded
