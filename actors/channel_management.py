"""Channel management: create, read, list and delete iOS 18 broadcast channels on Apple's management host.

Owns: the one connection to ``[apns].management_host``/``_port`` (a lazy ``daemon.apns.driver`` pool: opened on
first use, then kept and judged like the push connections), one request at a time, and what each answer
means (``daemon.apns.rules``: the same steps as the sender's, a configuration error reported to the owner).
``daemon.apns.broadcast`` builds the requests and reads the answers. Must not touch: the sender (it is
handed the driver's dialer, the provider tokens and a configuration-error callback). See docs/delivery.md.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import trio

from daemon import metrics
from daemon.apns import broadcast
from daemon.apns.connection import Answered, ApnsConnection, Outcome, Unanswered
from daemon.apns.driver import ConfigurationError, ConnectionPool, Dialer, Link, Traffic
from daemon.apns.rules import NO_CONNECTION, Action, Again, after_answer, after_silence, retry_delay
from daemon.apns.settings import ApnsSettings
from daemon.apns.token import ProviderTokens
from daemon.logs import get_logger

log = get_logger("apns.channels")

# Channel requests are rare (a match's channels at its start and end, a periodic list): a few streams suffice.
_STREAMS: int = 8


@dataclass(eq=False)
class _Pending:
    """One request on its way: queued, then on a connection, then answered (or given up by that connection)."""

    request: broadcast.Request
    done: trio.Event = field(default_factory=trio.Event)
    link: Link | None = None  # the connection position that carried it
    outcome: Outcome | None = None


class ChannelManagement:
    """Requests to the channel-management host over one lazily opened connection.

    Each answer, or its absence, goes through the rule table's steps (``daemon.apns.rules.after_answer``,
    ``after_silence``), as a push does in the sender: transient ones go again (after a backoff, at once, on a
    new connection or a fresh provider token, as the step says), a configuration error is reported to
    ``on_configuration_error`` (the sender stops, as for one on a push), everything else comes back as
    ``broadcast.ChannelError`` with the decided outcome for the caller (recreate, limit reached, bug). A
    request that finds no usable connection within ``connect_timeout_s`` is a transient failure
    (``NO_CONNECTION``)."""

    def __init__(
        self,
        dialer: Dialer,
        *,
        settings: ApnsSettings,
        tokens: ProviderTokens,
        on_configuration_error: ConfigurationError,
        rng: random.Random | None = None,
    ) -> None:
        self._settings = settings
        self._tokens = tokens
        self._on_configuration_error = on_configuration_error
        self._rng = rng or random.Random()
        self._queue: deque[_Pending] = deque()
        self._lock = trio.Lock()
        self._pool = ConnectionPool(
            "management",
            dialer,
            settings=settings,
            tokens=tokens,
            traffic=Traffic(
                pending=lambda: bool(self._queue), fill=self._fill, settle=self._settle, closed=self._closed
            ),
            on_configuration_error=on_configuration_error,
            size=1,
            stream_cap=_STREAMS,
            lazy=True,
            counted=False,
            rng=self._rng,
        )
        self.counts: dict[str, int] = {}

    @property
    def authority(self) -> str:
        return self._pool.dialer.authority

    async def run(self) -> None:
        """Keep the management connection (once first used) until cancelled."""
        await self._pool.run()

    def health(self) -> tuple[bool, str]:
        return self._pool.health()

    def stats(self) -> dict[str, object]:
        return {**self._pool.stats(), "requests": dict(self.counts)}

    async def request(self, req: broadcast.Request) -> Any:
        """Send ``req`` and return its parsed result (see ``broadcast.parse_answer``)."""
        settings = self._settings
        async with self._lock:
            retries = requeues = 0
            fresh_token_used = False
            while True:
                pending = await self._exchange(req)
                outcome = pending.outcome
                if isinstance(outcome, Answered):
                    try:
                        result = broadcast.parse_answer(
                            req.op, outcome.status, outcome.reason, outcome.channel_id, outcome.body
                        )
                    except broadcast.ChannelError as exc:
                        error = exc
                    else:
                        self._count(req.op, "ok")
                        return result
                    if error.action is not Action.ACCEPTED:
                        metrics.APNS_ERRORS.labels(error.action.value).inc()
                    step = after_answer(
                        error.verdict,
                        retries=retries,
                        max_retries=settings.max_retries,
                        fresh_token_used=fresh_token_used,
                    )
                elif isinstance(outcome, Unanswered):
                    step = after_silence(
                        outcome.cause,
                        outcome.processed,
                        retries=retries,
                        requeues=requeues,
                        max_retries=settings.max_retries,
                    )
                    error = broadcast.ChannelError(req.op, None, outcome.cause, step.verdict)
                else:  # no connection took it within the connect timeout
                    step = after_answer(
                        NO_CONNECTION,
                        retries=retries,
                        max_retries=settings.max_retries,
                        fresh_token_used=fresh_token_used,
                    )
                    error = broadcast.ChannelError(req.op, None, "NoConnection", step.verdict)
                link = pending.link
                if step.new_provider_token and link is not None and link.conn is not None:
                    token = link.conn.token
                    if token is not None:
                        self._tokens.invalidate(token)
                if step.new_connection and link is not None:
                    link.recycle(step.reason or step.verdict.action.value)
                if step.again is not Again.NO:
                    delay = 0.0
                    if step.again is Again.REQUEUE:
                        requeues += 1
                    elif step.again is Again.FRESH_TOKEN:
                        fresh_token_used = True
                    else:
                        retries += 1
                        if step.again is Again.AFTER_BACKOFF:
                            delay = retry_delay(
                                retries,
                                base_s=settings.retry_backoff_s,
                                cap_s=settings.retry_backoff_max_s,
                                rng=self._rng,
                            )
                    log.info(
                        "apns_channel_request_retry",
                        op=req.op,
                        reason=step.reason,
                        status=error.status,
                        attempt=retries + requeues + fresh_token_used,
                        again=step.again.value,
                    )
                    await trio.sleep(delay)
                    continue
                self._count(req.op, "error")
                if step.verdict.action is Action.CONFIGURATION:
                    self._on_configuration_error(
                        error.reason or f"HTTP{error.status}", error.status, f"channel {req.op}"
                    )
                log.warning(
                    "apns_channel_request_refused",
                    op=req.op,
                    status=error.status,
                    reason=error.reason,
                    action=error.action.value,
                )
                raise error

    async def _exchange(self, req: broadcast.Request) -> _Pending:
        """Queue ``req`` for the connection and wait for its outcome. Once on a connection it is settled by
        that connection's deadline or end; while no connection takes it, it waits ``connect_timeout_s``."""
        pending = _Pending(req)
        self._queue.append(pending)
        self._pool.wake_writers()
        try:
            with trio.move_on_after(self._settings.connect_timeout_s):
                await pending.done.wait()
            if pending.link is not None:
                await pending.done.wait()
        finally:
            if pending.link is None:  # never sent (no usable connection in time, or the caller gave up)
                self._queue.remove(pending)
        return pending

    def _fill(self, link: Link, conn: ApnsConnection, now: float) -> int:
        sent = 0
        while self._queue and conn.can_send():
            pending = self._queue.popleft()
            req = pending.request
            pending.link = link
            conn.send_request(req.method, req.path, req.headers, req.body, pending, now)
            sent += 1
        return sent

    def _settle(self, link: Link, outcome: Outcome, now: float = 0.0) -> None:
        pending: _Pending = outcome.exchange
        pending.outcome = outcome
        pending.done.set()

    def _closed(self, link: Link, orphans: list[Unanswered]) -> None:
        for orphan in orphans:
            self._settle(link, orphan)

    def _count(self, op: str, outcome: str) -> None:
        metrics.CHANNEL_REQUESTS.labels(op=op, outcome=outcome).inc()
        key = f"{op}_{outcome}"
        self.counts[key] = self.counts.get(key, 0) + 1
