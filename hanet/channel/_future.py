"""Futures: the result of a write (or a close), usable from sync handlers and awaitable from
tasks; a write future dropped by an outbound handler without being completed is reported."""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any, Self

import trio

if TYPE_CHECKING:
    from ._context import HandlerContext

__all__ = ["ChannelFuture", "WriteFuture", "combine_futures"]

log = logging.getLogger("hanet.channel")

_PENDING = object()


class ChannelFuture:
    """The outcome of a channel operation (Netty's ``ChannelFuture``): pending, then done with
    success or with an exception, once.

    Handlers, being synchronous, use :meth:`add_done_callback`; tasks ``await`` it, which
    returns ``None`` or raises the failure. Awaiting always checkpoints. Cancelling the awaiting
    task does not cancel the operation. ``channel.close_future`` is one; writes return the
    subclass :class:`WriteFuture`.
    """

    __slots__ = ("_callbacks", "_ctx", "_event", "_exception", "_state")

    def __init__(self) -> None:
        self._state: object = _PENDING
        self._exception: BaseException | None = None
        self._callbacks: list[Callable[[Any], None]] | None = None
        self._event: trio.Event | None = None
        self._ctx: HandlerContext | None = None

    def done(self) -> bool:
        """Whether the write has completed or failed."""
        return self._state is not _PENDING

    def succeeded(self) -> bool:
        """Whether the write completed without error."""
        return self._state is not _PENDING and self._exception is None

    def exception(self) -> BaseException | None:
        """The failure, or None (also while pending)."""
        return self._exception

    def add_done_callback(self, callback: Callable[[Self], None]) -> None:
        """Call ``callback(self)`` when done, at once if already done.

        An exception the callback raises is logged (as Netty logs a failing listener): it must
        not break the channel's writer, which completes futures.
        """
        if self._state is not _PENDING:
            _call(callback, self)
            return
        if self._callbacks is None:
            self._callbacks = []
        self._callbacks.append(callback)

    def set_result(self) -> bool:
        """Mark the write complete; returns False if it was already done."""
        return self._finish(None)

    def set_exception(self, exc: BaseException) -> bool:
        """Mark the write failed; returns False if it was already done."""
        return self._finish(exc)

    def _finish(self, exc: BaseException | None) -> bool:
        if self._state is not _PENDING:
            return False
        self._state = None
        self._exception = exc
        self._ctx = None
        if self._event is not None:
            self._event.set()
        callbacks, self._callbacks = self._callbacks, None
        if callbacks:
            for callback in callbacks:
                _call(callback, self)
        return True

    async def wait(self) -> None:
        """Wait until done; raise the failure if there was one."""
        if self._state is _PENDING:
            if self._event is None:
                self._event = trio.Event()
            await self._event.wait()
        else:
            await trio.lowlevel.checkpoint()
        if self._exception is not None:
            raise self._exception

    def __await__(self) -> Generator[Any, None, None]:
        return self.wait().__await__()

    def __repr__(self) -> str:
        if self._state is _PENDING:
            state = "pending"
        elif self._exception is None:
            state = "done"
        else:
            state = f"failed: {self._exception!r}"
        return f"<{type(self).__name__} {state}>"


class WriteFuture(ChannelFuture):
    """Completes when a write's bytes were handed to the kernel (or to the embedded outbound
    queue), fails when the channel closes first or an outbound handler raises.

    An outbound handler must pass the future on with the message (``ctx.write(msg, future)``)
    or complete it itself. One that drops it leaves whoever awaits the write waiting forever;
    hanet reports that, as Netty's leak detector reports a buffer nobody released: a write
    future garbage-collected while still pending logs a WARNING naming the handler that last
    received it (the pipeline records that handler as the future passes each context).
    """

    __slots__ = ()

    def __init__(self) -> None:
        # Not super().__init__(): one call less per write.
        self._state = _PENDING
        self._exception = None
        self._callbacks = None
        self._event = None
        self._ctx = None

    def __del__(self) -> None:
        if self._state is _PENDING and self._ctx is not None:
            _report_dropped(self._ctx)


def _report_dropped(ctx: HandlerContext) -> None:
    """A pending write future died in ``ctx``'s handler: it never passed it on or completed it.

    The head is not blamed: a future queued in the transport was dropped with its channel
    (an embedded channel never finished), not by a handler.
    """
    try:
        pipeline = ctx.pipeline
        if ctx is pipeline._head:
            return
        log.warning(
            "%s: a write future was garbage-collected without being completed: handler %r (%s) "
            "received it and neither passed it on (ctx.write(msg, future)) nor completed it; "
            "whoever awaited that write would have waited forever",
            pipeline.channel,
            ctx.name,
            type(ctx.handler).__name__,
        )
    except Exception:  # pragma: no cover - a finalizer must not raise (interpreter shutdown)
        pass


def combine_futures(futures: Sequence[ChannelFuture], aggregate: ChannelFuture) -> None:
    """Complete ``aggregate`` once every future in ``futures`` is done (Netty's
    ``PromiseCombiner``): with the first failure among them, else with success. An empty
    sequence completes it at once.

    ``aggregate`` is no longer reported if it is dropped: it waits on ``futures``, and one of
    them dropped on its way is reported with the handler that dropped it.
    """
    aggregate._ctx = None
    pending = len(futures)
    if not pending:
        aggregate.set_result()
        return
    state: list[Any] = [pending, None]

    def one_done(future: ChannelFuture) -> None:
        exc = future.exception()
        if exc is not None and state[1] is None:
            state[1] = exc
        state[0] -= 1
        if state[0] == 0:
            if state[1] is None:
                aggregate.set_result()
            else:
                aggregate.set_exception(state[1])

    for future in futures:
        future.add_done_callback(one_done)


def _call(callback: Callable[[Any], None], future: ChannelFuture) -> None:
    try:
        callback(future)
    except Exception as exc:
        log.warning("a write future's callback %r raised %r", callback, exc, exc_info=exc)
