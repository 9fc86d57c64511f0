"""DLedger's on-disk entry and index entry formats: encode, decode, validate.

An entry of the data files (big-endian, 48-byte header then the body)::

    MAGIC i32 (1; -1 = blank) | SIZE i32 (48 + body length) | INDEX i64 | TERM i64 |
    POS i64 | CHANNEL i32 (0) | CHAIN_CRC i32 | BODY_CRC i32 | BODY_LENGTH i32 | BODY

``POS`` is the entry's byte position in the data files. We write ``BODY_CRC`` as
``zlib.crc32(body) & 0x7FFFFFFF`` and accept 0 (not computed) from other writers.

An index entry is 32 bytes at ``index * 32`` in the index files::

    MAGIC i32 | POS i64 | SIZE i32 | INDEX i64 | TERM i64

A data file ends with a *blank* (``MAGIC -1 | SIZE`` = the bytes left) when the next entry does
not fit. This module is pure and synchronous (no I/O, no trio).
"""

from __future__ import annotations

import struct
import zlib

import attrs

from ._errors import BodyCrcError, EntryFormatError, TruncatedEntryError

__all__ = [
    "BLANK_MAGIC",
    "ENTRY_HEADER_SIZE",
    "ENTRY_MAGIC",
    "INDEX_ENTRY_SIZE",
    "DLedgerEntry",
    "IndexEntry",
    "decode_entry",
    "decode_index_entry",
    "encode_blank",
    "encode_entry",
    "encode_index_entry",
    "entry_body_crc",
    "index_entry_offset",
    "pack_entry",
]

ENTRY_MAGIC = 1
"""Magic of a data entry."""
BLANK_MAGIC = -1
"""Magic of the blank that fills the end of a data file."""

_HEADER = struct.Struct(">iiqqqiiii")
_INDEX = struct.Struct(">iqiqq")
_BLANK = struct.Struct(">ii")
ENTRY_HEADER_SIZE = _HEADER.size
"""Bytes of an entry before its body: 48."""
INDEX_ENTRY_SIZE = _INDEX.size
"""Bytes of an index entry: 32."""

_I32_MAX = 2**31 - 1
_I64_MAX = 2**63 - 1
_MAX_BODY = _I32_MAX - ENTRY_HEADER_SIZE


def entry_body_crc(body: bytes | memoryview) -> int:
    """The BODY_CRC we write: ``zlib.crc32(body) & 0x7FFFFFFF``."""
    return zlib.crc32(body) & 0x7FFFFFFF


@attrs.frozen
class DLedgerEntry:
    """One entry of DLedger's data files.

    Attributes:
        index: the entry's log index (0-based in DLedger's files).
        term: the leader's term when the entry was appended.
        body: the payload (for the broker, one RocketMQ commit log record).
        pos: the entry's byte position in the data files.
        channel: DLedger's channel field (0).
        chain_crc: DLedger's chain CRC field (carried, not checked).
        body_crc: the stored body CRC; None means "compute it when encoding".
    """

    index: int
    term: int
    body: bytes
    pos: int = 0
    channel: int = 0
    chain_crc: int = 0
    body_crc: int | None = None

    @property
    def size(self) -> int:
        """The SIZE field: 48 + the body length."""
        return ENTRY_HEADER_SIZE + len(self.body)


@attrs.frozen
class IndexEntry:
    """One 32-byte index entry: where entry ``index`` lies in the data files."""

    pos: int
    size: int
    index: int
    term: int
    magic: int = ENTRY_MAGIC


def _check_range(offset: int, name: str, value: int, high: int) -> None:
    if not 0 <= value <= high:
        raise EntryFormatError(offset, f"{name} {value} outside 0..{high}")


def encode_entry(entry: DLedgerEntry) -> bytes:
    """The bytes of ``entry`` (header and body).

    Raises:
        EntryFormatError: a field does not fit its width or is negative.
    """
    at = entry.pos
    _check_range(at, "index", entry.index, _I64_MAX)
    _check_range(at, "term", entry.term, _I64_MAX)
    _check_range(at, "pos", entry.pos, _I64_MAX)
    _check_range(at, "body length", len(entry.body), _MAX_BODY)
    for name, value in (("channel", entry.channel), ("chain CRC", entry.chain_crc)):
        if not -(2**31) <= value <= _I32_MAX:
            raise EntryFormatError(at, f"{name} {value} does not fit an i32")
    crc = entry_body_crc(entry.body) if entry.body_crc is None else entry.body_crc
    _check_range(at, "body CRC", crc, _I32_MAX)
    header = _HEADER.pack(
        ENTRY_MAGIC,
        entry.size,
        entry.index,
        entry.term,
        entry.pos,
        entry.channel,
        entry.chain_crc,
        crc,
        len(entry.body),
    )
    return header + entry.body


def pack_entry(
    data: bytearray, index_data: bytearray, index: int, term: int, pos: int, body: bytes
) -> None:
    """Append to ``data`` the entry ``encode_entry(DLedgerEntry(index, term, body, pos=pos))``
    and to ``index_data`` its index entry: the same bytes, without building either object
    (a log's append of a batch).

    Raises:
        EntryFormatError: a field does not fit its width or is negative.
    """
    if (
        not (0 <= index <= _I64_MAX and 0 <= term <= _I64_MAX and 0 <= pos <= _I64_MAX)
        or len(body) > _MAX_BODY
    ):
        encode_entry(DLedgerEntry(index, term, body, pos=pos))  # raises, naming the field
        raise AssertionError("unreachable")  # pragma: no cover
    size = ENTRY_HEADER_SIZE + len(body)
    crc = zlib.crc32(body) & 0x7FFFFFFF
    data += _HEADER.pack(ENTRY_MAGIC, size, index, term, pos, 0, 0, crc, len(body))
    data += body
    index_data += _INDEX.pack(ENTRY_MAGIC, pos, size, index, term)


def decode_entry(
    buf: bytes | bytearray | memoryview, offset: int = 0, *, check_crc: bool = True
) -> DLedgerEntry:
    """Decode the entry that starts at ``offset`` of ``buf``.

    Args:
        buf: the bytes holding the entry.
        offset: where the entry starts.
        check_crc: verify a non-zero BODY_CRC (0 is accepted: other writers may not fill it).

    Raises:
        TruncatedEntryError: ``buf`` ends before the entry.
        EntryFormatError: a blank, a bad magic, inconsistent sizes, a negative field.
        BodyCrcError: the body CRC does not match.
    """
    available = len(buf) - offset
    if offset < 0 or available < _BLANK.size:
        raise TruncatedEntryError(offset, _BLANK.size, max(available, 0))
    magic, size = _BLANK.unpack_from(buf, offset)
    if magic == BLANK_MAGIC:
        raise EntryFormatError(offset, f"a blank of {size} bytes, not an entry")
    if magic != ENTRY_MAGIC:
        raise EntryFormatError(offset, f"magic {magic}, expected {ENTRY_MAGIC}")
    if size < ENTRY_HEADER_SIZE:
        raise EntryFormatError(offset, f"size {size} below the {ENTRY_HEADER_SIZE}-byte header")
    if available < size:
        raise TruncatedEntryError(offset, size, available)
    _, _, index, term, pos, channel, chain_crc, crc, body_len = _HEADER.unpack_from(buf, offset)
    if body_len != size - ENTRY_HEADER_SIZE:
        raise EntryFormatError(offset, f"body length {body_len} != size {size} - 48")
    for name, value in (("index", index), ("term", term), ("pos", pos), ("body CRC", crc)):
        if value < 0:
            raise EntryFormatError(offset, f"negative {name} {value}")
    start = offset + ENTRY_HEADER_SIZE
    body = bytes(buf[start : start + body_len])
    if check_crc and crc != 0:
        computed = entry_body_crc(body)
        if computed != crc:
            raise BodyCrcError(offset, crc, computed)
    return DLedgerEntry(
        index=index,
        term=term,
        body=body,
        pos=pos,
        channel=channel,
        chain_crc=chain_crc,
        body_crc=crc,
    )


def encode_blank(size: int) -> bytes:
    """The 8 bytes a blank of ``size`` bytes starts with (the rest of the file stays)."""
    if not _BLANK.size <= size <= _I32_MAX:
        raise EntryFormatError(0, f"blank size {size} outside {_BLANK.size}..{_I32_MAX}")
    return _BLANK.pack(BLANK_MAGIC, size)


def index_entry_offset(index: int) -> int:
    """Byte position of index entry ``index`` in the index files: ``index * 32``."""
    if index < 0:
        raise EntryFormatError(0, f"negative index {index}")
    return index * INDEX_ENTRY_SIZE


def encode_index_entry(entry: IndexEntry) -> bytes:
    """The 32 bytes of ``entry``.

    Raises:
        EntryFormatError: a field does not fit its width, is negative, or the magic is unknown.
    """
    at = entry.index * INDEX_ENTRY_SIZE if entry.index >= 0 else 0
    if entry.magic not in (ENTRY_MAGIC, BLANK_MAGIC):
        raise EntryFormatError(at, f"magic {entry.magic}, expected 1 or -1")
    _check_range(at, "pos", entry.pos, _I64_MAX)
    _check_range(at, "size", entry.size, _I32_MAX)
    _check_range(at, "index", entry.index, _I64_MAX)
    _check_range(at, "term", entry.term, _I64_MAX)
    return _INDEX.pack(entry.magic, entry.pos, entry.size, entry.index, entry.term)


def decode_index_entry(buf: bytes | bytearray | memoryview, offset: int = 0) -> IndexEntry:
    """Decode the index entry at ``offset`` of ``buf``.

    Raises:
        TruncatedEntryError: fewer than 32 bytes from ``offset``.
        EntryFormatError: unknown magic, negative fields, a size below the entry header.
    """
    available = len(buf) - offset
    if offset < 0 or available < INDEX_ENTRY_SIZE:
        raise TruncatedEntryError(offset, INDEX_ENTRY_SIZE, max(available, 0))
    magic, pos, size, index, term = _INDEX.unpack_from(buf, offset)
    if magic not in (ENTRY_MAGIC, BLANK_MAGIC):
        raise EntryFormatError(offset, f"index magic {magic}, expected 1 or -1")
    for name, value in (("pos", pos), ("index", index), ("term", term)):
        if value < 0:
            raise EntryFormatError(offset, f"negative {name} {value}")
    if magic == ENTRY_MAGIC and size < ENTRY_HEADER_SIZE:
        raise EntryFormatError(offset, f"size {size} below the {ENTRY_HEADER_SIZE}-byte header")
    return IndexEntry(pos=pos, size=size, index=index, term=term, magic=magic)
