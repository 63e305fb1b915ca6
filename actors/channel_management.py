"""The APNs sender's connection to the channel-management host: create, read, list and delete broadcast
channels (``daemon.apns.broadcast`` builds the requests and reads the answers).

It shares the sender's provider tokens, TLS opening and rule table; ``ApnsSender`` builds one as
``sender.channels``.
"""

from __future__ import annotations

import ssl
from typing import Any

import h2.exceptions
import trio

from actors.sender import _READ_SIZE, ApnsSender, _ConnectionFailed
from daemon import metrics
from daemon.apns import broadcast
from daemon.apns.connection import Answered, ApnsConnection
from daemon.apns.rules import Action, Verdict
from daemon.backoff import backoff_delay
from daemon.logs import get_logger

log = get_logger("apns.sender")


class ChannelManagement:
    """The sender's one connection to the channel-management host (``[apns].management_host``/``_port``).

    Same provider token and connection logic as the push connections (``ApnsConnection``, its TLS opening);
    requests are rare (a match's channels at its start and end, a periodic list), so they go one at a time
    over the connection, opened on first use and again after it broke. Each answer goes through the rule
    table: transient ones are retried with backoff (a new connection where the table says so), a
    configuration error stops the sender like one on a push, everything else comes back as
    ``broadcast.ChannelError`` with the decided outcome for the caller (recreate, limit reached, bug)."""

    def __init__(self, sender: ApnsSender) -> None:
        self._sender = sender
        self.host, self.port = sender.settings.management_address()
        self._authority = self.host if self.port == 443 else f"{self.host}:{self.port}"
        self._lock = trio.Lock()
        self._stream: trio.SSLStream[trio.SocketStream] | None = None
        self._conn: ApnsConnection | None = None
        self._switched_at: float | None = None
        self.counts: dict[str, int] = {}

    async def request(self, req: broadcast.Request) -> Any:
        """Send ``req`` and return its parsed result (see ``broadcast.parse_answer``)."""
        settings = self._sender.settings
        async with self._lock:
            retries = 0
            while True:
                status: int | None = None
                try:
                    answer = await self._exchange(req)
                except (
                    _ConnectionFailed,
                    OSError,
                    ssl.SSLError,
                    trio.BrokenResourceError,
                    trio.ClosedResourceError,
                    trio.TooSlowError,
                    h2.exceptions.H2Error,
                ) as exc:
                    await self.aclose()
                    error = broadcast.ChannelError(
                        req.op, None, type(exc).__name__, Verdict(Action.RETRY, None)
                    )
                else:
                    status = answer.status
                    try:
                        result = broadcast.parse_answer(
                            req.op, answer.status, answer.reason, answer.channel_id, answer.body
                        )
                    except broadcast.ChannelError as exc:
                        error = exc
                    else:
                        self._count(req.op, "ok")
                        return result
                action = error.action
                if action is not Action.ACCEPTED and error.status is not None:
                    metrics.APNS_ERRORS.labels(action.value).inc()
                if action in (Action.RETRY, Action.RETRY_NEW_CONNECTION, Action.REFRESH_PROVIDER_TOKEN) and (
                    retries < settings.max_retries
                ):
                    if action is not Action.RETRY:
                        if (
                            action is Action.REFRESH_PROVIDER_TOKEN
                            and self._conn is not None
                            and self._conn.token
                        ):
                            self._sender._tokens.invalidate(self._conn.token)
                        await self.aclose()
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
                            rng=self._sender._rng,
                        )
                    )
                    continue
                self._count(req.op, "error")
                if action is Action.CONFIGURATION:
                    self._sender._configuration_error(
                        error.reason or f"HTTP{status}", status, f"channel {req.op}"
                    )
                log.warning(
                    "apns_channel_request_refused",
                    op=req.op,
                    status=status,
                    reason=error.reason,
                    action=action.value,
                )
                raise error

    def _count(self, op: str, outcome: str) -> None:
        metrics.CHANNEL_REQUESTS.labels(op=op, outcome=outcome).inc()
        key = f"{op}_{outcome}"
        self.counts[key] = self.counts.get(key, 0) + 1

    async def aclose(self) -> None:
        stream, self._stream, self._conn = self._stream, None, None
        if stream is not None:
            await trio.aclose_forcefully(stream)

    async def _connect(self) -> ApnsConnection:
        settings = self._sender.settings
        with trio.fail_after(settings.connect_timeout_s):
            stream = await self._sender._open_stream(self.host, self.port)
            conn = ApnsConnection(
                self._authority, request_timeout_s=settings.request_timeout_s, local_stream_cap=8
            )
            now = trio.current_time()
            conn.initiate(now)
            conn.use_token(self._sender._tokens.for_connection(None, None).token)
            self._switched_at = self._sender._tokens_clock()
            self._stream, self._conn = stream, conn
            await stream.send_all(conn.data_to_send())
            while not conn.settings_received:
                data = await stream.receive_some(_READ_SIZE)
                if not data:
                    raise _ConnectionFailed("management host closed the connection before its SETTINGS")
                conn.receive_data(data, trio.current_time())
            pending = conn.data_to_send()  # our SETTINGS ack
            if pending:
                await stream.send_all(pending)
        log.info("apns_management_connection_open", host=self.host, port=self.port)
        return conn

    async def _exchange(self, req: broadcast.Request) -> Answered:
        conn = self._conn
        if conn is None or conn.state != "open":
            await self.aclose()
            conn = await self._connect()
        choice = self._sender._tokens.for_connection(conn.token, self._switched_at)
        if choice.recycle:
            await self.aclose()
            conn = await self._connect()
        elif choice.switched:
            conn.use_token(choice.token)
            self._switched_at = self._sender._tokens_clock()
        stream = self._stream
        assert stream is not None
        marker = object()
        conn.send_request(req.method, req.path, req.headers, req.body, marker, trio.current_time())
        await stream.send_all(conn.data_to_send())
        with trio.fail_after(self._sender.settings.request_timeout_s):
            while True:
                data = await stream.receive_some(_READ_SIZE)
                if not data:
                    raise _ConnectionFailed("management host closed the connection")
                outcomes = conn.receive_data(data, trio.current_time())
                pending = conn.data_to_send()  # SETTINGS/PING acks, window updates
                if pending:
                    await stream.send_all(pending)
                for outcome in outcomes:
                    if outcome.exchange is marker:
                        if isinstance(outcome, Answered):
                            return outcome
                        raise _ConnectionFailed(f"management request unanswered: {outcome.cause}")
