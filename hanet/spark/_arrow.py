"""Commit log ranges as Arrow record batches (pyarrow only, no pyspark).

What a partition of the ``commitlog`` data source does, usable without Spark (the benchmark's
baseline and the unit tests call it directly). Records are decoded and validated by the
store's own scanner (:class:`hanet.store.RecordScanner`); this module only turns batches of
its tuples into columns, computing only the columns asked for:

- each field is pulled out of a batch with one ``map(itemgetter(i), records)`` (a
  ``zip(*records)`` of every field costs 20 times more) and ``pa.array`` builds the column;
- properties are split into a ``map<string,string>`` with Arrow compute kernels
  (``split_pattern`` on ``\\x02`` then ``\\x01``); ``tags`` / ``keys`` alone come from a
  regular expression over the raw properties;
- message ids and host strings come from the codec (:func:`~hanet.store.offset_msg_id`,
  :func:`~hanet.store.format_host`) once per distinct store host, the per-record part of a
  message id (the physical offset in hex) from one ``struct.pack`` per batch.

A record whose only fault is its body CRC becomes a row with ``crc_ok = false`` and the scan
goes on after it. Anything else that is not a record (garbage, a torn tail, a blank record that
does not end its file, unwritten zeros in a file that is not the last) ends the scan of the
range with one row of ``status = 'corrupt'`` naming the offset and the reason.
"""

from __future__ import annotations

import gc
import mmap
import struct
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hanet.store import (
    CorruptRecordError,
    MessageRecord,
    RecordScanner,
    ScanStop,
    StopReason,
    decode_properties,
    decode_record,
    format_host,
    offset_msg_id,
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

_HEX_DIGITS = 16  # a physical offset in a message id


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


@contextmanager
def _gc_paused() -> Iterator[None]:
    # A batch is thousands of freshly built tuples kept alive: the cyclic collector would walk
    # them again and again (measured: a third of the conversion time). None of them has cycles.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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

    Good records give ``status = 'ok'`` rows (``crc_ok`` false for a body CRC mismatch); the
    scan ends at the range's end, at a blank record that ends the file, at unwritten zeros in
    the store's last file, or at anything else with one final ``status = 'corrupt'`` row.
    Never raises for bad data. The file is mapped read-only and unmapped before returning.
    """
    converter = _BatchBuilder(part, commit_log_schema(include_body, columns))
    with open(part.path, "rb") as f:
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = memoryview(mapping)
    scanner: RecordScanner | None = None
    records: Iterator[MessageRecord] | None = None
    try:
        position = part.start
        while True:
            scanner = RecordScanner(
                view,
                position,
                part.end,
                base_offset=part.file_start,
                check_crc=True,
                check_physical_offset=True,
            )
            records = iter(scanner)
            while True:
                with _gc_paused():
                    batch = _take(records, batch_rows, batch_bytes)
                    if not batch:
                        break
                    built = converter.build(batch, None)
                yield built
            stop = scanner.stop
            assert stop is not None
            bad_crc = _crc_failure(view, stop, part.file_start) if _is_invalid(stop) else None
            if bad_crc is None:
                corrupt = _judge_stop(stop, part, len(view))
                if corrupt is not None:
                    yield converter.corrupt_row(*corrupt)
                return
            yield converter.build([bad_crc], False)
            position = stop.offset - part.file_start + bad_crc.size
    finally:
        # The scanner's views of the mapping must go before the mapping can close (they do
        # unless the caller abandoned the generator mid-batch: then the GC unmaps it later).
        scanner = records = None
        try:
            view.release()
            mapping.close()
        except BufferError:  # pragma: no cover
            pass


def _take(records: Iterator[MessageRecord], rows: int, max_bytes: int) -> list[MessageRecord]:
    batch: list[MessageRecord] = []
    append = batch.append
    total = 0
    for record in records:
        append(record)
        total += record[0]
        if len(batch) >= rows or total >= max_bytes:
            break
    return batch


def _is_invalid(stop: ScanStop) -> bool:
    return stop.reason is StopReason.INVALID


def _crc_failure(view: memoryview, stop: ScanStop, file_start: int) -> MessageRecord | None:
    """The record at an INVALID stop if its only fault is the body CRC, else None."""
    try:
        record = decode_record(
            view, stop.offset - file_start, base_offset=file_start, check_crc=False
        )
    except CorruptRecordError:
        return None
    if record.physical_offset != stop.offset or record.crc_ok:
        return None
    return record


def _judge_stop(stop: ScanStop, part: CommitLogRange, file_size: int) -> tuple[int, str] | None:
    """``(offset, reason)`` of the corrupt row a scan stop calls for, or None (a normal end)."""
    reason = stop.reason
    if reason is StopReason.END:
        return None
    if reason is StopReason.BLANK:
        if stop.offset - part.file_start + stop.blank_size == file_size:
            return None
        return stop.offset, f"blank record of {stop.blank_size} bytes does not end the file"
    if reason is StopReason.UNWRITTEN:
        if part.last_file:
            return None
        return stop.offset, "unwritten data, but more files follow (a full file ends blank)"
    return stop.offset, stop.detail or reason.value


_FIELD_GETTERS = {name: itemgetter(i) for i, name in enumerate(MessageRecord._fields)}


class _Fields(dict[str, list[Any]]):
    """The values of one record field across a batch, extracted on first use (one ``map`` of
    an ``itemgetter`` per field: ``zip(*records)`` of every field costs 20 times more)."""

    def __init__(self, records: list[MessageRecord]) -> None:
        super().__init__()
        self._records = records

    def __missing__(self, name: str) -> list[Any]:
        values = list(map(_FIELD_GETTERS[name], self._records))
        self[name] = values
        return values


_PLAIN_COLUMNS = {
    "physical_offset": _LONG,
    "size": _INT,
    "magic": _LONG,
    "topic": _STRING,
    "queue_id": _INT,
    "queue_offset": _LONG,
    "flag": _INT,
    "sys_flag": _INT,
    "born_timestamp": _LONG,
    "store_timestamp": _LONG,
    "reconsume_times": _INT,
    "body_crc": _INT,
    "body": pa.binary(),
}
"""Columns that are a field of :class:`~hanet.store.MessageRecord` as it is."""


class _BatchBuilder:
    """Builds the batches of one range; caches host strings and message id prefixes."""

    def __init__(self, part: CommitLogRange, schema: pa.Schema) -> None:
        self._schema = schema
        self._names = tuple(schema.names)
        self._want_map = "properties" in self._names
        self._store = pa.scalar(part.store, _STRING)
        self._file = pa.scalar(part.path.rsplit("/", 1)[-1], _STRING)
        self._ok = pa.scalar("ok", _STRING)
        self._hosts: dict[tuple[bytes, int], str] = {}
        self._id_prefixes: dict[tuple[bytes, int], str] = {}

    def _host_column(self, addresses: Sequence[bytes], ports: Sequence[int]) -> pa.Array:
        cache = self._hosts
        if len(set(addresses)) == 1 and len(set(ports)) == 1:  # the usual case: one host
            key = (addresses[0], ports[0])
            if key not in cache:
                cache[key] = format_host(*key)
            return pa.repeat(pa.scalar(cache[key], _STRING), len(addresses))
        keys = list(zip(addresses, ports, strict=True))
        for key in set(keys).difference(cache):
            cache[key] = format_host(*key)
        return pa.array(list(map(cache.__getitem__, keys)), _STRING)

    def _msg_ids(
        self, addresses: Sequence[bytes], ports: Sequence[int], offsets: Sequence[int]
    ) -> pa.Array:
        n = len(offsets)
        cache = self._id_prefixes
        prefix: Any
        if len(set(addresses)) == 1 and len(set(ports)) == 1:
            key = (addresses[0], ports[0])
            if key not in cache:
                cache[key] = offset_msg_id(key[0], key[1], 0)[:-_HEX_DIGITS]
            prefix = pa.scalar(cache[key], _STRING)
        else:
            keys = list(zip(addresses, ports, strict=True))
            for key in set(keys).difference(cache):
                cache[key] = offset_msg_id(key[0], key[1], 0)[:-_HEX_DIGITS]
            prefix = pa.array(list(map(cache.__getitem__, keys)), _STRING)
        # The offset part of every id at once: one pack, one hex(), one string buffer.
        digits = struct.pack(f">{n}q", *offsets).hex().upper().encode()
        value_offsets = pa.array(range(0, _HEX_DIGITS * (n + 1), _HEX_DIGITS), _INT)
        tails = pa.StringArray.from_buffers(n, value_offsets.buffers()[1], pa.py_buffer(digits))
        return pc.binary_join_element_wise(prefix, tails, "")

    def build(self, records: list[MessageRecord], crc_ok: bool | None) -> pa.RecordBatch:
        """A batch of ``status = 'ok'`` rows; ``crc_ok`` None means all passed the check."""
        fields = _Fields(records)
        properties: PropertyColumns | None = None
        arrays = []
        for name in self._names:
            plain = _PLAIN_COLUMNS.get(name)
            if plain is not None:
                arrays.append(pa.array(fields[name], plain))
            elif name in _PROPERTY_KEYS:
                if properties is None:
                    properties = PropertyColumns(fields["properties_raw"], self._want_map)
                arrays.append(properties.column(name))
            else:
                arrays.append(self._derived(name, fields, len(records), crc_ok))
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)

    def _derived(
        self, name: str, fields: Mapping[str, Sequence[Any]], n: int, crc_ok: bool | None
    ) -> pa.Array:
        if name == "store":
            return pa.repeat(self._store, n)
        if name == "file":
            return pa.repeat(self._file, n)
        if name == "born_host":
            return self._host_column(fields["born_host"], fields["born_port"])
        if name == "store_host":
            return self._host_column(fields["store_host"], fields["store_port"])
        if name == "crc_ok":
            return pa.repeat(pa.scalar(True if crc_ok is None else crc_ok), n)
        if name == "msg_id":
            return self._msg_ids(
                fields["store_host"], fields["store_port"], fields["physical_offset"]
            )
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
    :func:`~hanet.store.decode_properties`) and the expression the first."""

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


def properties_map_column(raw: Sequence[bytes]) -> pa.Array:
    """RocketMQ property fields (``name \\x01 value \\x02`` ...) as a ``map<string,string>``.

    Items without ``\\x01`` are skipped, as :func:`~hanet.store.decode_properties` does; a
    batch with invalid UTF-8 somewhere goes through that function record by record instead.
    """
    try:
        text = pa.array(raw, pa.binary()).cast(_STRING)
    except pa.ArrowInvalid:
        return pa.array([decode_properties(p) for p in raw], _MAP)
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
