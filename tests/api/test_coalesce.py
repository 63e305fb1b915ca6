"""Write coalescing (virtual time: a fake write that takes a while)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from daemon.api.coalesce import Coalescer


async def test_a_lone_write_goes_at_once_and_a_burst_leaves_in_batches(
    autojump_clock: trio.testing.MockClock,
) -> None:
    batches: list[list[int]] = []

    async def write(items: list[int]) -> list[None]:
        await trio.sleep(0.01)
        batches.append(items)
        return [None] * len(items)

    c: Coalescer[int, None] = Coalescer(write, max_batch=25, parallel=2)
    await c.submit(-1)
    assert batches == [[-1]]
    done: list[int] = []

    async def one(i: int) -> None:
        await c.submit(i)
        done.append(i)

    async with trio.open_nursery() as n:
        for i in range(200):
            n.start_soon(one, i)
    assert sorted(done) == list(range(200))
    written = [x for b in batches[1:] for x in b]
    assert sorted(written) == list(range(200))
    assert all(len(b) <= 25 for b in batches)
    assert len(batches) - 1 <= 12  # 2 leaders of one, then full batches: far fewer calls than writes


async def test_a_failed_batch_fails_each_of_its_requests_and_the_next_batch_still_goes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls = 0

    async def write(items: list[int]) -> list[None]:
        nonlocal calls
        calls += 1
        await trio.sleep(0.01)
        if calls == 2:
            raise RuntimeError("store down")
        return [None] * len(items)

    c: Coalescer[int, None] = Coalescer(write, max_batch=5, parallel=1)
    outcomes: dict[int, str] = {}

    async def one(i: int) -> None:
        try:
            await c.submit(i)
            outcomes[i] = "ok"
        except RuntimeError:
            outcomes[i] = "failed"

    async with trio.open_nursery() as n:
        for i in range(11):
            n.start_soon(one, i)
    assert len(outcomes) == 11
    assert list(outcomes.values()).count("failed") == 5  # exactly the second batch
    await c.submit(99)  # the coalescer is not stuck


async def test_a_cancelled_request_still_has_its_item_written(autojump_clock: trio.testing.MockClock) -> None:
    written: list[int] = []

    async def write(items: list[int]) -> list[None]:
        await trio.sleep(1.0)
        written.extend(items)
        return [None] * len(items)

    c: Coalescer[int, None] = Coalescer(write, max_batch=25, parallel=1)
    async with trio.open_nursery() as n:
        n.start_soon(c.submit, 1)
        await trio.sleep(0.1)
        with trio.move_on_after(0.1):
            await c.submit(2)
    assert sorted(written) == [1, 2]


async def test_each_request_gets_the_writes_result_for_its_own_item(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def write(items: list[int]) -> list[str]:
        await trio.sleep(0.01)
        return [f"written {i}" for i in items]

    c: Coalescer[int, str] = Coalescer(write, max_batch=4, parallel=1)
    got: dict[int, str | None] = {}

    async def one(i: int) -> None:
        got[i] = await c.submit(i)

    async with trio.open_nursery() as n:
        for i in range(10):
            n.start_soon(one, i)
    assert got == {i: f"written {i}" for i in range(10)}
    assert c.batches < 10  # they did leave together


def test_bad_parameters_are_refused() -> None:
    async def write(items: list[int]) -> list[None]:
        return []

    with pytest.raises(ValueError):
        Coalescer(write, max_batch=0)


async def test_batched_registrations_leave_the_same_items_as_the_single_upsert(repos) -> None:  # type: ignore[no-untyped-def]
    await repos.live_activities.register_la_session("m1", "u1", "d1", "aa" * 32, now=1000.0, ttl=5000)
    await repos.live_activities.register_la_session("m1", "u2", "d1", "aa" * 32, now=1000.0, ttl=5000)
    await repos.live_activities.suspend_la_session("m1", "u2#d1", now=1001.0)
    await repos.live_activities.register_la_session("m1", "u2", "d1", "bb" * 32, now=1002.0, ttl=5000)
    single = await repos.live_activities.get_la_session("m1", "u2", "d1", now=1003.0)
    await repos.live_activities.suspend_la_session("m1", "u1#d1", now=1001.0)
    written = await repos.live_activities.register_la_sessions(
        [("m1", "u1", "d1", "bb" * 32, 5000), ("m1", "u3", "d9", "cc" * 32, None)], now=1002.0
    )
    assert written == 2
    batched = await repos.live_activities.get_la_session("m1", "u1", "d1", now=1003.0)
    assert {k: v for k, v in batched.items() if k not in ("visitorKey", "userId")} == {
        k: v for k, v in single.items() if k not in ("visitorKey", "userId")
    }
    fresh = await repos.live_activities.get_la_session("m1", "u3", "d9", now=1003.0)
    assert fresh["status"] == "active" and "ttl" not in fresh
