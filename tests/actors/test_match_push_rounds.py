"""How a match actor hands a tick's pushes to the sender and waits for them.

- Every push carries the actor's ``Fence``: moved to the new lease end at each renewal, and to -inf the
  moment the actor stops, so the sender drops what is still queued for a stopped owner (real repositories
  on moto's server for the lease and the match record).
- A round of pushes is waited for as long as results keep coming; only a stall (no result at all for
  ``push_result_timeout_s``) re-sends the pushes still unanswered (virtual time, a scripted sender).
"""

from __future__ import annotations

import math
from typing import Any

import trio

from actors.match import MatchActor
from daemon.apns.types import Push, PushResult
from daemon.store.locks import match_lock_key
from tests.actors.match_helpers import make_match_actor


class HoldingSender:
    """Takes pushes and answers none of them (APNs far behind)."""

    def __init__(self) -> None:
        self.pushes: list[Push] = []
        self.took = trio.Event()

    async def send_many(self, pushes: list[Push]) -> None:
        self.pushes.extend(pushes)
        self.took.set()


class SilentFeed:
    """A feed whose match never ticks."""

    def subscribe(self, match_id: str, *, marquee: bool) -> Any:
        send, receive = trio.open_memory_channel[Any](1)
        self._keep = send
        return receive

    def unsubscribe(self, match_id: str) -> None:
        pass


async def test_pushes_carry_the_actors_fence_which_follows_the_lease_and_falls_when_the_actor_stops(
    repos: Any,
) -> None:
    assert await repos.locks.acquire(match_lock_key("500"), "me", 30.0)
    assert await repos.active_matches.register_active_match("500", "me")
    sender = HoldingSender()
    actor = make_match_actor("500", repos, sender)
    actor._feed = SilentFeed()
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        fence = actor._fence
        assert fence.until == actor._lease_until and fence.until > trio.current_time()

        async def push_one() -> None:
            await actor._push_all(
                lambda reply_to, f: [
                    Push("a" * 64, "liveactivity", "app.test", b"{}", 5, "update", reply_to=reply_to, fence=f)
                ]
            )

        nursery.start_soon(push_one)
        await sender.took.wait()
        (push,) = sender.pushes
        assert push.fence is fence, "the push reads the actor's fence when it leaves the queue, not a copy"
        before = fence.until
        await actor._renew_once()
        assert fence.until > before and fence.until == actor._lease_until
        nursery.cancel_scope.cancel()  # the actor stops (here: cancelled) with the push still queued
    assert fence.until == -math.inf, "a stopped actor's queued pushes must not go out"


class TricklingSender:
    """Answers the pushes one by one, ``every_s`` apart, except those whose token is in ``lose``."""

    def __init__(self, every_s: float, lose: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.every_s = every_s
        self.lose = lose
        self.rounds: list[list[str]] = []
        self._nursery: trio.Nursery | None = None

    async def send_many(self, pushes: list[Push]) -> None:
        self.rounds.append([p.token for p in pushes])
        assert self._nursery is not None
        self._nursery.start_soon(self._answer, pushes)

    async def _answer(self, pushes: list[Push]) -> None:
        for push in pushes:
            await trio.sleep(self.every_s)
            if push.token in self.lose:
                continue
            assert push.reply_to is not None
            await push.reply_to.send(PushResult(push, "accepted", 200, None, None, 1, 0.0))


async def _push_five(actor: MatchActor, sender: TricklingSender) -> dict[str, int]:
    actor._lease_until = actor._fence.until = math.inf
    async with trio.open_nursery() as nursery:
        sender._nursery = nursery
        total, counts = await actor._push_all(
            lambda reply_to, f: [
                Push(f"{i}" * 64, "liveactivity", "app.test", b"{}", 5, "update", reply_to=reply_to, fence=f)
                for i in range(1, 6)
            ]
        )
        nursery.cancel_scope.cancel()
    assert total == 5
    return counts


async def test_a_round_whose_results_keep_coming_is_waited_for_however_long_it_takes(
    autojump_clock: Any,
) -> None:
    sender = TricklingSender(every_s=20.0)  # 100 s for the round, each result within 30 s of the last
    actor = make_match_actor("500", None, sender, push_result_timeout_s=30.0)
    start = trio.current_time()
    counts = await _push_five(actor, sender)
    assert counts["accepted"] == 5
    assert len(sender.rounds) == 1, "nothing re-sent while the queue was moving"
    assert trio.current_time() - start >= 100


async def test_a_round_that_stalls_re_sends_only_what_is_unanswered(autojump_clock: Any) -> None:
    sender = TricklingSender(every_s=1.0, lose={"3" * 64})
    actor = make_match_actor("500", None, sender, push_result_timeout_s=30.0, push_retry_backoff_max_s=1.0)
    lost = "3" * 64

    async def answer_on_the_second_round() -> None:
        while len(sender.rounds) < 2:
            await trio.sleep(1)
        sender.lose = set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer_on_the_second_round)
        counts = await _push_five(actor, sender)
    assert counts["accepted"] == 5
    assert sender.rounds[1:] == [[lost]], "only the push whose result never came was sent again"


async def test_a_round_of_pushes_is_a_live_fan_out_while_it_is_in_progress(autojump_clock: Any) -> None:
    sender = TricklingSender(every_s=1.0)
    actor = make_match_actor("500", None, sender)
    live = actor._live
    seen: list[int] = []

    async def watch() -> None:
        while True:
            seen.append(live.active)
            await trio.sleep(0.5)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        await trio.sleep(0.25)
        counts = await _push_five(actor, sender)
        nursery.cancel_scope.cancel()
    assert counts["accepted"] == 5
    assert seen[0] == 0 and 1 in seen, f"the round was marked in progress: {seen}"
    assert live.active == 0 and live.fanouts == 1, "and no longer once its results were in"
