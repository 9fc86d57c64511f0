"""The commit log store: puts, raw appends, dispatch to consume queues, flushing, recovery.

Shape (what the HA layer relies on):

- The core API is **synchronous and never blocks on the disk**: :meth:`CommitLogStore.put`,
  :meth:`~CommitLogStore.put_batch` and :meth:`~CommitLogStore.append_raw` write into the
  mapping, dispatch the new records into the consume queues and call the listeners, all
  before they return. They are safe to call from a synchronous pipeline handler. An HA slave
  appends with ``append_raw(..., dispatch=False)`` (validate, copy, report) and runs
  :meth:`~CommitLogStore.dispatch` behind its report: one batch for everything appended
  since, one consume queue write per queue, then the listeners (RocketMQ's
  ReputMessageService). :attr:`~CommitLogStore.dispatched_offset` says how far it got.
- Durability waits are **async**: :meth:`~CommitLogStore.wait_flushed` (and
  :meth:`~CommitLogStore.put_async` under SYNC_FLUSH) share one fsync in a worker thread
  (group commit). :meth:`~CommitLogStore.run` is the flusher service for a nursery (periodic
  flush, checkpoint, index catch-up, the next files made ahead of need): ``_flusher.py``.
  Without it, data reaches the disk at :meth:`~CommitLogStore.close` or through
  :meth:`~CommitLogStore.wait_flushed`.
- The index files (``index/``, :attr:`CommitLogStore.index`; RocketMQ's key index) are built
  from the dispatched records in batches (``_dispatch.py``), caught up by every lookup
  (:meth:`~CommitLogStore.query_index`), rolled back with the commit log and fsynced with the
  consume queues.
- New data is announced to listeners (:meth:`~CommitLogStore.add_listener`), called
  synchronously with the new max offset: the HA master turns that into a wake-up, no polling.
- Replicated bytes are validated **before** they are copied (:meth:`~CommitLogStore.append_raw`,
  ``_replica.py``): a bad record is never kept and :attr:`~CommitLogStore.dispatch_error` says
  where and why; a record that fails while being dispatched stops dispatch there
  (``_dispatch.py``). A full disk is never fatal (``_create_errors.py``, ``_disk_guard.py``):
  puts are refused, reads and replication of the data held go on.

One process at a time: the ``lock`` file is ``flock``-ed, a second opener gets
:class:`StoreLockedError`. The store is not thread-safe; use it from one trio run.

:class:`CommitLogStore` owns the files (commit log, consume queues, index, checkpoint, lock)
and the offsets; its parts are functions over it in their own modules: opening and recovery
(``_open.py``), puts (``_put.py``), the replica path (``_replica.py``), dispatch and the index
build (``_dispatch.py``), damaged ranges (``_damage.py``, ``_repair.py``), statistics
(``_statistics.py``); its reads and the deletion of expired files are mixins (``_reads.py``,
``_cleanup.py``); the trio side (group commit, periodic flush, allocator) is
``_flusher.py``, the flushed offset its worker threads advance ``_flush_mark.py``, the disk
guard (on the store's injectable clock) ``_disk_guard.py``.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path

import trio

from ._cleanup import StoreCleanup
from ._codec import parse_host
from ._config import (
    Message,
    PutResult,
    PutStatus,
    StoreConfig,
    StoreRole,
    StoreStatistics,
)
from ._consume_queue import ConsumeQueue
from ._damage import DamagedRange, DamageLedger
from ._disk_guard import Clock, DiskGuard
from ._dispatch import (
    INDEX_CATCH_UP,
    INDEX_STEP,
    DispatchError,
    build_index,
    dispatch_pending,
)
from ._errors import CorruptRecordError, StoreClosedError
from ._flush_mark import FlushMark
from ._flusher import Flusher
from ._index_file import IndexQueryResult, IndexService
from ._mapped_queue import MappedFileQueue
from ._open import check_sizes, recover
from ._put import write
from ._reads import StoreReads
from ._recovery import RecoveryResult
from ._repair import mark_read_damage, repair_range
from ._replica import append_raw, truncate_to, validate_continued, validate_raw
from ._statistics import store_statistics
from ._store_files import Checkpoint, CheckpointFile, StoreLock, write_store_sizes
from ._writer import RecordWriter

__all__ = ["CommitLogStore", "Listener"]

logger = logging.getLogger(__name__)


Listener = Callable[[int], None]
"""Called with the new max offset after data was added to the commit log (after raw appends
with ``dispatch=False``: once :meth:`CommitLogStore.dispatch` dispatched them)."""


class CommitLogStore(StoreReads, StoreCleanup):
    """A RocketMQ-compatible store rooted at a directory. Open it with :meth:`open`.

    Its reads (:meth:`read`, :meth:`get_messages`, ...) are :class:`~._reads.StoreReads`, the
    deletion of expired files :class:`~._cleanup.StoreCleanup`.

    Attributes:
        root: the store root (``commitlog/``, ``consumequeue/``, ``checkpoint``, ...).
        config: its :class:`StoreConfig`.
        commit_log: the commit log files (a :class:`MappedFileQueue`).
        recovery: what recovery found at open.
    """

    def __init__(
        self, root: Path, config: StoreConfig, lock: StoreLock, clock: Clock = time.monotonic
    ) -> None:
        self.root = root
        self.config = config
        self._lock = lock
        self._checkpoint: CheckpointFile | None = None  # opened by _recover, kept open
        # A slave's commit log is written only by raw appends: through the file, not faulted in
        # first (see MappedFileQueue).
        self.commit_log = MappedFileQueue(
            root / "commitlog",
            config.mapped_file_size,
            warm=config.warm_mapped_files and config.role is not StoreRole.SLAVE,
        )
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._listeners: list[Listener] = []
        self._dispatched = 0
        self._validated = 0
        self._rebuild_from = 2**63 - 1  # where dispatch rebuilds damaged consume queues from
        self._notify_pending = False  # raw appends not announced yet (dispatch=False)
        self._dispatch_error: CorruptRecordError | DispatchError | None = None
        self._replica_error: CorruptRecordError | None = None
        self._mark = FlushMark()  # _flushed, _flushed_store_timestamp; see _flush_commit_log
        self._checkpoint_lock = threading.Lock()  # one checkpoint write at a time
        self._flusher = Flusher(
            config,
            self.commit_log,
            self._mark,
            root=root,
            closed=lambda: self._closed,
            queue_files=lambda: [queue.files for queue in self._queues.values()],
            flush_commit_log=self._flush_commit_log,
            flush_all=self._flush_if_open,
            index_step=partial(build_index, self, force=True, budget=INDEX_STEP),
        )
        self._last_store_timestamp = 0
        self._index_flushed_at = time.monotonic()  # the periodic index fsync (see config)
        self._closed = False
        self._abnormal = False
        self._raw_bytes = 0
        self._disk = DiskGuard(
            root, config.disk_max_used_space_ratio, config.disk_check_interval, clock
        )
        self._create_error: str | None = None
        self._created_at_error = 0
        self.recovery = RecoveryResult(0, 0, None, 0)
        self.damage = DamageLedger(root)
        """The commit log's damaged ranges (kept, refused, repaired from a replica)."""
        host, port = parse_host(config.store_host)
        self._writer = RecordWriter(self.commit_log, config, host, port, self._queue_for)
        self.index: IndexService | None = (
            IndexService(
                root / "index",
                config.max_hash_slot_num,
                config.max_index_num,
                config.max_msgs_num_batch,
            )
            if config.message_index_enable
            else None
        )
        """The index files (``index/``; None when ``message_index_enable`` is off)."""

    # -- opening and closing -----------------------------------------------------------------

    @classmethod
    def open(
        cls, root: Path, config: StoreConfig | None = None, *, clock: Clock = time.monotonic
    ) -> CommitLogStore:
        """Open (or create) the store at ``root`` and recover it. Synchronous.

        ``clock`` (seconds, monotonic) times the disk usage readings (a test's fake clock).

        The file sizes are recorded in ``<root>/store.properties`` when the store is first
        opened (:func:`recorded_file_size` reads them back): a later open with other sizes
        is refused before anything is read.

        Raises:
            StoreLockedError: another process (or another open store) holds it.
            StoreLayoutError: files of another size than configured (or than the store was
                created with), a gap, ...
        """
        config = config or StoreConfig()
        root.mkdir(parents=True, exist_ok=True)
        lock = StoreLock(root / "lock")
        store = cls(root, config, lock, clock)
        try:
            recorded = check_sizes(store)
            recover(store)
            if not recorded:
                write_store_sizes(root, config.mapped_file_size, config.consume_queue_file_size)
        except BaseException:
            store._close_files()
            lock.release()
            raise
        return store

    def damaged(self, start: int, end: int) -> DamagedRange | None:
        """The first damaged range sharing a byte with ``[start, end)``, or None."""
        return self.damage.find(start, end) if self.damage else None

    def mark_damaged(self, offset: int, reason: str) -> DamagedRange | None:
        """The record at ``offset`` failed its checks on a read (an HA transfer): mark it and
        what follows up to the next valid record (or its file's end) damaged, persisted, so
        that it is named and refused and can be repaired; returns the range (the one already
        marked when ``offset`` is in one), None when ``offset`` is outside the data."""
        return mark_read_damage(self, offset, reason)

    def repair(self, damaged: DamagedRange, data: bytes) -> int:
        """Write ``data``, a replica's intact copy, over ``damaged``: see
        :func:`~._repair.repair_range`."""
        return repair_range(self, damaged, data)

    def _queue_for(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self._queues.get((topic, queue_id))
        return self._new_queue(topic, queue_id) if queue is None else queue

    def _new_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = ConsumeQueue(
            self.root / "consumequeue" / topic / str(queue_id),
            topic,
            queue_id,
            self.config.consume_queue_file_size,
            warm=self.config.warm_mapped_files,
        )
        self._queues[topic, queue_id] = queue
        return queue

    def close(self) -> None:
        """Flush everything (blocks on the disk), write the checkpoint, remove ``abort``,
        release the lock. Idempotent. Puts after it answer SERVICE_NOT_AVAILABLE."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.commit_log.max_offset > self._validated:  # a partial replicated record
                self.commit_log.truncate(self._validated)
            if self._notify_pending:  # raw appends left for a dispatch that never came
                self._notify_pending = False
                dispatch_pending(self)
            build_index(self, force=True, budget=INDEX_CATCH_UP)  # the rest at the next open
            self._flush_all()
        finally:
            self._close_files()
            (self.root / "abort").unlink(missing_ok=True)
            self._lock.release()

    def _close_files(self) -> None:
        """Close every file (nothing is flushed; the lock stays held)."""
        self.commit_log.close()
        for queue in self._queues.values():
            queue.close()
        if self._checkpoint is not None:
            self._checkpoint.close()
        if self.index is not None:
            self.index.close()

    async def aclose(self) -> None:
        """:meth:`close` with the final fsyncs in a worker thread."""
        if self._closed:
            return
        build_index(self, force=True, budget=INDEX_CATCH_UP)
        await self._flusher.flush_all()  # after a group commit in flight
        self.close()

    def __enter__(self) -> CommitLogStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    # -- offsets and reads -------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        """The first physical offset holding data."""
        return self.commit_log.min_offset

    @property
    def max_offset(self) -> int:
        """The physical offset right after the last byte written (the next write's offset)."""
        return self.commit_log.max_offset

    @property
    def validated_offset(self) -> int:
        """The end of the last complete record known valid: what an HA slave reports.

        Equal to :attr:`max_offset` except on a slave holding the start of a record whose rest
        has not arrived yet (see :meth:`append_raw`).
        """
        return self._validated

    @property
    def flushed_offset(self) -> int:
        """Data before this physical offset is on disk."""
        return self._flushed

    @property
    def dispatched_offset(self) -> int:
        """Records before this physical offset are in the consume queues."""
        return self._dispatched

    @property
    def dispatch_error(self) -> CorruptRecordError | DispatchError | None:
        """The first record that failed validation or could not be dispatched (a
        :class:`DispatchError`: its consume queue could not be written), or the record of the
        last :meth:`append_raw` that failed validation (not kept), or None.

        Its ``offset`` and ``reason`` say which and why. A dispatch failure is sticky: nothing
        after it is dispatched and puts are refused (SERVICE_NOT_AVAILABLE, with the reason in
        the detail); reads, raw appends and so replication go on.
        """
        return self._dispatch_error or self._replica_error

    async def delete_topic_queues(self, topic: str) -> int:
        """Forget ``topic``'s consume queues and delete their files (RocketMQ's
        ``cleanUnusedTopic`` after DELETE_TOPIC_IN_BROKER); the commit log keeps the records.
        Done between two flushes (the flusher's worker thread never holds a closed queue).
        Returns the queues forgotten."""
        async with self._flusher.exclusive():
            keys = [key for key in self._queues if key[0] == topic]
            for key in keys:
                self._queues.pop(key).close()
            if keys:
                shutil.rmtree(self.root / "consumequeue" / topic, ignore_errors=True)
        return len(keys)

    # -- listeners ---------------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(max_offset)`` synchronously after every put, batch and raw append.

        A listener must not block; an exception it raises is logged and swallowed.
        """
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        """Stop calling ``listener`` (no error if it was not added)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _notify(self, offset: int | None = None) -> None:
        if offset is None:  # (a put passes the commit log's end it has just read)
            offset = self.commit_log.max_offset
        for listener in list(self._listeners):
            try:
                listener(offset)
            except Exception:
                logger.exception("store listener %r failed", listener)

    # -- puts --------------------------------------------------------------------------------

    def put(self, message: Message) -> PutResult:
        """Append one message; synchronous, in memory (see :meth:`put_async` for durability).

        Assigns the queue offset, physical offset and store timestamp, dispatches the message
        to its consume queue and wakes the listeners. A refused message writes nothing.
        """
        (result,) = write(self, (message,))
        return result

    def put_batch(self, messages: Iterable[Message]) -> list[PutResult]:
        """:meth:`put` for many messages, with one timestamp and one listener call."""
        return write(self, messages)

    async def put_async(self, message: Message) -> PutResult:
        """:meth:`put`, then under SYNC_FLUSH wait until the message is fsynced.

        Answers FLUSH_DISK_TIMEOUT (the message stays stored) when the fsync takes longer than
        ``StoreConfig.sync_flush_timeout``. Always checkpoints. Cancellation leaves the message
        stored (it may or may not be on disk yet).
        """
        result = self.put(message)
        if await self._flusher.durable(result.end_offset if result.ok else None):
            return result
        return result._replace(status=PutStatus.FLUSH_DISK_TIMEOUT)

    async def put_batch_async(self, messages: Sequence[Message]) -> list[PutResult]:
        """:meth:`put_batch`, then under SYNC_FLUSH one wait for all the stored messages (each
        keeps its own answer; the stored ones answer FLUSH_DISK_TIMEOUT if it times out)."""
        results = self.put_batch(messages)
        ends = [r.end_offset for r in results if r.ok]
        if await self._flusher.durable(max(ends) if ends else None):
            return results
        return [r._replace(status=PutStatus.FLUSH_DISK_TIMEOUT) if r.ok else r for r in results]

    # -- the disk ------------------------------------------------------------------------------

    def check_disk(self) -> bool:
        """Read the store file system's usage now; returns whether puts are refused for it.

        Puts read it at most every ``disk_check_interval`` seconds (of the store's clock) by
        themselves. When more than ``disk_max_used_space_ratio`` percent is used (RocketMQ's
        and ``df``'s ratio: used over used plus available), puts answer SERVICE_NOT_AVAILABLE
        with the disk detail until usage drops again. Logs a WARNING when that starts and an
        INFO when it ends.
        """
        return self._disk.check()

    @property
    def disk_full(self) -> bool:
        """Whether puts are refused because the disk is used past ``disk_max_used_space_ratio``
        (as of the last :meth:`check_disk`)."""
        return self._disk.full

    # -- raw appends (slave) -----------------------------------------------------------------

    def append_raw(
        self, offset: int, data: bytes | bytearray | memoryview, *, dispatch: bool = True
    ) -> None:
        """Validate, then append replicated commit log bytes at exactly ``offset`` (what an
        HA slave does).

        ``offset`` must be :attr:`max_offset`; an empty store accepts any offset (its first
        file starts at ``offset - offset % mapped_file_size``). The next file is created when
        the last is full. Every complete record the bytes hold (with a partial record already
        in the log before them) is validated *before* anything is copied: magic, sizes, body
        CRC, the physical offset field against its position, blank records only at a file's
        end. A trailing partial record is appended but stays past :attr:`validated_offset`
        until its rest arrives. Then the new records are dispatched and listeners are called.
        Synchronous and in memory.

        With ``dispatch=False`` (an HA slave: validate, copy, report first) the new records
        are left for the next :meth:`dispatch`, which dispatches everything appended since in
        one batch and then calls the listeners (so they hear of records once consumers can
        see them, as RocketMQ's dispatch service notifies message arrival).

        A record that fails validation is never kept: the valid records before it are appended,
        the commit log then ends at the bad record's offset (a partial record held before is
        dropped if it was the bad one) and :attr:`dispatch_error` names the offset and reason
        until the next call. So the caller can tell: all of ``data`` was kept exactly when
        :attr:`max_offset` is ``offset + len(data)`` afterwards.

        Raises:
            OffsetMismatchError: ``offset`` does not continue the commit log.
            StoreClosedError: the store is closed.
        """
        append_raw(self, offset, data, dispatch=dispatch)

    def _validate_continued(
        self, start: int, offset: int, view: memoryview
    ) -> tuple[int, CorruptRecordError | None]:
        """:func:`~._replica.validate_continued` (the tests call it on the store)."""
        return validate_continued(self, start, offset, view)

    def _validate_raw(self, start: int, buf: memoryview) -> tuple[int, CorruptRecordError | None]:
        """:func:`~._replica.validate_raw` (the tests call it on the store)."""
        return validate_raw(self, start, buf)

    def truncate_to(self, offset: int) -> None:
        """Make ``offset`` the end of the commit log (an HA slave dropping bad or partial bytes).

        The commit log is truncated there (the rest of its file zeroed, later files deleted),
        consume queue entries at or past it are dropped, a :attr:`dispatch_error` at or past
        it is forgotten and the checkpoint is rewritten. Synchronous; the checkpoint write
        waits for the disk.

        Raises:
            ValueError: ``offset`` is outside [:attr:`min_offset`, :attr:`max_offset`].
            StoreClosedError: the store is closed.
        """
        truncate_to(self, offset)

    # -- dispatch ----------------------------------------------------------------------------

    def dispatch(self) -> CorruptRecordError | DispatchError | None:
        """Dispatch every complete record past :attr:`dispatched_offset`.

        The records were validated when they came in (:meth:`append_raw`, body CRC
        included), were written by this store or were walked by recovery: dispatch reads
        them again with a bounds-checked scan (sizes, magic, offsets) but no second CRC pass.

        Stops at the data end, at a partial record (waiting for its rest) or at the first
        invalid record, which becomes :attr:`dispatch_error` (sticky: nothing past it is ever
        dispatched). Re-dispatching a record already in its consume queue is a no-op.
        Then, if raw appends with ``dispatch=False`` were made since the last call, calls the
        listeners. Returns :attr:`dispatch_error`.
        """
        try:
            return dispatch_pending(self)
        finally:
            if self._notify_pending:
                self._notify_pending = False
                self._notify()

    def build_index(self) -> None:
        """Index every dispatched record now (puts leave up to 256 KiB to the next batch;
        lookups, :meth:`run`, open and :meth:`close` catch up by themselves)."""
        build_index(self, force=True)

    def query_index(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> IndexQueryResult:
        """The physical offsets of the messages of ``topic`` whose ``KEYS`` or ``UNIQ_KEY``
        hashes as ``key`` (RocketMQ's ``queryOffset``: matched by hash, so a caller checks
        the records), stored in ``[begin, end]`` ms; at most ``max_num`` (and
        ``max_msgs_num_batch``), ascending, each once; with the newest index file's end
        timestamp and end offset (RocketMQ's ``indexLastUpdateTimestamp`` /
        ``indexLastUpdatePhyoffset``). The records waiting for the index are indexed first
        (up to 16 MiB of them: a larger backlog, a store that never had an index, is the
        flusher's, and the end offset says how far it got). Nothing without the index
        (``message_index_enable`` off)."""
        if self.index is None:
            return [], 0, 0
        build_index(self, force=True, budget=INDEX_CATCH_UP)
        offsets, stamp, offset = self.index.query(topic, key, max_num, begin, end)
        low = self.commit_log.min_offset
        return sorted({o for o in offsets if low <= o < self._dispatched}), stamp, offset

    # -- durability --------------------------------------------------------------------------

    async def wait_flushed(self, offset: int) -> None:
        """Wait until commit log data before ``offset`` is fsynced (group commit).

        The first waiter fsyncs everything written so far in a worker thread; waiters that
        arrive meanwhile wait for that fsync (all woken at once), and the first of them whose
        offset it did not cover starts the next one. Always checkpoints.
        Cancellation (a timeout) abandons the wait at once, not the fsync in progress: it
        counts when it returns, and later waiters join it.

        Raises:
            StoreClosedError: the store was closed before the data was flushed.
            StoreError: the fsync failed (its ``OSError`` is the cause), or the commit log
                ends before ``offset`` (truncated since).
        """
        await self._flusher.wait_flushed(offset)

    # The flushed offset and its timestamp live in a FlushMark (worker threads advance it, the
    # event loop's thread sets it: recovery, truncate_to).

    @property
    def _flushed(self) -> int:
        return self._mark.offset

    @property
    def _flushed_store_timestamp(self) -> int:
        return self._mark.timestamp

    def _flush_commit_log(self) -> None:
        """Fsync the commit log (blocks; any thread, also two at once): the flushed offset
        moves forward only, and not at all past a truncation made meanwhile."""
        token = self._mark.token()  # before the target is read
        timestamp = self._last_store_timestamp  # before the target: never newer than its data
        target = self.commit_log.max_offset
        self.commit_log.flush()
        self._mark.advance(token, target, timestamp)

    def _flush_all(self, *, periodic: bool = False) -> None:
        self._flush_commit_log()
        for queue in list(self._queues.values()):
            queue.flush()
        if self.index is not None and (not periodic or self._index_flush_due()):
            self.index.flush()
        self._write_checkpoint(sync=True)

    def _index_flush_due(self) -> bool:
        """Whether the periodic flush fsyncs the index files now (``index_flush_interval``)."""
        interval = self.config.index_flush_interval
        if interval is None:
            return True
        now = time.monotonic()
        if now - self._index_flushed_at < interval:
            return False
        self._index_flushed_at = now
        return True

    def flush(self) -> int:
        """Fsync the commit log, consume queues and checkpoint now (blocks on the disk).

        Returns the flushed offset. For tools and shutdown; services use :meth:`run`.
        """
        if self._closed:
            raise StoreClosedError("the store is closed")
        self._flush_all()
        return self._flushed

    def _write_checkpoint(self, *, sync: bool) -> None:
        assert self._checkpoint is not None  # opened with the store
        with self._checkpoint_lock:  # the last write holds the newest pair
            flushed, timestamp = self._mark.pair()
            start = self.commit_log.min_offset
            if self.commit_log.files and start == self.commit_log.files[0].start_offset:
                start = 0
            self._checkpoint.write(
                Checkpoint(
                    physic_msg_timestamp=timestamp,
                    logics_msg_timestamp=timestamp,
                    index_msg_timestamp=timestamp,
                    master_flushed_offset=flushed,
                    confirm_phy_offset=self._dispatched,
                    data_start_offset=start,
                ),
                sync=sync,
            )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The flusher service: run it in a nursery for the life of the store.

        Every ``flush_interval`` it fsyncs the commit log (ASYNC_FLUSH; under SYNC_FLUSH the
        puts' waits do that), the consume queues and the checkpoint, in a worker thread.
        Returns when the store is closed; cancel it to stop (a flush in progress finishes).
        """
        await self._flusher.run(task_status=task_status)

    # raw appends and puts (_replica.py, _put.py) wake the allocator through these
    @property
    def _allocate_mark(self) -> int:
        return self._flusher.allocate_mark

    def _wake_allocator(self) -> None:
        self._flusher.wake_allocator()

    def _flush_if_open(self) -> None:
        if not self._closed:
            self._flush_all(periodic=True)

    # -- statistics --------------------------------------------------------------------------

    def statistics(self) -> StoreStatistics:
        """A snapshot of the store's state (reads the disk usage if the last reading is older
        than ``disk_check_interval``)."""
        return store_statistics(self)
