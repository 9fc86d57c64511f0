"""A close delivers what was flushed before it, as in Netty: ``ctx.write_and_flush(reply);
ctx.close()`` sends the reply, on a real socket as on an EmbeddedChannel."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import trio
import trio.testing

from hanet import (
    ChannelClosedError,
    ChannelConfig,
    ChannelInboundHandler,
    HandlerContext,
    StreamChannel,
    WriteFuture,
    run_channel,
    serve,
)
from hanet.testing import EmbeddedChannel


class AnswerThenClose(ChannelInboundHandler):
    """Answers the first read with ``size`` bytes, then closes at once; keeps the futures."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.futures: list[WriteFuture] = []
        self.late: WriteFuture | None = None

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if self.futures:
            return
        self.futures.append(ctx.write_and_flush(b"A" * self.size))
        ctx.write(b"never flushed")  # written, not flushed: dropped by the close
        ctx.close("answered")
        self.late = ctx.write_and_flush(b"after the close")


@pytest.mark.parametrize("size", [5, 8 * 1024 * 1024])
async def test_a_reply_written_before_close_reaches_a_real_peer(size: int) -> None:
    handler = AnswerThenClose(size)

    def init(channel: StreamChannel) -> None:
        channel.pipeline.add_last(handler)

    async with trio.open_nursery() as nursery:
        server = await nursery.start(functools.partial(serve, init, 0, host="127.0.0.1"))
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        await stream.send_all(b"ask")
        received = bytearray()
        with trio.fail_after(10):
            while chunk := await stream.receive_some(1 << 20):
                received += chunk
        assert received == b"A" * size  # then EOF: the close did happen
        await stream.aclose()
        nursery.cancel_scope.cancel()
    assert handler.futures[0].done() and handler.futures[0].exception() is None
    assert handler.late is not None
    assert isinstance(handler.late.exception(), ChannelClosedError)


def test_the_same_reply_is_what_an_embedded_channel_shows() -> None:
    handler = AnswerThenClose(5)
    channel = EmbeddedChannel(handler)
    channel.write_inbound(b"ask")
    assert channel.read_outbound() == b"AAAAA"
    assert channel.read_outbound() is None
    assert not channel.is_active


async def test_a_peer_that_never_reads_is_dropped_after_the_close_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    left, right = trio.testing.lockstep_stream_pair()
    handler = AnswerThenClose(64 * 1024)

    def init(channel: StreamChannel) -> None:
        channel.pipeline.add_last(handler)

    config = ChannelConfig(close_timeout=3.0)
    async with trio.open_nursery() as nursery:
        channel: StreamChannel = await nursery.start(
            functools.partial(run_channel, left, init, config=config)
        )
        await right.send_all(b"ask")  # the peer then never reads
        start = trio.current_time()
        with trio.fail_after(60):
            await channel.wait_closed()
        assert trio.current_time() - start == pytest.approx(3.0, abs=0.01)
    assert isinstance(handler.futures[0].exception(), ChannelClosedError)


async def test_a_close_with_nothing_flushed_is_immediate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    left, _right = trio.testing.lockstep_stream_pair()

    def init(channel: StreamChannel) -> None:
        pass

    async with trio.open_nursery() as nursery:
        channel: StreamChannel = await nursery.start(functools.partial(run_channel, left, init))
        start = trio.current_time()
        await channel.close("done")
        assert trio.current_time() == start
        assert channel.close_reason == "done"
