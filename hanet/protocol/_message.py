"""Messages on the broker port: properties, message ids and batch bodies (RocketMQ's
``MessageConst``, ``MessageDecoder`` and ``MessageClientIDSetter``), sans-IO.

- Properties travel as one string, ``name \\x01 value \\x02`` per entry; RocketMQ 4.9.8
  leaves out the last ``\\x02`` (:func:`properties_to_string`), readers accept it either way
  (:func:`string_to_properties`). :class:`MessageProperty` names the properties RocketMQ
  gives a meaning to.
- The offset message id (a send's ``msgId``, VIEW_MESSAGE_BY_ID's key): the store host's
  address, its port (``i32``) and the record's commit log offset (``i64``) in upper-case hex,
  32 characters for IPv4 (:class:`MessageId`).
- The unique key (``UNIQ_KEY``, what clients show as the message id): 16 bytes in upper-case
  hex made by the producer (:class:`UniqueIdGenerator`).
- A SEND_BATCH_MESSAGE body: the messages one after another in ``MessageDecoder
  .encodeMessages``' layout (:func:`decode_batch`, :func:`encode_batch`)::

      i32 total size | i32 magic (0) | i32 body CRC (0) | i32 flag | i32 body length | body
      | i16 properties length | properties
"""

from __future__ import annotations

import enum
import ipaddress
import itertools
import os
import random
import struct
import time
from collections.abc import Callable, Iterable, Mapping

import attrs

from ._remoting import NATIVE_HEADERS, RemotingHeaderError, native_header_codec

__all__ = [
    "BatchMessage",
    "MessageId",
    "MessageProperty",
    "UniqueIdGenerator",
    "decode_batch",
    "encode_batch",
    "properties_to_string",
    "string_to_properties",
    "string_to_properties_py",
]

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


class MessageProperty(enum.StrEnum):
    """The message properties RocketMQ 4.9.8 gives a meaning to (``MessageConst``), by their
    names on the wire."""

    KEYS = "KEYS"
    """Space-separated keys (indexed for QUERY_MESSAGE)."""
    TAGS = "TAGS"
    """The tag (its hash goes into the consume queue entry)."""
    WAIT = "WAIT"
    """``true``: answer the send only when the message is stored (durably as the role says)."""
    DELAY = "DELAY"
    """The delay level (1..18) before the message is delivered."""
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    """The topic a delayed or transactional message is to be delivered to."""
    REAL_QID = "REAL_QID"
    """Its queue id there."""
    TRAN_MSG = "TRAN_MSG"
    PGROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    BUYER_ID = "BUYER_ID"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    """The offset message id of the message a retry copies."""
    TRANSFER_FLAG = "TRANSFER_FLAG"
    CORRECTION_FLAG = "CORRECTION_FLAG"
    MQ2_FLAG = "MQ2_FLAG"
    RECONSUME_TIME = "RECONSUME_TIME"
    MSG_REGION = "MSG_REGION"
    TRACE_ON = "TRACE_ON"
    UNIQ_KEY = "UNIQ_KEY"
    """The producer's unique id of the message."""
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIME = "CONSUME_START_TIME"
    TRAN_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    INSTANCE_ID = "INSTANCE_ID"
    CORRELATION_ID = "CORRELATION_ID"
    REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
    TTL = "TTL"
    ARRIVE_TIME = "ARRIVE_TIME"
    PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
    CLUSTER = "CLUSTER"
    """The cluster of the broker that stored the message (the broker adds it)."""
    MSG_TYPE = "MSG_TYPE"
    INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
    INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"


def properties_to_string(properties: Mapping[str, str]) -> str:
    """Properties as RocketMQ 4.9.8 writes them: ``name\\x01value`` joined by ``\\x02``, in
    the mapping's order (no ``\\x02`` after the last one)."""
    return PROPERTY_SEPARATOR.join(
        f"{name}{NAME_VALUE_SEPARATOR}{value}" for name, value in properties.items()
    )


def string_to_properties_py(text: str | None) -> dict[str, str]:
    """The properties in ``text``, in order (a trailing ``\\x02`` or none; a piece without
    ``\\x01`` or with an empty name is skipped, as RocketMQ does): the reference of the
    extension's, which :func:`string_to_properties` is when built."""
    out: dict[str, str] = {}
    if not text:
        return out
    for item in text.split(PROPERTY_SEPARATOR):
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and name:
            out[name] = value
    return out


native_string_to_properties: Callable[[str | None], dict[str, str]] | None = getattr(
    native_header_codec, "string_to_properties", None
)
"""The extension's ``string_to_properties`` (None when not built), whatever
``HANET_NO_EXTENSIONS`` says."""
string_to_properties: Callable[[str | None], dict[str, str]] = (
    native_string_to_properties if NATIVE_HEADERS and native_string_to_properties else None
) or string_to_properties_py
"""The properties in ``text``, in order (see :func:`string_to_properties_py`)."""


_ID_V4 = struct.Struct(">4siq")
_ID_V6 = struct.Struct(">16siq")


@attrs.frozen
class MessageId:
    """An offset message id: where a record is (store host, port, commit log offset)."""

    host: bytes
    """The packed store address (4 or 16 bytes)."""
    port: int
    offset: int

    def __str__(self) -> str:
        layout = _ID_V6 if len(self.host) == 16 else _ID_V4
        return layout.pack(self.host, self.port, self.offset).hex().upper()

    @property
    def address(self) -> str:
        """``host:port`` of the store (``[v6]:port`` for IPv6)."""
        ip = ipaddress.ip_address(self.host)
        return f"[{ip}]:{self.port}" if ip.version == 6 else f"{ip}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> MessageId:
        """The id in ``text`` (32 hex characters for IPv4, 56 for IPv6).

        Raises:
            ValueError: not an offset message id.
        """
        layout = {32: _ID_V4, 56: _ID_V6}.get(len(text))
        if layout is None:
            raise ValueError(f"message id {text[:64]!r} is not 32 or 56 hex characters")
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            raise ValueError(f"message id {text!r} is not hexadecimal") from None
        host, port, offset = layout.unpack(raw)
        return cls(host, port, offset)


class UniqueIdGenerator:
    """Producer-side unique keys (``UNIQ_KEY``) as RocketMQ's ``MessageClientIDSetter``:
    a fixed prefix (the client's IPv4 address, its process id, a random number) then the
    milliseconds since the start of the month and a counter, 16 bytes in upper-case hex.

    Args:
        address: the client's IPv4 address (packed; default 127.0.0.1).
    """

    def __init__(self, address: bytes = b"\x7f\x00\x00\x01") -> None:
        if len(address) != 4:
            address = b"\x7f\x00\x00\x01"
        pid = os.getpid() & 0xFFFF
        self._prefix = (address + struct.pack(">H", pid)).hex().upper()
        self._prefix += struct.pack(">i", random.getrandbits(31)).hex().upper()
        self._counter = itertools.count()
        self._month_start = 0.0
        self._next_month = 0.0

    def _reset_month(self, now: float) -> None:
        t = time.gmtime(now)
        start = time.struct_time((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, 0))
        self._month_start = time.mktime(start) - time.timezone
        year, month = (t.tm_year, t.tm_mon + 1) if t.tm_mon < 12 else (t.tm_year + 1, 1)
        following = time.struct_time((year, month, 1, 0, 0, 0, 0, 0, 0))
        self._next_month = time.mktime(following) - time.timezone

    def __call__(self) -> str:
        """A new unique key."""
        now = time.time()
        if now >= self._next_month:
            self._reset_month(now)
        millis = int((now - self._month_start) * 1000) & 0x7FFFFFFF
        count = next(self._counter) & 0xFFFF
        return self._prefix + struct.pack(">iH", millis, count).hex().upper()


@attrs.frozen
class BatchMessage:
    """One message of a SEND_BATCH_MESSAGE body (the topic is the request's)."""

    body: bytes
    properties: Mapping[str, str] = attrs.field(factory=dict)
    flag: int = 0


_BATCH_HEAD = struct.Struct(">iiiii")  # total size, magic, body CRC, flag, body length
_I16 = struct.Struct(">h")


def decode_batch(body: bytes | bytearray | memoryview) -> list[BatchMessage]:
    """The messages of a SEND_BATCH_MESSAGE body, in order.

    Raises:
        RemotingHeaderError: a size that does not add up (naming the message's index and
            position); properties that are not UTF-8.
    """
    view = memoryview(body).cast("B")
    end = len(view)
    out: list[BatchMessage] = []
    pos = 0
    while pos < end:
        index = len(out)
        if end - pos < _BATCH_HEAD.size + 2:
            raise RemotingHeaderError(
                f"batch message {index} at byte {pos}: {end - pos} bytes left, too short"
            )
        total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(view, pos)
        if total < _BATCH_HEAD.size + 2 or total > end - pos:
            raise RemotingHeaderError(
                f"batch message {index} at byte {pos}: size {total} does not fit the "
                f"{end - pos} bytes left"
            )
        start = pos + _BATCH_HEAD.size
        if body_len < 0 or body_len > total - _BATCH_HEAD.size - 2:
            raise RemotingHeaderError(
                f"batch message {index} at byte {pos}: body length {body_len} is over its "
                f"size {total}"
            )
        payload = bytes(view[start : start + body_len])
        (props_len,) = _I16.unpack_from(view, start + body_len)
        props_start = start + body_len + 2
        if props_len < 0 or props_start + props_len != pos + total:
            raise RemotingHeaderError(
                f"batch message {index} at byte {pos}: properties length {props_len} does "
                f"not end it at its size {total}"
            )
        try:
            text = str(view[props_start : props_start + props_len], "utf-8")
        except UnicodeDecodeError:
            raise RemotingHeaderError(f"batch message {index}: properties are not UTF-8") from None
        out.append(BatchMessage(payload, string_to_properties(text), flag))
        pos += total
    return out


def encode_batch(messages: Iterable[BatchMessage]) -> bytes:
    """A SEND_BATCH_MESSAGE body for ``messages``.

    Raises:
        ValueError: a message's properties are longer than 32767 bytes.
    """
    out = bytearray()
    for m in messages:
        props = properties_to_string(m.properties).encode()
        if len(props) > 0x7FFF:
            raise ValueError(f"properties of {len(props)} bytes are over 32767")
        total = _BATCH_HEAD.size + len(m.body) + 2 + len(props)
        out += _BATCH_HEAD.pack(total, 0, 0, m.flag, len(m.body))
        out += m.body
        out += _I16.pack(len(props))
        out += props
    return bytes(out)
