"""``ApnsTestServer``: accepts connections, holds records, statistics and the fault script, answers ``/ctl/*``."""

from __future__ import annotations

import itertools
import json
import shutil
import ssl
import tempfile
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import trio
from pydantic import ValidationError

from daemon.apns import certs
from daemon.logs import get_logger, short_token

if TYPE_CHECKING:
    import trustme

from daemon.apns.internals import install_huffman_cache
from daemon.apns.server.auth import ProviderTokenVerifier, TokenCheck, redact_authorization
from daemon.apns.server.channels import (
    MAX_CHANNELS,
    ChannelStore,
    Subscriptions,
    decide_broadcast,
    decide_management,
    is_broadcast_path,
    is_management_path,
)
from daemon.apns.server.connection import Answer, ApnsIds, Request, ServerConnection
from daemon.apns.server.http2 import GOAWAY_LINGER_S, TLS_HANDSHAKE_TIMEOUT_S
from daemon.apns.server.script import FaultScript, FaultState
from daemon.apns.server.validation import (
    ACCEPTED,
    Verdict,
    error_body,
    headers_to_dict,
    normalize_topics,
    validate_headers,
    validate_payload,
    validate_target,
)

log = get_logger("apns.server")


# Trio shell: the server


class ApnsTestServer:
    """An APNs look-alike over HTTP/2 + TLS: validates, records and misbehaves on request.

    ``keys`` maps key IDs to PEM public keys (the .p8's public half); ``topics`` are the allowed bundle
    ids (``.push-type.liveactivity`` and other suffixes are implied by the push type). ``fast`` skips JSON
    parsing (payload size is still checked) for benchmarks. ``engine="lean"`` swaps h2's connection object
    for ``LeanH2Connection`` (same events, same faults, about half the CPU per request); ``"h2"`` is the
    default, the reference implementation.
    """

    def __init__(
        self,
        *,
        team_id: str,
        keys: Mapping[str, str | bytes],
        topics: Collection[str],
        record_path: str | Path | None = None,
        ca: trustme.CA | None = None,
        max_concurrent_streams: int = 1000,
        initial_streams: int | None = 1,
        fast: bool = False,
        sandbox: bool = True,
        hostnames: Collection[str] = certs.DEFAULT_HOSTNAMES,
        keep_records: int | None = None,
        engine: Literal["h2", "lean"] = "h2",
        channel_limit: int = MAX_CHANNELS,
    ) -> None:
        if not topics:
            raise ValueError("topics: at least one bundle id is required")
        self.team_id = team_id
        self.topics = normalize_topics(topics)
        self.verifier = ProviderTokenVerifier(team_id, keys)
        self.ca = ca if ca is not None else certs.make_ca()
        self._hostnames = tuple(hostnames)
        self.faults = FaultState(
            max_concurrent_streams=max_concurrent_streams, initial_streams=initial_streams
        )
        self._initial_faults = (max_concurrent_streams, initial_streams)
        self.fast = fast
        if engine not in ("h2", "lean"):
            raise ValueError(f"engine: {engine!r} is not 'h2' or 'lean'")
        self.engine = engine
        self.sandbox = sandbox
        self.record_path = Path(record_path) if record_path is not None else None
        self.keep_records = keep_records
        self.records: list[dict[str, Any]] = []
        self.records_total = 0
        self.port = 0
        self.host = "127.0.0.1"
        self._ca_file: str | None = None
        self._record_file: IO[str] | None = None
        self._record_dirty = False
        self._record_waiters: list[tuple[int, trio.Event]] = []
        # called with each record once its answer is queued, before it is flushed (in-process callers only):
        # a test stops a client at an exact request
        self.on_answer: Callable[[dict[str, Any]], None] | None = None
        self._connections: dict[int, ServerConnection] = {}
        self._conn_ids = itertools.count(1)
        self._stats: dict[str, int] = {}
        self._statuses: dict[str, int] = {}
        self.protocol_errors: list[str] = []
        # How long a connection stays open after its GOAWAY once every stream it kept was answered.
        self.goaway_linger_s = GOAWAY_LINGER_S
        self._ids = ApnsIds()
        # iOS 18 broadcast: the channels APNs holds, the management requests answered (op, channel, status),
        # and the simulated devices subscribed to channels with what each saw
        self.channels = ChannelStore(limit=channel_limit)
        self.channel_log: list[dict[str, Any]] = []
        self.subscriptions = Subscriptions()
        self.management_port = 0
        install_huffman_cache()

    # ---- public API --------------------------------------------------------------------------------

    @property
    def ca_file(self) -> str:
        """The CA certificate (PEM) on disk, written on first use into a private temp directory."""
        if self._ca_file is None:
            folder = tempfile.mkdtemp(prefix="sightscreen-apns-ca-")
            self._ca_file = str(certs.write_ca_pem(self.ca, Path(folder) / "ca.pem"))
        return self._ca_file

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    def ssl_context_for_clients(self) -> ssl.SSLContext:
        return certs.client_ssl_context(ca=self.ca)

    async def serve(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on ``host:port`` (0 picks a free port) until cancelled; ``started(port)`` once bound."""
        server_ctx = certs.server_ssl_context(self.ca, (*self._hostnames, host))
        listeners = await trio.open_tcp_listeners(port, host=host)
        self.host = host
        self.port = listeners[0].socket.getsockname()[1]
        if self.record_path is not None:
            self.record_path.parent.mkdir(parents=True, exist_ok=True)
            self._record_file = self.record_path.open("a", encoding="utf-8")
        created_ca = self._ca_file is None
        try:
            async with trio.open_nursery() as nursery:
                if self._record_file is not None:
                    nursery.start_soon(self._record_flush_loop)
                log.info("apns_server_listening", host=host, port=self.port)
                task_status.started(self.port)

                async def handler(tcp: trio.SocketStream) -> None:
                    await self._handle_tcp(tcp, server_ctx, "push")

                await trio.serve_listeners(handler, listeners, handler_nursery=nursery)
        finally:
            if self._record_file is not None:
                self._record_file.close()
                self._record_file = None
            if created_ca and self._ca_file is not None:
                # The CA file written for this run's clients goes with the run.
                shutil.rmtree(Path(self._ca_file).parent, ignore_errors=True)
                self._ca_file = None

    @property
    def management_url(self) -> str:
        return f"https://{self.host}:{self.management_port}"

    async def serve_management(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """The channel-management host (Apple's api-manage-broadcast...), its own listener: it answers
        ``/1/apps/...`` only, as the push listener answers everything but them. ``started(port)`` once bound."""
        server_ctx = certs.server_ssl_context(self.ca, (*self._hostnames, host))
        listeners = await trio.open_tcp_listeners(port, host=host)
        self.management_port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            log.info("apns_management_listening", host=host, port=self.management_port)
            task_status.started(self.management_port)

            async def handler(tcp: trio.SocketStream) -> None:
                await self._handle_tcp(tcp, server_ctx, "management")

            await trio.serve_listeners(handler, listeners, handler_nursery=nursery)

    def subscribe(self, device: str, channel_id: str) -> None:
        """A simulated iOS 18 device starts an activity on ``channel_id``: it sees that channel's broadcasts."""
        self.subscriptions.subscribe(device, channel_id)

    def seen_by(self, device: str) -> list[dict[str, Any]]:
        """The ``aps`` of every broadcast that reached ``device`` through a channel, in order."""
        return list(self.subscriptions.seen.get(device, ()))

    def script(self, **faults: Any) -> None:
        """Apply a fault script (the fields of ``FaultScript``); raises ``ValueError`` naming bad fields."""
        try:
            parsed = FaultScript.model_validate(faults)
        except ValidationError as exc:
            raise ValueError(_validation_message(exc)) from exc
        self._apply(parsed)

    def reset(self, *, records: bool = False) -> None:
        """Forget every scripted fault (limits return to the constructor's); optionally the records too."""
        max_streams, initial = self._initial_faults
        self.faults = FaultState(max_concurrent_streams=max_streams, initial_streams=initial)
        if records:
            self.records.clear()

    # Individual fault helpers (thin wrappers over ``script``).

    def set_token_status(
        self,
        token: str,
        status: int = 410,
        reason: str | None = None,
        *,
        count: int | None = None,
        timestamp_ms: int | None = None,
        delay_s: float = 0.0,
    ) -> None:
        self.script(
            tokens={
                token: {
                    "status": status,
                    "reason": reason,
                    "count": count,
                    "timestamp_ms": timestamp_ms,
                    "delay_s": delay_s,
                }
            }
        )

    def storm(
        self,
        status: int = 500,
        *,
        count: int | None = None,
        duration_s: float | None = None,
        reason: str | None = None,
    ) -> None:
        self.script(storm={"status": status, "count": count, "duration_s": duration_s, "reason": reason})

    def goaway(
        self, reason: str = "Shutdown", *, after: int = 0, error_code: int = 0, graceful: bool = True
    ) -> None:
        self.script(goaway={"after": after, "reason": reason, "error_code": error_code, "graceful": graceful})

    def drop_connections(self, *, after: int = 0) -> None:
        self.script(drop={"after": after})

    def freeze_connections(self) -> None:
        """Every connection open now goes silent for good and stays open; new ones are served (``freeze``)."""
        self.script(freeze=True)

    def refuse_streams(self, count: int) -> None:
        self.script(refuse_streams=count)

    def delay(self, seconds: float, *, count: int | None = None) -> None:
        self.script(delay={"seconds": seconds, "count": count})

    def set_window(
        self, initial_window_size: int, *, connection_window: int | None = None, update_delay_s: float = 0.0
    ) -> None:
        self.script(
            window={
                "initial_window_size": initial_window_size,
                "connection_window": connection_window,
                "update_delay_s": update_delay_s,
            }
        )

    async def wait_for_records(self, n: int) -> list[dict[str, Any]]:
        """Wait until at least ``n`` requests have been answered in total; returns ``records``."""
        if self.records_total < n:
            event = trio.Event()
            self._record_waiters.append((n, event))
            await event.wait()
        return self.records

    def answers_held(self) -> bool:
        """Whether any open connection holds a request it has not answered yet (a delayed answer)."""
        return any(c.unanswered for c in self._connections.values())

    def stats(self) -> dict[str, Any]:
        return {
            **self._stats,
            "connections_open": len(self._connections),
            "records": self.records_total,
            "statuses": dict(self._statuses),
            "max_open_streams": max(
                [self._stats.get("max_open_streams_closed", 0)]
                + [c.max_open for c in self._connections.values()]
            ),
            "protocol_errors": list(self.protocol_errors),
            "channels": {
                "open": self.channels.count(),
                "created": self.channels.created,
                "deleted": self.channels.deleted,
            },
        }

    def flush_records(self) -> None:
        if self._record_file is not None and self._record_dirty:
            self._record_file.flush()
            self._record_dirty = False

    # ---- internals ---------------------------------------------------------------------------------

    def _apply(self, script: FaultScript) -> None:
        # Storm deadlines use time.monotonic: a script may be applied before trio runs (the CLI's --script).
        self.faults.apply(script, time.monotonic())
        log.info("apns_server_script", **_script_summary(script))
        if script.goaway is not None and script.goaway.after == 0:
            fault = script.goaway
            self.faults.goaway = None
            for conn in list(self._connections.values()):
                conn.call_soon(lambda c=conn: c.start_goaway(fault))  # type: ignore[misc]
        if script.drop is not None and script.drop.after == 0:
            self.faults.drop_after = None
            for conn in list(self._connections.values()):
                self.count("connections_dropped")
                conn.abort()
        if script.idle_timeout_s:
            for conn in self._connections.values():
                conn.arm_idle_timer()
        if script.max_concurrent_streams is not None:
            for conn in self._connections.values():
                conn.max_streams = script.max_concurrent_streams
        if script.freeze:
            for conn in self._connections.values():
                self.count("connections_frozen")
                conn.freeze()

    # ---- serving connections ----------------------------------------------------------------------

    async def _handle_tcp(
        self, tcp: trio.SocketStream, server_ctx: ssl.SSLContext, role: str = "push"
    ) -> None:
        tls = trio.SSLStream(tcp, server_ctx, server_side=True, https_compatible=True)
        try:
            with trio.fail_after(TLS_HANDSHAKE_TIMEOUT_S):
                await tls.do_handshake()
        except (trio.TooSlowError, trio.BrokenResourceError, ssl.SSLError, OSError) as exc:
            self.count("tls_failures")
            log.info("apns_server_tls_failed", error=str(exc))
            await trio.aclose_forcefully(tls)
            return
        if tls.selected_alpn_protocol() != "h2":
            self.count("tls_failures")
            log.info("apns_server_no_h2", alpn=tls.selected_alpn_protocol())
            await trio.aclose_forcefully(tls)
            return
        await self.serve_stream(tls, role)

    async def serve_stream(self, stream: trio.abc.Stream, role: str = "push") -> None:
        """Serve one client connection on ``stream`` (TLS and ALPN already done, or an in-memory stream a
        test drives) until it ends: "push" answers pushes and broadcasts, "management" channel management."""
        conn = ServerConnection(self, next(self._conn_ids), stream)
        conn.role = role
        self._connections[conn.id] = conn
        self.count("connections_total")
        log.debug("apns_server_connection_open", connection_id=conn.id)
        try:
            await conn.run()
        except Exception as exc:  # one connection's bug must not stop the server; tests see it in stats
            message = f"connection {conn.id}: internal error: {exc!r}"
            self.protocol_errors.append(message)
            self.count("internal_errors")
            log.error("apns_server_internal_error", connection_id=conn.id, error=message, exc_info=True)
        finally:
            del self._connections[conn.id]
            self._stats["max_open_streams_closed"] = max(
                self._stats.get("max_open_streams_closed", 0), conn.max_open
            )
            log.debug("apns_server_connection_closed", connection_id=conn.id, answered=conn.answered)

    # ---- what connections call (``connection.ConnectionOwner``) ----------------------------------------

    def count(self, name: str, by: int = 1) -> None:
        self._stats[name] = self._stats.get(name, 0) + by

    def unique_id_header(self) -> list[tuple[bytes, bytes]]:
        if not self.sandbox:
            return []
        return [(b"apns-unique-id", self._ids.next().encode())]

    def stream_limit_violation(self, conn: ServerConnection, stream_id: int, open_streams: int) -> None:
        self.count("stream_limit_violations")
        limit = conn.h2.local_settings.max_concurrent_streams
        message = f"connection {conn.id}: stream {stream_id} opened with {open_streams} open, limit {limit}"
        self.protocol_errors.append(message)
        log.warning("apns_server_stream_limit_violated", connection_id=conn.id, error=message)

    def protocol_error(self, conn: ServerConnection, exc: Exception) -> None:
        name = type(exc).__name__
        if isinstance(exc, h2.exceptions.TooManyStreamsError):
            self.count("stream_limit_violations")
        elif isinstance(exc, h2.exceptions.FlowControlError):
            self.count("flow_control_violations")
        message = f"connection {conn.id}: {name}: {exc}"
        self.protocol_errors.append(message)
        log.warning("apns_server_protocol_error", connection_id=conn.id, error=message)

    def decide(self, conn: ServerConnection, req: Request) -> tuple[Answer, float]:
        """Validate one request and apply the script; returns the answer and how long to hold it."""
        headers, duplicate = headers_to_dict(req.headers)
        path = headers.get(":path", "")
        if conn.role == "management" or is_management_path(path) or is_broadcast_path(path):
            return self._decide_channel(conn, req, headers, duplicate)
        apns_id = headers.get("apns-id") or self._ids.next()
        faults = self.faults
        now_wall = time.time()
        check: TokenCheck | None = None
        payload: Any = None
        timestamp_ms: int | None = None
        extra_delay = 0.0
        token, verdict = validate_target(headers.get(":method", ""), headers.get(":path", ""))
        if verdict is None and duplicate is not None:
            verdict = Verdict(400, "DuplicateHeaders", f"header {duplicate!r} appears twice")
        if verdict is None:
            check = self.verifier.check(headers.get("authorization"), now_wall)
            auth = conn.auth
            if check.token != auth.token or auth.poisoned or check.reason is not None:
                verdict = auth.admit(
                    check,
                    time.monotonic(),
                    min_interval_s=faults.token_update_interval_s,
                    pin_key=faults.pin_key_id,
                )
                if verdict is not None and verdict.reason == "TooManyProviderTokenUpdates":
                    self.count("token_churn_rejections")
        if verdict is None:
            verdict = validate_headers(headers, self.topics)
        if verdict is None:
            payload, verdict = validate_payload(
                headers.get("apns-push-type", ""), req.body, parse=not self.fast
            )
        if verdict is None and faults.storm_status:
            verdict = faults.storm_verdict(time.monotonic())
        if verdict is None and faults.tokens:
            rule = faults.token_rule(token)
            if rule is not None:
                extra_delay = rule.delay_s
                if rule.status != 200:
                    verdict = Verdict(rule.status, rule.reason, "scripted for this token")
                    timestamp_ms = rule.timestamp_ms
        if verdict is None:
            verdict = ACCEPTED
        if verdict.status != 200 and payload is None and not self.fast and req.body:
            payload = _try_json(req.body)
        record = self._make_record(
            conn, req.stream_id, token, headers, check, payload, verdict, apns_id, len(req.body)
        )
        body = b"" if verdict.accepted else error_body(verdict, timestamp_ms=timestamp_ms)
        if verdict.status == 410 and record is not None:
            record["timestamp_ms"] = json.loads(body)["timestamp"]
        answer = Answer(req.stream_id, verdict.status, verdict.reason, apns_id, record, body)
        return answer, faults.take_delay() + extra_delay

    def _decide_channel(
        self, conn: ServerConnection, req: Request, headers: dict[str, str], duplicate: str | None
    ) -> tuple[Answer, float]:
        """A channel-management request (management listener) or a broadcast (push listener)."""
        method, path = headers.get(":method", ""), headers.get(":path", "")
        request_id = headers.get("apns-request-id") or self._ids.next()
        body = bytes(req.body)
        management = conn.role == "management"
        verdict: Verdict | None = None
        check: TokenCheck | None = None
        if management != is_management_path(path):
            verdict = Verdict(404, "BadPath", f"{path!r} is not served on the {conn.role} host")
        elif duplicate is not None:
            verdict = Verdict(400, "DuplicateHeaders", f"header {duplicate!r} appears twice")
        else:
            check = self.verifier.check(headers.get("authorization"), time.time())
            auth = conn.auth
            if check.token != auth.token or auth.poisoned or check.reason is not None:
                verdict = auth.admit(
                    check,
                    time.monotonic(),
                    min_interval_s=self.faults.token_update_interval_s,
                    pin_key=self.faults.pin_key_id,
                )
        if verdict is not None:
            outcome = None
        elif management:
            outcome = decide_management(method, path, headers, body, self.channels, self.topics)
            verdict = outcome.verdict
        else:
            outcome = decide_broadcast(method, path, headers, body, self.channels, self.topics)
            verdict = outcome.verdict
            if verdict.accepted and self.faults.storm_status:
                verdict = self.faults.storm_verdict(time.monotonic()) or verdict
        extra: tuple[tuple[bytes, bytes], ...] = ()
        answer_body = b""
        record: dict[str, Any] | None = None
        if 200 <= verdict.status < 300 and outcome is not None:
            extra, answer_body = outcome.headers, outcome.body
        elif verdict.status >= 300:
            answer_body = error_body(verdict)
        channel_id = outcome.channel_id if outcome is not None else headers.get("apns-channel-id", "")
        if management:
            entry = {
                "time": time.time(),
                "op": outcome.op if outcome else "",
                "channel_id": channel_id,
                "status": verdict.status,
                "reason": verdict.reason,
            }
            if verdict.detail:
                entry["detail"] = verdict.detail
            self.channel_log.append(entry)
        else:
            payload = outcome.payload if outcome is not None else _try_json(body)
            record = self._make_record(
                conn, req.stream_id, "", headers, check, payload, verdict, request_id, len(body)
            )
            record["channel_id"] = channel_id
            if verdict.accepted and outcome is not None:
                extra = ((b"apns-unique-id", self._ids.next().encode()),)
                record["devices"] = self.subscriptions.deliver(channel_id, outcome.payload["aps"])
        answer = Answer(
            req.stream_id,
            verdict.status,
            verdict.reason,
            request_id,
            record,
            answer_body,
            extra,
            b"apns-request-id",
        )
        return answer, self.faults.take_delay()

    def _make_record(
        self,
        conn: ServerConnection,
        stream_id: int,
        token: str,
        headers: dict[str, str],
        check: TokenCheck | None,
        payload: Any,
        verdict: Verdict,
        apns_id: str,
        payload_bytes: int,
    ) -> dict[str, Any]:
        shown = headers  # a fresh dict per request (headers_to_dict); the record may keep it
        if "authorization" in shown:
            shown["authorization"] = redact_authorization(check, shown["authorization"]) or ""
        record: dict[str, Any] = {
            "connection_id": conn.id,
            "stream_id": stream_id,
            "token": token,
            "headers": shown,
            "payload": payload,
            "payload_bytes": payload_bytes,
            "status": verdict.status,
            "reason": verdict.reason,
            "apns_id": apns_id,
        }
        if verdict.detail:
            record["detail"] = verdict.detail
        return record

    def answered(self, conn: ServerConnection, answer: Answer) -> None:
        key = str(answer.status)
        self._statuses[key] = self._statuses.get(key, 0) + 1
        record = answer.record
        if record is None:
            return
        record["time"] = time.time()
        self.records.append(record)
        self.records_total += 1
        if self.keep_records is not None and len(self.records) > 2 * self.keep_records:
            del self.records[: len(self.records) - self.keep_records]
        if self._record_file is not None:
            self._record_file.write(json.dumps(record, separators=(",", ":")) + "\n")
            self._record_dirty = True
        if self.on_answer is not None:
            self.on_answer(record)
        if self._record_waiters:
            still: list[tuple[int, trio.Event]] = []
            for n, event in self._record_waiters:
                if self.records_total >= n:
                    event.set()
                else:
                    still.append((n, event))
            self._record_waiters = still
        if answer.status != 200:
            log.debug(
                "apns_server_rejected",
                token=short_token(record["token"]),
                status=answer.status,
                reason=answer.reason,
                detail=record.get("detail", ""),
            )

    async def _record_flush_loop(self) -> None:
        while True:
            await trio.sleep(0.1)
            self.flush_records()

    # ---- control endpoint --------------------------------------------------------------------------

    async def control(self, conn: ServerConnection, req: Request) -> None:
        headers, _ = headers_to_dict(req.headers)
        method = headers.get(":method", "")
        path, _, query = headers.get(":path", "").partition("?")
        params = dict(p.partition("=")[::2] for p in query.split("&") if p)
        status: int
        body: dict[str, Any]
        try:
            status, body = await self._control_dispatch(method, path, params, bytes(req.body))
        except Exception as exc:  # the control plane answers every error; it must not kill the connection
            status, body = 500, {"reason": "ControlError", "detail": f"{type(exc).__name__}: {exc}"}
        data = json.dumps(body, separators=(",", ":"), default=str).encode()
        conn.call_soon(lambda: conn.send_control(req.stream_id, status, data))

    async def _control_dispatch(
        self, method: str, path: str, params: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, Any]]:
        if path == "/ctl/script" and method == "POST":
            try:
                parsed = FaultScript.model_validate_json(body or b"{}")
            except ValidationError as exc:
                return 400, {"reason": "BadScript", "detail": _validation_message(exc)}
            self._apply(parsed)
            return 200, {"ok": True}
        if path == "/ctl/reset" and method == "POST":
            self.reset(records=params.get("records") in {"1", "true"})
            return 200, {"ok": True}
        if path == "/ctl/records" and method == "GET":
            try:
                since = int(params.get("since", "0"))
                limit = int(params["limit"]) if "limit" in params else None
            except ValueError:
                return 400, {"reason": "BadQuery", "detail": "since and limit must be integers"}
            offset = self.records_total - len(self.records)
            start = max(0, since - offset)
            chosen = self.records[start : start + limit if limit is not None else None]
            return 200, {"total": self.records_total, "since": offset + start, "records": chosen}
        if path == "/ctl/wait" and method == "GET":
            try:
                n = int(params.get("records", "0"))
                timeout = float(params.get("timeout", "10"))
            except ValueError:
                return 400, {"reason": "BadQuery", "detail": "records must be an integer, timeout seconds"}
            with trio.move_on_after(timeout):
                await self.wait_for_records(n)
            return 200, {"total": self.records_total, "reached": self.records_total >= n}
        if path == "/ctl/subscribe" and method == "POST":
            try:
                spec = json.loads(body or b"{}")
                pairs = spec["subscriptions"] if "subscriptions" in spec else [spec]
                for pair in pairs:
                    self.subscribe(str(pair["device"]), str(pair["channel"]))
            except (ValueError, KeyError, TypeError) as exc:
                return 400, {"reason": "BadSubscription", "detail": f"expected {{device, channel}}: {exc!r}"}
            return 200, {"ok": True, "subscribed": len(pairs)}
        if path == "/ctl/seen" and method == "GET":
            device = params.get("device")
            if device:
                return 200, {"device": device, "seen": self.seen_by(device)}
            return 200, {"seen": {d: len(v) for d, v in self.subscriptions.seen.items()}}
        if path == "/ctl/channels" and method == "GET":
            return 200, {"channels": self.channels.channels, "log": self.channel_log[-1000:]}
        if path == "/ctl/stats" and method == "GET":
            return 200, self.stats()
        return 404, {"reason": "BadPath", "detail": f"no control endpoint {method} {path}"}


def _try_json(body: bytes | bytearray) -> Any:
    try:
        return json.loads(body)
    except (UnicodeDecodeError, ValueError):
        return None


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "script"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def _script_summary(script: FaultScript) -> dict[str, Any]:
    summary = script.model_dump(exclude_none=True)
    if "tokens" in summary:
        summary["tokens"] = {short_token(t): v for t, v in summary["tokens"].items()}
    if "clear_tokens" in summary:
        summary["clear_tokens"] = [short_token(t) for t in summary["clear_tokens"]]
    return summary
