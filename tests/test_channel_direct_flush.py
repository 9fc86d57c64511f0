"""StreamChannel over TCP: a flush made outside the connection's own read (by another task)
is written at once, in the flushing task, when the writer is idle, as Netty writes at once on
a flush made on the channel's event loop; otherwise (the writer sending, a file region
queued, a stream other than a plain socket) the writer task sends it, in order."""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from channel_support import start, tcp_pair

from hanet import ChannelInboundHandler, HandlerContext, StreamChannel
from hanet.channel import ChannelClosedError, ChannelConfig, FileRegion, WaterMarks
from hanet.testing import receive_exactly


class Recorder(ChannelInboundHandler):
    """Records writability changes and how often the channel went inactive."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.inactive = 0

    def channel_writability_changed(self, ctx: HandlerContext) -> None:
        self.events.append("writable" if ctx.channel.is_writable else "unwritable")

    def channel_inactive(self, ctx: HandlerContext) -> None:
        self.inactive += 1
        ctx.fire_channel_inactive()


def count_writer_wakeups(channel: StreamChannel) -> list[int]:
    """Count the times the channel wakes (or starts) its writer task from now on."""
    count = [0]
    wake = channel._wake_writer

    def counting() -> None:
        count[0] += 1
        wake()

    channel._wake_writer = counting  # type: ignore[method-assign]
    return count


def small_send_buffer(stream: trio.SocketStream) -> None:
    """Make the kernel take little of a write at once (a tiny receive buffer on the peer too
    would make loopback crawl: small windows and delayed acknowledgements)."""
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)


async def test_a_flush_from_another_task_is_written_before_it_returns(
    live_tasks: Callable[[], int],
) -> None:
    client, server = await tcp_pair()
    before = live_tasks()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, server, Recorder())
        wakeups = count_writer_wakeups(channel)
        for i in range(3):
            body = bytes([65 + i]) * 100
            future = channel.write_and_flush_nowait(body)
            assert future.succeeded()  # its bytes reached the kernel inside the flush
            assert await receive_exactly(client, 100) == body
        await trio.testing.wait_all_tasks_blocked()
        assert wakeups == [0]
        assert live_tasks() == before + 1  # the reader only: the writer task never started
        stats = channel.statistics()
        assert (stats.sends, stats.messages_written, stats.bytes_written) == (3, 3, 300)
        assert stats.queued_bytes == 0
        await client.aclose()
        await channel.wait_closed()


async def test_writes_flushed_together_leave_in_one_gathering_write() -> None:
    client, server = await tcp_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, server, Recorder())
        futures = [channel.pipeline.write(bytes([48 + i]) * 10) for i in range(5)]
        assert not any(f.done() for f in futures)  # written, not flushed
        channel.pipeline.flush()
        assert all(f.succeeded() for f in futures)
        assert await receive_exactly(client, 50) == b"".join(bytes([48 + i]) * 10 for i in range(5))
        assert channel.statistics().sends == 1
        await client.aclose()
        await channel.wait_closed()


async def test_a_flush_while_the_writer_sends_waits_its_turn() -> None:
    # The socket takes part of a large write; the writer task has the rest. A flush made
    # meanwhile is not written by the flushing task (it would overtake): the writer sends it
    # after the rest, and the futures complete in order.
    client, server = await tcp_pair()
    small_send_buffer(server)
    size = 1 << 20
    done: list[str] = []
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, server, Recorder())
        big = channel.write_and_flush_nowait(b"a" * size)
        big.add_done_callback(lambda f: done.append("big"))
        assert not big.done()  # partly taken: its rest is the writer's
        tail = channel.write_and_flush_nowait(b"tail")
        tail.add_done_callback(lambda f: done.append("tail"))
        assert not tail.done()
        assert await receive_exactly(client, size + 4) == b"a" * size + b"tail"
        await tail
        assert done == ["big", "tail"]
        # the writer idle again: the next flush is written at once
        wakeups = count_writer_wakeups(channel)
        await trio.testing.wait_all_tasks_blocked()
        assert channel.write_and_flush_nowait(b"next").succeeded()
        assert await receive_exactly(client, 4) == b"next"
        assert wakeups == [0]
        await client.aclose()
        await channel.wait_closed()


async def test_a_flush_after_a_queued_file_region_keeps_its_order(tmp_path: Path) -> None:
    client, server = await tcp_pair()
    path = tmp_path / "region"
    path.write_bytes(b"r" * 100_000)
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, server, Recorder())
        with path.open("rb") as file:
            region = channel.write_and_flush_nowait(FileRegion.of(file.fileno(), 0, 100_000))
        assert not region.done()  # sendfile is the writer task's
        after = channel.write_and_flush_nowait(b"after")
        assert not after.done()  # a region is queued ahead of it
        assert await receive_exactly(client, 100_005) == b"r" * 100_000 + b"after"
        await region
        await after
        await client.aclose()
        await channel.wait_closed()


async def test_partial_writes_from_a_task_deliver_every_byte_in_order() -> None:
    # A task flushes messages one by one while the peer reads slowly through small buffers:
    # some are written at once, some in part (their rest the writer's), some wait for the
    # writer; the peer gets every byte in order and every future completes.
    client, server = await tcp_pair()
    small_send_buffer(server)
    messages = [bytes([97 + i % 26]) * (1000 + 37_000 * (i % 5)) for i in range(40)]
    expected = b"".join(messages)
    received = bytearray()
    futures: list[Any] = []
    all_read = trio.Event()

    async def read_slowly() -> None:
        while len(received) < len(expected):
            chunk = await client.receive_some(8192)
            assert chunk
            received.extend(chunk)
            await trio.lowlevel.checkpoint()
        all_read.set()

    async with trio.open_nursery() as nursery:
        channel = await start(nursery, server, Recorder())
        nursery.start_soon(read_slowly)
        at_once = []
        for message in messages:
            futures.append(channel.write_and_flush_nowait(message))
            at_once.append(futures[-1].done())
            await trio.lowlevel.checkpoint()
        assert any(at_once) and not all(at_once)  # both paths taken
        with trio.fail_after(10):
            for future in futures:
                await future
            await all_read.wait()
        assert bytes(received) == expected
        assert channel.statistics().bytes_written == len(expected)
        await client.aclose()
        await channel.wait_closed()


async def test_a_callback_that_writes_and_flushes_joins_the_write() -> None:
    # Netty's flush0 is not re-entered: a flush from a completed write's callback inside the
    # flush is written by the same loop, after it, before the outer flush returns.
    client, server = await tcp_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, server, Recorder())
        wakeups = count_writer_wakeups(channel)
        seconds: list[Any] = []
        first = channel.pipeline.write(b"first")
        first.add_done_callback(lambda f: seconds.append(channel.write_and_flush_nowait(b"second")))
        channel.pipeline.flush()
        assert first.succeeded() and len(seconds) == 1 and seconds[0].succeeded()
        assert await receive_exactly(client, 11) == b"firstsecond"
        assert wakeups == [0]
        assert channel.statistics().sends == 2
        await client.aclose()
        await channel.wait_closed()


async def test_a_callback_that_writes_flushes_and_closes_inside_the_flush() -> None:
    # What the callback flushed before its close still leaves (a draining close), then EOF.
    client, server = await tcp_pair()
    recorder = Recorder()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, server, recorder)
        last: list[Any] = []

        def write_and_close(_: Any) -> None:
            last.append(channel.write_and_flush_nowait(b"last"))
            channel.close_nowait()

        first = channel.pipeline.write(b"first")
        first.add_done_callback(write_and_close)
        channel.pipeline.flush()
        assert first.succeeded() and not channel.is_open
        assert await receive_exactly(client, 9) == b"firstlast"
        assert await client.receive_some(1) == b""
        await channel.wait_closed()
        await last[0]
        assert recorder.inactive == 1
    await client.aclose()


async def test_a_callback_that_closes_inside_the_flush() -> None:
    client, server = await tcp_pair()
    recorder = Recorder()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, server, recorder)
        first = channel.pipeline.write(b"first")

        def close(_: Any) -> None:
            channel.close_nowait()

        first.add_done_callback(close)
        second = channel.pipeline.write(b"second")  # flushed with it, in the same write
        channel.pipeline.flush()
        assert first.succeeded() and second.succeeded()
        assert await receive_exactly(client, 11) == b"firstsecond"
        assert await client.receive_some(1) == b""
        await channel.wait_closed()
        with pytest.raises(ChannelClosedError):
            await channel.write_and_flush_nowait(b"late")
        assert recorder.inactive == 1
    await client.aclose()


async def test_a_reset_peer_fails_the_write_at_once_and_closes_the_channel_once() -> None:
    client, server = await tcp_pair()
    recorder = Recorder()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, server, recorder)
        await trio.testing.wait_all_tasks_blocked()
        client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.socket.close()  # a reset, reaching the server's socket before the next line
        future = channel.write_and_flush_nowait(b"x" * 1000)
        assert future.done()
        assert isinstance(future.exception(), ChannelClosedError)
        assert not channel.is_open
        late = channel.write_and_flush_nowait(b"late")
        assert isinstance(late.exception(), ChannelClosedError)
        await channel.wait_closed()
        assert recorder.inactive == 1
        assert (channel.close_reason or "").startswith("connection lost while sending")
    await client.aclose()


async def test_writability_changes_inside_the_flush_and_wakes_a_waiter() -> None:
    client, server = await tcp_pair()
    recorder = Recorder()
    marks = WaterMarks(low=1000, high=2000)
    woke: list[bool] = []

    async def wait_writable(channel: StreamChannel) -> None:
        await channel.wait_writable()
        woke.append(True)

    async with trio.open_nursery() as nursery:
        channel = await start(nursery, server, recorder, ChannelConfig(water_marks=marks))
        future = channel.pipeline.write(b"w" * 3000)
        assert recorder.events == ["unwritable"]
        nursery.start_soon(wait_writable, channel)
        await trio.testing.wait_all_tasks_blocked()
        assert woke == []
        channel.pipeline.flush()
        assert future.succeeded()
        assert recorder.events == ["unwritable", "writable"]  # both before the flush returned
        assert channel.is_writable
        await trio.testing.wait_all_tasks_blocked()
        assert woke == [True]
        assert await receive_exactly(client, 3000) == b"w" * 3000
        await client.aclose()
        await channel.wait_closed()


async def test_a_stream_that_is_not_a_plain_socket_keeps_its_writer_task() -> None:
    # TLS or memory streams: no direct write; the writer task sends, as before.
    left, right = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, left, Recorder())
        wakeups = count_writer_wakeups(channel)
        future = channel.write_and_flush_nowait(b"hello")
        assert not future.done()
        assert wakeups == [1]
        assert await receive_exactly(right, 5) == b"hello"
        await future
        await right.aclose()
        await channel.wait_closed()


async def test_a_flush_before_the_channel_runs_waits_for_it() -> None:
    # Nothing is written before channel_active: the run's writer sends what was flushed.
    client, server = await tcp_pair()
    channel = StreamChannel(server)
    future = channel.write_and_flush_nowait(b"early")
    assert not future.done()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(channel.run)
        assert await receive_exactly(client, 5) == b"early"
        await future
        await client.aclose()
        await channel.wait_closed()
