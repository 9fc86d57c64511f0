"""HandlerContext: a handler's place in a pipeline, and how it fires events onwards."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from . import _handler as h
from ._errors import ChannelClosedError
from ._future import _PENDING, ChannelFuture, WriteFuture
from ._outbound import FileRegion
from ._timers import TimerHandle

if TYPE_CHECKING:
    from ._channel import Channel
    from ._pipeline import Pipeline

__all__ = ["HandlerContext"]

log = logging.getLogger("hanet.pipeline")


class HandlerContext:
    """Binds one handler to its pipeline.

    ``fire_*`` methods pass an inbound event to the next handler that handles it (towards the
    tail); ``write``, ``flush``, ``read`` and ``close`` pass an outbound operation to the previous
    one (towards the head). All are synchronous and safe to call from any handler method, timer
    callback or task of the channel.
    """

    __slots__ = ("_mask", "handler", "name", "next", "pipeline", "prev", "removed")

    def __init__(self, pipeline: Pipeline, name: str, handler: h.ChannelHandler, mask: int) -> None:
        self.pipeline = pipeline
        self.name = name
        self.handler = handler
        self._mask = mask
        self.prev: HandlerContext | None = None
        self.next: HandlerContext | None = None
        self.removed = False

    def __repr__(self) -> str:
        return f"<HandlerContext {self.name!r} {type(self.handler).__name__}>"

    @property
    def channel(self) -> Channel:
        """The channel this pipeline belongs to."""
        return self.pipeline.channel

    # -- inbound ---------------------------------------------------------------------------

    def _next_inbound(self, bit: int) -> HandlerContext:
        ctx = self.next
        while ctx is not None:
            if ctx._mask & bit:
                return ctx
            ctx = ctx.next
        return self.pipeline._tail  # pragma: no cover - the tail handles every inbound event

    def fire_channel_active(self) -> None:
        """Tell the next inbound handler that the channel became active."""
        ctx = self._next_inbound(h.ACTIVE)
        try:
            ctx.handler.channel_active(ctx)  # type: ignore[attr-defined]
        except Exception as exc:
            ctx._invoke_exception_caught(exc)

    def fire_channel_inactive(self) -> None:
        """Tell the next inbound handler that the channel closed."""
        ctx = self._next_inbound(h.INACTIVE)
        try:
            ctx.handler.channel_inactive(ctx)  # type: ignore[attr-defined]
        except Exception as exc:
            ctx._invoke_exception_caught(exc)

    def fire_channel_read(self, msg: Any) -> None:
        """Pass a message to the next inbound handler."""
        ctx = self.next
        while ctx is not None and not ctx._mask & h.READ:
            ctx = ctx.next
        if ctx is None:  # pragma: no cover
            ctx = self.pipeline._tail
        try:
            ctx.handler.channel_read(ctx, msg)  # type: ignore[attr-defined]
        except Exception as exc:
            ctx._invoke_exception_caught(exc)

    def fire_channel_reads(self, msgs: Iterable[Any]) -> None:
        """Pass several messages on, one ``channel_read`` each, in order.

        Equivalent to calling :meth:`fire_channel_read` for each, but the next handler is looked
        up again only when the pipeline changed in between (decoders emit frames in batches).
        """
        pipeline = self.pipeline
        version = -1
        ctx = self
        for msg in msgs:
            if pipeline._version != version:
                version = pipeline._version
                ctx = self._next_inbound(h.READ)
            try:
                ctx.handler.channel_read(ctx, msg)  # type: ignore[attr-defined]
            except Exception as exc:
                ctx._invoke_exception_caught(exc)

    def fire_channel_read_complete(self) -> None:
        """Tell the next inbound handler that the current batch of reads is over."""
        ctx = self._next_inbound(h.READ_COMPLETE)
        try:
            ctx.handler.channel_read_complete(ctx)  # type: ignore[attr-defined]
        except Exception as exc:
            ctx._invoke_exception_caught(exc)

    def fire_user_event_triggered(self, event: object) -> None:
        """Pass a user event (an idle event, a shutdown notice, ...) to the next handler."""
        ctx = self._next_inbound(h.USER_EVENT)
        try:
            ctx.handler.user_event_triggered(ctx, event)  # type: ignore[attr-defined]
        except Exception as exc:
            ctx._invoke_exception_caught(exc)

    def fire_channel_writability_changed(self) -> None:
        """Tell the next inbound handler that ``channel.is_writable`` flipped."""
        ctx = self._next_inbound(h.WRITABILITY)
        try:
            ctx.handler.channel_writability_changed(ctx)  # type: ignore[attr-defined]
        except Exception as exc:
            ctx._invoke_exception_caught(exc)

    def fire_exception_caught(self, exc: BaseException) -> None:
        """Pass an exception to the next inbound handler's ``exception_caught``."""
        self._next_inbound(h.EXCEPTION)._invoke_exception_caught(exc)

    def _invoke_exception_caught(self, exc: BaseException) -> None:
        if not self._mask & h.EXCEPTION:
            self.fire_exception_caught(exc)
            return
        try:
            self.handler.exception_caught(self, exc)  # type: ignore[attr-defined]
        except Exception as inner:
            # Never re-fired (that could loop forever); logged, as Netty does.
            log.warning(
                "%s: %s.exception_caught raised %r while handling %r",
                self.channel,
                type(self.handler).__name__,
                inner,
                exc,
                exc_info=inner,
            )

    # -- outbound --------------------------------------------------------------------------

    def _prev_outbound(self, bit: int) -> HandlerContext:
        ctx = self.prev
        while ctx is not None:
            if ctx._mask & bit:
                return ctx
            ctx = ctx.prev
        return self.pipeline._head  # pragma: no cover - the head handles every operation

    def write(self, msg: Any, future: WriteFuture | None = None) -> WriteFuture:
        """Pass a message towards the head; nothing is sent until a flush.

        Returns the write's future: done when the bytes were handed to the kernel, failed with
        :class:`ChannelClosedError` when the channel closes first, or with the exception an
        outbound handler raised.
        """
        if future is None:
            future = WriteFuture()
        # future.done() and channel.is_open, without their calls (twice a stored answer)
        if future._state is not _PENDING or not self.pipeline.channel._open:
            if type(msg) is FileRegion:
                msg.release()  # as Netty releases a message whose write cannot go on
            if not future.done():
                future.set_exception(ChannelClosedError(f"{self.pipeline.channel} is closed"))
            return future
        ctx = self.prev
        while ctx is not None and not ctx._mask & h.WRITE:
            ctx = ctx.prev
        if ctx is None:  # pragma: no cover
            ctx = self.pipeline._head
        future._ctx = ctx  # who holds it now: named if it is dropped (WriteFuture.__del__)
        try:
            ctx.handler.write(ctx, msg, future)  # type: ignore[attr-defined]
        except Exception as exc:
            if future.set_exception(exc):
                self.pipeline.channel._on_outbound_error(exc)
        return future

    def flush(self) -> None:
        """Ask the channel to send everything written so far."""
        ctx = self._prev_outbound(h.FLUSH)
        try:
            ctx.handler.flush(ctx)  # type: ignore[attr-defined]
        except Exception as exc:
            ctx._invoke_exception_caught(exc)

    def write_and_flush(self, msg: Any, future: WriteFuture | None = None) -> WriteFuture:
        """``write`` then ``flush``."""
        future = self.write(msg, future)
        self.flush()
        return future

    def read(self) -> None:
        """Ask for one more read (meaningful when ``channel.auto_read`` is False)."""
        ctx = self._prev_outbound(h.READ_REQUEST)
        try:
            ctx.handler.read(ctx)  # type: ignore[attr-defined]
        except Exception as exc:
            ctx._invoke_exception_caught(exc)

    def close(self, reason: str | None = None) -> ChannelFuture:
        """Close the channel. ``reason`` (the first one given wins) is logged and kept in
        ``channel.close_reason``. What was flushed before is still sent (docs/netty.md §5.6);
        writes not flushed fail with :class:`ChannelClosedError`. Returns the channel's
        ``close_future``, done once it has closed."""
        if reason is not None:
            self.pipeline.channel._set_close_reason(reason)
        ctx = self._prev_outbound(h.CLOSE)
        try:
            ctx.handler.close(ctx)  # type: ignore[attr-defined]
        except Exception as exc:
            ctx._invoke_exception_caught(exc)
        return self.pipeline.channel.close_future

    # -- time and tasks --------------------------------------------------------------------

    def schedule(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` after ``delay`` seconds of the channel's clock.

        An exception it raises goes to this handler's ``exception_caught``. Timers die with the
        channel.
        """

        def run() -> None:
            if self.removed:
                return
            try:
                callback()
            except Exception as exc:
                self._invoke_exception_caught(exc)

        return self.pipeline.channel.schedule(delay, run)

    def now(self) -> float:
        """The channel's clock, in seconds."""
        return self.pipeline.channel.now()

    def spawn(self, async_fn: Callable[..., Awaitable[object]], *args: object) -> None:
        """Run ``async_fn(*args)`` as a task in the channel's nursery.

        It is cancelled when the channel closes. An exception it raises is fired into the
        pipeline as ``exception_caught`` from this context (and so, unhandled, closes the
        channel).
        """

        async def run() -> None:
            try:
                await async_fn(*args)
            except Exception as exc:
                self._invoke_exception_caught(exc)

        self.pipeline.channel.spawn(run)
