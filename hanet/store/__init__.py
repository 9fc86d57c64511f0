"""RocketMQ-compatible commit log store: what a user of the store needs.

- :class:`CommitLogStore`: puts, raw appends (HA slave), dispatch, flushing, recovery; its
  :class:`StoreConfig`, the answers (:class:`PutResult`, :class:`PutStatus`), its
  :class:`StoreStatistics` and errors (:class:`StoreError` and its subclasses).
  ``_store.py`` is a thin facade over the files; its module docstring describes the sync
  core / async durability split the HA layer relies on and where each part lives.
- :class:`MessageRecord` with :func:`encode_record` / :func:`decode_record` /
  :func:`decode_records` (a whole buffer, native when built) /
  :func:`scan_records`, :func:`offset_msg_id` and :func:`record_to_json`: the records.
- :class:`CommitLogReader`: read-only walk over a ``commitlog/`` directory;
  :func:`compare_commit_logs`: what the command line prints and the demo and tests check.
- Retention (:class:`RetentionService`, :class:`RetentionConfig`) and the epoch file
  (:class:`EpochFile`) that HA failover keeps next to the store.

The plumbing hanet's own layers use (the scanner and record index, codec constants and helpers,
mapped files, consume queue and index file internals, the stop judgement, epoch and retention
helpers) is in :mod:`hanet.store.lowlevel`, as trio keeps its own in ``trio.lowlevel``.
"""

from ._codec import MessageRecord, encode_record, offset_msg_id
from ._compare import CommitLogComparison, compare_commit_logs
from ._config import (
    BROKER_INDEX_FLUSH_INTERVAL,
    DEFAULT_CONSUME_QUEUE_FILE_SIZE,
    DEFAULT_DISK_MAX_USED_SPACE_RATIO,
    DEFAULT_MAPPED_FILE_SIZE,
    DEFAULT_MAX_MESSAGE_SIZE,
    FlushDiskType,
    Message,
    PutResult,
    PutStatus,
    StoreConfig,
    StoreRole,
    StoreStatistics,
)
from ._damage import DamagedRange
from ._decode import decode_records
from ._dispatch import DispatchError
from ._epoch import EPOCH_FILE, EpochEntry, EpochFile, EpochFileError, EpochHistory
from ._errors import (
    CorruptRecordError,
    CreateMappedFileError,
    OffsetMismatchError,
    StoreClosedError,
    StoreError,
    StoreLayoutError,
    StoreLockedError,
)
from ._index_file import IndexQueryResult
from ._json import record_to_json
from ._open import recorded_file_size
from ._reader import CommitLogReader, resolve_store_dir
from ._retention import Holder, RetentionConfig, RetentionService, RetentionStatistics
from ._scanner import ScanStop, StopReason, decode_record, scan_records
from ._store import CommitLogStore, Listener
from ._store_files import STORE_PROPERTIES

__all__ = [
    "BROKER_INDEX_FLUSH_INTERVAL",
    "DEFAULT_CONSUME_QUEUE_FILE_SIZE",
    "DEFAULT_DISK_MAX_USED_SPACE_RATIO",
    "DEFAULT_MAPPED_FILE_SIZE",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "EPOCH_FILE",
    "STORE_PROPERTIES",
    "CommitLogComparison",
    "CommitLogReader",
    "CommitLogStore",
    "CorruptRecordError",
    "CreateMappedFileError",
    "DamagedRange",
    "DispatchError",
    "EpochEntry",
    "EpochFile",
    "EpochFileError",
    "EpochHistory",
    "FlushDiskType",
    "Holder",
    "IndexQueryResult",
    "Listener",
    "Message",
    "MessageRecord",
    "OffsetMismatchError",
    "PutResult",
    "PutStatus",
    "RetentionConfig",
    "RetentionService",
    "RetentionStatistics",
    "ScanStop",
    "StopReason",
    "StoreClosedError",
    "StoreConfig",
    "StoreError",
    "StoreLayoutError",
    "StoreLockedError",
    "StoreRole",
    "StoreStatistics",
    "compare_commit_logs",
    "decode_record",
    "decode_records",
    "encode_record",
    "offset_msg_id",
    "record_to_json",
    "recorded_file_size",
    "resolve_store_dir",
    "scan_records",
]
