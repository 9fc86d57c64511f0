"""RocketMQ-compatible commit log store.

- The message codec (:class:`MessageRecord`, :func:`encode_record`, ...; ``_codec.py``) and
  the fast scanner (:func:`scan_records`, :func:`decode_record`; ``_scanner.py``): pure and
  synchronous, for the store, the HA slave's validation and the Spark data source.
- The record index (``_index.py``): :func:`scan_index` validates a whole region in one call
  and returns packed rows (:data:`INDEX_ROW`) instead of record objects: the native scanner
  (``_speedups.c``) when built and ``HANET_NO_EXTENSIONS`` is unset (:data:`NATIVE_SCANNER`),
  else :func:`scan_index_py`, the pure-Python reference on :class:`RecordScanner`;
  :func:`record_columns` turns its rows into per-column buffers (Arrow's layout) for
  ``hanet.spark`` (native ``columns`` or :func:`record_columns_py`).
- :class:`CommitLogReader`: read-only walk over a ``commitlog/`` directory (``_reader.py``).
- :class:`MappedFile` / :class:`MappedFileQueue`: fixed-size preallocated, pre-faulted mapped
  files named by their 20-digit start offset (``_mapped_file.py``, ``_mapped_queue.py``).
- :class:`ConsumeQueue`: 20-byte entries per topic and queue (``_consume_queue.py``).
- :class:`IndexService` / :class:`IndexFile`: RocketMQ's index files (``index/``), messages
  found by ``KEYS`` and ``UNIQ_KEY`` (``_index_file.py``; :meth:`CommitLogStore.query_index`).
- :func:`record_to_json` (``_json.py``) and :func:`compare_commit_logs` (``_compare.py``): what
  the command line prints and the demo and tests check.
- :class:`CommitLogStore`: puts, raw appends (HA slave), dispatch, flushing, recovery
  (``_store.py``, ``_recovery.py``, ``_store_files.py``); its module docstring describes the
  sync core / async durability split the HA layer relies on.
"""

from ._codec import (
    BLANK_MAGIC,
    BLANK_RECORD_SIZE,
    BORN_HOST_V6_FLAG,
    CRC32_PROPERTY,
    CRC32_RESERVED_LEN,
    MAGIC_V1,
    MAGIC_V2,
    MAX_PROPERTIES_SIZE,
    MAX_TOPIC_LENGTH,
    MAX_TOPIC_SIZE,
    MAX_TOPIC_SIZE_V1,
    MIN_RECORD_SIZE,
    STORE_HOST_V6_FLAG,
    SYS_FLAG_KNOWN_BITS,
    MessageRecord,
    body_crc,
    crc32_trailer,
    decode_properties,
    encode_blank,
    encode_properties,
    encode_record,
    format_host,
    java_string_hash,
    offset_msg_id,
    pack_blank_into,
    pack_record_into,
    parse_host,
    property_problem,
    record_crc,
    record_size,
    seal_record,
    topic_problem,
)
from ._compare import CommitLogComparison, compare_commit_logs
from ._config import (
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
from ._consume_queue import CQ_BLANK_SIZE, CQ_ENTRY_SIZE, ConsumeQueue
from ._damage import DAMAGE_FILE, DamagedRange, DamageLedger, next_valid_record
from ._epoch import (
    EPOCH_FILE,
    EpochEntry,
    EpochFile,
    EpochFileError,
    EpochHistory,
    find_consistent_point,
    format_epoch_file,
    parse_epoch_file,
)
from ._errors import (
    CorruptRecordError,
    CreateMappedFileError,
    OffsetMismatchError,
    StoreClosedError,
    StoreError,
    StoreLayoutError,
    StoreLockedError,
)
from ._index import FIXED_COLUMNS as INDEX_FIXED_COLUMNS
from ._index import (
    NATIVE_SCANNER,
    native_columns,
    native_scan,
    record_columns,
    record_columns_py,
    scan_index,
    scan_index_py,
)
from ._index import ROW as INDEX_ROW
from ._index import SCAN_WINDOW as INDEX_SCAN_WINDOW
from ._index import STOP_REASONS as INDEX_STOP_REASONS
from ._index import VAR_COLUMNS as INDEX_VAR_COLUMNS
from ._index import EntryGroup as IndexEntryGroup
from ._index import GroupFunction as IndexGroupFunction
from ._index import ScanFunction as IndexScanFunction
from ._index import ScanResult as IndexScanResult
from ._index import group_entries as index_group_entries
from ._index import group_entries_py as index_group_entries_py
from ._index import native_group_entries as native_index_group_entries
from ._index import scan_windows as scan_index_windows
from ._index import topic_names as index_topic_names
from ._index_file import (
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    INDEX_SLOT_SIZE,
    IndexFile,
    IndexHeader,
    IndexQueryResult,
    IndexService,
    index_file_size,
    index_key_hash,
    record_index_keys,
)
from ._json import record_to_json
from ._judge import StopJudgement, StopKind, judge_stop
from ._mapped_file import MappedFile, file_name
from ._mapped_queue import MappedFileQueue, list_mapped_files
from ._reader import CommitLogReader, resolve_store_dir
from ._retention import (
    CommitLogFile,
    Holder,
    RetentionConfig,
    RetentionPlan,
    RetentionService,
    RetentionStatistics,
    disk_used_ratio,
    parse_delete_when,
    plan_retention,
)
from ._scanner import RecordScanner, ScanStop, StopReason, decode_record, scan_records
from ._dispatch import DispatchError
from ._open import recorded_file_size
from ._store import CommitLogStore, Listener
from ._store_files import STORE_PROPERTIES, fsync_directory, read_store_sizes

__all__ = [
    "BLANK_MAGIC",
    "BLANK_RECORD_SIZE",
    "BORN_HOST_V6_FLAG",
    "CQ_BLANK_SIZE",
    "CQ_ENTRY_SIZE",
    "CRC32_PROPERTY",
    "CRC32_RESERVED_LEN",
    "DAMAGE_FILE",
    "DEFAULT_CONSUME_QUEUE_FILE_SIZE",
    "DEFAULT_DISK_MAX_USED_SPACE_RATIO",
    "DEFAULT_MAPPED_FILE_SIZE",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "EPOCH_FILE",
    "INDEX_ENTRY_SIZE",
    "INDEX_FIXED_COLUMNS",
    "INDEX_HEADER_SIZE",
    "INDEX_ROW",
    "INDEX_SCAN_WINDOW",
    "INDEX_SLOT_SIZE",
    "INDEX_STOP_REASONS",
    "INDEX_VAR_COLUMNS",
    "MAGIC_V1",
    "MAGIC_V2",
    "MAX_PROPERTIES_SIZE",
    "MAX_TOPIC_LENGTH",
    "MAX_TOPIC_SIZE",
    "MAX_TOPIC_SIZE_V1",
    "MIN_RECORD_SIZE",
    "NATIVE_SCANNER",
    "STORE_HOST_V6_FLAG",
    "STORE_PROPERTIES",
    "SYS_FLAG_KNOWN_BITS",
    "CommitLogComparison",
    "CommitLogFile",
    "CommitLogReader",
    "CommitLogStore",
    "ConsumeQueue",
    "CorruptRecordError",
    "CreateMappedFileError",
    "DamageLedger",
    "DamagedRange",
    "DispatchError",
    "EpochEntry",
    "EpochFile",
    "EpochFileError",
    "EpochHistory",
    "FlushDiskType",
    "Holder",
    "IndexEntryGroup",
    "IndexFile",
    "IndexGroupFunction",
    "IndexHeader",
    "IndexQueryResult",
    "IndexScanFunction",
    "IndexScanResult",
    "IndexService",
    "Listener",
    "MappedFile",
    "MappedFileQueue",
    "Message",
    "MessageRecord",
    "OffsetMismatchError",
    "PutResult",
    "PutStatus",
    "RecordScanner",
    "RetentionConfig",
    "RetentionPlan",
    "RetentionService",
    "RetentionStatistics",
    "ScanStop",
    "StopJudgement",
    "StopKind",
    "StopReason",
    "StoreClosedError",
    "StoreConfig",
    "StoreError",
    "StoreLayoutError",
    "StoreLockedError",
    "StoreRole",
    "StoreStatistics",
    "body_crc",
    "compare_commit_logs",
    "crc32_trailer",
    "decode_properties",
    "decode_record",
    "disk_used_ratio",
    "encode_blank",
    "encode_properties",
    "encode_record",
    "file_name",
    "find_consistent_point",
    "format_epoch_file",
    "format_host",
    "fsync_directory",
    "index_file_size",
    "index_group_entries",
    "index_group_entries_py",
    "index_key_hash",
    "index_topic_names",
    "java_string_hash",
    "judge_stop",
    "list_mapped_files",
    "native_columns",
    "native_index_group_entries",
    "native_scan",
    "next_valid_record",
    "offset_msg_id",
    "pack_blank_into",
    "pack_record_into",
    "parse_delete_when",
    "parse_epoch_file",
    "parse_host",
    "plan_retention",
    "property_problem",
    "read_store_sizes",
    "record_columns",
    "record_columns_py",
    "record_crc",
    "record_index_keys",
    "record_size",
    "record_to_json",
    "recorded_file_size",
    "resolve_store_dir",
    "scan_index",
    "scan_index_py",
    "scan_index_windows",
    "scan_records",
    "seal_record",
    "topic_problem",
]
