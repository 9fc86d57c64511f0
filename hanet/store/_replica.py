"""The replica path: raw appends of replicated commit log bytes (an HA slave) and truncation.

Replicated bytes are validated **before** they are copied (:func:`validate_raw`): magic, sizes,
body CRC, the physical offset field against its position, blank records only at a file's end.
A bad record is never kept: the log ends at the last valid record and the store's
``dispatch_error`` says where and why until the next transfer. A trailing partial record is
appended but stays past the validated offset until its rest arrives
(:func:`validate_continued` judges it by its first 8 bytes meanwhile); :func:`truncate_to`
drops it, or anything past a given offset.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ._create_errors import note_create_error
from ._errors import (
    CorruptRecordError,
    CreateMappedFileError,
    OffsetMismatchError,
    StoreClosedError,
)
from ._index import SCAN_WINDOW, scan_index, scan_totals
from ._judge import StopKind, judge_stop

if TYPE_CHECKING:
    from ._store import CommitLogStore

__all__ = ["append_raw", "read_log", "truncate_to", "validate_continued", "validate_raw"]

logger = logging.getLogger(__name__)


def append_raw(
    store: CommitLogStore,
    offset: int,
    data: bytes | bytearray | memoryview,
    *,
    dispatch: bool = True,
) -> None:
    """``store.append_raw``: validate every complete record ``data`` holds (with the head of a
    partial record already in the log), then copy what is valid, note a file that could not be
    created, dispatch (or leave it for ``store.dispatch()``) and notify; see
    :meth:`CommitLogStore.append_raw <hanet.store.CommitLogStore.append_raw>` for the contract.
    """
    if store._closed:
        raise StoreClosedError("the store is closed")
    files = store.commit_log
    empty = not files.files
    if not empty:
        end = files.max_offset
        if offset != end:
            raise OffsetMismatchError(end, offset)
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    store._replica_error = None
    start = offset if empty else store._validated
    if start < offset:  # a partial record already in the log: validate it with the new bytes
        valid_end, error = validate_continued(store, start, offset, memoryview(view))
    else:
        valid_end, error = validate_raw(store, start, memoryview(view))
    keep = len(view) if error is None else max(valid_end - offset, 0)
    if keep:
        try:
            files.append_raw(offset, view if keep == len(view) else view[:keep])
        except CreateMappedFileError as exc:  # nothing was appended
            note_create_error(store, f"commit log: {exc}")
            raise
        if store._create_error is not None:
            note_create_error(store, None)
        if empty:
            store._dispatched = offset
            if store.index is not None:
                store.index.start_at(offset)
            if offset % store.config.mapped_file_size:
                store._write_checkpoint(sync=True)
        store._raw_bytes += keep
        if files.max_offset >= store._allocate_mark:
            store._wake_allocator()
    if error is not None and files.max_offset > valid_end:
        truncate_to(store, valid_end)
    if files.files:
        store._validated = valid_end
    if keep:
        if dispatch:
            store.dispatch()
            store._notify()
        else:
            store._notify_pending = True
    if error is not None:
        logger.warning(
            "%s: replicated bytes failed validation: %s; the commit log ends at %d",
            store.root,
            error,
            files.max_offset,
        )
        store._replica_error = error


def validate_continued(
    store: CommitLogStore, start: int, offset: int, view: memoryview
) -> tuple[int, CorruptRecordError | None]:
    """:meth:`_validate_raw` of the log's bytes ``[start, offset)`` (the head of a partial
    record) followed by ``view``. When ``view`` completes that record, only the record is
    copied together and the rest of ``view`` is validated in place (the same outcome: a
    scan validates each record by its own bytes and position); otherwise all of it.

    A head of at least 8 bytes was kept past :attr:`validated_offset` only because a scan
    found its record (or blank tail) incomplete, which depended on nothing but those 8
    bytes (size and magic) and the position: while ``view`` still does not complete it,
    the outcome is the same without reading or copying anything (so a large record
    arriving in many small frames costs each frame O(1), not a rescan of its head)."""
    held = offset - start
    # The held bytes lie in one file (no record or blank tail crosses a file end): one
    # view of them, copied only when they are joined with the new bytes below.
    head = store.commit_log.read_view(start, held)
    if len(head) < held:  # pragma: no cover - defensive: read them piece by piece
        head = memoryview(read_log(store, start, held))
    if held >= 8:
        need = int.from_bytes(head[:4], "big", signed=True) - held
        if need > len(view):
            return start, None
    pending = bytearray(head)
    head.release()
    if len(pending) >= 4:
        need = int.from_bytes(pending[:4], "big", signed=True) - len(pending)
        if 0 < need <= len(view):
            pending += view[:need]
            record_end, error = validate_raw(store, start, memoryview(pending))
            if error is None and record_end == offset + need:  # that record is valid
                return validate_raw(store, record_end, view[need:])
            del pending[offset - start :]
    pending += view
    return validate_raw(store, start, memoryview(pending))


def read_log(store: CommitLogStore, position: int, size: int) -> bytearray:
    """The commit log's bytes ``[position, position + size)`` (all written), copied."""
    files = store.commit_log
    out = bytearray()
    end = position + size
    while position < end:
        chunk = files.read(position, end - position)
        out += chunk
        position += len(chunk)
    return out


def validate_raw(
    store: CommitLogStore, start: int, buf: memoryview
) -> tuple[int, CorruptRecordError | None]:
    """Validate ``buf``, commit log bytes from the record boundary ``start``.

    Returns the end of the last complete valid record (or blank tail) and the first error.
    """
    size = store.config.mapped_file_size
    end = start + len(buf)
    position = start
    while position < end:
        file_end = position - position % size + size
        segment_end = min(end, file_end)
        index = position - start
        segment = buf[index : index + segment_end - position]
        limit = file_end - position
        if len(segment) <= SCAN_WINDOW:  # one call (what scan_totals makes of it)
            result = scan_index(segment, 0, None, position, limit, check_physical_offset=True)
        else:
            result, _ = scan_totals(segment, 0, None, position, limit, check_physical_offset=True)
        verdict = judge_stop(result.stop(position), file_end, written=True)
        reached = verdict.stop.offset
        if verdict.damaged:
            return reached, verdict.stop.error()
        if verdict.kind is not StopKind.NEXT_FILE or segment_end < file_end:
            return reached, None  # the data end, or the rest of the file still to come
        position = file_end
    return end, None


def truncate_to(store: CommitLogStore, offset: int) -> None:
    """``store.truncate_to``: the commit log, its consume queues and the index end at
    ``offset``, the offsets and errors past it are forgotten, the checkpoint is rewritten; see
    :meth:`CommitLogStore.truncate_to <hanet.store.CommitLogStore.truncate_to>`.
    """
    if store._closed:
        raise StoreClosedError("the store is closed")
    files = store.commit_log
    if not files.files and offset == 0:
        return
    if not files.min_offset <= offset <= files.max_offset:
        low, high = files.min_offset, files.max_offset
        raise ValueError(f"cannot truncate at {offset}: the data is [{low}, {high}]")
    dropped = files.max_offset - offset
    files.truncate(offset)
    for queue in store._queues.values():
        queue.truncate_physical(offset)
    if store.index is not None:
        store.index.truncate(offset, files)
    store._validated = min(store._validated, offset)
    store._dispatched = min(store._dispatched, offset)
    store._mark.set(offset=min(store._mark.offset, offset))
    store.damage.truncate(offset)
    error = store._dispatch_error
    if error is not None and error.offset >= offset:
        store._dispatch_error = None
    store._replica_error = None
    store._write_checkpoint(sync=True)
    if dropped:
        logger.info("%s: truncated the commit log at %d (%d bytes)", store.root, offset, dropped)
