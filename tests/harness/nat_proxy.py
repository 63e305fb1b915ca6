"""A NAT in front of one peer, for the fault it is known for: flows it forgets while both ends still hold them.

A NAT gateway or load balancer drops the state of a flow it considers idle (AWS's NAT gateway after 350 s)
without telling either end. From then on the client's segments go nowhere: no answer, no FIN, no RST; its
writes fill its socket buffers and then block, its reads wait forever. New connections are translated as
usual. ``expire_flows()`` does that to every connection open now; the proxy otherwise forwards bytes both
ways unchanged. It only listens on loopback; every socket it holds goes when ``serve`` is cancelled.

(``FaultProxy``'s blackhole holds every connection, new ones included: a peer that is unreachable. This is
the other case: the peer is there, the connections to it are dead, and only new ones reach it.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import trio


@dataclass(eq=False)
class _Flow:
    client: trio.SocketStream
    upstream: trio.SocketStream
    expired: trio.Event = field(default_factory=trio.Event)


class NatProxy:
    def __init__(self, target_host: str, target_port: int, *, host: str = "127.0.0.1") -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the NAT proxy only listens on loopback")
        self.target = (target_host, target_port)
        self.host = host
        self.port = 0
        self.accepted = 0
        self.expired = 0
        self._flows: set[_Flow] = set()

    def expire_flows(self) -> int:
        """Forget every flow open now: they stay open and carry nothing more, either way. Returns how many."""
        flows = [flow for flow in self._flows if not flow.expired.is_set()]
        for flow in flows:
            flow.expired.set()
        self.expired += len(flows)
        return len(flows)

    @property
    def live_flows(self) -> int:
        return sum(1 for flow in self._flows if not flow.expired.is_set())

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(self.port)
            await trio.serve_listeners(self._handle, listeners, handler_nursery=nursery)

    async def _handle(self, client: trio.SocketStream) -> None:
        self.accepted += 1
        try:
            upstream = await trio.open_tcp_stream(*self.target)
        except OSError:
            await client.aclose()
            return
        flow = _Flow(client, upstream)
        self._flows.add(flow)
        try:
            async with client, upstream, trio.open_nursery() as nursery:
                nursery.start_soon(self._pump, flow, client, upstream, nursery.cancel_scope)
                nursery.start_soon(self._pump, flow, upstream, client, nursery.cancel_scope)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            self._flows.discard(flow)

    async def _pump(
        self, flow: _Flow, src: trio.SocketStream, dst: trio.SocketStream, scope: trio.CancelScope
    ) -> None:
        try:
            while not flow.expired.is_set():
                data = await src.receive_some(65536)
                if not data:
                    break
                if flow.expired.is_set():
                    break  # forgotten while this chunk was on its way: it goes nowhere
                await dst.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            scope.cancel()
            return
        if flow.expired.is_set():
            await trio.sleep_forever()  # read nothing more, write nothing, close nothing
        scope.cancel()
