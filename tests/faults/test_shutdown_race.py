"""A lease lost while the daemon drains: the stop must stay a clean stop.

At match end the actor releases its lock; if the daemon drains at that moment, the actor's renew loop can
find the lock gone (``LeaseLost``, a *normal* exit for a match actor) in the same instant its main task is
cancelled. The actor's nursery then raises ``BaseExceptionGroup([Cancelled,
LeaseLost])``. ``Supervisor._supervise`` catches ``Exception`` only, so the group passes by; the child's
cancel scope strips the ``Cancelled``, and unless the supervisor recognises the group, the bare ``LeaseLost``
escapes into the daemon's root nursery and the daemon's ``run`` raises instead of stopping cleanly (a process
exits with a traceback on SIGTERM).

The race is reproduced here deterministically with the supervisor and a two-task actor shaped like the
match actor (a renew loop beside the main loop); the real daemon hits it by timing.
"""

from __future__ import annotations

from typing import Any

import trio

from actors.lease import LeaseLost
from daemon.runtime.supervisor import Supervisor


class _ActorLosingItsLeaseAsItIsStopped:
    """Its renew loop is inside an uninterruptible call (a DynamoDB call in a worker thread) when the stop
    comes; the call then reports the lock gone, so the loop raises LeaseLost while its sibling is cancelled."""

    def __init__(self) -> None:
        self.renewing = trio.Event()

    async def _renew_loop(self) -> None:
        with trio.CancelScope(shield=True):  # stands for trio.to_thread.run_sync: not cancellable
            self.renewing.set()
            await trio.sleep(0.05)
        raise LeaseLost("lock is held by another instance")

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            task_status.started()
            nursery.start_soon(self._renew_loop)
            await trio.sleep_forever()


async def test_stopping_an_actor_that_loses_its_lease_at_that_moment_is_a_clean_stop() -> None:
    actor = _ActorLosingItsLeaseAsItIsStopped()
    exits: list[str] = []

    async def on_exit(name: str) -> None:
        exits.append(name)

    async with trio.open_nursery() as nursery:
        supervisor = Supervisor(nursery, max_restarts=0, window_s=60, backoff_s=0)
        await supervisor.start(
            "match:1", lambda: actor, kind="match", normal_exits=(LeaseLost,), on_exit=on_exit
        )
        await actor.renewing.wait()
        with trio.fail_after(5):
            await supervisor.stop_and_wait("match:1")
    assert exits == ["match:1"]
