"""Repairing a damaged commit log range with the intact bytes a replica holds.

The bytes (fetched from a slave, e.g. through HANET_READ_LOG) must be exactly the damaged range:
whole records that pass every check (magic, sizes, body CRC, the whole-record CRC where present,
PHYSICALOFFSET equal to each record's own offset), ending exactly at the range's end (or a
blank record ending its file). Only then are they written over the damaged bytes (and
fsynced), the consume queue entries of their records filled in (the gaps dispatch left) and
the mark cleared.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from ._consume_queue import CQ_BLANK_SIZE
from ._damage import DamagedRange, damage_end
from ._errors import CorruptRecordError
from ._index import ROW, scan_index
from ._judge import StopKind, judge_stop

if TYPE_CHECKING:
    from ._store import CommitLogStore

__all__ = ["mark_read_damage", "repair_range"]

logger = logging.getLogger(__name__)


def repair_range(store: CommitLogStore, damaged: DamagedRange, data: bytes) -> int:
    """Write ``data`` over ``damaged`` (one of ``store.damage.ranges``) after checking it;
    returns how many records it holds.

    Raises:
        CorruptRecordError: ``data`` is not exactly the range's bytes as whole valid records
            (nothing is written).
    """
    start, end = damaged.start, damaged.end
    if len(data) != end - start:
        raise CorruptRecordError(
            start, f"{len(data)} bytes offered for the damaged range {damaged} ({end - start})"
        )
    file_size = store.config.mapped_file_size
    view = memoryview(data)
    rows: list[tuple[tuple[int, ...], str]] = []
    scans: list[tuple[memoryview, int, bytes]] = []  # (segment, its offset, its rows)
    position = start
    while position < end:  # one file at a time: a range may go on in the next file
        file_end = position - position % file_size + file_size
        segment = view[position - start : min(end, file_end) - start]
        result = scan_index(
            segment, 0, None, position, file_end - position, check_physical_offset=True
        )
        verdict = judge_stop(result.stop(position), file_end, written=True)
        reached = verdict.stop.offset
        if verdict.damaged or (reached != min(end, file_end) and verdict.kind is StopKind.DATA_END):
            detail = verdict.stop.detail or "it does not end on a record boundary"
            raise CorruptRecordError(reached, f"the bytes offered for {damaged}: {detail}")
        rows.extend(
            (row, str(segment[row[6] : row[6] + row[7]], "utf-8"))
            for row in ROW.iter_unpack(result.rows)
        )
        scans.append((segment, position, result.rows))
        position = min(end, file_end)
    position = start
    while position < end:
        mapped = store.commit_log.find(position)
        if mapped is None:  # pragma: no cover - a damaged range lies inside the data
            raise CorruptRecordError(position, "no commit log file holds it")
        chunk = view[position - start : min(end, mapped.end_offset) - start]
        mapped.write(position - mapped.start_offset, chunk)
        os.fdatasync(mapped.fileno())
        position += len(chunk)
    for (physical, size, queue_id, queue_offset, tags_hash, *_), topic in rows:
        queue = store._queue_for(topic, queue_id)
        if queue.max_queue_offset <= queue_offset:  # no later record of its queue
            queue.append(queue_offset, physical, size, tags_hash)
            continue
        entry = queue.get(queue_offset)
        if entry is not None and entry[1] == CQ_BLANK_SIZE:  # the gap dispatch left
            queue.fill_blank(queue_offset, physical, size, tags_hash)
    if store.index is not None:  # keys the index lost with the damage (none added twice)
        for segment, base, segment_rows in scans:
            store.index.index_repaired(segment, base, segment_rows)
    store.damage.remove(damaged)
    return len(rows)


def mark_read_damage(store: CommitLogStore, offset: int, reason: str) -> DamagedRange | None:
    """Mark the record at ``offset``, which failed its checks on a read, and what follows up to
    the next valid record (or its file's end) damaged: see ``CommitLogStore.mark_damaged``."""
    known = store.damaged(offset, offset + 1)
    mapped = store.commit_log.find(offset)
    if known is not None or mapped is None or not offset < store.max_offset:
        return known
    end = damage_end(mapped.view, offset, mapped.start_offset, store.max_offset)
    damaged = DamagedRange(offset, end, reason)
    logger.error("%s: commit log bytes %s fail their checks: marked damaged", store.root, damaged)
    store.damage.add(damaged)
    return damaged
