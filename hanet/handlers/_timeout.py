"""ReadTimeoutHandler and WriteTimeoutHandler: close a channel that stops reading or writing."""

from __future__ import annotations

from typing import Any

from hanet.channel import ChannelOutboundHandler, HandlerContext, TimerHandle, WriteFuture

from ._errors import ReadTimeoutError, WriteTimeoutError
from ._idle import IdleState, IdleStateEvent, IdleStateHandler

__all__ = ["ReadTimeoutHandler", "WriteTimeoutHandler"]


class ReadTimeoutHandler(IdleStateHandler):
    """Close the channel when nothing was read for ``timeout`` seconds (0 disables).

    Fires :class:`ReadTimeoutError` to the next handler, then closes, once.
    """

    def __init__(self, timeout: float) -> None:
        super().__init__(reader_idle=timeout)
        self._closed = False

    def channel_idle(self, ctx: HandlerContext, event: IdleStateEvent) -> None:
        if event.state is IdleState.READER_IDLE and not self._closed:
            self._closed = True
            self.read_timed_out(ctx)

    def read_timed_out(self, ctx: HandlerContext) -> None:
        """Fire the error and close (override to do otherwise)."""
        ctx.fire_exception_caught(ReadTimeoutError(f"nothing read for {self.reader_idle:g} s"))
        ctx.close(f"read timeout ({self.reader_idle:g} s)")


class WriteTimeoutHandler(ChannelOutboundHandler):
    """Each write must complete within ``timeout`` seconds (0 disables); otherwise
    :class:`WriteTimeoutError` is fired into the pipeline and the channel closes, once.

    Unlike ``IdleStateHandler``'s writer idleness ("no write completed for a while"), this is
    "this particular write did not complete in time" (a stuck peer under back-pressure).
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = max(float(timeout), 0.001) if timeout > 0 else 0.0
        self._timers: set[TimerHandle] = set()
        self._closed = False

    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        if self.timeout:
            timers = self._timers

            def expired() -> None:
                timers.discard(timer)
                if not future.done():
                    self.write_timed_out(ctx)

            timer = ctx.schedule(self.timeout, expired)
            timers.add(timer)

            def done(_: WriteFuture) -> None:
                timer.cancel()
                timers.discard(timer)

            future.add_done_callback(done)
        ctx.write(msg, future)

    def handler_removed(self, ctx: HandlerContext) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()

    def write_timed_out(self, ctx: HandlerContext) -> None:
        """Fire the error and close, once (override to do otherwise)."""
        if self._closed:
            return
        self._closed = True
        ctx.fire_exception_caught(WriteTimeoutError(f"a write took longer than {self.timeout:g} s"))
        ctx.close(f"write timeout ({self.timeout:g} s)")
