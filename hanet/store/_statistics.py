"""What :meth:`CommitLogStore.statistics` reports: a snapshot of the store's offsets, counters,
errors and disk state."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._config import StoreStatistics
from ._scanner import StopReason

if TYPE_CHECKING:
    from ._store import CommitLogStore

__all__ = ["store_statistics"]


def store_statistics(store: CommitLogStore) -> StoreStatistics:
    """The snapshot (reads the disk usage if the last reading is older than
    ``disk_check_interval``)."""
    store._disk.refresh()
    error = store.dispatch_error
    return StoreStatistics(
        min_offset=store.min_offset,
        max_offset=store.max_offset,
        flushed_offset=store._flushed,
        dispatched_offset=store._dispatched,
        mapped_files=len(store.commit_log.files),
        consume_queues=len(store._queues),
        puts=store._writer.puts,
        put_bytes=store._writer.put_bytes,
        raw_appended_bytes=store._raw_bytes,
        flushes=store._mark.flushes,
        dispatch_error=None if error is None else (error.offset, error.reason),
        recovered_abnormally=store._abnormal,
        truncated_at=(
            None
            if store.recovery.stop is None or store.recovery.stop.reason is not StopReason.INVALID
            else store.recovery.end_offset
        ),
        closed=store._closed,
        disk_full=store._disk.full,
        disk_used_ratio=store._disk.used_ratio,
        create_error=store._create_error,
        damaged=tuple((r.start, r.end, r.reason) for r in store.damage),
    )
