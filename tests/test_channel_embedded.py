"""EmbeddedChannel (the README's EmbeddedChannel surface, docs/netty.md §6.2-6.3 adapted)."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from hanet import (
    ChannelClosedError,
    ChannelConfig,
    ChannelDuplexHandler,
    ChannelInboundHandler,
    ChannelOutboundHandler,
    HandlerContext,
    TimerHandle,
    WaterMarks,
    WriteFuture,
)
from hanet.testing import EmbeddedChannel


class Boom(ValueError):
    pass


class FailOn(ChannelInboundHandler):
    """Forwards every message but raises on one value."""

    def __init__(self, bad: Any) -> None:
        self.bad = bad

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if msg == self.bad:
            raise Boom(f"bad message {msg!r}")
        ctx.fire_channel_read(msg)


class Events(ChannelInboundHandler):
    def __init__(self) -> None:
        self.events: list[str] = []

    def channel_active(self, ctx: HandlerContext) -> None:
        self.events.append("active")
        ctx.fire_channel_active()

    def channel_inactive(self, ctx: HandlerContext) -> None:
        self.events.append("inactive")
        ctx.fire_channel_inactive()

    def channel_read_complete(self, ctx: HandlerContext) -> None:
        self.events.append("read_complete")
        ctx.fire_channel_read_complete()


def test_active_at_once() -> None:
    ev = Events()
    ch = EmbeddedChannel(ev)
    assert ch.is_active and ch.is_open
    assert ev.events == ["active"]


def test_write_inbound_read_inbound() -> None:
    ev = Events()
    ch = EmbeddedChannel(ev)
    assert ch.write_inbound(b"a", b"b") is True
    assert ev.events == ["active", "read_complete"]
    assert ch.read_inbound() == b"a"
    assert ch.read_inbound() == b"b"
    assert ch.read_inbound() is None
    assert ch.write_inbound() is False  # no message: reports the (empty) queue


def test_write_outbound_read_outbound() -> None:
    ch = EmbeddedChannel()
    assert ch.write_outbound(b"x", "any object") is True
    assert ch.read_outbound() == b"x"
    assert ch.read_outbound() == "any object"
    assert ch.read_outbound() is None
    assert ch.write_outbound() is False


def test_exception_raised_after_earlier_messages_were_delivered() -> None:
    ch = EmbeddedChannel(FailOn(b"2"))
    with pytest.raises(Boom, match="bad message"):
        ch.write_inbound(b"1", b"2", b"3")
    assert list(ch.inbound_messages) == [b"1", b"3"]
    # Not closed by it: a test can go on feeding it.
    assert ch.is_open and ch.is_active
    assert ch.write_inbound(b"4")
    assert ch.read_inbound() == b"1"


def test_exception_raised_once_only() -> None:
    ch = EmbeddedChannel(FailOn(b"x"))
    with pytest.raises(Boom):
        ch.write_inbound(b"x")
    ch.check_exception()  # already reported
    assert ch.write_inbound(b"fine")


def test_first_exception_wins_and_others_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    ch = EmbeddedChannel(FailOn(b"x"))
    with pytest.raises(Boom):
        ch.write_inbound(b"x", b"x")
    assert "more than one exception" in caplog.text


def test_write_one_inbound_and_flush_inbound() -> None:
    ev = Events()
    ch = EmbeddedChannel(ev)
    ch.write_one_inbound(b"a")
    assert ev.events == ["active"]
    ch.flush_inbound()
    assert ev.events == ["active", "read_complete"]
    assert ch.read_inbound() == b"a"


class CountWrites(ChannelOutboundHandler):
    def __init__(self) -> None:
        self.writes = 0
        self.flushes = 0

    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        self.writes += 1
        ctx.write(msg, future)

    def flush(self, ctx: HandlerContext) -> None:
        self.flushes += 1
        ctx.flush()


def test_write_one_outbound_needs_flush_outbound() -> None:
    """testHandleOutboundMessage."""
    counter = CountWrites()
    ch = EmbeddedChannel(counter)
    future = ch.write_one_outbound(b"m")
    assert counter.writes == 1 and counter.flushes == 0
    assert ch.read_outbound() is None
    assert not future.done()
    ch.flush_outbound()
    assert counter.flushes == 1
    assert future.succeeded()
    assert ch.read_outbound() == b"m"


class FailWrite(ChannelOutboundHandler):
    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        raise Boom("encoder failed")


def test_outbound_handler_error_fails_the_write_and_is_raised() -> None:
    ch = EmbeddedChannel(FailWrite())
    with pytest.raises(Boom, match="encoder failed"):
        ch.write_outbound(b"m")
    future = ch.write_one_outbound(b"n")
    assert isinstance(future.exception(), Boom)
    ch.check_exception()  # a write failure is not an exception_caught event
    assert ch.is_open


def test_closed_channel_raises() -> None:
    """testEnsureOpen."""
    ch = EmbeddedChannel()
    ch.close()
    assert not ch.is_open and not ch.is_active
    with pytest.raises(ChannelClosedError):
        ch.write_inbound(b"x")
    with pytest.raises(ChannelClosedError):
        ch.write_outbound(b"x")
    with pytest.raises(ChannelClosedError):
        ch.write_one_inbound(b"x")
    with pytest.raises(ChannelClosedError):
        ch.write_one_outbound(b"x")
    with pytest.raises(ChannelClosedError):
        ch.flush_inbound()
    with pytest.raises(ChannelClosedError):
        ch.flush_outbound()


def test_close_idempotent_and_inactive_once() -> None:
    ev = Events()
    ch = EmbeddedChannel(ev)
    ch.close()
    ch.close()
    assert ch.finish() is False
    assert ev.events == ["active", "inactive"]


def test_pipeline_write_after_close_fails_future() -> None:
    ch = EmbeddedChannel()
    ch.close()
    future = ch.pipeline.write(b"late")
    assert isinstance(future.exception(), ChannelClosedError)


def test_close_fails_pending_writes() -> None:
    ch = EmbeddedChannel()
    future = ch.write_one_outbound(b"never flushed")
    ch.close()
    assert isinstance(future.exception(), ChannelClosedError)


class DecodeLast(ChannelInboundHandler):
    """Buffers everything, emits it joined on channel_inactive (like a decoder's decode_last)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        self.buf += msg

    def channel_inactive(self, ctx: HandlerContext) -> None:
        if self.buf:
            ctx.fire_channel_read(bytes(self.buf))
        ctx.fire_channel_inactive()


def test_finish_delivers_messages_decoded_while_closing() -> None:
    ch = EmbeddedChannel(DecodeLast())
    assert not ch.write_inbound(b"ab", b"cd")
    assert ch.finish() is True
    assert ch.read_inbound() == b"abcd"
    assert ch.read_inbound() is None


def test_finish_reports_outbound_messages() -> None:
    ch = EmbeddedChannel()
    ch.write_outbound(b"x")
    assert ch.finish() is True
    assert ch.read_outbound() == b"x"


class FailOnClose(ChannelInboundHandler):
    def channel_inactive(self, ctx: HandlerContext) -> None:
        raise Boom("while closing")


def test_finish_raises_exception_from_closing() -> None:
    ch = EmbeddedChannel(FailOnClose())
    with pytest.raises(Boom, match="while closing"):
        ch.finish()
    assert not ch.is_open


class CloseOnError(ChannelInboundHandler):
    def __init__(self) -> None:
        self.inactive = 0

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        ctx.close()

    def channel_inactive(self, ctx: HandlerContext) -> None:
        self.inactive += 1


def test_exception_caught_that_closes_fires_inactive() -> None:
    """testChannelInactiveFired."""
    handler = CloseOnError()
    ch = EmbeddedChannel(FailOn(b"x"), handler)
    ch.write_inbound(b"x")  # handled: nothing raised
    assert handler.inactive == 1
    assert not ch.is_open


def test_exception_in_constructor_reported_by_next_call() -> None:
    class ActiveRaises(ChannelInboundHandler):
        def channel_active(self, ctx: HandlerContext) -> None:
            raise Boom("in channel_active")

    ch = EmbeddedChannel(ActiveRaises())
    with pytest.raises(Boom):
        ch.write_inbound(b"x")
    assert ch.read_inbound() == b"x"


# -- time ------------------------------------------------------------------------------------


class Scheduler(ChannelInboundHandler):
    def __init__(self, delays: list[float]) -> None:
        self.delays = delays
        self.ran: list[tuple[float, float]] = []
        self.handles: list[TimerHandle] = []

    def handler_added(self, ctx: HandlerContext) -> None:
        for delay in self.delays:
            self.handles.append(ctx.schedule(delay, functools.partial(self.run, ctx, delay)))

    def run(self, ctx: HandlerContext, delay: float) -> None:
        self.ran.append((delay, ctx.now()))


def test_scheduling() -> None:
    """testScheduling: nothing runs before its time; then it runs at its deadline."""
    s = Scheduler([1.0])
    ch = EmbeddedChannel(s)
    assert ch.next_timer_delay() == 1.0
    ch.advance_time(0.5)
    ch.run_pending_tasks()
    assert s.ran == []
    assert ch.next_timer_delay() == 0.5
    ch.advance_time(0.5)
    assert s.ran == [(1.0, 1.0)]
    assert ch.next_timer_delay() is None


def test_advance_time_runs_only_due_timers_in_order() -> None:
    """testAdvanceTime: 10 min and 20 min tasks; advancing 10 min runs only the first."""
    s = Scheduler([1200.0, 600.0, 600.000000001])
    ch = EmbeddedChannel(s)
    ch.advance_time(600)
    assert s.ran == [(600.0, 600.0)]
    ch.advance_time(0.5)
    assert [d for d, _ in s.ran] == [600.0, 600.000000001]
    ch.advance_time(10_000)
    assert [d for d, _ in s.ran] == [600.0, 600.000000001, 1200.0]
    assert s.ran[-1][1] == 1200.0  # a timer sees the clock at its own deadline
    assert ch.now() == 10_600.5


def test_cancelled_timer_never_runs() -> None:
    s = Scheduler([5.0])
    ch = EmbeddedChannel(s)
    s.handles[0].cancel()
    assert s.handles[0].cancelled
    ch.advance_time(10)
    assert s.ran == []


def test_finish_cancels_scheduled_timers() -> None:
    """testScheduledCancelled: a task due in a day dies with finish()."""
    s = Scheduler([86_400.0])
    ch = EmbeddedChannel(s)
    ch.finish()
    assert ch.next_timer_delay() is None
    assert s.ran == []


def test_time_cannot_go_back() -> None:
    ch = EmbeddedChannel()
    with pytest.raises(ValueError):
        ch.advance_time(-1)


def test_timer_exception_goes_to_exception_caught_and_is_raised() -> None:
    class Tick(ChannelInboundHandler):
        def handler_added(self, ctx: HandlerContext) -> None:
            ctx.schedule(1, self.fire)

        def fire(self) -> None:
            raise Boom("timer")

    ch = EmbeddedChannel(Tick())
    with pytest.raises(Boom, match="timer"):
        ch.advance_time(1)
    assert ch.is_open


def test_timer_of_removed_handler_does_not_run() -> None:
    s = Scheduler([1.0])
    ch = EmbeddedChannel(s)
    ch.pipeline.remove(s)
    ch.advance_time(2)
    assert s.ran == []


def test_spawn_needs_a_real_channel() -> None:
    class Spawner(ChannelInboundHandler):
        def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
            async def job() -> None:
                pass

            ctx.spawn(job)

    ch = EmbeddedChannel(Spawner())
    with pytest.raises(RuntimeError, match="nursery"):
        ch.write_inbound(b"x")


# -- writability in the embedded channel ---------------------------------------------------------


class Writability(ChannelDuplexHandler):
    def __init__(self) -> None:
        self.log: list[bool] = []

    def channel_writability_changed(self, ctx: HandlerContext) -> None:
        self.log.append(ctx.channel.is_writable)


def test_water_marks_strict_comparisons() -> None:
    """High is exceeded strictly (>), low is undercut strictly (<); 96 bytes count per message."""
    w = Writability()
    marks = WaterMarks(low=128 + 96, high=256 + 96)
    ch = EmbeddedChannel(w, config=ChannelConfig(water_marks=marks))
    ch.write_one_outbound(b"x" * 256)  # pending 352: not above high
    assert ch.is_writable and w.log == []
    assert ch.bytes_before_unwritable == 1
    ch.write_one_outbound(b"")  # 448 > 352
    assert not ch.statistics().is_writable and w.log == [False]
    assert ch.bytes_before_writable == 448 - 224 + 1
    assert ch.statistics().queued_bytes == 256
    ch.flush_outbound()  # the embedded 'socket' takes everything
    assert ch.is_writable and w.log == [False, True]
    assert ch.statistics().queued_bytes == 0
    assert ch.statistics().bytes_written == 256


def test_writes_snapshot_bytearrays() -> None:
    ch = EmbeddedChannel()
    buf = bytearray(b"original")
    ch.write_one_outbound(buf)
    buf[:] = b"mutated!"
    mv = memoryview(bytearray(b"view"))
    ch.write_one_outbound(mv)
    mv[:] = b"VIEW"
    ch.flush_outbound()
    assert ch.read_outbound() == b"original"
    assert ch.read_outbound() == b"view"


def test_auto_read_and_read_requests() -> None:
    class ReadMore(ChannelInboundHandler):
        def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
            ctx.read()

    ch = EmbeddedChannel(ReadMore(), config=ChannelConfig(auto_read=False))
    assert not ch.auto_read
    ch.write_inbound(b"x")
    assert ch.read_requests == 1
    ch.auto_read = True
    assert ch.read_requests == 2


def test_str_and_statistics() -> None:
    ch = EmbeddedChannel()
    assert "embedded channel" in str(ch)
    assert f"#{ch.id}" in repr(ch)
    stats = ch.statistics()
    assert stats.is_active and stats.is_writable
    assert ch.remote_address is None and ch.local_address is None
    ch.attributes["k"] = "v"
    assert ch.attributes == {"k": "v"}
