"""ChannelGroup: Netty's DefaultChannelGroup on EmbeddedChannels and on loopback channels."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import trio

from hanet import (
    Channel,
    ChannelClosedError,
    ChannelGroup,
    ChannelGroupError,
    ChannelInboundHandler,
    ChannelOutboundHandler,
    HandlerContext,
    StreamChannel,
    WriteFuture,
    serve,
)
from hanet.testing import EmbeddedChannel


def test_membership_find_and_iteration() -> None:
    group = ChannelGroup("chat")
    a, b = EmbeddedChannel(), EmbeddedChannel()
    assert group.add(a) and group.add(b)
    assert not group.add(a)
    assert len(group) == 2 and a in group and object() not in group
    assert list(group) == [a, b]
    assert group.find(b.id) is b and group.find(-1) is None
    assert repr(group) == "ChannelGroup(name: chat, size: 2)"
    assert group.remove(a.id) and not group.remove(a)
    assert list(group) == [b]
    group.clear()
    assert len(group) == 0 and not group


def test_a_channel_leaves_when_it_closes() -> None:
    group = ChannelGroup()
    a, b = EmbeddedChannel(), EmbeddedChannel()
    group.add(a)
    group.add(b)
    a.close()
    assert list(group) == [b]
    closed = EmbeddedChannel()
    closed.close()
    assert group.add(closed)  # added, and gone again at once: it is closed
    assert closed not in group


def test_write_and_flush_to_all_or_to_the_matching() -> None:
    group = ChannelGroup()
    channels = [EmbeddedChannel() for _ in range(3)]
    for ch in channels:
        group.add(ch)
    future = group.write_and_flush(b"all")
    assert future.succeeded() and len(future) == 3
    assert all(future[ch].succeeded() for ch in channels)
    sender = channels[0]
    group.write_and_flush(b"others", lambda c: c is not sender)
    assert list(sender.outbound_messages) == [b"all"]
    for ch in channels[1:]:
        assert list(ch.outbound_messages) == [b"all", b"others"]


def test_write_then_flush() -> None:
    group = ChannelGroup()
    ch = EmbeddedChannel()
    group.add(ch)
    future = group.write(b"x")
    assert not future.done()
    assert group.flush() is group
    assert future.succeeded() and ch.read_outbound() == b"x"


def test_failures_are_collected_by_channel() -> None:
    class Refuse(ChannelOutboundHandler):
        def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
            raise ValueError("refused")

    group = ChannelGroup()
    good, bad = EmbeddedChannel(), EmbeddedChannel(Refuse())
    group.add(good)
    group.add(bad)
    future = group.write_and_flush(b"x")
    assert future.done() and not future.succeeded()
    assert future.is_partial_success() and future.is_partial_failure()
    error = future.exception()
    assert isinstance(error, ChannelGroupError)
    assert list(error.failures) == [bad]
    assert str(error.failures[bad]) == "refused"
    assert good.read_outbound() == b"x"


def test_close_all_and_stay_closed() -> None:
    group = ChannelGroup(stay_closed=True)
    channels = [EmbeddedChannel() for _ in range(2)]
    for ch in channels:
        group.add(ch)
    future = group.close()
    assert future.succeeded()
    assert len(group) == 0 and not any(ch.is_active for ch in channels)
    late = EmbeddedChannel()
    group.add(late)  # a group that stays closed closes what joins it
    assert not late.is_active and len(group) == 0
    assert ChannelGroup().close().succeeded()  # over no channel: done at once


def test_new_close_future() -> None:
    group = ChannelGroup()
    a, b = EmbeddedChannel(), EmbeddedChannel()
    group.add(a)
    group.add(b)
    future = group.new_close_future()
    a.close()
    assert not future.done()
    b.close()
    assert future.succeeded()


async def test_not_blocking_on_close_over_real_channels() -> None:
    """Netty's DefaultChannelGroupTest (#1183): channels added from channel_active on a real
    server, then closed all together and awaited from a task."""
    group = ChannelGroup()
    joined = trio.Event()

    class Join(ChannelInboundHandler):
        def channel_active(self, ctx: HandlerContext) -> None:
            group.add(ctx.channel)
            if len(group) == 3:
                joined.set()
            ctx.fire_channel_active()

    def init(channel: StreamChannel) -> None:
        channel.pipeline.add_last(Join())

    async with trio.open_nursery() as nursery:
        server = await nursery.start(functools.partial(serve, init, 0, host="127.0.0.1"))
        clients = [await trio.open_tcp_stream("127.0.0.1", server.port) for _ in range(3)]
        with trio.fail_after(10):
            await joined.wait()
            await group.write_and_flush(b"hello")
            for client in clients:
                assert await client.receive_some(5) == b"hello"
            members: list[Channel] = list(group)
            await group.close()
        assert len(group) == 0
        assert all(not ch.is_open for ch in members)
        with trio.fail_after(10):
            for client in clients:
                assert await client.receive_some(5) == b""  # closed by the server
                await client.aclose()
        nursery.cancel_scope.cancel()


async def test_awaiting_a_failed_group_future_raises_the_group_error() -> None:
    class Refuse(ChannelOutboundHandler):
        def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
            future.set_exception(ChannelClosedError("gone"))

    group = ChannelGroup()
    bad = EmbeddedChannel(Refuse())
    group.add(bad)
    group.add(EmbeddedChannel())
    with pytest.raises(ChannelGroupError, match="1 of 2 channels") as info:
        await group.write_and_flush(b"x")
    assert isinstance(info.value.failures[bad], ChannelClosedError)
