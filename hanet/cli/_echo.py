"""The ``hanet echo-demo`` verb: an echo server and a reconnecting client in one process.

It runs on loopback for a few seconds, restarts the server half-way so the client reconnects
inside the same ``trio.run``, prints what was echoed and the channel and server statistics, and
exits 0 when every message came back. It uses the core only (bytes in, the same bytes out); the
framed version with a heartbeat is ``examples/echo_server.py`` and ``examples/echo_client.py``.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

import trio

from hanet.boot import ReconnectingClient, RetryPolicy, Server, serve, tcp_connector
from hanet.channel import Channel, ChannelInboundHandler, HandlerContext, StreamChannel

__all__ = ["register"]

HOST = "127.0.0.1"


def register(subparsers: Any) -> None:
    """Add the ``echo-demo`` verb to the ``hanet`` parser."""
    parser = subparsers.add_parser(
        "echo-demo",
        description="Echo messages over loopback TCP through hanet pipelines, restart the "
        "server half-way (the client reconnects), print the echoes and the statistics.",
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="how long to run (3)")
    parser.add_argument("--interval", type=float, default=0.25, help="seconds between messages")
    parser.add_argument("--port", type=int, default=0, help="server port (0: any free one)")
    parser.set_defaults(func=echo_demo)


class _Echo(ChannelInboundHandler):
    """Server side: writes back what it reads, flushing once per batch of reads."""

    sharable = True

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        ctx.write(msg)

    def channel_read_complete(self, ctx: HandlerContext) -> None:
        ctx.flush()


class _Talker(ChannelInboundHandler):
    """Client side: sends a numbered message every ``interval`` seconds and checks that each
    comes back (one message in flight at a time, so TCP cannot merge two)."""

    def __init__(self, demo: _Demo) -> None:
        self.demo = demo
        self.pending = b""
        self.buf = b""

    def channel_active(self, ctx: HandlerContext) -> None:
        self.send(ctx)

    def send(self, ctx: HandlerContext) -> None:
        if not ctx.channel.is_active:
            return
        self.demo.sent += 1
        self.pending = b"hello #%d" % self.demo.sent
        self.buf = b""
        ctx.write_and_flush(self.pending)

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        self.buf += bytes(msg)
        if len(self.buf) < len(self.pending):
            return
        if self.buf != self.pending:
            raise ValueError(f"sent {self.pending!r}, got {self.buf!r} back")
        self.demo.echoed(ctx.channel, self.buf)
        self.pending = b""
        ctx.schedule(self.demo.interval, lambda: self.send(ctx))

    def channel_inactive(self, ctx: HandlerContext) -> None:
        if self.pending:
            self.demo.lost += 1  # in flight when the server went away: sent again later
            self.pending = b""


class _Demo:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.sent = 0
        self.received = 0
        self.lost = 0
        self.channels: list[StreamChannel] = []

    def echoed(self, channel: Channel, msg: bytes) -> None:
        self.received += 1
        print(f"  {channel}: echoed {msg!r}", flush=True)

    def on_connect(self, channel: StreamChannel) -> None:
        self.channels.append(channel)
        print(f"client connected: {channel} from {channel.local_address}", flush=True)

    def on_disconnect(self, channel: StreamChannel) -> None:
        print(f"client disconnected: {channel} ({channel.close_reason})", flush=True)


async def echo_demo(args: argparse.Namespace) -> int:
    """Run the demo; returns 0 when every message that was not cut off came back."""
    demo = _Demo(args.interval)
    echo = _Echo()

    def server_init(channel: StreamChannel) -> None:
        channel.pipeline.add_last(echo)  # sharable: one instance serves every connection

    def client_init(channel: StreamChannel) -> None:
        channel.pipeline.add_last(_Talker(demo))  # not sharable: one per connection

    half = args.seconds / 2
    port = args.port
    servers: list[Server] = []
    client: ReconnectingClient | None = None
    async with trio.open_nursery() as nursery:
        for run in (1, 2):
            async with trio.open_nursery() as server_nursery:
                server: Server = await server_nursery.start(
                    functools.partial(serve, server_init, port, host=HOST)
                )
                servers.append(server)
                port = server.port
                print(f"server #{run} listening on {HOST}:{port}", flush=True)
                if client is None:
                    client = ReconnectingClient(
                        tcp_connector(HOST, port),
                        client_init,
                        policy=RetryPolicy(initial_delay=0.05, max_delay=0.5, jitter=0.1),
                        on_connect=demo.on_connect,
                        on_disconnect=demo.on_disconnect,
                        name="echo client",
                    )
                    nursery.start_soon(client.run)
                await trio.sleep(half)
                if run == 1:
                    print("stopping the server (the client will reconnect)", flush=True)
                server_nursery.cancel_scope.cancel()
        nursery.cancel_scope.cancel()

    assert client is not None
    print()
    print(f"messages sent {demo.sent}, echoed {demo.received}, cut off by the restart {demo.lost}")
    for channel in demo.channels:
        print(f"{channel}: {channel.statistics()}")
    for i, server in enumerate(servers, 1):
        print(f"server #{i}: {server.statistics()}")
    print(f"client: {client.statistics()}")
    ok = (
        demo.received > 0 and demo.received + demo.lost >= demo.sent - 1 and len(demo.channels) >= 2
    )
    return 0 if ok else 1
