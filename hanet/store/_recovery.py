"""Finding the end of the valid data of a commit log at open (PROTOCOL.md §4).

Recovery walks records from a safe starting file: after a clean exit the third-last file (as
RocketMQ), after a crash the newest file whose first record was stored at least 3 s before the
checkpoint's physical timestamp (else the first file). A valid record advances; a blank record
jumps to the next file (:func:`~._judge.judge_stop` says what each stop means). Bad data
(unknown magic, a size beyond the file, a CRC mismatch, a PHYSICALOFFSET that is not the
record's own offset, a zeroed hole) is not a reason to drop what follows: the walk
resynchronises on the next record that passes every check and the bytes in between become a
damaged range (:mod:`._damage`); only when nothing valid follows does the data end there.

This module only finds the end; the store truncates the commit log there, drops the consume
queue entries at or past it, and re-dispatches from the walk's start (dispatch is idempotent).
"""

from __future__ import annotations

from functools import partial

import attrs

from ._codec import MIN_RECORD_SIZE
from ._damage import DamagedRange, next_valid_record
from ._errors import CorruptRecordError
from ._index import scan_totals
from ._judge import StopKind, judge_stop
from ._mapped_file import MappedFile
from ._mapped_queue import MappedFileQueue
from ._scanner import ScanStop, StopReason, decode_record

__all__ = ["RecoveryResult", "find_valid_end"]

_CHECKPOINT_MARGIN_MS = 3000
_NORMAL_RECOVERY_FILES = 3


@attrs.frozen
class RecoveryResult:
    """The outcome of the recovery walk.

    Attributes:
        start_offset: where the walk began (records before it were trusted).
        end_offset: the end of the valid data (the new max offset).
        stop: why the walk stopped (None when it ran to the end of the last file).
        records: how many valid records the walk read.
        data_after: when the walk stopped at zeros (``UNWRITTEN``): the offset of non-zero
            data after them (the rest of that file, or a later file), i.e. the zeros are a
            hole and not the end of the data; else None.
        later_files: how many files follow the one where the walk stopped (they hold no
            valid data and are deleted).
        damaged: ranges that failed their checks with valid records after them: kept (not
            truncated), to be marked damaged and repaired.
    """

    start_offset: int
    end_offset: int
    stop: ScanStop | None
    records: int
    data_after: int | None = None
    later_files: int = 0
    damaged: tuple[DamagedRange, ...] = ()


def _start_index(files: MappedFileQueue, abnormal: bool, checkpoint_timestamp: int) -> int:
    count = len(files.files)
    if not abnormal:
        return max(0, count - _NORMAL_RECOVERY_FILES)
    if checkpoint_timestamp <= 0:
        return 0
    limit = checkpoint_timestamp - _CHECKPOINT_MARGIN_MS
    for i in range(count - 1, 0, -1):
        mapped = files.files[i]
        try:
            first = decode_record(mapped.view, 0, base_offset=mapped.start_offset)
        except CorruptRecordError:
            continue
        if 0 < first.store_timestamp <= limit:
            return i
    return 0


def _data_after(files: MappedFileQueue, index: int, offset: int) -> int | None:
    """Non-zero data after ``offset`` (in file ``index``): in its file, or a later file's
    start; None when the rest is zeros."""
    mapped = files.files[index]
    following = mapped.first_nonzero(offset - mapped.start_offset)
    if following is not None:
        return mapped.start_offset + following
    for after in files.files[index + 1 :]:
        if after.first_nonzero(0, 4096) is not None:
            return after.start_offset
    return None


def find_valid_end(
    files: MappedFileQueue, *, abnormal: bool, checkpoint_timestamp: int
) -> RecoveryResult:
    """Walk the loaded commit log files and find where the valid data ends.

    Args:
        files: the commit log, loaded (every file counts as full).
        abnormal: the last run crashed (the ``abort`` file was there).
        checkpoint_timestamp: the checkpoint's physical message timestamp (ms).
    """
    if not files.files:
        return RecoveryResult(0, 0, None, 0)
    index = _start_index(files, abnormal, checkpoint_timestamp)
    first = files.files[index]
    position = max(files.min_offset - first.start_offset, 0) if index == 0 else 0
    start = first.start_offset + position
    records = 0
    # with the records counted before each (-1: kept even with no valid record after it)
    damaged: list[tuple[DamagedRange, int]] = []
    i = index
    while i < len(files.files):
        mapped = files.files[i]
        later = len(files.files) - i - 1
        result, count = scan_totals(
            mapped.view, position, None, mapped.start_offset, check_physical_offset=True
        )
        records += count
        position = 0
        verdict = judge_stop(
            result.stop(mapped.start_offset),
            mapped.end_offset,
            data_after=partial(_data_after, files, i),
        )
        if verdict.kind is StopKind.NEXT_FILE:
            i += 1
            continue
        stop = verdict.stop
        if verdict.damaged:
            resumed = _resync(files, i, stop.offset)
            if resumed is not None:  # valid data after the damage: keep it, name the damage
                damaged.append((DamagedRange(stop.offset, resumed, stop.detail), records))
                i = (resumed - files.files[0].start_offset) // files.file_size
                position = resumed - files.files[i].start_offset
                continue
            claimed = None if abnormal else _claimed_end(mapped, stop.offset)
            if claimed is not None:  # after a clean stop: a damaged last record, not a torn
                # write: kept as a damaged range (a replica may hold it), not cut off
                damaged.append((DamagedRange(stop.offset, claimed, stop.detail), -1))
                position = claimed - mapped.start_offset
                continue
        kept, end, final = _kept(damaged, records, stop)
        return RecoveryResult(start, end, final, records, verdict.data_after, later, kept)
    kept, end, final = _kept(damaged, records, None, files.files[-1].end_offset)
    return RecoveryResult(start, end, final, records, damaged=kept)


def _kept(
    damaged: list[tuple[DamagedRange, int]],
    records: int,
    stop: ScanStop | None,
    end: int | None = None,
) -> tuple[tuple[DamagedRange, ...], int, ScanStop | None]:
    """The damaged ranges a valid record follows, the data end and the stop: damage that
    only bad data or the data end follows ends the data at its start (nothing is kept)."""
    for n, (first, before) in enumerate(damaged):
        if before >= records:  # nothing valid after it: the data ends at its start
            kept = tuple(d for d, _ in damaged[:n])
            return kept, first.start, ScanStop(first.start, StopReason.INVALID, first.reason)
    kept = tuple(d for d, _ in damaged)
    assert stop is not None or end is not None
    return tuple(kept), stop.offset if stop is not None else end or 0, stop


def _claimed_end(mapped: MappedFile, offset: int) -> int | None:
    """Where the record at ``offset`` ends by its size field, when that fits its file."""
    position = offset - mapped.start_offset
    total = int.from_bytes(mapped.view[position : position + 4], "big", signed=True)
    if MIN_RECORD_SIZE <= total <= mapped.size - position:
        return offset + total
    return None


def _resync(files: MappedFileQueue, index: int, offset: int) -> int | None:
    """Where valid data resumes after the damage at ``offset`` (in file ``index``): the first
    whole valid record (or blank record ending its file) after it, in its file or a later
    one; None when there is none."""
    mapped = files.files[index]
    found = next_valid_record(mapped.view, offset - mapped.start_offset + 1, mapped.start_offset)
    if found is not None:
        return mapped.start_offset + found
    for after in files.files[index + 1 :]:
        found = next_valid_record(after.view, 0, after.start_offset)
        if found is not None:
            return after.start_offset + found
    return None
