"""IdleStateHandler: Netty's idle detection on the channel's timers."""

from __future__ import annotations

import enum
import math
from typing import Any

import attrs

from hanet.channel import ChannelDuplexHandler, HandlerContext, TimerHandle, WriteFuture

__all__ = [
    "IdleState",
    "IdleStateEvent",
    "IdleStateHandler",
]


class IdleState(enum.Enum):
    """Which kind of idleness an :class:`IdleStateEvent` reports."""

    READER_IDLE = "READER_IDLE"
    WRITER_IDLE = "WRITER_IDLE"
    ALL_IDLE = "ALL_IDLE"


@attrs.frozen
class IdleStateEvent:
    """A user event: the channel has been idle. ``first`` is True for the first event of its
    kind in an idle spell."""

    state: IdleState
    first: bool

    def __str__(self) -> str:
        return f"IdleStateEvent({self.state.value}{', first' if self.first else ''})"


FIRST_READER_IDLE = IdleStateEvent(IdleState.READER_IDLE, True)
READER_IDLE = IdleStateEvent(IdleState.READER_IDLE, False)
FIRST_WRITER_IDLE = IdleStateEvent(IdleState.WRITER_IDLE, True)
WRITER_IDLE = IdleStateEvent(IdleState.WRITER_IDLE, False)
FIRST_ALL_IDLE = IdleStateEvent(IdleState.ALL_IDLE, True)
ALL_IDLE = IdleStateEvent(IdleState.ALL_IDLE, False)
_EVENTS = {
    (IdleState.READER_IDLE, True): FIRST_READER_IDLE,
    (IdleState.READER_IDLE, False): READER_IDLE,
    (IdleState.WRITER_IDLE, True): FIRST_WRITER_IDLE,
    (IdleState.WRITER_IDLE, False): WRITER_IDLE,
    (IdleState.ALL_IDLE, True): FIRST_ALL_IDLE,
    (IdleState.ALL_IDLE, False): ALL_IDLE,
}

_NEW, _ACTIVE, _DESTROYED = range(3)
_MIN_PERIOD = 0.001


def _period(value: float, name: str) -> float:
    if math.isnan(value):
        raise ValueError(f"{name} must be a number of seconds")
    return 0.0 if value <= 0 else max(float(value), _MIN_PERIOD)


class IdleStateHandler(ChannelDuplexHandler):
    """Fire an :class:`IdleStateEvent` when nothing was read, written, or either, for a while.

    Periods are seconds (0 disables one). Timers start at ``channel_active``, or in
    ``handler_added`` when the channel is already active, and stop when the channel closes or
    the handler is removed. Reads are stamped at ``channel_read_complete`` (a read batch in
    progress counts as activity); writes when their future completes (sent, or failed). An
    idle channel gets an event every period: the first with ``first=True``. Events go to the
    next handler (override :meth:`channel_idle` to act here instead).
    """

    def __init__(
        self, reader_idle: float = 0.0, writer_idle: float = 0.0, all_idle: float = 0.0
    ) -> None:
        self.reader_idle = _period(reader_idle, "reader_idle")
        self.writer_idle = _period(writer_idle, "writer_idle")
        self.all_idle = _period(all_idle, "all_idle")
        self._state = _NEW
        self._last_read = 0.0
        self._last_write = 0.0
        self._reading = False
        self._first_reader = True
        self._first_writer = True
        self._first_all = True
        self._timers: list[TimerHandle | None] = [None, None, None]

    # -- life cycle ---------------------------------------------------------------------------

    def handler_added(self, ctx: HandlerContext) -> None:
        if ctx.channel.is_active:
            self._initialize(ctx)

    def handler_removed(self, ctx: HandlerContext) -> None:
        self._destroy()

    def channel_active(self, ctx: HandlerContext) -> None:
        self._initialize(ctx)
        ctx.fire_channel_active()

    def channel_inactive(self, ctx: HandlerContext) -> None:
        self._destroy()
        ctx.fire_channel_inactive()

    def _initialize(self, ctx: HandlerContext) -> None:
        if self._state != _NEW:
            return
        self._state = _ACTIVE
        now = ctx.now()
        self._last_read = self._last_write = now
        if self.reader_idle:
            self._timers[0] = ctx.schedule(self.reader_idle, lambda: self._reader_check(ctx))
        if self.writer_idle:
            self._timers[1] = ctx.schedule(self.writer_idle, lambda: self._writer_check(ctx))
        if self.all_idle:
            self._timers[2] = ctx.schedule(self.all_idle, lambda: self._all_check(ctx))

    def _destroy(self) -> None:
        self._state = _DESTROYED
        for i, timer in enumerate(self._timers):
            if timer is not None:
                timer.cancel()
                self._timers[i] = None

    # -- activity ---------------------------------------------------------------------------

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if self.reader_idle or self.all_idle:
            self._reading = True
            self._first_reader = self._first_all = True
        ctx.fire_channel_read(msg)

    def channel_read_complete(self, ctx: HandlerContext) -> None:
        if self._reading:
            self._last_read = ctx.now()
            self._reading = False
        ctx.fire_channel_read_complete()

    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        if self.writer_idle or self.all_idle:

            def written(_: WriteFuture) -> None:
                self._last_write = ctx.now()
                self._first_writer = self._first_all = True

            future.add_done_callback(written)
        ctx.write(msg, future)

    def reset_read_timeout(self, ctx: HandlerContext) -> None:
        """Count now as the last read (does not re-arm ``first``)."""
        self._last_read = ctx.now()

    def reset_write_timeout(self, ctx: HandlerContext) -> None:
        """Count now as the last write (does not re-arm ``first``)."""
        self._last_write = ctx.now()

    # -- the timer tasks ---------------------------------------------------------------------

    def _reader_check(self, ctx: HandlerContext) -> None:
        if not ctx.channel.is_open or self._state != _ACTIVE:
            return
        period = self.reader_idle
        delay = period if self._reading else period - (ctx.now() - self._last_read)
        if delay <= 0:
            self._timers[0] = ctx.schedule(period, lambda: self._reader_check(ctx))
            first, self._first_reader = self._first_reader, False
            self.channel_idle(ctx, _EVENTS[IdleState.READER_IDLE, first])
        else:
            self._timers[0] = ctx.schedule(delay, lambda: self._reader_check(ctx))

    def _writer_check(self, ctx: HandlerContext) -> None:
        if not ctx.channel.is_open or self._state != _ACTIVE:
            return
        period = self.writer_idle
        delay = period - (ctx.now() - self._last_write)
        if delay <= 0:
            self._timers[1] = ctx.schedule(period, lambda: self._writer_check(ctx))
            first, self._first_writer = self._first_writer, False
            self.channel_idle(ctx, _EVENTS[IdleState.WRITER_IDLE, first])
        else:
            self._timers[1] = ctx.schedule(delay, lambda: self._writer_check(ctx))

    def _all_check(self, ctx: HandlerContext) -> None:
        if not ctx.channel.is_open or self._state != _ACTIVE:
            return
        period = self.all_idle
        last = max(self._last_read, self._last_write)
        delay = period if self._reading else period - (ctx.now() - last)
        if delay <= 0:
            self._timers[2] = ctx.schedule(period, lambda: self._all_check(ctx))
            first, self._first_all = self._first_all, False
            self.channel_idle(ctx, _EVENTS[IdleState.ALL_IDLE, first])
        else:
            self._timers[2] = ctx.schedule(delay, lambda: self._all_check(ctx))

    def channel_idle(self, ctx: HandlerContext, event: IdleStateEvent) -> None:
        """Called for each idle event; passes it to the next handler by default."""
        ctx.fire_user_event_triggered(event)
