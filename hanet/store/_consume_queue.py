"""Consume queues: the per-(topic, queue id) index of a commit log, as RocketMQ's.

``consumequeue/<topic>/<queueId>/`` holds mapped files (6,000,000 bytes by default, named by
their byte offset) of 20-byte entries: ``i64`` commit log offset, ``i32`` size, ``i64`` tag
hash. The entry of queue offset ``q`` is at byte ``q * 20``. A queue that starts past 0 (a
slave that joined late) fills the start of its first file with blank entries
(offset 0, size ``0x7FFFFFFF``, hash 0), as RocketMQ's ``fillPreBlank``.
"""

from __future__ import annotations

import struct
from pathlib import Path

from ._mapped_queue import MappedFileQueue

__all__ = ["CQ_BLANK_SIZE", "CQ_ENTRY_SIZE", "ConsumeQueue"]

CQ_ENTRY_SIZE = 20
"""Bytes per consume queue entry."""

_ENTRY = struct.Struct(">qiq")
CQ_BLANK_SIZE = 0x7FFFFFFF
"""The size field of a blank entry (RocketMQ's ``fillPreBlank``): no message behind it."""
_BLANK_ENTRY = _ENTRY.pack(0, CQ_BLANK_SIZE, 0)
_NO_ENTRIES = memoryview(b"")


class ConsumeQueue:
    """The consume queue of one topic and queue id.

    Args:
        directory: ``consumequeue/<topic>/<queueId>``.
        topic, queue_id: what it indexes.
        file_size: bytes per file, a multiple of 20 (RocketMQ: 6,000,000).
        warm: pre-fault new files.
    """

    def __init__(
        self, directory: Path, topic: str, queue_id: int, file_size: int, *, warm: bool = True
    ) -> None:
        if file_size % CQ_ENTRY_SIZE:
            raise ValueError(f"consume queue file size {file_size} is not a multiple of 20")
        self.topic = topic
        self.queue_id = queue_id
        self.files = MappedFileQueue(directory, file_size, warm=warm)
        self.min_queue_offset = 0

    def load(self) -> None:
        """Map the existing files and find the end of the entries (the first zero entry).

        Raises:
            StoreLayoutError: wrong file size or a gap.
        """
        self.files.load()
        if not self.files.files:
            return
        # Entries are written contiguously and truncation zeroes what it drops, so the end is
        # the first entry whose size is 0: binary search over each file from the last one.
        end = self.files.files[0].start_offset
        for mapped in reversed(self.files.files):
            count = self._count_entries(mapped.view, mapped.size // CQ_ENTRY_SIZE)
            if count:
                end = mapped.start_offset + count * CQ_ENTRY_SIZE
                break
        self.files.truncate(end)
        self.min_queue_offset = self.files.files[0].start_offset // CQ_ENTRY_SIZE
        first = self.files.files[0]
        for i in range(first.wrote // CQ_ENTRY_SIZE):
            if _ENTRY.unpack_from(first.view, i * CQ_ENTRY_SIZE)[1] != CQ_BLANK_SIZE:
                break
            self.min_queue_offset += 1

    @staticmethod
    def _count_entries(view: memoryview, capacity: int) -> int:
        lo, hi = 0, capacity
        while lo < hi:
            mid = (lo + hi) // 2
            if _ENTRY.unpack_from(view, mid * CQ_ENTRY_SIZE)[1] != 0:
                lo = mid + 1
            else:
                hi = mid
        return lo

    @property
    def max_queue_offset(self) -> int:
        """The queue offset the next message of this queue gets (entries held: ``[min, max)``)."""
        return self.files.max_offset // CQ_ENTRY_SIZE

    def append(self, queue_offset: int, physical_offset: int, size: int, tags_hash: int) -> None:
        """Write the entry of ``queue_offset``: normally :attr:`max_queue_offset`; past it, the
        gap (or, in an empty queue, the start of its first file) is filled with blank entries
        (:meth:`append_entries` of one entry, with a put's fast path first).

        Raises:
            OffsetMismatchError: ``queue_offset`` is below :attr:`max_queue_offset`.
            CreateMappedFileError: a file the entry needs cannot be created.
        """
        files = self.files.files
        if files:  # fast path (a put's): room in the last file, right at its end
            last = files[-1]
            wrote = last.wrote
            if wrote < last.size and last.start_offset + wrote == queue_offset * CQ_ENTRY_SIZE:
                _ENTRY.pack_into(last.view, wrote, physical_offset, size, tags_hash)
                last.wrote = wrote + CQ_ENTRY_SIZE
                return
        self.append_entries(queue_offset, _ENTRY.pack(physical_offset, size, tags_hash))

    def append_entries(self, queue_offset: int, entries: bytes | bytearray | memoryview) -> None:
        """Write packed 20-byte entries (``>qiq`` each) from ``queue_offset`` on, in one write:
        :meth:`append` for each of them in turn, with the same blank fill before a gap (or, in
        an empty queue, from the start of its first file). Entries that reach the end of a file
        go on in the next one. All or nothing: a file that cannot be created writes nothing.

        Raises:
            OffsetMismatchError: ``queue_offset`` is below :attr:`max_queue_offset`.
            ValueError: ``entries`` is not a whole number of entries.
            CreateMappedFileError: a file the entries need cannot be created.
        """
        length = len(entries)
        if length % CQ_ENTRY_SIZE:
            raise ValueError(f"{length} bytes are not a whole number of 20-byte entries")
        if not length:
            return
        position = queue_offset * CQ_ENTRY_SIZE
        queue = self.files
        files = queue.files
        if files:
            last = files[-1]
            wrote = last.wrote
            end = last.start_offset + wrote
            if end == position and wrote + length <= last.size:  # fast path: room in the last
                last.view[wrote : wrote + length] = entries
                last.wrote = wrote + length
                return
            if position > end:  # a gap: blanks first, as append
                gap = _BLANK_ENTRY * ((position - end) // CQ_ENTRY_SIZE)
                queue.append_raw(end, b"".join((gap, entries)))
                return
            queue.append_raw(position, entries)  # at the end, or OffsetMismatchError below it
            return
        start = queue.file_start(position)
        if position > start:
            gap = _BLANK_ENTRY * ((position - start) // CQ_ENTRY_SIZE)
            queue.append_raw(start, b"".join((gap, entries)))
        else:
            queue.append_raw(position, entries)
        self.min_queue_offset = queue_offset

    def fill_blank(
        self, queue_offset: int, physical_offset: int, size: int, tags_hash: int
    ) -> None:
        """Write the entry of a repaired record over the blank entry (a gap) at
        ``queue_offset``.

        Raises:
            ValueError: no blank entry is held there.
        """
        entry = self.get(queue_offset)
        if entry is None or entry[1] != CQ_BLANK_SIZE:
            raise ValueError(f"no blank entry at queue offset {queue_offset}")
        position = queue_offset * CQ_ENTRY_SIZE
        mapped = self.files.find(position)
        assert mapped is not None
        at = position - mapped.start_offset
        mapped.view[at : at + CQ_ENTRY_SIZE] = _ENTRY.pack(physical_offset, size, tags_hash)

    def get(self, queue_offset: int) -> tuple[int, int, int] | None:
        """``(physical offset, size, tag hash)`` of an entry, or None if not held."""
        if not self.min_queue_offset <= queue_offset < self.max_queue_offset:
            return None
        position = queue_offset * CQ_ENTRY_SIZE
        mapped = self.files.find(position)
        if mapped is None:
            return None
        entry: tuple[int, int, int] = _ENTRY.unpack_from(
            mapped.view, position - mapped.start_offset
        )
        return entry

    def entries(self, queue_offset: int, count: int) -> list[tuple[int, int, int]]:
        """Up to ``count`` entries from ``queue_offset`` on, as :meth:`get` each, read in one
        go from one file (fewer at a file's end: ask again from there); [] if not held."""
        return list(_ENTRY.iter_unpack(self.entries_view(queue_offset, count)))

    def entries_view(self, queue_offset: int, count: int) -> memoryview:
        """As :meth:`entries`, the entries as stored (20 bytes each) in a read-only view of
        the mapped file (empty if not held): what a native reader walks."""
        high = min(queue_offset + count, self.max_queue_offset)
        if not self.min_queue_offset <= queue_offset < high:
            return _NO_ENTRIES
        position = queue_offset * CQ_ENTRY_SIZE
        mapped = self.files.find(position)
        if mapped is None:
            return _NO_ENTRIES
        start = position - mapped.start_offset
        end = min(start + (high - queue_offset) * CQ_ENTRY_SIZE, mapped.wrote)
        if end <= start:
            return _NO_ENTRIES
        return mapped.view[start:end].toreadonly()

    def truncate_physical(self, physical_end: int, floor: int = 0) -> int:
        """Drop the entries from queue offset ``floor`` on that point at or past
        ``physical_end``, with the blank entries just before them (they filled the gap before
        a dropped entry); returns how many were dropped. With a ``floor``: undo the tail of a
        batch written from there on.

        Entries grow with the physical offset, so it walks back from the last one.
        """
        high = q = self.max_queue_offset
        while q > max(floor, self.min_queue_offset):
            entry = self.get(q - 1)
            if entry is None or (entry[1] != CQ_BLANK_SIZE and entry[0] + entry[1] <= physical_end):
                break
            q -= 1
        if q < high:
            if q <= self.min_queue_offset:
                self.files.delete_all()
                self.min_queue_offset = 0
            else:
                self.files.truncate(q * CQ_ENTRY_SIZE)
        return high - q

    # -- retention ---------------------------------------------------------------------------

    def correct_min_offset(self, physical_min: int) -> int:
        """Advance :attr:`min_queue_offset` past the entries whose message lies below the
        commit log's ``physical_min`` (deleted by retention; blank entries before them too):
        RocketMQ's ``correctMinOffset``. Returns the new min (the max when no entry is left).

        The non-blank entries of a queue point at growing physical offsets, so this is a
        binary search (a blank entry stands for the next non-blank one after it): a deletion
        of a file of a million messages does not walk a million entries on the event loop.
        """
        end = self.max_queue_offset
        low, high = self.min_queue_offset, end
        while low < high:
            middle = (low + high) // 2
            physical = self._next_physical(middle, end)
            if physical is not None and physical >= physical_min:
                high = middle
            else:
                low = middle + 1
        while low < end:  # blank entries before the first kept one go with what they preceded
            entry = self.get(low)
            if entry is None or entry[1] != CQ_BLANK_SIZE:
                break
            low += 1
        self.min_queue_offset = low
        return low

    def _next_physical(self, queue_offset: int, end: int) -> int | None:
        """The physical offset of the first non-blank entry in ``[queue_offset, end)``."""
        for q in range(queue_offset, end):
            entry = self.get(q)
            if entry is None:
                return None
            if entry[1] != CQ_BLANK_SIZE:
                return entry[0]
        return None

    def delete_expired_files(self, physical_min: int, *, force: bool = False) -> int:
        """Delete the files (never the last) whose last entry points below ``physical_min``
        (every message they index is gone: RocketMQ's ``deleteExpiredFileByOffset``), then
        :meth:`correct_min_offset`. Returns how many files were deleted. A file a reader
        still maps is kept unless ``force`` (see :meth:`MappedFileQueue.delete_first`)."""
        files = self.files
        deleted = 0
        while len(files.files) > 1:
            if self._last_physical(files.files[0].view) >= physical_min:
                break
            if not files.delete_first(force=force):
                break
            deleted += 1
        first_offset = files.min_offset // CQ_ENTRY_SIZE
        self.min_queue_offset = max(self.min_queue_offset, first_offset)
        self.correct_min_offset(physical_min)
        return deleted

    @staticmethod
    def _last_physical(view: memoryview) -> int:
        """The commit log offset of the last non-blank entry of a full file (-1: none)."""
        for position in range(len(view) - CQ_ENTRY_SIZE, -1, -CQ_ENTRY_SIZE):
            physical, size, _ = _ENTRY.unpack_from(view, position)
            if size != CQ_BLANK_SIZE:
                return int(physical)
        return -1

    def flush(self) -> None:
        """``fdatasync`` the files (blocks: worker thread)."""
        self.files.flush()

    def close(self) -> None:
        """Unmap the files."""
        self.files.close()
