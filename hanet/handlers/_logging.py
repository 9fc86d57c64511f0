"""LoggingHandler: log every event passing through, with hex dumps of bytes at DEBUG."""

from __future__ import annotations

import logging
from typing import Any

from hanet.channel import ChannelDuplexHandler, HandlerContext, WriteFuture

__all__ = ["LoggingHandler", "hexdump"]


def hexdump(data: bytes | bytearray | memoryview, limit: int = 256) -> str:
    """A classic 16-bytes-a-line hex dump of the first ``limit`` bytes."""
    raw = bytes(data[:limit])
    lines = []
    for offset in range(0, len(raw), 16):
        chunk = raw[offset : offset + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08x}  {hexes:<47}  |{text}|")
    if len(data) > limit:
        lines.append(f"... {len(data) - limit} more bytes")
    return "\n".join(lines)


def _describe(msg: Any) -> str:
    if isinstance(msg, bytes | bytearray | memoryview):
        return f"{len(msg)}B\n{hexdump(msg)}"
    return repr(msg)


class LoggingHandler(ChannelDuplexHandler):
    """Log each inbound event and outbound operation at ``level`` (DEBUG by default), then pass
    it on unchanged. Sharable."""

    sharable = True

    def __init__(self, name: str = "hanet.wire", level: int = logging.DEBUG) -> None:
        self.logger = logging.getLogger(name)
        self.level = level

    def _log(self, ctx: HandlerContext, what: str, detail: str = "") -> None:
        if self.logger.isEnabledFor(self.level):
            self.logger.log(
                self.level, "%s %s%s", ctx.channel, what, f": {detail}" if detail else ""
            )

    def channel_active(self, ctx: HandlerContext) -> None:
        self._log(ctx, "ACTIVE")
        ctx.fire_channel_active()

    def channel_inactive(self, ctx: HandlerContext) -> None:
        self._log(ctx, "INACTIVE")
        ctx.fire_channel_inactive()

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        self._log(ctx, "READ", _describe(msg))
        ctx.fire_channel_read(msg)

    def channel_read_complete(self, ctx: HandlerContext) -> None:
        self._log(ctx, "READ COMPLETE")
        ctx.fire_channel_read_complete()

    def user_event_triggered(self, ctx: HandlerContext, event: object) -> None:
        self._log(ctx, "USER EVENT", str(event))
        ctx.fire_user_event_triggered(event)

    def channel_writability_changed(self, ctx: HandlerContext) -> None:
        self._log(ctx, "WRITABILITY CHANGED", f"writable={ctx.channel.is_writable}")
        ctx.fire_channel_writability_changed()

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        self._log(ctx, "EXCEPTION", repr(exc))
        ctx.fire_exception_caught(exc)

    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        self._log(ctx, "WRITE", _describe(msg))
        ctx.write(msg, future)

    def flush(self, ctx: HandlerContext) -> None:
        self._log(ctx, "FLUSH")
        ctx.flush()

    def close(self, ctx: HandlerContext) -> None:
        self._log(ctx, "CLOSE")
        ctx.close()
