"""Channel: what every channel (socket-backed or embedded) has in common."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from ._address import format_address
from ._errors import ChannelClosedError
from ._future import ChannelFuture, WriteFuture
from ._outbound import FileRegion, OutboundBuffer, ReadOnlyBuffer, WaterMarks
from ._pipeline import Pipeline
from ._timers import TimerHandle, TimerQueue

__all__ = ["Channel", "ChannelConfig", "ChannelStatistics"]

log = logging.getLogger("hanet.channel")

DEFAULT_READ_SIZE = 256 * 1024
DEFAULT_WRITE_COALESCE = 256 * 1024

_ids = itertools.count(1)


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be > 0: {value}")


def _positive_seconds(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be > 0: {value}")


@attrs.frozen
class ChannelConfig:
    """Per-channel settings.

    Attributes:
        read_size: bytes asked of the stream per read (256 KiB).
        write_coalesce: most bytes joined into one ``send_all`` (256 KiB); everything written
            before a flush leaves in as few calls as this allows.
        water_marks: back-pressure thresholds of queued outbound bytes.
        auto_read: read continuously; when False, read only when ``ctx.read()`` asks.
        close_timeout: seconds a close waits for the bytes flushed before it to reach the
            kernel (5 s); past that the connection is dropped and those writes fail.
    """

    read_size: int = attrs.field(default=DEFAULT_READ_SIZE, validator=_positive)
    write_coalesce: int = attrs.field(default=DEFAULT_WRITE_COALESCE, validator=_positive)
    water_marks: WaterMarks = attrs.field(factory=WaterMarks)
    auto_read: bool = True
    close_timeout: float = attrs.field(default=5.0, validator=_positive_seconds)


_DEFAULT_CONFIG = ChannelConfig()


@attrs.frozen
class ChannelStatistics:
    """A snapshot of a channel's counters."""

    bytes_read: int
    bytes_written: int
    #: Calls to the transport's receive (one ``channel_read`` of raw bytes each).
    reads: int
    #: Calls to the transport's send (one ``send_all`` or gathering ``sendmsg`` each).
    sends: int
    #: Messages (frames) whose bytes were handed to the transport.
    messages_written: int
    #: Payload bytes written and not yet handed to the transport (flushed or not).
    queued_bytes: int
    is_writable: bool
    is_active: bool


class Channel:
    """A connection and its pipeline.

    Subclasses provide the transport (``_transport_*``), the clock and the task nursery.
    """

    def __init__(self, config: ChannelConfig | None = None) -> None:
        self.config = config if config is not None else _DEFAULT_CONFIG
        self.id = next(_ids)
        self.attributes: dict[str, Any] = {}
        self.pipeline = Pipeline(self)
        self._outbound = OutboundBuffer(self.config.water_marks, self._writability_flipped)
        self._timers = TimerQueue()
        self._auto_read = self.config.auto_read
        self._read_holds: set[object] | None = None
        self._open = True
        self._active = False
        self._close_reason: str | None = None
        self._close_future = ChannelFuture()
        self._bytes_read = 0
        self._bytes_written = 0
        self._reads = 0
        self._sends = 0
        self._messages_written = 0

    # -- state -----------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        """False once the channel closed (or started closing)."""
        return self._open

    @property
    def is_active(self) -> bool:
        """True between ``channel_active`` and ``channel_inactive``."""
        return self._active

    @property
    def is_writable(self) -> bool:
        """False while queued outbound bytes are above the high water mark."""
        return self._outbound.is_writable

    @property
    def bytes_before_unwritable(self) -> int:
        """How many more bytes may be written before the channel turns unwritable (0 if it
        is), counting each message's ``entry_overhead`` as the water marks do."""
        return self._outbound.bytes_before_unwritable

    @property
    def bytes_before_writable(self) -> int:
        """How many queued bytes must leave before the channel is writable again (0 if it
        is)."""
        return self._outbound.bytes_before_writable

    @property
    def auto_read(self) -> bool:
        """Whether the channel reads continuously (else only on ``ctx.read()``)."""
        return self._auto_read

    @auto_read.setter
    def auto_read(self, value: bool) -> None:
        self._auto_read = value
        if value:
            self._transport_read()

    def hold_reads(self, holder: object) -> None:
        """Stop reading until :meth:`release_reads` with the same ``holder``, whatever
        :attr:`auto_read` says (reads asked for meanwhile wait). Several holders may hold
        at once, independently of each other and of ``auto_read`` (a memory budget does)."""
        if self._read_holds is None:
            self._read_holds = set()
        self._read_holds.add(holder)

    def release_reads(self, holder: object) -> None:
        """End ``holder``'s hold; reading goes on as ``auto_read`` says once no hold is left."""
        holds = self._read_holds
        if holds is None:
            return
        holds.discard(holder)
        if not holds:
            self._read_holds = None
            self._transport_reads_released()

    @property
    def reads_held(self) -> bool:
        """Whether a :meth:`hold_reads` holder stops reading."""
        return bool(self._read_holds)

    @property
    def close_future(self) -> ChannelFuture:
        """Done once the channel has closed: after ``channel_inactive`` and the removal of its
        handlers (Netty's ``closeFuture()``). It never fails. Callbacks run synchronously,
        in the task that closed the channel; ``await channel.close_future`` waits for it."""
        return self._close_future

    @property
    def close_reason(self) -> str | None:
        """Why the channel closed (the first reason given), if known."""
        return self._close_reason

    @property
    def remote_address(self) -> object:
        """The peer's address, if the transport has one."""
        return None

    @property
    def local_address(self) -> object:
        """This end's address, if the transport has one."""
        return None

    def _set_close_reason(self, reason: str) -> None:
        if self._close_reason is None:
            self._close_reason = reason

    def statistics(self) -> ChannelStatistics:
        """Counters: bytes in and out, read and send calls, queued bytes, state."""
        return ChannelStatistics(
            bytes_read=self._bytes_read,
            bytes_written=self._bytes_written,
            reads=self._reads,
            sends=self._sends,
            messages_written=self._messages_written,
            queued_bytes=self._outbound.queued_bytes,
            is_writable=self._outbound.is_writable,
            is_active=self._active,
        )

    def __repr__(self) -> str:
        peer = self.remote_address
        return f"<{type(self).__name__} #{self.id}{f' peer={peer}' if peer else ''}>"

    def __str__(self) -> str:
        peer = self.remote_address
        return f"channel #{self.id}" + (f" ({format_address(peer)})" if peer else "")

    # -- operations --------------------------------------------------------------------------

    def write_and_flush_nowait(self, msg: Any) -> WriteFuture:
        """Write ``msg`` through the whole pipeline and flush, without waiting."""
        return self.pipeline.write_and_flush(msg)

    def close_nowait(self, reason: str | None = None) -> ChannelFuture:
        """Start closing the channel (through the pipeline's outbound handlers); returns
        :attr:`close_future`."""
        if self._open:
            self.pipeline.close(reason)
        return self._close_future

    def now(self) -> float:
        """The channel's clock in seconds."""
        raise NotImplementedError

    def schedule(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` after ``delay`` seconds; the timer dies with the channel.

        An exception it raises is fired into the pipeline from the head (``exception_caught``).
        """
        return self._timers.schedule_at(self.now() + max(delay, 0.0), callback)

    def spawn(self, async_fn: Callable[[], Awaitable[object]]) -> None:
        """Run a task in the channel's nursery (cancelled when the channel closes)."""
        raise NotImplementedError

    def _run_due_timers(self) -> None:
        now = self.now()
        while True:
            callback = self._timers.pop_due(now)
            if callback is None:
                return
            try:
                callback()
            except Exception as exc:
                # A timer set with channel.schedule (ctx.schedule routes its own errors to the
                # handler): an error is the pipeline's, not the timer task's, to handle.
                self.pipeline.fire_exception_caught(exc)

    # -- transport hooks (called by the head) -----------------------------------------------

    def _transport_write(self, msg: Any, future: WriteFuture) -> None:
        if not self._open:
            if type(msg) is FileRegion:
                msg.release()
            future.set_exception(ChannelClosedError(f"{self} is closed"))
            return
        # bytes, a ReadOnlyBuffer (its view) and a FileRegion are queued as they are
        kind = type(msg)
        if kind is not bytes and kind is not ReadOnlyBuffer and kind is not FileRegion:
            if isinstance(msg, bytearray | memoryview):
                msg = bytes(msg)  # snapshot: the caller may reuse its buffer at once
            else:
                future.set_exception(
                    TypeError(
                        f"{type(msg).__name__} reached the head of the pipeline; "
                        "only bytes-like messages can be sent (missing an encoder?)"
                    )
                )
                return
        self._outbound.add(msg, future)

    def _transport_flush(self) -> None:
        raise NotImplementedError

    def _transport_read(self) -> None:
        raise NotImplementedError

    def _transport_close(self) -> None:
        raise NotImplementedError

    def _transport_reads_released(self) -> None:
        """The last read hold was released (a transport wakes its reader)."""

    def _writability_flipped(self) -> None:
        self.pipeline.fire_channel_writability_changed()

    # -- tail hooks ---------------------------------------------------------------------------

    def _on_unhandled_message(self, msg: Any) -> None:
        if not log.isEnabledFor(logging.DEBUG):
            return  # the preview and the handler names cost more than the message, per frame
        log.debug(
            "%s: discarded inbound message %r that reached the tail of the pipeline %s",
            self,
            _preview(msg),
            self.pipeline.names(),
        )

    def _on_unhandled_exception(self, exc: BaseException) -> None:
        log.warning(
            "%s: closing: an exception reached the tail of the pipeline: %s",
            self,
            _describe(exc),
            exc_info=exc if log.isEnabledFor(logging.DEBUG) else None,
        )
        self._set_close_reason(_describe(exc))
        self.close_nowait()

    def _on_outbound_error(self, exc: BaseException) -> None:
        log.debug("%s: an outbound handler failed a write: %r", self, exc)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _preview(msg: Any) -> Any:
    if isinstance(msg, bytes | bytearray | memoryview) and len(msg) > 32:
        return f"<{len(msg)} bytes {bytes(msg[:16]).hex()}...>"
    return msg
