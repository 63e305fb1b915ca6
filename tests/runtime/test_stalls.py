"""The stall watchdog (``daemon.runtime.stalls``): a dump once per stall, counted only over time the watchdog
saw pass, so a pause of the whole process (SIGSTOP, a frozen VM) is never taken for a stall."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemon.runtime.stalls import StallClock

PROGRAM = """
import sys, threading, time, trio
from daemon.runtime.assembly import watch_event_loop

def spin():  # a worker thread busy in Python, as a daemon's DynamoDB threads are: it holds the GIL a lot
    while True:
        sum(range(10_000))

threading.Thread(target=spin, daemon=True).start()

async def main():
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_event_loop, 0.5, 0.1)
        print("watching", flush=True)
        await trio.sleep(6.0)
        nursery.cancel_scope.cancel()
    print("done", flush=True)

trio.run(main)
"""


def test_a_stall_is_due_once_the_loop_has_not_beaten_for_the_bound_and_once_only() -> None:
    clock = StallClock(1.0, 0.25)
    assert not clock.due(10.0, beat_at=10.0)
    assert not clock.due(10.5, beat_at=10.0)
    assert not clock.due(10.75, beat_at=10.0)
    assert clock.due(11.0, beat_at=10.0)
    assert not clock.due(11.25, beat_at=10.0), "one dump per stall"
    assert not clock.due(11.5, beat_at=11.4)  # the loop beat again
    for look in (11.75, 12.0, 12.25):
        assert not clock.due(look, beat_at=11.4)
    assert clock.due(12.5, beat_at=11.4)  # and stalled again


def test_a_pause_of_the_whole_process_starts_the_count_afresh() -> None:
    clock = StallClock(1.0, 0.25)
    assert not clock.due(10.0, beat_at=10.0)
    # the process stopped for 9 s: the watchdog's next look comes as late as the loop's next beat would
    assert not clock.due(19.0, beat_at=10.0)
    assert not clock.due(19.25, beat_at=10.0)
    assert clock.due(20.0, beat_at=10.0), "a loop that still does not run after the pause is a stall"


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="bound_s"):
        StallClock(0.0, 0.25)


@pytest.mark.skipif(sys.platform != "linux", reason="SIGSTOP and SIGCONT")
def test_a_daemon_paused_past_the_stall_bound_writes_no_stacks_when_it_wakes(tmp_path: Path) -> None:
    """faulthandler's timer fired on waking and wrote every thread's stack without the GIL, racing the
    threads that woke with it (an engine so paused answered nothing for minutes, then crashed on SIGTERM)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", PROGRAM],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "watching"
    time.sleep(0.5)
    proc.send_signal(signal.SIGSTOP)
    time.sleep(2.5)  # well past the 0.6 s bound
    proc.send_signal(signal.SIGCONT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
    assert "done" in out
    assert "Thread 0x" not in err and "Current thread" not in err and "Timeout (" not in err, err[-2000:]
