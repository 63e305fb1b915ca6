"""The admin socket: a Unix stream socket speaking one JSON request per line, one JSON answer per line.

This module owns the protocol and the server's self-defence (line limits, per-client deadlines, a bound on
clients); it knows nothing of the daemon. Commands are ``Handler`` callables the daemon registers by name
(health, ready, status, matches, match ID, apns, drain, replay...); ``help`` and ``metrics`` are built in.
It must not reach into actors: a handler reads what its owner exposes and returns plain data.

Protocol (also in docs/operations.md):

- request: ``{"cmd": "match", "args": ["71344"]}`` (``args`` optional; an ``id`` is echoed back), or a
  bare line ``match 71344`` for socat; blank lines are ignored;
- answer: ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "..."}``, one line each, in order;
- a bad request (bad JSON, unknown command, wrong arguments) gets an error answer and the connection stays
  usable; a line longer than ``max_line_bytes`` gets an error answer and the connection is closed;
- a client idle for ``client_timeout_s``, or not reading its answers for that long, is disconnected; past
  ``max_clients`` connections a newcomer gets an error answer and is closed;
- a handler that raises anything but ``AdminError`` yields "internal error" (and a log line with the
  traceback); the server and the daemon carry on.
"""

from __future__ import annotations

import difflib
import inspect
import os
import stat
from collections.abc import Callable, Mapping
from typing import Any

import trio

from daemon.logs import get_logger
from daemon.runtime.accept import ACCEPT_RETRY_S, ACCEPT_TRANSIENT
from daemon.runtime.admin.protocol import AdminError, Handler, encode_answer, expect_args, parse_request
from daemon.runtime.errors import DaemonRuntimeError

log = get_logger("admin")

# Answering a refused (over max_clients) connection must never hold up the accept loop for long.
_REJECT_SEND_S = 0.5


class AdminSocketError(DaemonRuntimeError, RuntimeError):
    """The socket cannot be set up (path in use by a live server, not a socket, too long...)."""


def _summary(handler: Callable[..., Any]) -> str:
    doc = inspect.getdoc(handler) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


class _LineTooLong(DaemonRuntimeError):
    pass


_EOF = object()
_TIMED_OUT = object()


# A Unix socket's path fits in sockaddr_un's sun_path: 108 bytes on Linux, its terminating NUL included.
MAX_SOCKET_PATH_BYTES = 107


async def socket_path_problem(path: str) -> str | None:
    """Why the admin socket cannot be served at ``path`` by this process, or None when it can: too long a path,
    something that is not a socket there, or a live server answering on it (a stale socket is fine: the server
    replaces it)."""
    if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
        return f"{path} is {len(os.fsencode(path))} bytes long; a Unix socket path takes at most {MAX_SOCKET_PATH_BYTES}"
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path} cannot be looked at: {exc.strerror or exc}"
    if not stat.S_ISSOCK(info.st_mode):
        return f"{path} exists and is not a socket; not removing it"
    with trio.move_on_after(1.0):
        try:
            stream = await trio.open_unix_socket(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return None
        except PermissionError:
            return f"{path} exists and cannot be probed (permission denied)"
        await stream.aclose()
        return f"another process is serving the admin socket {path}"
    return f"another process is serving the admin socket {path} (its backlog is full)"


class AdminServer:
    """Serves ``handlers`` on a Unix stream socket at ``path``. ``serve``/``run`` is the actor entry point."""

    def __init__(
        self,
        path: str,
        handlers: Mapping[str, Handler],
        *,
        mode: int = 0o660,
        max_line_bytes: int = 65536,
        client_timeout_s: float = 10.0,
        max_clients: int = 64,
    ) -> None:
        if max_line_bytes < 16:
            raise ValueError("max_line_bytes must be at least 16")
        if client_timeout_s <= 0 or max_clients < 1:
            raise ValueError("client_timeout_s must be > 0 and max_clients >= 1")
        self.path = str(path)
        self.mode = mode
        self.max_line_bytes = max_line_bytes
        self.client_timeout_s = client_timeout_s
        self.max_clients = max_clients
        builtins: dict[str, Handler] = {"help": self._help, "metrics": self._metrics}
        # The daemon may replace a built-in (say, a richer `metrics`), but `help` always lists what is there.
        self._handlers: dict[str, Handler] = {**builtins, **dict(handlers), "help": self._help}
        self._clients = 0
        self._inode: int | None = None

    @property
    def clients(self) -> int:
        """Connections being served now."""
        return self._clients

    # --- built-in commands -------------------------------------------------------------------------------

    async def _help(self, args: list[str]) -> dict[str, str]:
        """list the commands this daemon answers"""
        expect_args("help", args)
        return {name: _summary(handler) for name, handler in sorted(self._handlers.items())}

    async def _metrics(self, args: list[str]) -> str:
        """Prometheus metrics in the text exposition format"""
        expect_args("metrics", args)
        from daemon.metrics import render

        return render().decode("utf-8")

    # --- dispatch (no I/O) -------------------------------------------------------------------------------

    async def answer(self, line: bytes) -> bytes:
        """The answer line for one request line. Never raises for bad input or a failing handler."""
        request_id: Any = None
        try:
            request = parse_request(line)
        except AdminError as exc:
            return encode_answer(ok=False, error=str(exc))
        except Exception:  # a parser bug must cost one error answer, never the server
            log.exception("admin_request_unparseable")
            return encode_answer(ok=False, error="bad request")
        request_id = request.id
        handler = self._handlers.get(request.cmd)
        if handler is None:
            close = difflib.get_close_matches(request.cmd, list(self._handlers), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else "; try 'help'"
            return encode_answer(
                ok=False, error=f"unknown command {request.cmd!r}{hint}", request_id=request_id
            )
        try:
            result = handler(list(request.args))
            if inspect.isawaitable(result):
                result = await result
        except AdminError as exc:
            return encode_answer(ok=False, error=str(exc) or "error", request_id=request_id)
        except Exception:
            log.exception("admin_handler_failed", cmd=request.cmd)
            return encode_answer(ok=False, error="internal error", request_id=request_id)
        try:
            return encode_answer(ok=True, result=result, request_id=request_id)
        except (TypeError, ValueError):
            log.exception("admin_result_not_json", cmd=request.cmd)
            return encode_answer(ok=False, error="internal error", request_id=request_id)

    # --- the socket --------------------------------------------------------------------------------------

    def _ensure_parent(self) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)

    async def _bind(self) -> trio.socket.SocketType:
        # Local filesystem calls on a runtime directory: quick, so done inline rather than in a thread.
        problem = await socket_path_problem(self.path)
        if problem is not None:
            raise AdminSocketError(problem)
        try:
            os.unlink(self.path)  # a stale socket: no server answers on it
            log.info("admin_stale_socket_removed", path=self.path)
        except FileNotFoundError:
            pass
        self._ensure_parent()
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        try:
            await sock.bind(self.path)
            # After bind, before listen: nobody can connect yet, so the mode is right before anyone tries.
            os.chmod(self.path, self.mode)
            sock.listen(min(self.max_clients * 2, 1024))
        except OSError as exc:
            sock.close()
            raise AdminSocketError(f"cannot listen on {self.path}: {exc.strerror or exc}") from None
        self._inode = os.stat(self.path).st_ino
        return sock

    def _unlink_if_ours(self) -> None:
        try:
            if self._inode is not None and os.stat(self.path).st_ino == self._inode:
                os.unlink(self.path)
        except OSError:
            pass
        self._inode = None

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on the socket and serve clients until cancelled; ``started()`` once connections are taken."""
        sock = await self._bind()
        listener = trio.SocketListener(sock)
        log.info("admin_listening", path=self.path, mode=f"0o{self.mode:o}")
        try:
            async with trio.open_nursery() as nursery:
                task_status.started()
                while True:
                    try:
                        stream = await listener.accept()
                    except OSError as exc:
                        if exc.errno in ACCEPT_TRANSIENT:
                            log.warning("admin_accept_failed", error=os.strerror(exc.errno or 0))
                            await trio.sleep(ACCEPT_RETRY_S)
                            continue
                        raise
                    if self._clients >= self.max_clients:
                        await self._refuse(stream)
                        continue
                    self._clients += 1
                    nursery.start_soon(self._serve_client, stream)
        finally:
            with trio.CancelScope(shield=True):
                await listener.aclose()
            self._unlink_if_ours()

    run = serve  # the supervisor starts actors through run(task_status=...)

    async def _refuse(self, stream: trio.SocketStream) -> None:
        log.warning("admin_too_many_clients", max_clients=self.max_clients)
        with trio.move_on_after(_REJECT_SEND_S):
            try:
                await stream.send_all(
                    encode_answer(ok=False, error=f"too many clients (max {self.max_clients})")
                )
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        with trio.CancelScope(shield=True):
            await stream.aclose()

    async def _read_line(self, stream: trio.SocketStream, buffer: bytearray) -> bytes | object:
        while True:
            end = buffer.find(b"\n")
            if end >= 0:
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                if len(line) > self.max_line_bytes:
                    raise _LineTooLong
                return line
            if len(buffer) > self.max_line_bytes:
                raise _LineTooLong
            data = await stream.receive_some(min(65536, self.max_line_bytes + 1))
            if not data:
                if buffer:  # a last request without its newline (printf 'health' | socat ...)
                    line = bytes(buffer)
                    buffer.clear()
                    return line
                return _EOF
            buffer += data

    async def _send(self, stream: trio.SocketStream, data: bytes) -> bool:
        """Send within the client deadline; False if the client would not take it (then drop the client)."""
        with trio.move_on_after(self.client_timeout_s):
            await stream.send_all(data)
            return True
        log.info("admin_client_not_reading", timeout_s=self.client_timeout_s)
        return False

    async def _serve_client(self, stream: trio.SocketStream) -> None:
        buffer = bytearray()
        try:
            while True:
                line: bytes | object = _TIMED_OUT
                with trio.move_on_after(self.client_timeout_s):
                    line = await self._read_line(stream, buffer)
                if line is _TIMED_OUT:
                    log.debug("admin_client_idle", timeout_s=self.client_timeout_s)
                    return
                if line is _EOF:
                    return
                assert isinstance(line, bytes)
                if not line.strip():
                    continue
                if not await self._send(stream, await self.answer(line)):
                    return
        except _LineTooLong:
            log.info("admin_line_too_long", max_line_bytes=self.max_line_bytes)
            error = f"request line too long (max {self.max_line_bytes} bytes); closing"
            await self._send(stream, encode_answer(ok=False, error=error))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went away mid-answer: nothing to tell it
        except Exception:
            # One connection's bug must not take the server (and every other client) down with it.
            log.exception("admin_connection_failed")
        finally:
            self._clients -= 1
            with trio.CancelScope(shield=True):
                await stream.aclose()
