"""Reconnect soak over real loopback TCP: 2,000 connect/close cycles in one trio run, against a
server stopped and restarted every 200 cycles; nothing leaks (file descriptors, tasks).

This is the answer to the 'failed to open a new selector / Too many open files' failure behind
the project (docs/netty.md §7): a reconnect is a new channel in the same run, and nothing of a
closed connection survives it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import pytest
import trio

from hanet import (
    ChannelInboundHandler,
    HandlerContext,
    ReconnectingClient,
    RetryPolicy,
    Server,
    StreamChannel,
    serve,
    tcp_connector,
)

CYCLES = 2_000
RESTART_EVERY = 200


class Echo(ChannelInboundHandler):
    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        ctx.write_and_flush(msg)


def init_echo(channel: StreamChannel) -> None:
    channel.pipeline.add_last(Echo())


class PingOnce(ChannelInboundHandler):
    """Sends one ping, checks the echo, closes: one full connect/close cycle."""

    def __init__(self, done: Callable[[], None]) -> None:
        self.done = done
        self.buf = b""
        self.ping = b""

    def channel_active(self, ctx: HandlerContext) -> None:
        self.ping = b"ping %d" % ctx.channel.id
        ctx.write_and_flush(self.ping)

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        self.buf += bytes(msg)
        if len(self.buf) >= len(self.ping):
            assert self.buf == self.ping
            self.done()
            ctx.close("cycle done")


@pytest.mark.slow
async def test_reconnect_soak_leaks_nothing(
    open_fds: Callable[[], int], live_tasks: Callable[[], int]
) -> None:
    fds_before = open_fds()
    tasks_before = live_tasks()
    started = time.monotonic()

    echoed = 0
    target = RESTART_EVERY
    reached = trio.Event()

    def one_done() -> None:
        nonlocal echoed
        echoed += 1
        if echoed == target:
            reached.set()

    port = 0
    client: ReconnectingClient | None = None
    restarts = 0
    async with trio.open_nursery() as nursery:
        for _ in range(CYCLES // RESTART_EVERY):
            async with trio.open_nursery() as server_nursery:
                server: Server = await server_nursery.start(
                    functools.partial(serve, init_echo, port, host="127.0.0.1")
                )
                restarts += 1
                if client is None:
                    port = server.port

                    def init(channel: StreamChannel) -> None:
                        channel.pipeline.add_last(PingOnce(one_done))

                    client = ReconnectingClient(
                        tcp_connector("127.0.0.1", port),
                        init,
                        policy=RetryPolicy(
                            initial_delay=0.0, max_delay=0.02, multiplier=2, jitter=0.0
                        ),
                    )
                    nursery.start_soon(client.run)
                with trio.fail_after(30):
                    await reached.wait()
                assert server.statistics().connections_accepted >= RESTART_EVERY
                # Stop the server: its listener and every open channel close with it.
                server_nursery.cancel_scope.cancel()
            reached = trio.Event()
            target += RESTART_EVERY
        nursery.cancel_scope.cancel()

    assert client is not None
    stats = client.statistics()
    assert echoed >= CYCLES
    assert stats.connects >= CYCLES
    assert restarts == CYCLES // RESTART_EVERY
    assert open_fds() == fds_before
    assert live_tasks() == tasks_before
    assert time.monotonic() - started < 20
