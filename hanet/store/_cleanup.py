"""Deleting what retention expired: the first commit log file, consume queue files and index
files wholly below the commit log's min offset. A mixin of :class:`~._store.CommitLogStore`
(which owns the files); :class:`~._retention.RetentionService` decides when."""

from __future__ import annotations

from ._consume_queue import ConsumeQueue
from ._damage import DamageLedger
from ._errors import StoreClosedError
from ._flush_mark import FlushMark
from ._index_file import IndexService
from ._mapped_queue import MappedFileQueue

__all__ = ["StoreCleanup"]


class StoreCleanup:
    """File deletion over :attr:`commit_log`, the consume queues and :attr:`index`."""

    commit_log: MappedFileQueue
    index: IndexService | None
    damage: DamageLedger
    _queues: dict[tuple[str, int], ConsumeQueue]
    _closed: bool
    _dispatched: int
    _mark: FlushMark

    def delete_first_commit_log_file(self, *, force: bool = False) -> bool:
        """Delete the first commit log file (retention; see :mod:`hanet.store._retention`):
        never the last file, nor one holding records not yet flushed or dispatched. The
        min offset becomes the next file's start, and every consume queue's min queue offset
        moves past the entries of the deleted records at once, so no read reaches them.

        A file whose mapping a reader still holds (an HA transfer's view) is kept unless
        ``force`` (the reader's view stays valid either way). Returns whether it was deleted.

        Raises:
            StoreClosedError: the store is closed.
        """
        if self._closed:
            raise StoreClosedError("the store is closed")
        files = self.commit_log.files
        if len(files) < 2 or files[0].end_offset > min(self._dispatched, self._mark.offset):
            return False
        if not self.commit_log.delete_first(force=force):
            return False
        low = self.commit_log.min_offset
        for queue in self._queues.values():
            queue.correct_min_offset(low)
        self.damage.forget_below(low)  # deleted with its file
        return True

    def clean_consume_queue(self, topic: str, queue_id: int, *, force: bool = False) -> int:
        """Delete the consume queue files (never the last) whose entries all point below the
        commit log's min offset; returns how many (0 for an unknown queue)."""
        queue = self._queues.get((topic, queue_id))
        if queue is None or self._closed:
            return 0
        return queue.delete_expired_files(self.commit_log.min_offset, force=force)

    def clean_index_files(self) -> int:
        """Delete the index files (never the newest) whose keys all point below the commit
        log's min offset (retention, after commit log files went); returns how many."""
        if self.index is None or self._closed:
            return 0
        return self.index.delete_expired(self.commit_log.min_offset)
