"""Validate a whole region of commit log bytes in one call: the record index.

:func:`scan_index` walks ``buf[start:end]`` exactly as :class:`~._scanner.RecordScanner` does
(same validation, same stops, same details) but, instead of one :class:`MessageRecord` per
record, returns what the store needs about each record as packed rows (:data:`ROW`)::

    position, reason, detail, blank_size, count, rows = scan_index(view, 0, wrote, base)
    for physical, size, queue_id, queue_offset, tags_hash, stored, t_start, t_len, t_id in (
        ROW.iter_unpack(rows)
    ): ...

- ``position``: buffer position of the stop (right after the last valid record);
  ``reason``: an index into :data:`STOP_REASONS`; ``detail`` and ``blank_size``: as
  :class:`~._scanner.ScanStop`'s; ``count``: how many rows.
- Each row: physical offset, TOTALSIZE, queue id, queue offset, tags hash (Java
  ``String.hashCode`` of TAGS, 0 without tags, as :attr:`MessageRecord.tags_hash`), store
  timestamp, the topic's UTF-8 bytes as (start, length) in ``buf``, and a topic id: distinct
  topic bytes numbered 0, 1, ... in the order they first appear, so a caller decodes each
  topic once (:func:`topic_names`).

Two implementations with the same signature and output: ``hanet.store._speedups.scan`` (C,
built by ``pip install -e .``) and :func:`scan_index_py`, built on ``RecordScanner`` (the
reference, and the fallback when the extension is missing). :data:`scan_index` is the native
one when it imports and ``HANET_NO_EXTENSIONS`` is not set; :data:`NATIVE_SCANNER` says which.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from ._native import ENABLED, native
from ._scanner import RecordScanner, ScanStop, StopReason

__all__ = [
    "FIXED_COLUMNS",
    "NATIVE_SCANNER",
    "ROW",
    "SCAN_WINDOW",
    "STOP_REASONS",
    "VAR_COLUMNS",
    "EntryGroup",
    "GroupFunction",
    "ScanFunction",
    "ScanResult",
    "group_entries",
    "group_entries_py",
    "native_columns",
    "native_group_entries",
    "native_scan",
    "native_scan_columns",
    "record_columns",
    "record_columns_py",
    "scan_column_windows",
    "scan_columns",
    "scan_columns_py",
    "scan_index",
    "scan_index_py",
    "scan_totals",
    "scan_windows",
    "topic_names",
]

ROW = struct.Struct("=qiiqiqqii")
"""One row: physical offset, size, queue id, queue offset, tags hash, store timestamp,
topic start, topic length, topic id (native byte order, no padding: 52 bytes)."""

STOP_REASONS = (
    StopReason.END,
    StopReason.BLANK,
    StopReason.UNWRITTEN,
    StopReason.INCOMPLETE,
    StopReason.INVALID,
)
"""The stop reason of each code a scan returns."""
_CODES = {reason: code for code, reason in enumerate(STOP_REASONS)}
_I64_MAX = 2**63 - 1


class ScanResult(NamedTuple):
    """What one scan of a buffer found (:func:`scan_index`)."""

    position: int
    """Buffer position of the stop (right after the last valid record)."""
    code: int
    """The stop reason, an index into :data:`STOP_REASONS` (:attr:`reason`)."""
    detail: str
    """As :attr:`ScanStop.detail`."""
    blank_size: int
    """As :attr:`ScanStop.blank_size`."""
    records: int
    """How many valid records (rows)."""
    rows: bytes
    """``records`` packed :data:`ROW` structs."""

    @property
    def reason(self) -> StopReason:
        """The stop reason."""
        return STOP_REASONS[self.code]

    def stop(self, base_offset: int) -> ScanStop:
        """The :class:`ScanStop` of this scan of a buffer whose byte 0 is at ``base_offset``."""
        return ScanStop(
            base_offset + self.position, STOP_REASONS[self.code], self.detail, self.blank_size
        )


Buffer = bytes | bytearray | memoryview
ScanFunction = Callable[..., ScanResult]
"""A scan: ``(buf, start=0, end=None, base_offset=0, limit=None, *, check_crc=True,
check_physical_offset=False)`` (:func:`scan_index_py`'s signature)."""


def scan_index_py(
    buf: Buffer,
    start: int = 0,
    end: int | None = None,
    base_offset: int = 0,
    limit: int | None = None,
    *,
    check_crc: bool = True,
    check_physical_offset: bool = False,
) -> ScanResult:
    """The pure-Python :func:`scan_index`: :class:`RecordScanner` and a row per record.

    Raises:
        ValueError: ``start`` is negative, or ``base_offset`` is negative or so large that an
            offset in ``buf`` would not fit in an ``i64``.
    """
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    if start < 0:
        raise ValueError("start must not be negative")
    if base_offset < 0 or base_offset > _I64_MAX - len(view):
        raise ValueError("base_offset out of range")
    scanner = RecordScanner(
        view,
        start,
        end,
        base_offset=base_offset,
        check_crc=check_crc,
        check_physical_offset=check_physical_offset,
        limit=limit,
    )
    rows = bytearray()
    pack = ROW.pack
    topic_ids: dict[str, int] = {}
    count = 0
    for record in scanner:
        offset = scanner.record_offset
        topic_len = len(record.topic.encode())
        topic_start = (
            offset - base_offset + record.size - 2 - len(record.properties_raw) - topic_len
        )
        topic_id = topic_ids.setdefault(record.topic, len(topic_ids))
        rows += pack(
            offset,
            record.size,
            record.queue_id,
            record.queue_offset,
            record.tags_hash,
            record.store_timestamp,
            topic_start,
            topic_len,
            topic_id,
        )
        count += 1
    stop = scanner.stop
    assert stop is not None
    return ScanResult(
        scanner.position, _CODES[stop.reason], stop.detail, stop.blank_size, count, bytes(rows)
    )


def topic_names(buf: Buffer, rows: bytes) -> Iterator[str]:
    """The distinct topics of ``rows`` (rows of a scan of ``buf``), in topic id order."""
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    seen = 0
    # A topic's first row opens its first group of the native grouping, and groups come in the
    # order of their first rows: one step a group instead of one a row.
    firsts: Iterator[tuple[Any, ...]] = (
        ((topic_id, start, length) for topic_id, start, length, *_ in native_group_entries(rows))
        if native_group_entries is not None and NATIVE_SCANNER
        else ((topic_id, start, length) for *_, start, length, topic_id in ROW.iter_unpack(rows))
    )
    for topic_id, start, length in firsts:
        if topic_id == seen:
            seen += 1
            yield str(view[start : start + length], "utf-8")


EntryGroup = tuple[int, int, int, int, int, int, bytes, int]
"""``(topic id, topic start, topic length, queue id, first queue offset, count, entries,
max store timestamp)``: see :func:`group_entries_py`."""
GroupFunction = Callable[[Buffer], list[EntryGroup]]

_CQ_ENTRY = struct.Struct(">qiq")


def group_entries_py(rows: Buffer) -> list[EntryGroup]:
    """The consume queue entries of a scan's ``rows``, grouped for one write per queue.

    One group per run of consecutive queue offsets of one (topic id, queue id), in the order
    of each group's first row (so of their first physical offsets); a row whose queue offset
    does not follow the previous row of its queue (a gap or a repeat) starts a new group of
    that queue, so a caller can treat those exactly as a per-record dispatch would.
    ``entries``: ``count`` packed 20-byte consume queue entries (big-endian ``i64`` physical
    offset, ``i32`` size, ``i64`` tags hash) in row order; topic start and length: the topic
    bytes of the group's first row; the max store timestamp of the group's rows.

    The pure-Python reference of ``hanet.store._speedups.group_entries``.

    Raises:
        ValueError: ``rows`` is not a whole number of rows.
    """
    data = memoryview(rows).cast("B")
    if len(data) % ROW.size:
        raise ValueError("rows: not a whole number of rows")
    groups: list[list[Any]] = []
    open_groups: dict[tuple[int, int], list[Any]] = {}
    pack = _CQ_ENTRY.pack
    for (
        physical,
        size,
        queue_id,
        queue_offset,
        tags_hash,
        stored,
        start,
        length,
        tid,
    ) in ROW.iter_unpack(data):
        group = open_groups.get((tid, queue_id))
        if group is None or group[4] + group[5] != queue_offset:
            group = [tid, start, length, queue_id, queue_offset, 0, bytearray(), stored]
            groups.append(group)
            open_groups[tid, queue_id] = group
        group[5] += 1
        group[6] += pack(physical, size, tags_hash)
        group[7] = max(group[7], stored)
    return [
        (tid, start, length, queue_id, first, count, bytes(entries), stored)
        for tid, start, length, queue_id, first, count, entries, stored in groups
    ]


_native_scan: Callable[..., tuple[int, int, str, int, int, bytes]] | None = native("scan")
_new_tuple = tuple.__new__


def _wrap_native(
    scan: Callable[..., tuple[int, int, str, int, int, bytes]],
) -> ScanFunction:
    def native_scan(*args: Any, **flags: Any) -> ScanResult:
        """``hanet.store._speedups.scan``: :func:`scan_index_py` in C (same signature, the
        flags keyword-only there too), same output."""
        return _new_tuple(ScanResult, scan(*args, **flags))

    return native_scan


native_scan: ScanFunction | None = None if _native_scan is None else _wrap_native(_native_scan)
"""``hanet.store._speedups.scan`` (a :class:`ScanResult`), or None when the extension is not
built."""
NATIVE_SCANNER = native_scan is not None and ENABLED
"""Whether :data:`scan_index` is the native scan (built, and ``HANET_NO_EXTENSIONS`` unset)."""
scan_index: ScanFunction = (
    native_scan if native_scan is not None and NATIVE_SCANNER else scan_index_py
)
"""The native scan when :data:`NATIVE_SCANNER`, else :func:`scan_index_py`."""
native_group_entries: GroupFunction | None = native("group_entries")
"""``hanet.store._speedups.group_entries``, or None when the extension is not built."""
group_entries: GroupFunction = (
    native_group_entries
    if native_group_entries is not None and NATIVE_SCANNER
    else group_entries_py
)
"""The native grouping when :data:`NATIVE_SCANNER`, else :func:`group_entries_py`."""


SCAN_WINDOW = 16 << 20
"""Bytes :func:`scan_windows` validates per call (bounds the rows held at once)."""


def scan_windows(
    buf: Buffer,
    start: int = 0,
    end: int | None = None,
    base_offset: int = 0,
    limit: int | None = None,
    *,
    check_crc: bool = True,
    check_physical_offset: bool = False,
    window: int = SCAN_WINDOW,
    scan: ScanFunction | None = None,
) -> Iterator[ScanResult]:
    """:data:`scan_index` over ``buf[start:end]`` in windows of about ``window`` bytes.

    Yields one result per window; their rows together are the rows of one whole scan, and the
    **last** result's stop is the whole scan's stop (a window's own END or INCOMPLETE at its
    edge is not a stop: the next window starts at its position, and a record larger than the
    window widens it). Topic ids are numbered per window. A scan's checks do not depend on
    ``end`` except for END and INCOMPLETE, so the outcome is the one of a single call.
    ``scan``: the implementation (default :data:`scan_index`).
    """
    scan_function = scan_index if scan is None else scan
    length = len(buf) if not isinstance(buf, memoryview) else buf.nbytes
    stop_end = length if end is None else min(end, length)
    position = start
    size = window
    while True:
        window_end = min(stop_end, position + size)
        result = scan_function(
            buf,
            position,
            window_end,
            base_offset,
            limit,
            check_crc=check_crc,
            check_physical_offset=check_physical_offset,
        )
        reached = result.position
        if window_end >= stop_end or result.reason not in (StopReason.END, StopReason.INCOMPLETE):
            yield result
            return
        if result.records:
            yield result
        size = size * 2 if reached == position else window
        position = reached


def scan_totals(
    buf: Buffer,
    start: int = 0,
    end: int | None = None,
    base_offset: int = 0,
    limit: int | None = None,
    *,
    check_crc: bool = True,
    check_physical_offset: bool = False,
) -> tuple[ScanResult, int]:
    """:func:`scan_windows` for its outcome only: the last result (the stop) and the number of
    valid records."""
    count = 0
    result: ScanResult | None = None
    for result in scan_windows(
        buf,
        start,
        end,
        base_offset,
        limit,
        check_crc=check_crc,
        check_physical_offset=check_physical_offset,
    ):
        count += result.records
    assert result is not None
    return result, count


FIXED_COLUMNS: dict[str, str] = {
    "physical_offset": "q",
    "size": "i",
    "queue_id": "i",
    "queue_offset": "q",
    "tags_hash": "i",
    "store_timestamp": "q",
    "topic_id": "i",
    "magic": "q",
    "body_crc": "i",
    "flag": "i",
    "sys_flag": "i",
    "born_timestamp": "q",
    "reconsume_times": "i",
}
"""The fixed-width columns of :func:`record_columns` and their struct codes (int64 / int32)."""
VAR_COLUMNS = (
    "topic",
    "body",
    "properties",
    "tags",
    "keys",
    "born_host",
    "store_host",
    "msg_id",
)
"""The variable-width columns of :func:`record_columns` (Arrow string/binary layout)."""

ColumnValue = bytes | tuple[bytes, bytes, bytes | None, int]
_ROW_FIELDS = (
    "physical_offset",
    "size",
    "queue_id",
    "queue_offset",
    "tags_hash",
    "store_timestamp",
    "topic_start",
    "topic_len",
    "topic_id",
)
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_HEADER_V4 = 88
_MIN_RECORD_SIZE = 91
_MAGIC_V1 = 0xDAA320A7


def _property_value(props: bytes, key: bytes) -> bytes | None:
    """The last value of ``key`` in a raw properties field (items without \\x01 skipped)."""
    found = None
    for item in props.split(b"\x02"):
        name, sep, value = item.partition(b"\x01")
        if sep and name == key:
            found = value
    return found


def record_columns_py(
    buf: Buffer, rows: bytes, base_offset: int, names: Sequence[str]
) -> list[ColumnValue]:
    """The pure-Python ``hanet.store._speedups.columns``: per-column buffers of a scan's rows.

    ``rows``: rows of a scan of ``buf`` with ``base_offset``. For each name, a fixed-width
    column (:data:`FIXED_COLUMNS`) is ``bytes`` of native-endian int64/int32 values, one per
    row; a variable-width one (:data:`VAR_COLUMNS`) is ``(offsets, data, validity,
    null_count)`` in Arrow's string/binary layout: int32 offsets, ``validity`` None or an
    LSB-first bitmap. ``topic``, ``body``, ``properties`` (raw): the fields' bytes; ``tags`` /
    ``keys``: the property's last value (null without it); ``born_host`` / ``store_host``: the
    raw address and port (8 or 20 bytes); ``msg_id``: RocketMQ's offset message id (upper hex).

    Raises:
        ValueError: an unknown name, ``rows`` not whole rows, or a row that is not a record of
            ``buf``.
    """
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    if len(rows) % ROW.size:
        raise ValueError("rows is not a whole number of rows")
    if base_offset < 0 or base_offset > _I64_MAX - len(view):
        raise ValueError("base_offset out of range")
    unknown = [n for n in names if n not in FIXED_COLUMNS and n not in VAR_COLUMNS]
    if unknown:
        raise ValueError(f"unknown column {unknown[0]!r}")
    located = [_locate(view, row, base_offset, i) for i, row in enumerate(ROW.iter_unpack(rows))]
    out: list[ColumnValue] = []
    for name in names:
        code = FIXED_COLUMNS.get(name)
        if code is not None:
            values = [fields[name] for fields in located]
            out.append(struct.pack(f"={len(values)}{code}", *values))
        else:
            out.append(_var_column([fields[name] for fields in located]))
    return out


def _var_column(values: list[bytes | None]) -> tuple[bytes, bytes, bytes | None, int]:
    offsets = [0]
    data = bytearray()
    bits = bytearray((len(values) + 7) // 8)
    nulls = 0
    for i, value in enumerate(values):
        if value is None:
            nulls += 1
        else:
            bits[i >> 3] |= 1 << (i & 7)
            data += value
        offsets.append(len(data))
    validity = bytes(bits) if nulls else None
    return struct.pack(f"={len(offsets)}i", *offsets), bytes(data), validity, nulls


def _locate(view: memoryview, row: tuple[int, ...], base: int, i: int) -> dict[str, Any]:
    fields: dict[str, Any] = dict(zip(_ROW_FIELDS, row, strict=True))
    size = fields["size"]
    pos = fields["physical_offset"] - base
    bad = ValueError(f"row {i} does not describe a record of the buffer")
    if pos < 0 or size < _MIN_RECORD_SIZE or pos > len(view) - size:
        raise bad
    r = bytes(view[pos : pos + size])
    sys_flag = _I32.unpack_from(r, 36)[0]
    born6 = 12 if sys_flag & 0x10 else 0
    store6 = 12 if sys_flag & 0x20 else 0
    hsize = _HEADER_V4 + born6 + store6
    if hsize + 3 > size:
        raise bad
    body_len = _I32.unpack_from(r, hsize - 4)[0]
    if body_len < 0 or body_len > size - hsize - 3:
        raise bad
    p = hsize + body_len
    magic = _U32.unpack_from(r, 4)[0]
    if magic == _MAGIC_V1:
        topic_len = r[p]
        p += 1
    else:
        topic_len = _I16.unpack_from(r, p)[0]
        p += 2
    if topic_len < 0 or p + topic_len + 2 > size:
        raise bad
    if fields["topic_start"] != pos + p or fields["topic_len"] != topic_len:
        raise bad
    topic = r[p : p + topic_len]
    p += topic_len
    props_len = _I16.unpack_from(r, p)[0]
    p += 2
    if props_len < 0 or p + props_len != size:
        raise bad
    props = r[p:]
    store_host = r[64 + born6 : 64 + born6 + 8 + store6]
    fields.update(
        magic=magic,
        body_crc=_I32.unpack_from(r, 8)[0],
        flag=_I32.unpack_from(r, 16)[0],
        sys_flag=sys_flag,
        born_timestamp=_I64.unpack_from(r, 40)[0],
        reconsume_times=_I32.unpack_from(r, 72 + born6 + store6)[0],
        topic=topic,
        body=r[hsize : hsize + body_len],
        properties=props,
        tags=_property_value(props, b"TAGS"),
        keys=_property_value(props, b"KEYS"),
        born_host=r[48 : 48 + 8 + born6],
        store_host=store_host,
        msg_id=(store_host + _I64.pack(fields["physical_offset"])).hex().upper().encode(),
    )
    return fields


native_columns: Callable[..., list[ColumnValue]] | None = native("columns")
"""``hanet.store._speedups.columns``, or None when the extension is not built."""
record_columns: Callable[..., list[ColumnValue]] = (
    native_columns if native_columns is not None and NATIVE_SCANNER else record_columns_py
)
"""The native ``columns`` when :data:`NATIVE_SCANNER`, else :func:`record_columns_py`."""


ScanColumnsFunction = Callable[..., tuple[ScanResult, list[ColumnValue]]]
"""``(buf, start, end, base_offset, limit, names, max_rows, *, check_crc=True,
check_physical_offset=False)``: :func:`scan_columns_py`'s signature."""


def scan_columns_py(
    buf: Buffer,
    start: int,
    end: int | None,
    base_offset: int,
    limit: int | None,
    names: Sequence[str],
    max_rows: int,
    *,
    check_crc: bool = True,
    check_physical_offset: bool = False,
) -> tuple[ScanResult, list[ColumnValue]]:
    """The pure-Python ``hanet.store._speedups.scan_columns``: :func:`scan_index_py` that also
    stops (reason END, right after the last one) once it has found ``max_rows`` records, and
    :func:`record_columns_py` of the rows it found.

    Raises:
        ValueError: as :func:`scan_index_py` and :func:`record_columns_py`, or ``max_rows`` < 1.
    """
    if max_rows < 1:
        raise ValueError("max_rows must be positive")
    result = scan_index_py(
        buf,
        start,
        end,
        base_offset,
        limit,
        check_crc=check_crc,
        check_physical_offset=check_physical_offset,
    )
    if result.records >= max_rows:
        rows = result.rows[: max_rows * ROW.size]
        physical, size = ROW.unpack_from(rows, (max_rows - 1) * ROW.size)[:2]
        next_record = physical + size - base_offset
        result = ScanResult(next_record, STOP_REASONS.index(StopReason.END), "", 0, max_rows, rows)
    return result, record_columns_py(buf, result.rows, base_offset, names)


def _wrap_scan_columns(function: Callable[..., Any]) -> ScanColumnsFunction:
    def native_scan_columns(*args: Any, **flags: Any) -> tuple[ScanResult, list[ColumnValue]]:
        """``hanet.store._speedups.scan_columns``: :func:`scan_columns_py` in C, one pass (each
        record's columns taken right after its checks), same output."""
        found, columns = function(*args, **flags)
        return ScanResult(*found), columns

    return native_scan_columns


_native_scan_columns = native("scan_columns")
native_scan_columns: ScanColumnsFunction | None = (
    None if _native_scan_columns is None else _wrap_scan_columns(_native_scan_columns)
)
"""``hanet.store._speedups.scan_columns``, or None when the extension is not built."""
scan_columns: ScanColumnsFunction = (
    native_scan_columns if native_scan_columns is not None and NATIVE_SCANNER else scan_columns_py
)
"""The native ``scan_columns`` when :data:`NATIVE_SCANNER`, else :func:`scan_columns_py`."""


def scan_column_windows(
    buf: Buffer,
    start: int,
    end: int | None,
    base_offset: int,
    limit: int | None,
    names: Sequence[str],
    max_rows: int,
    *,
    check_crc: bool = True,
    check_physical_offset: bool = False,
    window: int = SCAN_WINDOW,
    scan: ScanColumnsFunction | None = None,
) -> Iterator[tuple[ScanResult, list[ColumnValue]]]:
    """:func:`scan_windows` with each result's columns (``names``, as :func:`record_columns`)
    taken in the same pass, at most ``max_rows`` rows a result: the rows of all results are
    those of :func:`scan_windows`, and the last result's stop is the whole scan's. ``scan``:
    the implementation (default :data:`scan_columns`)."""
    scan_function = scan_columns if scan is None else scan
    length = len(buf) if not isinstance(buf, memoryview) else buf.nbytes
    stop_end = length if end is None else min(end, length)
    position = start
    size = window
    while True:
        window_end = min(stop_end, position + size)
        result, columns = scan_function(
            buf,
            position,
            window_end,
            base_offset,
            limit,
            names,
            max_rows,
            check_crc=check_crc,
            check_physical_offset=check_physical_offset,
        )
        reached = result.position
        full = result.records == max_rows
        if not full and (
            window_end >= stop_end or result.reason not in (StopReason.END, StopReason.INCOMPLETE)
        ):
            yield result, columns
            return
        if result.records:
            yield result, columns
        size = size * 2 if reached == position else window
        position = reached
