"""A record against its consume queue: the queue offset field must continue the queue.

A scan checks each record by its own bytes; what it cannot see is whether the queue offset
field agrees with the queue the record goes into. :func:`queue_disagreement` is that check,
made by dispatch for each run of consecutive queue offsets of one queue (the first record of
the run; the rest follow from it): a queue offset past the queue's next one in a queue that
holds entries (a gap: a flipped bit there would otherwise fill 2**40 blank entries), or one
the queue already holds for another record. Records of a RocketMQ 5 writer are also covered by
the whole-record CRC; these checks are what catches a damaged field in records that carry
none (a RocketMQ 4.9.8 master's). Prepared and rolled-back transaction records (queue offset 0
in RocketMQ 4.9.8, never in a queue) are left alone.
"""

from __future__ import annotations

from hanet.errors import HanetError

from ._codec import MIN_RECORD_SIZE
from ._consume_queue import ConsumeQueue
from ._damage import DamageLedger
from ._errors import CorruptRecordError

__all__ = ["QueueMismatchError", "RecordQueueMismatch", "queue_disagreement"]

_SYS_FLAG_AT = 36
_TRANSACTION_BITS = 0xC
_PREPARED_OR_ROLLBACK = (0x4, 0xC)


class QueueMismatchError(HanetError, ValueError):
    """A record's queue offset does not agree with its consume queue (raised by
    :func:`queue_disagreement`)."""


class RecordQueueMismatch(CorruptRecordError):
    """The dispatch error of a record whose queue offset disagrees with its consume queue."""


def queue_disagreement(
    queue: ConsumeQueue,
    first: int,
    packed: bytes | memoryview,
    view: memoryview,
    base: int,
    damage: DamageLedger | None = None,
) -> None:
    """Check the first of a run of records of ``queue`` (queue offset ``first``, packed
    consume queue entries ``packed``) against what ``queue`` holds.

    ``view``: the commit log file the records are in, ``base`` its start offset (to read the
    record's SYSFLAG). ``damage``: the store's damaged ranges: a gap is no disagreement when
    damaged bytes between the queue's last record and this one could hold the missing ones
    (they were lost with the damage; the gap becomes blank entries until a repair fills it).

    Raises:
        QueueMismatchError: the queue offset leaves a gap after the queue's entries, or the
            queue holds another record at that queue offset.
    """
    high = queue.max_queue_offset
    if first == high:
        return
    physical = int.from_bytes(packed[:8], "big", signed=True)
    size = int.from_bytes(packed[8:12], "big", signed=True)
    if first > high and high <= queue.min_queue_offset:
        return  # an empty queue starts where its first record says
    if first < queue.min_queue_offset:
        return  # below what the queue keeps (cleaned): nothing to compare with
    position = physical - base
    if 0 <= position <= len(view) - _SYS_FLAG_AT - 4:
        sys_flag = int.from_bytes(view[position + _SYS_FLAG_AT : position + _SYS_FLAG_AT + 4])
        if sys_flag & _TRANSACTION_BITS in _PREPARED_OR_ROLLBACK:
            return
    if first > high and damage and _lost_in_damage(queue, high, first, physical, damage):
        return
    if first > high:
        raise QueueMismatchError(
            f"queue offset {first} of the record at {physical} leaves a gap after the queue's "
            f"next offset {high} (a damaged queue offset field?)"
        )
    entry = queue.get(first)
    if entry is not None and (entry[0], entry[1]) != (physical, size):
        raise QueueMismatchError(
            f"queue offset {first} of the record at {physical} is held by the record at "
            f"{entry[0]} ({entry[1]} bytes)"
        )


def _lost_in_damage(
    queue: ConsumeQueue, high: int, first: int, physical: int, damage: DamageLedger
) -> bool:
    """Whether the queue offsets ``[high, first)`` may be records lost in damaged ranges that
    lie between the queue's last record and the record at ``physical``."""
    last = queue.get(high - 1)
    after = 0 if last is None else last[0] + last[1]
    lost = sum(
        min(r.end, physical) - max(r.start, after) for r in damage if r.overlaps(after, physical)
    )
    return lost > 0 and first - high <= lost // MIN_RECORD_SIZE
