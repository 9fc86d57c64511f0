"""WriteFuture: the result of a write, usable from sync handlers and awaitable from tasks."""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from typing import Any

import trio

__all__ = ["WriteFuture"]

log = logging.getLogger("hanet.channel")

_PENDING = object()


class WriteFuture:
    """Completes when a write's bytes were handed to the kernel (or to the embedded outbound
    queue), fails when the channel closes first or an outbound handler raises.

    Handlers, being synchronous, use :meth:`add_done_callback`; tasks ``await`` it, which
    returns ``None`` or raises the failure. Awaiting always checkpoints. Cancelling the awaiting
    task does not cancel the write.
    """

    __slots__ = ("_callbacks", "_event", "_exception", "_state")

    def __init__(self) -> None:
        self._state: object = _PENDING
        self._exception: BaseException | None = None
        self._callbacks: list[Callable[[WriteFuture], None]] | None = None
        self._event: trio.Event | None = None

    def done(self) -> bool:
        """Whether the write has completed or failed."""
        return self._state is not _PENDING

    def succeeded(self) -> bool:
        """Whether the write completed without error."""
        return self._state is not _PENDING and self._exception is None

    def exception(self) -> BaseException | None:
        """The failure, or None (also while pending)."""
        return self._exception

    def add_done_callback(self, callback: Callable[[WriteFuture], None]) -> None:
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
        return f"<WriteFuture {state}>"


def _call(callback: Callable[[WriteFuture], None], future: WriteFuture) -> None:
    try:
        callback(future)
    except Exception as exc:
        log.warning("a write future's callback %r raised %r", callback, exc, exc_info=exc)
