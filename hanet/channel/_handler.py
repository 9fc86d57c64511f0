"""Handler base classes: synchronous, sans-IO callbacks with forwarding defaults.

A handler is called by its pipeline, one event at a time, and never blocks or awaits. Work that
must wait is handed to a task with ``ctx.spawn``; timers are set with ``ctx.schedule``.

As in Netty, a context is skipped for an event its handler does not override: the defaults
below are marked with :func:`_skip` and a per-class bit mask says which events a class handles.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if TYPE_CHECKING:
    from ._context import HandlerContext
    from ._future import WriteFuture

__all__ = [
    "ChannelDuplexHandler",
    "ChannelHandler",
    "ChannelInboundHandler",
    "ChannelOutboundHandler",
    "event_mask",
]

# Event bits (inbound first, then outbound).
ACTIVE = 1 << 0
INACTIVE = 1 << 1
READ = 1 << 2
READ_COMPLETE = 1 << 3
USER_EVENT = 1 << 4
WRITABILITY = 1 << 5
EXCEPTION = 1 << 6
WRITE = 1 << 7
FLUSH = 1 << 8
READ_REQUEST = 1 << 9
CLOSE = 1 << 10
ALL_INBOUND = ACTIVE | INACTIVE | READ | READ_COMPLETE | USER_EVENT | WRITABILITY | EXCEPTION
ALL_OUTBOUND = WRITE | FLUSH | READ_REQUEST | CLOSE

_METHOD_BITS = {
    "channel_active": ACTIVE,
    "channel_inactive": INACTIVE,
    "channel_read": READ,
    "channel_read_complete": READ_COMPLETE,
    "user_event_triggered": USER_EVENT,
    "channel_writability_changed": WRITABILITY,
    "exception_caught": EXCEPTION,
    "write": WRITE,
    "flush": FLUSH,
    "read": READ_REQUEST,
    "close": CLOSE,
}

_F = TypeVar("_F", bound=Callable[..., Any])
_masks: dict[type, int] = {}


def _skip(fn: _F) -> _F:
    fn.__hanet_skip__ = True  # type: ignore[attr-defined]
    return fn


def event_mask(handler_type: type) -> int:
    """The events ``handler_type`` handles itself (cached per class)."""
    mask = _masks.get(handler_type)
    if mask is None:
        mask = 0
        for name, bit in _METHOD_BITS.items():
            method = getattr(handler_type, name, None)
            if method is not None and not getattr(method, "__hanet_skip__", False):
                mask |= bit
        _masks[handler_type] = mask
    return mask


class ChannelHandler:
    """Base of every handler.

    ``sharable = True`` marks a stateless handler that may sit in several pipelines (or twice in
    one); any other instance may be added once only, as in Netty.
    """

    sharable: ClassVar[bool] = False

    def handler_added(self, ctx: HandlerContext) -> None:
        """Called once this handler is in the pipeline (synchronously inside the add call)."""

    def handler_removed(self, ctx: HandlerContext) -> None:
        """Called once this handler left the pipeline (also when the channel is destroyed)."""


class ChannelInboundHandler(ChannelHandler):
    """Inbound events travel head to tail; every default forwards to the next handler."""

    @_skip
    def channel_active(self, ctx: HandlerContext) -> None:
        ctx.fire_channel_active()

    @_skip
    def channel_inactive(self, ctx: HandlerContext) -> None:
        ctx.fire_channel_inactive()

    @_skip
    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        ctx.fire_channel_read(msg)

    @_skip
    def channel_read_complete(self, ctx: HandlerContext) -> None:
        ctx.fire_channel_read_complete()

    @_skip
    def user_event_triggered(self, ctx: HandlerContext, event: object) -> None:
        ctx.fire_user_event_triggered(event)

    @_skip
    def channel_writability_changed(self, ctx: HandlerContext) -> None:
        ctx.fire_channel_writability_changed()

    @_skip
    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        ctx.fire_exception_caught(exc)


class ChannelOutboundHandler(ChannelHandler):
    """Outbound operations travel tail to head; every default forwards to the previous one.

    An exception raised by ``write`` fails that write's future (it does not become an
    ``exception_caught`` event), as in Netty.
    """

    @_skip
    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        ctx.write(msg, future)

    @_skip
    def flush(self, ctx: HandlerContext) -> None:
        ctx.flush()

    @_skip
    def read(self, ctx: HandlerContext) -> None:
        ctx.read()

    @_skip
    def close(self, ctx: HandlerContext) -> None:
        ctx.close()


class ChannelDuplexHandler(ChannelInboundHandler, ChannelOutboundHandler):
    """Both inbound and outbound."""
