"""The one trio driver of APNs connections, under per-token pushes, broadcasts and channel management.

Owns: opening a connection (TCP, TLS with ALPN h2, the server's SETTINGS before any request), the provider
token each connection carries and its 20-minute switching rule, the exchange (a reader settling answers, a
writer filling free stream slots and shipping them in one write, a watchdog for deadlines and PINGs), the
judgement of a connection by what it hears (``ApnsConnection.check``: a silent connection is PINGed and
retired, its requests come back as lost), and a pool's reconnects with capped backoff. What is sent is not
its business: a ``Traffic`` of callables hands in requests and takes the outcomes. Must not touch: queues,
retry policy, results (the sender's, or channel management's). See docs/delivery.md (APNs connections).
"""

from __future__ import annotations

import random
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol

import h2.exceptions
import trio

from daemon import metrics
from daemon.apns.connection import ApnsConnection, Judgement, Liveness, Outcome, Unanswered
from daemon.apns.internals import drain_decrypted
from daemon.apns.rules import Action, classify
from daemon.apns.settings import ApnsSettings
from daemon.apns.token import ProviderTokens
from daemon.apns.types import ApnsError
from daemon.backoff import backoff_delay
from daemon.logs import get_logger

log = get_logger("apns.driver")

READ_SIZE: Final = 1 << 18
# Read coalescing (see ConnectionPool._reader): a read that settled fewer than _READ_BATCH answers while more
# are owed waits _READ_GATHER_S before the next. A peer that writes each answer as it is ready (nginx recording
# every push, APNs over a long link) would otherwise wake the reader, the writer and the producers every few
# answers: at 5 answers a wake-up a push cost 61 µs of CPU in bench/fanout_cpu.py, at 240 it cost 32. What
# gathers is read a few ms later; a peer answering in bulk is read at once.
_READ_BATCH: Final = 64
_READ_GATHER_S: Final = 0.005
# Write coalescing (see ConnectionPool._coalesce): a batch worth a syscall, and the longest wait for it.
_COALESCE_BATCH: Final = 64
_COALESCE_S: Final = 0.002

ConfigurationError = Callable[[str, "int | None", str], None]
"""Called with (reason, HTTP status or None, detail) when APNs refuses the credentials: a 403 class answer,
or a GOAWAY naming one. Retrying cannot help; the owner stops."""

# Errors that end one connection (and not the process): the transport, TLS, HTTP/2, a deadline.
CONNECTION_ERRORS: Final = (
    OSError,
    ssl.SSLError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    trio.TooSlowError,
    h2.exceptions.H2Error,
)


def _worth_a_write(conn: ApnsConnection) -> bool:
    """Enough stream slots are free for a batch of requests worth a write (``_COALESCE_BATCH``, or a quarter of a
    small limit; below 8 streams, any)."""
    batch = min(_COALESCE_BATCH, conn.max_concurrent // 4)
    return batch <= 1 or conn.max_concurrent - conn.in_flight >= batch


class ConnectionFailed(ApnsError):
    """This connection cannot go on (ALPN refused, closed before its SETTINGS, judged dead)."""


class Wakeup:
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


# -- opening a connection ---------------------------------------------------------------------------------


class Dialer(Protocol):
    """Where a pool's connections go: ``open()`` returns a stream that speaks HTTP/2 (TLS and ALPN done)."""

    @property
    def authority(self) -> str: ...

    async def open(self) -> trio.abc.Stream: ...


def ssl_context_for(settings: ApnsSettings) -> ssl.SSLContext:
    """TLS 1.2+ with ALPN h2, trusting the system's CAs and ``[apns].ca_file``."""
    ctx = ssl.create_default_context()
    if settings.ca_file:
        try:
            ctx.load_verify_locations(cafile=settings.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"apns.ca_file: cannot load {settings.ca_file}: {exc}") from exc
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["h2"])
    return ctx


@dataclass(frozen=True)
class TlsDialer:
    """TCP to ``host:port`` (a fresh DNS lookup each time, as Apple asks), TLS, and ALPN's "h2" required."""

    host: str
    port: int
    ssl_context: ssl.SSLContext

    @property
    def authority(self) -> str:
        return self.host if self.port == 443 else f"{self.host}:{self.port}"

    async def open(self) -> trio.abc.Stream:
        tcp = await trio.open_tcp_stream(self.host, self.port)
        tls = trio.SSLStream(tcp, self.ssl_context, server_hostname=self.host, https_compatible=True)
        try:
            await tls.do_handshake()
            if tls.selected_alpn_protocol() != "h2":
                raise ConnectionFailed(
                    f"server did not agree to HTTP/2 (ALPN {tls.selected_alpn_protocol()!r})"
                )
        except BaseException:
            await trio.aclose_forcefully(tls)
            raise
        return tls


# -- what a pool carries ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Traffic:
    """The callables a pool's connections use, handed in by whoever owns the requests.

    ``pending()``: work is waiting. ``fill(link, conn, now)``: start requests on ``conn`` while
    ``conn.can_send()``; returns how many. ``settle(link, outcome, now)``: one request's answer, or its
    ``Unanswered`` (refused, reset, deadline), at ``now`` (the time of the read that brought it, or of the
    watchdog's look: one clock reading for a whole read's answers). ``closed(link, orphans)``: the connection ended; ``orphans`` are
    its requests still unanswered (they may have been processed)."""

    pending: Callable[[], bool]
    fill: Callable[[Link, ApnsConnection, float], int]
    settle: Callable[[Link, Outcome, float], None]
    closed: Callable[[Link, list[Unanswered]], None]


@dataclass(eq=False)
class Link:
    """One position of a pool: its current connection (replaced on reconnect) and that connection's wake-ups."""

    pool: str
    index: int
    conn: ApnsConnection | None = None
    wake: Wakeup = field(default_factory=Wakeup)  # the writer: work, window, free slots, frames to flush
    watch: Wakeup = field(default_factory=Wakeup)  # the watchdog: the connection began to wait for answers
    token_switched_at: float | None = None
    recycle_reason: str | None = None
    retired: str | None = None  # the watchdog's verdict that ended the connection
    problem: str = "connecting"  # why this position has no usable connection, for health()

    def recycle(self, reason: str) -> None:
        """Open no new stream on this connection; a fresh one replaces it once its streams are done."""
        conn = self.conn
        if conn is not None and conn.state in ("connecting", "open"):
            log.info("apns_connection_recycle", pool=self.pool, slot=self.index, reason=reason)
            self.recycle_reason = reason
            conn.start_draining()
            self.wake.set()


# -- the pool ---------------------------------------------------------------------------------------------


class ConnectionPool:
    """``size`` connections to one APNs host, each kept up by its own task; ``run`` them in a nursery.

    A lazy pool opens its first connection when work first arrives (``wake_writers``), and keeps one from
    then on. Reconnects back off exponentially (``[apns].reconnect_backoff_s`` up to ``_max_s``, jittered) after
    connections that never answered; a connection that answers again wakes every position of the pool that is
    waiting out its backoff, so delivery resumes as soon as the peer is back."""

    def __init__(
        self,
        name: str,
        dialer: Dialer,
        *,
        settings: ApnsSettings,
        tokens: ProviderTokens,
        traffic: Traffic,
        on_configuration_error: ConfigurationError,
        size: int = 1,
        stream_cap: int | None = None,
        lazy: bool = False,
        counted: bool = True,
        rng: random.Random | None = None,
    ) -> None:
        self.name = name
        self.dialer = dialer
        self.settings = settings
        self.links = [Link(name, i) for i in range(size)]
        self.connects = 0
        self._tokens = tokens
        self._traffic = traffic
        self._on_configuration_error = on_configuration_error
        self._stream_cap = stream_cap or settings.max_streams_per_connection
        self._lazy = lazy
        self._counted = counted  # in sightscreen_apns_connections (the push and broadcast pools)
        self._rng = rng or random.Random()
        self._needed = trio.Event()
        if not lazy:
            self._needed.set()
        self._answering = trio.Event()  # set (and replaced) when a connection is heard answering
        self._pings_closed = 0  # PINGs sent on connections since closed
        self._usable_gauge = metrics.APNS_USABLE_CONNECTIONS.labels(pool=name)
        self._usable_gauge.set(0)
        self._was_usable: bool | None = None
        self._unusable_since: float | None = None
        self.liveness = Liveness(
            idle_s=settings.ping_idle_s,
            silence_s=settings.ping_silence_s,
            ping_timeout_s=settings.ping_timeout_s,
        )

    # -- what owners ask ----------------------------------------------------------------------------------
    async def run(self) -> None:
        """Keep the pool's connections up until cancelled."""
        try:
            async with trio.open_nursery() as nursery:
                for link in self.links:
                    nursery.start_soon(self._keep_up, link)
        finally:
            self._usable_gauge.set(0)

    def wake_writers(self) -> None:
        """Work arrived: every connection that can take it is woken (a lazy pool starts connecting)."""
        if not self._needed.is_set():
            self._needed.set()
        for link in self.links:
            conn = link.conn
            if conn is not None and conn.can_send():
                link.wake.set()

    @property
    def connected(self) -> bool:
        return any(link.conn is not None and link.conn.state == "open" for link in self.links)

    @property
    def in_flight(self) -> int:
        return sum(link.conn.in_flight for link in self.links if link.conn is not None)

    @property
    def pings(self) -> int:
        return self._pings_closed + sum(link.conn.pings_sent for link in self.links if link.conn is not None)

    def usable(self, now: float | None = None) -> int:
        """Connections open and answering: heard from within ``ping_silence_s`` whenever they wait."""
        now = trio.current_time() if now is None else now
        silence_s = self.liveness.silence_s
        return sum(1 for link in self.links if link.conn is not None and link.conn.responsive(now, silence_s))

    def health(self) -> tuple[bool, str]:
        """(True, "") while a connection is usable (or a lazy pool has had nothing to carry yet); else False and
        why, per position."""
        if not self._needed.is_set():
            return True, ""
        now = trio.current_time()
        if self.usable(now):
            return True, ""
        why = "; ".join(f"{link.index}: {self._link_problem(link, now)}" for link in self.links)
        return False, f"{self.name} pool: no usable connection to {self.dialer.authority} ({why})"

    def stats(self) -> dict[str, object]:
        conns = [link.conn for link in self.links if link.conn is not None]
        return {
            "connections": sum(1 for c in conns if c.state == "open"),
            "usable": self.usable(),
            "connection_states": [c.state for c in conns],
            "streams_in_flight": sum(c.in_flight for c in conns),
            "max_concurrent_streams": [c.max_concurrent for c in conns],
            "connects": self.connects,
            "pings": self.pings,
        }

    def abandon(self) -> list[Unanswered]:
        """Stopping: every request still on a connection, given back (the connections are not closed here)."""
        orphans: list[Unanswered] = []
        for link in self.links:
            if link.conn is not None:
                orphans.extend(link.conn.connection_lost())
        return orphans

    # -- health -------------------------------------------------------------------------------------------
    def _link_problem(self, link: Link, now: float) -> str:
        conn = link.conn
        if conn is None:
            return link.problem
        if conn.state != "open":
            return f"connection {conn.state}" + (f" ({link.recycle_reason})" if link.recycle_reason else "")
        return f"nothing heard for {conn.silence(now):.1f} s"

    def _refresh_health(self) -> None:
        """Keep the usable-connections gauge current, and log when the pool stops (or starts again) having one."""
        now = trio.current_time()
        usable = self.usable(now)
        self._usable_gauge.set(usable)
        if usable and self._was_usable is not True:
            if self._was_usable is False and self._unusable_since is not None:
                log.info("apns_pool_usable", pool=self.name, after_s=round(now - self._unusable_since, 2))
            self._was_usable, self._unusable_since = True, None
        elif not usable and self._was_usable is True:
            self._was_usable, self._unusable_since = False, now
            log.warning("apns_pool_unusable", pool=self.name, reason=self.health()[1])

    # -- one position: connect, serve, back off -----------------------------------------------------------
    async def _keep_up(self, link: Link) -> None:
        await self._needed.wait()
        settings = self.settings
        failures = 0
        while True:
            healthy = False
            try:
                healthy = await self._serve(link)
            except (ConnectionFailed, *CONNECTION_ERRORS) as exc:
                link.problem = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "apns_connection_failed",
                    pool=self.name,
                    slot=link.index,
                    error=link.problem,
                    failures=failures + 1,
                )
            self._refresh_health()
            failures = 0 if healthy else failures + 1
            if failures:
                delay = backoff_delay(
                    failures,
                    base_s=settings.reconnect_backoff_s,
                    cap_s=settings.reconnect_backoff_max_s,
                    jitter=0.5,
                    rng=self._rng,
                )
                link.problem = f"{link.problem}; reconnecting within {delay:.1f} s"
                # Another position's connection answering means the peer is back: stop waiting.
                with trio.move_on_after(delay):
                    await self._answering.wait()

    async def _serve(self, link: Link) -> bool:
        """Connect, serve until the connection ends; True if it carried answers (healthy). Raises when it
        could not be opened or failed before any answer, so reconnects back off instead of hammering a peer
        that takes connections and answers nothing (apns.md §1.6)."""
        settings = self.settings
        link.problem = "connecting"
        with trio.fail_after(settings.connect_timeout_s):
            stream = await self.dialer.open()
        conn = ApnsConnection(
            self.dialer.authority,
            request_timeout_s=settings.request_timeout_s,
            local_stream_cap=self._stream_cap,
        )
        now = trio.current_time()
        conn.initiate(now)
        conn.use_token(self._tokens.for_connection(None, None).token)
        link.token_switched_at = self._tokens.now()
        link.conn, link.recycle_reason, link.retired = conn, None, None
        self.connects += 1
        counted = False
        failure: BaseException | None = None
        try:
            await stream.send_all(conn.data_to_send())
            async with trio.open_nursery() as nursery:
                settings_seen = trio.Event()
                nursery.start_soon(self._reader, link, conn, stream, settings_seen, nursery.cancel_scope)
                # Errors are caught here, not outside the nursery, so they do not arrive wrapped in an
                # ExceptionGroup; anything else is a bug and may take the owner down.
                try:
                    with trio.fail_after(settings.connect_timeout_s):
                        await settings_seen.wait()
                    if self._counted:
                        metrics.APNS_CONNECTIONS.inc()
                        counted = True
                    log.info(
                        "apns_connection_open",
                        pool=self.name,
                        slot=link.index,
                        max_streams=conn.max_concurrent,
                    )
                    self._refresh_health()
                    nursery.start_soon(self._watchdog, link, conn, nursery.cancel_scope)
                    await self._writer(link, conn, stream)
                except (ConnectionFailed, *CONNECTION_ERRORS) as exc:
                    failure = exc
                nursery.cancel_scope.cancel()
        finally:
            if counted:
                metrics.APNS_CONNECTIONS.dec()
            self._pings_closed += conn.pings_sent
            orphans = conn.connection_lost()
            link.conn = None
            link.problem = "reconnecting"
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)
            self._traffic.closed(link, orphans)
            if conn.goaway is not None:
                log.info(
                    "apns_connection_goaway",
                    pool=self.name,
                    slot=link.index,
                    reason=conn.goaway.reason,
                    error_code=conn.goaway.error_code,
                    last_stream_id=conn.goaway.last_stream_id,
                )
        if failure is None and link.retired is not None:
            failure = ConnectionFailed(f"retired: {link.retired}")
        if failure is not None:
            link.problem = f"{type(failure).__name__}: {failure}"
            if conn.answers_received == 0:
                raise failure
            log.warning(
                "apns_connection_broken",
                pool=self.name,
                slot=link.index,
                error=link.problem,
                resent=len(orphans),
            )
        return conn.answers_received > 0

    async def _reader(
        self,
        link: Link,
        conn: ApnsConnection,
        stream: trio.abc.Stream,
        settings_seen: trio.Event,
        scope: trio.CancelScope,
    ) -> None:
        settle = self._traffic.settle
        answering = False
        goaway_seen = False
        try:
            while True:
                try:
                    data = await stream.receive_some(READ_SIZE)
                except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError, OSError) as exc:
                    log.info(
                        "apns_connection_lost", pool=self.name, slot=link.index, error=type(exc).__name__
                    )
                    return
                if not data:
                    log.info("apns_connection_eof", pool=self.name, slot=link.index, in_flight=conn.in_flight)
                    return
                data = drain_decrypted(stream, data, READ_SIZE)
                now = trio.current_time()
                try:
                    outcomes = conn.receive_data(data, now)
                except h2.exceptions.ProtocolError as exc:
                    log.warning("apns_protocol_error", pool=self.name, slot=link.index, error=str(exc))
                    return
                if conn.settings_received and not settings_seen.is_set():
                    settings_seen.set()
                for outcome in outcomes:
                    settle(link, outcome, now)
                if outcomes and not conn.in_flight:
                    link.watch.set()  # idle from now: the watchdog's next look is the idle PING's
                if self._was_usable is False:
                    self._refresh_health()  # heard again: say so now, not at the watchdog's next look
                if not answering and conn.answers_received:
                    answering = True  # the peer answers: positions waiting out a backoff come back now
                    self._answering.set()
                    self._answering = trio.Event()
                goaway = conn.goaway
                if goaway is not None and not goaway_seen:
                    goaway_seen = True
                    if goaway.reason is not None:
                        verdict = classify(403, goaway.reason)
                        if verdict.action is Action.CONFIGURATION:
                            metrics.APNS_ERRORS.labels(verdict.action.value).inc()
                            self._on_configuration_error(goaway.reason, None, "from GOAWAY")
                link.wake.set()  # acks, window updates and freed stream slots: the writer has work
                if conn.state == "closed":
                    return
                if len(outcomes) < _READ_BATCH and conn.in_flight:
                    # Answers are trickling in while more are owed: let them gather for a moment rather than
                    # waking this task, the writer and the producers for every few (see _READ_BATCH).
                    await trio.sleep(_READ_GATHER_S)
        finally:
            scope.cancel()

    async def _writer(self, link: Link, conn: ApnsConnection, stream: trio.abc.Stream) -> None:
        wake = link.wake
        pending = self._traffic.pending
        fill = self._traffic.fill
        silence_s = self.liveness.silence_s
        while True:
            if conn.state == "closed":
                return
            self._maybe_switch_token(link, conn)
            if conn.in_flight and pending():
                await self._coalesce(conn, wake)
            now = trio.current_time()
            # A connection left waiting in silence takes nothing new until it is heard again (or retired).
            if conn.can_send() and pending() and conn.responsive(now, silence_s):
                idle = not conn.in_flight
                if fill(link, conn, now) and idle:
                    link.watch.set()  # it waits for answers from now: deadlines and silence to watch
            data = conn.data_to_send()
            if data:
                await stream.send_all(data)
                continue
            await wake.wait()

    async def _coalesce(self, conn: ApnsConnection, wake: Wakeup) -> None:
        """When the stream pipeline is nearly full, wait briefly for more free slots before writing.

        Without this, a full pipeline settles into one request per answer: one TLS record and one send()
        syscall per push, and on loopback every send() also hands the CPU to the server. Waiting up to
        ``_COALESCE_S`` for a batch costs nothing in throughput (the pipeline is full anyway) and turns
        thousands of tiny writes into a few large ones.
        """
        if conn.state != "open" or _worth_a_write(conn):
            return  # (a draining connection takes no new streams: nothing to gather)
        with trio.move_on_after(_COALESCE_S):
            while conn.state == "open" and not _worth_a_write(conn):
                await wake.wait()
        wake.set()  # the loop below re-checks everything; make sure it does not sleep first

    async def _watchdog(self, link: Link, conn: ApnsConnection, scope: trio.CancelScope) -> None:
        """Deadlines and liveness, apart from the writer: a writer stuck in ``send_all`` on a dead link (the
        peer's window closed, or a NAT dropping every segment) must not stop the connection being judged."""
        settle = self._traffic.settle
        rules = self.liveness
        while True:
            now = trio.current_time()
            expired = conn.expire(now)
            if expired:
                log.info("apns_request_timeout", pool=self.name, slot=link.index, requests=len(expired))
                for outcome in expired:
                    settle(link, outcome, now)
                link.wake.set()  # RST_STREAMs to send, stream slots free
            judgement = conn.check(now, rules)
            if judgement.action == "ping":
                try:
                    conn.send_ping(now)
                except h2.exceptions.ProtocolError as exc:  # h2 closed its side meanwhile: nothing to ask
                    judgement = Judgement("retire", "silent", f"cannot PING ({exc})", now)
                else:
                    log.info("apns_connection_ping", pool=self.name, slot=link.index, why=judgement.detail)
                    link.wake.set()
            if judgement.action == "retire":
                link.retired = judgement.detail
                metrics.APNS_CONNECTIONS_RETIRED.labels(pool=self.name, cause=judgement.cause).inc()
                log.warning(
                    "apns_connection_retired",
                    pool=self.name,
                    slot=link.index,
                    cause=judgement.cause,
                    detail=judgement.detail,
                    in_flight=conn.in_flight,
                )
                scope.cancel()
                return
            self._refresh_health()
            if conn.state == "closed":
                return
            wake_at = judgement.next_check
            deadline = conn.next_deadline()
            if deadline is not None and deadline < wake_at:
                wake_at = deadline
            if judgement.action == "ping":
                wake_at = now  # look again at once: the PING changed what to wait for
            if wake_at > now:
                with trio.move_on_at(wake_at):
                    await link.watch.wait()
            else:
                await trio.lowlevel.checkpoint()

    def _maybe_switch_token(self, link: Link, conn: ApnsConnection) -> None:
        choice = self._tokens.for_connection(conn.token, link.token_switched_at)
        if choice.recycle:
            link.recycle("ProviderTokenAging")
        elif choice.switched:
            conn.use_token(choice.token)
            link.token_switched_at = self._tokens.now()
