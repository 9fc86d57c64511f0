"""Consume queue files as Arrow record batches (pyarrow only, no pyspark): what a partition
of the ``consumequeue`` data source does.

A consume queue file holds 20-byte entries (``i64`` commit log offset, ``i32`` size, ``i64``
tag hash); the entry of queue offset ``q`` is at byte ``q * 20`` of the queue, files are named
by their start byte (docs/protocol.md section 3).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from hanet.store.lowlevel import CQ_ENTRY_SIZE

from ._layout import ConsumeQueueFile

__all__ = ["CONSUME_QUEUE_COLUMNS", "consume_queue_batches", "consume_queue_schema"]

_STRING = pa.string()
_INT = pa.int32()
_LONG = pa.int64()

CONSUME_QUEUE_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("store", _STRING),
    ("topic", _STRING),
    ("queue_id", _INT),
    ("queue_offset", _LONG),
    ("physical_offset", _LONG),
    ("size", _INT),
    ("tag_hash", _LONG),
)
"""Name and Arrow type of each consume queue column."""

_ENTRY = struct.Struct(">qiq")
_BLANK_SIZE = 0x7FFFFFFF  # RocketMQ's fillPreBlank entries
_FIRST_CHUNK = 1024


def consume_queue_schema() -> pa.Schema:
    """The Arrow schema of consume queue batches."""
    return pa.schema(list(CONSUME_QUEUE_COLUMNS))


def consume_queue_batches(
    part: ConsumeQueueFile, *, batch_rows: int = 65536
) -> Iterator[pa.RecordBatch]:
    """The entries of one consume queue file as Arrow record batches.

    Entries run up to the first one of size 0 (the unwritten rest of the file); the blank
    entries RocketMQ writes before the first real one of a queue that starts late are skipped,
    and so are entries below the store's first commit log offset (their records were deleted
    by retention: the queue's min offset is past them).
    """
    schema = consume_queue_schema()
    with open(part.path, "rb") as f:
        data = memoryview(f.read())
    first_queue_offset = part.start // CQ_ENTRY_SIZE
    index = 0
    count = len(data) // CQ_ENTRY_SIZE
    step = min(batch_rows, _FIRST_CHUNK)  # most files are mostly unwritten: look small first
    while index < count:
        stop = min(count, index + step)
        step = min(batch_rows, step * 4)
        chunk = data[index * CQ_ENTRY_SIZE : stop * CQ_ENTRY_SIZE]
        entries = list(_ENTRY.iter_unpack(chunk))
        end = _first_unwritten(entries)
        kept = [
            (first_queue_offset + index + i, *e)
            for i, e in enumerate(entries[:end])
            if e[1] != _BLANK_SIZE and e[0] >= part.log_start
        ]
        if kept:
            queue_offsets, offsets, sizes, hashes = zip(*kept, strict=True)
            n = len(kept)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.repeat(pa.scalar(part.store, _STRING), n),
                    pa.repeat(pa.scalar(part.topic, _STRING), n),
                    pa.repeat(pa.scalar(part.queue_id, _INT), n),
                    pa.array(queue_offsets, _LONG),
                    pa.array(offsets, _LONG),
                    pa.array(sizes, _INT),
                    pa.array(hashes, _LONG),
                ],
                schema=schema,
            )
        if end < len(entries):
            return
        index = stop


def _first_unwritten(entries: list[tuple[int, int, int]]) -> int:
    for i, entry in enumerate(entries):
        if entry[1] == 0:
            return i
    return len(entries)
