"""The SportMonks client against the in-memory fake (httpx.MockTransport): endpoints, includes, pagination,
retries, Retry-After, breaker, budget, validation errors and token hygiene."""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from daemon import metrics
from daemon.sportmonks.client import (
    DEFAULT_FIXTURE_INCLUDE,
    SportMonksClient,
    endpoint_of,
    parse_retry_after,
    redact,
)
from daemon.sportmonks.errors import (
    BreakerOpen,
    BudgetExhausted,
    MalformedPayload,
    SportMonksHTTPError,
    SportMonksUnavailable,
)
from daemon.sportmonks.settings import SportMonksSettings
from tests.doubles import PROD, FakeSportMonks, Scripted, minimal_fixture

TOKEN = "secret-token"


def make_client(fake: FakeSportMonks, **overrides: Any) -> SportMonksClient:
    settings = SportMonksSettings(api_token=TOKEN, base_url=fake.base_url, **overrides)
    http = httpx.AsyncClient(transport=fake.transport())
    return SportMonksClient(settings, http=http, rng=random.Random(7))


def counter(endpoint: str, outcome: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "sightscreen_sportmonks_calls_total", {"endpoint": endpoint, "outcome": outcome}
    )
    return value or 0.0


async def test_livescores_returns_the_data_list_and_sends_token_and_include() -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(1), minimal_fixture(2)]
    client = make_client(fake)
    got = await client.livescores(include=("runs", "balls.score"))
    assert [f["id"] for f in got] == [1, 2]
    assert got[0] == minimal_fixture(1)
    (seen,) = fake.calls("/livescores")
    assert seen.query == {"include": "runs,balls.score", "api_token": TOKEN}


async def test_fixture_by_id_with_the_real_payload(real_fixture: dict[str, Any]) -> None:
    fake = FakeSportMonks()
    raw = real_fixture
    fake.fixtures_by_id[71344] = raw
    client = make_client(fake)
    got = await client.fixture(71344)
    assert got == raw
    assert fake.requests[0].query["include"] == ",".join(DEFAULT_FIXTURE_INCLUDE)


async def test_wrapped_includes_come_back_bare() -> None:
    fake = FakeSportMonks()
    fixture = minimal_fixture(9)
    fake.fixtures_by_id[9] = {**fixture, "runs": {"data": fixture["runs"]}}
    got = await make_client(fake).fixture(9)
    assert got == fixture


async def test_fixtures_follows_links_next_with_the_query_re_added() -> None:
    fake = FakeSportMonks(per_page=2)
    fake.schedule = [minimal_fixture(i) for i in range(1, 6)]
    client = make_client(fake)
    got = await client.fixtures(
        filters={"league_id": "3", "starts_between": "2026-10-09,2026-10-16"},
        include=("localteam",),
        sort="starting_at",
    )
    assert [f["id"] for f in got] == [1, 2, 3, 4, 5]
    pages = fake.calls("/fixtures")
    assert len(pages) == 3
    expected = {
        "filter[league_id]": "3",
        "filter[starts_between]": "2026-10-09,2026-10-16",
        "include": "localteam",
        "sort": "starting_at",
        "api_token": TOKEN,
    }
    assert pages[0].query == expected
    assert pages[1].query == {**expected, "page": "2"}
    assert pages[2].query == {**expected, "page": "3"}


async def test_pagination_never_sends_the_token_to_a_foreign_host() -> None:
    """The fake's links name the production host; the client is pointed elsewhere and must stay there."""
    fake = FakeSportMonks(per_page=1)
    fake.schedule = [minimal_fixture(1), minimal_fixture(2)]
    hosts: list[str] = []
    inner = fake.transport()

    async def spy(request: httpx.Request) -> httpx.Response:
        hosts.append(request.url.host)
        return await inner.handle_async_request(request)

    settings = SportMonksSettings(api_token=TOKEN, base_url="http://replay.local/api/v2.0")
    client = SportMonksClient(settings, http=httpx.AsyncClient(transport=httpx.MockTransport(spy)))
    got = await client.fixtures()
    assert [f["id"] for f in got] == [1, 2]
    assert fake.calls("/fixtures")[1].query["page"] == "2"
    assert hosts == ["replay.local", "replay.local"]


async def test_teams_leagues_and_season() -> None:
    fake = FakeSportMonks(per_page=2)
    fake.teams = [{"resource": "teams", "id": i, "name": f"T{i}", "code": f"T{i}"} for i in range(1, 4)]
    fake.leagues = [{"resource": "leagues", "id": 3, "name": "Twenty20 International", "code": "T20I"}]
    fake.seasons[1715] = {
        "resource": "seasons",
        "id": 1715,
        "league_id": 3,
        "name": "2026",
        "teams": [{"resource": "teams", "id": 1, "name": "Pakistan"}],
    }
    client = make_client(fake)
    assert [t["id"] for t in await client.teams()] == [1, 2, 3]
    assert (await client.leagues())[0]["code"] == "T20I"
    season = await client.season(1715)
    assert season["teams"][0]["name"] == "Pakistan"
    assert fake.calls("/seasons/1715")[0].query["include"] == "teams"


async def test_malformed_payload_names_the_field_path() -> None:
    fake = FakeSportMonks()
    bad = minimal_fixture(1)
    bad["runs"][0]["score"] = "12"
    fake.live = [bad]
    before = counter("livescores", "ok")
    client = make_client(fake)
    with pytest.raises(MalformedPayload) as info:
        await client.livescores()
    assert info.value.field_path == "data[0].runs[0].score"
    assert "data[0].runs[0].score: expected integer, got string '12'" in str(info.value)
    assert counter("livescores", "ok") == before + 1  # the HTTP call itself succeeded
    assert client.calls["livescores"]["malformed"] == 1


async def test_livescores_checked_isolates_a_malformed_fixture() -> None:
    fake = FakeSportMonks()
    bad = minimal_fixture(2)
    bad["status"] = 7
    fake.live = [minimal_fixture(1), bad, minimal_fixture(3), {"id": "x"}]
    result = await make_client(fake).livescores_checked()
    assert [f["id"] for f in result.fixtures] == [1, 3]
    assert set(result.invalid) == {"2", "data[3]"}
    assert "data[1].status: expected string, got integer 7" in str(result.invalid["2"])


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"<html>oops</html>", "body: not JSON"),
        (b'{"data": "\xff"}', r"body: not JSON \(not UTF-8 at byte 10\)"),
        (b"[1, 2]", "body: expected a JSON object"),
        (b'{"message": "hi"}', "data: required field is missing"),
    ],
)
async def test_non_json_or_envelope_less_bodies_are_malformed(body: bytes, expected: str) -> None:
    fake = FakeSportMonks()
    fake.answer_next(Scripted(200, raw=body))
    with pytest.raises(MalformedPayload, match=expected):
        await make_client(fake).livescores()


async def test_4xx_is_raised_at_once_without_retry() -> None:
    fake = FakeSportMonks()
    client = make_client(fake)
    with pytest.raises(SportMonksHTTPError) as info:
        await client.fixture(404404)
    assert info.value.status == 404
    assert "No result(s) found" in str(info.value)
    assert len(fake.requests) == 1
    assert client.breaker.consecutive_failures == 0


async def test_5xx_is_retried_with_backoff_then_succeeds(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(1)]
    fake.fail_next(503, times=2)
    client = make_client(fake, backoff_base_s=1.0, max_retries=3)
    start = trio.current_time()
    got = await client.livescores()
    assert [f["id"] for f in got] == [1]
    assert len(fake.requests) == 3
    # Two backoffs: in [0.5, 1] and [1, 2] seconds.
    assert 1.5 <= trio.current_time() - start <= 3.0
    assert client.calls["livescores"] == {"retry": 2, "ok": 1}


async def test_retries_are_bounded_then_the_status_is_raised(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    fake.fail_next(500, times=10)
    client = make_client(fake, max_retries=2, breaker_failure_threshold=10)
    with pytest.raises(SportMonksHTTPError) as info:
        await client.livescores()
    assert info.value.status == 500
    assert len(fake.requests) == 3


async def test_429_honours_retry_after(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(1)]
    fake.fail_next(429, headers={"Retry-After": "7"})
    client = make_client(fake, backoff_base_s=0.1)
    start = trio.current_time()
    await client.livescores()
    assert trio.current_time() - start == pytest.approx(7.0)
    assert len(fake.requests) == 2


async def test_long_retry_after_fails_fast_and_blocks_the_endpoint(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(1)]
    fake.fail_next(429, headers={"Retry-After": "900"})
    client = make_client(fake, retry_after_max_s=60)
    with pytest.raises(SportMonksHTTPError) as info:
        await client.livescores()
    assert info.value.status == 429 and info.value.retry_after == 900
    assert client.budget.remaining("livescores") == 0
    with pytest.raises(BudgetExhausted):
        await client.livescores_checked(budget_wait_s=0)
    assert len(fake.requests) == 1
    await trio.sleep(900)
    assert [f["id"] for f in await client.livescores()] == [1]


async def test_timeout_per_attempt_then_unavailable(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    fake.answer_next(Scripted(200, {"data": []}, delay_s=60))
    fake.answer_next(Scripted(200, {"data": []}, delay_s=60))
    client = make_client(fake, timeout_s=2.0, max_retries=1, backoff_base_s=0.5)
    start = trio.current_time()
    with pytest.raises(SportMonksUnavailable, match="timed out after 2 attempt"):
        await client.livescores()
    assert trio.current_time() - start < 6.0
    assert client.breaker.consecutive_failures == 2


async def test_breaker_opens_refuses_half_opens_and_closes(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(1)]
    fake.fail_next(500, times=3)
    client = make_client(fake, max_retries=0, breaker_failure_threshold=3, breaker_cooldown_s=30)
    for _ in range(3):
        with pytest.raises(SportMonksHTTPError):
            await client.livescores()
    assert client.breaker.state == "open"
    assert metrics.REGISTRY.get_sample_value("sightscreen_sportmonks_breaker_open") == 1.0
    with pytest.raises(BreakerOpen):
        await client.livescores()
    assert len(fake.requests) == 3  # refused calls never reach the server
    assert client.calls["livescores"]["skipped_breaker"] == 1
    await trio.sleep(30)
    assert client.breaker.state == "half_open"
    assert metrics.REGISTRY.get_sample_value("sightscreen_sportmonks_breaker_open") == 0.5
    assert [f["id"] for f in await client.livescores()] == [1]
    assert client.breaker.state == "closed"
    assert metrics.REGISTRY.get_sample_value("sightscreen_sportmonks_breaker_open") == 0.0


async def test_breaker_open_stops_retries_mid_call(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    fake.fail_next(502, times=10)
    client = make_client(fake, max_retries=5, breaker_failure_threshold=2)
    with pytest.raises(SportMonksHTTPError):
        await client.livescores()
    assert len(fake.requests) == 2
    assert client.breaker.state == "open"


async def test_budget_holds_under_a_burst_and_says_so() -> None:
    fake = FakeSportMonks()
    fake.live = []
    client = make_client(fake, hourly_budget=5, budget_max_wait_s=0)
    results: list[str] = []

    async def one() -> None:
        try:
            await client.livescores()
            results.append("ok")
        except BudgetExhausted:
            results.append("skipped")

    async with trio.open_nursery() as nursery:
        for _ in range(40):
            nursery.start_soon(one)
    assert results.count("ok") == 5
    assert results.count("skipped") == 35
    assert len(fake.requests) == 5
    assert client.budget.remaining("livescores") == 0
    assert client.calls["livescores"]["skipped_budget"] == 35
    assert (
        metrics.REGISTRY.get_sample_value(
            "sightscreen_sportmonks_budget_remaining", {"endpoint": "livescores"}
        )
        == 0.0
    )
    assert (
        metrics.REGISTRY.get_sample_value("sightscreen_sportmonks_budget_limit", {"endpoint": "livescores"})
        == 5.0
    )


async def test_budget_waits_when_allowed_and_counts_the_delay(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    client = make_client(fake, hourly_budget=1, endpoint_budgets={"teams": 1})
    await client.teams()
    before = metrics.REGISTRY.get_sample_value(
        "sightscreen_sportmonks_budget_delays_total", {"endpoint": "teams"}
    )
    start = trio.current_time()
    await client.teams(budget_wait_s=4000)
    assert trio.current_time() - start == pytest.approx(3600.0)
    after = metrics.REGISTRY.get_sample_value(
        "sightscreen_sportmonks_budget_delays_total", {"endpoint": "teams"}
    )
    assert (after or 0) - (before or 0) == 1
    assert len(fake.requests) == 2


async def test_retries_spend_budget_and_stop_when_it_is_gone(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    fake.fail_next(500, times=5)
    client = make_client(
        fake, hourly_budget=2, max_retries=5, budget_max_wait_s=0, breaker_failure_threshold=9
    )
    with pytest.raises(BudgetExhausted):
        await client.livescores()
    assert len(fake.requests) == 2


async def test_fixture_and_fixtures_share_the_fixtures_entity_budget() -> None:
    fake = FakeSportMonks()
    fake.fixtures_by_id[1] = minimal_fixture(1)
    client = make_client(fake, hourly_budget=2, budget_max_wait_s=0)
    await client.fixture(1)
    await client.fixtures()
    with pytest.raises(BudgetExhausted):
        await client.fixture(1)
    assert client.budget.remaining("livescores") == 2


async def test_token_never_appears_in_errors_or_logs(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeSportMonks()
    fake.fail_next(400, body={"error": {"message": f"bad include (api_token={TOKEN})"}})
    client = make_client(fake, max_retries=0)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(SportMonksHTTPError) as info:
        await client.fixture(1)
    logging.getLogger("httpx").info("HTTP Request: GET %s", f"{PROD}/fixtures/1?api_token={TOKEN}")
    out = capsys.readouterr()
    assert TOKEN not in str(info.value)
    assert TOKEN not in caplog.text
    assert TOKEN not in out.out + out.err
    assert "api_token=***" in caplog.text


async def test_token_from_file_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSportMonks(token="from-file")
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    settings = SportMonksSettings(base_url=fake.base_url, api_token_file=str(token_file))
    client = SportMonksClient(settings, http=httpx.AsyncClient(transport=fake.transport()))
    await client.livescores()
    monkeypatch.setenv("SM_TEST_TOKEN", "from-env")
    fake.token = "from-env"
    settings = SportMonksSettings(base_url=fake.base_url, api_token_env="SM_TEST_TOKEN")
    client = SportMonksClient(settings, http=httpx.AsyncClient(transport=fake.transport()))
    await client.livescores()
    assert [r.query["api_token"] for r in fake.requests] == ["from-file", "from-env"]


def test_fixture_id_must_be_numeric() -> None:
    client = SportMonksClient(SportMonksSettings())
    with pytest.raises(ValueError, match="fixture_id: expected a numeric SportMonks id"):
        trio.run(client.fixture, "../teams")


def test_pure_helpers() -> None:
    assert endpoint_of("/fixtures/71344") == "fixtures"
    assert endpoint_of("/livescores") == "livescores"
    assert parse_retry_after("12") == 12.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == pytest.approx(10.0)
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None
    assert (
        redact("https://x/y?include=a&api_token=abc123&page=2")
        == "https://x/y?include=a&api_token=***&page=2"
    )


@pytest.mark.parametrize("endpoint", ["livescores", "fixtures"])
async def test_a_live_list_checks_each_fixture_and_a_changed_one_again(endpoint: str) -> None:
    """Unchanged fixtures pass as they did (they are not checked twice); one that changed is checked, so a
    malformed change spoils that fixture alone, the next poll as the first."""
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(1), minimal_fixture(2)]
    client = make_client(fake)
    first = await client.live_list(endpoint, fields={"fixtures": ("id", "status")})
    assert [f["id"] for f in first.fixtures] == [1, 2] and not first.invalid
    query = fake.requests[-1].query
    assert query["fields[fixtures]"] == "id,status"
    if endpoint == "fixtures":
        assert query["filter[status]"].startswith("1st Innings,2nd Innings")
    assert (await client.live_list(endpoint)).fixtures == first.fixtures
    broken = minimal_fixture(2)
    broken["runs"] = "not a list"
    fake.live = [minimal_fixture(1), broken]
    third = await client.live_list(endpoint)
    assert [f["id"] for f in third.fixtures] == [1] and list(third.invalid) == ["2"]
    assert "runs" in str(third.invalid["2"])
    fake.live = [minimal_fixture(1), minimal_fixture(2, score=4)]
    assert [f["id"] for f in (await client.live_list(endpoint)).fixtures] == [1, 2]
