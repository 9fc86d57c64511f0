"""A line-based chat server: every line a client sends goes to every other client.

Run::

    python examples/chat_server.py --port 9001

then connect a few terminals with ``nc 127.0.0.1 9001`` (or ``telnet``) and type. ``bye``
leaves; a client silent for ``--idle`` seconds is told so and disconnected. Stop the server
with Ctrl-C. A Netty user knows the shape (Netty's telnet and secure chat examples); the
pipeline of each connection::

    IdleStateHandler -> LineBasedFrameDecoder -> StringDecoder -> StringEncoder -> ChatHandler

Lines end with ``\\n`` or ``\\r\\n``; one longer than ``--max-line`` bytes is dropped and its
sender told. Every connection joins one :class:`hanet.ChannelGroup`, which broadcasts with
``group.write_and_flush(text, matcher)`` and leaves the group by itself when it closes.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections.abc import Callable

import trio

from hanet import Channel, ChannelGroup, ChannelHandler, HandlerContext, Server, serve
from hanet.boot import run_until_stopped
from hanet.channel import format_address
from hanet.handlers import (
    IdleState,
    IdleStateEvent,
    IdleStateHandler,
    LineBasedFrameDecoder,
    SimpleChannelInboundHandler,
    StringDecoder,
    StringEncoder,
    TooLongFrameError,
)

MAX_LINE = 1024
log = logging.getLogger("chat_server")


def nick(channel: Channel) -> str:
    """How a client is called in the chat: its address, else its channel number."""
    address = channel.remote_address
    return format_address(address) if address else f"#{channel.id}"


class ChatHandler(SimpleChannelInboundHandler[str]):
    """Joins each client to the group, broadcasts its lines to the others, says goodbye on
    ``bye`` and to clients idle too long. Sharable: its only state is the group."""

    sharable = True

    def __init__(self, group: ChannelGroup, idle: float, max_line: int = MAX_LINE) -> None:
        super().__init__()
        self.group = group
        self.idle = idle
        self.max_line = max_line

    def channel_active(self, ctx: HandlerContext) -> None:
        me = ctx.channel
        ctx.write_and_flush(f"Welcome, {nick(me)}! {len(self.group)} other(s) here.\n")
        self.group.write_and_flush(f"[{nick(me)}] joined\n")
        self.group.add(me)
        log.info("%s joined", nick(me))
        ctx.fire_channel_active()

    def channel_read0(self, ctx: HandlerContext, msg: str) -> None:
        me = ctx.channel
        if msg.strip().lower() == "bye":
            ctx.write_and_flush("Bye!\n")
            ctx.close("said bye")  # the goodbye is flushed first, so it is delivered
            return
        self.group.write_and_flush(f"[{nick(me)}] {msg}\n", lambda c: c is not me)
        ctx.write_and_flush(f"[you] {msg}\n")

    def channel_inactive(self, ctx: HandlerContext) -> None:
        me = ctx.channel
        self.group.remove(me)
        self.group.write_and_flush(f"[{nick(me)}] left\n")
        log.info("%s left (%s)", nick(me), me.close_reason)
        ctx.fire_channel_inactive()

    def user_event_triggered(self, ctx: HandlerContext, event: object) -> None:
        if isinstance(event, IdleStateEvent) and event.state is IdleState.READER_IDLE:
            ctx.write_and_flush(f"Silent for {self.idle:g} s: bye.\n")
            ctx.close("idle")
        else:
            ctx.fire_user_event_triggered(event)

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        if isinstance(exc, TooLongFrameError):
            # LineBasedFrameDecoder dropped the line and goes on with the next one.
            ctx.write_and_flush(f"Line too long (more than {self.max_line} bytes): dropped.\n")
            return
        log.warning("%s: closing: %r", ctx.channel, exc)
        ctx.close(f"error: {exc}")


def pipeline_handlers(
    chat: ChatHandler, idle: float = 60.0, max_line: int = MAX_LINE
) -> list[ChannelHandler]:
    """One connection's handlers, head to tail: fresh decoders and idle handler, the shared
    string codecs and chat handler."""
    return [
        IdleStateHandler(reader_idle=idle),
        LineBasedFrameDecoder(max_line),
        _DECODER,
        _ENCODER,
        chat,
    ]


_DECODER = StringDecoder()
_ENCODER = StringEncoder()


def initializer(
    group: ChannelGroup, idle: float = 60.0, max_line: int = MAX_LINE
) -> Callable[[Channel], None]:
    """The per-connection pipeline builder for :func:`hanet.serve`."""
    chat = ChatHandler(group, idle, max_line)

    def init(channel: Channel) -> None:
        for handler in pipeline_handlers(chat, idle, max_line):
            channel.pipeline.add_last(handler)

    return init


async def main(args: argparse.Namespace) -> None:
    group = ChannelGroup("chat")
    init = initializer(group, args.idle, args.max_line)
    async with trio.open_nursery() as nursery:
        server: Server = await nursery.start(
            functools.partial(serve, init, args.port, host=args.host)
        )
        log.info("chat server on %s:%d (Ctrl-C to stop)", args.host, server.port)
        if args.seconds:
            await trio.sleep(args.seconds)
            await group.close()
            nursery.cancel_scope.cancel()


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Line-based chat server.")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, default=9001, help="port (9001; 0 picks one)")
    parser.add_argument("--idle", type=float, default=60.0, help="kick clients silent this long")
    parser.add_argument("--max-line", type=int, default=MAX_LINE, help="longest line, bytes")
    parser.add_argument(
        "--seconds", type=float, default=0.0, help="stop after this long (0: never)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    return trio.run(until_stopped, args)


async def until_stopped(args: argparse.Namespace) -> int:
    """Serve until ``--seconds`` pass (0) or Ctrl-C / SIGTERM (130)."""
    received = await run_until_stopped(main, args)
    log.info("stopped")
    return 0 if received is None else 130


if __name__ == "__main__":
    sys.exit(cli())
