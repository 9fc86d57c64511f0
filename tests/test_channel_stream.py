"""StreamChannel over trio memory streams: life cycle, writes, coalescing, back-pressure, reads."""

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
    StreamChannel,
    WaterMarks,
    run_channel,
)
from hanet.testing import receive_exactly


class Recorder(ChannelInboundHandler):
    """Records life-cycle events and the bytes it reads (and consumes them)."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.data = bytearray()
        self.writability: list[bool] = []

    def channel_active(self, ctx: HandlerContext) -> None:
        self.events.append("active")

    def channel_inactive(self, ctx: HandlerContext) -> None:
        self.events.append("inactive")

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        self.data += msg

    def channel_writability_changed(self, ctx: HandlerContext) -> None:
        self.writability.append(ctx.channel.is_writable)


def init_with(*handlers: ChannelHandler) -> Callable[[StreamChannel], None]:
    def init(channel: StreamChannel) -> None:
        for handler in handlers:
            channel.pipeline.add_last(handler)

    return init


async def start(
    nursery: trio.Nursery,
    stream: trio.abc.Stream,
    *handlers: ChannelHandler,
    config: ChannelConfig | None = None,
) -> StreamChannel:
    channel: StreamChannel = await nursery.start(
        functools.partial(run_channel, stream, init_with(*handlers), config=config)
    )
    return channel


def is_open(channel: StreamChannel) -> bool:
    """``channel.is_open``, unnarrowed by mypy between checks."""
    return channel.is_open


# -- life cycle ------------------------------------------------------------------------------


async def test_active_then_inactive_on_peer_eof() -> None:
    rec = Recorder()
    a, b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a, rec)
        assert channel.is_active and channel.is_open
        assert rec.events == ["active"]
        await b.send_all(b"hello")
        await b.send_eof()
        await channel.wait_closed()
    assert rec.events == ["active", "inactive"]
    assert bytes(rec.data) == b"hello"
    assert channel.close_reason == "peer closed the connection"
    assert not channel.statistics().is_active and not is_open(channel)


async def test_inactive_once_on_close_and_close_is_idempotent() -> None:
    rec = Recorder()
    a, b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a, rec)
        await channel.close("done here")
        await channel.close("again")
        channel.close_nowait()
        await channel.wait_closed()
    assert rec.events == ["active", "inactive"]
    assert channel.close_reason == "done here"
    assert await b.receive_some() == b""  # the stream was closed


async def test_concurrent_closes() -> None:
    rec = Recorder()
    a, _b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a, rec)
        for _ in range(5):
            nursery.start_soon(channel.close)
    assert rec.events == ["active", "inactive"]


async def test_inactive_once_on_cancellation() -> None:
    rec = Recorder()
    a, _b = trio.testing.memory_stream_pair()
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            channel = await start(nursery, a, rec)
            scope.cancel()
    assert rec.events == ["active", "inactive"]
    assert not channel.is_open
    await channel.close()  # closing a closed channel returns at once


async def test_inactive_once_on_unhandled_exception(caplog: pytest.LogCaptureFixture) -> None:
    class Bad(ChannelInboundHandler):
        def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
            raise ValueError("bad input")

    rec = Recorder()
    a, b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a, Bad(), rec)
        await b.send_all(b"x")
        await channel.wait_closed()
    assert rec.events == ["active", "inactive"]
    assert channel.close_reason == "ValueError: bad input"
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert f"channel #{channel.id}" in warning.getMessage()
    assert "bad input" in warning.getMessage()


async def test_inactive_once_when_broken() -> None:
    class Broken(trio.abc.Stream):
        async def send_all(self, data: bytes | bytearray | memoryview) -> None:
            raise trio.BrokenResourceError("reset")

        async def wait_send_all_might_not_block(self) -> None:
            pass

        async def receive_some(self, max_bytes: int | None = None) -> bytes:
            await trio.sleep_forever()
            raise AssertionError  # pragma: no cover

        async def send_eof(self) -> None:
            pass

        async def aclose(self) -> None:
            await trio.lowlevel.checkpoint()

    rec = Recorder()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, Broken(), rec)
        with pytest.raises(ChannelClosedError):
            await channel.write_and_flush(b"x")
        await channel.wait_closed()
    assert rec.events == ["active", "inactive"]
    assert channel.close_reason is not None and "connection lost while sending" in (
        channel.close_reason
    )


async def test_closed_before_run_fires_nothing_twice() -> None:
    rec = Recorder()
    a, _b = trio.testing.memory_stream_pair()
    channel = StreamChannel(a)
    channel.pipeline.add_last(rec)
    await channel.close()
    assert not channel.is_open
    future = channel.pipeline.write_and_flush(b"x")
    assert isinstance(future.exception(), ChannelClosedError)


async def test_closed_before_run_releases_the_stream() -> None:
    rec = Recorder()
    a, b = trio.testing.memory_stream_pair()
    channel = StreamChannel(a)
    channel.pipeline.add_last(rec)
    future = channel.pipeline.write_and_flush(b"queued before run")
    await channel.close()
    assert await b.receive_some() == b""  # the stream is closed at once
    assert isinstance(future.exception(), ChannelClosedError)
    assert channel.pipeline.names() == []
    await channel.run()  # running it afterwards does nothing
    assert rec.events == []


async def test_close_nowait_before_run_fires_no_events() -> None:
    rec = Recorder()
    a, b = trio.testing.memory_stream_pair()
    channel = StreamChannel(a)
    channel.pipeline.add_last(rec)
    channel.close_nowait("changed my mind")
    await channel.run()
    assert rec.events == []
    assert channel.close_reason == "changed my mind"
    assert await b.receive_some() == b""


async def test_writes_and_timers_before_run_are_served_once_running() -> None:
    fired: list[str] = []
    a, b = trio.testing.memory_stream_pair()
    channel = StreamChannel(a)
    channel.pipeline.write_and_flush(b"early")
    channel.schedule(0, lambda: fired.append("timer"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(channel.run)
        assert await b.receive_some() == b"early"
        await trio.testing.wait_all_tasks_blocked()
        assert fired == ["timer"]
        await channel.close()


async def test_on_active_runs_right_after_channel_active() -> None:
    rec = Recorder()
    order: list[str] = []
    a, _b = trio.testing.memory_stream_pair()
    channel = StreamChannel(a)
    channel.pipeline.add_last(rec)

    def on_active() -> None:
        order.append(f"on_active after {rec.events}")
        channel.close_nowait()

    await channel.run(on_active=on_active)
    assert order == ["on_active after ['active']"]
    assert rec.events == ["active", "inactive"]


async def test_idle_channel_runs_in_its_callers_task_only(live_tasks: Callable[[], int]) -> None:
    """No writer or timer task until the channel writes or sets a timer."""
    before = live_tasks()
    a, b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a)
        await trio.testing.wait_all_tasks_blocked()
        assert live_tasks() == before + 1  # the task running channel.run() reads
        channel.schedule(100, lambda: None)
        await channel.pipeline.write_and_flush(b"x")
        assert live_tasks() == before + 3  # + writer + timers
        assert await b.receive_some() == b"x"
        await channel.close()
    assert live_tasks() == before


async def test_handlers_removed_when_closed() -> None:
    removed: list[str] = []

    class Track(ChannelInboundHandler):
        def handler_removed(self, ctx: HandlerContext) -> None:
            removed.append(ctx.name)

    a, _b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a, Track(), Track())
        await channel.close()
    assert removed == ["Track#1", "Track#0"]
    assert channel.pipeline.names() == []


async def test_no_read_after_close() -> None:
    """A handler that closes on a read sees no later read, even if bytes are already there."""

    class CloseOnFirst(ChannelInboundHandler):
        def __init__(self) -> None:
            self.reads: list[bytes] = []

        def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
            self.reads.append(msg)
            ctx.close()

    handler = CloseOnFirst()
    a, b = trio.testing.memory_stream_pair()
    await b.send_all(b"0123456789" * 10)
    async with trio.open_nursery() as nursery:
        await start(nursery, a, handler, config=ChannelConfig(read_size=10))
    assert handler.reads == [b"0123456789"]


# -- writes ------------------------------------------------------------------------------------


async def test_write_future_completes_after_send() -> None:
    a, b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a)
        future = channel.pipeline.write(b"abc")
        await trio.testing.wait_all_tasks_blocked()
        assert not future.done()  # not flushed
        channel.pipeline.flush()
        await future
        assert future.succeeded()
        assert await b.receive_some() == b"abc"
        stats = channel.statistics()
        assert stats.bytes_written == 3 and stats.sends == 1 and stats.queued_bytes == 0
        await channel.close()


async def test_write_futures_fail_on_close() -> None:
    a, b = trio.testing.lockstep_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a)
        flushed = channel.pipeline.write_and_flush(b"x" * 1000)  # the writer blocks in send_all
        unflushed = channel.pipeline.write(b"y")
        await trio.testing.wait_all_tasks_blocked()
        callbacks: list[BaseException | None] = []
        unflushed.add_done_callback(lambda f: callbacks.append(f.exception()))
        await channel.close()
        with pytest.raises(ChannelClosedError):
            await flushed
        with pytest.raises(ChannelClosedError):
            await unflushed
        assert len(callbacks) == 1 and isinstance(callbacks[0], ChannelClosedError)
        # A write after close fails at once.
        late = channel.pipeline.write_and_flush(b"z")
        assert isinstance(late.exception(), ChannelClosedError)
        with pytest.raises(ChannelClosedError):
            await channel.write_and_flush(b"z")
    del b


async def test_write_of_unsendable_type_fails_the_future() -> None:
    a, _b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a)
        with pytest.raises(TypeError, match="missing an encoder"):
            await channel.pipeline.write_and_flush("a str")
        assert channel.is_open
        await channel.close()


async def test_writes_are_snapshotted() -> None:
    a, b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a)
        buf = bytearray(b"first")
        channel.pipeline.write(buf)
        buf[:] = b"XXXXX"  # reused at once
        channel.pipeline.write(buf)
        buf[:] = b"YYYYY"
        view = memoryview(buf)
        future = channel.pipeline.write_and_flush(view)
        buf[:] = b"ZZZZZ"
        await future
        assert await receive_exactly(b, 15) == b"firstXXXXXYYYYY"
        await channel.close()


async def test_small_writes_coalesce_into_few_sends() -> None:
    a, b = trio.testing.memory_stream_pair()
    received = bytearray()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a)
        futures = [channel.pipeline.write(i.to_bytes(4, "big")) for i in range(1000)]
        channel.pipeline.flush()
        await futures[-1]
        assert all(f.succeeded() for f in futures)
        assert channel.statistics().sends == 1
        assert channel.statistics().messages_written == 1000
        received += await receive_exactly(b, 4000)
        # With a 1 KiB coalescing limit, 4000 bytes leave in 4 sends.
        channel2 = await start(
            nursery, trio.testing.memory_stream_pair()[0], config=ChannelConfig(write_coalesce=1024)
        )
        for i in range(1000):
            channel2.pipeline.write(i.to_bytes(4, "big"))
        await channel2.pipeline.write_and_flush(b"")
        assert channel2.statistics().sends == 4
        await channel.close()
        await channel2.close()
    assert bytes(received) == b"".join(i.to_bytes(4, "big") for i in range(1000))


async def test_large_message_is_sent_alone() -> None:
    a, b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a, config=ChannelConfig(write_coalesce=1024))
        channel.pipeline.write(b"a")
        channel.pipeline.write(b"b" * 5000)
        await channel.pipeline.write_and_flush(b"c")
        assert await receive_exactly(b, 5002) == b"a" + b"b" * 5000 + b"c"
        assert channel.statistics().sends == 3
        await channel.close()


async def test_write_from_handler_is_echoed() -> None:
    class Echo(ChannelInboundHandler):
        def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
            ctx.write(msg)

        def channel_read_complete(self, ctx: HandlerContext) -> None:
            ctx.flush()

    a, b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a, Echo())
        for i in range(10):
            await b.send_all(b"ping %d" % i)
            assert await b.receive_some() == b"ping %d" % i
        stats = channel.statistics()
        assert stats.reads == stats.sends == 10
        assert stats.bytes_read == stats.bytes_written
        await channel.close()


# -- back-pressure -----------------------------------------------------------------------------


MARKS = WaterMarks(low=1000, high=2000)


async def test_writability_flips_with_a_slow_reader() -> None:
    rec = Recorder()
    a, b = trio.testing.lockstep_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a, rec, config=ChannelConfig(water_marks=MARKS))
        first = channel.pipeline.write_and_flush(b"a" * 1500)
        await trio.testing.wait_all_tasks_blocked()  # the writer waits for the reader
        assert channel.is_writable and rec.writability == []
        channel.pipeline.write_and_flush(b"b" * 600)  # 2100 queued > 2000
        assert not channel.statistics().is_writable
        assert rec.writability == [False]
        assert channel.statistics().queued_bytes == 2100
        assert await receive_exactly(b, 1500) == b"a" * 1500
        await first
        # 600 bytes queued now: below the low mark, writable again.
        assert channel.is_writable and rec.writability == [False, True]
        assert await receive_exactly(b, 600) == b"b" * 600
        await channel.close()


async def test_write_and_flush_waits_while_not_writable() -> None:
    a, b = trio.testing.lockstep_stream_pair()
    done: list[int] = []
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a, config=ChannelConfig(water_marks=MARKS))

        async def producer() -> None:
            for i in range(10):
                await channel.write_and_flush(bytes([i]) * 700)
                done.append(i)

        channel.pipeline.write_and_flush(b"x" * 2500)  # over the high mark at once
        assert not channel.is_writable
        nursery.start_soon(producer)
        await trio.testing.wait_all_tasks_blocked()
        assert done == []  # the producer waits for writability
        assert channel.statistics().queued_bytes == 2500
        assert await receive_exactly(b, 2500) == b"x" * 2500
        for i in range(10):
            assert await receive_exactly(b, 700) == bytes([i]) * 700
        await trio.testing.wait_all_tasks_blocked()
        assert done == list(range(10))
        await channel.close()


async def test_wait_writable_raises_when_closed_meanwhile() -> None:
    a, _b = trio.testing.lockstep_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a, config=ChannelConfig(water_marks=MARKS))
        channel.pipeline.write_and_flush(b"x" * 2500)
        outcome: list[str] = []

        async def waiter() -> None:
            try:
                await channel.write_and_flush(b"late")
            except ChannelClosedError:
                outcome.append("closed")

        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        await channel.close()
    assert outcome == ["closed"]


async def test_a_bounded_producer_never_queues_much_more_than_the_high_mark() -> None:
    a, b = trio.testing.lockstep_stream_pair()
    peak = 0
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a, config=ChannelConfig(water_marks=MARKS))

        async def producer() -> None:
            nonlocal peak
            for _ in range(200):
                await channel.wait_writable()
                channel.write_and_flush_nowait(b"p" * 100)
                peak = max(peak, channel.statistics().queued_bytes)

        nursery.start_soon(producer)
        assert await receive_exactly(b, 20_000) == b"p" * 20_000
        await channel.close()
    assert peak <= MARKS.high + 100


# -- reads ---------------------------------------------------------------------------------------


async def test_auto_read_false_reads_only_on_request() -> None:
    class OnDemand(ChannelInboundHandler):
        def __init__(self) -> None:
            self.reads: list[bytes] = []
            self.ctx: HandlerContext | None = None

        def handler_added(self, ctx: HandlerContext) -> None:
            self.ctx = ctx

        def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
            self.reads.append(msg)

    handler = OnDemand()
    a, b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(
            nursery, a, handler, config=ChannelConfig(auto_read=False, read_size=4)
        )
        await b.send_all(b"aaaabbbbccccdddd")
        await trio.testing.wait_all_tasks_blocked()
        assert handler.reads == []
        assert handler.ctx is not None
        handler.ctx.read()
        await trio.testing.wait_all_tasks_blocked()
        assert handler.reads == [b"aaaa"]
        handler.ctx.read()
        await trio.testing.wait_all_tasks_blocked()
        assert handler.reads == [b"aaaa", b"bbbb"]
        channel.auto_read = True
        await trio.testing.wait_all_tasks_blocked()
        assert handler.reads == [b"aaaa", b"bbbb", b"cccc", b"dddd"]
        await channel.close()


async def test_read_size_bounds_each_read() -> None:
    rec = Recorder()
    a, b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a, rec, config=ChannelConfig(read_size=3))
        await b.send_all(b"123456789")
        await trio.testing.wait_all_tasks_blocked()
        assert channel.statistics().reads == 3
        assert bytes(rec.data) == b"123456789"
        await channel.close()


# -- tasks -------------------------------------------------------------------------------------


async def test_spawned_tasks_are_cancelled_on_close() -> None:
    states: list[str] = []

    class Worker(ChannelInboundHandler):
        def channel_active(self, ctx: HandlerContext) -> None:
            ctx.spawn(self.work, ctx)

        async def work(self, ctx: HandlerContext) -> None:
            states.append("started")
            try:
                await trio.sleep_forever()
            finally:
                states.append("cancelled")

    a, _b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a, Worker())
        await trio.testing.wait_all_tasks_blocked()
        assert states == ["started"]
        await channel.close()
        assert states == ["started", "cancelled"]


async def test_spawned_task_error_fires_exception_caught() -> None:
    caught: list[BaseException] = []

    class Worker(ChannelInboundHandler):
        def channel_active(self, ctx: HandlerContext) -> None:
            ctx.spawn(self.work)

        async def work(self) -> None:
            await trio.lowlevel.checkpoint()
            raise OSError("fsync failed")

        def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
            caught.append(exc)
            ctx.close("worker failed")

    a, _b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a, Worker())
        await channel.wait_closed()
    assert [str(e) for e in caught] == ["fsync failed"]
    assert channel.close_reason == "worker failed"


async def test_spawned_task_result_fires_events_back() -> None:
    class Async(ChannelInboundHandler):
        def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
            ctx.spawn(self.slow_upper, ctx, msg)

        async def slow_upper(self, ctx: HandlerContext, msg: bytes) -> None:
            await trio.lowlevel.checkpoint()
            ctx.write_and_flush(msg.upper())

    a, b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a, Async())
        await b.send_all(b"abc")
        assert await b.receive_some() == b"ABC"
        await channel.close()
    channel.spawn(trio.lowlevel.checkpoint)  # a closed channel ignores new tasks


async def test_channel_owns_no_task_after_close(live_tasks: Callable[[], int]) -> None:
    before = live_tasks()
    a, _b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, a, Recorder())
        assert live_tasks() > before
        await channel.close()
    assert live_tasks() == before
