"""A length-field framed echo server with an idle heartbeat.

Run::

    python examples/echo_server.py --port 9000

then, in another terminal, ``python examples/echo_client.py --port 9000``. Stop the server with
Ctrl-C and start it again: the client reconnects.

Each frame is a 4-byte big-endian length and that many bytes. The server writes every frame
back; an empty frame is the client's heartbeat and is answered with an empty frame. A client
silent for ``--idle`` seconds (no message, no heartbeat) is closed. The pipeline of each
connection::

    IdleStateHandler -> LengthFieldBasedFrameDecoder -> LengthFieldPrepender -> EchoHandler

The idle handler sits first so it sees every read and every write.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from typing import Any

import trio

from hanet import ChannelInboundHandler, HandlerContext, Server, StreamChannel, serve
from hanet.boot import run_until_stopped
from hanet.handlers import (
    IdleState,
    IdleStateEvent,
    IdleStateHandler,
    LengthFieldBasedFrameDecoder,
    LengthFieldPrepender,
)

MAX_FRAME = 1024 * 1024
log = logging.getLogger("echo_server")


class EchoHandler(ChannelInboundHandler):
    """Writes every frame back (flushing once per batch of reads); closes idle clients."""

    sharable = True  # stateless: one instance serves every connection

    def channel_active(self, ctx: HandlerContext) -> None:
        log.info("%s connected", ctx.channel)

    def channel_inactive(self, ctx: HandlerContext) -> None:
        log.info("%s disconnected (%s)", ctx.channel, ctx.channel.close_reason)

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        ctx.write(bytes(msg))  # an empty frame (heartbeat) is answered with one

    def channel_read_complete(self, ctx: HandlerContext) -> None:
        ctx.flush()

    def user_event_triggered(self, ctx: HandlerContext, event: object) -> None:
        if isinstance(event, IdleStateEvent) and event.state is IdleState.READER_IDLE:
            ctx.close("client silent too long")
        else:
            ctx.fire_user_event_triggered(event)

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        log.warning("%s: closing: %r", ctx.channel, exc)
        ctx.close(f"bad input: {exc}")


def initializer(idle: float) -> Any:
    echo = EchoHandler()

    def init(channel: StreamChannel) -> None:
        channel.pipeline.add_last(IdleStateHandler(reader_idle=idle))
        channel.pipeline.add_last(LengthFieldBasedFrameDecoder(MAX_FRAME, 0, 4, 0, 4))
        channel.pipeline.add_last(LengthFieldPrepender(4))
        channel.pipeline.add_last(echo)

    return init


async def main(args: argparse.Namespace) -> None:
    async with trio.open_nursery() as nursery:
        server: Server = await nursery.start(
            functools.partial(serve, initializer(args.idle), args.port, host=args.host)
        )
        log.info("echo server on %s:%d (Ctrl-C to stop)", args.host, server.port)
        if args.seconds:
            await trio.sleep(args.seconds)
            log.info("%s", server.statistics())
            nursery.cancel_scope.cancel()


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Length-field framed echo server.")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, default=9000, help="port (9000; 0 picks one)")
    parser.add_argument("--idle", type=float, default=15.0, help="close clients silent this long")
    parser.add_argument(
        "--seconds", type=float, default=0.0, help="stop after this long (0: never)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    return trio.run(until_stopped, args)


async def until_stopped(args: argparse.Namespace) -> int:
    """Serve until ``--seconds`` pass (0) or Ctrl-C / SIGTERM (130), taken as a cancellation
    (see :func:`hanet.boot.run_until_stopped`)."""
    received = await run_until_stopped(main, args)
    log.info("stopped")
    return 0 if received is None else 130


if __name__ == "__main__":
    sys.exit(cli())
