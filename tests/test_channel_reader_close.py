"""StreamChannel over TCP: a socket closed by another task while the reader yields between two
reads ends the channel as a lost connection, and the reader never reads from a descriptor the
closed socket's number was given to since (the kernel hands out the lowest free number, so a
socket opened next can get it)."""

from __future__ import annotations

import functools
import os
import socket
from typing import Any

import trio
from channel_support import tcp_pair

from hanet import ChannelConfig, ChannelInboundHandler, HandlerContext, StreamChannel, run_channel


class Closer(ChannelInboundHandler):
    """Keeps what it reads; at its first read, spawns a task that closes the channel's socket
    (trio's close, as ``aclose`` does) and at once gives its number to one end of a new socket
    pair (``dup2``), with bytes waiting in it."""

    def __init__(self, server: trio.SocketStream) -> None:
        self.server = server
        self.reads: list[bytes] = []
        self.spawned = False
        self.closed_fd = -1
        self.intruder: tuple[socket.socket, socket.socket] | None = None

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        self.reads.append(bytes(msg))
        if not self.spawned:
            self.spawned = True
            ctx.channel.spawn(self._close_and_reuse)

    async def _close_and_reuse(self) -> None:
        inside, outside = socket.socketpair()  # (opened first: neither gets that number)
        inside.setblocking(False)  # (as trio's sockets: a wrong read takes bytes, never hangs)
        self.intruder = (inside, outside)
        self.closed_fd = self.server.socket.fileno()
        self.server.socket.close()
        os.dup2(inside.fileno(), self.closed_fd)
        outside.send(b"intruder" * 16)


async def test_a_socket_closed_while_the_reader_yields_ends_the_channel_unread() -> None:
    client, server = await tcp_pair()
    closer = Closer(server)
    # Small reads of a large send: every read fills its room, so the reader checkpoints
    # between reads instead of waiting, and the closing task runs at one of those checkpoints.
    config = ChannelConfig(read_size=8)
    await client.send_all(b"x" * 65536)

    def init(channel: StreamChannel) -> None:
        channel.pipeline.add_last(closer)

    try:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                channel: StreamChannel = await nursery.start(
                    functools.partial(run_channel, server, init, config=config)
                )
                await channel.wait_closed()
        assert closer.intruder is not None and closer.closed_fd >= 0
        assert all(read == b"x" * len(read) for read in closer.reads)
        assert b"".join(closer.reads) != b"x" * 65536  # closed before everything was read
        assert not channel.is_open
        # What the pair was sent is still there: the reader never touched that descriptor.
        assert closer.intruder[0].recv(1024) == b"intruder" * 16
    finally:
        if closer.intruder is not None:
            os.close(closer.closed_fd)
            for sock in closer.intruder:
                sock.close()
        await client.aclose()
