"""Channel management: create, read, list and delete iOS 18 broadcast channels on Apple's management host.

Owns: the one connection to ``[apns].management_host``/``_port`` (a lazy ``daemon.apns.driver`` pool: opened on
first use, then kept and judged like the push connections), one request at a time, and what each answer
means (the rule table: transient ones retried with backoff, a configuration error reported to the owner).
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
from daemon.apns.rules import Action, Verdict
from daemon.apns.settings import ApnsSettings
from daemon.apns.token import ProviderTokens
from daemon.backoff import backoff_delay
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

    Each answer goes through the rule table: transient ones are retried with backoff (on a new connection
    where the table says so), a configuration error is reported to ``on_configuration_error`` (the sender
    stops, as for one on a push), everything else comes back as ``broadcast.ChannelError`` with the decided
    outcome for the caller (recreate, limit reached, bug). A request that finds no usable connection within
    ``connect_timeout_s`` counts as a transient failure."""

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
            retries = 0
            while True:
                status: int | None = None
                pending = await self._exchange(req)
                outcome = pending.outcome
                if isinstance(outcome, Answered):
                    status = outcome.status
                    try:
                        result = broadcast.parse_answer(
                            req.op, outcome.status, outcome.reason, outcome.channel_id, outcome.body
                        )
                    except broadcast.ChannelError as exc:
                        error = exc
                    else:
                        self._count(req.op, "ok")
                        return result
                else:
                    cause = outcome.cause if isinstance(outcome, Unanswered) else "NoConnection"
                    error = broadcast.ChannelError(req.op, None, cause, Verdict(Action.RETRY, None))
                action = error.action
                if action is not Action.ACCEPTED and error.status is not None:
                    metrics.APNS_ERRORS.labels(action.value).inc()
                if action in (Action.RETRY, Action.RETRY_NEW_CONNECTION, Action.REFRESH_PROVIDER_TOKEN) and (
                    retries < settings.max_retries
                ):
                    link = pending.link
                    if action is Action.REFRESH_PROVIDER_TOKEN and link is not None and link.conn is not None:
                        token = link.conn.token
                        if token is not None:
                            self._tokens.invalidate(token)
                    if action is not Action.RETRY and link is not None:
                        link.recycle(error.reason or action.value)
                    retries += 1
                    log.info(
                        "apns_channel_request_retry",
                        op=req.op,
                        reason=error.reason,
                        status=status,
                        attempt=retries,
                    )
                    await trio.sleep(
                        backoff_delay(
                            retries,
                            base_s=settings.retry_backoff_s,
                            cap_s=settings.retry_backoff_max_s,
                            jitter=0.5,
                            rng=self._rng,
                        )
                    )
                    continue
                self._count(req.op, "error")
                if action is Action.CONFIGURATION:
                    self._on_configuration_error(error.reason or f"HTTP{status}", status, f"channel {req.op}")
                log.warning(
                    "apns_channel_request_refused",
                    op=req.op,
                    status=status,
                    reason=error.reason,
                    action=action.value,
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

    def _settle(self, link: Link, outcome: Outcome) -> None:
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
