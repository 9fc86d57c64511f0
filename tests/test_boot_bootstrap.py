"""Real loopback TCP: a server and several clients echoing through length-field framed
pipelines; a client that sends an oversize length is disconnected with a logged reason while
the others keep echoing."""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Callable
from typing import Any

import pytest
import trio

from hanet import (
    ChannelInboundHandler,
    HandlerContext,
    Server,
    StreamChannel,
    connect,
    serve,
)
from hanet.handlers import LengthFieldBasedFrameDecoder, LengthFieldPrepender

MAX_FRAME = 64 * 1024


class Echo(ChannelInboundHandler):
    sharable = True

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        ctx.write(bytes(msg))

    def channel_read_complete(self, ctx: HandlerContext) -> None:
        ctx.flush()


class Collect(ChannelInboundHandler):
    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.changed = trio.Event()

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        self.frames.append(bytes(msg))
        self.changed.set()

    async def wait_for(self, n: int) -> None:
        while len(self.frames) < n:
            self.changed = trio.Event()
            await self.changed.wait()


def framed(*extra: Callable[[], ChannelInboundHandler]) -> Callable[[StreamChannel], None]:
    """4-byte big-endian length prefix, stripped on the way in, added on the way out."""

    def init(channel: StreamChannel) -> None:
        channel.pipeline.add_last(LengthFieldBasedFrameDecoder(MAX_FRAME, 0, 4, 0, 4))
        channel.pipeline.add_last(LengthFieldPrepender(4))
        for factory in extra:
            channel.pipeline.add_last(factory())

    return init


async def start_echo_server(nursery: trio.Nursery) -> Server:
    echo = Echo()
    server: Server = await nursery.start(
        functools.partial(serve, framed(lambda: echo), 0, host="127.0.0.1")
    )
    return server


async def echo_client(port: int, seed: int, rounds: int, results: dict[int, bool]) -> None:
    rng = random.Random(seed)
    collect = Collect()
    async with trio.open_nursery() as nursery:
        channel: StreamChannel = await nursery.start(
            connect, "127.0.0.1", port, framed(lambda: collect)
        )
        sent: list[bytes] = []
        for r in range(rounds):
            batch = [rng.randbytes(rng.randrange(0, 20_000)) for _ in range(rng.randrange(1, 8))]
            for frame in batch:
                channel.pipeline.write(frame)
            channel.pipeline.flush()
            sent += batch
            with trio.fail_after(10):
                await collect.wait_for(len(sent))
            if r % 10 == 0:
                await trio.sleep(0.001)
        results[seed] = collect.frames == sent
        await channel.close()


async def test_clients_echo_through_framed_pipelines() -> None:
    results: dict[int, bool] = {}
    async with trio.open_nursery() as nursery:
        server = await start_echo_server(nursery)
        async with trio.open_nursery() as clients:
            for seed in range(5):
                clients.start_soon(echo_client, server.port, seed, 30, results)
        assert results == dict.fromkeys(range(5), True)
        await trio.testing.wait_all_tasks_blocked()
        stats = server.statistics()
        assert stats.connections_accepted == 5
        assert stats.connections_failed == 0
        assert stats.bytes_read == stats.bytes_written > 0
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param((MAX_FRAME + 1).to_bytes(4, "big") + b"x" * 100, id="oversize-length"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: example\r\n\r\n", id="http-request"),
    ],
)
async def test_a_garbage_client_is_disconnected_while_others_echo(
    garbage: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    results: dict[int, bool] = {}
    async with trio.open_nursery() as nursery:
        server = await start_echo_server(nursery)
        async with trio.open_nursery() as clients:
            for seed in range(3):
                clients.start_soon(echo_client, server.port, seed, 40, results)
            await trio.sleep(0.01)
            bad = await trio.open_tcp_stream("127.0.0.1", server.port)
            bad_port = bad.socket.getsockname()[1]
            await bad.send_all(garbage)
            with trio.fail_after(5):
                while True:  # the server closes it: EOF (or a reset)
                    try:
                        if not await bad.receive_some(65536):
                            break
                    except trio.BrokenResourceError:
                        break
            await bad.aclose()
        assert results == dict.fromkeys(range(3), True)
        stats = server.statistics()
        assert stats.connections_accepted == 4
        assert stats.connections_failed == 0  # bad input closes a connection; no failure
        nursery.cancel_scope.cancel()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    message = warnings[0].getMessage()
    assert f"127.0.0.1:{bad_port}" in message
    assert "TooLongFrameError" in message
