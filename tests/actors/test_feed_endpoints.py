"""The feed reads the live matches from two endpoints in turn: the plan's cadence, failover, content order.

On trio's MockClock against the in-memory SportMonks fake (which serves ``/fixtures?filter[status]=...`` from
its live list, as SportMonks serves the live matches through its second endpoint).
"""

from __future__ import annotations

import copy
from typing import Any

import trio
import trio.testing

from daemon.cricket.order import compare, stamp_of_fixture
from daemon.sportmonks.client import LIVE_STATUSES
from tests.actors.test_feed import TWO_ENDPOINTS, Collector, make_feed, running
from tests.doubles import FakeSportMonks, Scripted, Seen, minimal_fixture


def live_list(fake: FakeSportMonks) -> list[Seen]:
    return [r for r in fake.requests if r.path == "/fixtures" and "filter[status]" in r.query]


def delivery_times(nursery: trio.Nursery, channel: trio.MemoryReceiveChannel[Any]) -> list[float]:
    """When each fixture reached the subscriber (errors fail the test)."""
    delivered: list[float] = []

    async def watch() -> None:
        async for update in channel:
            assert update.error is None, update.error
            if update.fixture is not None:
                delivered.append(trio.current_time())

    nursery.start_soon(watch)
    return delivered


def stamped(fixture_id: int, score: int, at: int, *, status: str = "1st Innings") -> dict[str, Any]:
    """A live fixture whose innings row was last changed ``at`` seconds past 10:00 (its content stamp)."""
    fx = minimal_fixture(fixture_id, score=score, status=status)
    fx["runs"][0]["updated_at"] = f"2026-01-01T10:{at // 60:02d}:{at % 60:02d}.000000Z"
    return fx


async def test_the_live_matches_come_from_both_endpoints_in_turn_at_the_plans_cadence(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11), minimal_fixture(12)]
    feed = make_feed(fake, feed=TWO_ENDPOINTS)
    cadence = feed.plan.cadence_s
    assert 0.93 < cadence < 0.95  # the standard plan: 2,000 an hour each, 120 kept for the fixture sync
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("11", feed.subscribe("11", marquee=False))
        await trio.sleep(600)
    livescores, fixtures = len(fake.calls("/livescores")), len(live_list(fake))
    assert abs(livescores + fixtures - 600 / cadence) <= 3
    # in turn, each in proportion to what its budget has left for the live reads (1,980 and 1,861 an hour)
    shares = feed.plan.live_calls
    assert abs(livescores / fixtures - shares["livescores"] / shares["fixtures"]) < 0.01
    # each endpoint within its hour (scaled from the 10 minutes) and what the plan says it makes
    for endpoint, n in (("livescores", livescores), ("fixtures", fixtures)):
        assert n * 6 <= feed.plan.limits[endpoint] - feed.plan.reserved[endpoint]
        assert abs(n * 6 - feed.plan.planned(endpoint)) <= 2 * 6 + 0.03 * feed.plan.planned(endpoint)
    query = live_list(fake)[0].query
    assert query["filter[status]"].split(",") == list(LIVE_STATUSES)
    assert query["include"] == fake.calls("/livescores")[0].query["include"]
    assert "fields[balls]" in query and "fields[fixtures]" in query
    sources = {u.source for u in collector.updates["11"]}
    assert sources == {"livescores", "fixtures"}
    view = feed.stats()
    assert view["plan"]["cadence"] == "derived from the plan" and view["cadence_s"] == cadence
    assert set(view["endpoints"]) == {"livescores", "fixtures"}


async def test_a_429_moves_the_poll_to_the_other_endpoint_and_no_poll_is_lost(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """/livescores answers 429 for a minute: the poll it refused is made at once on /fixtures, which
    carries every poll at its own pace until /livescores' Retry-After, and then they take turns again."""
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11)]
    refusing = {"until": -1.0}

    def refuse(seen: Seen) -> Scripted | None:
        if seen.path == "/livescores" and trio.current_time() < refusing["until"]:
            return Scripted(429, {"message": "Too Many Attempts."}, {"Retry-After": "60"})
        return None

    fake.hook = refuse
    feed = make_feed(fake, feed=TWO_ENDPOINTS)
    async with running(feed) as nursery:
        delivered = delivery_times(nursery, feed.subscribe("11", marquee=False))
        await trio.sleep(10)
        refusing["until"] = trio.current_time() + 60
        start = trio.current_time()
        await trio.sleep(120)
    during = [t for t in delivered if start <= t <= start + 60]
    gaps = [b - a for a, b in zip(during, during[1:], strict=False)]
    # every poll answered: at most the fixtures endpoint's own pace between two, never a lost one
    assert gaps and max(gaps) <= feed.plan.interval_s["fixtures"] + 0.01
    stats = feed.stats()
    assert stats["endpoints"]["livescores"]["polls"].get("failover", 0) >= 1
    assert stats["endpoints"]["livescores"]["polls"].get("failed", 0) == 0
    after = [t for t in delivered if t > start + 62]
    later = [b - a for a, b in zip(after, after[1:], strict=False)]
    assert later and max(later) <= feed.plan.cadence_s + 0.01  # both endpoints again


async def test_a_slow_answer_past_the_poll_deadline_is_made_again_on_the_other_endpoint(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11)]

    third_is_slow = Scripted(200, {"data": fake.live}, delay_s=30.0)
    fake.hook = lambda seen: (
        third_is_slow if seen.path == "/livescores" and len(fake.calls(seen.path)) == 3 else None
    )
    feed = make_feed(fake, feed=TWO_ENDPOINTS)
    async with running(feed) as nursery:
        delivered = delivery_times(nursery, feed.subscribe("11", marquee=False))
        await trio.sleep(30)
    gaps = [b - a for a, b in zip(delivered, delivered[1:], strict=False)]
    assert max(gaps) <= feed.settings.poll_timeout_s + feed.plan.cadence_s + 0.01
    assert feed.stats()["endpoints"]["livescores"]["polls"]["failover"] == 1


async def test_an_endpoint_that_keeps_failing_rests_longer_each_time_and_a_blip_costs_one_poll(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """/livescores answers 503 for two minutes: it is asked again after one cadence step, then after two,
    four, ... up to ``endpoint_rest_s``, while /fixtures carries the polls; once it answers it is back in
    turn at once, and a later single 503 rests it for one step only."""
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11)]
    failing = {"until": -1.0}

    def fail(seen: Seen) -> Scripted | None:
        if seen.path == "/livescores" and trio.current_time() < failing["until"]:
            return Scripted(503, {"message": "Service Unavailable"})
        return None

    fake.hook = fail
    feed = make_feed(fake, feed={**TWO_ENDPOINTS, "endpoint_rest_s": 8.0}, breaker_failure_threshold=1000)
    cadence = feed.plan.cadence_s
    async with running(feed) as nursery:
        delivered = delivery_times(nursery, feed.subscribe("11", marquee=False))
        await trio.sleep(10)
        start = trio.current_time()
        failing["until"] = start + 120
        await trio.sleep(120)
        asked = [r.at for r in fake.calls("/livescores") if start <= r.at < start + 120]
        rests = [b - a for a, b in zip(asked, asked[1:], strict=False)]
        # the rests double from one step and stop at the cap (each a little longer: the poll's own turn)
        assert rests[0] < 2 * cadence + 0.01 and rests[1] > rests[0]
        assert max(rests) <= 8.0 + 2 * cadence + 0.01 and rests[-1] >= 8.0
        assert len(asked) <= 120 / 8.0 + 6  # an outage is not asked every round
        during = [t for t in delivered if start <= t <= start + 120]
        gaps = [b - a for a, b in zip(during, during[1:], strict=False)]
        assert gaps and max(gaps) <= feed.plan.interval_s["fixtures"] + 0.01  # /fixtures carried every poll
        await trio.sleep(20)
        back = trio.current_time()
        failing["until"] = back + 0.01  # one 503
        await trio.sleep(10)
        again = [r.at for r in fake.calls("/livescores") if r.at >= back]
        assert len(again) >= 3 and again[1] - again[0] < 2 * cadence + 0.01
    stats = feed.stats()["endpoints"]["livescores"]["polls"]
    assert stats.get("failed", 0) == 0 and stats["failover"] >= 10


async def test_an_endpoint_that_lags_never_hands_a_match_older_content_or_a_status_flip(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """/livescores shows what was true 5 s ago: the subscriber gets every change once, in order, and a
    status shown by one endpoint alone at the same stamp never reaches it."""
    fake = FakeSportMonks()
    history: list[tuple[float, list[dict[str, Any]]]] = []

    def post(live: list[dict[str, Any]]) -> None:
        fake.live = live
        history.append((trio.current_time(), copy.deepcopy(live)))

    def lagging(seen: Seen) -> Scripted | None:
        if seen.path != "/livescores":
            return None
        then = trio.current_time() - 5.0
        shown = [live for at, live in history if at <= then]
        return Scripted(200, {"data": shown[-1] if shown else []})

    fake.hook = lagging
    feed = make_feed(fake, feed=TWO_ENDPOINTS)
    got: list[dict[str, Any]] = []
    async with running(feed) as nursery:
        channel = feed.subscribe("11", marquee=False)

        async def watch() -> None:
            async for update in channel:
                if update.fixture is not None:
                    got.append(update.fixture)

        nursery.start_soon(watch)
        post([stamped(11, 0, 0)])
        await trio.sleep(8)
        for n in range(1, 12):  # a run every 3 s, sooner than the lag
            post([stamped(11, n, 3 * n)])
            await trio.sleep(3)
        post([stamped(11, 11, 33, status="Int.")])  # rain: the status alone changes, same stamp
        await trio.sleep(12)
    stamps = [stamp_of_fixture(f) for f in got]
    assert all(compare(a, b) >= 0 for a, b in zip(stamps, stamps[1:], strict=False))
    scores = [f["runs"][0]["score"] for f in got]
    assert scores == sorted(scores) and set(range(12)) <= set(scores)
    statuses = [f["status"] for f in got]
    assert statuses[-1] == "Int." and statuses.count("Int.") == len(statuses) - statuses.index("Int.")
    assert feed.stats()["held"].get("behind", 0) > 0


async def test_a_match_no_list_shows_while_under_way_is_read_by_id_at_the_live_cadence(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """/livescores drops a match in play for a minute (one endpoint in use): its own fixture is read every
    cadence while its last status says it is under way, and every 30 s once it says it is over."""
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11), minimal_fixture(12)]
    fake.fixtures_by_id[11] = minimal_fixture(11, score=7)
    feed = make_feed(fake)  # /livescores alone, 5 s (2.5 s with balls)
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("11", feed.subscribe("11", marquee=False))
        collector.drain("12", feed.subscribe("12", marquee=False))
        await trio.sleep(6)
        fake.live = [minimal_fixture(12)]
        await trio.sleep(60)
        by_id = len(fake.calls("/fixtures/11"))
        assert 11 <= by_id <= 13, by_id  # every 5 s, not every 30 s
        assert collector.updates["11"][-1].fixture == minimal_fixture(11, score=7)
        fake.fixtures_by_id[11] = minimal_fixture(11, status="Finished", score=9)
        await trio.sleep(6)
        at_end = len(fake.calls("/fixtures/11"))
        await trio.sleep(60)
        assert len(fake.calls("/fixtures/11")) - at_end == 2  # over: every 30 s


async def test_with_both_endpoints_the_filtered_list_carries_a_match_livescores_drops(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()
    fake.live = [minimal_fixture(11)]
    fake.hook = lambda seen: Scripted(200, {"data": []}) if seen.path == "/livescores" else None
    feed = make_feed(fake, feed=TWO_ENDPOINTS)
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("11", feed.subscribe("11", marquee=False))
        await trio.sleep(30)
    assert fake.calls("/fixtures/11") == []
    assert {u.source for u in collector.updates["11"] if u.fixture} == {"fixtures"}
    assert all(u.in_livescores for u in collector.updates["11"])
