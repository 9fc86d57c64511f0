"""StreamChannel over TCP: what handlers flush while the reader runs them is written by the
reader's task at the end of the read (no writer task for a request's answer), with Netty's
order of writes, write futures, writability events and a draining close kept."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import trio
import trio.testing
from channel_support import start, tcp_pair

from hanet import (
    ChannelConfig,
    ChannelInboundHandler,
    HandlerContext,
    WaterMarks,
)
from hanet.testing import receive_exactly


class Answerer(ChannelInboundHandler):
    """Answers each read byte with ``size`` copies of it (write and flush per byte), keeps the
    answers' futures, and records writability changes and when each future completed."""

    def __init__(self, size: int, close_after: bool = False) -> None:
        self.size = size
        self.close_after = close_after
        self.futures: list[Any] = []
        self.events: list[str] = []

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if bytes(msg) == b"!":
            ctx.close()
            return
        for byte in bytes(msg):
            answer = bytes([byte]) * self.size
            future = ctx.write_and_flush(answer)
            future.add_done_callback(functools.partial(self._sent, chr(byte)))
            self.futures.append(future)
        if self.close_after:
            ctx.close()

    def _sent(self, letter: str, future: Any) -> None:
        self.events.append(f"sent {letter}")

    def channel_writability_changed(self, ctx: HandlerContext) -> None:
        self.events.append("writable" if ctx.channel.is_writable else "unwritable")


async def test_answers_to_reads_leave_from_the_readers_task(
    live_tasks: Callable[[], int],
) -> None:
    client, server = await tcp_pair()
    answerer = Answerer(100)
    before = live_tasks()
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, server, answerer, None)
        for request in (b"a", b"bc", b"d"):
            await client.send_all(request)
            assert await receive_exactly(client, 100 * len(request)) == b"".join(
                bytes([c]) * 100 for c in request
            )
        await trio.testing.wait_all_tasks_blocked()
        assert live_tasks() == before + 1  # the reader only: no writer task was needed
        assert answerer.events == ["sent a", "sent b", "sent c", "sent d"]
        stats = channel.statistics()
        assert stats.messages_written == 4 and stats.bytes_written == 400
        assert stats.sends == 3  # one gathering write per read ("bc" answered together)
        await client.aclose()
        await channel.wait_closed()


async def test_a_write_the_socket_takes_in_part_keeps_its_order() -> None:
    # Answers of 4 MiB: the socket takes part of the first, the writer task sends the rest,
    # and the answers to the next reads (flushed while it sends) follow it, in order.
    client, server = await tcp_pair()
    size = 4 << 20
    marks = WaterMarks(low=size, high=2 * size)
    answerer = Answerer(size)
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, server, answerer, ChannelConfig(water_marks=marks))
        for request in (b"a", b"b", b"c"):
            await client.send_all(request)
            await trio.sleep(0.01)  # separate reads
        # Three answers queued (12 MiB > the high mark): unwritable until they drain.
        assert "unwritable" in answerer.events
        for letter in b"abc":
            assert await receive_exactly(client, size) == bytes([letter]) * size
        for future in answerer.futures:
            await future
        assert [e for e in answerer.events if e.startswith("sent")] == [
            "sent a",
            "sent b",
            "sent c",
        ]
        assert answerer.events.index("unwritable") < answerer.events.index("writable")
        assert channel.is_writable
        assert channel.statistics().bytes_written == 3 * size
        await client.aclose()
        await channel.wait_closed()


async def test_an_answer_then_close_in_the_same_read_leaves_before_the_close() -> None:
    # Netty: a write and flush reaches the socket before a close that follows it. A large
    # answer is only partly taken by the socket in the read: the rest still leaves, then EOF.
    client, server = await tcp_pair()
    size = 3 << 20
    answerer = Answerer(size, close_after=True)
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, server, answerer, None)
        await client.send_all(b"z")
        assert await receive_exactly(client, size) == b"z" * size
        assert await client.receive_some(1) == b""  # then the close
        await channel.wait_closed()
        await answerer.futures[0]
    await client.aclose()


async def test_a_lost_peer_fails_the_answer_and_closes_the_channel() -> None:
    client, server = await tcp_pair()
    answerer = Answerer(8 << 20)
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, server, answerer, None)
        await client.send_all(b"x")
        await trio.sleep(0.05)  # the answer is part sent, its rest waits for the peer
        await client.aclose()  # which never reads it
        with trio.fail_after(10):
            await channel.wait_closed()
        assert answerer.futures[0].done() and not answerer.futures[0].succeeded()
        # its EOF, its reset (unread data) or the write's error: any of them closes the channel
        reason = channel.close_reason or ""
        assert reason.startswith(("peer closed the connection", "connection lost")), reason


async def test_a_close_while_the_writer_sends_a_rest_lets_it_finish() -> None:
    client, server = await tcp_pair()
    size = 4 << 20
    answerer = Answerer(size)
    async with trio.open_nursery() as nursery:
        channel = await start(nursery, server, answerer, None)
        await client.send_all(b"y")
        await trio.sleep(0.05)  # the socket took part of the answer; the writer has the rest
        await client.send_all(b"!")  # the handler closes
        assert await receive_exactly(client, size) == b"y" * size
        assert await client.receive_some(1) == b""
        await channel.wait_closed()
        await answerer.futures[0]
    await client.aclose()
