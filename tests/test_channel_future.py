"""WriteFuture: sync callbacks for handlers, awaitable for tasks; a dropped one is reported."""

from __future__ import annotations

import gc
import logging
from typing import Any

import pytest
import trio
import trio.testing

from hanet import ChannelOutboundHandler, HandlerContext, WriteFuture
from hanet.channel import combine_futures
from hanet.testing import EmbeddedChannel


def test_callbacks_run_once_on_completion() -> None:
    future = WriteFuture()
    seen: list[str] = []
    future.add_done_callback(lambda f: seen.append(f"first {f.succeeded()}"))
    future.add_done_callback(lambda f: seen.append("second"))
    assert not future.done() and seen == []
    assert future.set_result() is True
    assert future.set_result() is False
    assert future.set_exception(ValueError()) is False
    assert seen == ["first True", "second"]
    future.add_done_callback(lambda f: seen.append("late"))  # runs at once
    assert seen[-1] == "late"
    assert future.exception() is None
    assert "done" in repr(future)


def test_failure() -> None:
    future = WriteFuture()
    assert "pending" in repr(future)
    exc = OSError("gone")
    assert future.set_exception(exc)
    assert future.done() and not future.succeeded()
    assert future.exception() is exc
    assert "failed" in repr(future)


def test_callback_error_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    future = WriteFuture()
    seen: list[int] = []

    def bad(f: WriteFuture) -> None:
        raise RuntimeError("listener bug")

    future.add_done_callback(bad)
    future.add_done_callback(lambda f: seen.append(1))
    future.set_result()  # does not raise
    assert seen == [1]
    future.add_done_callback(bad)  # already done: still only logged
    records = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(records) == 2
    assert "listener bug" in records[0].getMessage()


async def test_await_waits_and_raises() -> None:
    future = WriteFuture()
    failed = WriteFuture()
    order: list[str] = []

    async def waiter() -> None:
        await future
        order.append("ok")
        with pytest.raises(KeyError):
            await failed
        order.append("failed")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert order == []
        future.set_result()
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["ok"]
        failed.set_exception(KeyError("k"))
    assert order == ["ok", "failed"]


async def test_await_done_future_checkpoints() -> None:
    future = WriteFuture()
    future.set_result()
    with trio.CancelScope() as scope:
        scope.cancel()
        await future  # a checkpoint: raises Cancelled, absorbed by the scope
        raise AssertionError("not reached")  # pragma: no cover
    assert scope.cancelled_caught


async def test_cancelling_the_waiter_does_not_cancel_the_write() -> None:
    future = WriteFuture()
    with trio.move_on_after(0.01):
        await future
    assert not future.done()
    future.set_result()
    await future


class _Swallow(ChannelOutboundHandler):
    """A buggy outbound handler: takes the write and forgets its future."""

    def __init__(self) -> None:
        self.messages: list[Any] = []

    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        self.messages.append(msg)


class _Pass(ChannelOutboundHandler):
    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        ctx.write(msg, future)


def _dropped(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "garbage-collected without being completed" in r.message]


def test_a_dropped_write_future_is_reported_with_the_handler(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Netty's leak detector role: the handler that swallowed the write is named."""
    caplog.set_level(logging.WARNING, "hanet.channel")
    ch = EmbeddedChannel(_Pass())
    ch.pipeline.add_first(_Swallow(), name="swallow")
    ch.write_and_flush_nowait(b"lost")  # the future is not kept: it dies with the write
    gc.collect()
    records = _dropped(caplog)
    assert len(records) == 1
    assert records[0].levelno == logging.WARNING
    assert "'swallow' (_Swallow)" in records[0].message
    assert str(ch) in records[0].message


def test_a_kept_future_is_reported_only_once_dropped(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "hanet.channel")
    ch = EmbeddedChannel(_Swallow())
    future = ch.write_and_flush_nowait(b"lost")
    gc.collect()
    assert not _dropped(caplog)
    assert not future.done()
    del future
    gc.collect()
    assert len(_dropped(caplog)) == 1


def test_completed_passed_on_and_queued_futures_are_not_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "hanet.channel")
    ch = EmbeddedChannel(_Pass(), _Pass())
    ch.write_and_flush_nowait(b"sent")
    # Written, never flushed: queued at the head; dropped with the channel, not by a handler.
    ch.pipeline.write(b"queued")
    WriteFuture()  # never written: nobody received it
    del ch
    gc.collect()
    assert not _dropped(caplog)


def test_a_future_in_a_reference_cycle_is_reported_by_gc_collect(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "hanet.channel")
    ch = EmbeddedChannel(_Swallow())
    future = ch.write_and_flush_nowait(b"lost")
    holder: list[Any] = [future]
    holder.append(holder.clear)  # holder -> its bound method -> holder: with the future
    future.add_done_callback(holder[-1])  # future -> callback -> holder -> future
    del future, holder
    assert not _dropped(caplog)
    gc.collect()
    assert len(_dropped(caplog)) == 1


def test_a_combined_future_blames_only_the_handler_that_dropped_a_part(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Split(ChannelOutboundHandler):
        def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
            combine_futures([ctx.write(msg[:1]), ctx.write(msg[1:])], future)

    caplog.set_level(logging.WARNING, "hanet.channel")
    ch = EmbeddedChannel(_Swallow(), Split())
    ch.write_and_flush_nowait(b"ab")
    gc.collect()
    records = _dropped(caplog)
    assert len(records) == 2  # both parts, each dropped by _Swallow; not the combined one
    assert all("(_Swallow)" in r.message for r in records)
