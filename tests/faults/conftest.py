"""Fixtures of the fault tests: a ``FaultRig`` (one in-process daemon behind three fault proxies) per test.

Each test plays a whole match: a synthesised T10, or, with ``overs=SHORT_OVERS`` (``tests.faults.checks``), the
same format shortened to 5 overs an innings. A fault injected a second or so after the first ball that clears within a few seconds, at
the feed's pace (400 x, a ball every tenth of a second), has the same window around it in the shortened
match, first innings, break, chase and end included, in half the balls; a fault whose window is longer (a
lease running out and a hand-over) plays the whole T10.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from daemon.replay.synth import synthesise
from tests.harness.fault_rig import FaultRig, RigOptions


@pytest.fixture
def make_rig(tmp_path: Path, moto_server: Any, table_prefix: str) -> Callable[..., Any]:
    """``async with make_rig(seed=..., **options) as rig:`` a started rig, its match served (its first ball comes
    once the daemon has taken it); on exit the daemon is stopped gracefully and every part of the rig is
    cancelled. ``overs``: overs an innings (``None``: the format's)."""

    @asynccontextmanager
    async def _make(
        *,
        seed: int = 1,
        fmt: str = "T10",
        overs: int | None = None,
        add_tape: bool = True,
        **options: Any,
    ) -> AsyncIterator[FaultRig]:
        tape = synthesise(fmt, seed=seed, overs=overs)
        rig = FaultRig(
            tmp_path / "rig",
            moto_url=moto_server.url,
            tape=tape,
            table_prefix=table_prefix,
            options=RigOptions(**options),
        )
        try:
            async with trio.open_nursery() as nursery:
                await rig.start(nursery, add_tape=add_tape)
                try:
                    yield rig
                finally:
                    with trio.CancelScope(shield=True):
                        for proxy in rig.proxies.values():
                            proxy.clear()
                        await rig.stop_daemon()
                    nursery.cancel_scope.cancel()
        finally:
            rig.close()

    return _make
