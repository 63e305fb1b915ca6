"""The fan-out round: a tick's pushes handed to the sender and every result waited for, with the re-sends a
lost or failed push needs. The match actor's ticks, its alert intents and its push-to-starts all go through
``FanOut.push_all``; nothing else talks to the sender on a match's behalf.

Owns: handing pushes over in order (``gates`` hold a hand-off until everything before it is answered, then run
the caller's step, so an alert's watermark is never ahead of APNs's answers by more than one chunk), reading
the results as they come, re-sending what failed or went unanswered (without its alert where it may already
have been shown), and the lease check before each hand-off. What a result means for the fan-out (settled,
re-sent as it was, re-sent without its alert) and the wait between re-send rounds are the APNs rule table's
(``daemon.apns.rules.resend``, ``resend_delay``), as the sender's own retries are. Must not: decide what to
push, write state (the gates and ``on_result`` are the caller's). docs/delivery.md has the argument.

The prematch job (``actors.jobs.prematch``) hands its alerts and push-to-starts to the sender itself, not
through ``FanOut``, because three things differ for real: it holds no lease whose ``Fence`` could ride on its
pushes (its per-match lock and each follower's claim in DynamoDB are what stop a second sender); it never
re-sends within a round: a push that failed or went unanswered leaves its follower's claim unconfirmed, and
the claim's lease brings the follower back on a later cycle, on whichever instance, under the same collapse
id, so the retry is the claim, not the round; and it confirms each follower as that follower's last result
comes in, with at most ``send_concurrency`` claims between their pushes and their confirmation, where a
fan-out settles gate by gate. What a result means is the same rule for both (``daemon.apns.rules.resend``).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace

import trio

from actors.livework import LiveWork
from actors.ports import PushSender
from daemon.apns.rules import Resend, resend, resend_delay
from daemon.apns.types import Fence, Push, PushResult
from daemon.logs import get_logger

Build = Callable[[trio.MemorySendChannel[PushResult], Fence], list[Push]]
Gate = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class RetryPolicy:
    """How long a fan-out keeps re-sending, how long it waits between rounds, and how long it waits for a
    result before it takes the sender to have lost them (``[match]`` settings)."""

    retry_max_s: float
    backoff_max_s: float
    result_timeout_s: float


@dataclass
class Round:
    """What one hand-off left to do: pushes to send again (in order), the ids of those among them whose fate
    is unknown (sent, never answered), and the gates not yet passed, by index into ``retry``."""

    retry: list[Push]
    unknown: set[int]
    gates: dict[int, Gate]


class FanOut:
    """One producer's fan-outs to the shared sender, fenced by its lease."""

    def __init__(
        self,
        sender: PushSender,
        *,
        fence: Fence,
        check: Callable[[], None],
        policy: RetryPolicy,
        live: LiveWork,
        on_result: Callable[[PushResult], None] = lambda result: None,
        log_context: Mapping[str, str] | None = None,
    ) -> None:
        """``check`` raises when the producer may push no more (its lease); ``on_result`` sees every answer
        that settles a push (accepted or rejected), before it is counted."""
        self._sender = sender
        self._fence = fence
        self._check = check
        self._policy = policy
        self._live = live
        self._on_result = on_result
        self.log = get_logger("match", **(log_context or {}))
        self.first_answer_at: float | None = None  # of the current push_all (trio time)
        self._extra: Callable[[PushResult], None] | None = None

    async def push_all(
        self,
        build: Build,
        *,
        gates: Mapping[int, Gate] | None = None,
        quiet: Callable[[Push], Push] | None = None,
        on_result: Callable[[PushResult], None] | None = None,
    ) -> tuple[int, dict[str, int]]:
        """Hand pushes to the sender and wait for every result; returns how many were built and the outcome
        counts.

        ``build(reply_to, fence)`` makes the pushes, tagged with the channel their results come back on and the
        producer's fence, after which the sender must not send them (each push is built once: at 10,000 per
        tick, a copy per push is measurable).

        Pushes that failed (APNs down past the sender's own retry budget) or whose result did not come back in
        time are sent again, the same payload with the same timestamp, with a capped backoff, until accepted or
        ``retry_max_s`` has passed; ``quiet`` (given by an alerting fan-out) turns a push whose fate is unknown
        (it went out and no answer came) into its ``resend_payload``, the update without its alert, so no
        device shows the alert twice; a push APNs answered with an error, or that never left, is re-sent as it
        was. The lease is checked before every hand-off: a paused or cut-off producer stops here.

        ``gates`` (index -> coroutine function): the pushes from that index on are handed over only once every
        push before it has its result, and the gate has run (an alerting fan-out persists its watermark
        there). ``on_result`` sees this fan-out's settling answers too, after the fan-out's own."""
        counts = {"accepted": 0, "rejected": 0, "failed": 0}
        self.first_answer_at = None
        self._extra = on_result
        deadline = trio.current_time() + self._policy.retry_max_s
        send, receive = trio.open_memory_channel[PushResult](math.inf)
        async with receive:
            self._check()
            pending = build(send, self._fence)
            total = len(pending)
            open_gates = dict(gates or {})
            attempt = 0
            while pending:
                with self._live.fanout():  # background jobs of this instance give way meanwhile
                    left = await self._round(pending, receive, counts, open_gates)
                if not left.retry:
                    break
                if trio.current_time() >= deadline:
                    counts["failed"] += len(left.retry)
                    self.log.error(
                        "pushes_given_up", pushes=len(left.retry), after_s=self._policy.retry_max_s
                    )
                    break
                delay = resend_delay(attempt + 1, cap_s=self._policy.backoff_max_s)
                self.log.warning(
                    "pushes_retrying", pushes=len(left.retry), attempt=attempt + 1, delay_s=delay
                )
                await trio.sleep(delay)
                attempt += 1
                self._check()
                # new objects: a late answer to the last round is then recognised and ignored
                pending = [
                    quiet(push) if quiet is not None and id(push) in left.unknown else replace(push)
                    for push in left.retry
                ]
                open_gates = left.gates
        return total, counts

    async def _round(
        self,
        pushes: list[Push],
        receive: trio.MemoryReceiveChannel[PushResult],
        counts: dict[str, int],
        gates: Mapping[int, Gate],
    ) -> Round:
        """One hand-off of ``pushes``, gate by gate; returns what is left to do.

        The pushes between two gates go to the sender in one ``send_many`` and the results are taken as they
        are buffered, awaiting only when none is: a scheduler trip per push each way cost as much CPU as the
        push itself. The round ends early only when no result at all has come for ``result_timeout_s`` (the
        sender lost them: it was restarted); a long queue that is moving is waited for, since re-sending what
        is still queued would only lengthen it."""
        cuts = sorted(i for i in gates if 0 <= i < len(pushes))
        bounds = sorted({0, *cuts, len(pushes)})
        waiting: dict[int, Push] = {}
        retry: list[Push] = []
        unknown: set[int] = set()
        handed = 0  # pushes handed over so far
        stalled = False
        for start, end in zip(bounds, bounds[1:], strict=False):
            if start in gates:
                if await self._collect(waiting, receive, counts, retry, unknown):
                    stalled = True
                    break
                await gates[start]()
                self._check()
            segment = pushes[start:end]
            if segment:
                waiting.update((id(p), p) for p in segment)
                await self._sender.send_many(segment)
            handed = end
        if not stalled:
            await self._collect(waiting, receive, counts, retry, unknown)
        # Whatever was not handed over goes again after what was, its gates moved along with it.
        left_gates = {len(retry) + (i - handed): gates[i] for i in cuts if i >= handed}
        retry.extend(pushes[handed:])
        return Round(retry, unknown, left_gates)

    async def _collect(
        self,
        waiting: dict[int, Push],
        receive: trio.MemoryReceiveChannel[PushResult],
        counts: dict[str, int],
        retry: list[Push],
        unknown: set[int],
    ) -> bool:
        """Take results until every push in ``waiting`` has one; True when the results stopped coming (the
        unanswered pushes then join ``retry`` as of unknown fate)."""
        total = len(waiting)
        while waiting:
            try:
                result = receive.receive_nowait()
            except trio.WouldBlock:
                got: PushResult | None = None
                with trio.move_on_after(self._policy.result_timeout_s):
                    got = await receive.receive()
                if got is None:
                    self.log.warning(
                        "push_results_timed_out",
                        pending=len(waiting),
                        total=total,
                        idle_s=self._policy.result_timeout_s,
                    )
                    retry.extend(waiting.values())
                    unknown.update(waiting)
                    waiting.clear()
                    return True
                result = got
            push = waiting.pop(id(result.push), None)
            if push is None:
                continue  # a late answer to an earlier round
            if self.first_answer_at is None:
                self.first_answer_at = trio.current_time()
            again = resend(result)
            if again is not Resend.SETTLED:
                retry.append(push)
                if again is Resend.QUIET:
                    unknown.add(id(push))
                continue
            counts[result.outcome] = counts.get(result.outcome, 0) + 1
            self._on_result(result)
            if self._extra is not None:
                self._extra(result)
        return False
