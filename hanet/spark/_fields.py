"""Where two commit log records differ: the first differing byte and the field it falls in.

Pure and synchronous (no pyspark, no pyarrow): the diff job calls :func:`compare_records` in
its Python workers on the two sides' bytes of a record that differs, and the unit tests call
it directly. The field layout is the record format of ``docs/protocol.md`` §2, taken from a
record decoded by the store's codec (:func:`~hanet.store.decode_record`): field names are the
:class:`~hanet.store.MessageRecord` attribute names (``properties`` for ``properties_raw``),
with ``body_length``, ``topic_length`` and ``properties_length`` for the length prefixes.
"""

from __future__ import annotations

import attrs

from hanet.store import CorruptRecordError, MessageRecord, decode_record
from hanet.store.lowlevel import MAGIC_V2

__all__ = ["RecordDifference", "compare_records", "record_spans"]


@attrs.frozen
class RecordDifference:
    """How two records stored at the same physical offset differ.

    Attributes:
        offset: the physical offset of the first byte that differs (or where the shorter one
            ends, when one is a prefix of the other).
        field: the field that byte falls in (``body``, ``body_crc``, ``store_timestamp``,
            ``properties``, ...), or None when neither side decodes as a record.
        fields: every decoded field whose value differs, in record order (empty when a side
            does not decode).
    """

    offset: int
    field: str | None
    fields: tuple[str, ...]


def record_spans(record: MessageRecord) -> list[tuple[str, int, int]]:
    """``(field, start, end)`` of every field of ``record``, relative to the record start, in
    record order; the last ``end`` is ``record.size``."""
    widths = (
        ("size", 4),
        ("magic", 4),
        ("body_crc", 4),
        ("queue_id", 4),
        ("flag", 4),
        ("queue_offset", 8),
        ("physical_offset", 8),
        ("sys_flag", 4),
        ("born_timestamp", 8),
        ("born_host", len(record.born_host)),
        ("born_port", 4),
        ("store_timestamp", 8),
        ("store_host", len(record.store_host)),
        ("store_port", 4),
        ("reconsume_times", 4),
        ("prepared_transaction_offset", 8),
        ("body_length", 4),
        ("body", len(record.body)),
        ("topic_length", 2 if record.magic == MAGIC_V2 else 1),
        ("topic", len(record.topic.encode())),
        ("properties_length", 2),
        ("properties", len(record.properties_raw)),
    )
    spans = []
    start = 0
    for name, width in widths:
        spans.append((name, start, start + width))
        start += width
    return spans


def _decode(data: bytes, physical_offset: int) -> MessageRecord | None:
    try:
        return decode_record(data, 0, base_offset=physical_offset, check_crc=False)
    except CorruptRecordError:
        return None


def compare_records(master: bytes, slave: bytes, physical_offset: int) -> RecordDifference | None:
    """How the record bytes ``master`` and ``slave``, both stored at ``physical_offset``,
    differ; None when they are the same bytes.

    The bytes before the first difference are equal, and every length and flag that decides
    the layout comes before the field it shapes, so both sides agree on which field the first
    differing byte falls in; the master's layout names it (the slave's when the master's bytes
    do not decode).
    """
    if master == slave:
        return None
    common = min(len(master), len(slave))
    first = next((i for i in range(common) if master[i] != slave[i]), common)
    m, s = _decode(master, physical_offset), _decode(slave, physical_offset)
    layout = m or s
    field = None
    if layout is not None:
        field = next((name for name, lo, hi in record_spans(layout) if lo <= first < hi), None)
    fields: tuple[str, ...] = ()
    if m is not None and s is not None:
        fields = tuple(
            "properties" if name == "properties_raw" else name
            for name in MessageRecord._fields
            if getattr(m, name) != getattr(s, name)
        )
    return RecordDifference(offset=physical_offset + first, field=field, fields=fields)
