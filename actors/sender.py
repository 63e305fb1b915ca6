"""The APNs sender actor: one per process, every push goes through it.

Owns: the inboxes of ``Push`` requests, one per lane (bounded: a full inbox blocks its producers; an
alert is never stuck behind a queue of routine updates), the lanes' queues (priority-10 updates and alerts,
then priority-5 updates, then push-to-starts: a match actor's ticks go one after the other, so a routine
tick held behind a match's thousands of push-to-starts would hold the next wicket too), one route per APNs
host (the push host, and the broadcast host when ``[apns].broadcast_host`` names another: each with its own
lanes and pool of connections), retries, the set of tokens APNs declared dead, and the one ``PushResult`` per
push; it builds channel management (``actors.channel_management``) on the same provider tokens.
Must not touch: connections (``daemon.apns.driver``: TLS, SETTINGS, tokens on the wire, PINGs, which
connection is dead), HTTP/2 framing (``daemon.apns.connection``), Apple's answer table
(``daemon.apns.rules``), DynamoDB or Live Activity sessions (the janitor gets the rejected results).

Delivery contract (docs/delivery.md):
- every push gets exactly one ``PushResult`` on ``push.reply_to`` (when set);
- a "rejected" result (the token is dead for the topic) also goes to the janitor, once per token; later
  pushes to that token are rejected at once, without a request;
- a push is never lost to GOAWAY, REFUSED_STREAM, a dropped or silently dead connection or a deadline: it is
  re-sent until it is answered or its retry budget is spent ("failed"). A request APNs may have processed
  (deadline passed, connection lost after it went out) can be delivered twice; such a re-send carries
  ``Push.resend_payload`` when the producer gave one (an alerting update without its alert), so no alert is
  shown twice.

Throughput: nothing here runs per push except a few dict/deque operations. Each connection's writer fills
every free stream slot from its route's queues in one pass (``_fill``) and ships the whole batch in one TLS
write; its reader settles a whole TLS read's worth of answers before yielding. There are no per-push tasks.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import random
import ssl
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import trio

from actors.channel_management import ChannelManagement
from daemon import metrics
from daemon.apns.connection import Answered, ApnsConnection, Outcome, Unanswered
from daemon.apns.driver import ConnectionPool, Link, TlsDialer, Traffic, Wakeup, ssl_context_for
from daemon.apns.rules import (
    Action,
    Again,
    Step,
    after_answer,
    after_silence,
    check_push,
    classify,
    retry_delay,
)
from daemon.apns.settings import ApnsSettings
from daemon.apns.token import ProviderTokenPolicy, ProviderTokens, load_signing_key
from daemon.apns.types import ApnsConfigurationError, Push, PushResult
from daemon.logs import get_logger, short_token

log = get_logger("apns.sender")

_MAX_DEAD_TOKENS: Final = 1_000_000
_LATENCY_SAMPLES: Final = 20_000
# sightscreen_pushes is moved once per this many settled pushes (and whenever the sender falls idle or is
# looked at), not once per push
_COUNTS_BATCH: Final = 256


@dataclass(slots=True, eq=False)
class _Exchange:
    """One push's journey through the sender, across attempts and connections."""

    push: Push
    enqueued_at: float
    attempts: int = 0  # requests put on the wire
    retries: int = 0  # transient failures consumed from the budget
    requeues: int = 0  # re-sends of requests APNs never processed
    provider_token_retried: bool = False
    last_status: int | None = None
    last_reason: str | None = None
    wire: Push | None = None  # what goes on the wire from now on, when not ``push`` (see Push.resend_payload)


class _Lane:
    """One priority's way in: its bounded inbox, the queue the intake fills from it (at most ``cap``), and
    the wake-up a writer gives when it has taken from the queue."""

    __slots__ = ("send", "recv", "queue", "cap", "room")

    def __init__(self, cap: int) -> None:
        self.send, self.recv = trio.open_memory_channel[Push](cap)
        self.queue: deque[_Exchange] = deque()
        self.cap = cap
        self.room = Wakeup()


class _Route:
    """The way to one APNs host: the lanes of the pushes for it, in sending order (priority-10 updates and
    alerts, priority-5 updates, push-to-starts), and the pool of connections that carries them (set once the
    sender has built it)."""

    __slots__ = ("urgent", "routine", "start", "lanes", "queues", "pool")

    def __init__(self, cap: int) -> None:
        self.urgent = _Lane(cap)
        self.routine = _Lane(cap)
        self.start = _Lane(cap)  # push-to-starts: priority 10, after every update
        self.lanes = (self.urgent, self.routine, self.start)
        self.queues = tuple(lane.queue for lane in self.lanes)
        self.pool: ConnectionPool

    def pending(self) -> bool:
        return any(self.queues)

    def next_exchange(self) -> _Exchange | None:
        for queue in self.queues:
            if queue:
                return queue.popleft()
        return None


class ApnsSender:
    """The actor. ``run`` it in a nursery (``await nursery.start(sender.run)``); producers use ``send``."""

    def __init__(
        self,
        settings: ApnsSettings,
        *,
        janitor: trio.MemorySendChannel[PushResult] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        tokens: ProviderTokens | None = None,
    ) -> None:
        self.settings = settings
        parts = urlsplit(settings.url)
        if parts.scheme != "https" or not parts.hostname:
            raise ValueError(f"apns.url: expected https://HOST[:PORT], got {settings.url!r}")
        if tokens is None:
            key = load_signing_key(settings.signing_key_pem())
            policy = ProviderTokenPolicy(refresh_after_s=settings.token_refresh_s)
            tokens = ProviderTokens(
                key, team_id=settings.team_id, key_id=settings.key_id, policy=policy, clock=clock
            )
        self._tokens = tokens
        self._rng = rng or random.Random()
        tls = ssl_context or ssl_context_for(settings)
        push_host = (parts.hostname, parts.port or 443)
        # Broadcasts ride the push connections unless [apns].broadcast_host names another host: then they get
        # a route of their own (same provider tokens, same driver, one connection).
        broadcast_host: tuple[str, int] | None = None
        if settings.broadcast_host:
            b = urlsplit(f"https://{settings.broadcast_host}")
            if not b.hostname:
                raise ValueError(
                    f"apns.broadcast_host: expected HOST[:PORT], got {settings.broadcast_host!r}"
                )
            if (b.hostname, b.port or 443) != push_host:
                broadcast_host = (b.hostname, b.port or 443)
        self._push = self._route("push", TlsDialer(*push_host, tls), settings.connections)
        self._broadcast = (
            self._route("broadcast", TlsDialer(*broadcast_host, tls), 1) if broadcast_host else self._push
        )
        self._routes = (self._push,) if self._broadcast is self._push else (self._push, self._broadcast)
        self.channels: ChannelManagement | None = None
        if settings.manages_channels():
            self.channels = ChannelManagement(
                TlsDialer(*settings.management_address(), tls),
                settings=settings,
                tokens=tokens,
                on_configuration_error=self._configuration_error,
                rng=self._rng,
            )
        self._janitor = janitor
        self._retry_heap: list[tuple[float, int, _Exchange]] = []
        self._retry_seq = itertools.count()
        self._retry_wake = Wakeup()
        self._dead: dict[str, str] = {}
        self._undelivered: deque[tuple[trio.MemorySendChannel[PushResult], PushResult]] = deque()
        self._undeliverable_logged_at = -math.inf
        self._undeliverable_count = 0
        self._delivery_wake = Wakeup()
        self._idle_wake = Wakeup()
        self._outstanding = 0  # pushes taken from the inbox and not yet settled
        self._draining = False
        self._stopped = False
        self._fatal: ApnsConfigurationError | None = None
        self._cancel_scope: trio.CancelScope | None = None
        self._counts: dict[str, int] = {"accepted": 0, "rejected": 0, "failed": 0}
        self._latencies: deque[float] = deque(maxlen=_LATENCY_SAMPLES)
        self._retries_total = 0
        self._requeues_total = 0
        self._pushes_metric = {
            (kind, outcome): metrics.PUSHES.labels(kind=kind, outcome=outcome)
            for kind in ("start", "update", "end", "alert")
            for outcome in ("accepted", "rejected", "failed")
        }
        self._unreported: dict[tuple[str, str], int] = {}  # settled, not yet in sightscreen_pushes
        self._unreported_total = 0
        # Every error series exists from the start at 0, so the first configuration error shows as an
        # increase to the alert rules rather than as a new series Prometheus has no earlier sample of.
        for action in Action:
            if action is not Action.ACCEPTED:
                metrics.APNS_ERRORS.labels(action.value)

    def _route(self, name: str, dialer: TlsDialer, size: int) -> _Route:
        route = _Route(self.settings.inbox_size)
        route.pool = ConnectionPool(
            name,
            dialer,
            settings=self.settings,
            tokens=self._tokens,
            traffic=Traffic(
                pending=route.pending,
                fill=lambda link, conn, now: self._fill(route, link, conn, now),
                settle=self._handle,
                closed=self._connection_closed,
            ),
            on_configuration_error=self._configuration_error,
            size=size,
            rng=self._rng,
        )
        return route

    # -- the public interface -----------------------------------------------------------------------------
    async def send(self, push: Push) -> None:
        """Enqueue ``push``; blocks while its priority's inbox is full (backpressure)."""
        await self._lane(push).send.send(push)

    async def send_many(self, pushes: Iterable[Push]) -> None:
        """Enqueue ``pushes`` in order, blocking only while the inbox is full.

        ``await send`` is a trip through trio's scheduler for every push (a checkpoint even when the inbox
        has room); a match actor's 10,000-token fan-out puts them in without yielding and yields once at the
        end (or whenever the inbox is full). Producers blocked on a full inbox keep their turn: trio refills
        the buffer from waiting senders before a ``send_nowait`` finds room."""
        for push in pushes:
            inbox = self._lane(push).send
            try:
                inbox.send_nowait(push)
            except trio.WouldBlock:
                await inbox.send(push)
        await trio.lowlevel.checkpoint()

    async def send_and_wait(self, push: Push) -> PushResult:
        reply_send, reply_recv = trio.open_memory_channel[PushResult](1)
        await self.send(dataclasses.replace(push, reply_to=reply_send))
        async with reply_recv:
            return await reply_recv.receive()

    @property
    def connected(self) -> bool:
        """A push connection is open (it may still be silent: ``health`` judges that)."""
        return self._push.pool.connected

    def health(self) -> tuple[bool, str]:
        """(True, "") while every pool in use has a connection that is open and answering; else False and why
        (each pool's own reason: nothing heard for so long, a connect error, retired as dead...)."""
        checks = [route.pool.health() for route in self._routes]
        if self.channels is not None:
            checks.append(self.channels.health())
        problems = [why for ok, why in checks if not ok]
        return (not problems, "; ".join(problems))

    def stats(self) -> dict[str, Any]:
        self._report_counts()
        samples = sorted(self._latencies)

        def pct(p: float) -> float | None:
            if not samples:
                return None
            return round(samples[min(len(samples) - 1, int(p * len(samples)))] * 1000, 3)

        push = self._push
        healthy, why = self.health()
        return {
            **push.pool.stats(),
            "queued": {
                "high": len(push.urgent.queue),
                "start": len(push.start.queue),
                "low": len(push.routine.queue),
                "retry": len(self._retry_heap),
            },
            "inbox": {
                "high": push.urgent.recv.statistics().current_buffer_used,
                "start": push.start.recv.statistics().current_buffer_used,
                "low": push.routine.recv.statistics().current_buffer_used,
            },
            "pushes": dict(self._counts),
            "retries": self._retries_total,
            "requeues": self._requeues_total,
            "dead_tokens": len(self._dead),
            "provider_tokens_minted": self._tokens.minted,
            "latency_ms": {"p50": pct(0.50), "p99": pct(0.99)},
            "healthy": healthy,
            **({"unhealthy_because": why} if not healthy else {}),
            "channel_requests": dict(self.channels.counts) if self.channels is not None else {},
            **({"broadcast_pool": self._broadcast.pool.stats()} if self._broadcast is not self._push else {}),
        }

    async def drain(self, grace_s: float) -> None:
        """Stop taking new pushes; finish what was taken within ``grace_s``; fail the rest; then stop ``run``."""
        self._draining = True
        # Take what producers already handed over, then close the inboxes: later sends raise
        # BrokenResourceError at the producer instead of waiting in a queue nobody reads.
        now = trio.current_time()
        for push in self._take_inboxes():
            self._accept(push, now)
        for route in self._routes:
            for lane in route.lanes:
                lane.recv.close()
        self._wake_writers()
        with trio.move_on_after(grace_s):
            while self._outstanding > 0:
                await self._idle_wake.wait()
        self._stop("ShuttingDown")

    # -- the actor ----------------------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled or drained. Raises ``ApnsConfigurationError`` when APNs refuses our credentials."""
        log.info(
            "apns_sender_starting",
            url=self.settings.url,
            connections=len(self._push.pool.links),
            broadcast_host=self._broadcast.pool.dialer.authority if self._broadcast is not self._push else "",
        )
        try:
            with trio.CancelScope() as scope:
                self._cancel_scope = scope
                async with trio.open_nursery() as nursery:
                    for route in self._routes:
                        for lane in route.lanes:
                            nursery.start_soon(self._intake, route, lane)
                        nursery.start_soon(route.pool.run)
                    nursery.start_soon(self._retry_loop)
                    nursery.start_soon(self._delivery_loop)
                    if self.channels is not None:
                        nursery.start_soon(self.channels.run)
                    # Connections come up in the background: an unreachable APNs must not block start-up.
                    task_status.started()
        finally:
            self._stopped = True
            reason = self._fatal.reason if self._fatal is not None else "ShuttingDown"
            self._fail_everything(reason)
            self._report_counts()
            for route in self._routes:
                for lane in route.lanes:
                    lane.recv.close()
            metrics.APNS_CONNECTIONS.set(0)
            metrics.APNS_STREAMS.set(0)
            log.info("apns_sender_stopped", **self._counts, undeliverable=self._undeliverable_count)
        if self._fatal is not None:
            raise self._fatal

    def _stop(self, reason: str) -> None:
        if self._cancel_scope is not None:
            self._cancel_scope.cancel()

    # -- intake and queues --------------------------------------------------------------------------------
    async def _intake(self, route: _Route, lane: _Lane) -> None:
        recv, queue, cap = lane.recv, lane.queue, lane.cap
        wake_writers = route.pool.wake_writers
        window = self.settings.batch_window_s
        last_batch = -1.0
        while True:
            # Backpressure: take from the inbox only while the internal queues have room, so a slow APNs
            # fills the inbox and producers block on it.
            while len(queue) >= cap:
                await lane.room.wait()
            try:
                push = await recv.receive()
            except (trio.EndOfChannel, trio.ClosedResourceError):
                return  # drained (or every producer is gone)
            now = trio.current_time()
            self._accept(push, now, queue)
            # Take whatever else is already waiting without yielding per push.
            while len(queue) < cap:
                try:
                    push = recv.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                    break
                self._accept(push, now, queue)
            wake_writers()
            if now - last_batch < window and not self._draining:
                # Pushes are arriving in a stream: let them gather in the inbox for a moment rather than
                # waking this task and a writer for every few pushes. A lone push still goes out at once;
                # under load this adds at most ``batch_window_s`` of latency (small beside APNs's round
                # trip) and turns many small TLS writes and reads into few large ones, about half the CPU per
                # push at a 10 ms window.
                await trio.sleep(window)
            last_batch = now

    def _accept(self, push: Push, now: float, queue: deque[_Exchange] | None = None) -> None:
        """Take ``push`` from its inbox (at ``now``, the intake's time for the batch it came in) into ``queue``,
        its lane's (the intake knows it; else it is looked up)."""
        exchange = _Exchange(push, now)
        self._outstanding += 1
        dead_reason = self._dead.get(push.token)
        if dead_reason is not None:
            self._settle(exchange, "rejected", None, dead_reason, None, report_dead=False)
            return
        problem = check_push(push)
        if problem is not None:
            log.error(
                "apns_push_invalid",
                reason=problem,
                kind=push.kind,
                token=short_token(push.token),
                payload_bytes=len(push.payload),
                note="bug in the push's producer: not sent",
            )
            self._settle(exchange, "failed", None, problem, None)
            return
        (self._lane(push).queue if queue is None else queue).append(exchange)

    def _take_inboxes(self) -> Iterator[Push]:
        """Whatever producers have handed over and the intakes have not taken yet, urgent first."""
        for lane in (lane for route in self._routes for lane in route.lanes):
            while True:
                try:
                    yield lane.recv.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                    break

    def _route_of(self, push: Push) -> _Route:
        return self._broadcast if push.channel_id is not None else self._push

    def _lane(self, push: Push) -> _Lane:
        route = self._broadcast if push.channel_id is not None else self._push
        if push.priority != 10:
            return route.routine
        return route.start if push.kind == "start" else route.urgent

    def _requeue_front(self, exchange: _Exchange) -> None:
        self._lane(exchange.push).queue.appendleft(exchange)

    def _wake_writers(self) -> None:
        for route in self._routes:
            route.pool.wake_writers()

    async def _retry_loop(self) -> None:
        heap = self._retry_heap
        while True:
            if heap:
                with trio.move_on_at(heap[0][0]):
                    await self._retry_wake.wait()
            else:
                await self._retry_wake.wait()
            now = trio.current_time()
            moved = False
            while heap and heap[0][0] <= now:
                _, _, exchange = heapq.heappop(heap)
                self._requeue_front(exchange)
                moved = True
            if moved:
                self._wake_writers()

    def _schedule_retry(self, exchange: _Exchange, delay: float) -> None:
        if delay <= 0:
            self._requeue_front(exchange)
            self._route_of(exchange.push).pool.wake_writers()
            return
        heapq.heappush(self._retry_heap, (trio.current_time() + delay, next(self._retry_seq), exchange))
        self._retry_wake.set()

    # -- results ------------------------------------------------------------------------------------------
    def _settle(
        self,
        exchange: _Exchange,
        outcome: str,
        status: int | None,
        reason: str | None,
        apns_id: str | None,
        *,
        report_dead: bool = False,
        now: float | None = None,
    ) -> None:
        """Give ``exchange`` its one result (``now``: the answer's time when the caller has it, else the clock's)."""
        push = exchange.push
        latency = (trio.current_time() if now is None else now) - exchange.enqueued_at
        result = PushResult(push, outcome, status, reason, apns_id, exchange.attempts, latency)
        self._counts[outcome] += 1
        self._latencies.append(latency)
        if push.channel_id is not None:
            metrics.BROADCASTS.labels(kind=push.kind, outcome=outcome).inc()
        else:
            key = (push.kind, outcome)
            unreported = self._unreported
            unreported[key] = unreported.get(key, 0) + 1
            self._unreported_total += 1
            if self._unreported_total >= _COUNTS_BATCH:
                self._report_counts()
        metrics.PUSH_LATENCY.observe(latency)
        if push.reply_to is not None:
            self._deliver(push.reply_to, result)
        if report_dead and self._janitor is not None:
            self._deliver(self._janitor, result)
        self._outstanding -= 1
        if self._outstanding == 0:
            self._report_counts()
            self._idle_wake.set()

    def _report_counts(self) -> None:
        """Add the pushes settled since the last report to sightscreen_pushes."""
        if not self._unreported_total:
            return
        for (kind, outcome), n in self._unreported.items():
            counter = self._pushes_metric.get((kind, outcome))
            if counter is None:
                counter = metrics.PUSHES.labels(kind=kind, outcome=outcome)
            counter.inc(n)
        self._unreported.clear()
        self._unreported_total = 0

    def _deliver(self, channel: trio.MemorySendChannel[PushResult], result: PushResult) -> None:
        if self._undelivered:
            self._undelivered.append((channel, result))  # keep order behind earlier blocked results
            return
        try:
            channel.send_nowait(result)
        except trio.WouldBlock:
            # A slow consumer must not stall a connection's reader: park the result for the delivery task.
            self._undelivered.append((channel, result))
            self._delivery_wake.set()
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            self._undeliverable(result)

    def _undeliverable(self, result: PushResult) -> None:
        """The producer stopped listening (a match actor that ended or was cancelled): its results go
        nowhere. Logged once per producer burst, counted, not once per push (a stopping owner of a
        10,000-token match would write 10,000 lines)."""
        self._undeliverable_count += 1
        now = trio.current_time()
        if now - self._undeliverable_logged_at >= 5.0:
            self._undeliverable_logged_at = now
            log.warning(
                "apns_results_undeliverable",
                example_token=short_token(result.push.token),
                outcome=result.outcome,
                total=self._undeliverable_count,
            )

    async def _delivery_loop(self) -> None:
        while True:
            while not self._undelivered:
                await self._delivery_wake.wait()
            channel, result = self._undelivered[0]
            try:
                await channel.send(result)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                self._undeliverable(result)
            self._undelivered.popleft()

    def _mark_dead(self, exchange: _Exchange, status: int, reason: str, apns_id: str | None) -> None:
        token = exchange.push.token
        first = token not in self._dead
        if first:
            if len(self._dead) >= _MAX_DEAD_TOKENS:
                self._dead.pop(next(iter(self._dead)))
            self._dead[token] = reason
            metrics.DEAD_TOKENS.labels(reason=reason).inc()
            log.info("apns_token_dead", token=short_token(token), reason=reason, status=status)
        self._settle(exchange, "rejected", status, reason, apns_id, report_dead=first)

    def _fail_everything(self, reason: str) -> None:
        """Stopping: every push not yet answered gets its "failed" result now."""
        queues = [queue for route in self._routes for queue in route.queues]
        leftovers: list[_Exchange] = [
            *(e for queue in queues for e in queue),
            *(e for _, _, e in self._retry_heap),
        ]
        for queue in queues:
            queue.clear()
        self._retry_heap.clear()
        for route in self._routes:
            leftovers.extend(o.exchange for o in route.pool.abandon())
        for push in self._take_inboxes():
            self._outstanding += 1
            leftovers.append(_Exchange(push, trio.current_time()))
        for exchange in leftovers:
            self._settle(exchange, "failed", exchange.last_status, reason, None)
        # Results parked for slow consumers: last chance, without blocking.
        while self._undelivered:
            channel, result = self._undelivered.popleft()
            try:
                channel.send_nowait(result)
            except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
                log.warning("apns_result_dropped_at_stop", token=short_token(result.push.token))

    # -- outcomes -----------------------------------------------------------------------------------------
    def _handle(self, link: Link, outcome: Outcome, now: float) -> None:
        exchange: _Exchange = outcome.exchange
        if type(outcome) is Answered:
            if outcome.status == 200:  # the hot path
                # An accepted answer's apns-id is not decoded (see ResponseHeaderDecoder): report ours.
                apns_id = outcome.apns_id or exchange.push.apns_id
                self._settle(exchange, "accepted", 200, None, apns_id, now=now)
                return
            verdict = classify(outcome.status, outcome.reason)
            metrics.APNS_ERRORS.labels(verdict.action.value).inc()
            step = after_answer(
                verdict,
                retries=exchange.retries,
                max_retries=self.settings.max_retries,
                fresh_token_used=exchange.provider_token_retried,
            )
            self._follow(link, exchange, step, outcome.status, outcome.apns_id)
            return
        assert isinstance(outcome, Unanswered)
        if not outcome.processed:
            self._requeues_total += 1
        step = after_silence(
            outcome.cause,
            outcome.processed,
            retries=exchange.retries,
            requeues=exchange.requeues,
            max_retries=self.settings.max_retries,
        )
        self._follow(link, exchange, step, None, None)

    def _follow(
        self, link: Link, exchange: _Exchange, step: Step, status: int | None, apns_id: str | None
    ) -> None:
        """Apply the rule table's ``step`` (``daemon.apns.rules``) to ``exchange``: its result now, or its next
        attempt; the connection and provider token it names replaced."""
        push = exchange.push
        reason = step.reason or f"HTTP{status}"
        if step.new_provider_token:
            conn = link.conn
            if conn is not None and conn.token is not None:
                self._tokens.invalidate(conn.token)
        if step.new_connection:
            link.recycle(reason)
        if step.may_have_arrived and push.resend_payload is not None and exchange.wire is None:
            # it may have been delivered: a re-send must not show its alert again
            exchange.wire = dataclasses.replace(push, payload=push.resend_payload, collapse_id=None)
        again = step.again
        if again is Again.AFTER_BACKOFF or again is Again.AT_ONCE:
            exchange.last_status, exchange.last_reason = status, reason
            exchange.retries += 1
            self._retries_total += 1
            delay = 0.0
            if again is Again.AFTER_BACKOFF:
                s = self.settings
                delay = retry_delay(
                    exchange.retries, base_s=s.retry_backoff_s, cap_s=s.retry_backoff_max_s, rng=self._rng
                )
            self._schedule_retry(exchange, delay)
            return
        if again is Again.REQUEUE:
            exchange.requeues += 1
            self._schedule_retry(exchange, 0.0)
            return
        if again is Again.FRESH_TOKEN:
            exchange.provider_token_retried = True
            self._schedule_retry(exchange, 0.0)
            return
        outcome = step.outcome
        assert outcome is not None
        if step.exhausted:
            exchange.last_status, exchange.last_reason = status, reason
            self._settle(exchange, "failed", status, reason, None)
            return
        action = step.verdict.action
        if action is Action.DEAD_TOKEN:
            assert status is not None
            self._mark_dead(exchange, status, reason, apns_id)
        elif action is Action.CONFIGURATION:
            self._settle(exchange, "failed", status, reason, apns_id)
            self._configuration_error(reason, status)
        elif action is Action.RECREATE_CHANNEL or action is Action.CHANNEL_LIMIT:
            # final for this channel, like a dead token for a device; the producer (the match's channel
            # manager) recreates the channel and re-announces it
            log.warning(
                "apns_broadcast_channel_refused", reason=reason, channel=push.channel_id, kind=push.kind
            )
            self._settle(exchange, "rejected", status, reason, apns_id)
        elif action is Action.PAYLOAD_BUG:
            log.error(
                "apns_payload_too_large",
                kind=push.kind,
                push_type=push.push_type,
                payload_bytes=len(push.payload),
                token=short_token(push.token),
                note="bug in the payload builder: APNs refused the body size",
            )
            self._settle(exchange, "failed", status, reason, apns_id)
        elif action is Action.BUG:
            log.error(
                "apns_request_rejected_as_malformed",
                status=status,
                reason=reason,
                kind=push.kind,
                push_type=push.push_type,
                token=short_token(push.token),
                note="bug in our request",
            )
            self._settle(exchange, "failed", status, reason, apns_id)
        else:  # a fresh provider token did not help either
            self._settle(exchange, outcome, status, reason, apns_id)

    def _configuration_error(self, reason: str, status: int | None, detail: str = "") -> None:
        if self._fatal is None:
            hint = {
                "InvalidProviderToken": "check apns.team_id, apns.key_id and the .p8 key",
                "BadEnvironmentKeyIdInToken": "the key belongs to the other APNs environment (apns.url)",
                "BadEnvironmentKeyInToken": "the key belongs to the other APNs environment (apns.url)",
                "TopicDisallowed": "the key may not push to apns.topic",
                "BadTopic": "apns.topic is not a valid bundle id",
                "Forbidden": "APNs forbids this action for the key",
            }.get(reason, "")
            self._fatal = ApnsConfigurationError(reason, status, detail or hint)
            log.error("apns_configuration_error", reason=reason, status=status, detail=detail or hint)
        self._stop(reason)

    # -- what the connections call (``daemon.apns.driver.Traffic``) ---------------------------------------
    def _fill(self, route: _Route, link: Link, conn: ApnsConnection, now: float) -> int:
        """Start requests on ``conn`` from ``route``'s queues while it has free stream slots and window."""
        dead = self._dead
        next_exchange = route.next_exchange
        sent = 0
        while conn.can_send():
            exchange = next_exchange()
            if exchange is None:
                break
            push = exchange.push
            dead_reason = dead.get(push.token)
            if dead_reason is not None:  # died while this push waited in the queue
                self._settle(exchange, "rejected", None, dead_reason, None)
                continue
            fence = push.fence
            if fence is not None and now > fence.until:
                # its producer's lease ran out while it waited (paused, cut off): never send late
                self._settle(exchange, "failed", None, "NotAfterPassed", None)
                continue
            exchange.attempts += 1
            conn.send(exchange.wire or push, exchange, now)
            sent += 1
        if sent:
            for lane in route.lanes:
                lane.room.set()
            self._update_stream_gauge()
        return sent

    def _connection_closed(self, link: Link, orphans: list[Unanswered]) -> None:
        """A connection ended: its requests still unanswered go round again (unless the sender is stopping:
        ``_fail_everything`` answers them)."""
        if not self._stopped:
            now = trio.current_time()
            for orphan in orphans:
                self._handle(link, orphan, now)
            self._update_stream_gauge()

    def _update_stream_gauge(self) -> None:
        metrics.APNS_STREAMS.set(sum(route.pool.in_flight for route in self._routes))
