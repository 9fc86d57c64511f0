"""A port's budget for unfinished frames (issue 20, item 3), deterministic: decoders in
EmbeddedChannels sharing one MemoryBudget, and a served port over loopback TCP."""

from __future__ import annotations

import logging
import struct

import pytest
import trio
import trio.testing

from hanet.boot import Server, partial_budget, serve
from hanet.channel import (
    DEFAULT_MAX_PARTIAL_BYTES,
    MEMORY_BUDGET,
    ChannelHandler,
    ChannelInboundHandler,
    EmbeddedChannel,
    HandlerContext,
    MemoryBudget,
    StreamChannel,
)
from hanet.handlers import LengthFieldBasedFrameDecoder

KIB = 1024


def frame(size: int, fill: bytes = b"x") -> bytes:
    """A u32-length-prefixed frame of ``size`` payload bytes."""
    return struct.pack(">I", size) + fill * size


def about(held: int, cumulated: int) -> bool:
    """``held`` is what a cumulation of ``cumulated`` bytes takes: its buffer's allocation
    (the bytes, the object's header, and room a growing buffer keeps ahead)."""
    return cumulated <= held <= cumulated + cumulated // 8 + 128


def reading(ch: EmbeddedChannel) -> bool:
    return not ch.reads_held


def is_open(ch: EmbeddedChannel) -> bool:
    return ch.is_open


def connection(budget: MemoryBudget, *handlers: ChannelHandler) -> EmbeddedChannel:
    ch = EmbeddedChannel()
    ch.attributes[MEMORY_BUDGET] = budget
    ch.pipeline.add_last(LengthFieldBasedFrameDecoder(1 << 30, 0, 4, 0, 4))
    for handler in handlers:
        ch.pipeline.add_last(handler)
    return ch


def test_bytes_of_an_unfinished_frame_are_charged_and_given_back_when_it_completes() -> None:
    budget = MemoryBudget(1024 * KIB)
    ch = connection(budget)
    whole = frame(300 * KIB)
    ch.write_inbound(whole[: 100 * KIB])
    assert about(budget.held, 100 * KIB)
    ch.write_inbound(whole[100 * KIB : 250 * KIB])
    assert about(budget.held, 250 * KIB)
    ch.write_inbound(whole[250 * KIB :] + frame(10)[:6])  # the frame, and the start of another
    assert len(ch.read_inbound()) == 300 * KIB
    assert about(budget.held, 6)
    ch.write_inbound(frame(10)[6:])
    assert ch.read_inbound() == b"x" * 10
    assert budget.held == 0
    assert about(budget.statistics().peak, 250 * KIB)


def test_whole_frames_in_one_read_cost_nothing() -> None:
    budget = MemoryBudget(1)
    ch = connection(budget)
    ch.write_inbound(frame(5000) * 20)
    assert len(ch.inbound_messages) == 20
    assert budget.held == 0
    assert budget.statistics().waits == 0
    assert reading(ch)


def test_a_connection_that_would_pass_the_budget_stops_reading_until_there_is_room() -> None:
    budget = MemoryBudget(256 * KIB, reserve=16 * KIB)
    first, second = connection(budget), connection(budget)
    big = frame(400 * KIB)
    first.write_inbound(big[: 200 * KIB])
    assert reading(first)  # under the budget
    second.write_inbound(big[: 100 * KIB])
    assert not reading(second)  # 300 KiB > 256 KiB: it waits
    assert budget.statistics().waiting == 1
    first.write_inbound(big[200 * KIB :])  # the first frame completes: room again
    assert first.read_inbound() is not None
    assert about(budget.held, 100 * KIB)
    assert reading(second)
    assert budget.statistics().waiting == 0


def test_the_wait_is_independent_of_auto_read() -> None:
    """Other handlers turn auto_read off and on for their own back-pressure (the broker port
    does, while a client does not read its answers): that neither ends the budget's wait nor
    is undone by it."""
    budget = MemoryBudget(64 * KIB, reserve=0)
    ch = connection(budget)
    other = connection(budget)
    other.write_inbound(frame(100 * KIB)[: 70 * KIB])
    ch.write_inbound(frame(10)[:5])
    assert not reading(ch)
    ch.auto_read = False  # the application pauses too
    ch.auto_read = True  # and resumes: the budget still holds the reads
    assert not reading(ch)
    ch.auto_read = False
    other.close_nowait()  # 70 KiB given back: the budget lets go
    assert reading(ch)
    assert not ch.auto_read  # left as the application set it


async def test_a_stream_channel_does_not_read_while_held() -> None:
    """A hold taken while a read is handled (as a decoder's budget takes it) stops the reads
    after it until every holder let go."""
    received: list[bytes] = []

    class Collect(ChannelInboundHandler):
        def channel_read(self, ctx: HandlerContext, msg: bytes) -> None:
            received.append(bytes(msg))
            if len(received) == 1:
                ctx.channel.hold_reads("budget")
                ctx.channel.hold_reads("other")

    ours, theirs = trio.testing.memory_stream_pair()
    channel = StreamChannel(ours)
    channel.pipeline.add_last(Collect())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(channel.run)
        await theirs.send_all(b"first")
        await trio.testing.wait_all_tasks_blocked()
        await theirs.send_all(b"second")
        await trio.testing.wait_all_tasks_blocked()
        assert received == [b"first"]
        channel.release_reads("budget")
        await trio.testing.wait_all_tasks_blocked()
        assert received == [b"first"]  # another holder still holds
        channel.release_reads("other")
        await trio.testing.wait_all_tasks_blocked()
        assert received == [b"first", b"second"]
        await channel.close()


def test_small_unfinished_frames_within_the_reserve_never_wait() -> None:
    budget = MemoryBudget(100 * KIB, reserve=8 * KIB)
    hog = connection(budget)
    hog.write_inbound(frame(1 << 20)[: 200 * KIB])
    assert not reading(hog)
    honest = connection(budget)
    for _ in range(50):
        honest.write_inbound(frame(1000)[:500])  # a frame split across two reads
        honest.write_inbound(frame(1000)[500:])
        assert honest.read_inbound() == b"x" * 1000
        assert reading(honest)
    assert budget.statistics().waits == 1


def test_the_longest_holder_is_closed_once_it_held_the_budget_too_long_while_others_wait(
    caplog: pytest.LogCaptureFixture,
) -> None:
    budget = MemoryBudget(256 * KIB, hold_timeout=10.0, reserve=16 * KIB, name="test port")
    old = connection(budget)
    old.write_inbound(frame(1 << 20)[: 200 * KIB])
    old.advance_time(3.0)
    new = connection(budget)
    new.advance_time(3.0)
    new.write_inbound(frame(1 << 20)[: 100 * KIB])
    assert not reading(new)
    with caplog.at_level(logging.WARNING, logger="hanet.budget"):
        new.advance_time(5.0)  # old has held for 8 s: not yet
        assert is_open(old)
        new.advance_time(2.5)  # 10.5 s
        assert not is_open(old)
    assert new.is_open and reading(new)  # room again: it reads
    assert about(budget.held, 100 * KIB)
    assert budget.statistics().evicted == 1
    assert any(
        "test port" in r.getMessage() and "unfinished frame held 2048" in r.getMessage()
        for r in caplog.records
    )


def test_a_holder_that_completes_frames_is_not_closed() -> None:
    """A connection streaming large frames holds part of the next one after each read, but
    completes one every read: its hold starts over each time. The waiting connection, whose
    unfinished frame is now the oldest, is the one closed after the hold timeout."""
    budget = MemoryBudget(256 * KIB, hold_timeout=10.0, reserve=16 * KIB)
    streaming = connection(budget)
    size = 240 * KIB + 4
    data = frame(240 * KIB) * 12
    streaming.write_inbound(data[: 200 * KIB])
    waiting = connection(budget)
    waiting.write_inbound(frame(1 << 20)[: 100 * KIB])
    assert not reading(waiting)
    for i in range(9):
        streaming.write_inbound(data[200 * KIB + i * size : 200 * KIB + (i + 1) * size])
        assert streaming.read_inbound() is not None
        streaming.advance_time(2.0)
        waiting.advance_time(2.0)
    assert streaming.is_open
    assert not waiting.is_open
    assert budget.statistics().evicted == 1


def test_nothing_is_closed_while_nobody_waits() -> None:
    budget = MemoryBudget(256 * KIB, hold_timeout=1.0)
    slow = connection(budget)
    slow.write_inbound(frame(1 << 20)[: 200 * KIB])
    slow.advance_time(3600.0)
    assert slow.is_open
    assert about(budget.held, 200 * KIB)


def test_close_and_removal_give_the_bytes_back() -> None:
    budget = MemoryBudget(1 << 20)
    ch = connection(budget)
    ch.write_inbound(frame(100)[:50])
    assert about(budget.held, 50)
    ch.close_nowait()
    assert budget.held == 0
    ch = connection(budget)
    ch.write_inbound(frame(100)[:50])
    ch.pipeline.remove(LengthFieldBasedFrameDecoder)
    assert budget.held == 0
    assert budget.statistics().holders == 0


def test_a_channel_without_a_budget_holds_what_it_needs() -> None:
    ch = EmbeddedChannel(LengthFieldBasedFrameDecoder(1 << 30, 0, 4, 0, 4))
    ch.write_inbound(frame(1 << 20)[:-1])
    assert reading(ch)


def test_partial_budget_defaults_and_off() -> None:
    default = partial_budget(None)
    assert default is not None and default.limit == DEFAULT_MAX_PARTIAL_BYTES == 64 << 20
    assert partial_budget(0) is None
    with pytest.raises(ValueError):
        partial_budget(-1)
    with pytest.raises(ValueError):
        MemoryBudget(0)


class _Echo(ChannelInboundHandler):
    def channel_read(self, ctx: HandlerContext, msg: bytes) -> None:
        ctx.write_and_flush(struct.pack(">I", len(msg)) + msg)


def _echo_init(channel: StreamChannel) -> None:
    channel.pipeline.add_last(LengthFieldBasedFrameDecoder(16 << 20, 0, 4, 0, 4))
    channel.pipeline.add_last(_Echo())


async def test_a_served_port_bounds_unfinished_frames_and_honest_clients_go_on() -> None:
    """Twenty connections each start an 8 MiB frame and never finish it; the port holds at
    most its 1 MiB budget plus a read per connection, an honest client's frames are echoed
    meanwhile, and the holders are closed once they held it for the hold timeout."""
    limit = 1 << 20
    async with trio.open_nursery() as nursery:
        server: Server = await nursery.start(
            lambda task_status: serve(
                _echo_init,
                0,
                host="127.0.0.1",
                max_partial_bytes=limit,
                partial_hold_timeout=1.0,
                task_status=task_status,
            )
        )
        attackers = []
        for _ in range(20):
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            attackers.append(stream)
            nursery.start_soon(_send_forever, stream, frame(8 << 20)[:-1])
        await trio.sleep(0.5)
        honest = await trio.open_tcp_stream("127.0.0.1", server.port)
        for i in range(20):
            payload = bytes([i]) * 3000
            await honest.send_all(frame(3000, bytes([i]))[:1500])
            await honest.send_all(frame(3000, bytes([i]))[1500:])
            echoed = b""
            while len(echoed) < 3004:
                echoed += await honest.receive_some()
            assert echoed[4:] == payload
            stats = server.statistics().partial_frames
            assert stats is not None
            assert stats.held <= limit + 20 * 256 * KIB
        await trio.sleep(3.0)
        stats = server.statistics().partial_frames
        assert stats is not None
        assert stats.peak <= limit + 20 * 256 * KIB
        assert stats.waits > 0
        assert stats.evicted > 0
        await honest.aclose()
        for stream in attackers:
            await stream.aclose()
        nursery.cancel_scope.cancel()


async def _send_forever(stream: trio.SocketStream, data: bytes) -> None:
    try:
        await stream.send_all(data)
        await trio.sleep_forever()
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
