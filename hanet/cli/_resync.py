"""``hanet verify`` and ``hanet dump`` past damage: a walk that goes on after a bad record.

:class:`~hanet.store.CommitLogReader` stops at the first record that fails its checks.
:class:`DamageWalk` then does what recovery does: it resynchronises on the next record that
passes every check (:func:`~hanet.store.next_valid_record`, in the bad record's file or a later
one), names the bytes in between as a :class:`~hanet.store.DamagedRange` and walks on from
there, so that one flipped byte hides neither the valid records after it nor later damage.
Read-only, like the reader: each file searched is mapped read-only for the search.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Generator, Iterator
from typing import TypeVar

from hanet.store import (
    CommitLogReader,
    DamagedRange,
    MessageRecord,
    ScanStop,
    StopReason,
)
from hanet.store.lowlevel import (
    next_valid_record,
)

__all__ = ["DamageWalk", "resume_offset"]

T = TypeVar("T")


def resume_offset(reader: CommitLogReader, offset: int) -> int | None:
    """Where valid data resumes after the bad record at ``offset``: the first whole record
    after it that passes every check (or a blank record ending its file), in its file or a
    later one; None when there is none (the damage runs to the data's end)."""
    if not reader.min_offset <= offset < reader.end_offset:
        return None
    first = (offset - reader.min_offset) // reader.file_size
    for start, path in reader.files[first:]:
        position = offset - start + 1 if start <= offset else 0
        fd = os.open(path, os.O_RDONLY)
        try:
            mapping = mmap.mmap(fd, reader.file_size, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        view = memoryview(mapping)
        try:
            found = next_valid_record(view, position, start)
        finally:
            view.release()
            mapping.close()
        if found is not None:
            return start + found
    return None


class DamageWalk:
    """A reader's walk that goes on past each bad record (see the module).

    Args:
        reader: the commit log.
        on_damage: called with each damaged range as it is found.

    After a walk, :attr:`damaged` holds the damaged ranges it went past, in order, and
    :attr:`stop` why it ended: the reader's stop of its last stretch (``INVALID`` only for
    damage no valid record follows).
    """

    def __init__(
        self,
        reader: CommitLogReader,
        on_damage: Callable[[DamagedRange], None] | None = None,
    ) -> None:
        self.reader = reader
        self.on_damage = on_damage
        self.damaged: list[DamagedRange] = []
        self.stop: ScanStop | None = None

    def records(
        self, start_offset: int | None = None, *, check_crc: bool = True
    ) -> Generator[tuple[int, MessageRecord], None, None]:
        """:meth:`CommitLogReader.records`, going on past damage. A bad record right at a
        given ``start_offset`` ends the walk (not a record boundary: nothing to go past)."""
        return self._walk(
            start_offset, lambda at: self.reader.records(at, check_crc=check_crc), strict=True
        )

    def index(self) -> Generator[tuple[list[str], bytes], None, None]:
        """:meth:`CommitLogReader.index` from the first file on, going on past damage."""
        return self._walk(None, self.reader.index, strict=False)

    def _walk(
        self,
        start_offset: int | None,
        stretch: Callable[[int | None], Iterator[T]],
        *,
        strict: bool,
    ) -> Generator[T, None, None]:
        self.damaged = []
        self.stop = None
        at = start_offset
        while True:
            yield from stretch(at)
            stop = self.reader.stop
            assert stop is not None
            self.stop = stop
            if stop.reason is not StopReason.INVALID:
                return
            if strict and at is not None and stop.offset == at:
                return  # the offset asked for is not a valid record's start
            resumed = resume_offset(self.reader, stop.offset)
            if resumed is None:
                return
            damaged = DamagedRange(stop.offset, resumed, stop.detail)
            self.damaged.append(damaged)
            if self.on_damage is not None:
                self.on_damage(damaged)
            at = resumed
