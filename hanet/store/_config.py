"""Configuration, messages, put results and statistics of the commit log store."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, NamedTuple

import attrs

__all__ = [
    "BROKER_INDEX_FLUSH_INTERVAL",
    "DEFAULT_CONSUME_QUEUE_FILE_SIZE",
    "DEFAULT_DISK_MAX_USED_SPACE_RATIO",
    "DEFAULT_MAPPED_FILE_SIZE",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "FlushDiskType",
    "Message",
    "PutResult",
    "PutStatus",
    "StoreConfig",
    "StoreRole",
    "StoreStatistics",
]

DEFAULT_MAPPED_FILE_SIZE = 1024 * 1024 * 1024
"""RocketMQ's commit log file size (1 GiB)."""
DEFAULT_CONSUME_QUEUE_FILE_SIZE = 300_000 * 20
"""RocketMQ's consume queue file size (300,000 entries)."""
DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024
"""RocketMQ's largest message body (4 MiB)."""
DEFAULT_DISK_MAX_USED_SPACE_RATIO = 75
"""RocketMQ's ``diskMaxUsedSpaceRatio``: puts are refused past this percentage of the disk used."""
BROKER_INDEX_FLUSH_INTERVAL = 10.0
"""The ``index_flush_interval`` of a broker's store: its commit log, consume queues and
checkpoint are fsynced every flush, its index files every 10 s (and at close). RocketMQ fsyncs
an index file only once it is full; each fsync here writes back a 4 KiB page for nearly every
key written since, so at every 0.5 s flush it cost the broker 3-13 us of CPU a send."""


class FlushDiskType(enum.Enum):
    """When a put counts as durable on the local disk."""

    ASYNC_FLUSH = "ASYNC_FLUSH"
    """A flusher fsyncs every ``flush_interval``; puts answer at once."""
    SYNC_FLUSH = "SYNC_FLUSH"
    """``put_async`` answers once the bytes are fsynced (concurrent puts share one fsync)."""


class StoreRole(enum.Enum):
    """Who writes the commit log."""

    MASTER = "MASTER"
    """Producers put messages."""
    SLAVE = "SLAVE"
    """Only replayed bytes are appended (:meth:`CommitLogStore.append_raw`); puts are refused."""


class PutStatus(enum.Enum):
    """RocketMQ's ``PutMessageStatus`` (5.x order)."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


def _positive(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value}")


def _percent(instance: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if not 1 <= value <= 100:
        raise ValueError(f"{attribute.name} must be a percentage in 1..100, got {value}")


def _optional_positive(
    instance: object, attribute: attrs.Attribute[Any], value: float | None
) -> None:
    if value is not None:
        _positive(instance, attribute, value)


def _fraction(instance: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not 0 <= value <= 1:
        raise ValueError(f"{attribute.name} must be None or in 0..1, got {value}")


def _cq_size(instance: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if value <= 0 or value % 20:
        raise ValueError(f"{attribute.name} must be a positive multiple of 20, got {value}")


def _index_num(instance: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if value < 2:
        raise ValueError(f"{attribute.name} must be >= 2 (entry 0 is never used), got {value}")


@attrs.frozen
class StoreConfig:
    """Settings of a :class:`CommitLogStore` (defaults as RocketMQ's).

    Attributes:
        mapped_file_size: commit log file size (1 GiB). Must match the files on disk.
        consume_queue_file_size: consume queue file size (6,000,000 = 300,000 entries).
        flush_disk_type: ASYNC_FLUSH or SYNC_FLUSH.
        flush_interval: seconds between flushes of the ASYNC flusher (0.5).
        sync_flush_timeout: seconds a SYNC_FLUSH put waits for its fsync before it answers
            FLUSH_DISK_TIMEOUT (5, as RocketMQ's ``syncFlushTimeout``).
        max_message_size: largest body accepted (4 MiB); larger is MESSAGE_ILLEGAL.
        role: MASTER (puts) or SLAVE (raw appends only).
        store_host: the ``ip:port`` written as STOREHOST into put records.
        warm_mapped_files: pre-fault every page of a new file before it is written (False,
            as RocketMQ's ``warmMapedFileEnable``). Off, a new file is reserved on the disk
            and mapped but takes no memory until writes reach its pages (a 1 GiB commit log
            file faulted in at once costs about a second and 1 GiB of memory at the put
            that needs it); on, :meth:`CommitLogStore.run` pre-faults it in a worker thread
            when it makes the file ahead of need. A SLAVE's commit log files never are:
            replicated bytes are written through the file (``pwrite``), which allocates the
            pages for half the cost of faulting them in.
        disk_max_used_space_ratio: puts are refused (SERVICE_NOT_AVAILABLE, "disk full") while
            the store's file system is more than this percentage used (75, RocketMQ's
            ``diskMaxUsedSpaceRatio``; 1..100).
        disk_check_interval: seconds a reading of the file system's usage is reused before a
            put reads it again (1).
        preallocate_at: while :meth:`CommitLogStore.run` runs, the next commit log file is
            created in a worker thread once the last one is written past this fraction of its
            size (0.5; RocketMQ's ``AllocateMappedFileService``), so the write that crosses
            into it does not wait for the disk; consume queue files the same way once 90 %
            full. None: files are only made when a write needs them.
        index_flush_interval: seconds between the periodic flusher's fsyncs of the index
            files (None: at every flush). Their slots are written through a mapping, each key
            to a page of its own, so each fsync writes a 4 KiB page a key written since; a
            kill loses nothing (the pages are in the page cache), a machine crash up to this
            much of the index (derived data: a file whose header and entries disagree is built
            again at the next open). An explicit flush and close always fsync them.
    """

    mapped_file_size: int = attrs.field(default=DEFAULT_MAPPED_FILE_SIZE, validator=_positive)
    consume_queue_file_size: int = attrs.field(
        default=DEFAULT_CONSUME_QUEUE_FILE_SIZE, validator=_cq_size
    )
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval: float = attrs.field(default=0.5, validator=_positive)
    sync_flush_timeout: float = attrs.field(default=5.0, validator=_positive)
    max_message_size: int = attrs.field(default=DEFAULT_MAX_MESSAGE_SIZE, validator=_positive)
    role: StoreRole = StoreRole.MASTER
    store_host: str = "127.0.0.1:10911"
    warm_mapped_files: bool = False
    disk_max_used_space_ratio: int = attrs.field(
        default=DEFAULT_DISK_MAX_USED_SPACE_RATIO, validator=_percent
    )
    disk_check_interval: float = attrs.field(default=1.0, validator=_positive)
    preallocate_at: float | None = attrs.field(default=0.5, validator=_fraction)
    message_index_enable: bool = True
    max_hash_slot_num: int = attrs.field(default=5_000_000, validator=_positive)
    max_index_num: int = attrs.field(default=20_000_000, validator=_index_num)
    max_msgs_num_batch: int = attrs.field(default=64, validator=_positive)
    index_flush_interval: float | None = attrs.field(default=None, validator=_optional_positive)


@attrs.frozen
class Message:
    """A message to put.

    Attributes:
        topic: ``[%|a-zA-Z0-9_-]+``, at most 32767 bytes (V2 records past 127).
        body: the payload (at most ``max_message_size``).
        queue_id: the queue within the topic (>= 0).
        flag: the producer's flag.
        properties: name -> value, written in this order (``TAGS``, ``KEYS``, ...).
        sys_flag: SYSFLAG bits other than the host bits (which follow ``born_host``).
        born_timestamp: ms since the epoch; 0 means "now" at put time.
        born_host: packed IPv4 (4 bytes) or IPv6 (16 bytes) address of the producer.
        born_port: the producer's port.
        reconsume_times, prepared_transaction_offset: as RocketMQ's.
    """

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = b"\x7f\x00\x00\x01"
    born_port: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


class PutResult(NamedTuple):
    """The answer to a put.

    A :class:`typing.NamedTuple` rather than an attrs class: one is built per put on the hot
    path, and a frozen attrs ``__init__`` costs about 1 µs here, a tuple a fifth of that.

    Attributes:
        status: PUT_OK or why not. A message that is not PUT_OK wrote nothing, except the
            statuses of a durability or replication wait (FLUSH_DISK_TIMEOUT, ...), where the
            message is stored all the same.
        wrote_offset: physical offset of the record (-1 when nothing was written).
        wrote_size: its size in bytes (0 when nothing was written).
        queue_offset: its queue offset (-1 when nothing was written).
        msg_id: the offset message id ("" when nothing was written).
        store_timestamp: its STORETIMESTAMP (ms).
        detail: why it was refused, for humans.
    """

    status: PutStatus
    wrote_offset: int = -1
    wrote_size: int = 0
    queue_offset: int = -1
    msg_id: str = ""
    store_timestamp: int = 0
    detail: str = ""

    @property
    def ok(self) -> bool:
        """Whether the status is PUT_OK."""
        return self.status is PutStatus.PUT_OK

    @property
    def end_offset(self) -> int:
        """The offset right after the record (what a durability or slave ack must reach)."""
        return self.wrote_offset + self.wrote_size


@attrs.frozen
class StoreStatistics:
    """A snapshot of a store's state (:meth:`CommitLogStore.statistics`).

    Attributes:
        min_offset, max_offset: the commit log's data range.
        flushed_offset: data up to here is on disk.
        dispatched_offset: records before here are in the consume queues.
        mapped_files: how many commit log files.
        consume_queues: how many (topic, queue) consume queues.
        puts, put_bytes: messages and bytes put since open.
        raw_appended_bytes: bytes appended by :meth:`CommitLogStore.append_raw` since open.
        flushes: fsync rounds done since open.
        dispatch_error: the first record that failed validation while dispatching (offset and
            reason), or None.
        recovered_abnormally: whether open found the ``abort`` file (a crash).
        truncated_at: where recovery cut an invalid record off at open, or None.
        closed: whether the store was closed.
        disk_full: whether puts are refused because the file system is used past
            ``disk_max_used_space_ratio``.
        disk_used_ratio: the file system's used fraction (0.0..1.0) at the last check, or None
            when it could not be read.
        create_error: why the last new commit log or consume queue file could not be created
            (puts needing it answer CREATE_MAPPED_FILE_FAILED), or None once one was created.
        damaged: the commit log ranges that failed their checks with valid records after
            them: ``(start, end, reason)`` each, kept and refused until repaired.
    """

    min_offset: int
    max_offset: int
    flushed_offset: int
    dispatched_offset: int
    mapped_files: int
    consume_queues: int
    puts: int
    put_bytes: int
    raw_appended_bytes: int
    flushes: int
    dispatch_error: tuple[int, str] | None
    recovered_abnormally: bool
    truncated_at: int | None
    closed: bool
    disk_full: bool = False
    disk_used_ratio: float | None = None
    create_error: str | None = None
    damaged: tuple[tuple[int, int, str], ...] = ()
