"""systemd's notification protocol (sd_notify): READY=1, STATUS=, WATCHDOG=1, STOPPING=1.

This module owns the datagram to ``$NOTIFY_SOCKET`` and the watchdog cadence read from ``$WATCHDOG_USEC``. It
must not decide *when* the daemon is ready or stopping; the supervisor and ``sightscreen run`` do.

Everything here is a no-op when ``NOTIFY_SOCKET`` is unset (a terminal, a container, tests), and a failed
send is logged and swallowed: telling systemd is never worth crashing the daemon for. The socket is
non-blocking, so a notification can never stall the trio loop (a full receive queue drops the message, as
libsystemd's sd_notify would fail it).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

import trio

from daemon.logs import get_logger

log = get_logger("sdnotify")


def _address(raw: str | None) -> str | bytes | None:
    """NOTIFY_SOCKET as ``socket.sendto`` wants it: '@name' is Linux's abstract namespace (a leading NUL)."""
    if not raw:
        return None
    if raw.startswith("@"):
        return b"\0" + raw[1:].encode()
    if raw.startswith("/"):
        return raw
    # systemd also allows vsock:CID:PORT (VMs); this daemon runs on the host or in a container, so such an
    # address is reported once and ignored rather than half-supported.
    log.warning("notify_socket_unsupported", notify_socket=raw)
    return None


def _field(key: str, value: Any) -> str:
    # One KEY=value per line: a newline inside a value would start a bogus assignment.
    text = "1" if value is True else str(value)
    return f"{key.upper()}={text.replace(chr(10), ' ').replace(chr(13), ' ')}"


class SdNotifier:
    """Tells systemd about the daemon's life. Construct once per process; safe to call from trio tasks."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self._address = _address(env.get("NOTIFY_SOCKET"))
        self._watchdog_usec = env.get("WATCHDOG_USEC")
        self._watchdog_pid = env.get("WATCHDOG_PID")
        self._sock: socket.socket | None = None

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def notify(self, **fields: Any) -> bool:
        """Send one message of ``KEY=value`` lines (keys upper-cased, in the order given). True if sent."""
        if self._address is None or not fields:
            return False
        message = "\n".join(_field(k, v) for k, v in fields.items()).encode()
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._sock.setblocking(False)
            self._sock.sendto(message, self._address)
        except OSError as exc:
            log.warning("sd_notify_failed", error=str(exc), fields=",".join(k.upper() for k in fields))
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        """READY=1: every actor is up (``Type=notify`` units count as started only from here)."""
        return self.notify(ready=1, status=status) if status is not None else self.notify(ready=1)

    def status(self, text: str) -> bool:
        """STATUS=: one line shown by ``systemctl status`` (e.g. "3 matches owned")."""
        return self.notify(status=text)

    def watchdog(self) -> bool:
        """WATCHDOG=1: the main loop is alive. Send every ``watchdog_interval()`` seconds."""
        return self.notify(watchdog=1)

    def stopping(self, status: str | None = None) -> bool:
        """STOPPING=1: graceful shutdown has begun (systemd then waits up to TimeoutStopSec)."""
        return self.notify(stopping=1, status=status) if status is not None else self.notify(stopping=1)

    def extend_timeout(self, seconds: float) -> bool:
        """EXTEND_TIMEOUT_USEC=: ask for more time for the current start-up or shutdown phase."""
        return self.notify(extend_timeout_usec=int(seconds * 1_000_000))

    def watchdog_interval(self) -> float | None:
        """Seconds between WATCHDOG=1 pings (half of WATCHDOG_USEC), or None when no watchdog is asked for.

        WATCHDOG_PID, when set, names the process the watchdog is for; another process (a child that
        inherited the environment) must not ping on the daemon's behalf.
        """
        if self._address is None or not self._watchdog_usec:
            return None
        if self._watchdog_pid and self._watchdog_pid.strip() != str(os.getpid()):
            return None
        try:
            usec = int(self._watchdog_usec)
        except ValueError:
            log.warning("watchdog_usec_invalid", value=self._watchdog_usec)
            return None
        return usec / 2 / 1_000_000 if usec > 0 else None

    async def run_watchdog(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Ping the watchdog from the trio loop for as long as the task lives (returns at once if none)."""
        interval = self.watchdog_interval()
        task_status.started()
        if interval is None:
            return
        while True:
            self.watchdog()
            await trio.sleep(interval)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
