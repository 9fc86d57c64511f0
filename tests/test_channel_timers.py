"""Timers: the queue itself, and ``ctx.schedule`` on a stream channel under trio's MockClock."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from hanet import ChannelInboundHandler, HandlerContext, StreamChannel, run_channel
from hanet.channel import TimerQueue


def test_queue_orders_by_deadline_then_insertion() -> None:
    q = TimerQueue()
    ran: list[str] = []
    q.schedule_at(2.0, lambda: ran.append("b"))
    q.schedule_at(1.0, lambda: ran.append("a"))
    q.schedule_at(2.0, lambda: ran.append("c"))
    assert len(q) == 3 and q.next_deadline() == 1.0
    while (cb := q.pop_due(5.0)) is not None:
        cb()
    assert ran == ["a", "b", "c"]
    assert q.next_deadline() == float("inf")


def test_queue_cancel_and_clear() -> None:
    q = TimerQueue()
    h1 = q.schedule_at(1.0, lambda: None)
    h2 = q.schedule_at(2.0, lambda: None)
    h1.cancel()
    h1.cancel()
    assert h1.cancelled and len(q) == 1
    assert q.next_deadline() == 2.0
    assert q.pop_due(1.5) is None
    q.clear()
    assert h2.cancelled and len(q) == 0


def test_queue_wakes_driver_only_for_an_earlier_timer() -> None:
    wakes: list[int] = []
    q = TimerQueue(on_earlier=lambda: wakes.append(1))
    q.schedule_at(5.0, lambda: None)
    q.schedule_at(7.0, lambda: None)
    q.schedule_at(3.0, lambda: None)
    assert len(wakes) == 2


class Ticker(ChannelInboundHandler):
    """Schedules a periodic tick from channel_active; records the clock at each tick."""

    def __init__(self, period: float, count: int) -> None:
        self.period = period
        self.count = count
        self.ticks: list[float] = []

    def channel_active(self, ctx: HandlerContext) -> None:
        ctx.schedule(self.period, lambda: self.tick(ctx))

    def tick(self, ctx: HandlerContext) -> None:
        self.ticks.append(ctx.now())
        if len(self.ticks) < self.count:
            ctx.schedule(self.period, lambda: self.tick(ctx))


def init_with(*handlers: ChannelInboundHandler) -> Callable[[StreamChannel], None]:
    def init(channel: StreamChannel) -> None:
        for h in handlers:
            channel.pipeline.add_last(h)

    return init


async def test_schedule_under_autojump_clock(autojump_clock: trio.testing.MockClock) -> None:
    ticker = Ticker(5.0, 4)
    a, _b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        start = trio.current_time()
        channel: StreamChannel = await nursery.start(run_channel, a, init_with(ticker))
        await trio.sleep(100)
        assert [t - start for t in ticker.ticks] == pytest.approx([5.0, 10.0, 15.0, 20.0])
        await channel.close()


async def test_an_earlier_timer_wakes_the_timer_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fired: list[tuple[str, float]] = []

    class Two(ChannelInboundHandler):
        def channel_active(self, ctx: HandlerContext) -> None:
            ctx.schedule(60, lambda: fired.append(("late", ctx.now())))

        def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
            ctx.schedule(1, lambda: fired.append(("early", ctx.now())))

    a, b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        start = trio.current_time()
        channel: StreamChannel = await nursery.start(run_channel, a, init_with(Two()))
        await trio.sleep(10)
        await b.send_all(b"x")  # at t=10, schedules t=11
        await trio.sleep(100)
        assert [(n, round(t - start)) for n, t in fired] == [("early", 11), ("late", 60)]
        await channel.close()


async def test_cancelled_and_closed_timers_never_fire(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fired: list[str] = []

    class Cancel(ChannelInboundHandler):
        def channel_active(self, ctx: HandlerContext) -> None:
            ctx.schedule(1, lambda: fired.append("cancelled")).cancel()
            ctx.schedule(50, lambda: fired.append("after close"))

    a, _b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel: StreamChannel = await nursery.start(run_channel, a, init_with(Cancel()))
        await trio.sleep(10)
        await channel.close()
        await trio.sleep(100)
    assert fired == []


async def test_timer_error_goes_to_exception_caught(
    autojump_clock: trio.testing.MockClock,
) -> None:
    caught: list[str] = []

    class Faulty(ChannelInboundHandler):
        def channel_active(self, ctx: HandlerContext) -> None:
            ctx.schedule(1, self.fail)

        def fail(self) -> None:
            raise ValueError("timer failed")

        def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
            caught.append(str(exc))

    a, _b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel: StreamChannel = await nursery.start(run_channel, a, init_with(Faulty()))
        await trio.sleep(5)
        assert caught == ["timer failed"]
        assert channel.is_open
        await channel.close()


async def test_channel_schedule_error_closes_the_channel_not_the_run(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    def boom() -> None:
        raise ValueError("raw timer failed")

    a, _b = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        channel: StreamChannel = await nursery.start(run_channel, a, init_with())
        channel.schedule(1, boom)
        await channel.wait_closed()
    assert channel.close_reason == "ValueError: raw timer failed"
    assert any(r.levelno == logging.WARNING for r in caplog.records)


async def test_timers_set_before_active_run_after_start(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fired: list[float] = []
    a, _b = trio.testing.memory_stream_pair()

    def init(channel: StreamChannel) -> None:
        channel.schedule(2, lambda: fired.append(trio.current_time()))

    async with trio.open_nursery() as nursery:
        start = trio.current_time()
        channel: StreamChannel = await nursery.start(functools.partial(run_channel, a, init))
        await trio.sleep(3)
        assert [round(t - start) for t in fired] == [2]
        await channel.close()
