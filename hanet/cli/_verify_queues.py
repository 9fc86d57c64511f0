"""``hanet verify``'s checks of records against their queues, a run of records at a time.

The records come as the rows of the record index (``CommitLogReader.index``); the native
:func:`~hanet.store.lowlevel.index_group_entries` turns a window's rows into runs of one queue's
consecutive queue offsets, each with its consume queue entries already packed as the
``consumequeue/`` files hold them. A run whose entries equal the file's bytes at its queue
offsets is checked by one comparison; only a run that differs (or reaches past the file) is
walked record by record, naming each problem as before. The entries a run matched need no
second look when every entry is checked against the records at the end.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

import attrs

from hanet.store import (
    DamagedRange,
    ScanStop,
    StopReason,
)
from hanet.store.lowlevel import (
    CQ_BLANK_SIZE,
    CQ_ENTRY_SIZE,
    INDEX_ROW,
    index_group_entries,
    list_mapped_files,
)

__all__ = ["QueueCheck", "QueueFile", "read_consume_queues"]

_ENTRY = struct.Struct(">qiq")
Key = tuple[str, int]


@attrs.define(eq=False)
class QueueFile:
    """One consume queue's entries (its files joined), up to the last written entry: a zeroed
    entry before it is kept, and reported as not matching its record."""

    first: int
    """The queue offset of the first entry."""
    data: bytes
    matched: list[tuple[int, int]] = attrs.field(factory=list)
    """Entry index ranges ``[start, end)`` equal to their records."""

    @property
    def count(self) -> int:
        return len(self.data) // CQ_ENTRY_SIZE

    def entry(self, index: int) -> tuple[int, int, int]:
        """``(physical offset, size, tags hash)`` of entry ``index``."""
        entry: tuple[int, int, int] = _ENTRY.unpack_from(self.data, index * CQ_ENTRY_SIZE)
        return entry

    def end(self) -> int | None:
        """Where the last non-blank entry ends in the commit log (None: none)."""
        for index in reversed(range(self.count)):
            offset, size, _ = self.entry(index)
            if size != CQ_BLANK_SIZE:
                return offset + size
        return None

    def unmatched(self) -> list[int]:
        """The entry indexes no run of records matched, in order."""
        left: list[int] = []
        at = 0
        for start, end in sorted(self.matched):
            left.extend(range(at, start))
            at = max(at, end)
        left.extend(range(at, self.count))
        return left


def _without_zero_tail(data: bytes, end: int) -> int:
    """The length of ``data[:end]`` without its trailing zero bytes (a queue's files are
    created zeroed: most of the last one is), skipped a block at a time."""
    block = 1 << 16
    zeros = bytes(block)
    while end >= block and data[end - block : end] == zeros:
        end -= block
    start = max(0, end - block)
    return start + len(data[start:end].rstrip(b"\0"))


def read_consume_queues(root: Path) -> dict[Key, QueueFile]:
    """``(topic, queue) -> QueueFile`` of every consume queue under ``root``."""
    queues: dict[Key, QueueFile] = {}
    directory = root / "consumequeue"
    if not directory.is_dir():
        return queues
    for topic_dir in sorted(p for p in directory.iterdir() if p.is_dir()):
        for queue_dir in sorted(p for p in topic_dir.iterdir() if p.is_dir()):
            if not queue_dir.name.isdigit():
                continue
            files = list_mapped_files(queue_dir)
            if not files:
                continue
            data = b"".join(path.read_bytes() for _, path in files)
            written = _without_zero_tail(data, len(data) // CQ_ENTRY_SIZE * CQ_ENTRY_SIZE)
            queue = QueueFile(files[0][0] // CQ_ENTRY_SIZE, data)
            count = -(-written // CQ_ENTRY_SIZE)
            while count and queue.entry(count - 1)[1] == 0:  # an unwritten (size 0) entry
                count -= 1
            queue.data = data[: count * CQ_ENTRY_SIZE]
            queues[topic_dir.name, int(queue_dir.name)] = queue
    return queues


@attrs.define(eq=False)
class QueueCheck:
    """The records' queue offsets and consume queue entries, checked window by window."""

    queues: dict[Key, QueueFile]
    check_queues: bool
    frontier: int
    """Records from here on past every entry are not dispatched yet (not missing)."""
    problems: list[str] = attrs.field(factory=list)
    seen: dict[Key, int] = attrs.field(factory=dict)
    """The queue offset each queue's next record should have."""
    count: int = 0
    undispatched: int = 0
    last_end: int | None = None
    """Where the last record seen ends."""
    skipped: set[Key] = attrs.field(factory=set)
    """Queues whose next record may skip queue offsets: records of theirs were in damage."""

    def damage(self) -> None:
        """The walk went past a damaged range: the records in it are unknown, so each queue's
        next record may follow a gap of queue offsets (not go back)."""
        self.skipped = set(self.seen)

    def window(self, topics: list[str], rows: bytes) -> None:
        """Check one window's rows (``topics`` indexed by their topic ids)."""
        if not rows:
            return
        self.count += len(rows) // INDEX_ROW.size
        last = INDEX_ROW.unpack_from(rows, len(rows) - INDEX_ROW.size)
        self.last_end = last[0] + last[1]
        for tid, _, _, queue_id, first, n, entries, _ in index_group_entries(rows):
            key = (topics[tid], queue_id)
            following = self.seen.get(key)
            gap_ok = key in self.skipped and following is not None and first > following
            self.skipped.discard(key)
            if following is not None and first != following and not gap_ok:
                offset = _ENTRY.unpack_from(entries)[0]
                self.problems.append(
                    f"record at offset {offset}: {key[0]}/{queue_id} queue offset {first} "
                    f"does not follow the queue's previous record ({following - 1})"
                )
            self.seen[key] = max(following or 0, first + n)
            if self.check_queues:
                self._run(key, first, n, entries)

    def _run(self, key: Key, first: int, n: int, entries: bytes) -> None:
        queue = self.queues.get(key)
        base = first - (queue.first if queue is not None else 0)
        span = slice(base * CQ_ENTRY_SIZE, (base + n) * CQ_ENTRY_SIZE)
        if (
            queue is not None
            and base >= 0
            and base + n <= queue.count
            and queue.data[span] == entries
        ):
            queue.matched.append((base, base + n))
            return
        for k in range(n):  # record by record: name each problem
            expected: tuple[int, int, int] = _ENTRY.unpack_from(entries, k * CQ_ENTRY_SIZE)
            offset = expected[0]
            index = base + k
            if queue is None or not 0 <= index < queue.count:
                if offset >= self.frontier:
                    self.undispatched += 1
                    continue
                self.problems.append(
                    f"record at offset {offset} ({key[0]}/{key[1]} queue offset "
                    f"{first + k}) has no consume queue entry"
                )
                continue
            found = queue.entry(index)
            if found != expected:
                self.problems.append(
                    f"consume queue {key[0]}/{key[1]} entry {first + k} "
                    f"is {found}, expected {expected} for the record at offset {offset}"
                )
            else:
                queue.matched.append((index, index + 1))

    def entries(
        self,
        min_offset: int,
        stop: ScanStop,
        end: int,
        damaged: Sequence[DamagedRange] = (),
    ) -> tuple[int, int]:
        """Check every entry no record matched against the valid data (``end``: where it
        ends; ``damaged``: the damaged ranges the walk went past, each named once with the
        entries pointing into it); returns ``(trimmed, unchecked)``: entries below
        ``min_offset`` (their records deleted by retention), entries past the bad record the
        walk stopped at."""
        trimmed = 0
        unchecked = 0
        into = dict.fromkeys(damaged, 0)
        for key, queue in sorted(self.queues.items()):
            for index in queue.unmatched():
                offset, size, _ = queue.entry(index)
                if size == CQ_BLANK_SIZE:
                    continue
                if offset < min_offset:
                    trimmed += 1
                    continue
                hit = next((d for d in damaged if d.overlaps(offset, offset + size)), None)
                if hit is not None:
                    into[hit] += 1
                elif stop.reason is StopReason.INVALID and offset >= stop.offset:
                    unchecked += 1
                elif queue.first + index >= self.seen.get(key, 0) or offset + size > end:
                    self.problems.append(
                        f"consume queue {key[0]}/{key[1]} entry {queue.first + index} points "
                        f"at {offset} (+{size}), past the valid data"
                    )
        self.problems.extend(
            f"{n} consume queue entr{'y points' if n == 1 else 'ies point'} into the damaged "
            f"range [{d.start}, {d.end}): {'its record' if n == 1 else 'their records'} cannot "
            "be read until it is repaired"
            for d, n in into.items()
            if n
        )
        return trimmed, unchecked
