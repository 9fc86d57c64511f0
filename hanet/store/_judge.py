"""What a scan's stop means for a commit log file: the one judgement of a stop.

A scan (:class:`~._scanner.RecordScanner`, :func:`~._index.scan_index`) stops at the first
thing that is not a whole valid record: a blank record, the end of the bytes it was given, zeros,
a partial record or bad data. What that stop means depends on where it is in its file and on
what the caller knows about the bytes; every reader of the commit log (recovery, dispatch, the
replica path, ``hanet verify``, the Spark data source, the HA master) asks :func:`judge_stop`:

- :attr:`StopKind.NEXT_FILE`: the data goes on at the next file's start (a blank record that
  ends the file, or records that fill it to its last byte);
- :attr:`StopKind.DATA_END`: the data ends here, or waits for more (the end of the bytes given,
  a record whose rest is not written yet, the unwritten zeros of the last file);
- :attr:`StopKind.DAMAGED`: bad data, with a reason: a record that fails its checks, a blank
  record that does not end its file, zeros inside written data or a zeroed hole with data
  after it, or unwritten/partial data in a file that more files follow.

Example::

    result = scan_index(view, 0, None, file_start, None, check_physical_offset=True)
    verdict = judge_stop(result.stop(file_start), file_start + file_size, last_file=True)
    if verdict.kind is StopKind.DAMAGED:
        print(verdict.stop.offset, verdict.stop.detail)
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import attrs

from ._scanner import ScanStop, StopReason

__all__ = ["StopJudgement", "StopKind", "judge_stop"]


class StopKind(enum.Enum):
    """What a scan stop means (:func:`judge_stop`)."""

    NEXT_FILE = "next file"
    """The data goes on at the start of the next file."""
    DATA_END = "data end"
    """The data ends here, or waits for bytes not written yet."""
    DAMAGED = "damaged"
    """Bad data: :attr:`StopJudgement.stop` (reason ``INVALID``) names it."""


@attrs.frozen
class StopJudgement:
    """A judged stop.

    Attributes:
        kind: a :class:`StopKind`.
        stop: the stop; for ``DAMAGED``, reason ``INVALID`` and a detail saying why.
        data_after: for a zeroed hole: where the non-zero data after it starts; else None.
    """

    kind: StopKind
    stop: ScanStop
    data_after: int | None = None

    @property
    def damaged(self) -> bool:
        """Whether the stop is bad data."""
        return self.kind is StopKind.DAMAGED


def _damaged(stop: ScanStop, detail: str) -> StopJudgement:
    return StopJudgement(StopKind.DAMAGED, ScanStop(stop.offset, StopReason.INVALID, detail))


def judge_stop(
    stop: ScanStop,
    file_end: int,
    *,
    written: bool = False,
    last_file: bool = True,
    data_after: Callable[[int], int | None] | None = None,
) -> StopJudgement:
    """Judge ``stop``, a scan's stop in the commit log file that ends at offset ``file_end``.

    Args:
        stop: the scan's stop.
        file_end: the physical offset where the stop's file ends.
        written: the scan covered bytes known to be written (a replica's received bytes, the
            store's validated region): zeros where a record should start are damage, not the
            data end.
        last_file: the file is the last one; otherwise unwritten or partial data in it is
            damage (a full file ends with a blank record or a record ending at its last byte).
        data_after: for unwritten zeros: the offset of the first non-zero byte at or after a
            given offset, or None (what tells a zeroed hole from the unwritten tail of the
            data); not asked when None.
    """
    reason = stop.reason
    if reason is StopReason.BLANK:
        if stop.offset + stop.blank_size != file_end:
            return _damaged(stop, f"blank record of {stop.blank_size} bytes does not end the file")
        return StopJudgement(StopKind.NEXT_FILE, stop)
    if reason is StopReason.END:
        kind = StopKind.NEXT_FILE if stop.offset == file_end else StopKind.DATA_END
        return StopJudgement(kind, stop)
    if reason is StopReason.INVALID:
        return StopJudgement(StopKind.DAMAGED, stop)
    if reason is StopReason.UNWRITTEN:
        if written:
            return _damaged(stop, "zeros where a record should start (inside the written data)")
        following = None if data_after is None else data_after(stop.offset)
        if following is not None:
            detail = f"a zeroed hole at offset {stop.offset}: non-zero data follows at {following}"
            return attrs.evolve(_damaged(stop, detail), data_after=following)
    if not last_file and not written:
        return _damaged(
            stop,
            f"{reason.value} data at {stop.offset}, but more files follow "
            "(a full file ends with a blank record)",
        )
    return StopJudgement(StopKind.DATA_END, stop)
