"""Decoding and validating commit log records: the fast scanner.

:class:`RecordScanner` walks a buffer (a memoryview of a mapped file) from a position and
yields :class:`MessageRecord` objects, stopping at the first thing that is not a complete
valid record and saying where and why (:class:`ScanStop`). The fixed header is read with one
compiled :class:`struct.Struct` (``unpack_from``, no per-field slicing) and the body CRC is
computed on a zero-copy memoryview. Pure and synchronous: the store's dispatcher and
recovery, the HA slave's validation, ``hanet verify`` and the Spark data source all use it.

Example::

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        scanner = scan_records(memoryview(mm), base_offset=int(path.name))
        for record in scanner:
            print(scanner.record_offset, record.topic, record.queue_offset)
        print(scanner.stop)  # ScanStop(offset=8084, reason=StopReason.BLANK, ...)
"""

from __future__ import annotations

import enum
import zlib
from collections.abc import Iterator

import attrs

from ._codec import (
    BLANK_MAGIC,
    BLANK_RECORD_SIZE,
    CRC32_PROPERTY,
    CRC32_RESERVED_LEN,
    HEADER_STRUCTS,
    HEADER_V4,
    HOST_FLAGS,
    I16_STRUCT,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    PREFIX_STRUCT,
    SYS_FLAG_KNOWN_BITS,
    MessageRecord,
)
from ._errors import CorruptRecordError

__all__ = [
    "RecordScanner",
    "ScanStop",
    "StopReason",
    "decode_record",
    "first_nonzero",
    "scan_records",
]

_ZEROS = bytes(1 << 20)
ZERO_TAIL = "properties end in a zero byte (a zeroed tail)"
"""The INVALID detail of a record whose properties end in a zero byte (the C scanner's too)."""


class StopReason(enum.Enum):
    """Why :class:`RecordScanner` stopped."""

    END = "end"
    """Scanning reached ``end`` exactly, on a record boundary."""
    BLANK = "blank"
    """An end-of-file blank record: the data goes on at the start of the next file."""
    UNWRITTEN = "unwritten"
    """A zero size and magic: the rest of the file was never written."""
    INCOMPLETE = "incomplete"
    """A record goes on past ``end`` (its rest has not been written or received yet)."""
    INVALID = "invalid"
    """A record failed validation: see :attr:`ScanStop.detail`."""


@attrs.frozen
class ScanStop:
    """Where and why a scan stopped.

    Attributes:
        offset: physical offset of the stop (``base_offset`` + position in the buffer).
        reason: a :class:`StopReason`.
        detail: human-readable detail (the validation failure for ``INVALID``).
        blank_size: the space-left field of a blank record (``BLANK`` only), else 0.
    """

    offset: int
    reason: StopReason
    detail: str = ""
    blank_size: int = 0

    def error(self) -> CorruptRecordError:
        """This stop as a :class:`CorruptRecordError` (for raising)."""
        return CorruptRecordError(self.offset, self.detail or self.reason.value)


class RecordScanner:
    """Iterates over the valid records of a buffer (a memoryview of a mapped file).

    Iterating yields :class:`MessageRecord` objects in order and stops at the first thing that
    is not a complete valid record; :attr:`stop` then says where and why, and
    :attr:`position` is the buffer position right after the last yielded record. The scanner
    never raises for bad data (a corrupt record is a stop with reason ``INVALID``), never reads
    past ``len(buf)`` and never copies the buffer (only each body, topic and properties).

    Validation, as RocketMQ's ``checkMessageAndReturnSize`` and recovery: the magic, TOTALSIZE
    against the fields it sums and against the room left in the buffer, every length, SYSFLAG
    bits (only those RocketMQ defines), a non-negative queue id and queue offset, UTF-8 of
    the topic, then the whole-record CRC property (``__CRC32#``) when the properties end with
    one: its form always, its CRC with ``check_crc`` (a match covers the body and BODYCRC:
    the body is not read twice); without one, with ``check_crc``, the body CRC.

    Args:
        buf: the bytes, typically ``memoryview(mmap)`` of a whole file.
        start: buffer position to start at (a record boundary).
        end: buffer position up to which data was written (default ``len(buf)``). A record
            that fits in ``buf`` but not before ``end`` is ``INCOMPLETE``; one that does not fit
            in ``buf`` at all is ``INVALID``.
        base_offset: physical offset of ``buf[0]`` (the file's start offset), used for
            :attr:`ScanStop.offset` and :attr:`record_offset`.
        check_crc: verify body CRCs (the default).
        check_physical_offset: also require each record's PHYSICALOFFSET field to equal its
            own offset (``base_offset`` + position): what a store checks, off by default so
            that a lone record can be decoded from any buffer.
        limit: buffer position where the file ends (default ``len(buf)``): a record or blank
            record going past it is ``INVALID``, one going past ``end`` but not past it is
            ``INCOMPLETE``. Lets a buffer holding only the start of a file's remaining room
            (replicated bytes not yet copied into the file) be validated as that file.
    """

    __slots__ = (
        "_buf",
        "_end",
        "_limit",
        "base_offset",
        "check_crc",
        "check_physical_offset",
        "position",
        "record_offset",
        "stop",
    )

    def __init__(
        self,
        buf: bytes | bytearray | memoryview,
        start: int = 0,
        end: int | None = None,
        *,
        base_offset: int = 0,
        check_crc: bool = True,
        check_physical_offset: bool = False,
        limit: int | None = None,
    ) -> None:
        view = memoryview(buf)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        self._buf = view
        self._end = len(view) if end is None else min(end, len(view))
        self._limit = len(view) if limit is None else limit
        self.base_offset = base_offset
        self.check_crc = check_crc
        self.check_physical_offset = check_physical_offset
        self.position = start
        """Buffer position after the last record yielded (the next record's start)."""
        self.record_offset = base_offset + start
        """Physical offset of the record last yielded."""
        self.stop: ScanStop | None = None
        """Set when iteration ends."""

    def __iter__(self) -> Iterator[MessageRecord]:
        return self._scan()

    def _stop(self, pos: int, reason: StopReason, detail: str = "", blank: int = 0) -> None:
        self.position = pos
        self.stop = ScanStop(self.base_offset + pos, reason, detail, blank)

    def _scan(self) -> Iterator[MessageRecord]:
        buf = self._buf
        end = self._end
        limit = self._limit
        pos = self.position
        check_crc = self.check_crc
        check_offset = self.check_physical_offset
        base = self.base_offset
        prefix_unpack = PREFIX_STRUCT.unpack_from
        header_v4_unpack = HEADER_V4.unpack_from
        v4_size = HEADER_V4.size
        crc32 = zlib.crc32
        unknown_bits = ~SYS_FLAG_KNOWN_BITS
        crc32_head = _CRC32_HEAD
        reserved = CRC32_RESERVED_LEN
        new_tuple = tuple.__new__
        record = MessageRecord
        while True:
            if end - pos >= v4_size:
                h = header_v4_unpack(buf, pos)
                total = h[0]
                magic = h[1]
            elif end - pos < 8:
                if pos >= end:
                    self._stop(pos, StopReason.END)
                else:
                    self._stop(pos, StopReason.INCOMPLETE, "a partial record header")
                return
            else:
                total, magic = prefix_unpack(buf, pos)
                h = None
            if magic in (MAGIC_V1, MAGIC_V2):
                pass
            elif magic == BLANK_MAGIC:
                if total < BLANK_RECORD_SIZE or total > limit - pos:
                    self._stop(pos, StopReason.INVALID, f"blank record of bad size {total}")
                else:
                    self._stop(pos, StopReason.BLANK, blank=total)
                return
            elif magic == 0 and total == 0:
                self._stop(pos, StopReason.UNWRITTEN)
                return
            else:
                self._stop(pos, StopReason.INVALID, f"unknown magic code 0x{magic:08X}")
                return
            if total < MIN_RECORD_SIZE:
                self._stop(pos, StopReason.INVALID, f"total size {total} is too small")
                return
            if total > limit - pos:
                self._stop(
                    pos, StopReason.INVALID, f"total size {total} goes beyond the end of the file"
                )
                return
            if total > end - pos:
                self._stop(pos, StopReason.INCOMPLETE, f"a record of {total} bytes is partial")
                return
            rec_end = pos + total
            if h is None:
                h = header_v4_unpack(buf, pos)
            sys_flag = h[7]
            if sys_flag & unknown_bits:
                self._stop(
                    pos,
                    StopReason.INVALID,
                    f"sys flag 0x{sys_flag & 0xFFFFFFFF:X} has bits no RocketMQ version defines",
                )
                return
            hsize = v4_size
            if sys_flag & HOST_FLAGS:
                layout = HEADER_STRUCTS[(sys_flag & HOST_FLAGS) >> 4]
                hsize = layout.size
                if hsize + 3 > total:
                    self._stop(pos, StopReason.INVALID, f"total size {total} is too small")
                    return
                h = layout.unpack_from(buf, pos)
            if check_offset and h[6] != base + pos:
                self._stop(
                    pos,
                    StopReason.INVALID,
                    f"physical offset field {h[6]} does not match the record's offset",
                )
                return
            if h[3] < 0:
                self._stop(pos, StopReason.INVALID, f"queue id {h[3]} is negative")
                return
            if h[5] < 0:
                self._stop(pos, StopReason.INVALID, f"queue offset {h[5]} is negative")
                return
            body_len = h[16]
            p = pos + hsize
            if body_len < 0 or body_len > rec_end - p - 3:
                self._stop(pos, StopReason.INVALID, f"body length {body_len} does not fit")
                return
            body_view = buf[p : p + body_len]
            p += body_len
            if magic == MAGIC_V1:
                topic_len = buf[p]
                p += 1
            else:
                (topic_len,) = I16_STRUCT.unpack_from(buf, p)
                p += 2
            if topic_len < 0 or p + topic_len + 2 > rec_end:
                self._stop(pos, StopReason.INVALID, f"topic length {topic_len} does not fit")
                return
            try:
                topic = str(buf[p : p + topic_len], "utf-8")
            except UnicodeDecodeError:
                self._stop(pos, StopReason.INVALID, "topic is not UTF-8")
                return
            p += topic_len
            (props_len,) = I16_STRUCT.unpack_from(buf, p)
            p += 2
            if props_len < 0 or p + props_len != rec_end:
                self._stop(
                    pos,
                    StopReason.INVALID,
                    f"total size {total} does not match its fields (properties length {props_len})",
                )
                return
            if props_len and buf[rec_end - 1] == 0:
                # Properties never end in a zero byte (a writer ends them with a value or a
                # separator): a tail zeroed by a lost write that took the whole-record CRC
                # property with it would otherwise read as an unsealed record whose body CRC
                # still matches.
                self._stop(pos, StopReason.INVALID, ZERO_TAIL)
                return
            # The CRCs last. A matching whole-record CRC covers the body and BODYCRC too: the
            # body is not read twice (a mismatch says which CRC fails).
            problem = None
            t = rec_end - reserved  # where a whole-record CRC property starts
            if props_len >= reserved and (buf[t] == 95 or buf[t + 1] == 95 or buf[t + 2] == 67):
                tail = bytes(buf[t:rec_end])  # "_", "_" or "C": it may claim to be one
                if (
                    tail[:9] == crc32_head
                    and tail[19] == 2
                    and tail[9:19].isdigit()
                    and (props_len == reserved or buf[t - 1] == 2)
                ):
                    if check_crc and crc32(buf[pos:t]) & 0x7FFFFFFF != int(tail[18:8:-1]):
                        problem = "whole-record CRC mismatch"
                    sealed = True
                else:
                    sealed = _crc32_claimed(tail)
                    if sealed:
                        problem = "whole-record CRC property is malformed"
            else:
                sealed = False
            if problem is not None:
                if check_crc and (crc32(body_view) & 0x7FFFFFFF) != h[2]:
                    problem = "body CRC mismatch"
                self._stop(pos, StopReason.INVALID, problem)
                return
            if not sealed and check_crc and (crc32(body_view) & 0x7FFFFFFF) != h[2]:
                self._stop(pos, StopReason.INVALID, "body CRC mismatch")
                return
            self.record_offset = base + pos
            self.position = rec_end
            yield new_tuple(
                record,
                (
                    total,
                    magic,
                    h[2],
                    h[3],
                    h[4],
                    h[5],
                    h[6],
                    sys_flag,
                    h[8],
                    h[9],
                    h[10],
                    h[11],
                    h[12],
                    h[13],
                    h[14],
                    h[15],
                    bytes(body_view),
                    topic,
                    bytes(buf[p:rec_end]),
                ),
            )
            pos = rec_end


_CRC32_NAME = CRC32_PROPERTY.encode()
_CRC32_HEAD = _CRC32_NAME + b"\x01"


def _crc32_claimed(tail: bytes) -> bool:
    """Whether the last 20 bytes of a record's properties claim to be the whole-record CRC
    property: a name at most 2 bytes off ``__CRC32#`` (a flipped bit in the name does not
    turn the check off)."""
    return sum(1 for a, b in zip(tail[:8], _CRC32_NAME, strict=True) if a == b) >= 6


def scan_records(
    buf: bytes | bytearray | memoryview,
    start: int = 0,
    end: int | None = None,
    *,
    base_offset: int = 0,
    check_crc: bool = True,
    check_physical_offset: bool = False,
) -> RecordScanner:
    """Scan the records of ``buf`` from ``start``; see :class:`RecordScanner`.

    Example::

        scanner = scan_records(memoryview(mm), base_offset=file_start)
        for record in scanner:
            print(scanner.record_offset, record.topic, record.queue_offset)
        print(scanner.stop)  # ScanStop(offset=..., reason=StopReason.BLANK, ...)
    """
    return RecordScanner(
        buf,
        start,
        end,
        base_offset=base_offset,
        check_crc=check_crc,
        check_physical_offset=check_physical_offset,
    )


def first_nonzero(buf: bytes | bytearray | memoryview, start: int = 0) -> int | None:
    """The position of the first non-zero byte of ``buf`` at or after ``start``, or None.

    What tells a zeroed hole (data follows it) from the unwritten tail of a file. Reads in
    1 MiB chunks copied out and compared as ``bytes`` (a memcpy and a memcmp: several GB/s;
    comparing the memoryviews themselves goes item by item, 5-10 times slower).
    """
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    chunk = len(_ZEROS)
    for i in range(start, len(view), chunk):
        data = view[i : i + chunk].tobytes()
        if data != _ZEROS[: len(data)]:
            return i + len(data) - len(data.lstrip(b"\0"))
    return None


def decode_record(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    base_offset: int = 0,
    check_crc: bool = True,
) -> MessageRecord:
    """Decode and validate the one record at ``buf[pos:]``.

    Raises:
        CorruptRecordError: there is no complete valid record at ``pos`` (a blank record, a
            bad magic, a bad length, a CRC mismatch, ...); its ``offset`` is
            ``base_offset + pos``.
    """
    scanner = RecordScanner(buf, pos, base_offset=base_offset, check_crc=check_crc)
    for record in scanner:
        return record
    stop = scanner.stop
    assert stop is not None
    if stop.reason is StopReason.BLANK:
        raise CorruptRecordError(stop.offset, "end-of-file blank record, not a message")
    raise stop.error()
