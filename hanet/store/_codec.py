"""The RocketMQ commit log record format: encode, decode, validate.

A record (PROTOCOL.md §2) is a fixed header of 88 bytes with IPv4 hosts (+12 per IPv6 host),
then the body, the topic and the properties::

    TOTALSIZE i32 | MAGICCODE i32 | BODYCRC i32 | QUEUEID i32 | FLAG i32 | QUEUEOFFSET i64 |
    PHYSICALOFFSET i64 | SYSFLAG i32 | BORNTIMESTAMP i64 | BORNHOST 4/16 + port i32 |
    STORETIMESTAMP i64 | STOREHOST 4/16 + port i32 | RECONSUMETIMES i32 |
    PREPAREDTRANSACTIONOFFSET i64 | BODY i32 + bytes | TOPIC i8 (V1) or i16 (V2) + bytes |
    PROPERTIES i16 + bytes

The header is read with one compiled :class:`struct.Struct` per host layout (``unpack_from`` on
the caller's buffer, no per-field slicing), the body CRC is computed on a zero-copy memoryview.
Records hanet writes end their properties with RocketMQ 5's whole-record CRC property
(``__CRC32#``, ``enabledAppendPropCRC``): ``__CRC32#\x01`` and the 10 decimal digits (least
significant first) of ``zlib.crc32`` (& 0x7FFFFFFF) of every byte of the record before those
20 bytes, then ``\x02``. It covers every field (offsets, store host, topic, properties), not
only the body; to RocketMQ 4.9.8 it is an ordinary property.
A file ends with a *blank record* (``i32 space left, i32 CB D4 31 94``) when the next record
does not fit with 8 spare bytes.

This module is pure and synchronous (no I/O, no trio). Decoding and validation live in
``_scanner.py`` (:func:`scan_records`, :func:`decode_record`).
"""

from __future__ import annotations

import functools
import ipaddress
import re
import struct
import zlib
from collections.abc import Mapping
from typing import NamedTuple

from ._index_keys import java_hash

__all__ = [
    "BLANK_MAGIC",
    "BLANK_RECORD_SIZE",
    "BORN_HOST_V6_FLAG",
    "CRC32_PROPERTY",
    "CRC32_RESERVED_LEN",
    "MAGIC_V1",
    "MAGIC_V2",
    "MAX_PROPERTIES_SIZE",
    "MAX_TOPIC_LENGTH",
    "MAX_TOPIC_SIZE",
    "MAX_TOPIC_SIZE_V1",
    "MIN_RECORD_SIZE",
    "STORE_HOST_V6_FLAG",
    "SYS_FLAG_KNOWN_BITS",
    "MessageRecord",
    "body_crc",
    "crc32_trailer",
    "decode_properties",
    "encode_blank",
    "encode_properties",
    "encode_record",
    "format_host",
    "java_string_hash",
    "offset_msg_id",
    "pack_blank_into",
    "pack_record_into",
    "parse_host",
    "property_problem",
    "record_crc",
    "record_size",
    "seal_record",
    "strip_crc32_property",
    "topic_problem",
    "with_crc32_reserved",
]

MAGIC_V1 = 0xDAA320A7
"""Magic code of a V1 record (topic length is an ``i8``)."""
MAGIC_V2 = 0xDAA320AB
"""Magic code of a V2 record (topic length is an ``i16``)."""
BLANK_MAGIC = 0xCBD43194
"""Magic code of the end-of-file blank record."""
BLANK_RECORD_SIZE = 8
"""Bytes a blank record writes (its size field and its magic); the rest of the file stays."""
BORN_HOST_V6_FLAG = 0x10
"""SYSFLAG bit: the born host is an IPv6 address (16 bytes)."""
STORE_HOST_V6_FLAG = 0x20
"""SYSFLAG bit: the store host is an IPv6 address (16 bytes)."""
SYS_FLAG_KNOWN_BITS = 0x7FF
"""Every SYSFLAG bit RocketMQ (4.9.8 and 5.x) defines: compressed, multi tags, transaction
type (2 bits), born / store host IPv6, need unwrap, inner batch, compression type (3 bits).
A record with any other bit set is damaged."""
CRC32_PROPERTY = "__CRC32#"
"""Name of RocketMQ 5's whole-record CRC property (``MessageConst.PROPERTY_CRC32``)."""
CRC32_RESERVED_LEN = 20
"""Bytes the whole-record CRC property takes at the end of the properties
(``CommitLog.CRC32_RESERVED_LEN``): ``__CRC32#``, ``\x01``, 10 digits, ``\x02``."""
MAX_PROPERTIES_SIZE = 32767
"""Largest properties field (its length is an ``i16``)."""
MAX_TOPIC_SIZE_V1 = 127
"""Longest topic (UTF-8 bytes) a V1 record holds; longer topics use V2."""
MAX_TOPIC_SIZE = 32767
"""Longest topic (UTF-8 bytes) a V2 record holds."""
MAX_TOPIC_LENGTH = 127
"""Longest topic a producer may put to (RocketMQ's ``TopicValidator.TOPIC_MAX_LENGTH``).

The broker and the client refuse longer topics; the record format itself holds up to
:data:`MAX_TOPIC_SIZE` bytes (records replayed from elsewhere)."""

_NAME_VALUE_SEPARATOR = "\x01"
_PROPERTY_SEPARATOR = "\x02"
_TOPIC_CHARACTERS = re.compile(r"[%|a-zA-Z0-9_-]+")
_SHOWN = 40  # characters of a refused value quoted in a reason


def _shown(text: str) -> str:
    """``text`` quoted for a reason, cut to a few characters (a reason stays short)."""
    if len(text) <= _SHOWN:
        return repr(text)
    return f"{text[:_SHOWN]!r}... ({len(text)} characters)"


def topic_problem(topic: str, *, characters: bool = True) -> str | None:
    """Why a producer may not put to ``topic``, or None when it may.

    RocketMQ's ``TopicValidator``: 1 to :data:`MAX_TOPIC_LENGTH` characters of
    ``[%|a-zA-Z0-9_-]`` (``characters=False``: only the length). The reason is short whatever
    the topic's length.
    """
    if not topic:
        return "the topic is empty"
    if len(topic) > MAX_TOPIC_LENGTH:
        return f"the topic is {len(topic)} characters long, over {MAX_TOPIC_LENGTH}"
    if characters and _TOPIC_CHARACTERS.fullmatch(topic) is None:
        return f"the topic {_shown(topic)} has characters outside [%|a-zA-Z0-9_-]"
    return None


def property_problem(name: str, value: str) -> str | None:
    """Why the property ``name=value`` cannot be stored as it is, or None when it can.

    A name must not be empty, and neither a name nor a value may hold the separators
    ``\\x01`` / ``\\x02`` of the properties field (they would forge properties of their own:
    ``UNIQ_KEY``, ``DELAY``, ...). TAGS and KEYS are properties too.
    """
    if not name:
        return f"a property name is empty (value {_shown(value)})"
    for text, what in ((name, "name"), (value, "value")):
        if _NAME_VALUE_SEPARATOR in text or _PROPERTY_SEPARATOR in text:
            return f"property {_shown(name)}: its {what} holds \\x01 or \\x02"
    return None


# Shared with _scanner and _writer (not part of the public facade).
# One struct per (born host, store host) layout; the index is (sys_flag & 0x30) >> 4.
_HEADER_FORMAT = ">iIiiiqqiq{born}siq{store}siiqi"
HEADER_STRUCTS = tuple(
    struct.Struct(_HEADER_FORMAT.format(born=born, store=store))
    for born, store in ((4, 4), (16, 4), (4, 16), (16, 16))
)
HEADER_V4 = HEADER_STRUCTS[0]
PREFIX_STRUCT = struct.Struct(">iI")  # TOTALSIZE, MAGICCODE
I16_STRUCT = struct.Struct(">h")
_MSG_ID_V4 = struct.Struct(">4siq")
_MSG_ID_V6 = struct.Struct(">16siq")
HOST_FLAGS = BORN_HOST_V6_FLAG | STORE_HOST_V6_FLAG

MIN_RECORD_SIZE = HEADER_V4.size + 1 + 2
"""Size of the smallest V1 record (IPv4 hosts, empty body, topic and properties): 91."""


def body_crc(body: bytes | memoryview) -> int:
    """The BODYCRC field of a record: ``zlib.crc32(body) & 0x7FFFFFFF`` (0 for an empty body)."""
    return zlib.crc32(body) & 0x7FFFFFFF


def record_size(
    sys_flag: int, body_len: int, topic_len: int, properties_len: int, *, v2: bool | None = None
) -> int:
    """Total size of a record with these field lengths.

    ``v2`` says whether the record is V2 (2-byte topic length); by default it is when
    ``topic_len`` > 127, as RocketMQ chooses.
    """
    size = HEADER_STRUCTS[(sys_flag & HOST_FLAGS) >> 4].size + body_len + topic_len + properties_len
    if v2 is None:
        v2 = topic_len > MAX_TOPIC_SIZE_V1
    return size + (2 if v2 else 1) + 2


CRC32_NAME = CRC32_PROPERTY.encode()
CRC32_TRAILER_EMPTY = CRC32_NAME + b"\x01" + b"0" * 10 + b"\x02"


def crc32_trailer(crc: int) -> bytes:
    """The 20 bytes of the whole-record CRC property for ``crc`` (RocketMQ 5's
    ``MessageDecoder.createCrc32``): its 10 decimal digits least significant first."""
    return CRC32_NAME + b"\x01" + f"{crc:010d}"[::-1].encode() + b"\x02"


def record_crc(record: bytes | bytearray | memoryview) -> int:
    """The whole-record CRC of a sealed record: ``zlib.crc32`` (& 0x7FFFFFFF) of every byte
    but the last :data:`CRC32_RESERVED_LEN` (RocketMQ 5 with ``enabledAppendPropCRC``)."""
    return zlib.crc32(memoryview(record)[: len(record) - CRC32_RESERVED_LEN]) & 0x7FFFFFFF


def seal_record(buf: bytearray | memoryview, pos: int, size: int) -> None:
    """Fill the whole-record CRC property ending the record at ``buf[pos:pos + size]`` (its
    properties end with :data:`CRC32_RESERVED_LEN` reserved bytes), once every other field,
    offsets and store timestamp included, is final."""
    end = pos + size
    crc = zlib.crc32(buf[pos : end - CRC32_RESERVED_LEN]) & 0x7FFFFFFF
    buf[end - CRC32_RESERVED_LEN : end] = crc32_trailer(crc)


@functools.lru_cache(maxsize=4096)
def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` of ``text``: a signed 32-bit int over its UTF-16 code units.

    Used for the tag hash of consume queue entries (``"TagA"`` -> 2598919). The index's
    :func:`~._index_keys.java_hash` (native when built) signed.
    """
    value = java_hash(text)[0]
    return value - 0x100000000 if value & 0x80000000 else value


def encode_properties(properties: Mapping[str, str]) -> bytes:
    """Encode properties as RocketMQ does: ``name \\x01 value \\x02`` for each, in order."""
    return "".join(
        f"{name}{_NAME_VALUE_SEPARATOR}{value}{_PROPERTY_SEPARATOR}"
        for name, value in properties.items()
    ).encode()


def decode_properties(raw: bytes | memoryview) -> dict[str, str]:
    """Parse a properties field into a dict (raw order kept; items without ``\\x01`` skipped).

    Invalid UTF-8 is replaced (U+FFFD), never an error: the raw bytes stay the reference.
    """
    result: dict[str, str] = {}
    for item in bytes(raw).decode("utf-8", "replace").split(_PROPERTY_SEPARATOR):
        name, sep, value = item.partition(_NAME_VALUE_SEPARATOR)
        if sep:
            result[name] = value
    return result


def format_host(address: bytes, port: int) -> str:
    """``"192.168.1.20:10911"`` or ``"[::1]:10911"`` from a packed address and a port."""
    if len(address) == 16:
        return f"[{ipaddress.IPv6Address(address)}]:{port}"
    return f"{ipaddress.IPv4Address(address)}:{port}"


def parse_host(text: str) -> tuple[bytes, int]:
    """Parse ``"host:port"`` (``"[v6]:port"`` for IPv6) into a packed address and a port.

    Raises:
        ValueError: ``text`` is not an IP address and port.
    """
    host, sep, port = text.rpartition(":")
    if not sep:
        raise ValueError(f"not host:port: {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return ipaddress.ip_address(host).packed, int(port)


def offset_msg_id(store_host: bytes, store_port: int, physical_offset: int) -> str:
    """RocketMQ's offset message id: store host, port and physical offset in upper hex."""
    layout = _MSG_ID_V6 if len(store_host) == 16 else _MSG_ID_V4
    return layout.pack(store_host, store_port, physical_offset).hex().upper()


class MessageRecord(NamedTuple):
    """One decoded commit log record; fields in the order of the format.

    A :class:`typing.NamedTuple` rather than an attrs class on purpose: scanning builds one per
    record and a frozen attrs ``__init__`` of 19 fields costs 1.7 µs, a tuple 0.1 µs
    (measured; it was 45 % of the scan time). It is immutable all the same.

    ``properties_raw`` is kept exactly as stored (its order is a Java HashMap's), so
    :func:`encode_record` gives back the same bytes; :attr:`properties` parses it.
    ``born_host`` / ``store_host`` are packed addresses (4 or 16 bytes, as SYSFLAG says).
    Build a new record with :meth:`create`, which computes the CRC, magic, size and host flags.
    """

    size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    born_port: int
    store_timestamp: int
    store_host: bytes
    store_port: int
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties_raw: bytes

    @classmethod
    def create(
        cls,
        *,
        topic: str,
        body: bytes,
        queue_id: int = 0,
        flag: int = 0,
        queue_offset: int = 0,
        physical_offset: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: bytes = b"\x7f\x00\x00\x01",
        born_port: int = 0,
        store_timestamp: int = 0,
        store_host: bytes = b"\x7f\x00\x00\x01",
        store_port: int = 10911,
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
        properties: Mapping[str, str] | bytes = b"",
        crc32: bool = False,
    ) -> MessageRecord:
        """A record with its size, magic (V2 for topics over 127 bytes), CRC and host flags set.

        ``crc32``: end the properties with the whole-record CRC property's reserved bytes
        (as hanet's store writes them); ``encode_record(record, seal=True)`` fills it.
        """
        raw = properties if isinstance(properties, bytes) else encode_properties(properties)
        if crc32:
            raw = with_crc32_reserved(raw)
        sys_flag &= ~HOST_FLAGS
        if len(born_host) == 16:
            sys_flag |= BORN_HOST_V6_FLAG
        if len(store_host) == 16:
            sys_flag |= STORE_HOST_V6_FLAG
        topic_len = len(topic.encode())
        return cls(
            size=record_size(sys_flag, len(body), topic_len, len(raw)),
            magic=MAGIC_V2 if topic_len > MAX_TOPIC_SIZE_V1 else MAGIC_V1,
            body_crc=body_crc(body),
            queue_id=queue_id,
            flag=flag,
            queue_offset=queue_offset,
            physical_offset=physical_offset,
            sys_flag=sys_flag,
            born_timestamp=born_timestamp,
            born_host=born_host,
            born_port=born_port,
            store_timestamp=store_timestamp,
            store_host=store_host,
            store_port=store_port,
            reconsume_times=reconsume_times,
            prepared_transaction_offset=prepared_transaction_offset,
            body=body,
            topic=topic,
            properties_raw=raw,
        )

    @property
    def properties(self) -> dict[str, str]:
        """The properties parsed into a new dict (in stored order), without the whole-record
        CRC property (``__CRC32#``: about these bytes, not the message; the raw keeps it)."""
        properties = decode_properties(self.properties_raw)
        properties.pop(CRC32_PROPERTY, None)
        return properties

    @property
    def tags(self) -> str | None:
        """The ``TAGS`` property, or None."""
        return self.properties.get("TAGS")

    @property
    def tags_hash(self) -> int:
        """The consume queue tag hash: Java ``hashCode`` of TAGS, 0 without tags."""
        tags = self.tags
        return java_string_hash(tags) if tags else 0

    @property
    def msg_id(self) -> str:
        """The offset message id (store host, port, physical offset)."""
        return offset_msg_id(self.store_host, self.store_port, self.physical_offset)

    @property
    def crc_ok(self) -> bool:
        """Whether BODYCRC matches the body."""
        return body_crc(self.body) == self.body_crc

    @property
    def born_address(self) -> str:
        """The born host as ``"ip:port"``."""
        return format_host(self.born_host, self.born_port)

    @property
    def store_address(self) -> str:
        """The store host as ``"ip:port"``."""
        return format_host(self.store_host, self.store_port)


def pack_record_into(
    buf: bytearray | memoryview,
    pos: int,
    *,
    size: int,
    magic: int,
    crc: int,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    born_port: int,
    store_timestamp: int,
    store_host: bytes,
    store_port: int,
    reconsume_times: int,
    prepared_transaction_offset: int,
    body: bytes | memoryview,
    topic: bytes,
    properties_raw: bytes,
) -> None:
    """Write one record at ``buf[pos:pos + size]`` (the store's put path; no validation).

    ``sys_flag``'s host bits must match the host lengths and ``size`` must equal
    :func:`record_size`; ``topic`` is UTF-8 bytes.
    """
    header = HEADER_STRUCTS[(sys_flag & HOST_FLAGS) >> 4]
    header.pack_into(
        buf,
        pos,
        size,
        magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        born_host,
        born_port,
        store_timestamp,
        store_host,
        store_port,
        reconsume_times,
        prepared_transaction_offset,
        len(body),
    )
    p = pos + header.size
    end = p + len(body)
    buf[p:end] = body
    if magic == MAGIC_V2:
        I16_STRUCT.pack_into(buf, end, len(topic))
        p = end + 2
    else:
        buf[end] = len(topic)
        p = end + 1
    end = p + len(topic)
    buf[p:end] = topic
    I16_STRUCT.pack_into(buf, end, len(properties_raw))
    buf[end + 2 : end + 2 + len(properties_raw)] = properties_raw


def with_crc32_reserved(raw: bytes) -> bytes:
    """Properties ``raw`` ending with the whole-record CRC property's reserved bytes (any
    CRC property already in them dropped; a ``\x02`` added before it when missing)."""
    raw = strip_crc32_property(raw)
    if raw and not raw.endswith(b"\x02"):
        raw += b"\x02"
    return raw + CRC32_TRAILER_EMPTY


def strip_crc32_property(raw: bytes) -> bytes:
    """Properties ``raw`` without a whole-record CRC property (RocketMQ drops it from a
    message before storing it again: its value is about another record)."""
    if CRC32_NAME not in raw:
        return raw
    items = raw.split(b"\x02")
    kept = [item for item in items if not item.startswith(CRC32_NAME + b"\x01")]
    return b"\x02".join(kept)


def encode_record(record: MessageRecord, *, seal: bool = False) -> bytes:
    """Encode a record to its exact bytes (``record.size`` of them).

    ``seal``: fill the whole-record CRC property that ends its properties
    (:meth:`MessageRecord.create` with ``crc32=True``) from the other bytes.

    Raises:
        ValueError: the record's size, host flags or lengths are inconsistent.
    """
    topic = record.topic.encode()
    expected = record_size(
        record.sys_flag,
        len(record.body),
        len(topic),
        len(record.properties_raw),
        v2=record.magic == MAGIC_V2,
    )
    if record.size != expected:
        raise ValueError(f"record size {record.size} does not match its fields ({expected})")
    if record.magic not in (MAGIC_V1, MAGIC_V2) or (
        record.magic == MAGIC_V1 and len(topic) > MAX_TOPIC_SIZE_V1
    ):
        raise ValueError(f"bad magic 0x{record.magic:08X} for a topic of {len(topic)} bytes")
    if len(record.born_host) != (16 if record.sys_flag & BORN_HOST_V6_FLAG else 4) or len(
        record.store_host
    ) != (16 if record.sys_flag & STORE_HOST_V6_FLAG else 4):
        raise ValueError("host address lengths do not match SYSFLAG")
    buf = bytearray(record.size)
    pack_record_into(
        buf,
        0,
        size=record.size,
        magic=record.magic,
        crc=record.body_crc,
        queue_id=record.queue_id,
        flag=record.flag,
        queue_offset=record.queue_offset,
        physical_offset=record.physical_offset,
        sys_flag=record.sys_flag,
        born_timestamp=record.born_timestamp,
        born_host=record.born_host,
        born_port=record.born_port,
        store_timestamp=record.store_timestamp,
        store_host=record.store_host,
        store_port=record.store_port,
        reconsume_times=record.reconsume_times,
        prepared_transaction_offset=record.prepared_transaction_offset,
        body=record.body,
        topic=topic,
        properties_raw=record.properties_raw,
    )
    if seal:
        if not record.properties_raw.endswith(CRC32_TRAILER_EMPTY[-1:]) or (
            record.properties_raw[-CRC32_RESERVED_LEN:][:9] != CRC32_NAME + b"\x01"
        ):
            raise ValueError("the properties do not end with a whole-record CRC property")
        seal_record(buf, 0, record.size)
    return bytes(buf)


def pack_blank_into(buf: bytearray | memoryview, pos: int, space_left: int) -> None:
    """Write the end-of-file blank record (``space_left``, magic) at ``buf[pos:pos + 8]``."""
    PREFIX_STRUCT.pack_into(buf, pos, space_left, BLANK_MAGIC)


def encode_blank(space_left: int) -> bytes:
    """The 8 bytes of a blank record that fills ``space_left`` bytes of a file."""
    return PREFIX_STRUCT.pack(space_left, BLANK_MAGIC)
