"""What an HA master may push to a slave, without IO: validated commit log bytes.

A master never pushes a byte it has not checked: whole records that pass the store's record
index (sizes, magic, PHYSICALOFFSET and CRCs; native when built) or a file's blank tail, read
as views of the mapped commit log. :class:`PushValidator` says which bytes from an offset
may go, where a slave's first request may start a transfer (a record boundary, a file start,
the data end, inside a valid record where a RocketMQ slave was cut mid-frame, or inside a
blank tail) and why not otherwise; the master's connection (``_master.py``) only sends what it
hands out.
"""

from __future__ import annotations

import logging
import struct
from collections import deque

import attrs

from hanet.store import (
    CommitLogStore,
    CorruptRecordError,
    ScanStop,
    StopReason,
)
from hanet.store.lowlevel import (
    BLANK_MAGIC,
    BLANK_RECORD_SIZE,
    INDEX_STOP_REASONS,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    NATIVE_SCANNER,
    IndexScanResult,
    StopKind,
    judge_stop,
    scan_index,
    scan_index_windows,
)

__all__ = ["PushValidator"]

log = logging.getLogger("hanet.ha.master")

_PREFIX = struct.Struct(">iI")  # a record's TOTALSIZE and MAGICCODE
# A record larger than a batch is read whole to be validated; its size field is trusted up to
# the largest record a put can write (max body + topic + properties + header) plus slack, so
# that a corrupt size field cannot make the master copy a whole file.
_RECORD_OVERHEAD_MAX = 2 * 32 * 1024 + 64 * 1024
_EMPTY = memoryview(b"")
# the codes of a scan_index result's stop reasons
_END_CODE = INDEX_STOP_REASONS.index(StopReason.END)
_BLANK_CODE = INDEX_STOP_REASONS.index(StopReason.BLANK)
_INCOMPLETE_CODE = INDEX_STOP_REASONS.index(StopReason.INCOMPLETE)
_INVALID_CODE = INDEX_STOP_REASONS.index(StopReason.INVALID)


@attrs.frozen
class _Scanned:
    position: int
    """Where the whole valid records of the buffer end."""
    stop: ScanStop


def _scan(buf: bytes | memoryview, offset: int) -> _Scanned:
    """Validate ``buf`` (commit log bytes starting at physical ``offset``) in one call of the
    store's record index (native when built) up to its first stop."""
    result = scan_index(buf, 0, len(buf), offset, check_physical_offset=True)
    return _Scanned(result.position, result.stop(offset))


def _stop_reason(scanner: _Scanned, file_end: int) -> str:
    """Why the bytes at a stop inside the written data (of the file ending at ``file_end``)
    cannot be sent."""
    stop = judge_stop(scanner.stop, file_end, written=True).stop
    return stop.detail or stop.reason.value


def _header_walk(region: memoryview, limit: int) -> IndexScanResult:
    """Where the record holding the end of ``region`` (a file's bytes from a record start)
    starts, by record sizes and magic alone, as a scan result: INCOMPLETE at that record, END
    at a boundary, BLANK in a blank tail, INVALID at a bad size or magic."""
    position = 0
    end = len(region)
    while position < end:
        if end - position < _PREFIX.size:
            return IndexScanResult(position, _INCOMPLETE_CODE, "", 0, 0, b"")
        total, magic = _PREFIX.unpack_from(region, position)
        if magic == BLANK_MAGIC:
            if BLANK_RECORD_SIZE <= total <= limit - position:
                return IndexScanResult(position, _BLANK_CODE, "", total, 0, b"")
            detail = f"blank record of bad size {total}"
            return IndexScanResult(position, _INVALID_CODE, detail, 0, 0, b"")
        if magic not in (MAGIC_V1, MAGIC_V2) or not MIN_RECORD_SIZE <= total <= limit - position:
            detail = f"total size {total}, magic 0x{magic:08X}"
            return IndexScanResult(position, _INVALID_CODE, detail, 0, 0, b"")
        if total > end - position:
            return IndexScanResult(position, _INCOMPLETE_CODE, "", 0, 0, b"")
        position += total
    return IndexScanResult(position, _END_CODE, "", 0, 0, b"")


class PushValidator:
    """Which bytes of ``store`` a master may push to one slave, from where (see the module
    docstring); ``name`` names the slave in the log.

    Attributes:
        valid_end: bytes before it (from the transfer's start on) are whole records that
            passed validation, or the blank tail of a file: they are not checked again.
    """

    def __init__(self, store: CommitLogStore, name: str) -> None:
        self.store = store
        self.name = name
        self.valid_end = -1
        self._max_record = store.config.max_message_size + _RECORD_OVERHEAD_MAX
        """The largest total size a record's size field is trusted with."""

    def check_boundary(self, offset: int, batch: int) -> str | None:
        """None when ``offset`` (within the data) is a place a transfer may start: the data
        end, a file start, the start of a valid record, inside a valid record (where a
        RocketMQ slave stopped mid-frame) or inside the blank tail of a file (where a slave
        may have stopped while the tail was being shipped). Otherwise why not.
        """
        store = self.store
        file_size = store.config.mapped_file_size
        if offset == store.max_offset or offset % file_size == 0:
            return None
        try:
            if self.validate(offset, batch):
                return None
            return "the record there is not complete"
        except CorruptRecordError as exc:  # inside a record (a RocketMQ slave cut mid-frame)?
            return self._walk_to(offset, exc.reason)

    def _walk_to(self, offset: int, reason: str) -> str | None:
        """None when ``offset`` is inside a valid record (or the blank tail of its file) a
        transfer may resume in, else why not.

        RocketMQ's master serves any offset its log holds, and a RocketMQ slave cut off while
        a frame was on its way (frames are cut every 32 KiB, not at records) asks for one inside
        a record. The record around ``offset`` is found by the store's record index (native
        when built; sizes, magic and PHYSICALOFFSET checked, no CRC) over the offset's file
        from its start up to ``offset``, once, at connect; views of the mapped file, no copies.
        That record is then validated whole (CRCs included) and shipped from ``offset`` on; a
        blank tail is shipped as it is (as :meth:`validate` does). Data that fails its checks
        before or around ``offset`` is a refusal naming it; ``reason``: why the bytes at
        ``offset`` are not a record (the refusal when ``offset`` is a record boundary after
        all).
        """
        store = self.store
        file_size = store.config.mapped_file_size
        file_start = max(offset - offset % file_size, store.min_offset)
        region = store.read_view(file_start, offset - file_start)
        if len(region) < offset - file_start:
            return "the data before it is not readable"
        file_end = offset - offset % file_size + file_size
        if NATIVE_SCANNER:  # GB/s; windows bound the rows held at once, the last one stops
            windows = scan_index_windows(
                region,
                0,
                len(region),
                file_start,
                file_end - file_start,
                check_crc=False,
                check_physical_offset=True,
            )
            (result,) = deque(windows, maxlen=1)
        else:  # sizes and magic only: a pure-Python scan of a large file would block for long
            result = _header_walk(region, file_end - file_start)
        del region
        verdict = judge_stop(result.stop(file_start), file_end, written=True)
        position = verdict.stop.offset
        if verdict.damaged:
            return f"damaged data at {position} before it: {verdict.stop.detail}"
        if verdict.kind is StopKind.NEXT_FILE:  # offset is inside the blank tail
            self.valid_end = file_end
            return None
        if result.reason is StopReason.END:
            return f"the record at {offset} is damaged: {reason}"
        header = store.read_view(position, _PREFIX.size)
        total, _ = _PREFIX.unpack_from(header, 0)
        if total > self._max_record:
            return f"the record at {position} has a total size {total} larger than any record"
        whole = store.read_view(position, total)
        if len(whole) < total:
            return f"the record at {position} is not complete"
        scanned = _scan(whole, position)
        if scanned.position != total:
            why = _stop_reason(scanned, file_end)
            return f"the record at {position} around it is damaged: {why}"
        self.valid_end = position + total
        log.info(
            "slave %s: offset %d is inside the valid record at %d (%d bytes): served from there",
            self.name,
            offset,
            position,
            total,
        )
        return None

    def validate(self, offset: int, batch: int) -> memoryview:
        """Validated bytes from ``offset`` (usually at most ``batch`` bytes, a whole record when
        one is larger): whole valid records, or a file's blank tail. Empty when nothing at
        ``offset`` can be sent yet (no data, or a record whose end is not written yet).

        Raises:
            CorruptRecordError: the record at the first byte not yet validated is invalid.
        """
        store = self.store
        file_size = store.config.mapped_file_size
        file_end = offset - offset % file_size + file_size
        damaged = store.damaged(offset, offset + batch)
        if damaged is not None:  # never served; the slave keeps what it has (it may repair it)
            if damaged.start <= offset:
                raise CorruptRecordError(
                    offset, f"the master's commit log range {damaged} is damaged (not served)"
                )
            batch = damaged.start - offset
        if offset < self.valid_end:
            return store.read_view(offset, min(batch, self.valid_end - offset))
        chunk = store.read_view(offset, batch)
        if not chunk:
            return _EMPTY
        scanner = _scan(chunk, offset)
        if scanner.position:  # whole valid records: send them, check what follows next time
            self.valid_end = offset + scanner.position
            return chunk[: scanner.position]
        # The first thing at offset is not a whole valid record within this chunk.
        if len(chunk) < _PREFIX.size:
            if offset + len(chunk) < file_end:
                return _EMPTY  # a partial header at the data end: wait for the rest
            raise CorruptRecordError(offset, "a partial record header at the end of the file")
        total, magic = _PREFIX.unpack_from(chunk, 0)
        if magic == BLANK_MAGIC:
            if total >= BLANK_RECORD_SIZE and offset + total == file_end:
                self.valid_end = file_end
                return chunk  # the blank tail, shipped as it is
            raise CorruptRecordError(offset, f"blank record of {total} bytes does not end the file")
        if (
            magic in (MAGIC_V1, MAGIC_V2)
            and len(chunk) < total <= file_end - offset
            and total >= MIN_RECORD_SIZE
        ):
            if total > self._max_record:
                raise CorruptRecordError(
                    offset, f"total size {total} is larger than any record ({self._max_record})"
                )
            whole = store.read_view(offset, total)  # larger than the chunk: check it whole
            if len(whole) < total:
                return _EMPTY  # its end is not written yet
            scanner = _scan(whole, offset)
            if scanner.position == total:
                self.valid_end = offset + total
                return whole
        raise CorruptRecordError(offset, _stop_reason(scanner, file_end))
