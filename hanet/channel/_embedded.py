"""EmbeddedChannel: a channel with no network and a manual clock, for testing handlers."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from ._channel import Channel, ChannelConfig
from ._errors import ChannelClosedError
from ._future import WriteFuture
from ._handler import ChannelHandler
from ._outbound import FileRegion, message_size

__all__ = ["EmbeddedChannel"]

log = logging.getLogger("hanet.testing")


class EmbeddedChannel(Channel):
    """Drive handlers synchronously, as Netty's ``EmbeddedChannel``.

    The handlers are added in order and the channel is active at once. Messages that reach the
    tail are queued for :meth:`read_inbound`; messages that reach the head and are flushed are
    queued for :meth:`read_outbound` (any object, not only bytes). An exception that reaches the
    tail is raised from the call that caused it, after the messages produced before it were
    delivered; it does not close the channel. Time stands still until :meth:`advance_time`.
    """

    def __init__(self, *handlers: ChannelHandler, config: ChannelConfig | None = None) -> None:
        super().__init__(config)
        self._now = 0.0
        self._inbound: deque[Any] = deque()
        self._outbound_msgs: deque[Any] = deque()
        self._exception: BaseException | None = None
        self.read_requests = 0
        for handler in handlers:
            self.pipeline.add_last(handler)
        self._active = True
        self.pipeline.fire_channel_active()
        self._run_due_timers()

    # -- clock and tasks ---------------------------------------------------------------------

    def now(self) -> float:
        return self._now

    def advance_time(self, seconds: float) -> None:
        """Move the clock on and run every timer that became due, in deadline order."""
        if seconds < 0:
            raise ValueError(f"cannot go back in time: {seconds}")
        target = self._now + seconds
        while True:
            deadline = self._timers.next_deadline()
            if deadline > target:
                break
            self._now = max(self._now, deadline)
            self._run_due_timers()
        self._now = target
        self.check_exception()

    def run_pending_tasks(self) -> None:
        """Run the timers due now."""
        self._run_due_timers()
        self.check_exception()

    def next_timer_delay(self) -> float | None:
        """Seconds until the next timer, or None if there is none."""
        deadline = self._timers.next_deadline()
        return None if deadline == float("inf") else deadline - self._now

    def spawn(self, async_fn: Callable[[], Awaitable[object]]) -> None:
        raise RuntimeError("EmbeddedChannel has no task nursery: ctx.spawn() needs a real channel")

    # -- inbound -----------------------------------------------------------------------------

    def write_inbound(self, *msgs: Any) -> bool:
        """Fire each message into the pipeline, then ``channel_read_complete``.

        Returns whether messages are waiting in the inbound queue. Raises
        :class:`ChannelClosedError` if the channel is closed.
        """
        self._ensure_open()
        for msg in msgs:
            self.pipeline.fire_channel_read(msg)
        self.pipeline.fire_channel_read_complete()
        self._run_due_timers()
        self.check_exception()
        return bool(self._inbound)

    def write_one_inbound(self, msg: Any) -> None:
        """Fire one message, without ``channel_read_complete``."""
        self._ensure_open()
        self.pipeline.fire_channel_read(msg)
        self.check_exception()

    def flush_inbound(self) -> None:
        """Fire ``channel_read_complete``."""
        self._ensure_open()
        self.pipeline.fire_channel_read_complete()
        self.check_exception()

    def read_inbound(self) -> Any:
        """The next message that reached the tail, or None."""
        return self._inbound.popleft() if self._inbound else None

    @property
    def inbound_messages(self) -> deque[Any]:
        return self._inbound

    # -- outbound ----------------------------------------------------------------------------

    def write_outbound(self, *msgs: Any) -> bool:
        """Write each message from the tail, then flush.

        Returns whether messages are waiting in the outbound queue. A write failed by an
        outbound handler is raised.
        """
        self._ensure_open()
        futures = [self.pipeline.write(msg) for msg in msgs]
        self.pipeline.flush()
        self._run_due_timers()
        for future in futures:
            exc = future.exception()
            if exc is not None:
                self._record(exc)
        self.check_exception()
        return bool(self._outbound_msgs)

    def write_one_outbound(self, msg: Any) -> WriteFuture:
        """Write without flushing."""
        self._ensure_open()
        return self.pipeline.write(msg)

    def flush_outbound(self) -> None:
        """Flush what was written."""
        self._ensure_open()
        self.pipeline.flush()
        self.check_exception()

    def read_outbound(self) -> Any:
        """The next message that reached the head and was flushed, or None."""
        return self._outbound_msgs.popleft() if self._outbound_msgs else None

    @property
    def outbound_messages(self) -> deque[Any]:
        return self._outbound_msgs

    # -- closing -----------------------------------------------------------------------------

    def finish(self) -> bool:
        """Close (decoders decode their last bytes) and report whether either queue holds
        messages; raises an exception that reached the tail meanwhile."""
        self.close()
        self.check_exception()
        return bool(self._inbound or self._outbound_msgs)

    def close(self, reason: str | None = None) -> None:
        """Close the channel through the pipeline (idempotent)."""
        if self._open:
            self.pipeline.close(reason)

    def check_exception(self) -> None:
        """Raise (and forget) the first exception recorded since the last check."""
        exc, self._exception = self._exception, None
        if exc is not None:
            raise exc

    def _ensure_open(self) -> None:
        if not self._open:
            raise ChannelClosedError("the embedded channel is closed")

    def _record(self, exc: BaseException) -> None:
        if self._exception is None:
            self._exception = exc
        else:
            log.warning("more than one exception was raised; reporting only the first: %r", exc)

    # -- transport hooks ---------------------------------------------------------------------

    def _transport_write(self, msg: Any, future: WriteFuture) -> None:
        if not self._open:
            if type(msg) is FileRegion:
                msg.release()
            future.set_exception(ChannelClosedError("the embedded channel is closed"))
            return
        if isinstance(msg, bytearray | memoryview):
            msg = bytes(msg)
        self._outbound.add(msg, future)

    def _transport_flush(self) -> None:
        self._outbound.add_flush()
        for msg, future in self._outbound.take_all_flushed():
            size = message_size(msg)
            if type(msg) is FileRegion:
                # what a socket would carry: the region's bytes (then the region is released)
                try:
                    data = bytes(msg.read())
                except (OSError, EOFError) as exc:
                    msg.release()
                    self._outbound.sent(size)
                    future.set_exception(exc)
                    continue
                msg.release()
                self._outbound_msgs.append(data)
            else:
                self._outbound_msgs.append(msg)
            self._bytes_written += size
            self._messages_written += 1
            self._outbound.sent(size)
            future.set_result()

    def _transport_read(self) -> None:
        self.read_requests += 1

    def _transport_close(self) -> None:
        if not self._open:
            return
        self._open = False
        self._outbound.fail_all(lambda: ChannelClosedError("the embedded channel closed"))
        was_active = self._active
        self._active = False
        if was_active:
            self.pipeline.fire_channel_inactive()
        self.pipeline._destroy()
        self._timers.clear()
        self._close_future.set_result()

    def _on_unhandled_message(self, msg: Any) -> None:
        self._inbound.append(msg)

    def _on_unhandled_exception(self, exc: BaseException) -> None:
        self._record(exc)

    def _on_outbound_error(self, exc: BaseException) -> None:
        pass

    def __str__(self) -> str:
        return f"embedded channel #{self.id}"
