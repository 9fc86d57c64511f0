"""Re-stamping a committed entry's record for the commit log view, without decoding it.

An entry's body is one RocketMQ commit log record, checked when it entered the log (the
leader encoded it; a follower decoded it whole, body CRC included, at the wire; at a start
the entry CRC covers it) and checked again by the store when the view appends it
(:meth:`~hanet.store.CommitLogStore.append_raw`). Applying it only needs what places it (its
topic, queue id, store timestamp and store host) and two fields rewritten at fixed places
(``QUEUEOFFSET``, ``PHYSICALOFFSET``; ``BODYCRC`` does not cover them): read at their offsets
here instead of decoding and encoding the whole record (3-4x less Python per entry).

Layout (RocketMQ 4.9.8 ``CommitLog``): TOTALSIZE i32 | MAGIC i32 | BODYCRC i32 | QUEUEID i32
| FLAG i32 | QUEUEOFFSET i64 | PHYSICALOFFSET i64 | SYSFLAG i32 | BORNTIMESTAMP i64 | BORNHOST
(4 or 16 + port i32) | STORETIMESTAMP i64 | STOREHOST (4 or 16 + port i32) | RECONSUMETIMES
i32 | PREPAREDTRANSACTIONOFFSET i64 | BODYLEN i32 + body | TOPICLEN (u8; u16 with magic v2)
+ topic | PROPERTIESLENGTH i16 + properties.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

from hanet.store.lowlevel import (
    BORN_HOST_V6_FLAG,
    MAGIC_V1,
    MAGIC_V2,
    STORE_HOST_V6_FLAG,
    native_record_place,
    write_record_unsealed,
)
from hanet.store.lowlevel import native_write_record_unsealed as _native_writer

__all__ = ["OFFSETS", "OFFSETS_AT", "RecordPlace", "record_fields", "record_place", "stamp_into"]

_HEAD = struct.Struct(">iIiii")  # size, magic, body crc, queue id, flag
_SYS_FLAG = struct.Struct(">i")
_OFFSETS = OFFSETS = struct.Struct(">qq")  # queue offset, physical offset at 20
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_H = struct.Struct(">H")
_OFFSETS_AT = OFFSETS_AT = 20
"""Where :data:`OFFSETS` (queue offset, physical offset) is in a record: the view's applying
loop packs them there itself (:func:`stamp_into`, inlined)."""
_SYS_FLAG_AT = 36
_BORN_HOST_AT = 48


class RecordPlace(NamedTuple):
    """What applying a record needs of it."""

    size: int
    topic: str
    queue_id: int
    store_timestamp: int
    store_host: bytes
    store_port: int


def record_place(record: bytes | bytearray) -> RecordPlace:
    """Read the fields that place ``record`` (see the module docstring): the reference of the
    store extension's ``record_place`` (which returns the same fields as a plain tuple).

    Raises:
        ValueError: it is not one record of consistent lengths (a bad magic, a length
            running past its end, a size that is not its length).
    """
    try:
        size, magic, _, queue_id, _ = _HEAD.unpack_from(record, 0)
        (sys_flag,) = _SYS_FLAG.unpack_from(record, _SYS_FLAG_AT)
        if magic not in (MAGIC_V1, MAGIC_V2):
            raise ValueError(f"magic 0x{magic:08X} is not a record's")
        if size != len(record):
            raise ValueError(f"a record of size {size} in {len(record)} bytes")
        at = _BORN_HOST_AT + (20 if sys_flag & BORN_HOST_V6_FLAG else 8)
        (store_timestamp,) = _Q.unpack_from(record, at)
        at += 8
        host_length = 16 if sys_flag & STORE_HOST_V6_FLAG else 4
        store_host = bytes(record[at : at + host_length])
        (store_port,) = _I.unpack_from(record, at + host_length)
        at += host_length + 4 + 4 + 8  # store host, reconsume times, prepared offset
        (body_length,) = _I.unpack_from(record, at)
        if body_length < 0:
            raise ValueError(f"a body of {body_length} bytes")
        at += 4 + body_length
        if magic == MAGIC_V2:
            (topic_length,) = _H.unpack_from(record, at)
            at += 2
        else:
            topic_length = record[at]
            at += 1
        if at + topic_length > size:
            raise ValueError("its topic runs past its end")
        topic = bytes(record[at : at + topic_length]).decode("utf-8")
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"not a record: {exc}") from None
    return RecordPlace(size, topic, queue_id, store_timestamp, store_host, store_port)


def stamp_into(buf: bytearray, at: int, physical_offset: int, queue_offset: int) -> None:
    """Set the queue and physical offsets of the record at ``buf[at:]``."""
    _OFFSETS.pack_into(buf, at + _OFFSETS_AT, queue_offset, physical_offset)


record_fields: Callable[[bytes], tuple[int, str, int, int, bytes, int]] = (
    native_record_place
    if native_record_place is not None
    and write_record_unsealed is _native_writer  # the extension in use (HANET_NO_EXTENSIONS)
    else record_place
)
""":func:`record_place` as a plain tuple (the applying loop unpacks it): the store
extension's ``record_place`` when it is in use, else :func:`record_place` itself (the same
fields in the same order; ValueError for what it refuses)."""
