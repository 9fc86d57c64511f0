"""New files the store could not create (the disk is full): logged once, cleared once a file is
created again.

A commit log or consume queue file is reserved before it is mapped, so a full disk is a
:class:`~._errors.CreateMappedFileError` at creation: puts that need the file answer
CREATE_MAPPED_FILE_FAILED, raw appends raise it having kept nothing, dispatch waits and
retries. Each path notes it here: an ERROR when it starts, an INFO when files can be created
again; ``CommitLogStore.statistics`` reports the reason meanwhile.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._store import CommitLogStore

__all__ = ["files_created", "note_create_error"]

logger = logging.getLogger(__name__)


def files_created(store: CommitLogStore) -> int:
    """How many commit log and consume queue files the store has created so far."""
    return store.commit_log.created + sum(q.files.created for q in store._queues.values())


def note_create_error(
    store: CommitLogStore,
    reason: str | None,
    *,
    logged: object = None,
    effect: str = "puts that need a new file answer CREATE_MAPPED_FILE_FAILED "
    "(reads and replication of the data held go on)",
) -> None:
    """Log a new file that could not be created (an ERROR once, until a file is created
    again: then an INFO). The ERROR reads ``logged`` (default ``reason``) then ``effect``."""
    if reason is not None:
        if store._create_error is None:
            logger.error("%s: %s; %s", store.root, reason if logged is None else logged, effect)
        store._create_error = reason
        store._created_at_error = files_created(store)
    elif store._create_error is not None and files_created(store) > store._created_at_error:
        logger.info("%s: new files can be created again", store.root)
        store._create_error = None
