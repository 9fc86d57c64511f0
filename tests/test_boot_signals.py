"""run_until_stopped: a service stops on Ctrl-C or SIGTERM as an ordinary cancellation."""

from __future__ import annotations

import os
import signal

import pytest
import trio

from hanet.boot import run_until_stopped


async def test_returns_none_when_the_function_returns() -> None:
    async def quick(value: list[int]) -> None:
        value.append(1)

    seen: list[int] = []
    assert await run_until_stopped(quick, seen) is None
    assert seen == [1]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
async def test_a_stop_signal_cancels_the_function(signum: signal.Signals) -> None:
    cleaned: list[str] = []

    async def forever() -> None:
        try:
            os.kill(os.getpid(), signum)
            await trio.sleep_forever()
        finally:
            cleaned.append("finally ran")

    with trio.fail_after(5):
        assert await run_until_stopped(forever) == signum
    assert cleaned == ["finally ran"]


async def test_an_error_propagates() -> None:
    async def broken() -> None:
        raise ValueError("boom")

    caught = False
    try:
        await run_until_stopped(broken)
    except* ValueError:
        caught = True
    assert caught
