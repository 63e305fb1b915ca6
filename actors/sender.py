"""The APNs sender actor: one per process, every push goes through it.

Owns: the inboxes of ``Push`` requests, one per lane (bounded: a full inbox blocks its producers; an
alert is never stuck behind a queue of routine updates), the lanes' queues (priority-10 updates and alerts,
then priority-5 updates, then push-to-starts: a match actor's ticks go one after the other, so a routine
tick held behind a match's thousands of push-to-starts would hold the next wicket too), the pool of
HTTP/2 connections (TLS with ALPN h2, one reader and one writer task per connection), the provider-token
cache, retries, the set of tokens APNs declared dead, and the one ``PushResult`` per push.
Must not touch: DynamoDB or Live Activity sessions (the janitor gets the rejected results and acts on them),
payload building, HTTP/2 framing details (``daemon.apns.connection``), Apple's answer table
(``daemon.apns.rules``).

Delivery contract:
- every push gets exactly one ``PushResult`` on ``push.reply_to`` (when set);
- a "rejected" result (the token is dead for the topic) also goes to the janitor, once per token; later
  pushes to that token are rejected at once, without a request;
- a push is never lost to GOAWAY, REFUSED_STREAM, a dropped connection or a deadline: it is re-sent until it
  is answered or its retry budget is spent ("failed"). A request APNs may have processed (deadline passed,
  connection lost after it went out) can be delivered twice; such a re-send carries ``Push.resend_payload``
  when the producer gave one (an alerting update without its alert), so no alert is shown twice.

Throughput: nothing here runs per push except a few dict/deque operations. Each connection's writer fills
every free stream slot from the queues in one pass, and ships the whole batch in one TLS write; its reader
settles a whole TLS read's worth of answers before yielding. There are no per-push tasks.
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
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

import h2.exceptions
import trio

from daemon import metrics
from daemon.apns.connection import Answered, ApnsConnection, Outcome, Unanswered
from daemon.apns.internals import drain_decrypted
from daemon.apns.rules import Action, check_push, classify
from daemon.apns.settings import ApnsSettings
from daemon.apns.token import ProviderToken, ProviderTokenPolicy, ProviderTokens, load_signing_key
from daemon.apns.types import ApnsConfigurationError, Push, PushResult
from daemon.backoff import backoff_delay
from daemon.logs import get_logger, short_token

log = get_logger("apns.sender")

_READ_SIZE: Final = 1 << 18
# Re-sending a push APNs never processed (REFUSED_STREAM, above GOAWAY's last stream) is free of side
# effects, so it does not use the retry budget; this bound only stops a server that refuses forever.
_MAX_REQUEUES: Final = 50
_MAX_DEAD_TOKENS: Final = 1_000_000
_LATENCY_SAMPLES: Final = 20_000
# Write coalescing (see ApnsSender._coalesce): a batch worth a syscall, and the longest wait for it.
_COALESCE_BATCH: Final = 64
_COALESCE_S: Final = 0.002


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


class _Wakeup:
    """A level-triggered wake-up: ``set`` before ``wait`` is not lost, and ``wait`` re-arms it."""

    __slots__ = ("_event", "_flag")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._flag = False

    def set(self) -> None:
        if not self._flag:
            self._flag = True
            self._event.set()

    async def wait(self) -> None:
        """Return once set (at once if already set); always a schedule point, so a loop around it can never
        hold the event loop (a writer spinning on an already-set wake-up would freeze the process)."""
        if self._flag:
            await trio.lowlevel.checkpoint()
        else:
            await self._event.wait()
        self._flag = False
        self._event = trio.Event()


class _Lane:
    """One priority's way in: its bounded inbox, the queue the intake fills from it (at most ``cap``), and
    the wake-up a writer gives when it has taken from the queue."""

    __slots__ = ("send", "recv", "queue", "cap", "room")

    def __init__(self, cap: int, queue: deque[_Exchange]) -> None:
        self.send, self.recv = trio.open_memory_channel[Push](cap)
        self.queue = queue
        self.cap = cap
        self.room = _Wakeup()


@dataclass(eq=False)
class _Slot:
    """One pool position: its current connection (replaced on reconnect) and that connection's wake-up."""

    index: int
    conn: ApnsConnection | None = None
    wake: _Wakeup = field(default_factory=_Wakeup)
    token_switched_at: float | None = None
    connected_at: float | None = None
    recycle_reason: str | None = None


class _ConnectionFailed(Exception):
    """This connection cannot go on (transport error, protocol error, ping timeout, ALPN refused)."""


class ApnsSender:
    """The actor. ``run`` it in a nursery (``await nursery.start(sender.run)``); producers use ``inbox()``."""

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
        self._host = parts.hostname
        self._port = parts.port or 443
        self._authority = self._host if self._port == 443 else f"{self._host}:{self._port}"
        if tokens is None:
            key = load_signing_key(settings.signing_key_pem())
            policy = ProviderTokenPolicy(refresh_after_s=settings.token_refresh_s)
            tokens = ProviderTokens(
                key, team_id=settings.team_id, key_id=settings.key_id, policy=policy, clock=clock
            )
        self._tokens = tokens
        self._clock = clock
        self._ssl_context = ssl_context or self._default_ssl_context(settings)
        # Broadcasts ride the push connections unless [apns].broadcast_host names another host: then they get
        # a sender of their own (same provider token, same connection logic, one connection).
        self._broadcasts: ApnsSender | None = None
        if settings.broadcast_host:
            b = urlsplit(f"https://{settings.broadcast_host}")
            if not b.hostname:
                raise ValueError(
                    f"apns.broadcast_host: expected HOST[:PORT], got {settings.broadcast_host!r}"
                )
            if (b.hostname, b.port or 443) != (self._host, self._port):
                sub = settings.model_copy(
                    update={
                        "url": f"https://{settings.broadcast_host}",
                        "broadcast_host": "",
                        "connections": 1,
                    }
                )
                self._broadcasts = ApnsSender(
                    sub,
                    janitor=None,
                    ssl_context=self._ssl_context,
                    clock=clock,
                    rng=rng,
                    tokens=self._tokens,
                )
        from actors.channel_management import ChannelManagement  # it reaches back into this module

        self.channels: ChannelManagement | None = (
            ChannelManagement(self) if settings.manages_channels() else None
        )
        self._janitor = janitor
        self._rng = rng or random.Random()
        self._high: deque[_Exchange] = deque()
        self._starts: deque[_Exchange] = deque()  # push-to-starts: priority 10, after every update
        self._low: deque[_Exchange] = deque()
        # One lane per kind of push, each with its inbox and its own cap on its queue: a full queue of
        # priority-5 updates (another match's 10,000-token fan-out) must not hold a wicket's priority-10 pushes
        # in a shared inbox behind it. ``_lanes`` is in sending order.
        self._urgent = _Lane(settings.inbox_size, self._high)
        self._start = _Lane(settings.inbox_size, self._starts)
        self._routine = _Lane(settings.inbox_size, self._low)
        self._lanes = (self._urgent, self._routine, self._start)
        self._queues = tuple(lane.queue for lane in self._lanes)
        self._retry_heap: list[tuple[float, int, _Exchange]] = []
        self._retry_seq = itertools.count()
        self._retry_wake = _Wakeup()
        self._slots = [_Slot(i) for i in range(settings.connections)]
        self._dead: dict[str, str] = {}
        self._undelivered: deque[tuple[trio.MemorySendChannel[PushResult], PushResult]] = deque()
        self._undeliverable_logged_at = -math.inf
        self._undeliverable_count = 0
        self._delivery_wake = _Wakeup()
        self._idle_wake = _Wakeup()
        self._outstanding = 0  # pushes taken from the inbox and not yet settled
        self._draining = False
        self._stopped = False
        self._fatal: ApnsConfigurationError | None = None
        self._cancel_scope: trio.CancelScope | None = None
        self._counts: dict[str, int] = {"accepted": 0, "rejected": 0, "failed": 0}
        self._latencies: deque[float] = deque(maxlen=_LATENCY_SAMPLES)
        self._retries_total = 0
        self._requeues_total = 0
        self._connects = 0
        self._pings = 0  # sent on connections since closed
        self._pushes_metric = {
            (kind, outcome): metrics.PUSHES.labels(kind=kind, outcome=outcome)
            for kind in ("start", "update", "end", "alert")
            for outcome in ("accepted", "rejected", "failed")
        }
        # Every error series exists from the start at 0, so the first configuration error shows as an
        # increase to the alert rules rather than as a new series Prometheus has no earlier sample of.
        for action in Action:
            if action is not Action.ACCEPTED:
                metrics.APNS_ERRORS.labels(action.value)

    @staticmethod
    def _default_ssl_context(settings: ApnsSettings) -> ssl.SSLContext:
        ctx = ssl.create_default_context()
        if settings.ca_file:
            try:
                ctx.load_verify_locations(cafile=settings.ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(f"apns.ca_file: cannot load {settings.ca_file}: {exc}") from exc
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(["h2"])
        return ctx

    # -- the public interface -----------------------------------------------------------------------------
    async def send(self, push: Push) -> None:
        """Enqueue ``push``; blocks while its priority's inbox is full (backpressure)."""
        if push.channel_id is not None and self._broadcasts is not None:
            await self._broadcasts.send(push)
            return
        await self._lane(push).send.send(push)

    async def send_many(self, pushes: Iterable[Push]) -> None:
        """Enqueue ``pushes`` in order, blocking only while the inbox is full.

        ``await send`` is a trip through trio's scheduler for every push (a checkpoint even when the inbox
        has room); a match actor's 10,000-token fan-out puts them in without yielding and yields once at the
        end (or whenever the inbox is full). Producers blocked on a full inbox keep their turn: trio refills
        the buffer from waiting senders before a ``send_nowait`` finds room."""
        broadcasts = self._broadcasts
        for push in pushes:
            if broadcasts is not None and push.channel_id is not None:
                await broadcasts.send(push)
                continue
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
        return any(slot.conn is not None and slot.conn.state == "open" for slot in self._slots)

    def stats(self) -> dict[str, Any]:
        samples = sorted(self._latencies)

        def pct(p: float) -> float | None:
            if not samples:
                return None
            return round(samples[min(len(samples) - 1, int(p * len(samples)))] * 1000, 3)

        conns = [slot.conn for slot in self._slots if slot.conn is not None]
        return {
            "connections": sum(1 for c in conns if c.state == "open"),
            "connection_states": [c.state for c in conns],
            "streams_in_flight": sum(c.in_flight for c in conns),
            "max_concurrent_streams": [c.max_concurrent for c in conns],
            "queued": {
                "high": len(self._high),
                "start": len(self._starts),
                "low": len(self._low),
                "retry": len(self._retry_heap),
            },
            "inbox": {
                "high": self._urgent.recv.statistics().current_buffer_used,
                "start": self._start.recv.statistics().current_buffer_used,
                "low": self._routine.recv.statistics().current_buffer_used,
            },
            "pushes": dict(self._counts),
            "retries": self._retries_total,
            "requeues": self._requeues_total,
            "dead_tokens": len(self._dead),
            "connects": self._connects,
            "pings": self._pings + sum(c.pings_sent for c in conns),
            "provider_tokens_minted": self._tokens.minted,
            "latency_ms": {"p50": pct(0.50), "p99": pct(0.99)},
            "channel_requests": dict(self.channels.counts) if self.channels is not None else {},
            **({"broadcast_sender": self._broadcasts.stats()} if self._broadcasts is not None else {}),
        }

    async def drain(self, grace_s: float) -> None:
        """Stop taking new pushes; finish what was taken within ``grace_s``; fail the rest; then stop ``run``."""
        self._draining = True
        if self._broadcasts is not None:
            await self._broadcasts.drain(grace_s)
        # Take what producers already handed over, then close the inbox: later sends raise
        # BrokenResourceError at the producer instead of waiting in a queue nobody reads.
        for push in self._take_inboxes():
            self._accept(push)
        for lane in self._lanes:
            lane.recv.close()
        self._wake_writers()
        with trio.move_on_after(grace_s):
            while self._outstanding > 0:
                await self._idle_wake.wait()
        self._stop("ShuttingDown")

    # -- the actor ----------------------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled or drained. Raises ``ApnsConfigurationError`` when APNs refuses our credentials."""
        log.info("apns_sender_starting", url=self.settings.url, connections=len(self._slots))
        try:
            with trio.CancelScope() as scope:
                self._cancel_scope = scope
                async with trio.open_nursery() as nursery:
                    for lane in self._lanes:
                        nursery.start_soon(self._intake, lane)
                    nursery.start_soon(self._retry_loop)
                    nursery.start_soon(self._delivery_loop)
                    for slot in self._slots:
                        nursery.start_soon(self._connection_loop, slot)
                    if self._broadcasts is not None:
                        await nursery.start(self._broadcasts.run)
                    # Connections come up in the background: an unreachable APNs must not block start-up.
                    task_status.started()
        finally:
            self._stopped = True
            reason = self._fatal.reason if self._fatal is not None else "ShuttingDown"
            self._fail_everything(reason)
            for lane in self._lanes:
                lane.recv.close()
            metrics.APNS_CONNECTIONS.set(0)
            metrics.APNS_STREAMS.set(0)
            if self.channels is not None:
                with trio.CancelScope(shield=True):
                    await self.channels.aclose()
            log.info("apns_sender_stopped", **self._counts, undeliverable=self._undeliverable_count)
        if self._fatal is not None:
            raise self._fatal

    def _stop(self, reason: str) -> None:
        if self._cancel_scope is not None:
            self._cancel_scope.cancel()

    # -- intake and queues --------------------------------------------------------------------------------
    async def _intake(self, lane: _Lane) -> None:
        recv, queue, cap = lane.recv, lane.queue, lane.cap
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
            self._accept(push)
            # Take whatever else is already waiting without yielding per push.
            while len(queue) < cap:
                try:
                    push = recv.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                    break
                self._accept(push)
            self._wake_writers()
            now = trio.current_time()
            if now - last_batch < window and not self._draining:
                # Pushes are arriving in a stream: let them gather in the inbox for a moment rather than
                # waking this task and a writer for every few pushes. A lone push still goes out at once;
                # under load this adds at most ``batch_window_s`` of latency (small beside APNs's round
                # trip) and turns many small TLS writes and reads into few large ones, about half the CPU per
                # push at a 10 ms window.
                await trio.sleep(window)
            last_batch = now

    def _accept(self, push: Push) -> None:
        now = trio.current_time()
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
        self._lane(push).queue.append(exchange)

    def _take_inboxes(self) -> Iterator[Push]:
        """Whatever producers have handed over and the intakes have not taken yet, urgent first."""
        for lane in self._lanes:
            while True:
                try:
                    yield lane.recv.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                    break

    def _lane(self, push: Push) -> _Lane:
        if push.priority != 10:
            return self._routine
        return self._start if push.kind == "start" else self._urgent

    def _requeue_front(self, exchange: _Exchange) -> None:
        self._lane(exchange.push).queue.appendleft(exchange)

    def _next_exchange(self) -> _Exchange | None:
        for queue in self._queues:
            if queue:
                return queue.popleft()
        return None

    def _wake_writers(self) -> None:
        for slot in self._slots:
            conn = slot.conn
            if conn is not None and conn.can_send():
                slot.wake.set()

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
            self._wake_writers()
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
    ) -> None:
        """Give ``exchange`` its one result."""
        push = exchange.push
        latency = trio.current_time() - exchange.enqueued_at
        result = PushResult(push, outcome, status, reason, apns_id, exchange.attempts, latency)
        self._counts[outcome] += 1
        self._latencies.append(latency)
        if push.channel_id is not None:
            metrics.BROADCASTS.labels(kind=push.kind, outcome=outcome).inc()
        else:
            counter = self._pushes_metric.get((push.kind, outcome))
            if counter is None:
                counter = metrics.PUSHES.labels(kind=push.kind, outcome=outcome)
            counter.inc()
        metrics.PUSH_LATENCY.observe(latency)
        if push.reply_to is not None:
            self._deliver(push.reply_to, result)
        if report_dead and self._janitor is not None:
            self._deliver(self._janitor, result)
        self._outstanding -= 1
        if self._outstanding == 0:
            self._idle_wake.set()

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
        leftovers: list[_Exchange] = [
            *(e for queue in self._queues for e in queue),
            *(e for _, _, e in self._retry_heap),
        ]
        for queue in self._queues:
            queue.clear()
        self._retry_heap.clear()
        for slot in self._slots:
            if slot.conn is not None:
                leftovers.extend(o.exchange for o in slot.conn.connection_lost())
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
    def _handle(self, slot: _Slot, outcome: Outcome) -> None:
        exchange: _Exchange = outcome.exchange
        if type(outcome) is Answered:
            if outcome.status == 200:  # the hot path
                # An accepted answer's apns-id is not decoded (see ResponseHeaderDecoder): report ours.
                self._settle(exchange, "accepted", 200, None, outcome.apns_id or exchange.push.apns_id)
                return
            self._handle_error(slot, exchange, outcome)
            return
        assert isinstance(outcome, Unanswered)
        if not outcome.processed:
            exchange.requeues += 1
            self._requeues_total += 1
            if exchange.requeues > _MAX_REQUEUES:
                self._settle(exchange, "failed", None, "Unprocessed", None)
            else:
                self._schedule_retry(exchange, 0.0)
            return
        push = exchange.push
        if push.resend_payload is not None and exchange.wire is None:
            # it may have been delivered: a re-send must not show its alert again
            exchange.wire = dataclasses.replace(push, payload=push.resend_payload, collapse_id=None)
        self._retry(
            exchange, outcome.cause.capitalize() if outcome.cause != "timeout" else "Timeout", None, 0.0
        )

    def _retry(self, exchange: _Exchange, reason: str, status: int | None, delay: float) -> None:
        exchange.last_status, exchange.last_reason = status, reason
        if exchange.retries >= self.settings.max_retries:
            self._settle(exchange, "failed", status, reason, None)
            return
        exchange.retries += 1
        self._retries_total += 1
        self._schedule_retry(exchange, delay)

    def _backoff(self, exchange: _Exchange) -> float:
        return backoff_delay(
            exchange.retries + 1,
            base_s=self.settings.retry_backoff_s,
            cap_s=self.settings.retry_backoff_max_s,
            jitter=0.5,
            rng=self._rng,
        )

    def _handle_error(self, slot: _Slot, exchange: _Exchange, answer: Answered) -> None:
        verdict = classify(answer.status, answer.reason)
        reason = verdict.reason or f"HTTP{answer.status}"
        action = verdict.action
        metrics.APNS_ERRORS.labels(action.value).inc()
        push = exchange.push
        if action is Action.DEAD_TOKEN:
            self._mark_dead(exchange, answer.status, reason, answer.apns_id)
        elif action is Action.RETRY:
            self._retry(exchange, reason, answer.status, self._backoff(exchange))
        elif action is Action.RETRY_NEW_CONNECTION:
            self._recycle(slot, reason)
            self._retry(exchange, reason, answer.status, self._backoff(exchange))
        elif action is Action.REFRESH_PROVIDER_TOKEN:
            conn = slot.conn
            if conn is not None and conn.token is not None:
                self._tokens.invalidate(conn.token)
            # Pushy found a connection wedged after ExpiredProviderToken: a fresh connection adopts the
            # fresh token without counting as a token switch.
            self._recycle(slot, reason)
            if exchange.provider_token_retried:
                self._settle(exchange, "failed", answer.status, reason, answer.apns_id)
            else:
                exchange.provider_token_retried = True
                self._schedule_retry(exchange, 0.0)
        elif action is Action.CONFIGURATION:
            self._settle(exchange, "failed", answer.status, reason, answer.apns_id)
            self._configuration_error(reason, answer.status)
        elif action is Action.RECREATE_CHANNEL or action is Action.CHANNEL_LIMIT:
            # final for this channel, like a dead token for a device; the producer (the match's channel
            # manager) recreates the channel and re-announces it
            log.warning(
                "apns_broadcast_channel_refused", reason=reason, channel=push.channel_id, kind=push.kind
            )
            self._settle(exchange, "rejected", answer.status, reason, answer.apns_id)
        elif action is Action.PAYLOAD_BUG:
            log.error(
                "apns_payload_too_large",
                kind=push.kind,
                push_type=push.push_type,
                payload_bytes=len(push.payload),
                token=short_token(push.token),
                note="bug in the payload builder: APNs refused the body size",
            )
            self._settle(exchange, "failed", answer.status, reason, answer.apns_id)
        else:
            log.error(
                "apns_request_rejected_as_malformed",
                status=answer.status,
                reason=reason,
                kind=push.kind,
                push_type=push.push_type,
                token=short_token(push.token),
                note="bug in our request",
            )
            self._settle(exchange, "failed", answer.status, reason, answer.apns_id)

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

    def _recycle(self, slot: _Slot, reason: str) -> None:
        conn = slot.conn
        if conn is not None and conn.state in ("connecting", "open"):
            log.info("apns_connection_recycle", slot=slot.index, reason=reason)
            slot.recycle_reason = reason
            conn.start_draining()
            slot.wake.set()

    # -- connections --------------------------------------------------------------------------------------
    async def _connection_loop(self, slot: _Slot) -> None:
        settings = self.settings
        failures = 0
        while True:
            healthy = False
            try:
                healthy = await self._run_connection(slot)
            except (
                _ConnectionFailed,
                OSError,
                ssl.SSLError,
                trio.BrokenResourceError,
                trio.TooSlowError,
                h2.exceptions.H2Error,
            ) as exc:
                log.warning(
                    "apns_connection_failed",
                    slot=slot.index,
                    error=f"{type(exc).__name__}: {exc}",
                    failures=failures + 1,
                )
            failures = 0 if healthy else failures + 1
            if failures:
                await trio.sleep(
                    backoff_delay(
                        failures,
                        base_s=settings.reconnect_backoff_s,
                        cap_s=settings.reconnect_backoff_max_s,
                        jitter=0.5,
                        rng=self._rng,
                    )
                )

    async def _open_stream(
        self, host: str | None = None, port: int | None = None
    ) -> trio.SSLStream[trio.SocketStream]:
        host = host or self._host
        tcp = await trio.open_tcp_stream(host, port or self._port)
        tls = trio.SSLStream(tcp, self._ssl_context, server_hostname=host, https_compatible=True)
        try:
            await tls.do_handshake()
            if tls.selected_alpn_protocol() != "h2":
                raise _ConnectionFailed(
                    f"server did not agree to HTTP/2 (ALPN {tls.selected_alpn_protocol()!r})"
                )
        except BaseException:
            await trio.aclose_forcefully(tls)
            raise
        return tls

    async def _run_connection(self, slot: _Slot) -> bool:
        """Connect, serve until the connection ends; returns True if it carried traffic (healthy)."""
        settings = self.settings
        with trio.fail_after(settings.connect_timeout_s):
            stream = await self._open_stream()
        conn = ApnsConnection(
            self._authority,
            request_timeout_s=settings.request_timeout_s,
            local_stream_cap=settings.max_streams_per_connection,
        )
        now = trio.current_time()
        conn.initiate(now)
        choice = self._tokens.for_connection(None, None)
        conn.use_token(choice.token)
        slot.token_switched_at = self._tokens_clock()
        slot.conn = conn
        slot.recycle_reason = None
        slot.connected_at = now
        self._connects += 1
        counted = False
        failure: BaseException | None = None
        try:
            await stream.send_all(conn.data_to_send())
            async with trio.open_nursery() as nursery:
                settings_seen = trio.Event()
                nursery.start_soon(self._reader, slot, conn, stream, settings_seen, nursery.cancel_scope)
                # Errors are caught here, not outside the nursery, so they do not arrive wrapped in an
                # ExceptionGroup; anything else is a bug and may take the actor down.
                try:
                    with trio.fail_after(settings.connect_timeout_s):
                        await settings_seen.wait()
                    metrics.APNS_CONNECTIONS.inc()
                    counted = True
                    log.info("apns_connection_open", slot=slot.index, max_streams=conn.max_concurrent)
                    await self._writer(slot, conn, stream)
                except (
                    _ConnectionFailed,
                    trio.TooSlowError,
                    trio.BrokenResourceError,
                    trio.ClosedResourceError,
                    OSError,
                    h2.exceptions.H2Error,
                ) as exc:
                    failure = exc
                nursery.cancel_scope.cancel()
        finally:
            if counted:
                metrics.APNS_CONNECTIONS.dec()
            self._pings += conn.pings_sent
            orphans = conn.connection_lost()
            slot.conn = None
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)
            if not self._stopped:
                for orphan in orphans:
                    self._handle(slot, orphan)
                self._update_stream_gauge()
            if conn.goaway is not None:
                log.info(
                    "apns_connection_goaway",
                    slot=slot.index,
                    reason=conn.goaway.reason,
                    error_code=conn.goaway.error_code,
                    last_stream_id=conn.goaway.last_stream_id,
                )
        if failure is not None:
            if conn.answers_received == 0:
                raise failure
            log.warning(
                "apns_connection_broken", slot=slot.index, error=f"{type(failure).__name__}: {failure}"
            )
        # Healthy: APNs answered at least once. A server that drops us before any answer counts as a
        # failure, so reconnects back off instead of hammering it (apns.md §1.6).
        return conn.answers_received > 0

    def _tokens_clock(self) -> float:
        return self._clock()

    async def _reader(
        self,
        slot: _Slot,
        conn: ApnsConnection,
        stream: trio.SSLStream[trio.SocketStream],
        settings_seen: trio.Event,
        scope: trio.CancelScope,
    ) -> None:
        handle = self._handle
        try:
            while True:
                try:
                    data = await stream.receive_some(_READ_SIZE)
                except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError, OSError) as exc:
                    log.info("apns_connection_lost", slot=slot.index, error=type(exc).__name__)
                    return
                if not data:
                    log.info("apns_connection_eof", slot=slot.index, in_flight=conn.in_flight)
                    return
                data = drain_decrypted(stream, data, _READ_SIZE)
                try:
                    outcomes = conn.receive_data(data, trio.current_time())
                except h2.exceptions.ProtocolError as exc:
                    log.warning("apns_protocol_error", slot=slot.index, error=str(exc))
                    return
                if conn.settings_received and not settings_seen.is_set():
                    settings_seen.set()
                for outcome in outcomes:
                    handle(slot, outcome)
                goaway = conn.goaway
                if goaway is not None and goaway.reason is not None and self._fatal is None:
                    verdict = classify(403, goaway.reason)
                    if verdict.action is Action.CONFIGURATION:
                        metrics.APNS_ERRORS.labels(verdict.action.value).inc()
                        self._configuration_error(goaway.reason, None, "from GOAWAY")
                slot.wake.set()  # acks, window updates and freed stream slots: the writer has work
                if conn.state == "closed":
                    return

        finally:
            scope.cancel()

    async def _writer(
        self, slot: _Slot, conn: ApnsConnection, stream: trio.SSLStream[trio.SocketStream]
    ) -> None:
        settings = self.settings
        wake = slot.wake
        dead = self._dead
        while True:
            if conn.state == "closed":
                return
            self._maybe_switch_token(slot, conn)
            if any(self._queues) and conn.in_flight:
                await self._coalesce(conn, wake)
            now = trio.current_time()
            if conn.can_send() and any(self._queues):
                sent = 0
                while conn.can_send():
                    exchange = self._next_exchange()
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
                    for lane in self._lanes:
                        lane.room.set()
                    self._update_stream_gauge()
            if conn.ping_due(now, settings.ping_idle_s):
                conn.send_ping(now)
            data = conn.data_to_send()
            if data:
                await stream.send_all(data)
                continue
            # Nothing to write: sleep until woken, the next request deadline or the ping schedule.
            deadline = conn.next_deadline()
            ping_at = conn.next_ping_check(settings.ping_idle_s, settings.ping_timeout_s)
            wake_at = ping_at if deadline is None else min(deadline, ping_at)
            with trio.move_on_at(wake_at):
                await wake.wait()
            now = trio.current_time()
            for outcome in conn.expire(now):
                log.info(
                    "apns_request_timeout", slot=slot.index, token=short_token(outcome.exchange.push.token)
                )
                self._handle(slot, outcome)
            if conn.ping_overdue(now, settings.ping_timeout_s):
                raise _ConnectionFailed("PING unanswered: connection presumed dead")

    async def _coalesce(self, conn: ApnsConnection, wake: _Wakeup) -> None:
        """When the stream pipeline is nearly full, wait briefly for more free slots before writing.

        Without this, a full pipeline settles into one request per answer: one TLS record and one send()
        syscall per push, and on loopback every send() also hands the CPU to the server. Waiting up to
        ``_COALESCE_S`` for a batch costs nothing in throughput (the pipeline is full anyway) and turns
        thousands of tiny writes into a few large ones.
        """
        limit = conn.max_concurrent
        batch = min(_COALESCE_BATCH, limit // 4)
        if conn.state != "open" or batch <= 1 or limit - conn.in_flight >= batch:
            return  # (a draining connection takes no new streams: nothing to gather)
        with trio.move_on_after(_COALESCE_S):
            while conn.state == "open" and limit - conn.in_flight < batch:
                await wake.wait()
                limit = conn.max_concurrent
        wake.set()  # the loop below re-checks everything; make sure it does not sleep first

    def _maybe_switch_token(self, slot: _Slot, conn: ApnsConnection) -> None:
        held: ProviderToken | None = conn.token
        choice = self._tokens.for_connection(held, slot.token_switched_at)
        if choice.recycle:
            self._recycle(slot, "ProviderTokenAging")
        elif choice.switched:
            conn.use_token(choice.token)
            slot.token_switched_at = self._tokens_clock()

    def _update_stream_gauge(self) -> None:
        metrics.APNS_STREAMS.set(sum(s.conn.in_flight for s in self._slots if s.conn is not None))
