"""A put's message as the RocketMQ commit log record its DLedger entry carries, without IO.

The leader stamps each record (store timestamp, store host = the leader's broker address) and
sets its ``PHYSICALOFFSET`` to where its entry's body will be in the log (the entry's
position + the 48-byte entry header), as DLedger's commit log does; the queue offset is left
0 (the commit log view stamps it when the entry is applied).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

from hanet.store import (
    Message,
    MessageRecord,
)
from hanet.store.lowlevel import (
    BORN_HOST_V6_FLAG,
    CRC32_PROPERTY,
    CRC32_RESERVED_LEN,
    MAGIC_V1,
    MAGIC_V2,
    MAX_TOPIC_SIZE_V1,
    STORE_HOST_V6_FLAG,
    body_crc,
    encode_properties,
    native_put_properties,
    native_write_record_unsealed,
    record_size,
    write_record_unsealed,
)

from ._entry import ENTRY_HEADER_SIZE

__all__ = ["put_record", "put_records"]

_HOST_FLAGS = BORN_HOST_V6_FLAG | STORE_HOST_V6_FLAG
_U16 = struct.Struct(">H")
_HEADERS: dict[tuple[int, int], struct.Struct] = {}

WriteRecord = Callable[..., None]
_NATIVE: tuple[WriteRecord, Callable[[dict[str, str]], bytes]] | None = (
    (native_write_record_unsealed, native_put_properties)
    if native_write_record_unsealed is not None
    and write_record_unsealed is native_write_record_unsealed  # HANET_NO_EXTENSIONS unset
    and native_put_properties is not None
    else None
)
"""The store extension's unsealed record writer and properties encoder (None: not built, or
``HANET_NO_EXTENSIONS``): the records of a batch laid out in C, one call a record."""


def _header(born_host: int, store_host: int) -> struct.Struct:
    """A record's fixed fields up to its body length, for hosts of these address lengths:
    size, magic, body CRC, queue id, flag, queue offset, physical offset, sys flag, born
    timestamp, born host and port, store timestamp, store host and port, reconsume times,
    prepared transaction offset, body length."""
    header = _HEADERS.get((born_host, store_host))
    if header is None:
        header = struct.Struct(f">iIiiiqqiq{born_host}siq{store_host}siiqi")
        _HEADERS[born_host, store_host] = header
    return header


def put_record(message: Message, store_host: tuple[bytes, int], now_ms: int) -> MessageRecord:
    """``message`` as a record stored at ``now_ms`` (ms since the epoch) by ``store_host``
    (packed address, port); its born timestamp is ``now_ms`` when the message has none."""
    host, port = store_host
    return MessageRecord.create(
        topic=message.topic,
        body=message.body,
        queue_id=message.queue_id,
        flag=message.flag,
        sys_flag=message.sys_flag,
        born_timestamp=message.born_timestamp or now_ms,
        born_host=message.born_host,
        born_port=message.born_port,
        store_timestamp=now_ms,
        store_host=host,
        store_port=port,
        reconsume_times=message.reconsume_times,
        prepared_transaction_offset=message.prepared_transaction_offset,
        properties=encode_properties(message.properties) if message.properties else b"",
    )


def put_records(
    messages: Sequence[Message],
    end: int,
    place: Callable[[int, int], int],
    store_host: tuple[bytes, int],
    clock: Callable[[], int],
) -> list[bytes]:
    """Each message encoded as a record whose ``PHYSICALOFFSET`` is where its entry's body
    will be when they are appended in this order to a log whose data ends at ``end``, stored
    at ``clock()`` (ms since the epoch, read for each message).

    ``place(body_length, end)`` is where the log puts an entry with a body of that length
    once its data ends at ``end`` (:meth:`FileLog.next_entry_pos`: a file's tail too short
    for the entry is skipped).

    The same bytes as ``encode_record`` of :func:`put_record` with that offset, packed
    directly (no record tuple built, copied and checked again for each message).

    Raises:
        ValueError: a host that is not 4 or 16 bytes.
        struct.error: a field does not fit its width.
    """
    host, port = store_host
    store_v6 = STORE_HOST_V6_FLAG if len(host) == 16 else 0
    if len(host) not in (4, 16):
        raise ValueError(f"a store host of {len(host)} bytes (4 or 16)")
    out = []
    native = _NATIVE
    for message in messages:
        now = clock()
        born_host = message.born_host
        sys_flag = (message.sys_flag & ~_HOST_FLAGS) | store_v6
        if len(born_host) == 16:
            sys_flag |= BORN_HOST_V6_FLAG
        elif len(born_host) != 4:
            raise ValueError(f"a born host of {len(born_host)} bytes (4 or 16)")
        properties = message.properties
        topic = message.topic.encode()
        body = message.body
        if native is not None and len(topic) <= MAX_TOPIC_SIZE_V1:
            # the extension's properties end with the whole-record CRC's reserved bytes (and
            # leave out a property of that name): cut off, used only where none is there
            if not properties:
                raw = b""
            elif CRC32_PROPERTY in properties or type(properties) is not dict:
                raw = encode_properties(properties)
            else:
                raw = native[1](properties)[:-CRC32_RESERVED_LEN]
            size = record_size(sys_flag, len(body), len(topic), len(raw))
            pos = place(size, end)
            buf = bytearray(size)
            native[0](
                buf,
                0,
                size,
                message.queue_id,
                message.flag,
                0,
                pos + ENTRY_HEADER_SIZE,
                sys_flag,
                message.born_timestamp or now,
                born_host,
                message.born_port,
                now,
                host,
                port,
                message.reconsume_times,
                message.prepared_transaction_offset,
                body,
                topic,
                raw,
            )
            out.append(bytes(buf))
            end = pos + ENTRY_HEADER_SIZE + size
            continue
        raw = encode_properties(properties) if properties else b""
        size = record_size(sys_flag, len(body), len(topic), len(raw))
        pos = place(size, end)
        v2 = len(topic) > MAX_TOPIC_SIZE_V1
        head = _header(len(born_host), len(host)).pack(
            size,
            MAGIC_V2 if v2 else MAGIC_V1,
            body_crc(body),
            message.queue_id,
            message.flag,
            0,
            pos + ENTRY_HEADER_SIZE,
            sys_flag,
            message.born_timestamp or now,
            born_host,
            message.born_port,
            now,
            host,
            port,
            message.reconsume_times,
            message.prepared_transaction_offset,
            len(body),
        )
        topic_length = _U16.pack(len(topic)) if v2 else bytes((len(topic),))
        record = b"".join((head, body, topic_length, topic, _U16.pack(len(raw)), raw))
        if len(record) != size:
            raise ValueError(f"a record of {len(record)} bytes, expected {size}")
        out.append(record)
        end = pos + ENTRY_HEADER_SIZE + size
    return out
