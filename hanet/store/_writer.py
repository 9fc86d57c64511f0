"""Turning messages into commit log records: RocketMQ's append-message callback.

:class:`RecordWriter` validates each message (statuses as RocketMQ's), assigns its queue
offset, physical offset and store timestamp, writes the record straight into the last mapped
file with :func:`write_record_py` (the extension's ``write_record`` when built: one call a
record, its CRCs by carry-less multiplication) and seals it with RocketMQ 5's whole-record CRC
property (``__CRC32#``, computed last, over every other byte of the record), ends a file with a
blank record when the record does not fit with 8 spare bytes, and appends the consume queue
entry (before the record: a consume queue file that cannot be created refuses the message,
CREATE_MAPPED_FILE_FAILED, as a commit log file that cannot be created does). It is the put
hot path: one loop per batch, everything looked up once per batch, no intermediate bytes
objects but the properties.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._codec import (
    _TOPIC_CHARACTERS,
    BLANK_RECORD_SIZE,
    BORN_HOST_V6_FLAG,
    CRC32_PROPERTY,
    CRC32_RESERVED_LEN,
    CRC32_TRAILER_EMPTY,
    HEADER_STRUCTS,
    MAGIC_V1,
    MAX_PROPERTIES_SIZE,
    MAX_TOPIC_SIZE_V1,
    STORE_HOST_V6_FLAG,
    encode_properties,
    java_string_hash,
    offset_msg_id,
    pack_blank_into,
    pack_record_into,
    seal_record,
    topic_problem,
)
from ._config import Message, PutResult, PutStatus, StoreConfig
from ._consume_queue import ConsumeQueue
from ._errors import CreateMappedFileError
from ._mapped_file import MappedFile
from ._mapped_queue import MappedFileQueue
from ._native import ENABLED, native

__all__ = [
    "RecordWriter",
    "native_append_entries",
    "native_pack_entries",
    "native_put_properties",
    "native_record_place",
    "native_view_records",
    "native_write_record",
    "native_write_record_unsealed",
    "put_properties_py",
    "write_record_py",
    "write_record_unsealed",
    "write_record_unsealed_py",
]


def put_properties_py(properties: Mapping[str, str]) -> bytes:
    """A put's properties field: :func:`encode_properties` of ``properties`` without any
    whole-record CRC property (about another record), then that property's reserved bytes
    (the reference of the extension's ``put_properties``)."""
    if not properties:
        return CRC32_TRAILER_EMPTY
    if CRC32_PROPERTY in properties:
        properties = {k: v for k, v in properties.items() if k != CRC32_PROPERTY}
    return encode_properties(properties) + CRC32_TRAILER_EMPTY


def write_record_py(
    view: memoryview,
    pos: int,
    size: int,
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
    body: bytes,
    topic: bytes,
    properties: bytes,
) -> None:
    """Write the V1 record of these fields at ``view[pos:pos + size]`` and seal it with the
    whole-record CRC property (``properties`` end with its reserved bytes): the reference of
    the extension's ``write_record``, which checks the same things first (a number out of
    its field's range is ``struct.error``, a size or host length that does not match is
    ValueError). The bytes are laid out by :func:`~._codec.pack_record_into`."""
    _check_hosts_and_topic(sys_flag, born_host, store_host, topic)  # the extension's order
    if not CRC32_RESERVED_LEN <= len(properties) <= 32767:
        raise ValueError("write_record: the properties are not 20 to 32767 bytes")
    write_record_unsealed_py(
        view,
        pos,
        size,
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
        body,
        topic,
        properties,
    )
    seal_record(view, pos, size)


def write_record_unsealed_py(
    view: memoryview,
    pos: int,
    size: int,
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
    body: bytes,
    topic: bytes,
    properties: bytes,
) -> None:
    """:func:`write_record_py` of any ``properties`` (at most 32767 bytes), not sealed (a
    DLedger leader's records, as RocketMQ's, carry no whole-record CRC property): the
    reference of the extension's ``write_record_unsealed``."""
    _check_hosts_and_topic(sys_flag, born_host, store_host, topic)
    if len(properties) > 32767:
        raise ValueError("write_record: the properties are over 32767 bytes")
    _write_record(
        view,
        pos,
        size,
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
        body,
        topic,
        properties,
    )


def _check_hosts_and_topic(
    sys_flag: int, born_host: bytes, store_host: bytes, topic: bytes
) -> None:
    if len(born_host) != (16 if sys_flag & BORN_HOST_V6_FLAG else 4) or len(store_host) != (
        16 if sys_flag & STORE_HOST_V6_FLAG else 4
    ):
        raise ValueError("write_record: a host's length does not match sys_flag")
    if not 1 <= len(topic) <= MAX_TOPIC_SIZE_V1:
        raise ValueError("write_record: the topic is not 1 to 127 bytes")


def _write_record(
    view: memoryview,
    pos: int,
    size: int,
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
    body: bytes,
    topic: bytes,
    properties: bytes,
) -> None:
    """The checks the two writers share (a size that is not the record's, a record outside
    the buffer: ValueError), then the record laid out."""
    header = HEADER_STRUCTS[(sys_flag & _HOST_FLAGS) >> 4]
    if size != header.size + len(body) + 1 + len(topic) + 2 + len(properties):
        raise ValueError("write_record: size is not the record's size")
    if pos < 0 or pos > len(view) - size:
        raise ValueError("write_record: the record is not inside the buffer")
    pack_record_into(
        view,
        pos,
        size=size,
        magic=MAGIC_V1,
        crc=zlib.crc32(body) & 0x7FFFFFFF,
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
        properties_raw=properties,
    )


# The record in one call (header, body CRC, copies, seal): the put path's loop does the rest.
native_write_record: Callable[..., None] | None = native("write_record")
"""The extension's ``write_record`` (None when not built), whatever ``HANET_NO_EXTENSIONS``."""
native_write_record_unsealed: Callable[..., None] | None = native("write_record_unsealed")
"""The extension's ``write_record_unsealed`` (None when not built)."""
native_record_place: Callable[[bytes], tuple[int, str, int, int, bytes, int]] | None = native(
    "record_place"
)
"""The extension's ``record_place`` (None when not built): the fields that place a DLedger
entry's record in the commit log view (the reference: ``hanet.dledger``'s ``record_place``)."""
native_append_entries: Callable[..., tuple[tuple[Any, ...], int] | None] | None = native(
    "append_entries"
)
"""The extension's ``append_entries`` (None when not built): a DLedger APPEND frame's entries,
checked (the reference: ``hanet.dledger``'s ``append_entries_py``)."""
native_pack_entries: Callable[..., tuple[bytes, bytes, bytes, bytes, bytes] | None] | None = native(
    "pack_entries"
)
"""The extension's ``pack_entries`` (None when not built): a DLedger log's batch of entries
packed (the reference: ``hanet.dledger``'s ``FileLog.append`` loop)."""
native_view_records: Callable[..., tuple[bytearray, int, list[Any] | None] | None] | None = native(
    "view_records"
)
"""The extension's ``view_records`` (None when not built): a DLedger view's committed records
placed (the reference: ``hanet.dledger``'s ``view_records_py``)."""
native_put_properties: Callable[[dict[str, str]], bytes] | None = native("put_properties")
"""The extension's ``put_properties`` (None when not built)."""
_WRITE_RECORD: Callable[..., None] = (native_write_record if ENABLED else None) or write_record_py
write_record_unsealed: Callable[..., None] = (
    native_write_record_unsealed if ENABLED else None
) or write_record_unsealed_py
"""``write_record_unsealed``: the extension's when built and enabled, else the reference."""
_PUT_PROPERTIES: Callable[[dict[str, str]], bytes] = (
    native_put_properties if ENABLED else None
) or put_properties_py

_HOST_FLAGS = BORN_HOST_V6_FLAG | STORE_HOST_V6_FLAG
_HEADER_SIZES = tuple(h.size for h in HEADER_STRUCTS)
_MAX_TOPICS = 10_000  # topics remembered as checked (bounded)
_MAX_TAGS = 10_000  # tags whose code is remembered (bounded)
_PUT_OK = PutStatus.PUT_OK


class RecordWriter:
    """Writes messages as records at the end of a commit log.

    Args:
        commit_log: the commit log files.
        config: the store's settings (file size, max message size, store host).
        queue_for: returns (creating if needed) the consume queue of a (topic, queue id).
    """

    def __init__(
        self,
        commit_log: MappedFileQueue,
        config: StoreConfig,
        store_host: bytes,
        store_port: int,
        queue_for: Callable[[str, int], ConsumeQueue],
    ) -> None:
        self._commit_log = commit_log
        self._file_size = config.mapped_file_size
        self._max_body = config.max_message_size
        self._store_host = store_host
        self._store_port = store_port
        self._host_flag = STORE_HOST_V6_FLAG if len(store_host) == 16 else 0
        self._msg_id_prefix = offset_msg_id(store_host, store_port, 0)[:-16]
        self._queue_for = queue_for
        self.puts = 0
        self.put_bytes = 0
        self._topics: dict[str, bytes] = {}
        """The UTF-8 of topics that passed the checks (a name never becomes illegal)."""
        self._tag_codes: dict[str, int] = {}
        """The consume queue's tag code of tags seen (Java's hash: a few tags, many sends)."""
        self.create_error: str | None = None
        """Why the last batch could not create a file it needed (set by :meth:`write`; the
        store reads and clears it)."""

    def _check(self, message: Message) -> PutResult | None:
        # RocketMQ's limit (127), not the record format's (32767): a consume queue is a
        # directory named after its topic.
        problem = topic_problem(message.topic)
        if problem is not None:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, detail=f"bad topic: {problem}")
        if message.queue_id < 0:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, detail=f"bad queue id {message.queue_id}")
        if len(message.body) > self._max_body:
            return PutResult(
                PutStatus.MESSAGE_ILLEGAL,
                detail=f"body of {len(message.body)} bytes is over the maximum {self._max_body}",
            )
        if len(message.born_host) not in (4, 16):
            return PutResult(PutStatus.MESSAGE_ILLEGAL, detail="born host is not 4 or 16 bytes")
        return None

    def write(self, messages: Iterable[Message], now: int, *, dispatch: bool) -> list[PutResult]:
        """Write ``messages`` with store timestamp ``now``; one :class:`PutResult` each.

        With ``dispatch`` the consume queue entries are appended as the records are written
        (the store's dispatcher was caught up); otherwise the caller dispatches afterwards.
        A refused message writes nothing. Raises nothing for bad messages.
        """
        results: list[PutResult] = []
        append = results.append
        commit_log = self._commit_log
        mapped: MappedFile | None = None
        view = memoryview(b"")
        wrote = 0
        space = 0
        start = 0
        store_host = self._store_host
        store_port = self._store_port
        host_flag = self._host_flag
        prefix = self._msg_id_prefix
        file_size = self._file_size
        queue_for = self._queue_for
        header_sizes = _HEADER_SIZES
        new_result = tuple.__new__
        put_bytes = 0
        puts = 0
        pending: dict[tuple[str, int], int] = {}
        write_record = _WRITE_RECORD
        put_properties = _PUT_PROPERTIES
        create_failed: PutResult | None = None
        topics = self._topics
        tag_codes = self._tag_codes
        max_body = self._max_body
        try:
            for message in messages:
                topic = message.topic
                body = message.body
                topic_bytes = topics.get(topic)
                topic_ok = topic_bytes is not None
                if topic_bytes is None:
                    topic_bytes = topic.encode()
                    topic_ok = (
                        0 < len(topic_bytes) <= MAX_TOPIC_SIZE_V1
                        and _TOPIC_CHARACTERS.fullmatch(topic) is not None
                    )
                    if topic_ok and len(topics) < _MAX_TOPICS:
                        topics[topic] = topic_bytes
                properties = message.properties
                props = (
                    put_properties(properties)
                    if type(properties) is dict
                    else put_properties_py(properties)
                )
                born_host = message.born_host
                if (
                    not topic_ok
                    or len(body) > max_body
                    or message.queue_id < 0
                    or len(born_host) != 4
                ):
                    refused = self._check(message)
                    if refused is not None:
                        append(refused)
                        continue
                if len(props) > MAX_PROPERTIES_SIZE:
                    append(
                        PutResult(
                            PutStatus.PROPERTIES_SIZE_EXCEEDED,
                            detail=f"properties of {len(props)} bytes are over "
                            f"{MAX_PROPERTIES_SIZE}",
                        )
                    )
                    continue
                sys_flag = (message.sys_flag & ~_HOST_FLAGS) | host_flag
                if len(born_host) == 16:
                    sys_flag |= BORN_HOST_V6_FLAG
                sys_flag_index = (sys_flag & _HOST_FLAGS) >> 4
                topic_len = len(topic_bytes)
                # + 3: the topic length byte (V1: put topics are at most 127 bytes) and the
                # properties length
                size = header_sizes[sys_flag_index] + len(body) + topic_len + len(props) + 3
                if size + BLANK_RECORD_SIZE > space:
                    if size + BLANK_RECORD_SIZE > file_size:
                        append(
                            PutResult(
                                PutStatus.MESSAGE_ILLEGAL,
                                detail=f"a record of {size} bytes does not fit a file of "
                                f"{file_size}",
                            )
                        )
                        continue
                    if mapped is not None:
                        mapped.wrote = wrote
                    if create_failed is not None:  # not again in this batch
                        append(create_failed)
                        continue
                    try:
                        mapped = commit_log.last_file_for_write()
                        if size + BLANK_RECORD_SIZE > mapped.size - mapped.wrote:
                            pack_blank_into(mapped.view, mapped.wrote, mapped.size - mapped.wrote)
                            mapped.wrote = mapped.size
                            mapped = commit_log.last_file_for_write()
                    except OSError as exc:  # CreateMappedFileError: disk full, ...
                        mapped = None
                        space = 0
                        create_failed = PutResult(
                            PutStatus.CREATE_MAPPED_FILE_FAILED, detail=f"commit log: {exc}"
                        )
                        self.create_error = create_failed.detail
                        append(create_failed)
                        continue
                    view = mapped.view
                    wrote = mapped.wrote
                    start = mapped.start_offset
                    space = mapped.size - wrote
                queue = queue_for(topic, message.queue_id)
                if dispatch:
                    queue_offset = queue.max_queue_offset
                else:  # the dispatcher lags: it will append the entries, count them here
                    key = (topic, message.queue_id)
                    queue_offset = pending.get(key, queue.max_queue_offset)
                    pending[key] = queue_offset + 1
                physical_offset = start + wrote
                if dispatch:
                    # The entry first: a consume queue file that cannot be created (disk full)
                    # refuses this message before its record is written.
                    tags = properties.get("TAGS") if properties else None
                    tag_code = 0
                    if tags:
                        known = tag_codes.get(tags)
                        if known is None:
                            known = java_string_hash(tags)
                            if len(tag_codes) < _MAX_TAGS:
                                tag_codes[tags] = known
                        tag_code = known
                    try:
                        queue.append(queue_offset, physical_offset, size, tag_code)
                    except CreateMappedFileError as exc:
                        detail = f"consume queue {topic}/{message.queue_id}: {exc}"
                        self.create_error = detail
                        append(PutResult(PutStatus.CREATE_MAPPED_FILE_FAILED, detail=detail))
                        continue
                write_record(
                    view,
                    wrote,
                    size,
                    message.queue_id,
                    message.flag,
                    queue_offset,
                    physical_offset,
                    sys_flag,
                    message.born_timestamp or now,
                    born_host,
                    message.born_port,
                    now,
                    store_host,
                    store_port,
                    message.reconsume_times,
                    message.prepared_transaction_offset,
                    body,
                    topic_bytes,
                    props,
                )
                wrote += size
                space -= size
                put_bytes += size
                puts += 1
                append(
                    new_result(
                        PutResult,
                        (
                            _PUT_OK,
                            physical_offset,
                            size,
                            queue_offset,
                            f"{prefix}{physical_offset:016X}",
                            now,
                            "",
                        ),
                    )
                )
        finally:
            if mapped is not None:
                mapped.wrote = wrote
            self.put_bytes += put_bytes
            self.puts += puts
        return results
