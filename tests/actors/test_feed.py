"""The Feed actor on trio's MockClock against the in-memory SportMonks fake (no sockets, no wall clock)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
import trio.lowlevel
import trio.testing

from actors.feed import FeedActor, FeedUpdate, cache_ttl_s, without_balls
from daemon.sportmonks.client import SportMonksClient
from daemon.sportmonks.plan import PlanError
from daemon.sportmonks.settings import FeedSettings, SportMonksSettings
from daemon.store.caches import CachePut
from tests.doubles import FakeSportMonks, Scripted, minimal_fixture

MARQUEE_LEAGUE = 5


def make_feed(
    fake: FakeSportMonks,
    *,
    feed: dict[str, Any] | None = None,
    cache: Any = None,
    transport: httpx.AsyncBaseTransport | None = None,
    **client_settings: Any,
) -> FeedActor:
    """A feed on ``fake`` (through ``transport`` when given: the fake's with something in between)."""
    settings = SportMonksSettings(
        api_token="secret-token", base_url=fake.base_url, **({"max_retries": 0} | client_settings)
    )
    client = SportMonksClient(
        settings, http=httpx.AsyncClient(transport=transport or fake.transport()), rng=random.Random(3)
    )
    feed_settings = FeedSettings(**(ONE_ENDPOINT | (feed or {})))
    return FeedActor(client, feed_settings, fixture_cache=cache)


# The feed as it was with /livescores alone at 5 s and 2.5 s with balls: what the tests of subscriptions,
# errors, caching and the off-list reads assume. The two-endpoint schedule is tested with TWO_ENDPOINTS.
ONE_ENDPOINT: dict[str, Any] = {
    "marquee_leagues": [MARQUEE_LEAGUE],
    "list_endpoints": ["livescores"],
    "livescores_cadence_s": 5.0,
    "marquee_cadence_s": 2.5,
}
TWO_ENDPOINTS: dict[str, Any] = {
    "list_endpoints": ["livescores", "fixtures"],
    "livescores_cadence_s": None,
    "marquee_cadence_s": None,
}


@asynccontextmanager
async def running(feed: FeedActor) -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as nursery:
        await nursery.start(feed.run)
        yield nursery
        nursery.cancel_scope.cancel()


class Collector:
    """Drains subscriptions into lists, like a fast match actor."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self.updates: dict[str, list[FeedUpdate]] = {}
        self.closed: set[str] = set()

    def drain(self, match_id: str, channel: trio.MemoryReceiveChannel[FeedUpdate]) -> None:
        self.updates.setdefault(match_id, [])

        async def loop() -> None:
            async for update in channel:
                self.updates[match_id].append(update)
            self.closed.add(match_id)

        self.nursery.start_soon(loop)


def live_sm_calls(fake: FakeSportMonks) -> int:
    return len(fake.calls("/livescores"))


# ------------------------------------------------------------------------------------------------ basics


async def test_subscriber_gets_its_fixture_from_livescores(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11, score=5), minimal_fixture(12, score=9)]
    feed = make_feed(fake)
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("12", feed.subscribe("12", marquee=False))
        await trio.sleep(1)
    (update,) = collector.updates["12"]
    assert update.match_id == "12"
    assert update.fixture == minimal_fixture(12, score=9)
    assert update.source == "livescores" and update.in_livescores is True and update.error is None


async def test_non_marquee_cadence_is_5s_without_balls(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11, balls=3)]
    feed = make_feed(fake)
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("11", feed.subscribe("11", marquee=False))
        await trio.sleep(60 - 0.001)
    assert live_sm_calls(fake) == 12
    assert "balls" not in fake.calls("/livescores")[0].query["include"].split(",")
    assert all("balls" not in u.fixture for u in collector.updates["11"] if u.fixture)


async def test_marquee_subscriber_switches_livescores_to_balls_every_2_5s(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11, balls=3), minimal_fixture(12, balls=2)]
    feed = make_feed(fake)
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("11", feed.subscribe("11", marquee=True))
        collector.drain("12", feed.subscribe("12", marquee=False))
        await trio.sleep(60 - 0.001)
    assert live_sm_calls(fake) == 24
    assert all("balls" in r.query["include"].split(",") for r in fake.calls("/livescores"))
    assert len(collector.updates["11"][-1].fixture["balls"]) == 3  # type: ignore[index]
    assert "balls" not in collector.updates["12"][-1].fixture  # type: ignore[operator]
    assert not fake.calls("/fixtures")


async def test_marquee_league_from_configuration(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11, league_id=MARQUEE_LEAGUE, balls=2)]
    feed = make_feed(fake)
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("11", feed.subscribe("11", marquee=False))
        await trio.sleep(20)
        assert feed.stats()["subscribers"][0]["marquee"] is True
    # The first call learns the league; from then on balls at the marquee cadence.
    includes = [r.query["include"] for r in fake.calls("/livescores")]
    assert "balls" not in includes[0] and all("balls" in inc for inc in includes[1:])
    assert "balls" in collector.updates["11"][-1].fixture  # type: ignore[operator]


async def test_no_subscribers_no_calls(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    feed = make_feed(fake)
    async with running(feed):
        await trio.sleep(600)
    assert fake.requests == []


@pytest.mark.parametrize("marquee", [False, True])
async def test_twenty_live_matches_cost_the_same_calls_as_one(
    autojump_clock: trio.testing.MockClock, marquee: bool
) -> None:
    async def calls_for(n: int) -> tuple[int, int, dict[str, int]]:
        fake = FakeSportMonks()
        fake.live = [minimal_fixture(100 + i, balls=4) for i in range(n)]
        feed = make_feed(fake)
        async with running(feed) as nursery:
            collector = Collector(nursery)
            for i in range(n):
                # one marquee match among them when marquee=True
                collector.drain(str(100 + i), feed.subscribe(str(100 + i), marquee=marquee and i == 0))
            await trio.sleep(600 - 0.001)
        delivered = {m: len(u) for m, u in collector.updates.items()}
        return len(fake.requests), live_sm_calls(fake), delivered

    total_1, live_1, _ = await calls_for(1)
    total_20, live_20, delivered_20 = await calls_for(20)
    expected = 240 if marquee else 120  # 600 s at 2.5 s or 5 s
    assert total_1 == live_1 == expected
    assert total_20 == live_20 == expected
    assert set(delivered_20.values()) == {expected}  # every match got every tick


# ------------------------------------------------------------------------------------------------ match end


async def test_match_leaving_livescores_gets_its_final_fixture_then_slow_refetch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11, score=100), minimal_fixture(12)]
    final = minimal_fixture(11, status="Finished", score=180)
    fake.fixtures_by_id[11] = final
    feed = make_feed(fake)
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("11", feed.subscribe("11", marquee=False))
        collector.drain("12", feed.subscribe("12", marquee=False))
        await trio.sleep(12)
        fake.live = [minimal_fixture(12)]  # 11 finished and dropped out
        await trio.sleep(6)
        updates = collector.updates["11"]
        assert updates[-1].in_livescores is False
        assert updates[-1].source == "fixture"
        assert updates[-1].fixture == final
        assert len(fake.calls("/fixtures/11")) == 1
        assert "balls" not in fake.calls("/fixtures/11")[0].query["include"]
        await trio.sleep(65)
        assert len(fake.calls("/fixtures/11")) == 3  # every 30 s while subscribed
        feed.unsubscribe("11")
        await trio.sleep(120)
        assert len(fake.calls("/fixtures/11")) == 3
        assert "11" in collector.closed
    assert all(u.in_livescores for u in collector.updates["12"])


async def test_marquee_match_end_is_fetched_with_balls(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11)]
    fake.fixtures_by_id[11] = minimal_fixture(11, status="Finished", balls=6)
    feed = make_feed(fake)
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("11", feed.subscribe("11", marquee=True))
        await trio.sleep(3)
        fake.live = []
        await trio.sleep(3)
    assert "balls" in fake.calls("/fixtures/11")[0].query["include"].split(",")
    assert collector.updates["11"][-1].fixture["status"] == "Finished"  # type: ignore[index]


async def test_match_not_yet_live_is_fetched_by_id_and_switches_to_livescores(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()
    fake.fixtures_by_id[11] = minimal_fixture(11, status="NS")
    feed = make_feed(fake)
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("11", feed.subscribe("11", marquee=False))
        await trio.sleep(1)
        assert collector.updates["11"][-1].fixture["status"] == "NS"  # type: ignore[index]
        assert collector.updates["11"][-1].in_livescores is False
        fake.live = [minimal_fixture(11)]
        await trio.sleep(40)
    assert collector.updates["11"][-1].in_livescores is True
    assert collector.updates["11"][-1].source == "livescores"
    assert len(fake.calls("/fixtures/11")) == 1


async def test_a_failed_first_fetch_is_retried_at_the_livescores_cadence_not_every_30s(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()
    fake.fixtures_by_id[12] = minimal_fixture(12, status="NS")
    feed = make_feed(fake)
    async with running(feed) as nursery:
        await trio.sleep(1)  # the feed's first /livescores (empty) is in
        failures = [2]

        def fail_twice(seen: Any) -> Scripted | None:
            if seen.path.endswith("/fixtures/12") and failures[0] > 0:
                failures[0] -= 1
                return Scripted(503, {"message": "scripted"})
            return None

        fake.hook = fail_twice
        collector = Collector(nursery)
        collector.drain("12", feed.subscribe("12", marquee=False))
        await trio.sleep(12)
        good = [u for u in collector.updates["12"] if u.fixture is not None]
        assert good and good[0].fixture["status"] == "NS"  # type: ignore[index]
        # the pre-match look came after two failures, seconds apart, long before the 30 s refetch
        assert failures == [0] and len(fake.calls("/fixtures/12")) == 3


# ------------------------------------------------------------------------------------------------ errors


async def test_malformed_fixture_spoils_only_its_own_match(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    bad = minimal_fixture(11)
    bad["runs"][0]["score"] = "lots"
    fake.live = [bad, minimal_fixture(12)]
    feed = make_feed(fake)
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("11", feed.subscribe("11", marquee=False))
        collector.drain("12", feed.subscribe("12", marquee=False))
        await trio.sleep(1)
        fake.live = [minimal_fixture(11, score=4), minimal_fixture(12)]
        await trio.sleep(5)
    first, second = collector.updates["11"]
    assert first.fixture is None and first.in_livescores is True
    assert (
        first.error is not None
        and "data[0].runs[0].score: expected integer, got string 'lots'" in first.error
    )
    assert second.fixture == minimal_fixture(11, score=4) and second.error is None
    assert [u.error for u in collector.updates["12"]] == [None, None]
    assert not fake.calls("/fixtures")  # a malformed match is not mistaken for a finished one


async def test_failed_call_gives_error_updates_and_the_breaker_stops_calls(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11)]
    # an endpoint that fails rests for a second: with one endpoint, the polls keep coming at the cadence
    feed = make_feed(fake, feed={"endpoint_rest_s": 1.0}, breaker_failure_threshold=3, breaker_cooldown_s=60)
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("11", feed.subscribe("11", marquee=False))
        await trio.sleep(1)
        fake.fail_next(500, times=100)
        await trio.sleep(15)  # three failed calls open the breaker
        assert feed.breaker_open
        sent = len(fake.requests)
        await trio.sleep(40)
        assert len(fake.requests) == sent  # nothing sent while open
        errors = [u for u in collector.updates["11"] if u.error]
        assert errors and all(u.fixture is None for u in errors)
        assert "circuit breaker is open" in errors[-1].error  # type: ignore[operator]
        fake.forget_scripted()
        await trio.sleep(30)  # cooldown over: one trial, it succeeds, the feed resumes
        assert not feed.breaker_open
    assert collector.updates["11"][-1].fixture == minimal_fixture(11)
    assert feed.stats()["calls"]["livescores"]["skipped_breaker"] >= 7


async def test_calls_made_by_others_space_the_polls_and_the_hour_is_never_exceeded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The fixture sync and the rest spend the same hour: the pacer counts every call on the endpoint, so
    the feed's polls come later and the endpoint stays within its limit; no poll waits for budget."""
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11)]
    feed = make_feed(fake, feed={"marquee_cadence_s": 5.0}, endpoint_budgets={"livescores": 1000})
    for _ in range(400):  # others spent 400 of the 1,000 in the first second
        feed.client.budget.try_take("livescores")
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("11", feed.subscribe("11", marquee=False))
        await trio.sleep(3600 - 1)
        polls = live_sm_calls(fake)
        assert feed.client.budget.used("livescores") <= 1000
        # the others' 400 calls take 400 intervals of the endpoint's pace (1,000 an hour less 1% headroom);
        # then a poll every 5 s for the rest of the hour
        interval = feed.plan.interval_s["livescores"]
        free_from = 400 * interval - 3 * interval
        assert abs(polls - (3600 - free_from) / 5.0) <= 2, polls
    stats = feed.stats()
    assert (
        stats["budget"]["livescores"]["delayed"] == 0
        and stats["calls"]["livescores"].get("skipped_budget", 0) == 0
    )


async def test_a_plan_that_cannot_serve_the_live_matches_stops_the_start() -> None:
    fake = FakeSportMonks()
    derived = {"livescores_cadence_s": None, "marquee_cadence_s": None}
    with pytest.raises(PlanError, match=r"slower than feed.slowest_cadence_s = 2.5 s") as slow:
        make_feed(fake, feed=derived, endpoint_budgets={"livescores": 10})
    assert "livescores 10 less 0 reserved" in str(slow.value) and "hourly_budget" in str(slow.value)
    with pytest.raises(PlanError, match=r"no calls are left for the live matches"):
        make_feed(
            fake, feed=TWO_ENDPOINTS, hourly_budget=100, reserved_calls={"livescores": 100, "fixtures": 100}
        )
    with pytest.raises(PlanError, match=r"a poll every 0.5 s is faster than the plan allows"):
        make_feed(fake, feed={"marquee_cadence_s": 0.5})
    # the standard plan, read from both endpoints: a poll every 0.94 s, derived
    plan = make_feed(fake, feed=TWO_ENDPOINTS).plan
    assert plan.endpoints == ("livescores", "fixtures") and 0.93 < plan.cadence_s < 0.95
    assert plan.describe()["calls_per_hour"]["fixtures"]["reserved"] == 120


async def test_fixture_fetches_respect_the_budget(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    for i in range(10):
        fake.fixtures_by_id[200 + i] = minimal_fixture(200 + i, status="Finished")
    feed = make_feed(fake, endpoint_budgets={"fixtures": 25})
    async with running(feed) as nursery:
        collector = Collector(nursery)
        for i in range(10):
            collector.drain(str(200 + i), feed.subscribe(str(200 + i), marquee=False))
        await trio.sleep(1800)
    assert len(fake.calls("/fixtures")) == 25
    assert all(u.error is None for updates in collector.updates.values() for u in updates)


# ------------------------------------------------------------------------------------------------ subscribers


async def test_slow_subscriber_blocks_nobody_and_ends_with_the_newest(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()
    feed = make_feed(fake)

    def live(score: int) -> list[dict[str, Any]]:
        return [minimal_fixture(11, score=score), minimal_fixture(12, score=score)]

    fake.live = live(0)
    async with running(feed) as nursery:
        collector = Collector(nursery)
        slow = feed.subscribe("11", marquee=False)  # never read during the match
        collector.drain("12", feed.subscribe("12", marquee=False))
        await trio.sleep(2.5)  # change the data half-way between polls (polls at 0, 5, 10, ...)
        for score in range(1, 21):
            fake.live = live(score)
            await trio.sleep(5)
        assert [u.fixture["runs"][0]["score"] for u in collector.updates["12"]] == list(range(21))  # type: ignore[index]
        got = []
        while True:
            try:
                got.append(slow.receive_nowait())
            except trio.WouldBlock:
                await trio.testing.wait_all_tasks_blocked()
                try:
                    got.append(slow.receive_nowait())
                except trio.WouldBlock:
                    break
    scores = [u.fixture["runs"][0]["score"] for u in got]  # type: ignore[index]
    assert scores[-1] == 20
    assert len(scores) <= 3  # coalesced: at most the buffered one, the one in hand, the newest


async def test_error_does_not_displace_an_undelivered_good_fixture(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11, score=7)]
    feed = make_feed(fake, feed={"subscriber_buffer": 0})
    async with running(feed):
        channel = feed.subscribe("11", marquee=False)
        await trio.sleep(1)
        fake.fail_next(500, times=3)
        await trio.sleep(15)
        update = channel.receive_nowait()
        assert update.fixture == minimal_fixture(11, score=7)
        await trio.testing.wait_all_tasks_blocked()
        assert channel.receive_nowait().error is not None  # the error follows once the good one is taken


async def test_subscriber_closing_its_channel_unsubscribes(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11)]
    feed = make_feed(fake)
    async with running(feed):
        channel = feed.subscribe("11", marquee=False)
        await trio.sleep(1)
        await channel.aclose()
        await trio.sleep(20)
        assert feed.stats()["subscribers"] == []
        calls = len(fake.requests)
        await trio.sleep(60)
        assert len(fake.requests) == calls  # no subscribers, no polling


async def test_subscribe_before_run_and_resubscribe_replaces(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11)]
    feed = make_feed(fake)
    early = feed.subscribe("11", marquee=False)
    async with running(feed):
        await trio.sleep(1)
        assert early.receive_nowait().fixture == minimal_fixture(11)
        late = feed.subscribe("11", marquee=False)
        with pytest.raises(trio.EndOfChannel):
            await early.receive()
        await trio.sleep(5)
        assert late.receive_nowait().fixture == minimal_fixture(11)


async def test_subscriptions_survive_a_restart_of_the_feed(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11, score=1)]
    feed = make_feed(fake)
    channel = feed.subscribe("11", marquee=False)
    async with running(feed):
        await trio.sleep(1)
        assert channel.receive_nowait().fixture == minimal_fixture(11, score=1)
    # The supervisor restarts the actor (same instance); the match actor keeps its channel.
    fake.live = [minimal_fixture(11, score=2)]
    async with running(feed):
        with trio.fail_after(10):
            update = await channel.receive()
    assert update.fixture == minimal_fixture(11, score=2)


async def test_subscribe_rejects_a_non_numeric_match_id_and_normalises_numeric_ones() -> None:
    feed = make_feed(FakeSportMonks())
    with pytest.raises(ValueError, match="match_id: expected a numeric SportMonks fixture id"):
        feed.subscribe("../teams", marquee=False)
    feed.subscribe(" 0071 ", marquee=False)
    assert [s["match_id"] for s in feed.stats()["subscribers"]] == ["71"]
    feed.unsubscribe("71")
    feed.unsubscribe("not-an-id")
    assert feed.stats()["subscribers"] == []


# ------------------------------------------------------------------------------------------------ orchestrator


async def test_livescores_for_the_orchestrator_reuses_fresh_data(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11), minimal_fixture(12)]
    feed = make_feed(fake)
    assert [f["id"] for f in await feed.livescores()] == [11, 12]
    await trio.sleep(3)
    assert [f["id"] for f in await feed.livescores(max_age_s=30)] == [11, 12]
    assert live_sm_calls(fake) == 1
    await trio.sleep(30)
    await feed.livescores(max_age_s=30)
    assert live_sm_calls(fake) == 2


async def test_concurrent_livescores_requests_share_one_call(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11)]
    slow = fake.transport()

    async def delayed(request: httpx.Request) -> httpx.Response:
        await trio.sleep(1)
        return await slow.handle_async_request(request)

    feed = make_feed(fake, transport=httpx.MockTransport(delayed))
    results: list[list[dict[str, Any]]] = []

    async def ask() -> None:
        results.append(await feed.livescores(max_age_s=0))

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(ask)
    assert len(results) == 5 and all(r == [minimal_fixture(11)] for r in results)
    assert live_sm_calls(fake) == 1


async def test_orchestrator_fetch_feeds_subscribers_without_an_extra_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11)]
    feed = make_feed(fake)
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("11", feed.subscribe("11", marquee=False))
        await trio.sleep(2)
        await feed.livescores(max_age_s=0)  # a forced refresh by the orchestrator ...
        await trio.sleep(4.5)  # ... pushes the feed's own next call back
        assert live_sm_calls(fake) == 2
    assert len(collector.updates["11"]) == 2


# ------------------------------------------------------------------------------------------------ fixture mode


async def test_fixture_mode_polls_marquee_matches_by_id(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11), minimal_fixture(12)]
    fake.fixtures_by_id[11] = minimal_fixture(11, balls=5)
    feed = make_feed(fake, feed={"marquee_source": "fixture"})
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("11", feed.subscribe("11", marquee=True))
        collector.drain("12", feed.subscribe("12", marquee=False))
        await trio.sleep(60 - 0.001)
    assert live_sm_calls(fake) == 12  # 5 s, without balls
    assert all("balls" not in r.query["include"] for r in fake.calls("/livescores"))
    assert 23 <= len(fake.calls("/fixtures/11")) <= 24  # 2.5 s once it is known live
    assert {u.source for u in collector.updates["11"]} == {"fixture"}
    assert collector.updates["11"][-1].in_livescores is True
    assert {u.source for u in collector.updates["12"]} == {"livescores"}


# ------------------------------------------------------------------------------------------------ cache


class RecordingCache:
    """A sink that records every fixture of every poll written, and refuses a poll with a failing one."""

    def __init__(self, fail: Callable[[str], bool] = lambda _: False) -> None:
        self.puts: list[dict[str, Any]] = []
        self.calls: list[tuple[list[str], bool]] = []  # per call: the fixtures written, with a summary or not
        self.fail = fail

    async def put_poll(self, puts: Sequence[CachePut], summary: Any) -> None:
        await trio.lowlevel.checkpoint()
        if any(self.fail(p.match_id) for p in puts):
            raise RuntimeError("dynamodb is down")
        self.calls.append((sorted(p.match_id for p in puts), summary is not None))
        for p in puts:
            league = p.fixture.get("league_id")
            self.puts.append(
                {
                    "match_id": p.match_id,
                    "fixture": p.fixture,
                    "league_id": None if league is None else str(league),
                    "starting_at": p.fixture.get("starting_at"),
                    "ttl_s": p.ttl_s,
                }
            )


async def test_cache_gets_changed_fixtures_with_a_state_dependent_ttl(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11, score=1)]
    fake.fixtures_by_id[11] = minimal_fixture(11, status="Finished", score=150)
    cache = RecordingCache()
    feed = make_feed(fake, cache=cache, feed={"cache_ttl_live_s": 600, "cache_ttl_final_s": 86400})
    async with running(feed) as nursery:
        Collector(nursery).drain("11", feed.subscribe("11", marquee=False))
        await trio.sleep(17.5)  # four identical polls (0, 5, 10, 15 s): one write
        assert len(cache.puts) == 1
        fake.live = [minimal_fixture(11, score=2)]
        await trio.sleep(5)
        assert len(cache.puts) == 2
        fake.live = []  # finished: its final fixture comes from /fixtures/11
        await trio.sleep(5)
    assert [p["ttl_s"] for p in cache.puts] == [600, 600, 86400]
    assert cache.puts[-1]["fixture"]["status"] == "Finished"
    assert cache.puts[0]["league_id"] == "3" and cache.puts[0]["starting_at"] == "2026-10-09T13:00:00.000000Z"


async def test_cache_failure_never_stops_the_feed(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11), minimal_fixture(12)]
    down = True
    cache = RecordingCache(fail=lambda match_id: down)
    feed = make_feed(fake, cache=cache)
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("11", feed.subscribe("11", marquee=False))
        collector.drain("12", feed.subscribe("12", marquee=False))
        await trio.sleep(30)
        assert len(collector.updates["11"]) == 6  # every poll delivered while no write went through
        assert feed.stats()["cache"]["errors"] >= 6 and cache.puts == []
        down = False  # the cache is back: the next poll writes the fixtures as they stand
        await trio.sleep(5)
    assert sorted(p["match_id"] for p in cache.puts) == ["11", "12"]


def test_pure_helpers() -> None:
    settings = FeedSettings(cache_ttl_live_s=60, cache_ttl_final_s=999)
    assert cache_ttl_s({"status": "2nd Innings"}, settings) == 60
    for status in ("Finished", "Aban.", "Cancl.", "Postp."):
        assert cache_ttl_s({"status": status}, settings) == 999
    fixture = minimal_fixture(1, balls=2)
    stripped = without_balls(fixture)
    assert "balls" not in stripped and "balls" in fixture and stripped["runs"] is fixture["runs"]


async def test_a_fixture_answering_404_is_tried_with_a_doubling_backoff_then_released(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()  # knows no fixture 123: /fixtures/123 answers 404
    feed = make_feed(
        fake, feed={"not_found_max_tries": 3, "not_found_backoff_s": 5.0, "not_found_release_s": 600.0}
    )
    async with running(feed) as nursery:
        await trio.sleep(1)
        tries: list[float] = []

        def timed(seen: Any) -> None:
            if seen.path.endswith("/fixtures/123"):
                tries.append(trio.current_time())

        fake.hook = timed
        collector = Collector(nursery)
        collector.drain("123", feed.subscribe("123", marquee=False))
        await trio.sleep(300)  # sixty livescores cadences
        assert len(tries) == 3 and len(fake.calls("/fixtures/123")) == 3  # and never again
        assert tries[1] - tries[0] >= 5.0 and tries[2] - tries[1] >= 10.0  # 5 s, then doubled
        last = collector.updates["123"][-1]
        assert last.released and last.fixture is None and "404 3 times" in (last.error or "")
        assert [u.released for u in collector.updates["123"]] == [False, False, True]
        assert feed.is_released("123")
        await trio.sleep(600)
        assert not feed.is_released("123")  # taken again only after not_found_release_s


async def test_a_match_actor_restarted_after_the_release_is_told_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A match actor that crashed (a DynamoDB error in its let-go, a bad tick) around the release is restarted
    # by its supervisor and subscribes again: no poll will ever answer for a released fixture, so without the
    # last word on subscribing it would wait for updates forever and the match stay owned.
    fake = FakeSportMonks()
    feed = make_feed(fake, feed={"not_found_max_tries": 2, "not_found_backoff_s": 5.0})
    async with running(feed) as nursery:
        await trio.sleep(1)
        collector = Collector(nursery)
        collector.drain("123", feed.subscribe("123", marquee=False))
        await trio.sleep(60)
        assert feed.is_released("123")
        feed.unsubscribe("123")
        again = Collector(nursery)
        again.drain("123", feed.subscribe("123", marquee=False))
        await trio.sleep(1)
        assert [u.released for u in again.updates["123"]] == [True]
        assert "released" in (again.updates["123"][0].error or "")
        assert len(fake.calls("/fixtures/123")) == 2  # and no new call for it


async def test_the_release_reaches_a_match_actor_busy_while_good_fixtures_waited_for_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A corrupted id listed in /livescores for a while (its fixture handed on from the list), then gone from
    # it and answering 404 by id: the release comes while the actor has not yet taken the listed fixture
    # waiting in its mailbox. The release is the last word: dropped behind that fixture, the actor would wait
    # for ever (no poll answers for a released fixture).
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(123, status="1st Innings", league_id=MARQUEE_LEAGUE)]
    feed = make_feed(fake, feed={"not_found_max_tries": 2, "not_found_backoff_s": 1.0})
    async with running(feed) as nursery:
        await trio.sleep(1)
        channel = feed.subscribe("123", marquee=True)  # not read yet: the actor is busy
        await trio.sleep(10)
        fake.live = []
        await trio.sleep(60)
        assert feed.is_released("123") and len(fake.calls("/fixtures/123")) == 2
        collector = Collector(nursery)
        collector.drain("123", channel)
        await trio.sleep(1)
        updates = collector.updates["123"]
        assert updates and updates[-1].released, [(u.fixture is not None, u.error) for u in updates]


async def test_a_404_then_a_good_answer_starts_the_count_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()
    feed = make_feed(fake, feed={"not_found_max_tries": 2, "not_found_backoff_s": 5.0})
    async with running(feed) as nursery:
        await trio.sleep(1)
        collector = Collector(nursery)
        collector.drain("12", feed.subscribe("12", marquee=False))
        await trio.sleep(1)  # one 404; the next try in 5 s
        fake.fixtures_by_id[12] = minimal_fixture(12, status="NS")
        await trio.sleep(10)  # a good answer; the next fetch 30 s later
        del fake.fixtures_by_id[12]
        await trio.sleep(26)  # the refetch (at 36 s) answers 404; the next try would be at 41 s
        fake.fixtures_by_id[12] = minimal_fixture(12, status="NS")
        await trio.sleep(40)
        errors = [u for u in collector.updates["12"] if u.error]
        assert len(errors) == 2 and not feed.is_released("12")
        assert not any(u.released for u in collector.updates["12"])


async def test_subscribing_again_does_not_start_the_404_count_over(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()
    feed = make_feed(fake, feed={"not_found_max_tries": 3, "not_found_backoff_s": 5.0})
    async with running(feed) as nursery:
        await trio.sleep(1)
        collector = Collector(nursery)
        for _ in range(3):  # a match actor restarted between tries subscribes again each time
            collector.drain("123", feed.subscribe("123", marquee=False))
            await trio.sleep(2)
        await trio.sleep(300)
        assert len(fake.calls("/fixtures/123")) == 3 and feed.is_released("123")


async def test_a_follower_adopts_the_leaders_404_verdicts_and_its_subscriber_is_told_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()
    feed = make_feed(fake, feed={"not_found_max_tries": 3, "not_found_release_s": 600.0})
    feed.set_leading(False)
    to_wall = 1_000_000.0
    channel = feed.subscribe("123", marquee=False)
    assert feed.adopt_not_found({"tries": {"123": 2, "9": 1}}, to_wall=to_wall) == []
    assert feed.not_found_state(to_wall=to_wall) == {"released": {}, "tries": {"123": 2, "9": 1}}
    feed.adopt_not_found({"tries": {"123": 2}}, to_wall=to_wall)  # 9 answered since: the leader forgot it
    assert feed.not_found_state(to_wall=to_wall)["tries"] == {"123": 2}
    now_wall = trio.current_time() + to_wall
    state = {"released": {"123": now_wall + 600, "77": now_wall - 1}, "tries": {}}
    assert feed.adopt_not_found(state, to_wall=to_wall) == ["123"]  # 77's release ran out already
    assert feed.is_released("123") and not feed.is_released("77")
    assert feed.adopt_not_found(state, to_wall=to_wall) == []  # told once
    # a fixture the cache reader finds afterwards neither reaches the subscriber nor displaces the verdict
    assert not feed.offer_cached(FeedUpdate("123", minimal_fixture(123), now_wall, "livescores", True))
    feed._subs["123"].offer(FeedUpdate("123", minimal_fixture(123), now_wall, "livescores", True))
    async with running(feed):
        update = await channel.receive()
    assert update.released and update.fixture is None and "feed leader" in (update.error or "")
    assert feed.not_found_state(to_wall=to_wall)["released"] == {"123": pytest.approx(now_wall + 600)}
    assert feed.adopt_not_found({"released": {"1": "soon"}}, to_wall=to_wall) == []  # unreadable: ignored
    await trio.sleep(601)
    assert not feed.is_released("123")


async def _two_polls(cache: Any) -> None:
    """Matches 11 and 12 live with ``cache`` as the feed's sink: a first poll, then polls where only 11
    changed."""
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11, score=1), minimal_fixture(12, score=1)]
    feed = make_feed(fake, cache=cache)
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("11", feed.subscribe("11", marquee=False))
        collector.drain("12", feed.subscribe("12", marquee=False))
        await trio.sleep(2.5)
        fake.live = [minimal_fixture(11, score=4), minimal_fixture(12, score=1)]
        await trio.sleep(5)


async def test_a_sink_that_takes_a_poll_gets_its_changed_fixtures_and_summary_in_one_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A follower that sees a poll's summary (the leader's heartbeat) sees every fixture that poll changed."""
    cache = RecordingCache()
    await _two_polls(cache)
    assert cache.calls[0] == (["11", "12"], True)
    assert (["11"], True) in cache.calls[1:]  # the poll where only 11 changed
    assert all(summary for _, summary in cache.calls)  # every poll's summary rides with its fixtures


async def test_the_backlog_counts_subscriptions_and_updates_no_one_took_yet(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11, score=5)]
    feed = make_feed(fake)
    assert feed.backlog() == {"feed_subscriptions": 0, "feed_subscriber_updates": 0, "feed_cache_pending": 0}
    async with running(feed):
        updates = feed.subscribe("11", marquee=False)  # nobody reads it: the update waits
        await trio.sleep(1)
        assert feed.backlog()["feed_subscriptions"] == 1
        assert feed.backlog()["feed_subscriber_updates"] == 1
        await updates.receive()
        assert feed.backlog()["feed_subscriber_updates"] == 0
        feed.unsubscribe("11")
        assert feed.backlog()["feed_subscriptions"] == 0
