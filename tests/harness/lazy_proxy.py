"""A ``FaultProxy`` that opens its upstream connection only when bytes may flow.

The stock proxy connects upstream as soon as a client connects, even while it is blackholing. In front of
moto's *single-threaded* server that is fatal for a test: moto accepts the held connection and waits for a
request that never comes, so every other client of that server (a second daemon instance, the test's own
checks) hangs with it. Real DynamoDB has no such single thread. This subclass holds a new connection on the
client side until the blackhole lifts (or the client gives up), then connects upstream and forwards as usual,
so a blackhole cuts off only the clients behind the proxy.

Nothing here is imported by production code.
"""

from __future__ import annotations

import trio

from tests.harness.fault_proxy import FaultProxy


class LazyFaultProxy(FaultProxy):
    async def _handle(self, client: trio.SocketStream) -> None:
        if self.faults.blackhole and not self.faults.refuse:
            self._streams.add(client)  # reset() reaches held connections too
            try:
                while self.faults.blackhole and not self.faults.refuse:
                    await self._changed.wait()
            finally:
                self._streams.discard(client)
        await super()._handle(client)
