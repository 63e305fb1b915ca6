"""The one_for_one supervisor: restarts, intensity, normal exits, readiness."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from daemon.runtime.supervisor import Supervisor


class Boom(Exception):
    pass


class Normal(Exception):
    pass


class Flaky:
    """Crashes ``crashes`` times (shared counter across incarnations), then runs until cancelled."""

    def __init__(self, log: list[str], crashes: int, ready_after: float = 0.0) -> None:
        self.log = log
        self.crashes = crashes
        self.ready_after = ready_after

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        await trio.sleep(self.ready_after)
        self.log.append("start")
        task_status.started()
        if self.log.count("start") <= self.crashes:
            raise Boom("crash")
        await trio.sleep_forever()


async def test_start_returns_only_once_the_child_is_ready(autojump_clock: trio.abc.Clock) -> None:
    log: list[str] = []
    async with trio.open_nursery() as nursery:
        sup = Supervisor(nursery)
        before = trio.current_time()
        await sup.start("a", lambda: Flaky(log, 0, ready_after=5.0))
        assert trio.current_time() - before >= 5.0
        assert log == ["start"]
        nursery.cancel_scope.cancel()


async def test_a_crashing_child_is_restarted_from_its_factory(autojump_clock: trio.abc.Clock) -> None:
    log: list[str] = []
    async with trio.open_nursery() as nursery:
        sup = Supervisor(nursery, max_restarts=5, window_s=60, backoff_s=1)
        await sup.start("a", lambda: Flaky(log, 2))
        await trio.sleep(10)
        assert log.count("start") == 3  # two crashes, then it stays up
        assert "a" in sup
        nursery.cancel_scope.cancel()


async def test_past_its_intensity_the_supervisor_gives_up_and_calls_the_hook(
    autojump_clock: trio.abc.Clock,
) -> None:
    log: list[str] = []
    gave_up: list[str] = []

    async def on_give_up(name: str, exc: BaseException) -> None:
        gave_up.append(f"{name}:{exc}")

    async with trio.open_nursery() as nursery:
        sup = Supervisor(nursery, max_restarts=3, window_s=60, backoff_s=1)
        await sup.start("m", lambda: Flaky(log, 100), on_give_up=on_give_up)
        await trio.sleep(30)
        assert log.count("start") == 4  # the first run plus three restarts
        assert gave_up == ["m:crash"]
        assert "m" not in sup
        nursery.cancel_scope.cancel()


async def test_restarts_outside_the_window_do_not_count(autojump_clock: trio.abc.Clock) -> None:
    log: list[str] = []
    gave_up: list[str] = []

    async def on_give_up(name: str, exc: BaseException) -> None:
        gave_up.append(name)

    async with trio.open_nursery() as nursery:
        # one restart allowed per 5 s, and each restart waits 10 s: it never gives up
        sup = Supervisor(nursery, max_restarts=1, window_s=5, backoff_s=10)
        await sup.start("m", lambda: Flaky(log, 4), on_give_up=on_give_up)
        await trio.sleep(100)
        assert gave_up == []
        assert log.count("start") == 5
        nursery.cancel_scope.cancel()


async def test_a_normal_exit_is_not_restarted_and_on_exit_runs() -> None:
    exits: list[str] = []

    class Stops:
        async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            task_status.started()
            raise Normal("lease lost")

    async def on_exit(name: str) -> None:
        exits.append(name)

    async with trio.open_nursery() as nursery:
        sup = Supervisor(nursery)
        await sup.start("x", Stops, normal_exits=(Normal,), on_exit=on_exit)
    assert exits == ["x"]
    assert "x" not in sup


async def test_stop_and_wait_cancels_a_child_and_runs_on_exit() -> None:
    exits: list[str] = []

    async def on_exit(name: str) -> None:
        exits.append(name)

    async with trio.open_nursery() as nursery:
        sup = Supervisor(nursery)
        await sup.start("x", lambda: Flaky([], 0), on_exit=on_exit)
        await sup.stop_and_wait("x")
        assert exits == ["x"]


async def test_a_second_child_with_the_same_name_is_refused() -> None:
    async with trio.open_nursery() as nursery:
        sup = Supervisor(nursery)
        await sup.start("x", lambda: Flaky([], 0))
        with pytest.raises(ValueError):
            await sup.start("x", lambda: Flaky([], 0))
        nursery.cancel_scope.cancel()


async def test_a_normal_exit_from_inside_the_actors_own_nursery_is_still_normal() -> None:
    exits: list[str] = []

    class StopsInNursery:
        async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            task_status.started()
            async with trio.open_nursery() as nursery:

                async def renew() -> None:
                    raise Normal("lease lost in the renewal task")

                nursery.start_soon(renew)
                await trio.sleep_forever()

    async def on_exit(name: str) -> None:
        exits.append(name)

    async with trio.open_nursery() as nursery:
        sup = Supervisor(nursery, max_restarts=5)
        await sup.start("x", StopsInNursery, normal_exits=(Normal,), on_exit=on_exit)
    assert exits == ["x"]
