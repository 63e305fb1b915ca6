"""The NAT proxy against a real echo server on loopback: flows it forgets stay open and carry nothing."""

from __future__ import annotations

from functools import partial

import trio

from tests.harness.nat_proxy import NatProxy


async def _echo(stream: trio.SocketStream) -> None:
    try:
        async for data in stream:
            await stream.send_all(data)
    except trio.BrokenResourceError:
        pass


async def _setup(nursery: trio.Nursery) -> NatProxy:
    listeners = await nursery.start(partial(trio.serve_tcp, _echo, 0, host="127.0.0.1"))
    proxy = NatProxy("127.0.0.1", listeners[0].socket.getsockname()[1])
    await nursery.start(proxy.serve)
    return proxy


async def test_a_forgotten_flow_stays_open_and_silent_while_new_connections_get_through(
    nursery: trio.Nursery,
) -> None:
    proxy = await _setup(nursery)
    old = await trio.open_tcp_stream("127.0.0.1", proxy.port)
    await old.send_all(b"hello")
    assert await old.receive_some(100) == b"hello"
    assert proxy.expire_flows() == 1 and proxy.live_flows == 0
    await old.send_all(b"anyone?")
    with trio.move_on_after(0.3) as silent:
        await old.receive_some(100)  # neither an echo nor an EOF: nothing at all
    assert silent.cancelled_caught
    new = await trio.open_tcp_stream("127.0.0.1", proxy.port)
    await new.send_all(b"fresh")
    with trio.fail_after(5):
        assert await new.receive_some(100) == b"fresh"
    assert proxy.live_flows == 1 and proxy.accepted == 2
    await old.aclose()
    await new.aclose()


async def test_writes_on_a_forgotten_flow_fill_the_buffers_and_then_block(nursery: trio.Nursery) -> None:
    proxy = await _setup(nursery)
    stream = await trio.open_tcp_stream("127.0.0.1", proxy.port)
    await stream.send_all(b"x")
    assert await stream.receive_some(100) == b"x"
    proxy.expire_flows()
    chunk = b"y" * 65536
    written = 0
    with trio.move_on_after(1.0) as blocked:
        while written < 512 * 65536:  # 32 MiB: far beyond any socket buffer on loopback
            await stream.send_all(chunk)
            written += len(chunk)
    assert blocked.cancelled_caught, f"{written} bytes went out to a flow nobody reads"
    await trio.aclose_forcefully(stream)
