"""The client side of the admin socket protocol (``daemon.runtime.admin.protocol``): send one JSON request
line, read one answer line. Plain blocking sockets: a one-shot client needs no event loop. Used by
``sightscreen ctl`` and ``ctl watch``."""

from __future__ import annotations

import json
import socket
from typing import Any

from daemon.runtime.errors import DaemonRuntimeError

DEFAULT_SOCKET = "/run/sightscreen/admin.sock"
SOCKET_ENV = "SIGHTSCREEN_ADMIN_SOCKET"
EXIT_OK, EXIT_ERROR_ANSWER, EXIT_UNREACHABLE = 0, 1, 2
_MAX_ANSWER_BYTES = 64 * 1024 * 1024  # metrics of a busy daemon are big, but never this big


class Unreachable(DaemonRuntimeError):
    """The daemon could not be asked (no socket, refused, timed out, garbled answer)."""


def request(path: str, cmd: str, args: list[str], *, timeout_s: float = 10.0) -> dict[str, Any]:
    """Send one request and return the decoded answer object; ``Unreachable`` says why not."""
    line = json.dumps({"cmd": cmd, "args": args}).encode() + b"\n"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        try:
            sock.connect(path)
        except FileNotFoundError:
            raise Unreachable(
                f"no admin socket at {path}: is the daemon running? (set --socket or ${SOCKET_ENV})"
            ) from None
        except PermissionError:
            raise Unreachable(
                f"permission denied on {path}: run as the daemon's user or a member of its group"
            ) from None
        except ConnectionRefusedError:
            raise Unreachable(
                f"nothing is listening on {path} (a stale socket from a stopped daemon?)"
            ) from None
        except OSError as exc:
            raise Unreachable(f"cannot connect to {path}: {exc.strerror or exc}") from None
        try:
            sock.sendall(line)
            data = bytearray()
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
                if len(data) > _MAX_ANSWER_BYTES:
                    raise Unreachable("the answer is larger than any the protocol sends")
        except TimeoutError:
            raise Unreachable(f"no answer from {path} within {timeout_s:g} s") from None
        except OSError as exc:
            raise Unreachable(f"connection to {path} failed: {exc.strerror or exc}") from None
    finally:
        sock.close()
    if not data:
        raise Unreachable(f"the daemon closed the connection on {path} without answering")
    try:
        answer = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise Unreachable(f"the answer from {path} is not JSON: {bytes(data[:80])!r}") from None
    if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool):
        raise Unreachable(f"the answer from {path} is not an admin protocol answer")
    return answer
