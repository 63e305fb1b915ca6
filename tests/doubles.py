"""The shared test doubles of the actors' ports (``actors/ports.py``): one sender and one feed, each a real
implementation of its Protocol, configured per test instead of written again per file.

- ``FakeSender``: the APNs sender as producers see it (``send``/``send_many``). It records every push it is
  handed and answers each through its ``reply_to`` as APNs would: accepted by default, rejected or failed for
  the tokens a test names, never for those it says stay unanswered, after ``answer_after_s`` when set (then
  answered one by one in the background, in order). ``before_each`` runs before a push is taken (a test's
  hook: kill the producer mid fan-out, take a lock away...).
- ``ScriptedFeed``: a feed a match actor subscribes to; the test hands it updates with ``tick``.

The DynamoDB side needs no double: tests run on moto's server (``repos`` in tests/conftest.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from actors.feed import FeedUpdate
from daemon.apns.types import Push, PushResult


@dataclass
class FakeSender:
    """Records every push handed over and answers it like APNs."""

    rejected: dict[str, tuple[int, str]] = field(default_factory=dict)  # token -> (status, reason)
    failing: set[str] = field(default_factory=set)  # tokens whose pushes end "failed" (retries exhausted)
    unanswered: Callable[[Push], bool] = lambda push: False  # pushes taken and never answered
    answer_after_s: float = 0.0  # answer each this long after the last (in the background; needs ``nursery``)
    before_each: Callable[[Push], Awaitable[None]] | None = None
    nursery: trio.Nursery | None = None
    pushes: list[Push] = field(default_factory=list)
    handed_at: list[float] = field(default_factory=list)  # wall clock, one per push
    rounds: list[list[Push]] = field(default_factory=list)  # one per ``send_many``
    took: trio.Event = field(default_factory=trio.Event)  # set once any push was taken

    async def send(self, push: Push) -> None:
        await self.send_many([push])

    async def send_many(self, pushes: list[Push]) -> None:
        self.rounds.append(list(pushes))
        answer: list[Push] = []
        for push in pushes:
            if self.before_each is not None:
                await self.before_each(push)
            self.pushes.append(push)
            self.handed_at.append(time.time())
            self.took.set()
            if push.reply_to is None or self.unanswered(push):
                continue
            if self.answer_after_s:
                answer.append(push)
            else:
                await push.reply_to.send(self.result_for(push))
        if answer:
            assert self.nursery is not None, "a FakeSender that answers later needs a nursery"
            self.nursery.start_soon(self._answer_later, answer)

    async def _answer_later(self, pushes: list[Push]) -> None:
        for push in pushes:
            await trio.sleep(self.answer_after_s)
            assert push.reply_to is not None
            await push.reply_to.send(self.result_for(push))

    def result_for(self, push: Push) -> PushResult:
        if push.token in self.rejected:
            status, reason = self.rejected[push.token]
            return PushResult(push, "rejected", status, reason, push.apns_id, 1, 0.001)
        if push.token in self.failing:
            return PushResult(push, "failed", 503, "ServiceUnavailable", push.apns_id, 6, 0.001)
        return PushResult(push, "accepted", 200, None, push.apns_id, 1, 0.001)

    def to(self, token: str, kind: str | None = None) -> list[Push]:
        return [p for p in self.pushes if p.token == token and (kind is None or p.kind == kind)]

    def tokens(self, pushes: Iterable[Push] | None = None) -> list[str]:
        return [p.token for p in (self.pushes if pushes is None else pushes)]


class ScriptedFeed:
    """A feed whose updates the test hands in (``tick``); a match that is never ticked stays silent."""

    def __init__(self) -> None:
        self.subscribed: dict[str, bool] = {}  # match id -> marquee
        self._send: dict[str, trio.MemorySendChannel[FeedUpdate]] = {}

    def subscribe(self, match_id: str, *, marquee: bool) -> trio.MemoryReceiveChannel[FeedUpdate]:
        send, receive = trio.open_memory_channel[FeedUpdate](math.inf)
        self._send[match_id] = send
        self.subscribed[match_id] = marquee
        return receive

    def unsubscribe(self, match_id: str) -> None:
        self.subscribed.pop(match_id, None)
        send = self._send.pop(match_id, None)
        if send is not None:
            send.close()

    async def tick(self, update: FeedUpdate) -> None:
        await self._send[update.match_id].send(update)


def update(match_id: str, fixture: dict[str, Any] | None, *, fetched_at: float | None = None) -> FeedUpdate:
    """A feed update of ``fixture`` as the leader fetched it now (or at ``fetched_at``)."""
    return FeedUpdate(match_id, fixture, time.time() if fetched_at is None else fetched_at, "fixture", True)


class AudienceRecords:
    """A match's sessions and follows in memory (``actors.ports.AudienceStore``), each read noted with the
    trio time it came: for the re-read cadence under the autojump clock, where real I/O would stall it."""

    def __init__(self, sessions: list[dict[str, Any]], follows: list[dict[str, Any]] | None = None) -> None:
        self.sessions = sessions
        self.follows_items = follows or []
        self.reads: list[tuple[str, float]] = []  # (what, trio time)
        self.live_activities = self
        self.follows = self

    def at(self, what: str) -> list[float]:
        return [t for kind, t in self.reads if kind == what]

    async def get_all_la_sessions_for_match(
        self, match_id: str, *, fields: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        self.reads.append(("sessions", trio.current_time()))
        return [dict(s) for s in self.sessions]

    async def end_la_sessions(
        self, match_id: str, sessions: list[dict[str, Any]], end_reason: str, *, ttl_s: float | None = None
    ) -> int:
        raise AssertionError("an audience never ends sessions")

    async def get_followers_for_match(
        self, match_id: str, *, fields: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        self.reads.append(("followers", trio.current_time()))
        return [dict(f) for f in self.follows_items]


class SilencedLocks:
    """A lock table (``actors.ports.LeaseStore``) in front of the real one whose link can go silent: once
    ``silent``, every lease call hangs (no answer, no error), as for a paused process or a dead link. Anything
    else is the real repository's."""

    def __init__(self, locks: Any) -> None:
        self._locks = locks
        self.silent = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._locks, name)

    async def _gate(self) -> None:
        if self.silent:
            await trio.sleep_forever()

    async def acquire_fenced(self, *args: Any, **kwargs: Any) -> Any:
        await self._gate()
        return await self._locks.acquire_fenced(*args, **kwargs)

    async def extend_fenced(self, *args: Any, **kwargs: Any) -> Any:
        await self._gate()
        return await self._locks.extend_fenced(*args, **kwargs)

    async def release_fenced(self, *args: Any, **kwargs: Any) -> Any:
        await self._gate()
        return await self._locks.release_fenced(*args, **kwargs)


class WithLocks:
    """The repositories ``repos`` with their lock table replaced by ``locks``."""

    def __init__(self, repos: Any, locks: Any) -> None:
        self._repos = repos
        self.locks = locks

    def __getattr__(self, name: str) -> Any:
        return getattr(self._repos, name)


class LiveFeedDouble:
    """What the orchestrator and the reconciler ask of the feed (``actors.ports.LiveFeed``): ``livescores``
    (``live``, or an error while ``fail``) and ``is_released`` (``released``)."""

    def __init__(self, live: list[dict[str, Any]] | None = None) -> None:
        self.live: list[dict[str, Any]] = live or []
        self.released: set[str] = set()
        self.fail = False

    async def livescores(self, *, max_age_s: float | None = None) -> list[dict[str, Any]]:
        if self.fail:
            raise RuntimeError("SportMonks unavailable")
        return list(self.live)

    def is_released(self, match_id: str) -> bool:
        return match_id in self.released


class DyingClaims:
    """The push-to-start claims (``actors.ports.StartClaims``) of an owner that dies right after it claimed its
    followers and before their starts go: the hold it writes before sending cancels ``scope`` instead."""

    def __init__(self, locks: Any, scope: trio.CancelScope) -> None:
        self._locks = locks
        self._scope = scope

    def __getattr__(self, name: str) -> Any:
        return getattr(self._locks, name)

    async def confirm_push_to_starts(self, *args: Any, **kwargs: Any) -> int:
        self._scope.cancel()
        await trio.sleep_forever()
        raise AssertionError("unreachable")
