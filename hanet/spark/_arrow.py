"""Commit log ranges as Arrow record batches (pyarrow only, no pyspark).

What a partition of the ``commitlog`` data source does, usable without Spark (the benchmark's
baseline and the unit tests call it directly). Records are validated by the store's record
index (:func:`hanet.store.lowlevel.scan_index`: the native scanner when built, one call per
window of the file, packed rows instead of record objects); columns come from those rows with
:func:`hanet.store.lowlevel.record_columns` (one native call per batch for all the columns asked
for, already in Arrow's buffer layout: no Python per record), computing only the columns asked for:

- fixed-width columns and ``topic``, ``body``, ``tags``, ``keys``, ``msg_id`` are Arrow arrays
  over the returned buffers (``pa.Array.from_buffers``);
- properties are split into a ``map<string,string>`` with Arrow compute kernels
  (``split_pattern`` on ``\\x02`` then ``\\x01``) over the raw properties column;
- host strings come from the codec (:func:`~hanet.store.lowlevel.format_host`) once per distinct
  raw host (``pc.unique``), then ``pc.take``.

With ``HANET_NO_EXTENSIONS=1`` the same code runs on the pure-Python references
(:func:`~hanet.store.lowlevel.scan_index_py`, :func:`~hanet.store.lowlevel.record_columns_py`).

A record whose only fault is a CRC (its body CRC or its whole-record CRC property) becomes a
row with ``crc_ok = false`` and the scan goes on after it. Anything else that is not a record
(garbage, a torn tail, a blank record that does not end its file, unwritten zeros in a file
that is not the last) ends the scan of the range with one row of ``status = 'corrupt'`` naming
the offset and the reason.
"""

from __future__ import annotations

import mmap
from collections.abc import Generator, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hanet.store import ScanStop, StopReason
from hanet.store.lowlevel import INDEX_ROW as ROW
from hanet.store.lowlevel import INDEX_SCAN_WINDOW as SCAN_WINDOW
from hanet.store.lowlevel import (
    IndexColumnValue,
    IndexScanResult,
    decode_properties,
    format_host,
    index_scan_column_windows,
    judge_stop,
    record_columns,
    scan_index,
)

from ._layout import CommitLogRange

__all__ = [
    "COMMIT_LOG_COLUMNS",
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_BATCH_ROWS",
    "commit_log_batches",
    "commit_log_schema",
]

DEFAULT_BATCH_ROWS = 8192
"""Rows per Arrow batch at most."""
DEFAULT_BATCH_BYTES = 64 * 1024 * 1024
"""Record bytes per Arrow batch at most (bounds memory with ``includeBody``)."""

_STRING = pa.string()
_INT = pa.int32()
_LONG = pa.int64()
_MAP = pa.map_(pa.string(), pa.string())

COMMIT_LOG_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("store", _STRING),
    ("file", _STRING),
    ("physical_offset", _LONG),
    ("size", _INT),
    ("magic", _LONG),
    ("topic", _STRING),
    ("queue_id", _INT),
    ("queue_offset", _LONG),
    ("flag", _INT),
    ("sys_flag", _INT),
    ("born_timestamp", _LONG),
    ("born_host", _STRING),
    ("store_timestamp", _LONG),
    ("store_host", _STRING),
    ("reconsume_times", _INT),
    ("body_crc", _INT),
    ("crc_ok", pa.bool_()),
    ("properties", _MAP),
    ("tags", _STRING),
    ("keys", _STRING),
    ("msg_id", _STRING),
    ("status", _STRING),
    ("error", _STRING),
)
"""Name and Arrow type of each commit log column (``body``, binary, follows with
``includeBody``). Timestamps are RocketMQ's milliseconds since the epoch."""


def commit_log_schema(
    include_body: bool = False, columns: Sequence[str] | None = None
) -> pa.Schema:
    """The Arrow schema of commit log batches: every column of :data:`COMMIT_LOG_COLUMNS`, or
    only ``columns`` (in that order); ``body`` last with ``include_body`` (or when listed).

    Raises:
        ValueError: an unknown column name.
    """
    types = dict(COMMIT_LOG_COLUMNS)
    types["body"] = pa.binary()
    names = list(columns) if columns else [name for name, _ in COMMIT_LOG_COLUMNS]
    if include_body and "body" not in names:
        names.append("body")
    unknown = [name for name in names if name not in types]
    if unknown or len(set(names)) != len(names) or not names:
        raise ValueError(
            f"bad commit log columns {names!r}: each at most once, out of {', '.join(types)}"
        )
    return pa.schema([(name, types[name]) for name in names])


def commit_log_batches(
    part: CommitLogRange,
    *,
    include_body: bool = False,
    columns: Sequence[str] | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
) -> Iterator[pa.RecordBatch]:
    """The rows of one commit log range as Arrow record batches (of
    :func:`commit_log_schema` with ``include_body`` and ``columns``: the columns not asked for
    are not computed).

    Good records give ``status = 'ok'`` rows (``crc_ok`` false for a body or whole-record CRC
    mismatch); the scan ends at the range's end, at a blank record that ends the file, at
    unwritten zeros in the store's last file, or at anything else with one final ``status =
    'corrupt'`` row. Never raises for bad data. The file is mapped read-only and unmapped
    before returning.
    """
    converter = _BatchBuilder(part, commit_log_schema(include_body, columns))
    with open(part.path, "rb") as f:
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = memoryview(mapping)
    rows_step = max(1, batch_rows) * ROW.size
    window = max(1, min(SCAN_WINDOW, batch_bytes))
    try:
        stop = yield from scan_batches(
            converter, view, part.start, part.end, part.file_start, None, window, rows_step
        )
        corrupt = _judge_stop(stop, part, len(view))
        if corrupt is not None:
            yield converter.corrupt_row(*corrupt)
    finally:
        try:
            view.release()
            mapping.close()
        except BufferError:  # pragma: no cover - a caller kept a view of a batch's buffer
            pass


def scan_batches(
    builder: _BatchBuilder,
    view: memoryview,
    position: int,
    end: int,
    base: int,
    limit: int | None,
    window: int,
    rows_step: int,
) -> Generator[pa.RecordBatch, None, ScanStop]:
    """The batches of the records of ``view[position:end]`` (``base``: the offset of
    ``view[0]``; ``limit``: where its file ends, None: the view's end), ``rows_step`` bytes of
    rows each. One scan call per ``window`` bytes (native when built): rows, not records; each
    batch's columns come from those rows in a few calls (record_columns), no Python per row. A
    record whose only fault is a CRC is a ``crc_ok = false`` row and the scan goes on past it;
    returns the stop that ended the scan otherwise (to be judged by the caller). The columns
    of each batch are taken during its scan (:func:`~hanet.store.lowlevel.index_scan_columns`:
    each record read once, while it is in cache)."""
    while True:
        result: IndexScanResult | None = None
        for result, columns in index_scan_column_windows(
            view,
            position,
            end,
            base,
            limit,
            builder.wanted,
            rows_step // ROW.size,
            check_physical_offset=True,
            window=window,
        ):
            if result.records:
                yield builder.build(view, result.rows, None, columns)
        assert result is not None
        stop = result.stop(base)
        bad_crc = _crc_failure(view, stop, base) if _is_invalid(stop) else None
        if bad_crc is None:
            return stop
        yield builder.build(view, bad_crc, False)
        position = stop.offset - base + ROW.unpack(bad_crc)[1]


def _is_invalid(stop: ScanStop) -> bool:
    return stop.reason is StopReason.INVALID


def _crc_failure(view: memoryview, stop: ScanStop, file_start: int) -> bytes | None:
    """The row of the record at an INVALID stop if its only fault is a CRC (the body's or the
    whole-record CRC property's), else None."""
    position = stop.offset - file_start
    if position + 4 > len(view):
        return None
    # this one record only: unbounded, the scan would pack rows for the rest of the file
    total = int.from_bytes(view[position : position + 4], "big")
    end = min(position + total, len(view))
    result = scan_index(
        view, position, end, file_start, check_crc=False, check_physical_offset=True
    )
    if result.records == 0:
        return None
    # Found without the CRC checks but not with them: a CRC is what fails (a whole-record CRC
    # mismatch with a good body CRC is a damaged header field, topic or property).
    return result.rows[: ROW.size]


def _judge_stop(stop: ScanStop, part: CommitLogRange, file_size: int) -> tuple[int, str] | None:
    """``(offset, reason)`` of the corrupt row a scan stop calls for, or None (a normal end)."""
    verdict = judge_stop(stop, part.file_start + file_size, last_file=part.last_file)
    if not verdict.damaged:
        return None
    return verdict.stop.offset, verdict.stop.detail or verdict.stop.reason.value


_NATIVE_COLUMNS = {
    "physical_offset": _LONG,
    "size": _INT,
    "magic": _LONG,
    "queue_id": _INT,
    "queue_offset": _LONG,
    "flag": _INT,
    "sys_flag": _INT,
    "born_timestamp": _LONG,
    "store_timestamp": _LONG,
    "reconsume_times": _INT,
    "body_crc": _INT,
    "topic": _STRING,
    "body": pa.binary(),
    "tags": _STRING,
    "keys": _STRING,
    "msg_id": _STRING,
}
"""Columns built as they come out of :func:`~hanet.store.lowlevel.record_columns`."""
_FROM_ROWS = frozenset({"born_host", "store_host", "properties"})
"""Columns built from a :func:`~hanet.store.lowlevel.record_columns` column with Arrow kernels."""
_VALIDATE_UTF8 = frozenset({"tags", "keys"})
"""String columns whose bytes no scan checked (a topic is checked UTF-8 by the scan; a message
id is hex): invalid UTF-8 is replaced, as :func:`~hanet.store.lowlevel.decode_properties` does."""


def _arrow_column(value: Any, arrow_type: Any, n: int) -> pa.Array:
    if isinstance(value, bytes):
        return pa.Array.from_buffers(arrow_type, n, [None, pa.py_buffer(value)])
    offsets, data, validity, nulls = value
    buffers = [
        None if validity is None else pa.py_buffer(validity),
        pa.py_buffer(offsets),
        pa.py_buffer(data),
    ]
    return pa.Array.from_buffers(arrow_type, n, buffers, null_count=nulls)


def _utf8_or_replaced(array: pa.Array) -> pa.Array:
    """A string array of unchecked bytes, or (invalid UTF-8 somewhere) one decoded with
    replacement characters."""
    try:
        array.validate(full=True)
    except pa.ArrowInvalid:
        raw = array.view(pa.binary()).to_pylist()
        return pa.array([None if v is None else v.decode("utf-8", "replace") for v in raw])
    return array


class _BatchBuilder:
    """Builds the batches of one range from scan rows; caches host strings."""

    def __init__(self, part: CommitLogRange, schema: pa.Schema) -> None:
        self._schema = schema
        self._names = tuple(schema.names)
        self._base = part.file_start
        self._store = pa.scalar(part.store, _STRING)
        self._file = pa.scalar(part.path.rsplit("/", 1)[-1], _STRING)
        self._ok = pa.scalar("ok", _STRING)
        self._hosts: dict[bytes, str] = {}
        self._constants: dict[tuple[str, int, bool | None], pa.Array] = {}
        self.wanted = [n for n in self._names if n in _NATIVE_COLUMNS or n in _FROM_ROWS]
        """The columns taken from the records (:func:`~hanet.store.lowlevel.record_columns`)."""

    def _host_column(self, raw: pa.Array) -> pa.Array:
        """Host strings from raw address + port bytes: each distinct host formatted once."""
        cache = self._hosts
        distinct = pc.unique(raw)
        for value in distinct.to_pylist():
            if value not in cache:
                cache[value] = format_host(value[:-4], int.from_bytes(value[-4:], signed=True))
        if len(distinct) == 1:
            return pa.repeat(pa.scalar(cache[distinct[0].as_py()], _STRING), len(raw))
        strings = pa.array([cache[value] for value in distinct.to_pylist()], _STRING)
        return pc.take(strings, pc.index_in(raw, distinct))

    def build(
        self,
        view: memoryview,
        rows: bytes,
        crc_ok: bool | None,
        columns: list[IndexColumnValue] | None = None,
    ) -> pa.RecordBatch:
        """A batch of ``status = 'ok'`` rows, the records of scan ``rows`` of ``view``;
        ``crc_ok`` None means all passed the check. ``columns``: :attr:`wanted` of those rows
        when already taken, else computed here."""
        n = len(rows) // ROW.size
        if columns is None:
            columns = record_columns(view, rows, self._base, self.wanted)
        computed = dict(zip(self.wanted, columns, strict=True))
        arrays = []
        for name in self._names:
            value = computed.get(name)
            if name in _NATIVE_COLUMNS:
                array = _arrow_column(value, _NATIVE_COLUMNS[name], n)
                arrays.append(_utf8_or_replaced(array) if name in _VALIDATE_UTF8 else array)
            elif name == "properties":
                arrays.append(properties_map_column(_arrow_column(value, pa.binary(), n)))
            elif name in ("born_host", "store_host"):
                arrays.append(self._host_column(_arrow_column(value, pa.binary(), n)))
            else:
                arrays.append(self._derived(name, n, crc_ok))
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)

    def _derived(self, name: str, n: int, crc_ok: bool | None) -> pa.Array:
        """A column of one value, built once per length (most batches have the same length;
        Arrow arrays are immutable, batches share it)."""
        key = (name, n, crc_ok)
        array = self._constants.get(key)
        if array is None:
            if len(self._constants) >= 64:
                self._constants.clear()
            array = self._constants[key] = self._constant(name, n, crc_ok)
        return array

    def _constant(self, name: str, n: int, crc_ok: bool | None) -> pa.Array:
        if name == "store":
            return pa.repeat(self._store, n)
        if name == "file":
            return pa.repeat(self._file, n)
        if name == "crc_ok":
            return pa.repeat(pa.scalar(True if crc_ok is None else crc_ok), n)
        if name == "status":
            return pa.repeat(self._ok, n)
        assert name == "error", name
        return pa.nulls(n, _STRING)

    def corrupt_row(self, physical_offset: int, reason: str) -> pa.RecordBatch:
        """The one-row batch that says where and why a scan stopped on bad data."""
        row = dict.fromkeys(self._schema.names)
        row.update(
            store=self._store.as_py(),
            file=self._file.as_py(),
            physical_offset=physical_offset,
            status="corrupt",
            error=reason,
        )
        return pa.RecordBatch.from_pylist([row], schema=self._schema)


_PROPERTY_KEYS = {"properties": "", "tags": "TAGS", "keys": "KEYS"}


class PropertyColumns:
    """The property columns of one batch: the whole map, or (when the map is not asked for)
    ``tags`` / ``keys`` found with a regular expression, four times cheaper. RocketMQ writes
    each name once (a Java map); were one repeated, the map keeps the last value (as
    :func:`~hanet.store.lowlevel.decode_properties`) and the expression the first."""

    def __init__(self, raw: Sequence[bytes], want_map: bool) -> None:
        self._raw = raw
        self._map: pa.Array | None = None
        self._text: pa.Array | None = None
        if not want_map:
            try:
                self._text = pa.array(raw, pa.binary()).cast(_STRING)
            except pa.ArrowInvalid:  # invalid UTF-8 somewhere: the map path copes
                pass

    def column(self, name: str) -> pa.Array:
        key = _PROPERTY_KEYS[name]
        if self._text is not None:
            pattern = f"(?:^|\x02){key}\x01(?P<v>[^\x02]*)"
            return pc.struct_field(pc.extract_regex(self._text, pattern), "v")
        if self._map is None:
            self._map = properties_map_column(self._raw)
        if not key:
            return self._map
        return pc.map_lookup(self._map, pa.scalar(key, _STRING), "last")


def properties_map_column(raw: Sequence[bytes] | pa.Array) -> pa.Array:
    """RocketMQ property fields (``name \\x01 value \\x02`` ...) as a ``map<string,string>``.

    Items without ``\\x01`` are skipped, as :func:`~hanet.store.lowlevel.decode_properties` does; a
    batch with invalid UTF-8 somewhere goes through that function record by record instead.
    """
    binary = raw if isinstance(raw, pa.Array) else pa.array(raw, pa.binary())
    try:
        text = binary.cast(_STRING)
    except pa.ArrowInvalid:
        return pa.array([decode_properties(p) for p in binary.to_pylist()], _MAP)
    items = pc.split_pattern(text, "\x02")
    pairs = pc.split_pattern(pc.list_flatten(items), "\x01", max_splits=1)
    keep = pc.equal(pc.list_value_length(pairs), 2)
    kept_before = pa.concat_arrays(
        [pa.array([0], _INT), pc.cumulative_sum(keep.cast(_INT)).cast(_INT)]
    )
    offsets = pc.take(kept_before, items.offsets)
    pairs = pairs.filter(keep)
    return pa.MapArray.from_arrays(
        offsets, pc.list_element(pairs, 0), pc.list_element(pairs, 1), type=_MAP
    )
