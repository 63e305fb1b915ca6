"""The event-loop stall monitor: work that never yields is measured, logged and, past ``stall_dump_s``, shown
as every thread's stack on stderr (what an operator needs to find it)."""

from __future__ import annotations

import io
import time

import pytest
import trio

from daemon.metrics import REGISTRY
from daemon.runtime.assembly import watch_event_loop
from tests.conftest import log_lines


def _lag_count() -> float:
    return REGISTRY.get_sample_value("sightscreen_event_loop_lag_seconds_count") or 0.0


def _hog_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # synchronous work on the trio thread: nothing else runs meanwhile


async def test_a_stall_is_logged_measured_and_its_stack_written(
    log_stream: io.StringIO, capfd: pytest.CaptureFixture[str]
) -> None:
    before = _lag_count()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_event_loop, 0.3, 0.05)
        await trio.sleep(0.2)
        _hog_the_loop(1.2)
        await trio.sleep(0.2)
        nursery.cancel_scope.cancel()
    stalls = [line for line in log_lines(log_stream) if line["event"] == "event_loop_stalled"]
    assert len(stalls) == 1 and stalls[0]["seconds"] >= 1.0
    assert _lag_count() > before + 3
    err = capfd.readouterr().err
    assert "in _hog_the_loop" in err and ("Current thread" in err or "Thread 0x" in err)


async def test_without_a_stall_nothing_is_logged_or_dumped(
    log_stream: io.StringIO, capfd: pytest.CaptureFixture[str]
) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_event_loop, 0.5, 0.05)
        await trio.sleep(0.8)
        nursery.cancel_scope.cancel()
    await trio.sleep(0.8)  # past the last armed dump: it was cancelled when the monitor stopped
    assert not [line for line in log_lines(log_stream) if line["event"] == "event_loop_stalled"]
    assert "Thread 0x" not in capfd.readouterr().err
