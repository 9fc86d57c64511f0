"""RocketMQ 4.9.8's index files: messages found by key (``KEYS``) or unique id (``UNIQ_KEY``).

The store root's ``index/`` directory holds files named by their creation time
(``yyyyMMddHHmmssSSS``, local time), each of ``40 + 4 * slots + 20 * entries`` bytes, all
big-endian::

    header (40)   beginTimestamp i64, endTimestamp i64, beginPhyOffset i64, endPhyOffset i64,
                  hashSlotCount i32, indexCount i32
    slots         slots x i32: the newest entry number whose key hash falls in the slot (0: none)
    entries       entries x (keyHash i32, phyOffset i64, timeDiff i32, prevIndex i32)

A key is ``topic#key``; its hash is ``abs(String.hashCode)`` (0 for ``Integer.MIN_VALUE``)
and its slot that hash modulo the slot count. Entry numbers start at 1 (``indexCount`` starts
at 1: a file holds ``entries - 1`` keys); an entry links to the entry its slot held before
(``prevIndex``), so a slot is a list from the newest entry back. ``timeDiff`` is the store
timestamp's distance from ``beginTimestamp`` in whole seconds. A full file is followed by a
new one whose header starts at the full file's end offset and timestamp.

Files are sparse (made with ``ftruncate``): a file of RocketMQ's default 5,000,000 slots and
20,000,000 entries is 420 MB on paper and takes its slot table (20 MB, given its blocks at
creation with ``posix_fallocate``) and the blocks its entries touch. They are written
with ``pwrite`` (a full disk is an ``OSError``, never a ``SIGBUS`` through a mapping) and read
with ``pread``. Each key is written in three steps, the header last: a process killed between
them leaves a slot pointing at the uncounted entry, which :meth:`IndexFile.repair` undoes at
the next open. :class:`IndexService` keeps the files, builds them from the commit log
(:meth:`IndexService.build`), rolls them back past a truncation and answers lookups.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import re
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import attrs

from ._damage import DamagedRange
from ._errors import StoreError, StoreLayoutError
from ._index import ROW, SCAN_WINDOW, scan_windows
from ._index_keys import (
    KEYS_PROPERTY,
    UNIQ_KEY_PROPERTY,
    index_key_hash,
    java_hash,
    raw_keys,
    topic_key_hash,
)
from ._mapped_queue import MappedFileQueue
from ._native import ENABLED as NATIVE_ENABLED
from ._native import native
from ._scanner import StopReason, decode_record

__all__ = [
    "DEFAULT_MAX_HASH_SLOT_NUM",
    "DEFAULT_MAX_INDEX_NUM",
    "DEFAULT_MAX_MSGS_NUM_BATCH",
    "INDEX_ENTRY_SIZE",
    "INDEX_HEADER_SIZE",
    "INDEX_SLOT_SIZE",
    "IndexFile",
    "IndexHeader",
    "IndexQueryResult",
    "IndexService",
    "index_file_size",
]

logger = logging.getLogger(__name__)

DEFAULT_MAX_HASH_SLOT_NUM = 5_000_000
"""RocketMQ's ``maxHashSlotNum``."""
DEFAULT_MAX_INDEX_NUM = 20_000_000
"""RocketMQ's ``maxIndexNum``."""
DEFAULT_MAX_MSGS_NUM_BATCH = 64
"""RocketMQ's ``maxMsgsNumBatch``: most offsets one lookup returns."""

INDEX_HEADER_SIZE = 40
INDEX_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20
_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
_SLOT = struct.Struct(">i")
_U16 = struct.Struct(">H")
_INVALID = 0
_I32_MAX = 2**31 - 1
_PAGE = mmap.PAGESIZE
_NAME = re.compile(r"^\d{17}$")
_ROLLBACK = 0x3 << 2  # MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
_SYS_FLAG_AT = 36  # after TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET


def key_batch_py(
    view: bytes | bytearray | memoryview, base: int, rows: bytes, indexed: int, skip: int
) -> list[tuple[int, int, int]]:
    """The index keys ``(key hash, offset, store timestamp)`` of the records of ``rows`` (a
    scan window of ``view``, whose byte 0 is at offset ``base``) at offset ``indexed`` or
    later, but the first ``skip`` keys of the record at ``indexed`` (already indexed) and the
    records of rolled back transactions (the reference of the extension's ``key_batch``)."""
    prefixes: dict[int, tuple[int, int]] = {}  # topic id -> hash and length of "topic#"
    batch: list[tuple[int, int, int]] = []
    u16, i32 = _U16.unpack_from, _SLOT.unpack_from
    append = batch.append
    for offset, _, _, _, _, stored, t_start, t_length, t_id in ROW.iter_unpack(rows):
        if offset < indexed:
            continue
        at = t_start + t_length + 2
        if t_start < 0 or t_length < 0 or at > len(view):
            raise ValueError("key_batch: a row points outside the buffer")
        size = u16(view, at - 2)[0]
        if at + size > len(view):
            raise ValueError("key_batch: a row points outside the buffer")
        raw = bytes(view[at : at + size])
        if KEYS_PROPERTY not in raw and UNIQ_KEY_PROPERTY not in raw:
            continue
        keys = raw_keys(raw)
        if not keys:
            continue
        if not 0 <= offset - base <= len(view) - _SYS_FLAG_AT - 4:
            raise ValueError("key_batch: a row points outside the buffer")
        if i32(view, offset - base + _SYS_FLAG_AT)[0] & _ROLLBACK == _ROLLBACK:
            continue
        prefix = prefixes.get(t_id)
        if prefix is None:
            topic = str(view[t_start : t_start + t_length], "utf-8")
            prefix = prefixes[t_id] = java_hash(topic + "#")
        if offset == indexed and skip:
            keys = keys[skip:]
        for key in keys:
            append((topic_key_hash(prefix, key), offset, stored))
    return batch


def index_entries_py(
    view: mmap.mmap | bytes | bytearray | memoryview,
    keys: Sequence[tuple[int, int, int]],
    count: int,
    slots: int,
    begin: int,
    begin_phy: int,
    used: int,
    end_phy: int,
    end_stamp: int,
) -> tuple[bytes, dict[int, int], int, int, int, int, int, int]:
    """The entries of an index file holding ``count`` of them (``view`` its bytes, ``slots``
    hash slots) for ``keys`` ``(key hash, physical offset, store timestamp)``, as RocketMQ's
    ``putKey`` writes them one after the other: ``(packed entries, {slot position: entry
    number}, begin timestamp, begin offset, slots used, end offset, end timestamp, the
    count after)``, the header's fields updated from theirs (the reference of the
    extension's ``index_entries``; a number out of its field's range is ``struct.error``)."""
    pending: dict[int, int] = {}  # slot position -> entry number, for this batch
    packed = bytearray()
    pack = _ENTRY.pack
    number = count
    unpack_slot = _SLOT.unpack_from
    for key_hash, phy_offset, stamp in keys:
        slot_at = INDEX_HEADER_SIZE + (key_hash % slots) * INDEX_SLOT_SIZE
        previous = pending.get(slot_at)
        if previous is None:
            if slot_at < 0 or slot_at + INDEX_SLOT_SIZE > len(view):
                raise ValueError("index_entries: a slot is outside the file")
            previous = unpack_slot(view, slot_at)[0]
            if previous <= _INVALID or previous > count:
                previous = _INVALID
        if begin <= 0:
            diff = 0
        else:
            diff = (stamp - begin) // 1000 if stamp > begin else 0
            diff = min(diff, _I32_MAX)
        packed += pack(key_hash, phy_offset, diff, previous)
        pending[slot_at] = number
        if number <= 1:  # the file's first key sets its begin (RocketMQ's)
            begin_phy = phy_offset
            begin = stamp
        if previous == _INVALID:
            used += 1
        end_phy, end_stamp = phy_offset, stamp
        number += 1
    return bytes(packed), pending, begin, begin_phy, used, end_phy, end_stamp, number


IndexEntries = Callable[
    [
        mmap.mmap | bytes | bytearray | memoryview,
        Sequence[tuple[int, int, int]],
        int,
        int,
        int,
        int,
        int,
        int,
        int,
    ],
    tuple[bytes, dict[int, int], int, int, int, int, int, int],
]
native_index_entries: IndexEntries | None = native("index_entries")
"""The extension's ``index_entries`` (None when it is not built)."""
index_entries: IndexEntries = (
    (native_index_entries or index_entries_py) if NATIVE_ENABLED else index_entries_py
)

KeyBatch = Callable[[memoryview, int, bytes, int, int], list[tuple[int, int, int]]]
native_key_batch: KeyBatch | None = native("key_batch")
"""The extension's ``key_batch`` (None when it is not built), whatever ``HANET_NO_EXTENSIONS``."""
# The keys of a window hashed in one call: in Python, ~7 us of every put with keys.
key_batch: KeyBatch = (native_key_batch or key_batch_py) if NATIVE_ENABLED else key_batch_py


def index_file_size(slots: int, entries: int) -> int:
    """The size of an index file of ``slots`` hash slots and ``entries`` entries."""
    return INDEX_HEADER_SIZE + slots * INDEX_SLOT_SIZE + entries * INDEX_ENTRY_SIZE


@attrs.define
class IndexHeader:
    """An index file's 40-byte header."""

    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 1

    def pack(self) -> bytes:
        return _HEADER.pack(
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    @classmethod
    def unpack(cls, data: bytes) -> IndexHeader:
        header = cls(*_HEADER.unpack(data))
        if header.index_count <= 0:
            header.index_count = 1
        return header


class _DamagedIndexFile(StoreLayoutError):
    """An index file whose header counts more than it holds (:meth:`IndexFile.load`)."""


class IndexFile:
    """One index file (see the module docstring). Open with :meth:`create` or :meth:`load`.

    Entries and the header are written with ``pwrite`` (a full disk is an ``OSError``);
    slots are stored into the shared mapping, each page of the slot table given its blocks
    first (rewritten once with ``pwrite``), so a full disk is an ``OSError`` there too, never
    a ``SIGBUS``. Reads go through the mapping.
    """

    def __init__(self, path: Path, slots: int, entries: int, fd: int, header: IndexHeader) -> None:
        self.path = path
        self.slots = slots
        self.entries = entries
        self.header = header
        self._fd = fd
        self._map: mmap.mmap | None = mmap.mmap(fd, 0)
        self._entries_at = INDEX_HEADER_SIZE + slots * INDEX_SLOT_SIZE
        self._reserved: set[int] = set()  # slot table pages known to have their blocks
        self._slots_reserved = False  # every page of the slot table has its blocks
        self.dirty = False

    @classmethod
    def create(
        cls, path: Path, slots: int, entries: int, end_phy_offset: int = 0, end_timestamp: int = 0
    ) -> IndexFile:
        """A new, sparse file; its header starts at the previous file's end (RocketMQ's)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            os.ftruncate(fd, index_file_size(slots, entries))
            header = IndexHeader()
            if end_phy_offset > 0:
                header.begin_phy_offset = header.end_phy_offset = end_phy_offset
            if end_timestamp > 0:
                header.begin_timestamp = header.end_timestamp = end_timestamp
            os.pwrite(fd, header.pack(), 0)
            index_file = cls(path, slots, entries, fd, header)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        index_file._reserve_slots()
        index_file.dirty = True
        return index_file

    @classmethod
    def load(cls, path: Path, slots: int, entries: int) -> IndexFile:
        """Open an existing file.

        Raises:
            StoreLayoutError: its size is not the one ``slots`` and ``entries`` make, or
                (:class:`_DamagedIndexFile`) its header does not fit it.
        """
        expected = index_file_size(slots, entries)
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            if size != expected:
                raise StoreLayoutError(
                    f"index file {path} has {size} bytes; maxHashSlotNum={slots} and "
                    f"maxIndexNum={entries} make files of {expected} bytes (start with the "
                    "settings it was made with)"
                )
            header = IndexHeader.unpack(os.pread(fd, INDEX_HEADER_SIZE, 0))
            if not 0 <= header.index_count <= entries or not 0 <= header.hash_slot_count <= slots:
                raise _DamagedIndexFile(
                    f"index file {path}: header counts {header.index_count} entries and "
                    f"{header.hash_slot_count} slots, more than the file holds"
                )
            return cls(path, slots, entries, fd, header)
        except BaseException:
            os.close(fd)
            raise

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def full(self) -> bool:
        """RocketMQ's ``isWriteFull``: no entry left."""
        return self.header.index_count >= self.entries

    @property
    def count(self) -> int:
        """Keys held (``indexCount - 1``)."""
        return self.header.index_count - 1

    def _slot_at(self, key_hash: int) -> int:
        return INDEX_HEADER_SIZE + (key_hash % self.slots) * INDEX_SLOT_SIZE

    def _reserve_slots(self) -> None:
        """Give the whole slot table its blocks at once (a new, all-zero file): one
        ``posix_fallocate`` instead of a read and write of each page the keys reach first (a
        fresh file's first keys nearly each reach a new page). Where it fails (a full disk, a
        file system without it) pages are reserved one by one as before."""
        try:
            os.posix_fallocate(self._fd, 0, self._entries_at)
        except OSError as exc:
            logger.debug("%s: slot table not reserved at once (%s): page by page", self.path, exc)
            return
        self._slots_reserved = True

    def _write_slot(self, position: int, value: int) -> None:
        """Store a slot (its page's blocks reserved first: a full disk raises OSError)."""
        page = position // _PAGE
        if not self._slots_reserved and page not in self._reserved:
            at = page * _PAGE
            os.pwrite(self._fd, os.pread(self._fd, _PAGE, at), at)
            self._reserved.add(page)
        assert self._map is not None
        _SLOT.pack_into(self._map, position, value)

    def _read_slot(self, position: int) -> int:
        assert self._map is not None
        value: int = _SLOT.unpack_from(self._map, position)[0]
        return value

    def entry(self, number: int) -> tuple[int, int, int, int]:
        """Entry ``number``: ``(key hash, physical offset, time diff, previous entry)``."""
        assert self._map is not None
        key_hash, phy_offset, diff, previous = _ENTRY.unpack_from(
            self._map, self._entries_at + number * INDEX_ENTRY_SIZE
        )
        return key_hash, phy_offset, diff, previous

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Add ``key`` for the record at ``phy_offset`` (RocketMQ's ``putKey``); False when
        the file is full.

        Raises:
            OSError: the file could not be written (a full disk): nothing was added.
        """
        return self.put_keys([(index_key_hash(key), phy_offset, store_timestamp)]) == 1

    def put_keys(self, keys: Sequence[tuple[int, int, int]]) -> int:
        """Add ``(key hash, physical offset, store timestamp)`` keys in order, as many as the
        file has room for; returns how many. Each is what RocketMQ's ``putKey`` writes; the
        entries go in one write, then each slot, then the header (the commit point).

        Raises:
            OSError: the file could not be written (a full disk): nothing was added (the
                slots already written are put back).
        """
        header = self.header
        count = header.index_count
        room = self.entries - count
        if room <= 0 or not keys:
            return 0
        if len(keys) > room:
            keys = keys[:room]
        assert self._map is not None
        packed, pending, begin, begin_phy, used, end_phy, end_stamp, number = index_entries(
            self._map,
            keys,
            count,
            self.slots,
            header.begin_timestamp,
            header.begin_phy_offset,
            header.hash_slot_count,
            header.end_phy_offset,
            header.end_timestamp,
        )
        fd = self._fd
        self.dirty = True
        os.pwrite(fd, packed, self._entries_at + count * INDEX_ENTRY_SIZE)
        try:
            # _write_slot for each, its page check inlined (the put path: a slot or two a key)
            reserved, view, pack_slot = self._reserved, self._map, _SLOT.pack_into
            all_reserved = self._slots_reserved
            for slot_at, value in pending.items():
                if all_reserved or slot_at // _PAGE in reserved:
                    pack_slot(view, slot_at, value)
                else:
                    self._write_slot(slot_at, value)
            updated = IndexHeader(begin, end_stamp, begin_phy, end_phy, used, number)
            os.pwrite(fd, updated.pack(), 0)
        except OSError:
            self.repair()
            raise
        self.header = updated
        return len(keys)

    def time_matched(self, begin: int, end: int) -> bool:
        """RocketMQ's ``isTimeMatched``: whether ``[begin, end]`` overlaps the file's span."""
        first, last = self.header.begin_timestamp, self.header.end_timestamp
        return (begin < first and end > last) or first <= begin <= last or first <= end <= last

    def select(self, key: str, max_num: int, begin: int, end: int, into: list[int]) -> None:
        """Append to ``into`` the physical offsets of ``key``'s entries stored in
        ``[begin, end]``, newest first, until it holds ``max_num`` (RocketMQ's
        ``selectPhyOffset``: entries are matched by hash)."""
        header = self.header
        count = header.index_count
        key_hash = index_key_hash(key)
        number = self._read_slot(self._slot_at(key_hash))
        if number <= _INVALID or number > count or count <= 1:
            return
        seen = 0
        while len(into) < max_num and seen < count:
            seen += 1
            hash_read, phy_offset, diff, previous = self.entry(number)
            if diff < 0:
                break
            stamp = header.begin_timestamp + diff * 1000
            if hash_read == key_hash and begin <= stamp <= end:
                into.append(phy_offset)
            if previous <= _INVALID or previous > count or previous == number or stamp < begin:
                break
            number = previous

    def repair(self) -> int:
        """Undo the keys whose slots were written but whose header was not (a process killed
        in :meth:`put_keys`, or a write that failed); returns how many slots were put back."""
        count = self.header.index_count
        written = []
        number = count
        while number < self.entries:
            entry = self.entry(number)
            if entry == (0, 0, 0, 0):
                break
            written.append((number, entry))
            number += 1
        undone = 0
        for number, (key_hash, _, _, previous) in reversed(written):
            slot_at = self._slot_at(key_hash)
            if self._read_slot(slot_at) == number:
                self._write_slot(slot_at, previous)
                undone += 1
        if undone:
            self.dirty = True
        return undone

    def entry_offsets_from_end(self) -> Iterator[int]:
        """The physical offsets of the entries, newest first."""
        for number in range(self.header.index_count - 1, 0, -1):
            yield self.entry(number)[1]

    def rollback(self, offset: int, timestamp_of: dict[int, int]) -> int:
        """Drop the newest entries whose physical offset is ``offset`` or more (their slots
        get back the entry each pointed to); returns how many. ``timestamp_of`` maps a
        physical offset to its record's store timestamp (for the new ``endTimestamp``)."""
        header = attrs.evolve(self.header)
        dropped = 0
        while header.index_count > 1:
            number = header.index_count - 1
            key_hash, phy_offset, _, previous = self.entry(number)
            if phy_offset < offset:
                break
            slot_at = self._slot_at(key_hash)
            if self._read_slot(slot_at) == number:
                self._write_slot(slot_at, previous)
                if previous == _INVALID:
                    header.hash_slot_count = max(header.hash_slot_count - 1, 0)
            header.index_count = number
            dropped += 1
        if dropped:
            if header.index_count > 1:
                last = self.entry(header.index_count - 1)[1]
                header.end_phy_offset = last
                header.end_timestamp = timestamp_of.get(last, header.end_timestamp)
            else:
                header.end_phy_offset = header.begin_phy_offset
                header.end_timestamp = header.begin_timestamp
            os.pwrite(self._fd, header.pack(), 0)
            self.header = header
            self.dirty = True
        return dropped

    def flush(self) -> None:
        """fsync the file if it was written since the last flush."""
        if self.dirty:
            self.dirty = False
            os.fsync(self._fd)

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


IndexQueryResult = tuple[list[int], int, int]
"""``(physical offsets, indexLastUpdateTimestamp, indexLastUpdatePhyoffset)``."""


class IndexService:
    """The ``index/`` directory of a store: loading, building from the commit log, rollback,
    lookups (RocketMQ's ``IndexService``).

    :attr:`indexed_offset` is how far the commit log is indexed: the next record to index.
    The record there may have some of its keys indexed already (a process killed between
    them, or a file that could not be written): :meth:`build` skips those.
    """

    def __init__(
        self,
        directory: Path,
        slots: int = DEFAULT_MAX_HASH_SLOT_NUM,
        entries: int = DEFAULT_MAX_INDEX_NUM,
        max_batch: int = DEFAULT_MAX_MSGS_NUM_BATCH,
    ) -> None:
        if slots <= 0 or entries <= 1:
            raise ValueError(f"an index file needs slots > 0 and entries > 1: {slots}, {entries}")
        self.directory = directory
        self.slots = slots
        self.entries = entries
        self.max_batch = max_batch
        self.files: list[IndexFile] = []
        self.indexed_offset = 0
        self._skip = 0  # keys of the record at indexed_offset already indexed
        self.error: str | None = None
        """Why the last :meth:`build` stopped short (a file that could not be written)."""

    # -- opening --------------------------------------------------------------------------

    def load(self) -> None:
        """Open the files (sorted by name) and undo a key left half-written by a kill.

        Raises:
            StoreLayoutError: a file of another size than configured.
        """
        if not self.directory.is_dir():
            return
        paths = sorted(p for p in self.directory.iterdir() if _NAME.match(p.name) and p.is_file())
        for number, path in enumerate(paths):
            if path.stat().st_size == 0:  # a kill while it was being made: nothing in it yet
                logger.warning("%s: empty (made when the last run stopped): deleted", path)
                path.unlink()
                continue
            try:
                self.files.append(IndexFile.load(path, self.slots, self.entries))
            except _DamagedIndexFile as exc:
                # derived data: it and the later files go, their keys are indexed again
                later = paths[number:]
                resume = (
                    f"offset {self.files[-1].header.end_phy_offset}" if self.files else "its start"
                )
                logger.warning(
                    "%s; deleted with %d later index file(s): their keys are indexed again "
                    "from the commit log (from %s)",
                    exc,
                    len(later) - 1,
                    resume,
                )
                for damaged in later:
                    damaged.unlink(missing_ok=True)
                break
        if not self.files:
            return
        last = self.files[-1]
        if last.repair():
            logger.warning("%s: undid keys half-written when the last run stopped", last.path)
        if last.count > 0 and _newest(last) != last.header.end_phy_offset:
            # not what a kill leaves (the header is written last, in one write): pages lost
            # with the machine. Built again from the commit log.
            logger.warning(
                "%s: its header and its newest entry disagree (offset %d against %d): "
                "deleted, its keys are indexed again from the commit log",
                last.path,
                last.header.end_phy_offset,
                _newest(last),
            )
            self._delete(last, "inconsistent")

    def recover(self, commit_log: MappedFileQueue, end: int) -> None:
        """Roll the files back to the commit log's valid end ``end`` and find where building
        resumes: the newest indexed record (some of its keys may be missing) or, without any
        entry, the commit log's first record."""
        self.truncate(end, commit_log)
        last = self._last_indexed()
        if last is None:
            self.indexed_offset = commit_log.min_offset
            self._skip = 0
            return
        self.indexed_offset = last
        skip = 0
        for index_file in reversed(self.files):
            stop = False
            for phy_offset in index_file.entry_offsets_from_end():
                if phy_offset != last:
                    stop = True
                    break
                skip += 1
            if stop:
                break
        self._skip = skip
        self.indexed_offset = max(last, commit_log.min_offset)
        if self.indexed_offset != last:
            self._skip = 0

    def _last_indexed(self) -> int | None:
        for index_file in reversed(self.files):
            if index_file.count > 0:
                return index_file.header.end_phy_offset
        return None

    # -- building -------------------------------------------------------------------------

    def start_at(self, offset: int) -> None:
        """The commit log (empty so far) starts at ``offset``: build from there."""
        if offset > self.indexed_offset:
            self.indexed_offset = offset
            self._skip = 0

    def build(
        self,
        commit_log: MappedFileQueue,
        end: int,
        *,
        budget: int | None = None,
        skip: Sequence[DamagedRange] = (),
    ) -> bool:
        """Index the records in ``[indexed_offset, end)`` (all complete and valid: the store
        dispatched them); with ``budget``, stop at a record boundary once about that many bytes
        were scanned. Returns whether it reached ``end``. A file that cannot be written (a full
        disk) stops the build at the record it was on, logged once; the next call tries
        again. ``skip``: damaged ranges (sorted), never indexed."""
        if self.indexed_offset < commit_log.min_offset:
            self.indexed_offset = commit_log.min_offset
            self._skip = 0
        position = start = self.indexed_offset
        window = SCAN_WINDOW if budget is None else max(budget, 64 * 1024)
        while position < end:
            damaged = next((r for r in skip if r.end > position), None)
            if damaged is not None and damaged.start <= position:
                position = self.indexed_offset = min(damaged.end, end)
                self._skip = 0
                continue
            mapped = commit_log.find(position)
            if mapped is None:  # pragma: no cover - offsets inside the data have a file
                break
            base = mapped.start_offset
            view = mapped.view
            stop_at = min(end - base, mapped.wrote)
            if damaged is not None:
                stop_at = min(stop_at, damaged.start - base)
            result = None
            for result in scan_windows(
                view,
                position - base,
                stop_at,
                base,
                check_crc=False,
                check_physical_offset=True,
                window=window,
            ):
                if result.records and not self._index_rows(view, base, result.rows):
                    return False
                if budget is not None and base + result.position - start >= budget:
                    # a record boundary
                    self.indexed_offset, self._skip = base + result.position, 0
                    return self.indexed_offset >= end
            if result is None:  # pragma: no cover - scan_windows yields at least once
                break
            reached = base + result.position
            if result.reason is StopReason.BLANK or reached >= base + mapped.size:
                reached = mapped.end_offset  # past the blank tail: the next file
            elif reached == position and (damaged is None or reached != damaged.start):
                break  # pragma: no cover - dispatched data always scans
            position = min(reached, end) if reached < mapped.end_offset else reached
            self.indexed_offset = position
            self._skip = 0
        if self.error is not None and self.indexed_offset >= end:
            logger.info("%s: index files can be written again", self.directory)
            self.error = None
        return self.indexed_offset >= end

    def index_repaired(self, view: memoryview, base: int, rows: bytes) -> int:
        """Index the records of ``rows`` (a scan of ``view``, whose byte 0 is at offset
        ``base``) just written over a repaired damaged range, below :attr:`indexed_offset`:
        those none of whose keys the index holds at their offset yet (records indexed before
        they were damaged are not added twice). Returns how many records were indexed."""
        missing = bytearray()
        for row in ROW.iter_unpack(rows):
            offset, t_start, t_length = row[0], row[6], row[7]
            at = t_start + t_length + 2
            keys = raw_keys(bytes(view[at : at + _U16.unpack_from(view, at - 2)[0]]))
            topic = str(view[t_start : t_start + t_length], "utf-8")
            if keys and all(
                offset not in self.query(topic, key, self.max_batch, 0, 2**63 - 1)[0]
                for key in keys
            ):
                missing += ROW.pack(*row)
        if missing:
            indexed, skip = self.indexed_offset, self._skip
            self.indexed_offset = self._skip = 0  # below it, on purpose
            try:
                self._index_rows(view, base, bytes(missing))
            finally:
                self.indexed_offset, self._skip = indexed, skip
        return len(missing) // ROW.size

    def _index_rows(self, view: memoryview, base: int, rows: bytes) -> bool:
        """Index the keys of the records of ``rows`` (one scan window), in one batch."""
        indexed, skip = self.indexed_offset, self._skip
        batch = key_batch(view, base, rows, indexed, skip)
        if not batch:
            return True
        done = 0
        try:
            while done < len(batch):
                index_file = self._writable()
                added = index_file.put_keys(batch[done:] if done else batch)
                if added == 0 and not index_file.full:  # pragma: no cover - defensive
                    raise OSError(f"{index_file.path} took no key")
                done += added
                if index_file.full and done < len(batch):
                    logger.info("%s is full: a new index file follows", index_file.path)
        except OSError as exc:
            offset = batch[done][1]
            number = sum(1 for entry in batch[:done] if entry[1] == offset)
            self.indexed_offset = offset
            self._skip = number + (skip if offset == indexed else 0)
            if self.error is None:
                logger.error(
                    "%s: cannot write the index (%s): indexing stops at offset %d until it can "
                    "(lookups miss the records from there on)",
                    self.directory,
                    exc,
                    offset,
                )
            self.error = f"index: {exc}"
            return False
        offset = batch[-1][1]
        number = sum(1 for entry in batch[-64:] if entry[1] == offset)
        if number == 64:  # a record with many keys: count them all
            number = sum(1 for entry in batch if entry[1] == offset)
        self.indexed_offset = offset
        self._skip = number + (skip if offset == indexed else 0)
        return True

    def _writable(self) -> IndexFile:
        end_phy, end_stamp = 0, 0
        if self.files:
            last = self.files[-1]
            if not last.full:
                return last
            end_phy, end_stamp = last.header.end_phy_offset, last.header.end_timestamp
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / self._new_name()
        index_file = IndexFile.create(path, self.slots, self.entries, end_phy, end_stamp)
        self.files.append(index_file)
        return index_file

    def _new_name(self) -> str:
        now = time.time_ns() // 1_000_000
        if self.files:  # names sort as the files were made, one millisecond apart at least
            now = max(now, _name_millis(self.files[-1].name) + 1)
        while True:
            name = _millis_name(now)
            if not (self.directory / name).exists():
                return name
            now += 1

    # -- rollback, flush, close --------------------------------------------------------

    def truncate(self, offset: int, commit_log: MappedFileQueue | None = None) -> None:
        """Forget every key of the records at ``offset`` or later (the commit log was cut
        there): the newest entries rolled back, files left without entries deleted."""
        while self.files:
            last = self.files[-1]
            if last.count == 0:  # a new file after a full one: keep it unless that one shrinks
                older = self.files[-2] if len(self.files) > 1 else None
                if older is None or older.count == 0 or _newest(older) < offset:
                    break
                self._delete(last)
                continue
            if _newest(last) < offset:
                break
            stamps = {} if commit_log is None else _timestamps(commit_log, last, offset)
            dropped = last.rollback(offset, stamps)
            if last.count == 0:
                self._delete(last)
                continue
            logger.info("%s: dropped %d keys of offsets past %d", last.path, dropped, offset)
            break
        if self.indexed_offset > offset:
            self.indexed_offset = offset
            self._skip = 0

    def delete_expired(self, offset: int) -> int:
        """Delete the oldest files whose keys all point below ``offset`` (the commit log's new
        minimum offset after retention), never the newest file (RocketMQ's
        ``deleteExpiredFile``); returns how many."""
        deleted = 0
        while len(self.files) > 1 and self.files[0].header.end_phy_offset < offset:
            self._delete(self.files[0], f"its keys are below the commit log's start {offset}")
            deleted += 1
        return deleted

    def _delete(self, index_file: IndexFile, why: str = "its keys were past the data") -> None:
        index_file.close()
        index_file.path.unlink(missing_ok=True)
        self.files.remove(index_file)
        logger.info("%s: deleted (%s)", index_file.path, why)

    def flush(self) -> None:
        """fsync the files written since the last flush."""
        for index_file in list(self.files):
            try:
                index_file.flush()
            except OSError as exc:  # closed meanwhile (a truncation on the event loop)
                if exc.errno != errno.EBADF:
                    raise

    def close(self) -> None:
        for index_file in self.files:
            index_file.close()

    # -- lookups -----------------------------------------------------------------------

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> IndexQueryResult:
        """RocketMQ's ``queryOffset``: the physical offsets of ``topic#key`` stored in
        ``[begin, end]`` (newest files first, at most ``min(max_num, max_batch)``), the
        last file's end timestamp and end offset."""
        offsets: list[int] = []
        last_stamp = last_offset = 0
        max_num = min(max_num, self.max_batch)
        full_key = f"{topic}#{key}"
        for position in range(len(self.files) - 1, -1, -1):
            index_file = self.files[position]
            if position == len(self.files) - 1:
                last_stamp = index_file.header.end_timestamp
                last_offset = index_file.header.end_phy_offset
            if index_file.time_matched(begin, end):
                index_file.select(full_key, max_num, begin, end, offsets)
            if index_file.header.begin_timestamp < begin or len(offsets) >= max_num:
                break
        return offsets, last_stamp, last_offset


def _newest(index_file: IndexFile) -> int:
    return index_file.entry(index_file.header.index_count - 1)[1]


def _millis_name(millis: int) -> str:
    seconds, ms = divmod(millis, 1000)
    return time.strftime("%Y%m%d%H%M%S", time.localtime(seconds)) + f"{ms:03d}"


def _name_millis(name: str) -> int:
    try:
        stamp = time.mktime(time.strptime(name[:14], "%Y%m%d%H%M%S"))
    except ValueError:
        return 0
    return int(stamp) * 1000 + int(name[14:17])


def _timestamps(commit_log: MappedFileQueue, index_file: IndexFile, offset: int) -> dict[int, int]:
    """The store timestamp of the newest record the file keeps below ``offset`` (for its
    new ``endTimestamp`` after a rollback), read from the commit log when it is there."""
    for number in range(index_file.header.index_count - 1, 0, -1):
        phy_offset = index_file.entry(number)[1]
        if phy_offset >= offset:
            continue
        mapped = commit_log.find(phy_offset)
        if mapped is None:
            return {}
        try:
            record = decode_record(
                mapped.view[: mapped.wrote],
                phy_offset - mapped.start_offset,
                base_offset=mapped.start_offset,
                check_crc=False,
            )
        except (StoreError, ValueError):
            return {}
        return {phy_offset: record.store_timestamp}
    return {}
