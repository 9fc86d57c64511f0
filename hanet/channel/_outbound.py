"""The outbound buffer: queued writes, flush boundaries, coalescing and water marks."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import attrs

from ._future import WriteFuture

__all__ = ["OutboundBuffer", "ReadOnlyBuffer", "WaterMarks"]


def _check_marks(instance: WaterMarks, attribute: object, value: int) -> None:
    if instance.low < 0:
        raise ValueError(f"low water mark must be >= 0: {instance.low}")
    if instance.high < instance.low:
        raise ValueError(
            f"write buffer's high water mark cannot be less than low water mark "
            f"({instance.low}): {instance.high}"
        )


def _check_overhead(instance: WaterMarks, attribute: object, value: int) -> None:
    if value < 0:
        raise ValueError(f"entry_overhead must be >= 0: {value}")


@attrs.frozen
class WaterMarks:
    """Back-pressure thresholds of queued bytes (Netty's defaults: 32 KiB / 64 KiB).

    Each queued message counts for its length plus ``entry_overhead`` bytes (96, as Netty's
    ``ChannelOutboundBuffer``), so many tiny writes are bounded too. The channel becomes
    unwritable when the count exceeds ``high`` (strictly) and writable again when it falls
    below ``low`` (strictly).
    """

    low: int = 32 * 1024
    high: int = attrs.field(default=64 * 1024, validator=_check_marks)
    entry_overhead: int = attrs.field(default=96, validator=_check_overhead)


@attrs.frozen
class ReadOnlyBuffer:
    """A message of bytes that never change: a channel sends ``view`` without a copy.

    A channel snapshots every other bytes-like message when it is written (the writer may
    reuse its buffer at once); wrapping bytes in this marker is the writer's promise that they
    stay as they are until sent (Netty's read-only ``ByteBuf`` / ``FileRegion``), such as a
    view of commit log bytes already written to a mapped file. The view is held only while the
    write is queued: it is dropped when sent or when the channel closes. Outbound handlers that
    look only for bytes-like messages pass it through untouched.
    """

    view: memoryview

    def __len__(self) -> int:
        return self.view.nbytes


def message_size(msg: Any) -> int:
    """Bytes a message counts for in the buffer: its length if bytes-like, else 0."""
    if isinstance(msg, bytes | bytearray | memoryview):
        return len(msg) if not isinstance(msg, memoryview) else msg.nbytes
    return 0


class OutboundBuffer:
    """Written messages waiting for a flush, and flushed ones waiting for the transport.

    ``on_writability`` is called (synchronously) each time ``is_writable`` flips.
    """

    def __init__(self, marks: WaterMarks, on_writability: Callable[[], None]) -> None:
        self._low = marks.low
        self._high = marks.high
        self._overhead = marks.entry_overhead
        self._on_writability = on_writability
        self._unflushed: deque[tuple[Any, int, WriteFuture]] = deque()
        self._flushed: deque[tuple[Any, int, WriteFuture]] = deque()
        #: What the water marks compare: queued bytes plus ``entry_overhead`` per message.
        self.pending_bytes = 0
        #: Queued payload bytes (flushed or not, until sent).
        self.queued_bytes = 0
        self.is_writable = True

    @property
    def bytes_before_unwritable(self) -> int:
        """How many more pending bytes keep the buffer writable (0 when unwritable)."""
        return max(self._high - self.pending_bytes + 1, 0) if self.is_writable else 0

    @property
    def bytes_before_writable(self) -> int:
        """How many pending bytes must leave before it is writable again (0 when writable)."""
        return 0 if self.is_writable else max(self.pending_bytes - self._low + 1, 0)

    def add(self, msg: Any, future: WriteFuture) -> None:
        """Queue a message (not yet flushed); a :class:`ReadOnlyBuffer` is queued as its view."""
        if type(msg) is ReadOnlyBuffer:
            msg = msg.view
        size = message_size(msg)
        self._unflushed.append((msg, size, future))
        self.queued_bytes += size
        self.pending_bytes += size + self._overhead
        if self.is_writable and self.pending_bytes > self._high:
            self.is_writable = False
            self._on_writability()

    def add_flush(self) -> None:
        """Mark everything queued so far as flushed."""
        if self._unflushed:
            self._flushed.extend(self._unflushed)
            self._unflushed.clear()

    @property
    def has_flushed(self) -> bool:
        return bool(self._flushed)

    def take(
        self, max_bytes: int, max_parts: int = 1024
    ) -> tuple[list[Any], list[WriteFuture], int]:
        """Remove flushed messages, oldest first, up to ``max_bytes`` and ``max_parts`` (at
        least one message, however large).

        Returns the messages (for one gathering write), the futures to complete once they are
        sent, and their byte count.
        """
        flushed = self._flushed
        msg, total, future = flushed.popleft()
        parts = [msg]
        futures = [future]
        while flushed and len(parts) < max_parts:
            size = flushed[0][1]
            if total + size > max_bytes:
                break
            msg, size, future = flushed.popleft()
            parts.append(msg)
            futures.append(future)
            total += size
        return parts, futures, total

    def take_bytes(self, max_bytes: int) -> tuple[bytes, list[WriteFuture], int]:
        """As :meth:`take`, with the messages joined into one bytes object."""
        parts, futures, total = self.take(max_bytes)
        return (parts[0] if len(parts) == 1 else b"".join(parts)), futures, total

    def take_all_flushed(self) -> list[tuple[Any, WriteFuture]]:
        """Remove every flushed message (the embedded channel's 'socket')."""
        out = [(msg, future) for msg, _, future in self._flushed]
        self._flushed.clear()
        return out

    def sent(self, nbytes: int, entries: int = 1) -> None:
        """Account for ``nbytes`` in ``entries`` messages that left the buffer."""
        self.queued_bytes -= nbytes
        self.pending_bytes -= nbytes + entries * self._overhead
        if not self.is_writable and self.pending_bytes < self._low:
            self.is_writable = True
            self._on_writability()

    def fail_all(self, exc_factory: Callable[[], BaseException]) -> None:
        """Fail every queued write (the channel closed)."""
        entries = list(self._flushed) + list(self._unflushed)
        self._flushed.clear()
        self._unflushed.clear()
        self.pending_bytes = 0
        self.queued_bytes = 0
        for _, _, future in entries:
            future.set_exception(exc_factory())
