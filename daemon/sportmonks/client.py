"""The SportMonks cricket v2.0 HTTP client (httpx on trio): the only code that sends requests to SportMonks.

Owns the request path of every call: the hourly budget (``budget.CallBudget``), the circuit breaker
(``breaker.CircuitBreaker``), a deadline per attempt (a trio cancel scope), retries with jittered exponential
backoff on timeouts, transport errors, 429 (honouring ``Retry-After``) and 5xx, pagination (``links.next``
with our query re-added, spec §9.10), response validation (``models``) and the SportMonks metrics. It must not
touch DynamoDB, actors or the match engine; it returns the ``data`` JSON as plain dicts in the exact SportMonks
shape (includes normalised to the bare form), after validation.

Order of checks per attempt: wait for budget (bounded), ask the breaker, record the budget slot, send. The
budget slot is taken only when the request really goes out, so a refused call spends nothing.

Secrets: the API token is added to the query at send time only; every message, log line and exception names
the request by ``source`` (method, path and query without the token). httpx's own request log is filtered
to redact ``api_token`` too, in case someone turns its logger up to INFO.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import os
import random
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx
import trio
from pydantic import BaseModel, ValidationError

from daemon import metrics
from daemon.backoff import backoff_delay
from daemon.cricket.snapshot import FIELDS_READ, UNDER_WAY_STATUSES
from daemon.logs import get_logger
from daemon.sportmonks import models
from daemon.sportmonks.breaker import STATE_GAUGE, BreakerState, CircuitBreaker
from daemon.sportmonks.budget import CallBudget
from daemon.sportmonks.errors import (
    BreakerOpen,
    BudgetExhausted,
    MalformedPayload,
    ResponseTooLarge,
    SportMonksError,
    SportMonksHTTPError,
    SportMonksUnavailable,
)
from daemon.sportmonks.settings import SportMonksSettings

log = get_logger("sportmonks.client")

# What the live match engine reads (spec §3): teams, innings totals, scorecards, XI, venue, league context.
DEFAULT_LIVE_INCLUDE: tuple[str, ...] = (
    "localteam",
    "visitorteam",
    "league",
    "season",
    "stage",
    "venue",
    "runs",
    "batting",
    "bowling",
    "lineup",
    "tosswon",
    "winnerteam",
)
# The same plus ball-by-ball data (marquee matches): each ball with its score, batter, bowler and team, as in
# the saved real payload.
BALL_INCLUDE: tuple[str, ...] = ("balls", "balls.score", "balls.batsman", "balls.bowler", "balls.team")
DEFAULT_FIXTURE_INCLUDE: tuple[str, ...] = DEFAULT_LIVE_INCLUDE + BALL_INCLUDE
DEFAULT_SCHEDULE_INCLUDE: tuple[str, ...] = ("localteam", "visitorteam", "league", "venue")

# The statuses of a match under way (spec §6: every status but NS and the terminal ones): the live matches
# ``/fixtures?filter[status]=...`` lists, as ``/livescores`` does.
LIVE_STATUSES: tuple[str, ...] = UNDER_WAY_STATUSES
Fields = Mapping[str, Sequence[str]]


def _merged(*maps: Fields) -> dict[str, tuple[str, ...]]:
    out: dict[str, dict[str, None]] = {}
    for fields in maps:
        for resource, names in fields.items():
            out.setdefault(resource, {}).update(dict.fromkeys(names))
    return {resource: tuple(names) for resource, names in out.items()}


# The sparse fieldsets of the live reads (``fields[...]``, spec §2): what the engine reads
# (``snapshot.FIELDS_READ``), what the feed and its cache read (ids, schedule, the ghost rule's fingerprint,
# the followers' summary), and the names of the teams, league, season, stage and venue the app shows from
# the cached fixture. Every row keeps its id.
FEED_FIELDS: dict[str, tuple[str, ...]] = {
    "fixtures": ("season_id", "stage_id", "venue_id", "live", "last_period", "super_over", "follow_on"),
    "teams": ("image_path",),
    "leagues": ("id", "name", "code", "image_path"),
    "seasons": ("id", "name", "code"),
    "stages": ("id", "name", "code"),
    "venues": ("id", "name", "city", "image_path"),
    "runs": ("id",),
    "battings": ("id",),
    "bowlings": ("id",),
}
LIVE_FIELDS: dict[str, tuple[str, ...]] = _merged(FIELDS_READ, FEED_FIELDS)

OUTCOMES = ("ok", "retry", "error", "malformed", "skipped_budget", "skipped_breaker")

_TOKEN_RE = re.compile(r"(api_token=)[^&\s\"']*")


def redact(text: str) -> str:
    """``text`` with any ``api_token=...`` value replaced by ``***``."""
    return _TOKEN_RE.sub(r"\1***", text)


class _RedactTokenFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "api_token=" in message:
            record.msg, record.args = redact(message), ()
        return True


for _name in ("httpx", "httpcore"):
    _logger = logging.getLogger(_name)
    if not any(isinstance(f, _RedactTokenFilter) for f in _logger.filters):
        _logger.addFilter(_RedactTokenFilter())


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP-date); None when absent or invalid."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(0.0, seconds)


def endpoint_of(path: str) -> str:
    """The budget entity of a request path: ``/fixtures/71344`` -> ``fixtures`` (SportMonks counts per entity)."""
    return path.strip("/").split("/", 1)[0] or "root"


def resolve_token(settings: SportMonksSettings) -> str | None:
    """The API token from settings, then ``api_token_file``, then the environment; None when none is set."""
    if settings.api_token is not None:
        return settings.api_token.get_secret_value().strip() or None
    if settings.api_token_file:
        try:
            with open(settings.api_token_file, encoding="utf-8") as handle:
                return handle.read().strip() or None
        except OSError as exc:
            # The path is configuration, not a secret; the file's content never appears here.
            raise SportMonksError(
                f"sportmonks.api_token_file: cannot read {settings.api_token_file!r}: {exc.strerror}"
            ) from None
    return os.environ.get(settings.api_token_env) or None


@dataclass
class LiveScores:
    """A /livescores answer checked fixture by fixture.

    ``fixtures`` are the items that passed validation; ``invalid`` maps a fixture id (as a string, or
    ``"data[i]"`` when even the id is unreadable) to the MalformedPayload for that item alone.
    """

    fixtures: list[dict[str, Any]]
    invalid: dict[str, MalformedPayload] = field(default_factory=dict)


M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


class SportMonksClient:
    def __init__(
        self,
        settings: SportMonksSettings,
        *,
        http: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = trio.current_time,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self._base = settings.base_url.rstrip("/")
        self._token = resolve_token(settings)
        self._owns_http = http is None
        self._http = http or httpx.AsyncClient(
            timeout=httpx.Timeout(settings.timeout_s),
            headers={"Accept": "application/json", "User-Agent": "sightscreen-daemon"},
            follow_redirects=False,
        )
        self._clock = clock
        self._rng = rng or random.Random()
        self.breaker = CircuitBreaker(
            failure_threshold=settings.breaker_failure_threshold,
            cooldown_s=settings.breaker_cooldown_s,
            clock=clock,
            on_change=self._breaker_changed,
        )
        self.budget = CallBudget(
            default_limit=settings.hourly_budget,
            limits=settings.endpoint_budgets,
            clock=clock,
            on_change=self._budget_changed,
        )
        # Per endpoint, per outcome: the same numbers as the Prometheus counter, kept for the admin socket.
        self.calls: dict[str, dict[str, int]] = {}
        self._checked: dict[str, Any] = {}  # the last live list's fixtures, by id: they passed the check
        metrics.SPORTMONKS_BREAKER_STATE.set(STATE_GAUGE["closed"])
        if self._token is None:
            log.warning(
                "sportmonks_no_token", hint=f"set sportmonks.api_token_file or ${settings.api_token_env}"
            )

    # ---------------------------------------------------------------------------------------------- API

    async def livescores(self, include: Sequence[str] = DEFAULT_LIVE_INCLUDE) -> list[dict[str, Any]]:
        """Every fixture SportMonks lists as live. Raises MalformedPayload if any item is malformed."""
        result = await self.livescores_checked(include)
        if result.invalid:
            problems = [p for err in result.invalid.values() for p in err.problems]
            raise MalformedPayload(problems, source=next(iter(result.invalid.values())).source)
        return result.fixtures

    async def livescores_checked(
        self, include: Sequence[str] = DEFAULT_LIVE_INCLUDE, *, budget_wait_s: float | None = None
    ) -> LiveScores:
        """Like ``livescores`` but one malformed fixture spoils only itself (the feed's per-match isolation)."""
        return await self.live_list("livescores", include, budget_wait_s=budget_wait_s)

    async def live_list(
        self,
        endpoint: str,
        include: Sequence[str] = DEFAULT_LIVE_INCLUDE,
        *,
        budget_wait_s: float | None = None,
        fields: Fields | None = None,
        retries: int | None = None,
        timeout_s: float | None = None,
        statuses: Sequence[str] = LIVE_STATUSES,
    ) -> LiveScores:
        """The live matches from ``endpoint``: ``livescores``, or ``fixtures`` (``/fixtures?filter[status]=``
        the live ``statuses``, another endpoint with a budget of its own; every page is a call, 100 fixtures
        a page). Checked fixture by fixture: a malformed one spoils only itself. ``fields``: sparse
        fieldsets; ``retries`` and ``timeout_s`` override the settings for this call."""
        call: dict[str, Any] = {"budget_wait_s": budget_wait_s, "retries": retries, "timeout_s": timeout_s}
        checked = dict(self._checked)  # a copy: the check may run in a worker thread
        if endpoint == "livescores":
            query = self._query(include=include, fields=fields)
            body, source = await self._call("/livescores", query, **call)
            split = partial(_split_livescores, checked=checked)
            result: LiveScores = await self._decode(body, source, split, "livescores")
        elif endpoint == "fixtures":
            query = self._query(include=include, filters={"status": ",".join(statuses)}, fields=fields)
            result = LiveScores(fixtures=[])
            async for page in self._pages("/fixtures", query, partial(_split_page, checked=checked), call):
                result.fixtures.extend(page.fixtures)
                result.invalid.update(page.invalid)
        else:
            raise ValueError(f"endpoint: the live matches come from livescores or fixtures, not {endpoint!r}")
        if result.invalid:
            self._count(endpoint, "malformed")
        self._checked = {str(f["id"]): f for f in result.fixtures}  # the newest answer's, checked
        return result

    async def fixture(
        self,
        fixture_id: int | str,
        include: Sequence[str] = DEFAULT_FIXTURE_INCLUDE,
        *,
        budget_wait_s: float | None = None,
        fields: Fields | None = None,
        retries: int | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        path = f"/fixtures/{_checked_id(fixture_id, 'fixture_id')}"
        call: dict[str, Any] = {"budget_wait_s": budget_wait_s, "retries": retries, "timeout_s": timeout_s}
        body, source = await self._call(path, self._query(include=include, fields=fields), **call)
        fixture: dict[str, Any] = await self._decode(
            body, source, _single(models.FixtureEnvelope), "fixtures"
        )
        return fixture

    async def fixtures(
        self,
        *,
        filters: Mapping[str, str] | None = None,
        include: Sequence[str] = DEFAULT_SCHEDULE_INCLUDE,
        sort: str | None = None,
        budget_wait_s: float | None = None,
    ) -> list[dict[str, Any]]:
        """All pages of ``/fixtures`` for ``filters`` (``{"league_id": "3"}`` is sent as ``filter[league_id]=3``)."""
        query = self._query(include=include, filters=filters, sort=sort)
        return await self._paginated("/fixtures", query, models.FixtureListEnvelope, budget_wait_s)

    async def teams(
        self, include: Sequence[str] = (), *, budget_wait_s: float | None = None
    ) -> list[dict[str, Any]]:
        return await self._paginated(
            "/teams", self._query(include=include), models.TeamListEnvelope, budget_wait_s
        )

    async def leagues(
        self, include: Sequence[str] = (), *, budget_wait_s: float | None = None
    ) -> list[dict[str, Any]]:
        query = self._query(include=include)
        return await self._paginated("/leagues", query, models.LeagueListEnvelope, budget_wait_s)

    async def season(
        self, season_id: int | str, include: Sequence[str] = ("teams",), *, budget_wait_s: float | None = None
    ) -> dict[str, Any]:
        path = f"/seasons/{_checked_id(season_id, 'season_id')}"
        body, source = await self._call(path, self._query(include=include), budget_wait_s=budget_wait_s)
        season: dict[str, Any] = await self._decode(body, source, _single(models.SeasonEnvelope), "seasons")
        return season

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> SportMonksClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ---------------------------------------------------------------------------------------- internals

    @staticmethod
    def _query(
        *,
        include: Sequence[str] = (),
        filters: Mapping[str, str] | None = None,
        sort: str | None = None,
        fields: Fields | None = None,
    ) -> dict[str, str]:
        query: dict[str, str] = {}
        for key, value in (filters or {}).items():
            query[key if key.startswith("filter[") else f"filter[{key}]"] = str(value)
        if include:
            query["include"] = ",".join(include)
        for resource, names in sorted((fields or {}).items()):
            query[f"fields[{resource}]"] = ",".join(names)
        if sort:
            query["sort"] = sort
        return query

    def _source(self, path: str, query: Mapping[str, str]) -> str:
        shown = {k: v for k, v in query.items() if k != "api_token" and not k.startswith("fields[")}
        sparse = sum(1 for k in query if k.startswith("fields["))
        if sparse:  # the sparse fieldsets are long and the same on every call: named, not listed
            shown["fields"] = f"{sparse} resources"
        return f"GET {path}" + (f"?{urlencode(shown, safe='[],.')}" if shown else "")

    def _count(self, endpoint: str, outcome: str) -> None:
        metrics.SPORTMONKS_CALLS.labels(endpoint, outcome).inc()
        per = self.calls.setdefault(endpoint, {})
        per[outcome] = per.get(outcome, 0) + 1

    def _budget_changed(self, endpoint: str, left: int) -> None:
        metrics.SPORTMONKS_BUDGET_REMAINING.labels(endpoint).set(left)
        metrics.SPORTMONKS_BUDGET_LIMIT.labels(endpoint).set(self.budget.limit(endpoint))

    def _breaker_changed(self, state: BreakerState) -> None:
        metrics.SPORTMONKS_BREAKER_STATE.set(STATE_GAUGE[state])
        log.warning("sportmonks_breaker", state=state, failures=self.breaker.consecutive_failures)

    async def _paginated(
        self, path: str, query: dict[str, str], envelope: type[models.Envelope], budget_wait_s: float | None
    ) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        async for page in self._pages(path, query, _page(envelope), {"budget_wait_s": budget_wait_s}):
            items.extend(page)
        return items

    async def _pages(
        self,
        path: str,
        query: dict[str, str],
        check: Callable[[Any, str], tuple[T, str | None]],
        call: dict[str, Any],
    ) -> AsyncIterator[T]:
        """Each page of a paginated list, checked by ``check`` (the page's value and its ``links.next``),
        following ``links.next`` with our query re-added, up to ``max_pages``."""
        url_path, page_query = path, dict(query)
        seen_pages: set[str] = set()
        for _ in range(self.settings.max_pages):
            body, source = await self._call(url_path, page_query, **call)
            value, next_url = await self._decode(body, source, check, endpoint_of(path))
            yield value
            if not next_url:
                return
            url_path, page_query = self._next_page(next_url, path, query)
            key = self._source(url_path, page_query)
            if key in seen_pages:
                raise MalformedPayload([f"links.next: repeats an earlier page ({key})"], source=source)
            seen_pages.add(key)
        raise SportMonksError(
            f"{self._source(path, query)}: more than max_pages={self.settings.max_pages} pages"
        )

    def _next_page(self, next_url: str, path: str, query: Mapping[str, str]) -> tuple[str, dict[str, str]]:
        """The request for ``links.next``: its page parameters with our filters/include/sort re-added.

        SportMonks's links carry only ``page=N`` (spec §9.10). The path comes from the link when it is under
        our base URL; otherwise (a link naming another host, e.g. a proxy or the replay server echoing the
        production host) we keep our own path, so the token is never sent anywhere but ``base_url``.
        """
        parts = urlsplit(next_url)
        next_query = dict(parse_qsl(parts.query, keep_blank_values=True))
        next_query.pop("api_token", None)
        merged = {
            **next_query,
            **query,
        }  # ours win for filters, include and sort; the page comes from the link
        if "page" in next_query:
            merged["page"] = next_query["page"]
        base = urlsplit(self._base)
        if (
            parts.netloc
            and (parts.scheme, parts.netloc) == (base.scheme, base.netloc)
            and parts.path.startswith(base.path)
        ):
            return parts.path[len(base.path) :] or path, merged
        if not parts.netloc and parts.path.startswith(base.path + "/"):
            return parts.path[len(base.path) :], merged
        return path, merged

    async def _call(
        self,
        path: str,
        query: Mapping[str, str],
        *,
        budget_wait_s: float | None,
        retries: int | None = None,
        timeout_s: float | None = None,
    ) -> tuple[bytes, str]:
        """Send one logical GET with budget, breaker, deadline and retries; return the 2xx body and its source.
        ``retries`` and ``timeout_s`` (one attempt's deadline) default to the settings'."""
        endpoint = endpoint_of(path)
        source = self._source(path, query)
        params = dict(query)
        if self._token is not None:
            params["api_token"] = self._token
        url = self._base + path
        wait = self.settings.budget_max_wait_s if budget_wait_s is None else budget_wait_s
        retries = self.settings.max_retries if retries is None else max(0, retries)
        deadline = self.settings.timeout_s if timeout_s is None else timeout_s
        for attempt in range(retries + 1):
            last = attempt == retries
            try:
                if await self.budget.wait_for_room(endpoint, max_wait=wait):
                    metrics.SPORTMONKS_BUDGET_DELAYS.labels(endpoint).inc()
            except BudgetExhausted:
                self._count(endpoint, "skipped_budget")
                log.info("sportmonks_budget_skip", source=source)
                raise
            try:
                is_trial = self.breaker.before_call()
            except BreakerOpen:
                self._count(endpoint, "skipped_breaker")
                raise
            # Budget slot recorded only now that the request really goes out.
            self.budget.try_take(endpoint)
            outcome_recorded = False
            try:
                try:
                    with trio.fail_after(deadline):
                        response, content = await self._get_capped(url, params, source)
                except ResponseTooLarge:
                    # Not retried: another attempt would download as much again. A failure of the service.
                    self.breaker.record_failure()
                    outcome_recorded = True
                    self._count(endpoint, "error")
                    log.warning(
                        "sportmonks_body_too_large", source=source, max_bytes=self.settings.max_body_bytes
                    )
                    raise
                except (trio.TooSlowError, httpx.RequestError) as exc:
                    self.breaker.record_failure()
                    outcome_recorded = True
                    reason = (
                        "timed out"
                        if isinstance(exc, trio.TooSlowError | httpx.TimeoutException)
                        else (f"request error {type(exc).__name__}")
                    )
                    if last or self.breaker.state == "open":
                        self._count(endpoint, "error")
                        log.warning(
                            "sportmonks_unavailable", source=source, reason=reason, attempts=attempt + 1
                        )
                        raise SportMonksUnavailable(
                            f"{source}: {reason} after {attempt + 1} attempt(s)"
                        ) from None
                    self._count(endpoint, "retry")
                    await trio.sleep(self._backoff(attempt))
                    continue
                status = response.status_code
                if 200 <= status < 300:
                    self.breaker.record_success()
                    outcome_recorded = True
                    self._count(endpoint, "ok")
                    return content, source
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
                if status == 429 or status >= 500:
                    self.breaker.record_failure()
                    outcome_recorded = True
                    too_long = retry_after is not None and retry_after > self.settings.retry_after_max_s
                    if status == 429 and too_long and retry_after is not None:
                        # The server's window is full for a while: stop asking this endpoint until it says so.
                        self.budget.block_until(endpoint, self._clock() + retry_after)
                    if last or too_long or self.breaker.state == "open":
                        self._count(endpoint, "error")
                        log.warning(
                            "sportmonks_http_error", source=source, status=status, attempts=attempt + 1
                        )
                        raise SportMonksHTTPError(
                            status, _error_message(content), source=source, retry_after=retry_after
                        )
                    self._count(endpoint, "retry")
                    delay = self._backoff(attempt)
                    if retry_after is not None:
                        delay = max(delay, retry_after)
                    log.info("sportmonks_retry", source=source, status=status, delay_s=round(delay, 3))
                    await trio.sleep(delay)
                    continue
                # Other 4xx: SportMonks answered clearly; our request (or plan) is at fault. Not retried, and
                # not a failure of the service for the breaker.
                self.breaker.record_success()
                outcome_recorded = True
                self._count(endpoint, "error")
                log.warning("sportmonks_http_error", source=source, status=status)
                raise SportMonksHTTPError(status, _error_message(content), source=source)
            finally:
                if is_trial and not outcome_recorded:
                    self.breaker.abandon_trial()
        raise AssertionError("unreachable")  # pragma: no cover

    async def _get_capped(
        self, url: str, params: Mapping[str, str], source: str
    ) -> tuple[httpx.Response, bytes]:
        """GET, reading the body as it streams and stopping past ``max_body_bytes`` (decoded size, so a
        compressed bomb is caught too) with ``ResponseTooLarge``; a declared length past it is refused before
        any of the body is read."""
        cap = self.settings.max_body_bytes
        async with self._http.stream("GET", url, params=params) as response:
            declared = response.headers.get("Content-Length", "")
            if declared.isdigit() and int(declared) > cap and "Content-Encoding" not in response.headers:
                raise ResponseTooLarge(source, cap, declared=int(declared))
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > cap:
                    raise ResponseTooLarge(source, cap)
                chunks.append(chunk)
        return response, b"".join(chunks)

    def _backoff(self, attempt: int) -> float:
        s = self.settings
        return backoff_delay(
            attempt + 1, base_s=s.backoff_base_s, cap_s=s.backoff_max_s, jitter=0.5, rng=self._rng
        )

    async def _decode(self, body: bytes, source: str, check: Callable[[Any, str], Any], endpoint: str) -> Any:
        """JSON-decode, normalise and validate; big bodies go to a worker thread to keep the event loop free."""
        try:
            if len(body) >= self.settings.offload_parse_bytes:
                return await trio.to_thread.run_sync(_decode_sync, body, source, check)
            return _decode_sync(body, source, check)
        except MalformedPayload as exc:
            self._count(endpoint, "malformed")
            log.warning("sportmonks_malformed", source=source, error=str(exc))
            raise


# ------------------------------------------------------------------------------------------------ pure helpers


def _checked_id(value: int | str, name: str) -> str:
    text = str(value).strip()
    if not text.isdigit():
        raise ValueError(f"{name}: expected a numeric SportMonks id, got {value!r}")
    return text


def _error_message(content: bytes) -> str:
    """A short human message from an error body (shape undocumented, spec §4): never more than 160 chars."""
    try:
        body = json.loads(content)
    except ValueError:
        return redact(content[:160].decode("utf-8", "replace").strip())
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return redact(error["message"])[:160]
        if isinstance(body.get("message"), str):
            return redact(body["message"])[:160]
    return redact(json.dumps(body))[:160]


def _decode_sync(body: bytes, source: str, check: Callable[[Any, str], Any]) -> Any:
    try:
        payload = json.loads(body)
    except json.JSONDecodeError as exc:
        raise MalformedPayload([f"body: not JSON ({exc.msg} at char {exc.pos})"], source=source) from None
    except UnicodeDecodeError as exc:  # json.loads decodes bytes first
        raise MalformedPayload([f"body: not JSON (not UTF-8 at byte {exc.start})"], source=source) from None
    if not isinstance(payload, dict):
        raise MalformedPayload([f"body: expected a JSON object, got {type(payload).__name__}"], source=source)
    if "data" not in payload:
        raise MalformedPayload(["data: required field is missing"], source=source)
    if models.may_have_wrapped_includes(body):
        payload = models.unwrap_includes(payload)
    return check(payload, source)


def _validate(envelope: type[M], payload: Any, source: str) -> M:
    try:
        return envelope.model_validate(payload)
    except ValidationError as exc:
        raise MalformedPayload(models.describe_validation_error(exc), source=source) from None


def _single(envelope: type[BaseModel]) -> Callable[[Any, str], dict[str, Any]]:
    def check(payload: Any, source: str) -> dict[str, Any]:
        _validate(envelope, payload, source)
        data: dict[str, Any] = payload["data"]
        return data

    return check


def _page(envelope: type[models.Envelope]) -> Callable[[Any, str], tuple[list[dict[str, Any]], str | None]]:
    def check(payload: Any, source: str) -> tuple[list[dict[str, Any]], str | None]:
        parsed = _validate(envelope, payload, source)
        next_url = parsed.links.next if parsed.links is not None else None
        return payload["data"], next_url or None

    return check


def _split_page(
    payload: Any, source: str, checked: Mapping[str, Any] | None = None
) -> tuple[LiveScores, str | None]:
    """A page of ``/fixtures`` checked fixture by fixture, and its ``links.next``."""
    parsed = _validate(models.ObjectListEnvelope, payload, source)
    next_url = parsed.links.next if parsed.links is not None else None
    return _split_livescores(payload, source, checked), next_url or None


def _split_livescores(payload: Any, source: str, checked: Mapping[str, Any] | None = None) -> LiveScores:
    """The live list checked fixture by fixture. A fixture equal to one that passed the check before
    (``checked``: by id) is not checked again: most live fixtures are unchanged from one poll to the next,
    and comparing costs a fourteenth of checking."""
    _validate(models.ObjectListEnvelope, payload, source)
    result = LiveScores(fixtures=[])
    for index, item in enumerate(payload["data"]):
        if checked and checked.get(str(item.get("id"))) == item:
            result.fixtures.append(item)
            continue
        try:
            models.Fixture.model_validate(item)
        except ValidationError as exc:
            fixture_id = item.get("id")
            key = (
                str(fixture_id)
                if isinstance(fixture_id, int) and not isinstance(fixture_id, bool)
                else (f"data[{index}]")
            )
            problems = models.describe_validation_error(exc, prefix=("data", index))
            result.invalid[key] = MalformedPayload(problems, source=source)
            continue
        result.fixtures.append(item)
    return result
