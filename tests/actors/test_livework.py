"""LiveWork: background jobs give way to the live fan-outs in progress, for a bounded time, and are paced beside
live matches (virtual time)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from actors.livework import LiveWork, Pace
from tests.doubles import sample


def _gave_way(job: str) -> float:
    return sample("sightscreen_background_gave_way_seconds_total", {"job": job})


async def _hold(live: LiveWork, seconds: float) -> None:
    with live.fanout():
        await trio.sleep(seconds)


async def test_with_no_fan_out_in_progress_a_job_goes_on_at_once(autojump_clock: Any) -> None:
    live = LiveWork()
    start = trio.current_time()
    assert await live.give_way("test", 5.0) == 0.0
    assert trio.current_time() == start


async def test_a_job_waits_for_the_last_of_the_fan_outs_in_progress(autojump_clock: Any) -> None:
    live = LiveWork()
    before = _gave_way("test-wait")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_hold, live, 1.5)
        nursery.start_soon(_hold, live, 0.5)
        await trio.sleep(0.1)
        assert live.active == 2
        waited = await live.give_way("test-wait", 10.0)
    assert abs(waited - 1.4) < 1e-6, waited
    assert live.active == 0 and live.fanouts == 2
    assert abs(_gave_way("test-wait") - before - waited) < 1e-6


async def test_the_wait_is_capped_so_the_job_moves_under_continuous_live_load(autojump_clock: Any) -> None:
    live = LiveWork()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_hold, live, 60.0)
        await trio.sleep(0.1)
        assert await live.give_way("test", 2.0) == 2.0
        assert await live.give_way("test", 0.0) == 0.0, "0 turns giving way off"
        assert live.active == 1
        nursery.cancel_scope.cancel()
    assert live.active == 0, "a cancelled fan-out is no longer in progress"


async def test_a_fan_out_that_begins_after_an_idle_spell_is_waited_for_again(autojump_clock: Any) -> None:
    live = LiveWork()
    await _hold(live, 1.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_hold, live, 3.0)
        await trio.sleep(0.1)
        assert abs(await live.give_way("test", 10.0) - 2.9) < 1e-6


async def test_a_pace_spaces_concurrent_takers_at_its_rate(autojump_clock: Any) -> None:
    pace = Pace(10.0)  # 10 a second
    started = trio.current_time()
    taken: list[float] = []

    async def worker() -> None:
        for _ in range(5):
            await pace.take()
            taken.append(trio.current_time() - started)

    async with trio.open_nursery() as nursery:
        for _ in range(8):  # 8 concurrent takers share the one schedule
            nursery.start_soon(worker)
    assert len(taken) == 40
    assert sorted(taken) == pytest.approx([i / 10 for i in range(40)])


async def test_a_pace_allows_its_burst_then_its_rate_and_nothing_while_inactive(autojump_clock: Any) -> None:
    live = [False]
    pace = Pace(2.0, burst=3, active=lambda: live[0])
    for _ in range(100):  # inactive: never waits
        assert await pace.take() == 0.0
    await trio.sleep(10)
    live[0] = True
    waits = [await pace.take() for _ in range(5)]
    assert waits[:3] == [0.0, 0.0, 0.0]  # the burst
    assert waits[3:] == [pytest.approx(0.5), pytest.approx(0.5)]  # then 2 a second
    assert await Pace(0.0).take() == 0.0  # 0: no bound
    with pytest.raises(ValueError, match="rate must be >= 0"):
        Pace(-1.0)


async def test_help_waits_for_every_key_event_of_this_instance_however_long(autojump_clock: Any) -> None:
    """The share worker's give-way: no cap, since a helper's own matches' key events go before its help."""
    live = LiveWork()
    assert await live.give_way_to_key_events("share-test") == 0.0

    async def alerting(seconds: float) -> None:
        with live.key_event():
            await trio.sleep(seconds)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(alerting, 40.0)
        nursery.start_soon(alerting, 5.0)
        await trio.sleep(0.5)
        assert live.key_events == 2
        waited = await live.give_way_to_key_events("share-test")
    assert abs(waited - 39.5) < 1e-6 and live.key_events == 0
    with live.fanout():  # a routine fan-out is no key event: help goes on beside it
        assert await live.give_way_to_key_events("share-test") == 0.0
