"""A server's bounds: the connection cap, the idle timeout and the accept back-off on
descriptor exhaustion, on memory listeners and the virtual clock."""

from __future__ import annotations

import errno
import functools
import logging
from typing import Any

import pytest
import trio
import trio.testing

from hanet.boot import (
    ACCEPT_BACKOFF,
    CAPACITY_ERRNOS,
    Server,
    default_max_connections,
    serve_on,
)
from hanet.channel import ChannelInboundHandler, HandlerContext, StreamChannel


class MemoryListener(trio.abc.Listener[trio.abc.Stream]):
    """Hands out the server halves of memory stream pairs; ``fail`` makes the next accepts
    raise an ``OSError`` with that errno."""

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[trio.abc.Stream](100)
        self.fail: list[int] = []

    async def connect(self) -> trio.abc.Stream:
        client, server = trio.testing.memory_stream_pair()
        await self._send.send(server)
        return client

    async def accept(self) -> trio.abc.Stream:
        await trio.lowlevel.checkpoint()
        if self.fail:
            code = self.fail.pop(0)
            raise OSError(code, f"fake {errno.errorcode[code]}")
        return await self._receive.receive()

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


class Echo(ChannelInboundHandler):
    sharable = True

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        ctx.write_and_flush(bytes(msg))


def echo_init(channel: StreamChannel) -> None:
    channel.pipeline.add_last(Echo())


async def start(nursery: trio.Nursery, listener: MemoryListener, **kwargs: Any) -> Server:
    server: Server = await nursery.start(
        functools.partial(serve_on, echo_init, [listener], name="test port", **kwargs)
    )
    return server


async def closed(stream: trio.abc.Stream) -> bool:
    """Whether the server side closed ``stream`` (EOF), reading what is there."""
    try:
        while True:
            data = await stream.receive_some(1024)
            if not data:
                return True
    except trio.BrokenResourceError:
        return True


def test_default_cap_keeps_headroom() -> None:
    assert default_max_connections(1024) == 384
    assert default_max_connections(256) == 96
    assert default_max_connections(65_536) == 32_640
    assert default_max_connections(40) == 8
    assert default_max_connections() >= 8
    assert {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM} == CAPACITY_ERRNOS


async def test_connections_over_the_cap_are_closed_at_once_and_logged_once_per_burst(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    listener = MemoryListener()
    async with trio.open_nursery() as nursery:
        server = await start(nursery, listener, max_connections=3)
        kept = [await listener.connect() for _ in range(3)]
        await trio.sleep(0.1)
        assert server.connections == 3
        extra = [await listener.connect() for _ in range(5)]
        for stream in extra:
            with trio.fail_after(1):
                assert await closed(stream)
        stats = server.statistics()
        assert stats.connections_over_limit == 5
        assert stats.connections_open == 3
        refusals = [r for r in caplog.records if "refusing new connections" in r.message]
        assert len(refusals) == 1
        assert "max_connections 3" in refusals[0].message
        # the kept ones still echo
        await kept[0].send_all(b"ping")
        assert await kept[0].receive_some(4) == b"ping"
        # one goes away: a new one is served, and the end of the burst is logged with its count
        await kept[1].aclose()
        await trio.sleep(0.1)
        again = await listener.connect()
        await again.send_all(b"x")
        with trio.fail_after(1):
            assert await again.receive_some(1) == b"x"
        ended = [r for r in caplog.records if "accepting connections again" in r.message]
        assert len(ended) == 1 and "(5 in" in ended[0].message
        nursery.cancel_scope.cancel()


async def test_closed_connections_release_their_place(
    autojump_clock: trio.testing.MockClock,
) -> None:
    listener = MemoryListener()
    async with trio.open_nursery() as nursery:
        server = await start(nursery, listener, max_connections=2)
        for _ in range(10):
            stream = await listener.connect()
            await stream.aclose()
            await trio.sleep(0.01)
        assert server.connections == 0
        assert server.statistics().connections_over_limit == 0
        nursery.cancel_scope.cancel()


async def test_idle_connections_are_closed_after_the_timeout(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hanet.bootstrap")
    listener = MemoryListener()
    async with trio.open_nursery() as nursery:
        server = await start(nursery, listener, idle_timeout=120.0)
        idle = await listener.connect()
        busy = await listener.connect()
        began = trio.current_time()

        async def chatter() -> None:
            for _ in range(40):  # one byte every 10 s: never 120 s of silence
                await busy.send_all(b"b")
                await trio.sleep(10)

        nursery.start_soon(chatter)
        with trio.fail_after(1000):
            assert await closed(idle)
        waited = trio.current_time() - began
        assert 120.0 <= waited <= 150.0 + 1e-6
        assert server.statistics().connections_idle_closed == 1
        assert any("idle for 120 s" in r.message for r in caplog.records)
        # the chatty one is still there after 300 s
        await trio.sleep(300 - waited)
        assert server.statistics().connections_open == 1
        nursery.cancel_scope.cancel()


async def test_no_idle_timeout_keeps_silent_connections(
    autojump_clock: trio.testing.MockClock,
) -> None:
    listener = MemoryListener()
    async with trio.open_nursery() as nursery:
        server = await start(nursery, listener)
        await listener.connect()
        await trio.sleep(80_000)
        assert server.statistics().connections_open == 1
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("code", sorted(CAPACITY_ERRNOS))
async def test_accept_backs_off_on_capacity_errors_and_resumes(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture, code: int
) -> None:
    listener = MemoryListener()
    listener.fail = [code] * 50
    async with trio.open_nursery() as nursery:
        server = await start(nursery, listener)
        began = trio.current_time()
        stream = await listener.connect()
        await stream.send_all(b"hello")
        with trio.fail_after(100):
            assert await stream.receive_some(5) == b"hello"
        # each failure waited for the back-off: no spinning
        assert trio.current_time() - began >= 50 * ACCEPT_BACKOFF - 1e-6
        assert server.statistics().accept_errors == 50
        failed = [r for r in caplog.records if "accept failed" in r.message]
        assert len(failed) == 1 and failed[0].levelno == logging.ERROR
        assert any("accepting again (50 in" in r.message for r in caplog.records)
        nursery.cancel_scope.cancel()


async def test_other_accept_errors_surface(autojump_clock: trio.testing.MockClock) -> None:
    listener = MemoryListener()
    listener.fail = [errno.EBADF]
    with pytest.raises(BaseExceptionGroup) as caught:
        async with trio.open_nursery() as nursery:
            await start(nursery, listener)
            await trio.sleep(10)
    assert caught.group_contains(OSError)


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="max_connections"):
        Server([], max_connections=0)
    with pytest.raises(ValueError, match="idle_timeout"):
        Server([], idle_timeout=0.0)
