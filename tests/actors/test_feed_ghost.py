"""The feed applies the ghost-fixture rule: a listed id that answers but never shows play is polled with a
backoff and released after bounded calls; a real match's pre-ball wait is not; play lifts a ghost release.

Trio's MockClock against the in-memory SportMonks fake (no sockets); the schedule is read against the real
wall clock, so the fixtures' ``starting_at`` is set relative to it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import trio
import trio.testing

from tests.actors.test_feed import Collector, make_feed, running
from tests.doubles import FakeSportMonks, minimal_fixture


def stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.000000Z")


def blank(fixture_id: int, *, starting_at: float) -> dict[str, Any]:
    """Listed in play, answering, and showing nothing: no ball, no score row."""
    return minimal_fixture(fixture_id) | {"runs": [], "starting_at": stamp(starting_at)}


async def test_a_ghost_that_left_livescores_is_polled_with_a_backoff_then_released(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()
    ghost = blank(123, starting_at=time.time() - 30 * 86400)
    fake.live = [ghost]
    fake.fixtures_by_id[123] = ghost
    feed = make_feed(fake, feed={"not_found_release_s": 7200.0, "livescores_cadence_s": 60.0})
    tries: list[float] = []

    def timed(seen: Any) -> None:
        if seen.path.endswith("/fixtures/123"):
            tries.append(trio.current_time())

    fake.hook = timed
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("123", feed.subscribe("123", marquee=False))
        await trio.sleep(90)  # listed on two /livescores answers
        fake.live = []  # gone from /livescores: its own fixture is fetched from now on
        await trio.sleep(3600)
        # The two listed looks count: five calls by id (120, 240, 480 and 600 s apart), 20 minutes in all.
        assert [round(b - a) for a, b in zip(tries, tries[1:], strict=False)] == [120, 240, 480, 600]
        assert feed.is_released("123")
        last = collector.updates["123"][-1]
        assert last.released and last.fixture is None and "no play and no change" in (last.error or "")
        assert feed.not_found_state(to_wall=0.0)["released"].keys() == {"123"}  # handed to the region
        await trio.sleep(3000)
        assert len(fake.calls("/fixtures/123")) == 5  # nothing more after the release


async def test_a_listed_match_waiting_on_its_schedule_is_never_released_and_plays_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeSportMonks()
    fake.live = [blank(55, starting_at=time.time() - 2 * 3600)]  # two hours of rain before the first ball
    feed = make_feed(fake, feed={"livescores_cadence_s": 60.0})
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("55", feed.subscribe("55", marquee=False))
        await trio.sleep(3 * 3600)
        assert not feed.is_released("55")

        # play begins: its score row carries the time SportMonks wrote it, so it is newer content at once
        playing = minimal_fixture(55, score=4)
        playing["runs"][0]["updated_at"] = stamp(time.time())
        fake.live = [playing]
        await trio.sleep(70)
    updates = collector.updates["55"]
    assert not any(u.released for u in updates) and updates[-1].fixture == playing


async def test_play_in_livescores_lifts_a_ghost_release(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeSportMonks()
    ghost = blank(77, starting_at=time.time() - 30 * 86400)
    fake.live = [ghost, minimal_fixture(11, score=3)]
    feed = make_feed(fake, feed={"ghost_min_s": 60.0, "not_found_release_s": 7200.0})
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("77", feed.subscribe("77", marquee=False))
        collector.drain("11", feed.subscribe("11", marquee=False))
        await trio.sleep(90)
        assert feed.is_released("77") and collector.updates["77"][-1].released
        await trio.sleep(600)
        assert feed.is_released("77")  # still listed, still blank: it stays released
        fake.live = [minimal_fixture(77, score=1), minimal_fixture(11, score=3)]
        await trio.sleep(6)  # the next /livescores answer
        assert not feed.is_released("77")
        assert "77" in {str(f["id"]) for f in await feed.livescores()}
        assert not feed.is_released("11")


async def test_a_listed_suspect_is_still_handed_to_its_match_until_it_is_released(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Listed live but blank, far from its schedule: a suspect, polled on. Until the rule releases it, its
    match is handed what the list shows (a real match about to bowl its first ball looks the same, and its
    actor's first look must come before that ball: a first look's balls are history)."""
    fake = FakeSportMonks()
    fake.live = [blank(88, starting_at=time.time() - 30 * 86400)]
    feed = make_feed(fake, feed={"ghost_min_s": 600.0, "not_found_release_s": 7200.0})
    async with running(feed) as nursery:
        collector = Collector(nursery)
        collector.drain("88", feed.subscribe("88", marquee=False))
        await trio.sleep(30)
        assert not feed.is_released("88")
        handed = [u for u in collector.updates["88"] if u.fixture is not None]
        assert handed and handed[-1].fixture == fake.live[0]
