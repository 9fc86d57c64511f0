"""A file-backed :class:`~hanet.dledger.RaftLog` in DLedger's data and index files.

Layout of a log directory::

    data/00000000000000000000   data files (``data_file_size``, 1 GiB by default), named by
    data/00000000001073741824   the byte position of their first byte (20 digits)
    index/00000000000000000000  index files (``index_file_size``, 160 MiB by default, a
                                multiple of 32): the 32-byte entry of DLedger index ``d`` at
                                byte ``d * 32`` of the index files
    hardstate                   the term and vote (JSON), replaced atomically

Formats are those of :mod:`hanet.dledger._entry`. Raft index ``i`` (1-based, what
:class:`~hanet.dledger.RaftNode` sees) is DLedger index ``i - 1`` in the files. An entry that
does not fit the rest of its data file starts the next file; the rest is a *blank* (``MAGIC -1
| SIZE`` = the bytes left; fewer than 8 bytes left stay zero).

**No-ops**: the entry a new leader appends at the start of its term is written with an empty
body (body length 0). A client entry always carries a RocketMQ message record (never empty), so
an empty body reads back as ``LogEntry(noop=True)``; empty client bodies are refused.

**Durability**: with ``flush=SYNC_FLUSH`` :meth:`FileLog.append` fsyncs the data and index
bytes it wrote before it returns (an entry counts toward a quorum only once on disk); with
``ASYNC_FLUSH`` a flusher calls :meth:`FileLog.flush` (as DLedger's default: a crash may lose
the last acknowledged entries of one node). A driver may take the SYNC_FLUSH fsync upon itself
(:attr:`FileLog.sync_on_append` False): :class:`~hanet.dledger.DLedgerNode` fsyncs once per
batch of inputs, before any message or answer of that batch leaves (a group commit).
A file created by an append has its directory fsynced with the next flush (with
:meth:`FileLog.take_dirty`'s descriptors too), never inside :meth:`FileLog.append`.
:meth:`FileLog.truncate_from` and :meth:`FileLog.save_hard_state` are always durable on return
(a driver runs them off its event loop); the hard state goes through a temporary file, fsync,
rename and an fsync of the directory.

**Recovery** (:meth:`FileLog.open`): the data files are the truth. Each entry is decoded in
order: magic, sizes, index and position in sequence, terms not decreasing, the body CRC (0 is
accepted: other writers may not fill it) and, for a non-empty body, the RocketMQ record it
holds (:func:`hanet.store.decode_record`, its body CRC included). The first entry that fails
ends the log: the rest of its file is zeroed, later data files are deleted (a torn tail after
a crash), and the index files are rewritten to match. :attr:`FileLog.recovery` says what was
found.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs

from hanet.store import CorruptRecordError, FlushDiskType, decode_record
from hanet.store.lowlevel import NATIVE_SCANNER, fsync_directory, native_pack_entries

from ._entry import (
    BLANK_MAGIC,
    ENTRY_HEADER_SIZE,
    ENTRY_MAGIC,
    INDEX_ENTRY_SIZE,
    DLedgerEntry,
    IndexEntry,
    decode_entry,
    encode_blank,
    encode_index_entry,
    pack_entry,
)
from ._errors import DLedgerError, EntryFormatError
from ._log import LogEntry
from ._messages import HardState, RaftConfig, implausible_term

__all__ = [
    "DEFAULT_DATA_FILE_SIZE",
    "DEFAULT_INDEX_FILE_SIZE",
    "FileLog",
    "LogRecovery",
]

log = logging.getLogger("hanet.dledger")
_MAX_SAVED_TERM_GAP = RaftConfig().max_term_gap  # a saved term past the log's by more: refused

DEFAULT_DATA_FILE_SIZE = 1024 * 1024 * 1024
"""Bytes of a data file (DLedger's default, 1 GiB)."""
DEFAULT_INDEX_FILE_SIZE = 160 * 1024 * 1024
"""Bytes of an index file (DLedger's default, 160 MiB: 5 242 880 entries)."""

_NAME_DIGITS = 20
_BLANK_HEAD = 8
_READ_RUN = 1 << 20
"""Bytes of back-to-back entries :meth:`FileLog.entries_from` reads in one call."""
_HARD_STATE = "hardstate"


def _name(start: int) -> str:
    return f"{start:0{_NAME_DIGITS}d}"


@attrs.frozen
class LogRecovery:
    """What :meth:`FileLog.open` found.

    Attributes:
        entries: the entries kept.
        end_pos: where the next entry goes.
        truncated_at: the position of the first entry that failed (None: the log was clean).
        reason: why it failed.
    """

    entries: int
    end_pos: int
    truncated_at: int | None = None
    reason: str | None = None


class _Files:
    """A sequence of fixed-size files named by their start offset, read and written with
    pread/pwrite (sparse: a new file is ``ftruncate``-d to its size)."""

    def __init__(self, directory: Path, file_size: int) -> None:
        self.directory = directory
        self.file_size = file_size
        directory.mkdir(parents=True, exist_ok=True)
        self._fds: dict[int, int] = {}
        self.dirty: set[int] = set()
        self.dir_dirty = False
        """A file was created or deleted since the last sync: the directory needs an fsync."""
        try:
            for path in sorted(directory.iterdir()):
                if path.name.isdigit() and len(path.name) == _NAME_DIGITS:
                    start = int(path.name)
                    if start % file_size:
                        raise DLedgerError(
                            f"{path}: not at a multiple of the file size {file_size}"
                        )
                    if path.stat().st_size != file_size:
                        raise DLedgerError(
                            f"{path}: {path.stat().st_size} bytes, expected {file_size} "
                            "(a different file size setting?)"
                        )
                    self._fds[start] = os.open(path, os.O_RDWR)
        except BaseException:
            self.close()  # the files opened before the bad one
            raise

    @property
    def starts(self) -> list[int]:
        return sorted(self._fds)

    def _fd(self, start: int, create: bool) -> int | None:
        fd = self._fds.get(start)
        if fd is None and create:
            path = self.directory / _name(start)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            os.ftruncate(fd, self.file_size)
            self._fds[start] = fd
            self.dir_dirty = True  # fsynced with the data (take_dirty / sync)
        return fd

    def write(self, pos: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at ``pos`` (it must lie in one file)."""
        start = pos - pos % self.file_size
        assert pos - start + len(data) <= self.file_size
        fd = self._fd(start, create=True)
        assert fd is not None
        os.pwrite(fd, data, pos - start)
        self.dirty.add(start)

    def write_across(self, pos: int, data: bytes | bytearray) -> None:
        """Write ``data`` at ``pos``, split where it crosses into the next file."""
        view = memoryview(data)
        while view:
            room = self.file_size - pos % self.file_size
            self.write(pos, view[:room])
            pos += min(room, len(view))
            view = view[room:]

    def read(self, pos: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``pos`` within its file (b"" when the file is missing)."""
        start = pos - pos % self.file_size
        fd = self._fd(start, create=False)
        if fd is None:
            return b""
        size = min(size, self.file_size - (pos - start))
        return os.pread(fd, size, pos - start)

    def zero_from(self, pos: int, end: int) -> None:
        """Zero [pos, end) of ``pos``'s file and delete every later file; no fsync here: the
        file and the directory are marked for the next sync."""
        start = pos - pos % self.file_size
        fd = self._fds.get(start)
        if fd is not None:
            stop = min(end, start + self.file_size)
            at = pos
            chunk = b"\0" * (1 << 20)
            while at < stop:
                n = min(len(chunk), stop - at)
                os.pwrite(fd, chunk[:n], at - start)
                at += n
            self.dirty.add(start)
        for later in [s for s in self._fds if s > start]:
            os.close(self._fds.pop(later))
            (self.directory / _name(later)).unlink()
            self.dirty.discard(later)
            self.dir_dirty = True

    def take_dirty(self) -> list[int]:
        """Duplicates of the descriptors written since the last sync (the marks cleared):
        the caller fsyncs and closes them, in a worker thread, say."""
        fds = [os.dup(self._fds[start]) for start in sorted(self.dirty) if start in self._fds]
        self.dirty.clear()
        if self.dir_dirty:
            fds.append(os.open(self.directory, os.O_RDONLY))
            self.dir_dirty = False
        return fds

    def sync(self) -> None:
        for start in sorted(self.dirty):
            fd = self._fds.get(start)
            if fd is not None:
                os.fsync(fd)
        self.dirty.clear()
        if self.dir_dirty:
            fsync_directory(self.directory)
            self.dir_dirty = False

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


_NATIVE_PACK = native_pack_entries if NATIVE_SCANNER else None
"""The store extension's ``pack_entries`` when the extension is in use (the loops of
:meth:`FileLog.append` are its reference), else None."""


class FileLog:
    """DLedger's data and index files as a :class:`~hanet.dledger.RaftLog` (see the module
    docstring). Open with :meth:`open`; not thread-safe; one process at a time.

    Attributes:
        directory: the log directory.
        data_file_size, index_file_size: the file sizes in use.
        flush: SYNC_FLUSH (fsync in :meth:`append`) or ASYNC_FLUSH (:meth:`flush` by a flusher).
        recovery: what :meth:`open` found.
    """

    def __init__(
        self,
        directory: Path,
        *,
        data_file_size: int,
        index_file_size: int,
        flush: FlushDiskType,
    ) -> None:
        if data_file_size < 4096:
            raise ValueError(f"data_file_size {data_file_size} below 4096")
        if index_file_size < INDEX_ENTRY_SIZE or index_file_size % INDEX_ENTRY_SIZE:
            raise ValueError(f"index_file_size {index_file_size} is not a multiple of 32")
        self.directory = directory
        self.data_file_size = data_file_size
        self.index_file_size = index_file_size
        self.flush_mode = flush
        self.sync_on_append = True
        """Under SYNC_FLUSH, fsync in :meth:`append`. A driver that calls :meth:`flush` itself
        before anything depends on the entries (a group commit) sets it to False."""
        directory.mkdir(parents=True, exist_ok=True)
        self._data = _Files(directory / "data", data_file_size)
        try:
            self._index = _Files(directory / "index", index_file_size)
        except BaseException:
            self._data.close()
            raise
        self._terms = array("q")
        self._positions = array("q")
        self._sizes = array("q")
        self._end = 0
        self.recovery = LogRecovery(0, 0)
        # Saving the hard state needs a directory to fsync and a new temporary file: both are
        # held open ahead of time, so a process out of descriptors can still change term.
        self._dir_fd = -1
        self._spare_fd = -1

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        *,
        data_file_size: int = DEFAULT_DATA_FILE_SIZE,
        index_file_size: int = DEFAULT_INDEX_FILE_SIZE,
        flush: FlushDiskType = FlushDiskType.ASYNC_FLUSH,
    ) -> FileLog:
        """Open (or create) the log in ``directory`` and recover it (see the module docstring).

        Raises:
            DLedgerError: a file of the wrong size or name (another file size setting).
            ValueError: a file size setting out of range.
        """
        self = cls(
            Path(directory),
            data_file_size=data_file_size,
            index_file_size=index_file_size,
            flush=flush,
        )
        try:
            self._recover()
            self._dir_fd = os.open(self.directory, os.O_RDONLY)
            temp = self.directory / (_HARD_STATE + ".tmp")
            self._spare_fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except BaseException:
            self.close()
            raise
        return self

    def _recover(self) -> None:
        size = self.data_file_size
        starts = self._data.starts
        pos = starts[0] if starts else 0
        reason: str | None = None
        failed_at: int | None = None
        last_term = 0
        while True:
            file_start = pos - pos % size
            left = file_start + size - pos
            if left < _BLANK_HEAD:
                pos = file_start + size
                continue
            head = self._data.read(pos, ENTRY_HEADER_SIZE)
            if len(head) < _BLANK_HEAD or head[:_BLANK_HEAD] == b"\0" * _BLANK_HEAD:
                break  # the end (an unwritten area or no file)
            magic = int.from_bytes(head[:4], "big", signed=True)
            length = int.from_bytes(head[4:8], "big", signed=True)
            if magic == BLANK_MAGIC and length == left:
                pos = file_start + size
                continue
            if magic != ENTRY_MAGIC or not ENTRY_HEADER_SIZE <= length <= left:
                failed_at, reason = pos, f"magic {magic}, size {length} ({left} bytes left)"
                break
            raw = self._data.read(pos, length)
            try:
                entry = decode_entry(raw)
                expected = len(self._terms)
                if entry.index != expected:
                    raise EntryFormatError(pos, f"index {entry.index}, expected {expected}")
                if entry.pos != pos:
                    raise EntryFormatError(pos, f"pos field {entry.pos}")
                if entry.term < last_term:
                    raise EntryFormatError(pos, f"term {entry.term} below {last_term}")
                if entry.body:
                    decode_record(entry.body, base_offset=pos + ENTRY_HEADER_SIZE)
            except (EntryFormatError, CorruptRecordError) as exc:
                failed_at, reason = pos, str(exc)
                break
            last_term = entry.term
            self._terms.append(entry.term)
            self._positions.append(pos)
            self._sizes.append(length)
            pos += length
        self._end = pos
        # a torn or corrupt tail: drop it, and whatever the index files say past the log
        if failed_at is not None:
            log.warning(
                "%s: dropping the log from position %d: %s", self.directory, failed_at, reason
            )
            self._data.zero_from(failed_at, failed_at + size)
        elif self._data.starts and self._data.starts[-1] > pos - pos % size:
            self._data.zero_from(pos, pos)
        self._rewrite_index()
        self.recovery = LogRecovery(len(self._terms), self._end, failed_at, reason)

    def _rewrite_index(self) -> None:
        """Make the index files say exactly what the data files hold."""
        for dindex, (term, pos, length) in enumerate(
            zip(self._terms, self._positions, self._sizes, strict=True)
        ):
            raw = encode_index_entry(IndexEntry(pos, length, dindex, term))
            at = dindex * INDEX_ENTRY_SIZE
            if self._index.read(at, INDEX_ENTRY_SIZE) != raw:
                self._index.write(at, raw)
        end = len(self._terms) * INDEX_ENTRY_SIZE
        if self._index.read(end, INDEX_ENTRY_SIZE).strip(b"\0") or any(
            s > end for s in self._index.starts
        ):
            self._index.zero_from(end, end + self.index_file_size)
        self._index.sync()
        self._data.sync()

    # -- the RaftLog protocol --------------------------------------------------------------

    @property
    def last_index(self) -> int:
        """Index of the last entry (0 for an empty log)."""
        return len(self._terms)

    @property
    def last_term(self) -> int:
        """Term of the last entry (0 for an empty log)."""
        return self._terms[-1] if self._terms else 0

    def term_at(self, index: int) -> int | None:
        """Term of the entry at ``index``: 0 for index 0, None past the end or below 0."""
        if index == 0:
            return 0
        if 0 < index <= len(self._terms):
            return self._terms[index - 1]
        return None

    def next_entry_pos(self, body_length: int, end: int | None = None) -> int:
        """Where an entry with a body of ``body_length`` bytes appended now (or once the data
        ends at ``end``) would start."""
        return self._place(self._end if end is None else end, ENTRY_HEADER_SIZE + body_length)

    def _place(self, pos: int, length: int) -> int:
        size = self.data_file_size
        if length > size:
            raise EntryFormatError(pos, f"an entry of {length} bytes exceeds the file size {size}")
        if pos % size + length > size:
            return pos - pos % size + size
        return pos

    def append(self, entries: Sequence[LogEntry]) -> None:
        """Append entries following :attr:`last_index` (terms must not decrease); fsynced on
        return under SYNC_FLUSH.

        Raises:
            ValueError: an index out of sequence, a term below the last one, an empty client
                body or a no-op with a body.
        """
        expected, last_term = len(self._terms) + 1, self.last_term
        packed = None
        if _NATIVE_PACK is not None and entries:
            # the common batch (checked, all in the current file) in one call; else None and
            # the loops below (the reference) pack it or name what is wrong
            packed = _NATIVE_PACK(entries, expected, last_term, self._end, self.data_file_size)
        if packed is not None:
            data, index_data, terms, positions, sizes = packed
            self._data.write(self._end, data)
            self._terms.frombytes(terms)
            self._positions.frombytes(positions)
            self._sizes.frombytes(sizes)
            self._end += len(data)
            self._index.write_across((expected - 1) * INDEX_ENTRY_SIZE, index_data)
            if self.flush_mode is FlushDiskType.SYNC_FLUSH and self.sync_on_append:
                self.flush()
            return
        for entry in entries:  # all checked before anything is written
            if entry.index != expected:
                raise ValueError(f"entry index {entry.index}, expected {expected}")
            if entry.term < last_term:
                raise ValueError(f"entry term {entry.term} below the last term {last_term}")
            if entry.noop == bool(entry.body):
                raise ValueError("a no-op has an empty body and a client entry a non-empty one")
            self._place(0, ENTRY_HEADER_SIZE + len(entry.body))  # fits a file
            expected, last_term = expected + 1, entry.term
        if not entries:
            return
        # one write per run of contiguous bytes in a file (a batch: one pwrite, not two per
        # entry), the index entries in one run
        run_start, run = self._end, bytearray()
        index_start = (entries[0].index - 1) * INDEX_ENTRY_SIZE
        index_run = bytearray()
        for entry in entries:
            length = ENTRY_HEADER_SIZE + len(entry.body)
            pos = self._place(self._end, length)
            if pos != self._end:  # the rest of this file is too short: blank, next file
                left = pos - self._end
                if left >= _BLANK_HEAD:
                    run += encode_blank(left)
                if run:
                    self._data.write(run_start, run)
                run_start, run = pos, bytearray()
            pack_entry(run, index_run, entry.index - 1, entry.term, pos, entry.body)
            self._terms.append(entry.term)
            self._positions.append(pos)
            self._sizes.append(length)
            self._end = pos + length
        if run:
            self._data.write(run_start, run)
        self._index.write_across(index_start, index_run)
        if self.flush_mode is FlushDiskType.SYNC_FLUSH and self.sync_on_append:
            self.flush()

    def truncate_from(self, index: int) -> None:
        """Remove the entries at ``index`` and after (index >= 1), durably: their bytes are
        zeroed (later files deleted) in the data and index files and fsynced before it
        returns (an entry written later cannot reach the disk before the old ones are gone:
        a crash could otherwise leave an old entry after a new one). A driver calls it off
        the event loop."""
        if index < 1:
            raise ValueError(f"cannot truncate from index {index}")
        if index > len(self._terms):
            return
        pos = self._positions[index - 1]
        self._data.zero_from(pos, self._end)
        at = (index - 1) * INDEX_ENTRY_SIZE
        self._index.zero_from(at, len(self._terms) * INDEX_ENTRY_SIZE)
        del self._terms[index - 1 :]
        del self._positions[index - 1 :]
        del self._sizes[index - 1 :]
        self._end = pos
        self.flush()

    def entries_from(self, index: int, max_count: int) -> list[LogEntry]:
        """Up to ``max_count`` entries from ``index`` (1-based)."""
        out: list[LogEntry] = []
        start = max(index, 1)
        stop = min(start + max(max_count, 0), len(self._terms) + 1)
        positions, sizes, file_size = self._positions, self._sizes, self.data_file_size
        i = start
        while i < stop:
            # a run of entries back to back in one file: one read, not one per entry
            first = positions[i - 1]
            end = first + sizes[i - 1]
            j = i + 1
            while (
                j < stop
                and positions[j - 1] == end
                and (end + sizes[j - 1] - 1) // file_size == first // file_size
                and end - first < _READ_RUN
            ):
                end += sizes[j - 1]
                j += 1
            raw = memoryview(self._data.read(first, end - first))
            for k in range(i, j):
                at = positions[k - 1] - first
                entry = decode_entry(raw[at : at + sizes[k - 1]])  # as read_entry
                out.append(LogEntry(k, entry.term, entry.body, noop=not entry.body))
            i = j
        return out

    # -- more ------------------------------------------------------------------------------

    def read_entry(self, index: int) -> DLedgerEntry:
        """The stored entry of Raft index ``index`` (DLedger index ``index - 1``).

        Raises:
            IndexError: no entry there.
            EntryFormatError: the bytes on disk changed since they were checked.
        """
        if not 0 < index <= len(self._terms):
            raise IndexError(f"no entry at index {index} (last {self.last_index})")
        raw = self._data.read(self._positions[index - 1], self._sizes[index - 1])
        return decode_entry(raw)

    def position(self, index: int) -> int:
        """The byte position of entry ``index`` in the data files."""
        if not 0 < index <= len(self._terms):
            raise IndexError(f"no entry at index {index} (last {self.last_index})")
        return self._positions[index - 1]

    @property
    def end_pos(self) -> int:
        """Where the data ends (the next entry goes here or at the next file's start)."""
        return self._end

    def iter_entries(self, first: int = 1, last: int | None = None) -> Iterator[DLedgerEntry]:
        """The stored entries of indexes ``first`` to ``last`` (default: the last one)."""
        stop = len(self._terms) if last is None else min(last, len(self._terms))
        for i in range(max(first, 1), stop + 1):
            yield self.read_entry(i)

    def flush(self) -> None:
        """fsync what was written since the last flush (data first, then index)."""
        self._data.sync()
        self._index.sync()

    def take_dirty(self) -> list[int]:
        """What :meth:`flush` would fsync, as duplicated descriptors (data files first, then
        the index; each followed by its directory when a file was created or deleted) that
        the caller fsyncs and closes: a flush off the event loop, safe
        against appends (and a truncation closing a file) meanwhile."""
        return self._data.take_dirty() + self._index.take_dirty()

    def load_hard_state(self) -> HardState:
        """The persisted term and vote (``HardState()`` when none was saved)."""
        path = self.directory / _HARD_STATE
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return HardState()
        except ValueError as exc:
            raise DLedgerError(f"{path}: not a hard state document: {exc}") from exc
        if not isinstance(raw, dict):
            raise DLedgerError(f"{path}: not a hard state document: {raw!r}")
        term, voted = raw.get("term"), raw.get("voted_for")
        if not isinstance(term, int) or not (voted is None or isinstance(voted, str)):
            raise DLedgerError(f"{path}: bad term or vote: {str(raw)[:200]}")
        problem = implausible_term(term, self.last_term, _MAX_SAVED_TERM_GAP)
        if problem is not None:
            raise DLedgerError(
                f"{path}: the saved term cannot be this node's: {problem}; restore the file "
                "from a backup, or remove it to start this node at term 0 with no vote (safe "
                "only if it cannot have voted in a recent term)"
            )
        return HardState(term, voted)

    def save_hard_state(self, state: HardState) -> None:
        """Persist the term and vote atomically: temp file, fsync, rename, fsync the dir.

        The directory and the next temporary file are kept open between calls, so this needs
        no new descriptor when the process has run out of them.
        """
        path = self.directory / _HARD_STATE
        temp = path.with_name(_HARD_STATE + ".tmp")
        data = json.dumps({"term": state.term, "voted_for": state.voted_for}).encode("utf-8")
        if self._dir_fd < 0:
            self._dir_fd = os.open(self.directory, os.O_RDONLY)
        fd, self._spare_fd = self._spare_fd, -1
        if fd < 0:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
        os.fsync(self._dir_fd)
        # the descriptor just closed makes room for the next temporary file
        with contextlib.suppress(OSError):
            self._spare_fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def close(self) -> None:
        """Flush and close the files (idempotent)."""
        with contextlib.suppress(OSError):
            self.flush()
        self._data.close()
        self._index.close()
        if self._spare_fd >= 0:
            os.close(self._spare_fd)
            self._spare_fd = -1
            (self.directory / (_HARD_STATE + ".tmp")).unlink(missing_ok=True)
        if self._dir_fd >= 0:
            os.close(self._dir_fd)
            self._dir_fd = -1

    def __enter__(self) -> FileLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FileLog({str(self.directory)!r}, last_index={self.last_index})"
