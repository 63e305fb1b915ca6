"""A one_for_one supervisor for trio actors, after Erlang/OTP.

The supervisor owns a nursery. Each child is an actor factory; the supervisor starts it with
``nursery.start`` (so the caller learns when the child is ready), and when the child raises it builds a fresh
actor from the factory and starts it again (the actor reloads its persisted state). Restarts are bounded by an
intensity: at most ``max_restarts`` within ``window_s`` seconds; past that the supervisor gives up on that child,
calls its ``on_give_up`` hook (a match is released there, loudly) and the rest of the daemon keeps going.

A child that returns normally, or raises one of its ``normal_exits`` (e.g. a lost lease), is not restarted.
Cancellation is the only way to stop a child (``stop``), never a flag.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from actors.ports import Actor
from daemon.logs import get_logger
from daemon.metrics import ACTOR_RESTARTS

log = get_logger("supervisor")


@dataclass
class Child:
    name: str
    factory: Callable[[], Actor]
    kind: str
    normal_exits: tuple[type[BaseException], ...]
    on_give_up: Callable[[str, BaseException], Awaitable[None]] | None
    on_exit: Callable[[str], Awaitable[None]] | None
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    restarts: deque[float] = field(default_factory=deque)
    actor: Actor | None = None
    done: trio.Event = field(default_factory=trio.Event)


class Supervisor:
    def __init__(
        self,
        nursery: trio.Nursery,
        *,
        max_restarts: int = 5,
        window_s: float = 60.0,
        backoff_s: float = 1.0,
    ) -> None:
        self._nursery = nursery
        self.max_restarts = max_restarts
        self.window_s = window_s
        self.backoff_s = backoff_s
        self.children: dict[str, Child] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.children

    def actor(self, name: str) -> Actor | None:
        child = self.children.get(name)
        return child.actor if child else None

    async def start(
        self,
        name: str,
        factory: Callable[[], Actor],
        *,
        kind: str = "actor",
        normal_exits: tuple[type[BaseException], ...] = (),
        on_give_up: Callable[[str, BaseException], Awaitable[None]] | None = None,
        on_exit: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        """Start a child and return once its first incarnation reported ready."""
        if name in self.children:
            raise ValueError(f"child {name!r} already running")
        child = Child(name, factory, kind, normal_exits, on_give_up, on_exit)
        self.children[name] = child
        try:
            await self._nursery.start(self._supervise, child)
        except BaseException:
            self.children.pop(name, None)
            raise

    def stop(self, name: str) -> None:
        child = self.children.get(name)
        if child is not None:
            child.scope.cancel()

    async def stop_and_wait(self, name: str) -> None:
        child = self.children.get(name)
        if child is not None:
            child.scope.cancel()
            await child.done.wait()

    def stop_all(self) -> None:
        for child in list(self.children.values()):
            child.scope.cancel()

    async def _supervise(
        self, child: Child, *, task_status: trio.TaskStatus[object] = trio.TASK_STATUS_IGNORED
    ) -> None:
        first = True
        try:
            with child.scope:
                while True:
                    child.actor = child.factory()
                    try:
                        if first:
                            first = False
                            await child.actor.run(task_status=task_status)
                        else:
                            await child.actor.run()
                        log.info("actor_exited", actor=child.name)
                        return
                    except BaseException as raised:
                        exc = _crash_of(raised, child.normal_exits)
                        if exc is None:  # cancelled (stop) and/or a normal exit: no restart
                            if not _has_cancelled(raised):
                                log.info("actor_stopped", actor=child.name, reason=_reason(raised))
                                return
                            raise _only_cancelled(raised) from None
                        if _has_cancelled(raised):  # crashed while being stopped: say so, don't restart
                            log.warning("actor_crashed_while_stopping", actor=child.name, error=repr(exc))
                            raise _only_cancelled(raised) from None
                        if not self._may_restart(child):
                            log.error(
                                "actor_gave_up",
                                actor=child.name,
                                restarts=len(child.restarts),
                                window_s=self.window_s,
                                error=repr(exc),
                            )
                            if child.on_give_up is not None:
                                with trio.CancelScope(shield=True):
                                    await child.on_give_up(child.name, exc)
                            return
                        ACTOR_RESTARTS.labels(child.kind).inc()
                        log.warning(
                            "actor_crashed_restarting",
                            actor=child.name,
                            error=repr(exc),
                            restart=len(child.restarts),
                            exc_info=exc,
                        )
                        await trio.sleep(self.backoff_s)
        finally:
            self.children.pop(child.name, None)
            try:
                if child.on_exit is not None:
                    with trio.CancelScope(shield=True):
                        await child.on_exit(child.name)
            finally:
                child.done.set()  # after on_exit, so stop_and_wait returns once the exit is fully handled

    def _may_restart(self, child: Child) -> bool:
        now = trio.current_time()
        while child.restarts and now - child.restarts[0] > self.window_s:
            child.restarts.popleft()
        if len(child.restarts) >= self.max_restarts:
            return False
        child.restarts.append(now)
        return True


def _crash_of(exc: BaseException, normal: tuple[type[BaseException], ...]) -> Exception | None:
    """The part of ``exc`` that is a crash, or None when it is only cancellation and normal exits.

    An actor's own nursery can surface several things at once, e.g. ``Cancelled`` (it is being stopped)
    together with ``LeaseLost`` (a normal exit) from a renewal task that failed at that moment."""
    if isinstance(exc, trio.Cancelled):
        return None
    if isinstance(exc, BaseExceptionGroup):
        _, rest = exc.split(lambda e: isinstance(e, trio.Cancelled) or _is_normal_exit(e, normal))
        if rest is None:
            return None
        if isinstance(rest, ExceptionGroup):
            return rest
        raise rest  # KeyboardInterrupt/SystemExit inside a group: not ours to handle
    if _is_normal_exit(exc, normal):
        return None
    if isinstance(exc, Exception):
        return exc
    raise exc


def _has_cancelled(exc: BaseException) -> bool:
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(trio.Cancelled) is not None
    return False


def _only_cancelled(exc: BaseException) -> BaseException:
    if isinstance(exc, BaseExceptionGroup):
        group = exc.subgroup(trio.Cancelled)
        assert group is not None
        return group
    return exc


def _is_normal_exit(exc: BaseException, normal: tuple[type[BaseException], ...]) -> bool:
    """A normal exit, also when it surfaces from an actor's own nursery as an exception group."""
    if not normal:
        return False
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_normal_exit(e, normal) for e in exc.exceptions)
    return isinstance(exc, normal)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_reason(e) for e in exc.exceptions)
    return str(exc) or type(exc).__name__
