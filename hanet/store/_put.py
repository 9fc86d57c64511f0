"""Puts: the checks before a batch is written (closed, slave, dispatch stopped, disk full), the
write itself (:class:`~._writer.RecordWriter`), and undoing a batch whose consume queue could
not be written.

A refused message writes nothing. A batch written in step with dispatch is dispatched by the
writer as it goes (one consume queue write per queue); otherwise the store's dispatch catches
up behind it. Then the listeners hear of the new max offset.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ._config import Message, PutResult, PutStatus, StoreRole
from ._create_errors import note_create_error
from ._dispatch import DispatchError, build_index, fail_dispatch
from ._errors import CreateMappedFileError

if TYPE_CHECKING:
    from ._store import CommitLogStore

__all__ = ["refuse_failed", "undo_write", "write"]

logger = logging.getLogger(__name__)


def write(store: CommitLogStore, messages: Iterable[Message]) -> list[PutResult]:
    """Put ``messages`` (``store.put`` / ``put_batch``): the answers, one per message."""
    error = store._dispatch_error
    if isinstance(error, DispatchError) and error.retryable and not store._closed:
        error = store.dispatch()  # a consume queue file could not be created: try again
    if store._closed or store.config.role is StoreRole.SLAVE or error is not None:
        if store._closed:
            detail = "the store is closed"
        elif error is not None:
            detail = f"the store refuses puts: {error}"
        else:
            detail = "a slave store refuses puts"
        refused = PutResult(PutStatus.SERVICE_NOT_AVAILABLE, detail=detail)
        return [refused for _ in messages]
    if store._disk.refresh():
        refused = PutResult(PutStatus.SERVICE_NOT_AVAILABLE, detail=store._disk.detail())
        return [refused for _ in messages]
    if not isinstance(messages, (list, tuple)):
        messages = list(messages)
    now = max(time.time_ns() // 1_000_000, store._last_store_timestamp)
    before = store.commit_log.max_offset
    in_step = store._dispatched == before
    writer = store._writer
    try:
        results = writer.write(messages, now, dispatch=in_step)
    except Exception as exc:  # a consume queue could not be written: undo the batch
        undo_write(store, before)
        fail_dispatch(store, before, None, exc)
        return refuse_failed(store, messages, exc)  # once: never written again here
    if writer.create_error is not None or store._create_error is not None:
        note_create_error(store, writer.create_error)
        writer.create_error = None
    after = store.commit_log.max_offset
    if after != before:
        if after >= store._allocate_mark:
            store._wake_allocator()
        store._validated = after
        store._last_store_timestamp = now
        if in_step:
            store._dispatched = after
            build_index(store)
        else:
            store.dispatch()
        store._notify(after)
    return results


def refuse_failed(
    store: CommitLogStore, messages: Sequence[Message], exc: Exception
) -> list[PutResult]:
    """The answers to a batch whose write failed and was undone: CREATE_MAPPED_FILE_FAILED
    for a file that could not be created (puts go on once it can), else
    SERVICE_NOT_AVAILABLE with the dispatch error that now refuses puts."""
    error = store._dispatch_error
    if isinstance(exc, CreateMappedFileError):
        refused = PutResult(PutStatus.CREATE_MAPPED_FILE_FAILED, detail=str(exc))
    else:
        reason = exc if error is None else error
        refused = PutResult(
            PutStatus.SERVICE_NOT_AVAILABLE, detail=f"the store refuses puts: {reason}"
        )
    return [refused for _ in messages]


def undo_write(store: CommitLogStore, offset: int) -> None:
    """Drop what a failed batch wrote from ``offset`` on: commit log, queue entries, index."""
    files = store.commit_log
    if files.max_offset > offset:
        files.truncate(offset)
    for queue in store._queues.values():
        queue.truncate_physical(offset)
    store._dispatched = min(store._dispatched, offset)
    if store.index is not None:
        store.index.truncate(offset, files)
