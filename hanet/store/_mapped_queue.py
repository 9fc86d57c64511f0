"""A directory of contiguous fixed-size mapped files: RocketMQ's ``MappedFileQueue``.

Files are named by their 20-digit start offset and follow each other without gaps: file ``k``
starts at ``first + k * file_size``. Offsets are absolute (physical offsets for the commit log,
byte offsets for a consume queue). The queue knows its data range ``[min_offset, max_offset)``,
reads slices that never cross a file, appends raw bytes at an exact offset (what an HA slave
does) and truncates (what recovery does).

Everything here is synchronous and in memory except :meth:`MappedFileQueue.flush`, which
waits for the disk, and :meth:`MappedFileQueue.allocate_next`, which reserves a whole file (run
them in a worker thread).

The next file can be made ahead of need (RocketMQ's ``AllocateMappedFileService``), and so
can the first one of an empty queue whose first offset is known (a master's commit log starts
at 0): a caller asks :meth:`~MappedFileQueue.begin_next` which file is due, creates it with
:meth:`~MappedFileQueue.allocate_next` in a worker thread (under a ``.next`` name, outside the
data) and hands it over with :meth:`~MappedFileQueue.end_next`. The write that crosses into
that file then takes it (a rename) instead of creating it; while the worker is still making
it, the write waits for that one (the disk never holds the same file reserved twice); without
one it creates the file itself as before (and a full disk is still its
:class:`CreateMappedFileError`).
"""

from __future__ import annotations

import bisect
import errno
import re
import threading
from pathlib import Path

from ._errors import CreateMappedFileError, OffsetMismatchError, StoreLayoutError
from ._mapped_file import (
    FILE_NAME_DIGITS,
    NEXT_SUFFIX,
    TEMPORARY_SUFFIX,
    MappedFile,
    file_name,
)

__all__ = ["MappedFileQueue", "list_mapped_files"]

_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
_NAME = re.compile(rf"^\d{{{FILE_NAME_DIGITS}}}$")


def list_mapped_files(directory: Path) -> list[tuple[int, Path]]:
    """The ``(start offset, path)`` of the 20-digit files in ``directory``, in order."""
    if not directory.is_dir():
        return []
    found = [(int(p.name), p) for p in directory.iterdir() if _NAME.match(p.name) and p.is_file()]
    found.sort()
    return found


class MappedFileQueue:
    """The mapped files of one directory, contiguous, all of ``file_size`` bytes.

    Args:
        directory: the directory (created on the first write if missing).
        file_size: the size of every file.
        warm: pre-fault new files before they are written (default True). Appends
            (:meth:`append_raw`) copy into the mapping of a warm queue's files, and write
            through the file (``pwrite``) otherwise: a page the kernel allocates for a write
            costs about half of one faulted in through the mapping. A file that is not
            pre-faulted costs no memory until it is written (its blocks are reserved all the
            same): pages are faulted in as writes reach them.

    After :meth:`load`, every loaded file counts as fully written; recovery then calls
    :meth:`truncate` with the end of the valid data.
    """

    def __init__(self, directory: Path, file_size: int, *, warm: bool = True) -> None:
        if file_size <= 0:
            raise ValueError(f"file_size must be > 0, got {file_size}")
        self.directory = directory
        self.file_size = file_size
        self.warm = warm
        self.files: list[MappedFile] = []
        self._starts: list[int] = []
        self._data_start = 0
        self.created = 0
        """Files :meth:`create_file` created (since the queue was made)."""
        self.taken_ready = 0
        """Of those, files that were preallocated ahead of need (:meth:`allocate_next`)."""
        self._next: MappedFile | None = None  # preallocated, not part of the data
        self._allocating: int | None = None  # the start of the file a worker may be making
        self._allocated: MappedFile | None = None  # what it made, until taken
        self._allocation_lock = threading.Lock()  # held by the worker while it makes it
        self._closed = False

    # -- loading -----------------------------------------------------------------------------

    def load(self) -> None:
        """Map the existing files.

        Raises:
            StoreLayoutError: a file has another size than ``file_size``, a start offset that
                is not a multiple of it, or the files leave a gap.
        """
        if self.directory.is_dir():
            for suffix in (TEMPORARY_SUFFIX, NEXT_SUFFIX):
                for leftover in self.directory.glob(f"*{suffix}"):
                    leftover.unlink(missing_ok=True)  # a crash while (pre)allocating
        found = list_mapped_files(self.directory)
        previous: int | None = None
        for start, path in found:
            if start % self.file_size:
                raise StoreLayoutError(
                    f"{path}: start offset {start} is not a multiple of the file size "
                    f"{self.file_size}"
                )
            if previous is not None and start != previous + self.file_size:
                raise StoreLayoutError(
                    f"gap in {self.directory}: {file_name(previous)} is followed by {path.name}"
                )
            previous = start
        try:
            for start, path in found:
                self._add(MappedFile.open(path, start, self.file_size))
        except BaseException:
            self.close()
            raise
        if self.files:
            self._data_start = self.files[0].start_offset

    def _add(self, mapped: MappedFile) -> None:
        self.files.append(mapped)
        self._starts.append(mapped.start_offset)

    # -- offsets -----------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        """The first offset holding data (0 when there are no files)."""
        if not self.files:
            return 0
        return max(self._data_start, self.files[0].start_offset)

    @min_offset.setter
    def min_offset(self, offset: int) -> None:
        self._data_start = offset

    @property
    def max_offset(self) -> int:
        """The offset right after the last written byte (0 when there are no files)."""
        files = self.files
        if not files:
            return 0
        last = files[-1]
        return last.start_offset + last.wrote

    @property
    def flushed_offset(self) -> int:
        """The offset up to which data is known to be on disk."""
        for mapped in reversed(self.files):
            if mapped.flushed:
                return mapped.start_offset + mapped.flushed
        return self.min_offset

    def find(self, offset: int) -> MappedFile | None:
        """The file whose range holds ``offset``, or None."""
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0:
            return None
        mapped = self.files[i]
        return mapped if offset < mapped.end_offset else None

    def file_start(self, offset: int) -> int:
        """The start offset of the file that holds (or would hold) ``offset``."""
        return offset - offset % self.file_size

    # -- reading -----------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` written bytes from ``offset``, never crossing a file.

        Returns b"" at or past the data end. The blank tail of a full file is data too (it is
        shipped to slaves so they reach the same file boundary). The bytes are a copy, so they
        stay valid whatever the store does next.

        Raises:
            ValueError: ``offset`` is below :attr:`min_offset` (deleted or never held).
        """
        return self.read_view(offset, max_bytes).tobytes()

    def read_view(self, offset: int, max_bytes: int) -> memoryview:
        """As :meth:`read`, a read-only view of the mapped file instead of a copy (empty at or
        past the data end).

        For bytes that never change once written (a master's commit log; only a slave
        truncates): the view keeps its mapping alive, so a file closed or deleted meanwhile
        stays mapped (and readable) until the last view of it is dropped.

        Raises:
            ValueError: ``offset`` is below :attr:`min_offset` (deleted or never held).
        """
        if offset < self.min_offset:
            raise ValueError(f"offset {offset} is below the min offset {self.min_offset}")
        mapped = self.find(offset)
        if mapped is None:
            return memoryview(b"")
        pos = offset - mapped.start_offset
        end = min(mapped.wrote, pos + max_bytes)
        if end <= pos:
            return memoryview(b"")
        return mapped.view[pos:end].toreadonly()

    # -- writing -----------------------------------------------------------------------------

    def create_file(self, start_offset: int) -> MappedFile:
        """Create the file starting at ``start_offset`` (the next one, or the first one).

        Raises:
            CreateMappedFileError: it cannot be created (disk full, ...); nothing changed.
            OSError: its directory cannot be made for another reason than a full disk (a file
                in the way, permissions, ...).
        """
        if self.files and start_offset != self.files[-1].end_offset:
            raise StoreLayoutError(
                f"cannot create {file_name(start_offset)} after "
                f"{file_name(self.files[-1].start_offset)}"
            )
        path = self.directory / file_name(start_offset)
        if self._allocating is not None:  # a worker may be making it: wait for that one
            with self._allocation_lock:
                self._allocating = None  # (a worker not started yet will not make it)
                self._adopt_allocated(start_offset)
        mapped = self._take_next(path, start_offset)
        if mapped is None:
            self._make_directory(path)
            mapped = MappedFile.create(path, start_offset, self.file_size, warm=self.warm)
        if not self.files:
            self._data_start = start_offset
        self._add(mapped)
        self.created += 1
        return mapped

    def _make_directory(self, path: Path) -> None:
        """Make the queue's directory for ``path`` if it is missing.

        Raises:
            CreateMappedFileError: a full disk.
            OSError: another reason (a file in the way, permissions, ...): a layout problem.
        """
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if exc.errno in _NO_SPACE:
                raise CreateMappedFileError(path, exc) from exc
            raise

    def _take_next(self, path: Path, start_offset: int) -> MappedFile | None:
        """The preallocated file under its real name ``path`` if it starts at ``start_offset``
        (a stale one is deleted), else None."""
        ready = self._next
        if ready is None:
            return None
        self._next = None
        if ready.start_offset == start_offset:
            try:
                ready.rename(path)
            except (OSError, StoreLayoutError):
                pass  # deleted below; the caller creates the file as without one
            else:
                self.taken_ready += 1
                return ready
        ready.delete()
        return None

    # -- preallocation (ahead of need) -------------------------------------------------------

    def begin_next(self, fill: float, first: int | None = None) -> int | None:
        """The start offset of the next file if it should be preallocated now (the last file
        is written past ``fill`` of its size, or the queue is empty and ``first``, the start
        of its first file, is given; none is ready or being made), else None. A non-None
        answer marks the allocation as started: call :meth:`end_next` after."""
        files = self.files
        if self._closed or self._allocating is not None or self._next is not None:
            return None
        if not files:
            if first is None:
                return None
            start = self.file_start(first)
        else:
            last = files[-1]
            if last.wrote < last.size * fill:
                return None
            start = last.end_offset
        self._allocating = start
        return start

    def allocate_next(self, start_offset: int) -> bool:
        """Create (reserve, map and, in a warm queue, pre-fault) the file starting at
        ``start_offset`` under its
        ``.next`` name, outside the data, for :meth:`end_next` (or the write that needs it)
        to take. Blocks on the disk: run it in a worker thread; it touches nothing but the
        new file. False when it is no longer wanted (a write created the file meanwhile).

        Raises:
            CreateMappedFileError: it cannot be created (disk full, ...): nothing is left.
        """
        with self._allocation_lock:
            if self._allocating != start_offset or self._closed:
                return False
            path = self.directory / (file_name(start_offset) + NEXT_SUFFIX)
            self._make_directory(path)  # an empty queue's first file
            path.unlink(missing_ok=True)  # a stale one (a process killed before its rename)
            self._allocated = MappedFile.create(path, start_offset, self.file_size, warm=self.warm)
            return True

    def end_next(self) -> bool:
        """Finish what :meth:`begin_next` started (after :meth:`allocate_next` returned or
        raised): keep the file made as the ready next file if it still is the next one, else
        delete it. Returns whether one is ready now."""
        with self._allocation_lock:
            started = self._allocating
            self._allocating = None
            files = self.files
            self._adopt_allocated(files[-1].end_offset if files else started)
        return self._next is not None

    def _adopt_allocated(self, expected: int | None) -> None:
        """Keep the file a worker made as the ready next file if it starts at ``expected``
        (the next file's start), else delete it."""
        mapped = self._allocated
        if mapped is None:
            return
        self._allocated = None
        if self._closed or self._next is not None or mapped.start_offset != expected:
            mapped.delete()
        else:
            self._next = mapped

    @property
    def ready_next(self) -> MappedFile | None:
        """The preallocated next file, not yet part of the data (or None)."""
        return self._next

    def _drop_next(self) -> None:
        ready = self._next
        if ready is not None:
            self._next = None
            ready.delete()

    def last_file_for_write(self) -> MappedFile:
        """The last file if it has room, else a new next file (or the first file at 0)."""
        if not self.files:
            return self.create_file(0)
        last = self.files[-1]
        if last.is_full:
            return self.create_file(last.end_offset)
        return last

    def append_raw(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at exactly ``offset``, which must be :attr:`max_offset`.

        An empty queue accepts any offset: its first file is created at
        ``offset - offset % file_size`` and its data starts at ``offset``. Data that reaches
        the end of the last file goes on in a new next file. Every file the data needs is
        created before a byte is written, so a failure changes nothing.

        Raises:
            OffsetMismatchError: the queue is not empty and ``offset`` != :attr:`max_offset`.
            CreateMappedFileError: a file it needs cannot be created (disk full, ...): nothing
                was written and the files created for it are removed again.
            OSError: writing through a file (not warm) failed: :attr:`max_offset` ends where
                the bytes written before the failure end (nothing, unless ``data`` spans
                files).
        """
        files = self.files
        empty = not files
        view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
        total = len(view)
        if not empty:
            last = files[-1]
            wrote = last.wrote
            if offset != last.start_offset + wrote:
                raise OffsetMismatchError(last.start_offset + wrote, offset)
            if wrote + total <= last.size:  # fast path: it fits in the last file
                if self.warm:
                    last.view[wrote : wrote + total] = view
                else:
                    last.write(wrote, view)
                last.wrote = wrote + total
                return
        self._reserve_files(offset, offset + total)
        if empty:
            first = self.files[0]
            first.wrote = first.flushed = offset - first.start_offset
            self._data_start = offset
        done = 0
        i = bisect.bisect_right(self._starts, offset) - 1
        while done < total:
            mapped = self.files[i]
            n = min(total - done, mapped.size - mapped.wrote)
            if self.warm:
                mapped.view[mapped.wrote : mapped.wrote + n] = view[done : done + n]
            else:
                mapped.write(mapped.wrote, view[done : done + n])
            mapped.wrote += n
            done += n
            i += 1

    def _reserve_files(self, start: int, end: int) -> None:
        """Create the files that ``[start, end)`` needs past the last one (all or none)."""
        created: list[MappedFile] = []
        try:
            if not self.files:
                created.append(self.create_file(self.file_start(start)))
            # Data ending exactly at a file's end needs no next file (the next write creates it).
            while self.files[-1].end_offset < end:
                created.append(self.create_file(self.files[-1].end_offset))
        except BaseException:
            for mapped in created:
                mapped.delete()
            del self.files[len(self.files) - len(created) :]
            del self._starts[len(self._starts) - len(created) :]
            if not self.files:
                self._data_start = 0
            raise

    def truncate(self, offset: int) -> None:
        """Make ``offset`` the data end: later files are deleted, the rest of its file zeroed.

        Zeroing matters: stale records after a truncation point must never look valid to a
        later recovery. Truncating at or below :attr:`min_offset` keeps the file holding
        ``offset`` (empty from there).
        """
        keep: list[MappedFile] = []
        for mapped in self.files:
            if mapped.start_offset > offset or (
                mapped.start_offset == offset and keep and keep[-1].end_offset == offset
            ):
                mapped.delete()
                continue
            keep.append(mapped)
        self.files = keep
        self._starts = [m.start_offset for m in keep]
        for mapped in keep:
            pos = min(max(offset - mapped.start_offset, 0), mapped.size)
            if pos < mapped.wrote or mapped is keep[-1]:
                if pos < mapped.size:
                    mapped.zero_from(pos)
                mapped.wrote = pos
                mapped.truncated(pos)
        if keep and self._data_start > offset:
            self._data_start = max(offset, keep[0].start_offset)
        ready = self._next
        if ready is not None and (not keep or keep[-1].end_offset != ready.start_offset):
            self._drop_next()

    # -- retention (the min offset moves up) --------------------------------------------------

    def delete_first(self, *, force: bool = False) -> bool:
        """Delete the first file, never the last one (retention: RocketMQ's
        ``deleteExpiredFile``); :attr:`min_offset` becomes the next file's start.

        A file whose mapping a reader still holds a view of (an HA transfer waiting to send
        it) is kept unless ``force``: then it is unlinked all the same, and the reader's view
        stays valid until it is dropped (the pages are freed with it). Returns whether the
        file was deleted.
        """
        if len(self.files) < 2:
            return False
        first = self.files[0]
        if not first.release() and not force:
            return False
        first.delete()
        del self.files[0]
        del self._starts[0]
        self._data_start = max(self._data_start, self.files[0].start_offset)
        return True

    def delete_all(self) -> None:
        """Delete every file (an empty queue again)."""
        for mapped in self.files:
            mapped.delete()
        self._drop_next()
        self.files = []
        self._starts = []
        self._data_start = 0

    def flush(self) -> int:
        """``fdatasync`` every file with unflushed data; returns :attr:`flushed_offset`.

        Blocks on the disk: run it in a worker thread.
        """
        for mapped in list(self.files):
            if mapped.flushed < mapped.wrote:
                mapped.flush()
        return self.flushed_offset

    def close(self) -> None:
        """Unmap every file; delete a preallocated next file (it holds no data)."""
        with self._allocation_lock:  # a worker making one finishes first
            self._closed = True
            self._adopt_allocated(None)
        self._drop_next()
        for mapped in self.files:
            mapped.close()
