"""Pipeline: a doubly-linked list of handler contexts between a head and a tail, as Netty's."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from . import _handler as h
from ._context import HandlerContext
from ._errors import ChannelPipelineError
from ._future import ChannelFuture, WriteFuture

if TYPE_CHECKING:
    from ._channel import Channel

__all__ = ["Pipeline"]

log = logging.getLogger("hanet.pipeline")

# Non-sharable handlers that were ever added, by id: a WeakSet would need them hashable, and
# attrs' default ``define`` (eq=True) makes instances unhashable.
_added_once: weakref.WeakValueDictionary[int, h.ChannelHandler] = weakref.WeakValueDictionary()


class _HeadHandler(h.ChannelDuplexHandler):
    """Performs outbound operations on the channel's transport."""

    sharable = True

    def __init__(self, channel: Channel) -> None:
        self._channel = channel

    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        self._channel._transport_write(msg, future)

    def flush(self, ctx: HandlerContext) -> None:
        self._channel._transport_flush()

    def read(self, ctx: HandlerContext) -> None:
        self._channel._transport_read()

    def close(self, ctx: HandlerContext) -> None:
        self._channel._transport_close()


class _TailHandler(h.ChannelInboundHandler):
    """The sink for inbound events no handler consumed."""

    sharable = True

    def __init__(self, channel: Channel) -> None:
        self._channel = channel

    def channel_active(self, ctx: HandlerContext) -> None:
        pass

    def channel_inactive(self, ctx: HandlerContext) -> None:
        pass

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        self._channel._on_unhandled_message(msg)

    def channel_read_complete(self, ctx: HandlerContext) -> None:
        pass

    def user_event_triggered(self, ctx: HandlerContext, event: object) -> None:
        pass

    def channel_writability_changed(self, ctx: HandlerContext) -> None:
        pass

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        self._channel._on_unhandled_exception(exc)


HandlerRef = str | h.ChannelHandler | type[h.ChannelHandler]


class Pipeline:
    """The handlers of one channel.

    Inbound events start at the head (``fire_*``); outbound operations (``write``, ``flush``,
    ``read``, ``close``) start at the tail. Handlers may be added, removed and replaced at any
    time, also from inside a handler while events flow: an event already passed to a context
    continues from that context's neighbours.
    """

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self._head = HandlerContext(self, "head", _HeadHandler(channel), h.ALL_OUTBOUND)
        self._tail = HandlerContext(self, "tail", _TailHandler(channel), h.ALL_INBOUND)
        self._head.next = self._tail
        self._tail.prev = self._head
        self._names: dict[str, HandlerContext] = {}
        # Bumped on every structural change: lets a batch of events resolve its target once.
        self._version = 0

    # -- structure -------------------------------------------------------------------------

    def _new_context(self, handler: h.ChannelHandler, name: str | None) -> HandlerContext:
        if not isinstance(handler, h.ChannelHandler):
            raise TypeError(f"not a ChannelHandler: {handler!r}")
        sharable = type(handler).sharable
        if not sharable and _added_once.get(id(handler)) is handler:
            raise ChannelPipelineError(
                f"{type(handler).__name__} is not a sharable handler, "
                "so it can't be added or removed multiple times"
            )
        if name is None:
            base = type(handler).__name__
            i = 0
            while f"{base}#{i}" in self._names:
                i += 1
            name = f"{base}#{i}"
        elif name in self._names:
            raise ValueError(f"Duplicate handler name: {name}")
        if not sharable:
            # Only once every check passed: a refused handler was never added.
            _added_once[id(handler)] = handler
        return HandlerContext(self, name, handler, h.event_mask(type(handler)))

    def _link_after(self, prev: HandlerContext, ctx: HandlerContext) -> None:
        nxt = prev.next
        assert nxt is not None
        ctx.prev, ctx.next = prev, nxt
        prev.next = ctx
        nxt.prev = ctx
        self._names[ctx.name] = ctx
        self._version += 1

    def _call_added(self, ctx: HandlerContext) -> None:
        try:
            ctx.handler.handler_added(ctx)
        except Exception as exc:
            self._unlink(ctx)
            self._call_removed(ctx)
            err = ChannelPipelineError(
                f"{type(ctx.handler).__name__}.handler_added() has thrown an exception; removed."
            )
            err.__cause__ = exc
            self.fire_exception_caught(err)

    def _call_removed(self, ctx: HandlerContext) -> None:
        try:
            ctx.handler.handler_removed(ctx)
        except Exception as exc:
            err = ChannelPipelineError(
                f"{type(ctx.handler).__name__}.handler_removed() has thrown an exception."
            )
            err.__cause__ = exc
            self.fire_exception_caught(err)

    def _unlink(self, ctx: HandlerContext) -> None:
        prev, nxt = ctx.prev, ctx.next
        assert prev is not None and nxt is not None
        prev.next = nxt
        nxt.prev = prev
        # ctx keeps its own prev/next so an event in flight through it can still move on.
        ctx.removed = True
        del self._names[ctx.name]
        self._version += 1

    def _context_of(self, ref: HandlerRef) -> HandlerContext:
        ctx = self.context(ref)
        if ctx is None:
            raise LookupError(ref if isinstance(ref, str) else getattr(ref, "__name__", repr(ref)))
        return ctx

    def add_first(self, handler: h.ChannelHandler, name: str | None = None) -> Pipeline:
        """Insert ``handler`` right after the head."""
        ctx = self._new_context(handler, name)
        self._link_after(self._head, ctx)
        self._call_added(ctx)
        return self

    def add_last(self, handler: h.ChannelHandler, name: str | None = None) -> Pipeline:
        """Insert ``handler`` right before the tail."""
        ctx = self._new_context(handler, name)
        assert self._tail.prev is not None
        self._link_after(self._tail.prev, ctx)
        self._call_added(ctx)
        return self

    def add_before(
        self, base: HandlerRef, handler: h.ChannelHandler, name: str | None = None
    ) -> Pipeline:
        """Insert ``handler`` before the handler ``base`` (LookupError if absent)."""
        base_ctx = self._context_of(base)
        ctx = self._new_context(handler, name)
        assert base_ctx.prev is not None
        self._link_after(base_ctx.prev, ctx)
        self._call_added(ctx)
        return self

    def add_after(
        self, base: HandlerRef, handler: h.ChannelHandler, name: str | None = None
    ) -> Pipeline:
        """Insert ``handler`` after the handler ``base`` (LookupError if absent)."""
        base_ctx = self._context_of(base)
        ctx = self._new_context(handler, name)
        self._link_after(base_ctx, ctx)
        self._call_added(ctx)
        return self

    def remove(self, ref: HandlerRef) -> h.ChannelHandler:
        """Remove a handler by name, instance or type; LookupError if absent."""
        ctx = self._context_of(ref)
        self._unlink(ctx)
        self._call_removed(ctx)
        return ctx.handler

    def remove_if_exists(self, ref: HandlerRef) -> h.ChannelHandler | None:
        """As :meth:`remove`, returning None if absent."""
        if self.context(ref) is None:
            return None
        return self.remove(ref)

    def replace(
        self, old: HandlerRef, handler: h.ChannelHandler, name: str | None = None
    ) -> h.ChannelHandler:
        """Put ``handler`` where ``old`` is. The new handler's ``handler_added`` runs before the
        old one's ``handler_removed``, so what the old one forwards on removal reaches it."""
        old_ctx = self._context_of(old)
        if name is not None and name != old_ctx.name and name in self._names:
            raise ValueError(f"Duplicate handler name: {name}")
        del self._names[old_ctx.name]
        try:
            ctx = self._new_context(handler, name if name is not None else None)
        except Exception:
            self._names[old_ctx.name] = old_ctx
            raise
        prev, nxt = old_ctx.prev, old_ctx.next
        assert prev is not None and nxt is not None
        ctx.prev, ctx.next = prev, nxt
        prev.next = ctx
        nxt.prev = ctx
        self._names[ctx.name] = ctx
        self._version += 1
        old_ctx.removed = True
        old_ctx.next = ctx  # events forwarded by the old handler reach the new one
        old_ctx.prev = ctx
        self._call_added(ctx)
        self._call_removed(old_ctx)
        return old_ctx.handler

    def context(self, ref: HandlerRef) -> HandlerContext | None:
        """The context of a handler given by name, instance or type, or None."""
        if isinstance(ref, str):
            return self._names.get(ref)
        for ctx in self._names.values():
            if ctx.handler is ref or (isinstance(ref, type) and isinstance(ctx.handler, ref)):
                return ctx
        return None

    def get(self, name: str) -> h.ChannelHandler | None:
        """The handler called ``name``, or None."""
        ctx = self._names.get(name)
        return ctx.handler if ctx is not None else None

    def __iter__(self) -> Iterator[HandlerContext]:
        ctx = self._head.next
        while ctx is not None and ctx is not self._tail:
            yield ctx
            ctx = ctx.next

    def names(self) -> list[str]:
        """Names of the user handlers, head to tail."""
        return [ctx.name for ctx in self]

    def handlers(self) -> list[h.ChannelHandler]:
        """The user handlers, head to tail."""
        return [ctx.handler for ctx in self]

    def first(self) -> h.ChannelHandler | None:
        """The first user handler, or None."""
        ctx = self._head.next
        return None if ctx is self._tail or ctx is None else ctx.handler

    def last(self) -> h.ChannelHandler | None:
        """The last user handler, or None."""
        ctx = self._tail.prev
        return None if ctx is self._head or ctx is None else ctx.handler

    def _destroy(self) -> None:
        """Remove every handler, tail to head (the channel closed)."""
        ctx = self._tail.prev
        while ctx is not None and ctx is not self._head:
            prev = ctx.prev
            self._unlink(ctx)
            self._call_removed(ctx)
            ctx = prev

    def __repr__(self) -> str:
        return f"<Pipeline {self.names()}>"

    # -- events from the head / operations from the tail -------------------------------------

    def fire_channel_active(self) -> None:
        self._head.fire_channel_active()

    def fire_channel_inactive(self) -> None:
        self._head.fire_channel_inactive()

    def fire_channel_read(self, msg: Any) -> None:
        self._head.fire_channel_read(msg)

    def fire_channel_read_complete(self) -> None:
        self._head.fire_channel_read_complete()

    def fire_user_event_triggered(self, event: object) -> None:
        self._head.fire_user_event_triggered(event)

    def fire_channel_writability_changed(self) -> None:
        self._head.fire_channel_writability_changed()

    def fire_exception_caught(self, exc: BaseException) -> None:
        self._head.fire_exception_caught(exc)

    def write(self, msg: Any, future: WriteFuture | None = None) -> WriteFuture:
        """Write from the tail (through every outbound handler)."""
        return self._tail.write(msg, future)

    def flush(self) -> None:
        self._tail.flush()

    def write_and_flush(self, msg: Any, future: WriteFuture | None = None) -> WriteFuture:
        return self._tail.write_and_flush(msg, future)

    def read(self) -> None:
        self._tail.read()

    def close(self, reason: str | None = None) -> ChannelFuture:
        return self._tail.close(reason)
