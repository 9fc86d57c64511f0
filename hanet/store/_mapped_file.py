"""One fixed-size, preallocated, memory-mapped file of a commit log or consume queue.

A :class:`MappedFile` is named by its 20-digit start offset, preallocated to its full size
(``posix_fallocate``: every block is reserved before the file is mapped, so a full disk is a
:class:`CreateMappedFileError` at creation, never a SIGBUS on a later write) and mapped
shared. Reserving and mapping take milliseconds whatever the size; a new file then takes no
memory until writes reach its pages, each faulted in by the first write to it (RocketMQ's
default, ``warmMapedFileEnable=false``). It can instead be pre-faulted whole (``warm``: only
once reserved; ``madvise(MADV_POPULATE_WRITE)``, or a write per page where the kernel lacks
it): a cold mapping caps bulk appends at about 0.65 GB/s on the reference machine, a warm one
reaches ~10 GB/s, but faulting in a 1 GiB file takes about a second and 1 GiB of memory at once.

Writes are plain memory writes (synchronous, never blocking on the disk); :meth:`flush`
(``fdatasync``, which also writes back pages dirtied through the mapping on Linux) is the only
call that waits for the disk and is meant to run in a worker thread. Closing the file (the event
loop truncating or deleting it) never waits for such a sync: the descriptor stays open until the
last sync using it returns, so a sync never meets a closed descriptor nor a number the process
reused for another file.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs

from ._errors import CreateMappedFileError, StoreLayoutError
from ._native import ENABLED, native

__all__ = ["FILE_NAME_DIGITS", "NEXT_SUFFIX", "TEMPORARY_SUFFIX", "MappedFile", "file_name"]

FILE_NAME_DIGITS = 20
"""Files are named by their start offset, zero padded to this many digits."""

TEMPORARY_SUFFIX = ".creating"
"""Suffix of a file being preallocated; one left by a crash is removed at load."""

NEXT_SUFFIX = ".next"
"""Suffix of a file preallocated ahead of need (renamed to its real name when it is taken);
one left by a crash is removed at load."""

_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
_PAGE = mmap.PAGESIZE
_ZERO_CHUNK = bytes(1 << 20)
_NO_FALLOCATE = frozenset({errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EINVAL})


_populate: Callable[[mmap.mmap], None] | None = native("populate") if ENABLED else None
"""``_speedups.populate`` (pre-faults without holding the GIL, so a worker thread can warm a
new file while the event loop goes on), or None: then ``mmap.madvise``, which holds it."""


def _reserve(fd: int, size: int) -> None:
    """Allocate every block of the first ``size`` bytes of ``fd`` (raises OSError, e.g. ENOSPC).

    ``posix_fallocate``; where the file system does not support it (EOPNOTSUPP, EINVAL, ...
    glibc usually emulates it itself), zeros are written, never a sparse ``ftruncate``.
    """
    try:
        os.posix_fallocate(fd, 0, size)
        return
    except OSError as exc:
        if exc.errno not in _NO_FALLOCATE:
            raise
    zeros = memoryview(_ZERO_CHUNK)
    for position in range(0, size, len(zeros)):
        chunk = min(len(zeros), size - position)
        done = 0
        while done < chunk:  # a short write goes on; a full disk raises ENOSPC
            wrote = os.pwrite(fd, zeros[done:chunk], position + done)
            if wrote <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            done += wrote


def file_name(start_offset: int) -> str:
    """The file name of a file starting at ``start_offset``: 20 digits, zero padded."""
    return f"{start_offset:0{FILE_NAME_DIGITS}d}"


@attrs.define(eq=False)
class MappedFile:
    """A fixed-size file mapped into memory, with a write position.

    Attributes:
        path: the file's path.
        start_offset: the offset of its first byte (its name).
        size: its fixed size in bytes.
        wrote: bytes written so far (the data end, relative to the file's start).
        flushed: bytes known to be on disk (relative).
        view: a writable memoryview of the whole mapping.
    """

    path: Path
    start_offset: int
    size: int
    _fd: int
    _mmap: mmap.mmap
    view: memoryview
    wrote: int = 0
    flushed: int = 0
    # Syncs in worker threads against close and truncation on the event loop's thread.
    _sync_lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    _syncing: int = attrs.field(init=False, default=0)  # syncs using the descriptor now
    _orphan: int = attrs.field(init=False, default=-1)  # closed while syncing: the last closes it
    _truncations: int = attrs.field(init=False, default=0)

    @classmethod
    def create(cls, path: Path, start_offset: int, size: int, *, warm: bool = True) -> MappedFile:
        """Create, reserve, map and (with ``warm``) pre-fault a new file.

        Without ``warm`` nothing is faulted in: milliseconds even for a 1 GiB file (what
        ``posix_fallocate`` takes), and no memory until the file is written.

        Every block of the file is reserved on the disk (``posix_fallocate``) *before* it is
        mapped: writing into a mapped page the file system cannot back kills the process with
        SIGBUS, so a sparse file (``ftruncate``) is never mapped. A file system without
        fallocate gets real zeros written instead. The file appears under its name only once
        fully reserved.

        Raises:
            StoreLayoutError: the file already exists.
            CreateMappedFileError: the file cannot be created or reserved (ENOSPC, EDQUOT,
                permissions, ...): nothing is mapped and nothing is left behind.
        """
        if path.exists():
            raise StoreLayoutError(f"{path} already exists")
        # Reserve under a temporary name and rename: a process killed half way through never
        # leaves a short file under a real name (which would stop the store loading).
        temporary = path.with_name(path.name + TEMPORARY_SUFFIX)
        try:
            fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise CreateMappedFileError(path, exc) from exc
        mapping: mmap.mmap | None = None
        try:
            try:
                _reserve(fd, size)
                mapping = mmap.mmap(fd, size)
                os.rename(temporary, path)
            except OSError as exc:
                raise CreateMappedFileError(path, exc) from exc
        except BaseException:
            if mapping is not None:
                mapping.close()
            os.close(fd)
            temporary.unlink(missing_ok=True)
            raise
        mapped = cls(path, start_offset, size, fd, mapping, memoryview(mapping))
        if warm:
            mapped.prefault()
        return mapped

    @classmethod
    def open(cls, path: Path, start_offset: int, size: int) -> MappedFile:
        """Map an existing file; its write position is its full size until the caller sets it.

        Raises:
            StoreLayoutError: the file's size is not ``size``.
        """
        actual = path.stat().st_size
        if actual != size:
            raise StoreLayoutError(
                f"{path} has {actual} bytes, expected {size} (the configured file size)"
            )
        fd = os.open(path, os.O_RDWR)
        try:
            mapping = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, start_offset, size, fd, mapping, memoryview(mapping), size, size)

    @property
    def end_offset(self) -> int:
        """The offset right after the file's last byte."""
        return self.start_offset + self.size

    @property
    def write_offset(self) -> int:
        """The offset of the data end (``start_offset + wrote``)."""
        return self.start_offset + self.wrote

    @property
    def is_full(self) -> bool:
        """Whether nothing more can be written."""
        return self.wrote >= self.size

    def prefault(self) -> None:
        """Fault every page of the mapping in for writing, so appends run at memory speed.

        Without the GIL when the native extension is built (safe in a worker thread).
        """
        if _populate is not None:
            try:
                _populate(self._mmap)
                return
            except OSError:
                pass  # the page by page way below
        try:
            self._mmap.madvise(_MADV_POPULATE_WRITE)
        except (OSError, ValueError):
            view = self.view
            for i in range(0, self.size, _PAGE):
                view[i] = view[i]

    def write(self, position: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at ``position`` through the file (``pwrite``), not the mapping; the
        mapping sees it at once (one page cache). Does not move :attr:`wrote`.

        For a file that was not pre-faulted: the kernel then allocates the page cache pages as
        it copies, which costs about half of faulting them in through the mapping first.

        Raises:
            OSError: the write failed (the bytes past :attr:`wrote` are then undefined, as
                after a crash: nothing counts them).
        """
        view = memoryview(data)
        total = view.nbytes
        done = 0
        while done < total:
            wrote = os.pwrite(self._fd, view[done:] if done else view, position + done)
            if wrote <= 0:  # pragma: no cover - a regular file writes or raises
                raise OSError(errno.EIO, f"short write to {self.path} at {position + done}")
            done += wrote

    def rename(self, path: Path) -> None:
        """Give the (mapped) file another name in its directory (a preallocated file taking
        its real name).

        Raises:
            StoreLayoutError: ``path`` already exists.
            OSError: the rename failed.
        """
        if path.exists():
            raise StoreLayoutError(f"{path} already exists")
        os.rename(self.path, path)
        self.path = path

    def _data_ranges(self, start: int, end: int) -> Iterator[tuple[int, int]]:
        """The parts of ``[start, end)`` that may hold non-zero bytes: what ``SEEK_DATA`` /
        ``SEEK_HOLE`` do not report as a hole (reserved blocks never written read as zeros and
        are holes to ext4 and XFS), or all of it where the file system cannot tell."""
        position = start
        while position < end:
            try:
                data = os.lseek(self._fd, position, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # nothing but holes from here on
                    return
                yield position, end  # no SEEK_DATA here: read all of it
                return
            if data >= end:
                return
            try:
                hole = min(os.lseek(self._fd, data, os.SEEK_HOLE), end)
            except OSError:  # pragma: no cover - SEEK_DATA worked, SEEK_HOLE does too
                hole = end
            yield data, hole
            position = hole

    def _nonzero_chunks(self, start: int, end: int) -> Iterator[tuple[int, bytes]]:
        """``(position, bytes)`` of the 1 MiB chunks of ``[start, end)`` holding a non-zero
        byte. Read with ``pread``, not through the mapping (which faulted every page read into
        the process's memory: 1 GiB for the unwritten rest of a new file), and only where the
        file may have data (no time at all for blocks the file system knows were never
        written)."""
        # The ranges are taken before anything is read: pages of never written blocks that are
        # in the page cache count as data (ext4), and these reads' readahead brings more in
        # (zeros: nothing writes the file meanwhile), so asking again after each read would
        # lead the check on through the whole file.
        chunk = len(_ZERO_CHUNK)
        for low, high in list(self._data_ranges(start, end)):
            for i in range(low, high, chunk):
                data = os.pread(self._fd, min(chunk, high - i), i)
                if data != _ZERO_CHUNK[: len(data)]:
                    yield i, data

    def first_nonzero(self, start: int = 0, end: int | None = None) -> int | None:
        """The position of the first non-zero byte of ``[start, end)`` (default: to the end of
        the file), or None: what tells a zeroed hole in the data from the unwritten tail of a
        file. Reads only what the file system holds as data (see :meth:`_nonzero_chunks`)."""
        for i, data in self._nonzero_chunks(start, self.size if end is None else end):
            return i + len(data) - len(data.lstrip(b"\0"))
        return None

    def zero_from(self, position: int) -> None:
        """Write zeros from ``position`` to the end of the file (truncating stale bytes).

        Only chunks holding a non-zero byte are written (zero pages stay clean, and the
        unwritten rest of a file is neither read nor faulted in).
        """
        for i, data in self._nonzero_chunks(position, self.size):
            self.write(i, _ZERO_CHUNK[: len(data)])  # within a data range: changes no range

    def flush(self) -> int:
        """``fdatasync`` the file; returns the write position that is now on disk.

        Blocks on the disk: call it from a worker thread. Safe to run while the event loop
        goes on writing into the mapping (later writes are simply not covered), truncating
        (:meth:`truncated`: the dropped bytes are not counted) or closing the file (the sync
        keeps the descriptor until it returns; nothing is synced once it is closed).
        """
        with self._sync_lock:
            wrote = self.wrote
            fd = self._fd
            if self.flushed >= wrote or fd < 0:
                return self.flushed
            self._syncing += 1
            truncations = self._truncations
        try:
            os.fdatasync(fd)
        finally:
            with self._sync_lock:
                self._syncing -= 1
                orphan = -1 if self._syncing else self._orphan
                self._orphan = -1 if orphan >= 0 else self._orphan
            if orphan >= 0:
                os.close(orphan)  # closed while this sync ran
        with self._sync_lock:
            if truncations == self._truncations:  # else the synced bytes may be gone
                self.flushed = max(self.flushed, wrote)
            return self.flushed

    def truncated(self, position: int) -> None:
        """The bytes from ``position`` on were dropped (zeroed, or written again later): they
        no longer count as flushed, nor do they for a sync in progress."""
        with self._sync_lock:
            self.flushed = min(self.flushed, position)
            self._truncations += 1

    def fileno(self) -> int:
        """The open file's descriptor (-1 once closed): for ``sendfile`` from it, through a
        duplicate (the store may close or delete the file meanwhile)."""
        return self._fd

    def close(self) -> None:
        """Unmap and close the file (idempotent)."""
        if self._fd < 0:
            return
        try:
            self.view.release()
            self._mmap.close()
        except BufferError:
            pass  # a caller still holds a view: the mapping goes away with the last one
        self._close_descriptor()

    def _close_descriptor(self) -> None:
        """Close the descriptor now, or when the last sync using it returns (never blocks)."""
        with self._sync_lock:
            fd, self._fd = self._fd, -1
            if self._syncing:
                self._orphan = fd
                return
        os.close(fd)

    def delete(self) -> None:
        """Close and remove the file."""
        self.close()
        self.path.unlink(missing_ok=True)

    def release(self) -> bool:
        """Unmap and close the file if nothing else holds a view of its mapping (RocketMQ's
        ``MappedFile.destroy`` finding its reference count at zero); True when it is closed.

        A view handed out (:meth:`MappedFileQueue.read_view`: an HA transfer's bytes waiting
        to be sent) keeps the mapping alive; then nothing changes and the answer is False.
        Closing anyway (:meth:`delete`) is safe too: the holder's view stays valid, the pages
        are freed with the last view.
        """
        if self._fd < 0:
            return True
        try:
            self.view.release()
            self._mmap.close()
        except BufferError:
            self.view = memoryview(self._mmap)  # still mapped: a holder's view is alive
            return False
        self._close_descriptor()
        return True
