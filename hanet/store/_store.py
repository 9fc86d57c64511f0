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
  :meth:`~CommitLogStore.put_async`, which uses it under SYNC_FLUSH) fsync in a worker thread;
  concurrent waiters share one fsync (group commit: the first waiter flushes everything written
  so far, the others find their offset flushed when it is done).
- :meth:`~CommitLogStore.run` is the flusher service for a nursery: under ASYNC_FLUSH it
  fsyncs every ``flush_interval``; in every mode it writes the checkpoint and flushes the
  consume queues. Without it, data reaches the disk at :meth:`~CommitLogStore.close` or
  through :meth:`~CommitLogStore.wait_flushed`. It also makes the next commit log (and
  consume queue) file ahead of need in a worker thread (``StoreConfig.preallocate_at``), and a
  master's first commit log file before its first put, so the put or raw append that crosses
  into a new file does not reserve it (nor, with ``warm_mapped_files``, pre-fault it); a
  write that finds none ready creates it itself, as without ``run()``. New files are not
  faulted in by default: they take memory as they are written, not all at once.
- The index files (``index/``, :attr:`CommitLogStore.index`; RocketMQ's key index, see
  ``_index_file.py``) are built from the dispatched records in batches: by a put or dispatch
  once 256 KiB wait, and caught up by every lookup (:meth:`~CommitLogStore.query_index`), by
  :meth:`~CommitLogStore.run` each ``flush_interval`` and at open and close; rolled back with
  the commit log (:meth:`~CommitLogStore.truncate_to`, recovery) and fsynced with the
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
(``_statistics.py``); the trio side (group commit, periodic flush, allocator) is
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

from ._codec import MessageRecord, parse_host
from ._config import (
    Message,
    PutResult,
    PutStatus,
    StoreConfig,
    StoreRole,
    StoreStatistics,
)
from ._consume_queue import CQ_BLANK_SIZE, ConsumeQueue
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
from ._recovery import RecoveryResult
from ._repair import mark_read_damage, repair_range
from ._replica import append_raw, truncate_to, validate_continued, validate_raw
from ._scanner import decode_record
from ._statistics import store_statistics
from ._store_files import Checkpoint, CheckpointFile, StoreLock, write_store_sizes
from ._writer import RecordWriter

__all__ = ["CommitLogStore", "Listener"]

logger = logging.getLogger(__name__)


Listener = Callable[[int], None]
"""Called with the new max offset after data was added to the commit log (after raw appends
with ``dispatch=False``: once :meth:`CommitLogStore.dispatch` dispatched them)."""


class CommitLogStore:
    """A RocketMQ-compatible store rooted at a directory. Open it with :meth:`open`.

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
        self._store_host = host
        self._store_port = port
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
            store.commit_log.close()
            for queue in store._queues.values():
                queue.close()
            if store._checkpoint is not None:
                store._checkpoint.close()
            if store.index is not None:
                store.index.close()
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
            self.commit_log.close()
            for queue in self._queues.values():
                queue.close()
            if self._checkpoint is not None:
                self._checkpoint.close()
            if self.index is not None:
                self.index.close()
            (self.root / "abort").unlink(missing_ok=True)
            self._lock.release()

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

    # -- retention ---------------------------------------------------------------------------

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
        if len(files) < 2 or files[0].end_offset > min(self._dispatched, self._flushed):
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

    def _notify(self) -> None:
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
        """:meth:`_validate_raw` of the log's bytes ``[start, offset)`` (the head of a partial
        record) followed by ``view``. When ``view`` completes that record, only the record is
        copied together and the rest of ``view`` is validated in place (the same outcome: a
        scan validates each record by its own bytes and position); otherwise all of it.

        A head of at least 8 bytes was kept past :attr:`validated_offset` only because a scan
        found its record (or blank tail) incomplete, which depended on nothing but those 8
        bytes (size and magic) and the position: while ``view`` still does not complete it,
        the outcome is the same without reading or copying anything (so a large record
        arriving in many small frames costs each frame O(1), not a rescan of its head)."""
        return validate_continued(self, start, offset, view)

    def _validate_raw(self, start: int, buf: memoryview) -> tuple[int, CorruptRecordError | None]:
        """Validate ``buf``, commit log bytes from the record boundary ``start``.

        Returns the end of the last complete valid record (or blank tail) and the first error.
        """
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

    def _flush_all(self) -> None:
        self._flush_commit_log()
        for queue in list(self._queues.values()):
            queue.flush()
        if self.index is not None:
            self.index.flush()
        self._write_checkpoint(sync=True)

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

    # append_raw and _write wake the allocator through these
    @property
    def _allocate_mark(self) -> int:
        return self._flusher.allocate_mark

    def _wake_allocator(self) -> None:
        self._flusher.wake_allocator()

    def _flush_if_open(self) -> None:
        if not self._closed:
            self._flush_all()

    # -- statistics --------------------------------------------------------------------------

    def statistics(self) -> StoreStatistics:
        """A snapshot of the store's state (reads the disk usage if the last reading is older
        than ``disk_check_interval``)."""
        return store_statistics(self)
