"""Opening a store: its recorded file sizes, its consume queues, and recovery of the commit log.

:func:`recover` finds the valid end of the commit log (:func:`~._recovery.find_valid_end`, from
the checkpoint after an abnormal exit), marks the damaged ranges it kept, truncates the commit
log, its consume queues and the index to that end, rebuilds consume queues that are missing or
damaged (:func:`~._rebuild.load_checked`) by dispatching again from a safe point, and leaves the
``abort`` file until a clean close.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from ._agreement import RecordQueueMismatch
from ._damage import DamagedRange
from ._dispatch import INDEX_CATCH_UP, build_index
from ._errors import CorruptRecordError, StoreLayoutError
from ._mapped_queue import list_mapped_files
from ._rebuild import FROM_START, load_checked
from ._recovery import RecoveryResult, find_valid_end
from ._scanner import StopReason
from ._store_files import STORE_PROPERTIES, CheckpointFile, read_checkpoint, read_store_sizes

if TYPE_CHECKING:
    from ._store import CommitLogStore

__all__ = [
    "check_sizes",
    "load_queues",
    "log_recovery",
    "mark_recovered_damage",
    "recorded_file_size",
    "recover",
]

logger = logging.getLogger(__name__)


def recorded_file_size(root: Path) -> int | None:
    """The commit log file size of the store at ``root``: as its ``store.properties``
    records it, else the size of its commit log files (when they all agree), else None (a new
    store). What a restart uses when no size is given.

    Raises:
        StoreLayoutError: ``store.properties`` is unreadable or malformed.
    """
    size = read_store_sizes(root).get("mappedFileSizeCommitLog")
    if size is not None:
        return size
    sizes = {path.stat().st_size for _, path in list_mapped_files(root / "commitlog")}
    return sizes.pop() if len(sizes) == 1 else None


def check_sizes(store: CommitLogStore) -> bool:
    """Compare the configured file sizes with the recorded ones; False when none are
    recorded yet."""
    recorded = read_store_sizes(store.root)
    config = store.config
    for key, configured, flag in (
        ("mappedFileSizeCommitLog", config.mapped_file_size, "--mapped-file-size "),
        ("mappedFileSizeConsumeQueue", config.consume_queue_file_size, ""),
    ):
        size = recorded.get(key)
        if size is not None and size != configured:
            raise StoreLayoutError(
                f"{store.root} was created with {key}={size} (its {STORE_PROPERTIES}), "
                f"expected {configured} as configured: leave the setting out or give "
                f"{flag or key + '='}{size}"
            )
    return bool(recorded)


def recover(store: CommitLogStore) -> None:
    """Recover the store at open: valid end, damage, truncation, rebuilt consume queues,
    the first dispatch and index catch-up; then ``abort`` marks it open."""
    abort = store.root / "abort"
    store._abnormal = abort.exists()
    checkpoint_path = store.root / "checkpoint"
    had_checkpoint = checkpoint_path.exists() and checkpoint_path.stat().st_size > 0
    checkpoint = read_checkpoint(checkpoint_path)
    # kept open for the store's life: a flush never needs a new descriptor
    store._checkpoint = CheckpointFile(checkpoint_path)
    store.commit_log.load()
    if store.commit_log.files and checkpoint.data_start_offset:
        first = store.commit_log.files[0]
        if first.start_offset < checkpoint.data_start_offset < first.end_offset:
            store.commit_log.min_offset = checkpoint.data_start_offset
    load_queues(store)
    result = find_valid_end(
        store.commit_log,
        abnormal=store._abnormal,
        checkpoint_timestamp=checkpoint.physic_msg_timestamp,
    )
    store.recovery = result
    log_recovery(store, result, had_checkpoint, checkpoint.physic_msg_timestamp)
    mark_recovered_damage(store, result.damaged, result.end_offset)
    if store.commit_log.files:
        store.commit_log.truncate(result.end_offset)
        for mapped in store.commit_log.files:
            mapped.flushed = mapped.wrote
    for queue in store._queues.values():
        dropped = queue.truncate_physical(result.end_offset)
        if dropped:
            logger.info(
                "%s: dropped %d entries of %s/%d past the valid data",
                store.root,
                dropped,
                queue.topic,
                queue.queue_id,
            )
    store._validated = store.commit_log.max_offset
    store._mark.set(offset=store._validated)
    store._dispatched = result.start_offset
    if store.index is not None:  # rolled back to the valid end; built again by dispatch
        store.index.load()
        store.index.recover(store.commit_log, result.end_offset)
    if store.commit_log.files and not store._queues:  # no consume queue at all: rebuild
        store._rebuild_from = FROM_START
    if store._rebuild_from < store._dispatched:
        low = store.commit_log.min_offset
        start = low if store._rebuild_from == FROM_START else max(store._rebuild_from, low)
        logger.warning("%s: rebuilding consume queues from offset %d", store.root, start)
        store._dispatched = min(store._dispatched, start)
    store.dispatch()
    build_index(store, force=True, budget=INDEX_CATCH_UP)
    if store.index is not None and store._dispatched - store.index.indexed_offset > 0:
        logger.info(
            "%s: %d bytes of the commit log to index from offset %d: built by the "
            "flusher while the store serves",
            store.root,
            store._dispatched - store.index.indexed_offset,
            store.index.indexed_offset,
        )
    error = store._dispatch_error
    if isinstance(error, CorruptRecordError) and not isinstance(error, RecordQueueMismatch):
        raise error  # pragma: no cover - recovery validated the records
    store._last_store_timestamp = checkpoint.physic_msg_timestamp
    store._mark.set(timestamp=checkpoint.physic_msg_timestamp)
    if store.commit_log.files:  # retention deleted files: queues start at the log's min
        for queue in store._queues.values():
            queue.correct_min_offset(store.commit_log.min_offset)
    abort.touch()


def mark_recovered_damage(
    store: CommitLogStore, damaged: tuple[DamagedRange, ...], end: int
) -> None:
    store.damage.truncate(end)
    for r in damaged:
        logger.error(
            "%s: commit log bytes %s fail their checks; the valid records after them are "
            "kept; the range is refused until repaired (hanet master --repair-from)",
            store.root,
            r,
        )
    store.damage.add(*damaged)  # one write of the ledger


def log_recovery(
    store: CommitLogStore, result: RecoveryResult, had_checkpoint: bool, timestamp: int
) -> None:
    """Log what recovery found (WARNING after an abnormal exit, else INFO)."""
    if not store.commit_log.files:
        return
    stop = result.stop
    if result.data_after is not None:
        logger.warning(
            "%s: a zeroed hole at offset %d: non-zero data follows at %d; the commit log "
            "ends at the hole (the data after it is dropped)",
            store.root,
            result.end_offset,
            result.data_after,
        )
    elif stop is not None and stop.reason is StopReason.INVALID:
        logger.warning(
            "%s: truncating the commit log at %d: %s",
            store.root,
            result.end_offset,
            stop.detail,
        )
    if store._abnormal or not had_checkpoint:
        why = []
        if store._abnormal:
            why.append("abort file present (the last run did not close the store)")
        if not had_checkpoint:
            why.append("no checkpoint file")
        how = (
            f"recovering from the checkpoint's timestamp {timestamp}"
            if store._abnormal and timestamp > 0
            else "recovering from the first file"
            if store._abnormal
            else "recovering from the last files"
        )
        written = store.commit_log.files[-1].end_offset
        level = logging.WARNING if store._abnormal else logging.INFO
        logger.log(
            level,
            "%s: %s: %s, walk from offset %d; valid data ends at %d (%d records, stop: %s); "
            "truncated %d bytes of file space, %d later file(s) deleted",
            store.root,
            "; ".join(why),
            how,
            result.start_offset,
            result.end_offset,
            result.records,
            "end of the last file" if stop is None else stop.reason.value,
            written - result.end_offset,
            result.later_files,
        )
    else:
        logger.info(
            "%s: recovered after a clean exit: walk from offset %d; valid data ends at %d",
            store.root,
            result.start_offset,
            result.end_offset,
        )


def load_queues(store: CommitLogStore) -> None:
    """Open the consume queues under ``consumequeue/``; a damaged one is rebuilt by the
    first dispatch from where it went bad."""
    directory = store.root / "consumequeue"
    if not directory.is_dir():
        return
    for topic_dir in sorted(directory.iterdir()):
        if not topic_dir.is_dir():
            continue
        for queue_dir in sorted(topic_dir.iterdir()):
            if not (queue_dir.is_dir() and queue_dir.name.isdigit()):
                continue
            key = (topic_dir.name, int(queue_dir.name))
            _, restart = load_checked(store._new_queue(*key), partial(store._new_queue, *key))
            if restart is not None:  # rebuilt from the commit log by the first dispatch
                store._rebuild_from = min(store._rebuild_from, restart)
