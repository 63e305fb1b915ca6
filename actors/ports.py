"""The Protocols actors use of the layers around them: what they call, declared here, so that an actor's
constructor names its dependencies by what it needs of them, and tests hand in the shared doubles of
``tests/doubles.py`` (or the real thing) without guessing an interface.

The runtime (``daemon.runtime``) hands in the concrete parts; nothing here imports them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio


class Actor(Protocol):
    """Anything the supervisor runs: ``run`` reports ready through ``task_status`` and runs until done."""

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None: ...


class Supervision(Protocol):
    """What the orchestrator asks of the supervisor that runs its match actors (``daemon.runtime.supervisor``)."""

    async def start(
        self,
        name: str,
        factory: Callable[[], Actor],
        *,
        kind: str = ...,
        normal_exits: tuple[type[BaseException], ...] = ...,
        on_give_up: Callable[[str, BaseException], Awaitable[None]] | None = ...,
        on_exit: Callable[[str], Awaitable[None]] | None = ...,
    ) -> None: ...

    async def stop_and_wait(self, name: str) -> None: ...

    def actor(self, name: str) -> Actor | None: ...
