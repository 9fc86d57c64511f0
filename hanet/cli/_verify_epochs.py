"""``hanet verify``'s check of the epoch file (``<store>/epoch``) against the commit log.

The file must read (its lines, their order, its CRC: :class:`~hanet.store.EpochFile`), and its
entries must fit the log they describe: each epoch starts at or before the log's end (an epoch
past it names data this log does not hold: a lost tail, a log cut short, a file from another
store) and, when its start is inside the log, at a record's start.
"""

from __future__ import annotations

from pathlib import Path

from hanet.store import CommitLogReader, EpochFile, EpochFileError, StopReason

__all__ = ["epoch_problems"]


def epoch_problems(root: Path | None, reader: CommitLogReader, end: int) -> list[str]:
    """What is wrong with the epoch file of the store at ``root`` whose valid data ends at
    ``end`` (empty: nothing, or no epoch file)."""
    if root is None:
        return []
    try:
        epochs = EpochFile.load(root)
    except EpochFileError as exc:
        return [f"{exc}: the slaves' divergence checks cannot use it"]
    except OSError as exc:
        return [f"epoch file {root / 'epoch'}: {exc.strerror or exc}"]
    problems = []
    for entry in epochs.entries:
        where = f"epoch file {epochs.path}: epoch {entry.epoch} starts at {entry.start_offset}"
        if entry.start_offset > end:
            problems.append(
                f"{where}, past the commit log's end {end}: this log does not hold its term's "
                "data (a lost tail, or a log cut short)"
            )
        elif reader.min_offset <= entry.start_offset < end and not _record_start(
            reader, entry.start_offset
        ):
            problems.append(f"{where}, which is not a record's start")
    return problems


def _record_start(reader: CommitLogReader, offset: int) -> bool:
    """Whether a valid record (or a blank record ending its file) starts at ``offset``."""
    records = reader.records(offset, check_crc=False)
    try:
        first = next(records, None)
    finally:
        records.close()
    if first is None:
        stop = reader.stop
        return stop is not None and stop.reason is not StopReason.INVALID
    found = first[0]
    # a blank record at ``offset``: the walk went on at the next file's start
    return found == offset or (found % reader.file_size == 0 and offset < found)
