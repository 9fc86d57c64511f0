"""Consume queues checked at open and rebuilt from the commit log when they do not hold.

A consume queue is derived data: every entry can be made again from the commit log. So a
queue whose files are unusable (a file cut short, a wrong size, a gap: what made a store refuse
to open) is moved aside (``<queueId>.damaged-<time>``, kept for a look, never read again) and
started empty, and a queue with zeroed entries before its end (what left a consumer stuck on
errors) is cut at the first one; dispatch then re-adds the missing entries from the commit log
(:func:`load_checked` says from where). A store whose commit log holds data but that has no
consume queue at all (the directory lost) is rebuilt whole. The checks read the last 3 files
of each queue (as RocketMQ's recovery) in a few C-speed passes, no Python per entry.

What is not checked at open: an entry that points at the wrong record (``hanet verify`` names
those, and a record dispatched again is compared with the entry its queue holds).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from ._consume_queue import CQ_BLANK_SIZE, CQ_ENTRY_SIZE, ConsumeQueue
from ._errors import StoreLayoutError
from ._mapped_queue import list_mapped_files

__all__ = ["FROM_START", "first_zeroed_entry", "load_checked"]

logger = logging.getLogger(__name__)

FROM_START = -1
"""Rebuild from the commit log's first record."""

_CHECKED_FILES = 3  # the last files of a queue checked for zeroed entries (as RocketMQ recovers)


def _zeroed_in(data: bytes, start: int) -> int | None:
    """The queue offset of the first entry of size 0 before the last entry with a size, in
    ``data`` (whole entries of one file starting at byte offset ``start``), or None."""
    count = len(data) // CQ_ENTRY_SIZE
    if not count:
        return None
    # byte k of ``ored`` is 0 exactly when entry k's 4 size bytes are all 0
    ored = 0
    for i in range(8, 12):
        ored |= int.from_bytes(data[i::CQ_ENTRY_SIZE], "big")
    sizes = ored.to_bytes(count, "big")
    end = len(sizes.rstrip(b"\0"))  # entries after the last one with a size: unwritten
    index = sizes.find(b"\0", 0, end)
    return None if index < 0 else (start + index * CQ_ENTRY_SIZE) // CQ_ENTRY_SIZE


def first_zeroed_entry(directory: Path) -> int | None:
    """The queue offset of the first zeroed entry (size 0) before the end of the queue in
    ``directory``, in its last few files, read from disk (before the queue is loaded: loading
    takes the first zero entry it finds for the end and would drop what follows)."""
    files = list_mapped_files(directory)[-_CHECKED_FILES:]
    found = None
    written_after = False
    for start, path in reversed(files):
        data = path.read_bytes()
        data = data[: len(data) - len(data) % CQ_ENTRY_SIZE]
        zeroed = _zeroed_in(data, start)
        if zeroed is not None:
            found = zeroed
        elif written_after and data and len(data.rstrip(b"\0")) < len(data):
            # entries follow in a later file: this file's zero tail is zeroed entries too
            found = (start + len(data.rstrip(b"\0")) + CQ_ENTRY_SIZE - 1) // CQ_ENTRY_SIZE
        if data.strip(b"\0"):
            written_after = True
    return found


def load_checked(
    queue: ConsumeQueue, new_queue: Callable[[], ConsumeQueue]
) -> tuple[ConsumeQueue, int | None]:
    """Load ``queue``; make it usable when it is not. Returns the queue to use (a new empty
    one from ``new_queue`` when the files were moved aside) and the physical offset dispatch
    must start from to rebuild what was dropped (:data:`FROM_START`: the commit log's start;
    None: nothing to rebuild)."""
    name = f"{queue.topic}/{queue.queue_id}"
    directory = queue.files.directory
    zeroed = first_zeroed_entry(directory)
    try:
        queue.load()
    except StoreLayoutError as exc:
        queue.close()
        aside = directory.with_name(f"{directory.name}.damaged-{time.time_ns()}")
        directory.rename(aside)
        logger.warning(
            "consume queue %s: %s; moved aside to %s, rebuilt from the commit log",
            name,
            exc,
            aside,
        )
        fresh = new_queue()
        fresh.load()
        return fresh, FROM_START
    if zeroed is None:
        return queue, None
    high = queue.max_queue_offset
    restart = FROM_START
    previous = queue.get(zeroed - 1) if zeroed > queue.min_queue_offset else None
    if previous is not None and previous[1] not in (0, CQ_BLANK_SIZE):
        restart = previous[0] + previous[1]
    if zeroed <= queue.min_queue_offset:
        queue.files.delete_all()
        queue.min_queue_offset = 0
    elif zeroed < high:
        queue.files.truncate(zeroed * CQ_ENTRY_SIZE)
    logger.warning(
        "consume queue %s: entry %d is zeroed (the queue held up to %d): cut there, the "
        "entries from it on rebuilt from the commit log",
        name,
        zeroed,
        high,
    )
    return queue, restart
