"""WriteFuture: sync callbacks for handlers, awaitable for tasks."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from hanet import WriteFuture


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
