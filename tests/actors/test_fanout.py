"""The fan-out round: how a producer's pushes are handed to the sender and waited for.

- Every push carries the producer's ``Fence``: moved to the new lease end at each renewal, and to -inf the
  moment the match actor stops, so the sender drops what is still queued for a stopped owner (real
  repositories on moto's server for the lease and the match record).
- A round is waited for as long as results keep coming; only a stall (no result at all for
  ``result_timeout_s``) re-sends the pushes still unanswered (virtual time, the shared fake sender).
- A gate holds the pushes after it until every push before it is answered, then runs.
"""

from __future__ import annotations

import math
from typing import Any

import trio

from actors.fanout import FanOut, RetryPolicy
from actors.livework import LiveWork
from daemon.apns.types import Fence, Push, PushResult
from daemon.store.locks import match_lock_key
from tests.actors.match_helpers import make_match_actor
from tests.doubles import FakeSender


def _fanout(sender: FakeSender, *, live: LiveWork | None = None, timeout_s: float = 30.0) -> FanOut:
    return FanOut(
        sender,
        fence=Fence(math.inf),
        check=lambda: None,
        policy=RetryPolicy(retry_max_s=300.0, backoff_max_s=1.0, result_timeout_s=timeout_s),
        live=live or LiveWork(),
    )


def _five(reply_to: trio.MemorySendChannel[PushResult], fence: Fence) -> list[Push]:
    return [
        Push(f"{i}" * 64, "liveactivity", "app.test", b"{}", 5, "update", reply_to=reply_to, fence=fence)
        for i in range(1, 6)
    ]


async def test_pushes_carry_the_actors_fence_which_follows_the_lease_and_falls_when_the_actor_stops(
    repos: Any,
) -> None:
    await repos.active_matches.register_active_match("500", "me")
    sender = FakeSender(unanswered=lambda push: True)  # APNs far behind: nothing comes back
    actor = make_match_actor("500", repos, sender, lease_s=30.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        fence = actor.lease.fence
        assert fence.until == actor.lease.until and fence.until > trio.current_time()

        async def push_one() -> None:
            await actor.fanout.push_all(
                lambda reply_to, f: [
                    Push("a" * 64, "liveactivity", "app.test", b"{}", 5, "update", reply_to=reply_to, fence=f)
                ]
            )

        nursery.start_soon(push_one)
        await sender.took.wait()
        (push,) = sender.pushes
        assert push.fence is fence, "the push reads the actor's fence when it leaves the queue, not a copy"
        before = fence.until
        await trio.sleep(0.01)
        await actor.lease.renew()
        assert fence.until > before and fence.until == actor.lease.until
        nursery.cancel_scope.cancel()  # the actor stops (here: cancelled) with the push still queued
    assert fence.until == -math.inf, "a stopped actor's queued pushes must not go out"
    assert await repos.locks.get(match_lock_key("500")) is not None, "cancelled, not released: it runs out"


async def test_a_round_whose_results_keep_coming_is_waited_for_however_long_it_takes(
    autojump_clock: Any,
) -> None:
    async with trio.open_nursery() as nursery:
        # 100 s for the round, each result within 30 s of the last
        sender = FakeSender(answer_after_s=20.0, nursery=nursery)
        start = trio.current_time()
        total, counts = await _fanout(sender).push_all(_five)
    assert total == 5 and counts["accepted"] == 5
    assert len(sender.rounds) == 1, "nothing re-sent while the queue was moving"
    assert trio.current_time() - start >= 100


async def test_a_fan_out_cut_short_leaves_its_late_answers_to_be_dropped(autojump_clock: Any) -> None:
    """A fan-out cancelled while answers are still owed (an owner that lost its lease) closes its channel; the
    test sender then drops those answers as ``ApnsSender`` does, instead of failing the nursery it runs in."""
    async with trio.open_nursery() as nursery:
        sender = FakeSender(answer_after_s=1.0, nursery=nursery)
        with trio.move_on_after(2.5):
            await _fanout(sender).push_all(_five)
    assert len(sender.pushes) == 5, "every push was handed over; the answers after the cut went nowhere"


async def test_a_round_that_stalls_re_sends_only_what_is_unanswered(autojump_clock: Any) -> None:
    lost = "3" * 64
    async with trio.open_nursery() as nursery:
        sender = FakeSender(answer_after_s=1.0, nursery=nursery)
        sender.unanswered = lambda push: push.token == lost and len(sender.rounds) < 2
        total, counts = await _fanout(sender).push_all(_five)
    assert counts["accepted"] == 5
    assert [[p.token for p in r] for r in sender.rounds[1:]] == [[lost]], "only the unanswered one again"


async def test_a_round_of_pushes_is_a_live_fan_out_while_it_is_in_progress(autojump_clock: Any) -> None:
    live = LiveWork()
    seen: list[int] = []

    async def watch() -> None:
        while True:
            seen.append(live.active)
            await trio.sleep(0.5)

    async with trio.open_nursery() as nursery:
        sender = FakeSender(answer_after_s=1.0, nursery=nursery)
        nursery.start_soon(watch)
        await trio.sleep(0.25)
        _, counts = await _fanout(sender, live=live).push_all(_five)
        nursery.cancel_scope.cancel()
    assert counts["accepted"] == 5
    assert seen[0] == 0 and 1 in seen, f"the round was marked in progress: {seen}"
    assert live.active == 0 and live.fanouts == 1, "and no longer once its results were in"


async def test_a_gate_holds_what_follows_it_until_everything_before_is_answered(autojump_clock: Any) -> None:
    answered: list[str] = []
    at_gate: list[list[str]] = []

    async def gate() -> None:
        at_gate.append(list(answered))

    async with trio.open_nursery() as nursery:
        sender = FakeSender(answer_after_s=1.0, nursery=nursery)
        fanout = FanOut(
            sender,
            fence=Fence(math.inf),
            check=lambda: None,
            policy=RetryPolicy(retry_max_s=300.0, backoff_max_s=1.0, result_timeout_s=30.0),
            live=LiveWork(),
            on_result=lambda r: answered.append(r.push.token),
        )
        _, counts = await fanout.push_all(_five, gates={2: gate, 4: gate})
    assert counts["accepted"] == 5
    assert [[p.token[0] for p in r] for r in sender.rounds] == [["1", "2"], ["3", "4"], ["5"]]
    assert [[t[0] for t in seen] for seen in at_gate] == [["1", "2"], ["1", "2", "3", "4"]]


async def test_a_gate_not_reached_before_a_stall_still_runs_before_its_pushes_are_sent(
    autojump_clock: Any,
) -> None:
    """Pushes never handed over because the round stalled go again, after their gate (their watermark)."""
    gates_run: list[int] = []
    async with trio.open_nursery() as nursery:
        sender = FakeSender(answer_after_s=1.0, nursery=nursery)
        sender.unanswered = lambda push: push.token[0] == "2" and len(sender.rounds) < 2

        async def gate() -> None:
            gates_run.append(len(sender.pushes))

        _, counts = await _fanout(sender, timeout_s=5.0).push_all(_five, gates={3: gate})
    assert counts["accepted"] == 5
    tokens = [[p.token[0] for p in r] for r in sender.rounds]
    assert tokens[0] == ["1", "2", "3"], "the first segment, up to the gate"
    assert tokens[1:] == [["2"], ["4", "5"]], "the unanswered one again, then the gate, then the rest"
    assert gates_run == [4], "the gate ran once, after the re-sent push and before the rest"
