"""hanet.testing's fault injection: relay over memory streams (virtual time), FaultProxy over
loopback TCP."""

from __future__ import annotations

from functools import partial

import trio
import trio.testing

from hanet.testing import FaultProxy, Faults, relay


async def _linked(
    nursery: trio.Nursery, a_to_b: Faults, b_to_a: Faults
) -> tuple[trio.abc.Stream, trio.abc.Stream]:
    """Two stream ends, ``a`` and ``b``, with a relay between them."""
    a, a_inner = trio.testing.memory_stream_pair()
    b_inner, b = trio.testing.memory_stream_pair()
    nursery.start_soon(relay, a_inner, b_inner, a_to_b, b_to_a)
    return a, b


async def _read(stream: trio.abc.Stream, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = await stream.receive_some(n - len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


async def test_bytes_pass_unchanged_both_ways(autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        a, b = await _linked(nursery, Faults(), Faults())
        await a.send_all(b"hello")
        assert await _read(b, 5) == b"hello"
        await b.send_all(b"back")
        assert await _read(a, 4) == b"back"
        nursery.cancel_scope.cancel()


async def test_a_flip_hits_its_offset_once(autojump_clock: trio.testing.MockClock) -> None:
    faults = Faults()
    faults.flip(6, 0x01)
    async with trio.open_nursery() as nursery:
        a, b = await _linked(nursery, faults, Faults())
        await a.send_all(b"abc")
        assert await _read(b, 3) == b"abc"
        await a.send_all(b"defghi")
        assert await _read(b, 6) == b"def" + bytes([ord("g") ^ 1]) + b"hi"
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:  # a new connection: the flip is used up
        a, b = await _linked(nursery, faults, Faults())
        await a.send_all(b"abcdefghi")
        assert await _read(b, 9) == b"abcdefghi"
        nursery.cancel_scope.cancel()


async def test_black_hole_drops_without_closing(autojump_clock: trio.testing.MockClock) -> None:
    faults = Faults(black_hole=True)
    async with trio.open_nursery() as nursery:
        a, b = await _linked(nursery, faults, Faults())
        await a.send_all(b"lost")
        with trio.move_on_after(30) as waited:
            await b.receive_some(10)
        assert waited.cancelled_caught  # nothing came, and the stream did not close
        faults.black_hole = False
        await a.send_all(b"found")
        assert await _read(b, 5) == b"found"
        nursery.cancel_scope.cancel()


async def test_delay_and_throttle_take_virtual_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        a, b = await _linked(nursery, Faults(delay=2.0), Faults(bytes_per_second=100))
        start = trio.current_time()
        await a.send_all(b"x")
        await _read(b, 1)
        assert trio.current_time() - start >= 2.0
        start = trio.current_time()
        await b.send_all(b"y" * 500)
        assert len(await _read(a, 500)) == 500
        assert trio.current_time() - start >= 5.0
        nursery.cancel_scope.cancel()


async def test_one_side_closing_closes_the_other(autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        a, b = await _linked(nursery, Faults(), Faults())
        await a.aclose()
        assert await b.receive_some(10) == b""


async def _echo(stream: trio.SocketStream) -> None:
    try:
        async for chunk in stream:
            await stream.send_all(chunk)
    except trio.BrokenResourceError:
        pass


async def test_proxy_relays_cuts_and_refuses_over_tcp() -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, _echo, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        proxy = FaultProxy(("127.0.0.1", port))
        address = await nursery.start(proxy.run)
        with trio.fail_after(10):
            client = await trio.open_tcp_stream(*address)
            await client.send_all(b"ping")
            assert await _read(client, 4) == b"ping"
            assert proxy.open_connections == 1
            proxy.cut()
            assert await client.receive_some(10) == b""
            proxy.refuse = True
            refused = await trio.open_tcp_stream(*address)
            assert await refused.receive_some(10) == b""
            proxy.heal()
            again = await trio.open_tcp_stream(*address)
            await again.send_all(b"pong")
            assert await _read(again, 4) == b"pong"
        with trio.fail_after(5):  # the counters move right after each send returns
            while proxy.statistics().forwarded < 16:  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert proxy.statistics().connections == 2
        nursery.cancel_scope.cancel()
