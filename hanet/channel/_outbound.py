"""The outbound buffer: queued writes, flush boundaries, coalescing and water marks."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from typing import Any

import attrs

from ._future import WriteFuture

__all__ = ["FileRegion", "OutboundBuffer", "ReadOnlyBuffer", "WaterMarks"]


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


def _check_region(instance: FileRegion, attribute: object, value: int) -> None:
    if value < 0:
        raise ValueError(f"a file region's {attribute.name} must be >= 0: {value}")  # type: ignore[attr-defined]


@attrs.define(eq=False)
class FileRegion:
    """``count`` bytes of an open file from ``position``, sent without being copied through
    Python (Netty's ``DefaultFileRegion``).

    On plain TCP a channel sends them with ``os.sendfile`` straight from the file; on any other
    stream (TLS, memory streams) it sends ``view`` when one is given (the same bytes, e.g. the
    store's mapping) or else reads them with ``os.pread``. :class:`~hanet.testing.EmbeddedChannel`
    records the bytes. The region owns ``fd``, as Netty's region owns its file: it is closed by
    :meth:`release`, which the channel calls once the bytes are sent or the write failed.
    :meth:`of` duplicates a descriptor the caller keeps, so the file may be closed, truncated or
    deleted by its owner meanwhile and the region still reads what it named.
    """

    fd: int
    position: int = attrs.field(validator=_check_region)
    count: int = attrs.field(validator=_check_region)
    view: memoryview | None = None
    released: bool = attrs.field(default=False, init=False)

    @classmethod
    def of(cls, fd: int, position: int, count: int, view: memoryview | None = None) -> FileRegion:
        """A region of the file open as ``fd`` (not taken: the region works on a duplicate)."""
        if position < 0 or count < 0:
            name = "position" if position < 0 else "count"
            raise ValueError(f"a file region's {name} must be >= 0: {min(position, count)}")
        if view is not None and view.nbytes != count:
            raise ValueError(f"the view has {view.nbytes} bytes, the region {count}")
        return cls(os.dup(fd), position, count, view)

    def __len__(self) -> int:
        return self.count

    def read(self) -> bytes | memoryview:
        """The region's bytes: ``view`` if given, else read from the file."""
        if self.view is not None:
            return self.view
        if self.released:
            raise ValueError("the file region was released")
        out = bytearray()
        while len(out) < self.count:
            chunk = os.pread(self.fd, self.count - len(out), self.position + len(out))
            if not chunk:
                raise EOFError(
                    f"file region [{self.position}, {self.position + self.count}) goes past "
                    f"the end of the file (at {self.position + len(out)})"
                )
            out += chunk
        return bytes(out)

    def release(self) -> None:
        """Close the descriptor (idempotent); the view is dropped too."""
        if not self.released:
            self.released = True
            self.view = None
            os.close(self.fd)


def message_size(msg: Any) -> int:
    """Bytes a message counts for in the buffer: its length if bytes-like or a file region,
    else 0."""
    if isinstance(msg, bytes | bytearray | memoryview):
        return len(msg) if not isinstance(msg, memoryview) else msg.nbytes
    if type(msg) is FileRegion:
        return msg.count
    return 0


def release_regions(parts: list[Any]) -> None:
    """Release every :class:`FileRegion` among ``parts`` (sent or failed)."""
    for part in parts:
        if type(part) is FileRegion:
            part.release()


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
        #: Whether the last :meth:`take` returned a :class:`FileRegion` among its messages.
        self.regions_taken = False
        self._regions_queued = 0

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
        elif type(msg) is FileRegion:
            self._regions_queued += 1
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

    @property
    def flushed(self) -> deque[tuple[Any, int, WriteFuture]]:
        """The flushed messages waiting for the transport (the same deque for the buffer's
        life: a transport may keep it and test it for being non-empty, as ``has_flushed``,
        without a call a test). Read-only to its users: :meth:`take` removes from it."""
        return self._flushed

    @property
    def has_regions(self) -> bool:
        """Whether a :class:`FileRegion` is queued (flushed or not)."""
        return self._regions_queued > 0

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
        if self._regions_queued:
            regions = sum(1 for part in parts if type(part) is FileRegion)
            self._regions_queued -= regions
            self.regions_taken = regions > 0
        else:
            self.regions_taken = False
        return parts, futures, total

    def take_bytes(self, max_bytes: int) -> tuple[bytes, list[WriteFuture], int]:
        """As :meth:`take`, with the messages joined into one bytes object."""
        parts, futures, total = self.take(max_bytes)
        return (parts[0] if len(parts) == 1 else b"".join(parts)), futures, total

    def take_all_flushed(self) -> list[tuple[Any, WriteFuture]]:
        """Remove every flushed message (the embedded channel's 'socket')."""
        out = [(msg, future) for msg, _, future in self._flushed]
        self._regions_queued -= sum(1 for msg, _ in out if type(msg) is FileRegion)
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
        self._regions_queued = 0
        for msg, _, future in entries:
            if type(msg) is FileRegion:
                msg.release()
            future.set_exception(exc_factory())
