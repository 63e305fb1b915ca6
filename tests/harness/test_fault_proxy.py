"""The fault proxy against a real echo server on loopback."""

from __future__ import annotations

from functools import partial

import trio

from tests.harness.fault_proxy import FaultProxy


async def _echo(stream: trio.SocketStream) -> None:
    try:
        async for data in stream:
            await stream.send_all(data)
    except trio.BrokenResourceError:
        pass


async def _setup(nursery: trio.Nursery) -> FaultProxy:
    listeners = await nursery.start(partial(trio.serve_tcp, _echo, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    proxy = FaultProxy("127.0.0.1", port)
    await nursery.start(proxy.serve)
    return proxy


async def test_bytes_pass_through_unchanged_when_no_fault_is_set() -> None:
    async with trio.open_nursery() as nursery:
        proxy = await _setup(nursery)
        stream = await trio.open_tcp_stream("127.0.0.1", proxy.port)
        await stream.send_all(b"hello")
        assert await stream.receive_some(100) == b"hello"
        await stream.aclose()
        nursery.cancel_scope.cancel()


async def test_blackhole_holds_bytes_until_it_lifts() -> None:
    async with trio.open_nursery() as nursery:
        proxy = await _setup(nursery)
        stream = await trio.open_tcp_stream("127.0.0.1", proxy.port)
        proxy.set(blackhole=True)
        await stream.send_all(b"ping")
        with trio.move_on_after(0.3) as scope:
            await stream.receive_some(100)
        assert scope.cancelled_caught, "a blackholed link must not deliver"
        proxy.clear()
        with trio.fail_after(5):
            assert await stream.receive_some(100) == b"ping"
        nursery.cancel_scope.cancel()


async def test_reset_breaks_open_connections_and_refuse_closes_new_ones() -> None:
    async with trio.open_nursery() as nursery:
        proxy = await _setup(nursery)
        stream = await trio.open_tcp_stream("127.0.0.1", proxy.port)
        await stream.send_all(b"x")
        assert await stream.receive_some(10) == b"x"
        assert proxy.reset() >= 1
        with trio.fail_after(5):
            try:
                data = await stream.receive_some(10)
                assert data == b""
            except trio.BrokenResourceError:
                pass
        proxy.set(refuse=True)
        other = await trio.open_tcp_stream("127.0.0.1", proxy.port)
        with trio.fail_after(5):
            try:
                assert await other.receive_some(10) == b""
            except trio.BrokenResourceError:
                pass
        nursery.cancel_scope.cancel()


async def test_latency_delays_each_chunk(autojump_clock: trio.abc.Clock) -> None:
    async with trio.open_nursery() as nursery:
        proxy = await _setup(nursery)
        proxy.set(latency_s=30.0)
        stream = await trio.open_tcp_stream("127.0.0.1", proxy.port)
        start = trio.current_time()
        await stream.send_all(b"slow")
        assert await stream.receive_some(10) == b"slow"
        # both directions wait: at least 60 s of (virtual) time passed
        assert trio.current_time() - start >= 60.0
        nursery.cancel_scope.cancel()
