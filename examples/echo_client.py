"""A length-field framed echo client with a heartbeat; it reconnects when the server restarts.

Run (with ``python examples/echo_server.py --port 9000`` running)::

    python examples/echo_client.py --port 9000

It sends a numbered message every ``--interval`` seconds and prints each echo. When it has
written nothing for ``--heartbeat`` seconds it sends a heartbeat (an empty frame); when it has
heard nothing for three heartbeats it closes the connection. Whenever the connection is lost (the
server stopped, restarted, or went silent) a :class:`hanet.ReconnectingClient` connects again,
with backoff, inside the same ``trio.run``. ``--count N`` exits 0 after N echoes.

Pipeline of each connection (a fresh one per connection: these handlers keep state)::

    IdleStateHandler -> LengthFieldBasedFrameDecoder -> LengthFieldPrepender -> ClientHandler
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

import trio

from hanet import (
    ChannelInboundHandler,
    HandlerContext,
    ReconnectingClient,
    RetryPolicy,
    StreamChannel,
    TimerHandle,
    tcp_connector,
)
from hanet.handlers import (
    IdleState,
    IdleStateEvent,
    IdleStateHandler,
    LengthFieldBasedFrameDecoder,
    LengthFieldPrepender,
)

MAX_FRAME = 1024 * 1024
log = logging.getLogger("echo_client")


class Progress:
    """What the client has done, across connections."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.sent = 0
        self.echoed = 0
        self.heartbeats = 0
        self.done = trio.Event()


class ClientHandler(ChannelInboundHandler):
    def __init__(self, progress: Progress, interval: float) -> None:
        self.progress = progress
        self.interval = interval
        self.timer: TimerHandle | None = None

    def channel_active(self, ctx: HandlerContext) -> None:
        log.info("connected to %s", ctx.channel.remote_address)
        self.send_next(ctx)

    def send_next(self, ctx: HandlerContext) -> None:
        self.progress.sent += 1
        ctx.write_and_flush(b"message #%d" % self.progress.sent)
        self.timer = ctx.schedule(self.interval, lambda: self.send_next(ctx))

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        frame = bytes(msg)
        if not frame:
            self.progress.heartbeats += 1  # the server answered a heartbeat
            return
        self.progress.echoed += 1
        print(f"echo: {frame.decode()}", flush=True)
        if self.progress.count and self.progress.echoed >= self.progress.count:
            self.progress.done.set()

    def user_event_triggered(self, ctx: HandlerContext, event: object) -> None:
        if not isinstance(event, IdleStateEvent):
            ctx.fire_user_event_triggered(event)
        elif event.state is IdleState.WRITER_IDLE:
            ctx.write_and_flush(b"")  # heartbeat
        elif event.state is IdleState.READER_IDLE:
            ctx.close("server silent too long")

    def channel_inactive(self, ctx: HandlerContext) -> None:
        if self.timer is not None:
            self.timer.cancel()
        log.info("disconnected (%s)", ctx.channel.close_reason)

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        log.warning("closing: %r", exc)
        ctx.close(f"error: {exc}")


async def main(args: argparse.Namespace) -> int:
    progress = Progress(args.count)

    def init(channel: StreamChannel) -> None:
        channel.pipeline.add_last(
            IdleStateHandler(reader_idle=3 * args.heartbeat, writer_idle=args.heartbeat)
        )
        channel.pipeline.add_last(LengthFieldBasedFrameDecoder(MAX_FRAME, 0, 4, 0, 4))
        channel.pipeline.add_last(LengthFieldPrepender(4))
        channel.pipeline.add_last(ClientHandler(progress, args.interval))

    client = ReconnectingClient(
        tcp_connector(args.host, args.port),
        init,
        policy=RetryPolicy(initial_delay=0.5, max_delay=5.0, multiplier=2.0, jitter=0.2),
        name="echo client",
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        await progress.done.wait()
        nursery.cancel_scope.cancel()
    print(
        f"sent {progress.sent}, echoed {progress.echoed}, heartbeats {progress.heartbeats}, "
        f"{client.statistics()}",
        flush=True,
    )
    return 0


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Length-field framed echo client.")
    parser.add_argument("--host", default="127.0.0.1", help="server address (127.0.0.1)")
    parser.add_argument("--port", type=int, default=9000, help="server port (9000)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between messages")
    parser.add_argument("--heartbeat", type=float, default=5.0, help="heartbeat after idle s")
    parser.add_argument("--count", type=int, default=0, help="exit after N echoes (0: never)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    status = 130  # unless main returns: Ctrl-C arrives as an exception group
    try:
        status = trio.run(main, args)
    except* KeyboardInterrupt:
        log.info("stopped")
    return status


if __name__ == "__main__":
    sys.exit(cli())
