"""The store's reads: commit log bytes and records by physical offset, consume queue entries
and messages by queue offset. Synchronous, never blocking on anything but a page fault; a
mixin of :class:`~._store.CommitLogStore`, which owns the files these read."""

from __future__ import annotations

from ._codec import MessageRecord
from ._consume_queue import CQ_BLANK_SIZE, ConsumeQueue
from ._errors import CorruptRecordError
from ._mapped_queue import MappedFileQueue
from ._scanner import decode_record

__all__ = ["StoreReads"]


class StoreReads:
    """Reads over :attr:`commit_log` and the consume queues (``_queues``)."""

    commit_log: MappedFileQueue
    _queues: dict[tuple[str, int], ConsumeQueue]

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` commit log bytes from ``offset``, never crossing a file.

        What the HA master ships; b"" at or past :attr:`max_offset`; a copy (stays valid).

        Raises:
            ValueError: ``offset`` is below :attr:`min_offset`.
        """
        return self.commit_log.read(offset, max_bytes)

    def read_view(self, offset: int, max_bytes: int) -> memoryview:
        """As :meth:`read`, a read-only view of the mapped commit log instead of a copy.

        What the HA master sends without copying: written bytes never change on a master. The
        view keeps its file's mapping alive until it is dropped (closing the store meanwhile
        is safe).

        Raises:
            ValueError: ``offset`` is below :attr:`min_offset`.
        """
        return self.commit_log.read_view(offset, max_bytes)

    def file_position(self, offset: int) -> tuple[int, int]:
        """``(descriptor, position)``: the commit log file holding ``offset`` and where in it,
        for sending its bytes with ``sendfile`` (duplicate the descriptor: the store may close
        the file meanwhile, e.g. retention).

        Raises:
            ValueError: no open file holds ``offset``.
        """
        mapped = self.commit_log.find(offset)
        if mapped is None or mapped.fileno() < 0:
            raise ValueError(f"no open commit log file holds offset {offset}")
        return mapped.fileno(), offset - mapped.start_offset

    def read_record(self, offset: int) -> MessageRecord:
        """Decode the record at a physical offset.

        Raises:
            CorruptRecordError: no valid record there.
        """
        mapped = self.commit_log.find(offset)
        if mapped is None or offset >= mapped.write_offset:
            raise CorruptRecordError(offset, "no data at this offset")
        return decode_record(
            mapped.view[: mapped.wrote],
            offset - mapped.start_offset,
            base_offset=mapped.start_offset,
        )

    def queues(self) -> list[tuple[str, int]]:
        """The (topic, queue id) pairs that have a consume queue, sorted."""
        return sorted(self._queues)

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        """The queue offset the next message of this queue gets (0 for an unknown queue)."""
        queue = self._queues.get((topic, queue_id))
        return 0 if queue is None else queue.max_queue_offset

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        """The first queue offset held (0 for an unknown queue)."""
        queue = self._queues.get((topic, queue_id))
        return 0 if queue is None else queue.min_queue_offset

    def consume_queue_entry(
        self, topic: str, queue_id: int, queue_offset: int
    ) -> tuple[int, int, int] | None:
        """``(physical offset, size, tag hash)`` of a consume queue entry, or None."""
        queue = self._queues.get((topic, queue_id))
        return None if queue is None else queue.get(queue_offset)

    def consume_queue_entries(
        self, topic: str, queue_id: int, queue_offset: int, count: int
    ) -> list[tuple[int, int, int]]:
        """Up to ``count`` consecutive entries from ``queue_offset`` (as
        :meth:`consume_queue_entry`), read in one go; fewer where a consume queue file ends
        (ask again from there), [] when the queue does not hold ``queue_offset``."""
        queue = self._queues.get((topic, queue_id))
        return [] if queue is None else queue.entries(queue_offset, count)

    def consume_queue_view(
        self, topic: str, queue_id: int, queue_offset: int, count: int
    ) -> memoryview:
        """As :meth:`consume_queue_entries`, the entries as stored (20 bytes each: big-endian
        ``i64`` physical offset, ``i32`` size, ``i64`` tag hash) in a read-only view of the
        mapped consume queue file (empty when not held); drop it soon (it keeps the file
        mapped)."""
        queue = self._queues.get((topic, queue_id))
        return memoryview(b"") if queue is None else queue.entries_view(queue_offset, count)

    def get_message(self, topic: str, queue_id: int, queue_offset: int) -> MessageRecord | None:
        """The message at a queue offset, or None when the queue does not hold it.

        Raises:
            CorruptRecordError: the entry points at bytes that are not a valid record.
        """
        entry = self.consume_queue_entry(topic, queue_id, queue_offset)
        if entry is None or entry[1] == CQ_BLANK_SIZE:
            return None
        return self.read_record(entry[0])

    def get_messages(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int = 32
    ) -> list[MessageRecord]:
        """Up to ``max_count`` messages from a queue offset on (fewer at the queue's end)."""
        result = []
        end = min(queue_offset + max_count, self.max_queue_offset(topic, queue_id))
        for q in range(max(queue_offset, self.min_queue_offset(topic, queue_id)), end):
            record = self.get_message(topic, queue_id, q)
            if record is not None:
                result.append(record)
        return result
