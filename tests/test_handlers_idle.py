"""IdleStateHandler, ReadTimeoutHandler and WriteTimeoutHandler (docs/netty.md §3)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from hanet import (
    ChannelInboundHandler,
    ChannelOutboundHandler,
    HandlerContext,
    StreamChannel,
    WriteFuture,
    run_channel,
)
from hanet.handlers import (
    IdleState,
    IdleStateEvent,
    IdleStateHandler,
    ReadTimeoutError,
    ReadTimeoutHandler,
    WriteTimeoutError,
    WriteTimeoutHandler,
)
from hanet.testing import EmbeddedChannel

NS = 1e-9
R, W, A = IdleState.READER_IDLE, IdleState.WRITER_IDLE, IdleState.ALL_IDLE


class Events(ChannelInboundHandler):
    def __init__(self) -> None:
        self.events: list[Any] = []

    def user_event_triggered(self, ctx: HandlerContext, event: object) -> None:
        self.events.append(event)

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        self.events.append(exc)

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("kwargs", "state"),
    [({"reader_idle": 1}, R), ({"writer_idle": 1}, W), ({"all_idle": 1}, A)],
    ids=["I1", "I2", "I3"],
)
def test_idle_events_every_period(kwargs: dict[str, float], state: IdleState) -> None:
    events = Events()
    ch = EmbeddedChannel(IdleStateHandler(**kwargs), events)
    for _ in range(3):
        ch.advance_time(1)
    assert events.events == [
        IdleStateEvent(state, True),
        IdleStateEvent(state, False),
        IdleStateEvent(state, False),
    ]
    assert str(events.events[0]) == f"IdleStateEvent({state.value}, first)"


def _timeline(kwargs: dict[str, float], action: Any, state: IdleState) -> None:
    events = Events()
    handler = IdleStateHandler(**kwargs)
    ch = EmbeddedChannel(handler, events)
    ch.advance_time(0.5 + NS)
    action(ch, handler)
    ch.advance_time(0.5)
    assert events.events == []
    ch.advance_time(1)
    assert events.events == [IdleStateEvent(state, True)]


def test_i4_i5_reset_timeouts() -> None:
    _timeline(
        {"reader_idle": 1},
        lambda ch, h: h.reset_read_timeout(ch.pipeline.context(h)),
        R,
    )
    _timeline(
        {"writer_idle": 1},
        lambda ch, h: h.reset_write_timeout(ch.pipeline.context(h)),
        W,
    )


def test_i6_i7_i8_activity_keeps_the_channel_busy() -> None:
    _timeline({"reader_idle": 1}, lambda ch, h: ch.write_inbound("Hello, World!"), R)
    _timeline({"writer_idle": 1}, lambda ch, h: ch.write_outbound(b"Hello, World!"), W)
    _timeline({"all_idle": 1}, lambda ch, h: ch.write_inbound("Hello, World!"), A)
    _timeline({"all_idle": 1}, lambda ch, h: ch.write_outbound(b"Hello, World!"), A)


def test_write_not_flushed_does_not_count() -> None:
    events = Events()
    ch = EmbeddedChannel(IdleStateHandler(writer_idle=1), events)
    ch.advance_time(0.5)
    ch.write_one_outbound(b"x")
    ch.advance_time(0.6)
    assert events.events == [IdleStateEvent(W, True)]


def test_first_rearmed_by_activity_and_timers_stop_on_close() -> None:
    events = Events()
    ch = EmbeddedChannel(IdleStateHandler(reader_idle=1), events)
    ch.advance_time(2)
    ch.write_inbound(b"x")
    ch.advance_time(1)
    assert [e.first for e in events.events] == [True, False, True]
    ch.close()
    assert ch.next_timer_delay() is None


def test_zero_disables_and_handler_added_when_active_starts_timers() -> None:
    events = Events()
    ch = EmbeddedChannel(events)
    ch.pipeline.add_first(IdleStateHandler(0, 0, 0))
    ch.advance_time(100)
    assert events.events == []
    ch.pipeline.add_first(IdleStateHandler(reader_idle=2))
    ch.advance_time(2)
    assert events.events == [IdleStateEvent(R, True)]


def test_read_timeout_fires_once_and_closes() -> None:
    events = Events()
    ch = EmbeddedChannel(ReadTimeoutHandler(3), events)
    ch.advance_time(2)
    ch.write_inbound(b"x")
    ch.advance_time(2.5)
    open_before = ch.is_open
    ch.advance_time(1)
    assert events.events[0:1] != [] and isinstance(events.events[0], ReadTimeoutError)
    assert len(events.events) == 1
    assert open_before and not ch.is_open
    assert ch.close_reason == "read timeout (3 s)"


class Hold(ChannelOutboundHandler):
    """Keeps writes pending forever (a peer that never reads)."""

    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        pass


def test_write_timeout() -> None:
    events = Events()
    ch = EmbeddedChannel(Hold(), WriteTimeoutHandler(2), events)
    ch.write_outbound(b"x")
    ch.advance_time(1.9)
    open_before = ch.is_open
    ch.advance_time(0.2)
    assert isinstance(events.events[0], WriteTimeoutError)
    assert open_before and not ch.is_open


def test_completed_write_cancels_its_timeout() -> None:
    events = Events()
    ch = EmbeddedChannel(WriteTimeoutHandler(1), events)
    ch.write_outbound(b"x")
    ch.advance_time(5)
    assert events.events == [] and ch.is_open


async def test_idle_over_a_stream_in_virtual_time(autojump_clock: trio.testing.MockClock) -> None:
    events = Events()
    left, right = trio.testing.memory_stream_pair()

    def init(channel: StreamChannel) -> None:
        channel.pipeline.add_last(IdleStateHandler(reader_idle=20, writer_idle=5))
        channel.pipeline.add_last(events)

    async with trio.open_nursery() as nursery:
        await nursery.start(run_channel, left, init)
        start = trio.current_time()
        await trio.sleep(19)
        await right.send_all(b"x")
        await trio.sleep(20.5)
        nursery.cancel_scope.cancel()
    kinds = [(e.state, e.first) for e in events.events]
    assert kinds.count((W, True)) == 1
    assert (R, True) in kinds
    assert trio.current_time() - start >= 39


async def test_read_timeout_closes_a_stream_channel(
    autojump_clock: trio.testing.MockClock,
) -> None:
    left, _right = trio.testing.memory_stream_pair()

    def init(channel: StreamChannel) -> None:
        channel.pipeline.add_last(ReadTimeoutHandler(20))

    async with trio.open_nursery() as nursery:
        channel = await nursery.start(run_channel, left, init)
        start = trio.current_time()
        await channel.wait_closed()
        assert 20 <= trio.current_time() - start < 21
    assert channel.close_reason is not None
    assert "nothing read for 20 s" in channel.close_reason
