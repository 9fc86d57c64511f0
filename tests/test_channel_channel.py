"""The tail of the pipeline (docs/netty.md §5.4) and what every channel has, over loopback TCP."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from hanet import (
    ChannelClosedError,
    ChannelConfig,
    ChannelHandler,
    ChannelInboundHandler,
    HandlerContext,
    Server,
    StreamChannel,
    connect,
    run_channel,
    serve,
    serve_on,
)
from hanet.testing import EmbeddedChannel


def init_with(*factories: Callable[[], ChannelHandler]) -> Callable[[StreamChannel], None]:
    def init(channel: StreamChannel) -> None:
        for factory in factories:
            channel.pipeline.add_last(factory())

    return init


class Raise(ChannelInboundHandler):
    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        raise ValueError(f"cannot parse {bytes(msg)!r}")


class RaiseInCatch(ChannelInboundHandler):
    def __init__(self) -> None:
        self.calls = 0

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        self.calls += 1
        raise RuntimeError("broken exception handler")


def test_throw_in_exception_caught_is_logged_once_and_not_refired(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """testThrowInExceptionCaught: the handler runs once; nothing reaches the tail."""
    catcher = RaiseInCatch()
    ch = EmbeddedChannel(Raise(), catcher)
    ch.write_inbound(b"x")  # nothing raised: the exception never reached the tail
    assert catcher.calls == 1
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "RaiseInCatch.exception_caught raised" in record.getMessage()
    assert "broken exception handler" in record.getMessage()
    assert ch.is_open


def test_throw_in_exception_caught_after_being_invoked_from_exception_caught() -> None:
    class Forward(ChannelInboundHandler):
        def __init__(self) -> None:
            self.calls = 0

        def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
            self.calls += 1
            ctx.fire_exception_caught(exc)

    first, catcher = Forward(), RaiseInCatch()
    ch = EmbeddedChannel(Raise(), first, catcher)
    ch.write_inbound(b"x")
    assert first.calls == 1 and catcher.calls == 1


def test_tail_receives_the_very_same_exception() -> None:
    ch = EmbeddedChannel()
    exc = KeyError("same")
    ch.pipeline.fire_exception_caught(exc)
    with pytest.raises(KeyError) as info:
        ch.check_exception()
    assert info.value is exc


def test_handler_raising_gets_its_own_exception_caught_first() -> None:
    seen: list[str] = []

    class RaiseAndCatch(ChannelInboundHandler):
        def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
            raise ValueError("mine")

        def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
            seen.append(f"self:{exc}")

    ch = EmbeddedChannel(RaiseAndCatch())
    ch.write_inbound(b"x")
    assert seen == ["self:mine"]


# -- over loopback TCP ----------------------------------------------------------------------------


async def start_server(nursery: trio.Nursery, init: Callable[[StreamChannel], None]) -> Server:
    server: Server = await nursery.start(functools.partial(serve, init, 0, host="127.0.0.1"))
    return server


class Collect(ChannelInboundHandler):
    def __init__(self, into: list[bytes]) -> None:
        self.into = into

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        self.into.append(bytes(msg))


async def test_unhandled_message_is_logged_at_debug_and_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="hanet")
    a, b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel: StreamChannel = await nursery.start(
            run_channel, a, init_with(ChannelInboundHandler)
        )
        await b.send_all(b"nobody wants this")
        await trio.testing.wait_all_tasks_blocked()
        assert channel.is_open
        await channel.close()
    [record] = [r for r in caplog.records if "discarded" in r.getMessage()]
    assert record.levelno == logging.DEBUG
    assert "nobody wants this" in record.getMessage()
    assert "ChannelInboundHandler#0" in record.getMessage()  # the pipeline's names
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_unhandled_exception_warns_with_channel_and_peer_then_closes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    closed = trio.Event()

    class Closed(ChannelInboundHandler):
        def channel_inactive(self, ctx: HandlerContext) -> None:
            closed.set()

    async with trio.open_nursery() as nursery:
        server = await start_server(nursery, init_with(Raise, Closed))
        client: StreamChannel = await nursery.start(connect, "127.0.0.1", server.port, init_with())
        client_port = client.local_address[1]  # type: ignore[index]
        await client.pipeline.write_and_flush(b"garbage")
        with trio.fail_after(5):
            await closed.wait()
            await client.wait_closed()
        assert server.statistics().connections_open == 0
        assert server.statistics().connections_failed == 0  # a closed connection is no failure
        nursery.cancel_scope.cancel()
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    message = record.getMessage()
    assert f"127.0.0.1:{client_port}" in message  # the peer
    assert "channel #" in message
    assert "cannot parse b'garbage'" in message


async def test_addresses_and_str() -> None:
    async with trio.open_nursery() as nursery:
        server = await start_server(nursery, init_with())
        assert server.addresses == [("127.0.0.1", server.port)]
        client: StreamChannel = await nursery.start(connect, "127.0.0.1", server.port, init_with())
        assert client.remote_address == ("127.0.0.1", server.port)
        local = client.local_address
        assert isinstance(local, tuple) and local[0] == "127.0.0.1"
        assert f"127.0.0.1:{server.port}" in str(client)
        assert f"peer=('127.0.0.1', {server.port})" in repr(client)
        await client.close()
        nursery.cancel_scope.cancel()


async def test_no_read_after_close_over_tcp() -> None:
    """Bytes already in the socket must not reach a pipeline whose channel closed."""
    reads: list[bytes] = []
    done = trio.Event()

    class CloseOnFirst(ChannelInboundHandler):
        def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
            reads.append(bytes(msg))
            ctx.close()

        def channel_inactive(self, ctx: HandlerContext) -> None:
            done.set()

    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        client = await trio.open_tcp_stream("127.0.0.1", port)
        await client.send_all(b"0123456789" * 100)
        server_stream = await listeners[0].accept()
        await trio.sleep(0.05)  # let every byte arrive in the server's socket
        nursery.start_soon(
            functools.partial(
                run_channel,
                server_stream,
                init_with(CloseOnFirst),
                config=ChannelConfig(read_size=10),
            )
        )
        with trio.fail_after(5):
            await done.wait()
        await client.aclose()
        await listeners[0].aclose()
    assert reads == [b"0123456789"]


async def test_server_keeps_serving_when_a_connection_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0

    def init(channel: StreamChannel) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("initializer bug")
        channel.pipeline.add_last(Echo())

    class Echo(ChannelInboundHandler):
        def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
            ctx.write_and_flush(msg)

    async with trio.open_nursery() as nursery:
        server = await start_server(nursery, init)
        first = await trio.open_tcp_stream("127.0.0.1", server.port)
        with trio.fail_after(5):
            assert await first.receive_some() == b""  # closed by the server
        second = await trio.open_tcp_stream("127.0.0.1", server.port)
        await second.send_all(b"still here")
        with trio.fail_after(5):
            assert await second.receive_some() == b"still here"
        await trio.testing.wait_all_tasks_blocked()  # the server's writer counts after send_all
        stats = server.statistics()
        assert stats.connections_accepted == 2
        assert stats.connections_failed == 1
        assert stats.connections_open == 1
        assert stats.bytes_read == stats.bytes_written == 10
        assert len(server.channels) == 1
        await first.aclose()
        await second.aclose()
        nursery.cancel_scope.cancel()
    assert "initializer bug" in caplog.text


async def test_gathering_writes_survive_partial_sends() -> None:
    """Many messages flushed together leave in few sendmsg calls; a slow reader forces
    partial sends that cut messages in two, and every byte still arrives in order."""
    parts = [bytes([i % 251]) * (1 + (i * 7919) % 20_000) for i in range(600)]
    expected = b"".join(parts)
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        client: StreamChannel = await nursery.start(connect, "127.0.0.1", port, init_with())
        peer = await listeners[0].accept()
        futures = [client.pipeline.write(p) for p in parts]
        client.pipeline.flush()
        received = bytearray()
        while len(received) < len(expected):
            await trio.sleep(0.001)  # a slow reader: the socket buffers fill up
            chunk = await peer.receive_some(65536)
            assert chunk
            received += chunk
        await futures[-1]
        assert all(f.succeeded() for f in futures)
        assert bytes(received) == expected
        stats = client.statistics()
        assert stats.bytes_written == len(expected)
        assert stats.sends < len(parts) // 4  # gathered, not one call per message
        assert stats.queued_bytes == 0
        await client.close()
        await peer.aclose()
        await listeners[0].aclose()


async def test_send_to_a_vanished_peer_fails_the_writes() -> None:
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        client: StreamChannel = await nursery.start(connect, "127.0.0.1", port, init_with())
        peer = await listeners[0].accept()
        peer.socket.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
        await peer.aclose()  # RST
        await listeners[0].aclose()
        with trio.fail_after(5):
            while client.is_open:
                try:
                    await client.pipeline.write_and_flush(b"x" * 65536)
                except ChannelClosedError:
                    break
            await client.wait_closed()
        with pytest.raises(ChannelClosedError):
            await client.pipeline.write_and_flush(b"late")
    assert client.close_reason is not None
    assert "connection lost" in client.close_reason or "peer closed" in client.close_reason


async def test_tls_echo_over_ssl_streams() -> None:
    """Any trio stream: TLS on both ends (trustme certificates), addresses from the socket."""
    import ssl

    import trustme

    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)

    class Echo(ChannelInboundHandler):
        def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
            ctx.write_and_flush(msg)

    got: list[bytes] = []
    all_back = trio.Event()

    class Until(Collect):
        def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
            super().channel_read(ctx, msg)
            if b"".join(got) == b"secret 0secret 1secret 2":
                all_back.set()

    async with trio.open_nursery() as nursery:
        tcp = await trio.open_tcp_listeners(0, host="127.0.0.1")
        listeners = [trio.SSLListener(t, server_ctx) for t in tcp]
        server: Server = await nursery.start(serve_on, init_with(Echo), listeners)
        assert server.addresses == [("127.0.0.1", tcp[0].socket.getsockname()[1])]
        stream = await trio.open_ssl_over_tcp_stream(
            "127.0.0.1", server.port, ssl_context=client_ctx
        )
        client: StreamChannel = await nursery.start(
            run_channel, stream, init_with(lambda: Until(got))
        )
        assert client.remote_address == ("127.0.0.1", server.port)
        for i in range(3):
            await client.write_and_flush(b"secret %d" % i)
        with trio.fail_after(5):
            await all_back.wait()
        await client.close()
        nursery.cancel_scope.cancel()
