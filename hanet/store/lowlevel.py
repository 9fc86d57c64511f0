"""The store's plumbing: what hanet's own layers (HA, broker, command line, Spark) and the
tests and benchmarks build on, below :mod:`hanet.store`'s surface.

- The codec's layout (magic numbers, flags, sizes) and helpers (:func:`encode_blank`,
  :func:`pack_record_into`, CRCs, properties, hosts) and :class:`RecordScanner` (``_codec.py``,
  ``_scanner.py``).
- The record index (``_index.py``): :func:`scan_index` validates a whole region in one call
  and returns packed rows (:data:`INDEX_ROW`) instead of record objects: the native scanner
  (``_speedups.c``) when built and ``HANET_NO_EXTENSIONS`` is unset (:data:`NATIVE_SCANNER`,
  :data:`native_scan`), else :func:`scan_index_py`, the pure-Python reference on
  :class:`RecordScanner`; :func:`record_columns` turns its rows into per-column buffers
  (Arrow's layout) for ``hanet.spark``, and :func:`index_scan_columns` (windowed:
  :func:`index_scan_column_windows`) scans and takes those columns in one pass, each record
  read once; :func:`index_group_entries` turns rows into consume queue runs.
- :func:`judge_stop`: the one judgement of where a scan stopped (``_judge.py``).
- :class:`MappedFile` / :class:`MappedFileQueue` (``_mapped_file.py``, ``_mapped_queue.py``),
  :class:`ConsumeQueue` (``_consume_queue.py``), :class:`IndexService` / :class:`IndexFile`
  (``_index_file.py``), :class:`DamageLedger` (``_damage.py``), the store's files
  (``_store_files.py``), the epoch file's format and :func:`find_consistent_point`
  (``_epoch.py``), retention planning (``_retention.py``).
- :data:`native_pull_gather`: a pull's records from a consume queue file in one native call
  (``_gather.py``; the broker's ``serve_pull`` loop is its reference and fallback).
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
    body_crc,
    crc32_trailer,
    decode_properties,
    encode_blank,
    encode_properties,
    format_host,
    java_string_hash,
    pack_blank_into,
    pack_record_into,
    parse_host,
    property_problem,
    record_crc,
    record_size,
    seal_record,
    topic_problem,
)
from ._consume_queue import CQ_BLANK_SIZE, CQ_ENTRY_SIZE, ConsumeQueue
from ._damage import DAMAGE_FILE, DamageLedger, next_valid_record
from ._decode import NATIVE_DECODE, native_decode_records
from ._epoch import find_consistent_point, format_epoch_file, parse_epoch_file
from ._gather import (
    NATIVE_PULL,
    PULL_DONE,
    PULL_FULL,
    PULL_MOVE,
    PULL_STEP,
    PullGather,
    native_pull_gather,
    pack_damaged,
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
from ._index import ColumnValue as IndexColumnValue
from ._index import EntryGroup as IndexEntryGroup
from ._index import GroupFunction as IndexGroupFunction
from ._index import ScanFunction as IndexScanFunction
from ._index import ScanResult as IndexScanResult
from ._index import group_entries as index_group_entries
from ._index import group_entries_py as index_group_entries_py
from ._index import native_group_entries as native_index_group_entries
from ._index import native_scan_columns as native_index_scan_columns
from ._index import scan_column_windows as index_scan_column_windows
from ._index import scan_columns as index_scan_columns
from ._index import scan_columns_py as index_scan_columns_py
from ._index import scan_windows as scan_index_windows
from ._index import topic_names as index_topic_names
from ._index_file import (
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    INDEX_SLOT_SIZE,
    IndexFile,
    IndexHeader,
    IndexService,
    index_entries_py,
    index_file_size,
    native_index_entries,
)
from ._index_file import key_batch_py as index_key_batch_py
from ._index_file import native_key_batch as native_index_key_batch
from ._index_keys import index_key_hash, record_index_keys
from ._judge import StopJudgement, StopKind, judge_stop
from ._mapped_file import MappedFile, file_name
from ._mapped_queue import MappedFileQueue, list_mapped_files
from ._new_message import native_new_message, new_message, new_message_py
from ._retention import (
    CommitLogFile,
    RetentionPlan,
    disk_used_ratio,
    parse_delete_when,
    plan_retention,
)
from ._scanner import RecordScanner
from ._store_files import fsync_directory, read_store_sizes
from ._writer import (
    native_append_entries,
    native_pack_entries,
    native_put_properties,
    native_record_place,
    native_view_records,
    native_write_record,
    native_write_record_unsealed,
    put_properties_py,
    write_record_py,
    write_record_unsealed,
    write_record_unsealed_py,
)

__all__ = [
    "BLANK_MAGIC",
    "BLANK_RECORD_SIZE",
    "BORN_HOST_V6_FLAG",
    "CQ_BLANK_SIZE",
    "CQ_ENTRY_SIZE",
    "CRC32_PROPERTY",
    "CRC32_RESERVED_LEN",
    "DAMAGE_FILE",
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
    "NATIVE_DECODE",
    "NATIVE_PULL",
    "NATIVE_SCANNER",
    "PULL_DONE",
    "PULL_FULL",
    "PULL_MOVE",
    "PULL_STEP",
    "STORE_HOST_V6_FLAG",
    "SYS_FLAG_KNOWN_BITS",
    "CommitLogFile",
    "ConsumeQueue",
    "DamageLedger",
    "IndexColumnValue",
    "IndexEntryGroup",
    "IndexFile",
    "IndexGroupFunction",
    "IndexHeader",
    "IndexScanFunction",
    "IndexScanResult",
    "IndexService",
    "MappedFile",
    "MappedFileQueue",
    "PullGather",
    "RecordScanner",
    "RetentionPlan",
    "StopJudgement",
    "StopKind",
    "body_crc",
    "crc32_trailer",
    "decode_properties",
    "disk_used_ratio",
    "encode_blank",
    "encode_properties",
    "file_name",
    "find_consistent_point",
    "format_epoch_file",
    "format_host",
    "fsync_directory",
    "index_entries_py",
    "index_file_size",
    "index_group_entries",
    "index_group_entries_py",
    "index_key_batch_py",
    "index_key_hash",
    "index_scan_column_windows",
    "index_scan_columns",
    "index_scan_columns_py",
    "index_topic_names",
    "java_string_hash",
    "judge_stop",
    "list_mapped_files",
    "native_append_entries",
    "native_columns",
    "native_decode_records",
    "native_index_entries",
    "native_index_group_entries",
    "native_index_key_batch",
    "native_index_scan_columns",
    "native_new_message",
    "native_pack_entries",
    "native_pull_gather",
    "native_put_properties",
    "native_record_place",
    "native_scan",
    "native_view_records",
    "native_write_record",
    "native_write_record_unsealed",
    "new_message",
    "new_message_py",
    "next_valid_record",
    "pack_blank_into",
    "pack_damaged",
    "pack_record_into",
    "parse_delete_when",
    "parse_epoch_file",
    "parse_host",
    "plan_retention",
    "property_problem",
    "put_properties_py",
    "read_store_sizes",
    "record_columns",
    "record_columns_py",
    "record_crc",
    "record_index_keys",
    "record_size",
    "scan_index",
    "scan_index_py",
    "scan_index_windows",
    "seal_record",
    "topic_problem",
    "write_record_py",
    "write_record_unsealed",
    "write_record_unsealed_py",
]
