"""A small TCP fault proxy: put it between the daemon and DynamoDB, SportMonks or APNs.

The daemon is pointed at the proxy's port instead of the real peer; nothing in the daemon's code paths knows
it is there. The proxy forwards bytes both ways and, on command, degrades the link:

- ``latency_s``: every chunk waits this long before it is forwarded (each direction);
- ``bandwidth_bps``: chunks are paced to this many bytes per second (each direction);
- ``blackhole``: connections stay open but nothing is forwarded (the peer looks hung: the worst case for
  timeouts), and new connections are accepted and held;
- ``refuse``: new connections are closed at once (the peer looks down);
- ``reset()``: every open connection is closed with a TCP RST (SO_LINGER 0), as a crashed peer or a middlebox
  would.

It is trio-native (``serve`` takes a ``task_status`` and reports its port), bounded (``max_connections``), and
only ever listens on loopback.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Any

import trio


@dataclass
class Faults:
    latency_s: float = 0.0
    bandwidth_bps: float | None = None
    blackhole: bool = False
    refuse: bool = False


class FaultProxy:
    def __init__(
        self, target_host: str, target_port: int, *, host: str = "127.0.0.1", max_connections: int = 512
    ) -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the fault proxy only listens on loopback")
        self.target = (target_host, target_port)
        self.host = host
        self.port = 0
        self.faults = Faults()
        self.connections = 0
        self.accepted = 0
        self._max = max_connections
        self._streams: set[trio.SocketStream] = set()
        self._changed = trio.Event()

    # ------------------------------------------------------------------ control
    def set(self, **faults: Any) -> None:
        for name, value in faults.items():
            if not hasattr(self.faults, name):
                raise ValueError(
                    f"unknown fault {name!r}; known: latency_s, bandwidth_bps, blackhole, refuse"
                )
            setattr(self.faults, name, value)
        self._changed.set()
        self._changed = trio.Event()

    def clear(self) -> None:
        self.set(latency_s=0.0, bandwidth_bps=None, blackhole=False, refuse=False)

    def reset(self) -> int:
        """Close every open connection with RST; returns how many were reset."""
        n = 0
        for stream in list(self._streams):
            try:
                stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                stream.socket.close()
                n += 1
            except OSError:
                pass
        self._streams.clear()
        return n

    # ------------------------------------------------------------------ serving
    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(self.port)
            await trio.serve_listeners(self._handle, listeners, handler_nursery=nursery)

    async def _handle(self, client: trio.SocketStream) -> None:
        self.accepted += 1
        if self.faults.refuse or self.connections >= self._max:
            await client.aclose()
            return
        try:
            upstream = await trio.open_tcp_stream(*self.target)
        except OSError:
            await client.aclose()
            return
        self.connections += 1
        self._streams.update((client, upstream))
        try:
            async with client, upstream, trio.open_nursery() as nursery:
                nursery.start_soon(self._pump, client, upstream, nursery.cancel_scope)
                nursery.start_soon(self._pump, upstream, client, nursery.cancel_scope)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            self.connections -= 1
            self._streams.discard(client)
            self._streams.discard(upstream)

    async def _pump(self, src: trio.SocketStream, dst: trio.SocketStream, scope: trio.CancelScope) -> None:
        try:
            while True:
                data = await src.receive_some(65536)
                if not data:
                    break
                while self.faults.blackhole:
                    await self._changed.wait()  # hold the bytes until the blackhole lifts (or the link dies)
                if self.faults.latency_s:
                    await trio.sleep(self.faults.latency_s)
                if self.faults.bandwidth_bps:
                    await trio.sleep(len(data) / self.faults.bandwidth_bps)
                await dst.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            scope.cancel()
