"""Fixtures of the daemon's top-level modules' tests: an admin server on a real Unix socket and its handlers.
(Short socket directories and log capture are shared by the whole suite: tests/conftest.py.)"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from daemon.runtime.admin.protocol import AdminError, expect_args
from daemon.runtime.admin.server import AdminServer


class Calls:
    """What the test handlers saw, so a test can check the arguments the server passed."""

    def __init__(self) -> None:
        self.args: list[tuple[str, list[str]]] = []


def make_handlers(calls: Calls) -> dict[str, Any]:
    async def health(args: list[str]) -> dict[str, Any]:
        """liveness: the daemon's main loop answers"""
        calls.args.append(("health", args))
        expect_args("health", args)
        return {"alive": True}

    async def match(args: list[str]) -> dict[str, Any]:
        """one match's state: match ID"""
        calls.args.append(("match", args))
        (match_id,) = expect_args("match", args, "ID")
        if match_id != "71344":
            raise AdminError(f"match {match_id} is not active here")
        return {"matchId": match_id, "phase": "2nd Innings"}

    async def crash(args: list[str]) -> None:
        """a handler with a bug"""
        raise RuntimeError("bug in a handler")

    async def unserialisable(args: list[str]) -> object:
        return object()

    async def big(args: list[str]) -> str:
        """a large answer (256 KiB), to fill a client's socket buffer"""
        return "x" * 262144

    async def slow(args: list[str]) -> str:
        await trio.sleep(0.05)
        return "done"

    return {
        "health": health,
        "match": match,
        "crash": crash,
        "unserialisable": unserialisable,
        "big": big,
        "slow": slow,
    }


class Client:
    """A raw protocol client on a trio Unix stream: send lines, read answer lines."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    @classmethod
    async def connect(cls, path: Path | str) -> Client:
        return cls(await trio.open_unix_socket(str(path)))

    async def send(self, data: bytes | str) -> None:
        await self.stream.send_all(data.encode() if isinstance(data, str) else data)

    async def read_line(self) -> bytes | None:
        """The next answer line, or None at EOF."""
        with trio.fail_after(10):
            while b"\n" not in self.buffer:
                try:
                    chunk = await self.stream.receive_some(65536)
                except trio.BrokenResourceError:
                    chunk = b""
                if not chunk:
                    return None
                self.buffer += chunk
        end = self.buffer.index(b"\n")
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 1]
        return line

    async def ask(self, line: str) -> dict[str, Any]:
        await self.send(line + "\n")
        answer = await self.read_line()
        assert answer is not None, "server closed the connection instead of answering"
        decoded: dict[str, Any] = json.loads(answer)
        return decoded

    async def aclose(self) -> None:
        await self.stream.aclose()


@pytest.fixture
async def admin(sock_dir: Path, log_stream: io.StringIO) -> AsyncIterator[tuple[AdminServer, Path, Calls]]:
    """An AdminServer on a real Unix socket with the test handlers and short deadlines (logs to a buffer)."""
    calls = Calls()
    path = sock_dir / "admin.sock"
    server = AdminServer(
        str(path), make_handlers(calls), max_line_bytes=1024, client_timeout_s=0.5, max_clients=4
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield server, path, calls
        nursery.cancel_scope.cancel()
