"""The store's trio side: the group commit, the periodic flush and the allocator ahead of need.

Everything else in the store is synchronous. The :class:`Flusher` runs what blocks on the disk
(fsyncs, reserving the next file) in worker threads, through callables the store hands it:

- :meth:`Flusher.wait_flushed` is the group commit (:meth:`Flusher.durable`, what a SYNC_FLUSH
  put waits for, bounded by ``sync_flush_timeout``): the first waiter fsyncs everything written
  so far, waiters that arrive meanwhile wait for that fsync (all woken at once), and the first
  of them whose offset it did not cover starts the next one.
- :meth:`Flusher.run` is the service: every ``flush_interval`` it catches the index up (in
  steps, puts go on between them) and flushes the commit log (ASYNC_FLUSH), the consume queues,
  the index and the checkpoint. It also starts the allocator (``preallocate_at``), which makes
  the next commit log and consume queue files in a worker thread when a write passes
  :attr:`Flusher.allocate_mark`, or every ``flush_interval``.
- :meth:`Flusher.exclusive` is the gap between two flushes, for what must not run under one
  (closing, deleting a topic's queues).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from ._config import FlushDiskType, StoreConfig, StoreRole
from ._errors import StoreClosedError, StoreError
from ._flush_mark import FlushMark
from ._mapped_queue import MappedFileQueue

if TYPE_CHECKING:
    from outcome import Outcome

__all__ = ["NEVER", "Flusher"]

logger = logging.getLogger(__name__)

NEVER = 2**63
"""An :attr:`Flusher.allocate_mark` no write reaches."""

_QUEUE_FILL = 0.9  # consume queue files are preallocated once this full (small, many queues)


class _Fsync:
    """One group commit fsync: set when its thread returned, with the error it raised."""

    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: BaseException | None = None


class Flusher:
    """The group commit, the periodic flush and the allocator of one store (see the module doc).

    Args:
        config: the store's configuration.
        commit_log: its commit log files.
        mark: its flushed offset (advanced by ``flush_commit_log``).
        root: the store root (for log messages).
        closed: whether the store is closed.
        queue_files: the files of each consume queue now.
        flush_commit_log: fsync the commit log (blocks; run in a worker thread).
        flush_all: fsync everything and write the checkpoint unless the store is closed
            (blocks; run in a worker thread).
        index_step: index a step of the records waiting; True when caught up.
    """

    def __init__(
        self,
        config: StoreConfig,
        commit_log: MappedFileQueue,
        mark: FlushMark,
        *,
        root: Path,
        closed: Callable[[], bool],
        queue_files: Callable[[], Iterable[MappedFileQueue]],
        flush_commit_log: Callable[[], None],
        flush_all: Callable[[], None],
        index_step: Callable[[], bool],
    ) -> None:
        self._config = config
        self._commit_log = commit_log
        self._mark = mark
        self._root = root
        self._closed = closed
        self._queue_files = queue_files
        self._flush_commit_log = flush_commit_log
        self._flush_all = flush_all
        self._index_step = index_step
        self._lock = trio.Lock()  # held by the periodic flush
        self._fsync: _Fsync | None = None  # the group commit in flight (until it returns)
        self.allocate_mark = NEVER
        """A commit log max offset that wakes the allocator (:meth:`wake_allocator`)."""
        self._allocate_wanted: trio.Event | None = None

    # -- the group commit --------------------------------------------------------------------

    async def wait_flushed(self, offset: int) -> None:
        """Wait until commit log data before ``offset`` is fsynced (group commit; see the
        module doc). Cancellation (a timeout) abandons the wait, never the fsync: it goes on in
        its thread, counts when it returns, and later waiters join it.

        Raises:
            StoreClosedError: the store was closed before the data was flushed.
            StoreError: the fsync this wait joined failed (the error is its cause), or the
                commit log ends before ``offset`` (truncated since those bytes were written).
        """
        mark = self._mark
        if mark.offset >= offset:
            await trio.lowlevel.checkpoint()
            return
        while mark.offset < offset:
            if self._closed():
                raise StoreClosedError("the store was closed before the data was flushed")
            end = self._commit_log.max_offset
            if offset > end:  # truncated meanwhile (a slave): no fsync will ever reach it
                raise StoreError(f"cannot wait for offset {offset}: past the data end {end}")
            fsync = self._fsync
            if fsync is None:
                fsync = self._fsync = _Fsync()
                # One scheduling round first: putters woken with us write their records and
                # join this fsync instead of needing the next one.
                await trio.lowlevel.cancel_shielded_checkpoint()
                self._start(fsync)
            await fsync.done.wait()
            if fsync.error is not None:
                raise StoreError(f"the commit log fsync failed: {fsync.error}") from fsync.error

    def _start(self, fsync: _Fsync) -> None:
        """Run the commit log fsync in a thread of its own (not a cancellable wait for one:
        a put's timeout must not wait for the disk); it reports back through the event loop."""
        token = trio.lowlevel.current_trio_token()

        def deliver(result: Outcome[None]) -> None:  # in the worker thread
            error: BaseException | None = None
            try:
                result.unwrap()
            except BaseException as exc:  # handed to the waiters
                error = exc
            try:
                token.run_sync_soon(self._finished, fsync, error)
            except trio.RunFinishedError:
                pass  # the run is over: nobody waits for it

        trio.lowlevel.start_thread_soon(self._flush_commit_log, deliver, name="hanet fsync")

    def _finished(self, fsync: _Fsync, error: BaseException | None) -> None:
        if self._fsync is fsync:
            self._fsync = None
        if error is not None:
            fsync.error = error
            logger.error("%s: the commit log fsync failed: %s", self._root, error)
        fsync.done.set()

    async def durable(self, offset: int | None) -> bool:
        """What a put waits for: under SYNC_FLUSH, :meth:`wait_flushed` for ``offset`` up to
        ``sync_flush_timeout`` (False when that ran out); else (or with ``offset`` None:
        nothing was stored) one checkpoint, True."""
        if offset is None or self._config.flush_disk_type is not FlushDiskType.SYNC_FLUSH:
            await trio.lowlevel.checkpoint()
            return True
        with trio.move_on_after(self._config.sync_flush_timeout):
            await self.wait_flushed(offset)
            return True
        return False

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """Between two flushes: a group commit in flight finishes first, and the periodic
        flush waits until the block is left."""
        while self._fsync is not None:
            await self._fsync.done.wait()
        async with self._lock:
            yield

    async def flush_all(self) -> None:
        """:meth:`exclusive`-ly, everything flushed in a worker thread (as the service does)."""
        async with self.exclusive():
            await trio.to_thread.run_sync(self._flush_all)

    # -- the service -------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The periodic flush and the allocator, until the store is closed (or cancelled: a
        flush in progress finishes)."""
        async with trio.open_nursery() as nursery:
            if self._config.preallocate_at is not None:
                await nursery.start(self._allocate_ahead, self._config.preallocate_at)
            task_status.started()
            while not self._closed():
                await trio.sleep(self._config.flush_interval)
                while not self._closed() and not self._index_step():
                    await trio.lowlevel.checkpoint()  # puts go on between steps
                async with self._lock:
                    await trio.to_thread.run_sync(self._flush_all)
            nursery.cancel_scope.cancel()

    # -- the allocator -----------------------------------------------------------------------

    async def _allocate_ahead(
        self, fill: float, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Make the next commit log file (and consume queue files) ahead of need, in a worker
        thread: woken by a write past :attr:`allocate_mark`, else every ``flush_interval``."""
        task_status.started()
        try:
            # A master's commit log starts at 0: its first file is made ahead too, so the
            # first put does not reserve and map it on the event loop.
            first = 0 if self._config.role is StoreRole.MASTER else None
            while not self._closed():
                failed = not await self._preallocate(self._commit_log, fill, first)
                for files in list(self._queue_files()):
                    await self._preallocate(files, max(fill, _QUEUE_FILL))
                wanted = self._allocate_wanted = trio.Event()
                # After a failure (a full disk) only the timer tries again, not every write.
                self.allocate_mark = NEVER if failed else self._next_allocation_mark(fill)
                with trio.move_on_after(self._config.flush_interval):
                    await wanted.wait()
        finally:
            self.allocate_mark = NEVER
            self._allocate_wanted = None

    def _next_allocation_mark(self, fill: float) -> int:
        files = self._commit_log
        if not files.files:
            return 0
        last = files.files[-1]
        start = last.end_offset if files.ready_next is not None else last.start_offset
        return start + int(last.size * fill)

    def wake_allocator(self) -> None:
        """A write passed :attr:`allocate_mark`: the allocator looks now."""
        self.allocate_mark = NEVER
        wanted = self._allocate_wanted
        if wanted is not None:
            wanted.set()

    async def _preallocate(
        self, files: MappedFileQueue, fill: float, first: int | None = None
    ) -> bool:
        """Preallocate the next file of ``files`` (its first one at ``first`` when it has
        none) if it is due; False if that failed."""
        start = files.begin_next(fill, first)
        if start is None:
            return True
        failed = False
        try:
            await trio.to_thread.run_sync(files.allocate_next, start)
        except (OSError, StoreError) as exc:  # the write that needs it will create it (or say
            failed = True  # why: CREATE_MAPPED_FILE_FAILED)
            logger.debug("%s: cannot preallocate %s: %s", self._root, files.directory, exc)
        finally:
            files.end_next()
        return not failed
