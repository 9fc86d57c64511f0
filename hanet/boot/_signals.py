"""Run a service until Ctrl-C or SIGTERM, as an ordinary cancellation.

By default trio turns Ctrl-C into a ``KeyboardInterrupt`` raised wherever the main thread
happens to be, even inside a nursery's exit, which can leave trio's state corrupted ("Nursery
stack corrupted") and the process hanging or failing. A long-running service should instead
receive SIGINT like SIGTERM and cancel itself: :func:`run_until_stopped` does that.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import trio

__all__ = ["STOP_SIGNALS", "run_until_stopped"]

log = logging.getLogger("hanet.boot")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals :func:`run_until_stopped` stops on."""


async def run_until_stopped(
    async_fn: Callable[..., Awaitable[Any]], *args: Any
) -> signal.Signals | None:
    """Run ``async_fn(*args)`` until it returns, or until SIGINT (Ctrl-C) or SIGTERM arrives,
    which cancels it.

    Returns the signal that stopped it, or None when it returned by itself. An exception it
    raises propagates. The signals are taken from the first moment on, so a Ctrl-C during
    start-up is a cancellation too.
    """
    received: signal.Signals | None = None
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async with trio.open_nursery() as nursery:

            async def run_then_stop() -> None:
                await async_fn(*args)
                nursery.cancel_scope.cancel()

            nursery.start_soon(run_then_stop)
            async for signum in signals:
                received = signal.Signals(signum)
                log.info("%s: stopping", received.name)
                nursery.cancel_scope.cancel()
                break
    return received
