"""Dispatch: the consume queue entries (and index keys) of the records in the commit log.

RocketMQ's ReputMessageService: dispatch walks the commit log from the dispatched offset with
a bounds-checked scan (the records were validated when they came in, were written by the
store or were walked by recovery: no second CRC pass), appends the entries of each window's
records with one write per queue (:func:`~._index.group_entries`), skips what a queue already
holds (recovery re-dispatches from a safe point) and damaged ranges, and stops at the data
end, at a partial record or at the first invalid record (sticky: :class:`DispatchError` or the
record's :class:`~._errors.CorruptRecordError`). The index files are built behind it in
batches (:func:`build_index`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ._agreement import QueueMismatchError, RecordQueueMismatch, queue_disagreement
from ._consume_queue import CQ_ENTRY_SIZE
from ._create_errors import note_create_error
from ._errors import CorruptRecordError, CreateMappedFileError, StoreError
from ._index import ROW, ScanResult, group_entries, scan_windows
from ._judge import StopKind, judge_stop

if TYPE_CHECKING:
    from ._store import CommitLogStore

__all__ = [
    "INDEX_CATCH_UP",
    "INDEX_STEP",
    "DispatchError",
    "build_index",
    "dispatch_pending",
    "dispatch_rows",
    "fail_dispatch",
    "stored_before",
]

logger = logging.getLogger(__name__)

INDEX_LAG = 256 * 1024  # dispatched bytes a put or dispatch leaves unindexed at most
INDEX_STEP = 1 << 20  # bytes indexed at most by one put or dispatch, or one flusher step
INDEX_CATCH_UP = 16 << 20  # bytes a lookup, open or close indexes at most (the flusher: all)


class DispatchError(StoreError):
    """A valid record could not be dispatched (its consume queue could not be written: an
    ``OSError`` such as ENAMETOOLONG, ENOSPC, a file in the way, ...).

    Attributes:
        offset: the physical offset of the record that could not be dispatched.
        reason: what failed, e.g. ``"consume queue T/0: [Errno 20] Not a directory: ..."``.
        retryable: the failure was a consume queue file that could not be created (disk full,
            a :class:`CreateMappedFileError`): dispatch tries again at the next put or raw
            append instead of staying stopped.
    """

    def __init__(self, offset: int, reason: str, *, retryable: bool = False) -> None:
        super().__init__(f"dispatch failed at offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason
        self.retryable = retryable


def dispatch_pending(store: CommitLogStore) -> CorruptRecordError | DispatchError | None:
    """Dispatch what lies past the dispatched offset (``store.dispatch`` without the
    listeners); returns the store's dispatch error."""
    error = store._dispatch_error
    if isinstance(error, DispatchError) and error.retryable:
        store._dispatch_error = None  # a file could not be created: try again
    elif error is not None:
        return store.dispatch_error
    files = store.commit_log
    while store._dispatched < files.max_offset:
        skip = store.damaged(store._dispatched, store._dispatched + 1)
        if skip is not None:  # never dispatched: the records after it are
            store._dispatched = skip.end
            continue
        mapped = files.find(store._dispatched)
        if mapped is None:  # pragma: no cover - offsets inside the data always have a file
            break
        base = mapped.start_offset
        view = mapped.view
        # Bytes before validated_offset were checked, body CRCs included, when they came
        # in (a raw append), were written here (a put) or were walked by recovery: dispatch
        # re-reads them with a bounds-checked scan but no second CRC pass. Past it lies at
        # most the head of a record still to come.
        end = min(mapped.wrote, max(store._validated - base, store._dispatched - base))
        damage = store.damage.next_start(store._dispatched) if store.damage else None
        if damage is not None and damage < base + end:
            end = damage - base
        result: ScanResult | None = None
        failed = False
        for result in scan_windows(
            view,
            store._dispatched - base,
            end,
            base,
            check_crc=False,
            check_physical_offset=True,
        ):
            if result.records and not dispatch_rows(store, view, result.rows, base):
                failed = True
                break
        if failed:
            break
        assert result is not None
        verdict = judge_stop(result.stop(base), mapped.end_offset, written=True)
        store._dispatched = base + result.position
        if verdict.damaged:
            store._dispatch_error = verdict.stop.error()
            logger.warning("%s: dispatch stopped: %s", store.root, store._dispatch_error)
            break
        if verdict.kind is not StopKind.NEXT_FILE or mapped.wrote < mapped.size:
            if damage is not None and store._dispatched == damage:
                continue  # skipped at the top of the loop
            break  # the data end, or the rest of the file still to come
        store._dispatched = mapped.end_offset
    build_index(store)
    return store.dispatch_error


def build_index(store: CommitLogStore, *, force: bool = False, budget: int | None = None) -> bool:
    """Index the dispatched records not indexed yet (RocketMQ's ``buildIndex`` dispatcher),
    on masters and slaves, at most ``budget`` bytes of them: after a put or dispatch once
    ``INDEX_LAG`` bytes wait (in batches: one build costs puts little per record; at most
    ``INDEX_STEP``), with ``force`` before a lookup, at open and close (at most
    ``INDEX_CATCH_UP``: a store that never had an index is indexed by the flusher, not
    by its first lookup) and in :meth:`run` every ``flush_interval`` until caught up.
    Returns whether there is nothing more to do now (caught up, or stopped by a file it
    cannot write)."""
    index = store.index
    if index is None:
        return True
    lag = store._dispatched - index.indexed_offset
    if lag <= 0:
        return True
    if not force:
        if lag < INDEX_LAG:
            return False
        budget = INDEX_STEP
    try:
        done = index.build(
            store.commit_log, store._dispatched, budget=budget, skip=store.damage.ranges
        )
        return done or index.error is not None  # a file it cannot write: later
    except Exception:  # pragma: no cover - a bug must not stop puts and replication
        logger.exception("%s: building the index failed at %d", store.root, index.indexed_offset)
        return True


def fail_dispatch(
    store: CommitLogStore, offset: int, queue: tuple[str, int] | None, exc: Exception
) -> None:
    where = "" if queue is None else f"consume queue {queue[0]}/{queue[1]}: "
    if isinstance(exc, CreateMappedFileError):
        error = DispatchError(offset, f"{where}{exc}", retryable=True)
        store._dispatch_error = error
        note_create_error(
            store,
            error.reason,
            logged=error,
            effect="dispatch and puts wait until the file can be created (reads and "
            "replication go on)",
        )
        return
    stop: CorruptRecordError | DispatchError = DispatchError(offset, f"{where}{exc}")
    if isinstance(exc, QueueMismatchError):  # the record disagrees with its queue
        stop = RecordQueueMismatch(offset, f"{where}{exc}")
    store._dispatch_error = stop
    logger.error(
        "%s: %s; puts are refused from now on (reads and replication go on)", store.root, stop
    )


def dispatch_rows(store: CommitLogStore, view: memoryview, rows: bytes, base: int = 0) -> bool:
    """Append the consume queue entries of ``rows`` (one scan of ``view``; see
    ``_index.py``): one write per queue (per run of consecutive queue offsets), as
    :func:`group_entries` groups them. A record already in its queue is skipped (recovery
    re-dispatches from a safe point). False when a consume queue could not be written:
    :attr:`dispatch_error` names the record, :attr:`dispatched_offset` is its offset and
    the queues hold exactly the records before it (as a record-by-record dispatch)."""
    queues = store._queues
    topics: list[str] = []
    last_stored = store._last_store_timestamp
    skipped = False
    highs: dict[tuple[int, int], int] = {}  # (topic id, queue id) -> max queue offset before
    floors: dict[tuple[str, int], int] = {}  # queues written -> their max queue offset before
    key: tuple[str, int] | None = None
    entries: bytes | memoryview = b""
    try:
        for tid, start, length, queue_id, queue_offset, count, packed, stored in group_entries(
            rows
        ):
            first, entries = queue_offset, packed
            if tid == len(topics):
                topics.append(str(view[start : start + length], "utf-8"))
            key = (topics[tid], queue_id)
            queue = store._queue_for(*key)
            high = queue.max_queue_offset
            if key not in floors:
                highs[tid, queue_id] = floors[key] = high
            queue_disagreement(queue, first, packed, view, base, store.damage)  # may raise
            if first < high:  # already (partly) in the queue: skip what it holds
                if first + count <= high:
                    continue
                skipped = True  # part of the group: its max timestamp may not count
                entries = memoryview(entries)[(high - first) * CQ_ENTRY_SIZE :]
                first = high
            queue.append_entries(first, entries)
            last_stored = max(last_stored, stored)
    except Exception as exc:  # a consume queue could not be written
        offset = (
            int.from_bytes(entries[:8], "big", signed=True)
            if len(entries) >= 8
            else store._dispatched
        )
        for written, floor in floors.items():  # undo what a record-by-record dispatch
            queues[written].truncate_physical(offset, floor)  # would not have written yet
        store._last_store_timestamp = stored_before(store, rows, highs, offset)
        store._dispatched = offset
        fail_dispatch(store, offset, key, exc)
        return False
    if skipped:  # the exact record-by-record rule: skipped records do not count
        last_stored = stored_before(store, rows, highs, None)
    store._last_store_timestamp = last_stored
    return True


def stored_before(
    store: CommitLogStore, rows: bytes, highs: dict[tuple[int, int], int], end: int | None
) -> int:
    """The store timestamp a record-by-record dispatch of ``rows`` (up to the record at
    ``end``) leaves: records already in their queues (below ``highs``, each queue's max
    queue offset before) do not count."""
    last = store._last_store_timestamp
    running = dict(highs)
    for offset, _, queue_id, queue_offset, _, stored, _, _, tid in ROW.iter_unpack(rows):
        if end is not None and offset >= end:
            break
        if queue_offset >= running.get((tid, queue_id), 0):
            running[tid, queue_id] = queue_offset + 1
            last = max(last, stored)
    return last
