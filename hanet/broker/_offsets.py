"""Consumer offsets: what each consumer group consumed of each queue (RocketMQ's
``ConsumerOffsetManager`` and its ``consumerOffset.json``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

from hanet.errors import HanetError
from hanet.protocol import ConsumerOffsetsInfo, offset_table_from_json, offset_table_to_json

from ._config_files import read_config_file, write_config_file

__all__ = [
    "MAX_OFFSET_ENTRIES",
    "MAX_QUEUE_ID",
    "MAX_QUEUE_OFFSETS",
    "OFFSETS_FILE",
    "ConsumerOffsets",
    "ConsumerOffsetsFull",
]

log = logging.getLogger("hanet.broker")

OffsetTable = Mapping[tuple[str, str], Mapping[int, int]]
"""Committed offsets: ``(topic, group) -> {queue_id: offset}``."""

OFFSETS_FILE = Path("config") / "consumerOffset.json"
"""Where a broker keeps its consumer offsets, under its store directory."""

MAX_OFFSET_ENTRIES = 100_000
"""Most ``topic@group`` entries a broker keeps offsets for (anyone who reaches the broker port
can commit: this bounds what is kept and written every few seconds)."""

MAX_QUEUE_OFFSETS = 1_000_000
"""Most queue offsets (over all ``topic@group`` entries) a broker keeps."""

MAX_QUEUE_ID = 0xFFFF
"""The largest queue id an offset is kept for."""


class ConsumerOffsetsFull(HanetError, ValueError):
    """A commit that would add an entry or a queue offset beyond the table's bounds, or a
    queue id outside ``[0, MAX_QUEUE_ID]``."""


def _table(document: dict[str, Any]) -> dict[tuple[str, str], dict[int, int]]:
    return offset_table_from_json(document.get("offsetTable", {}))


def _now() -> float | None:
    """Trio's clock, None outside a trio run (offsets persisted by a plain function)."""
    try:
        return trio.current_time()
    except RuntimeError:
        return None


class ConsumerOffsets:
    """The committed offset of each ``(topic, group, queue)``, in memory, persisted to a JSON
    file in RocketMQ's shape (``{"offsetTable": {"topic@group": {"0": 12}}}``).

    Commits change memory only; :meth:`persist` writes the table when it changed since the last
    write (atomically, keeping the previous file as ``.bak``: see
    :func:`~hanet.broker.write_config_file`), and :meth:`run` does so every few seconds and
    once more when it is cancelled. A process killed in between loses at most one interval of
    commits: its consumers consume those messages again (at-least-once).

    Loading (:meth:`load`): a file that is not JSON or not an offset table is reported at ERROR
    with its path, and the broker starts from ``consumerOffset.json.bak`` (RocketMQ's
    behaviour: the write before the last one); if that is missing or unusable too the broker
    refuses to start with a :class:`~hanet.broker.ConfigFileError` naming the files.

    Commits that would add a ``topic@group`` past ``max_entries`` or a queue offset past
    ``max_queue_offsets``, or add a queue id outside ``[0, MAX_QUEUE_ID]``, are refused
    (:class:`ConsumerOffsetsFull`); commits to offsets the table holds always pass. A slave's
    copy of its master's table (:meth:`merge`) is refused whole when it would go past the
    same bounds.

    Args:
        path: the file (None: memory only, nothing persisted).
        table: the offsets to start with.
        max_entries: see :data:`MAX_OFFSET_ENTRIES`.
        max_queue_offsets: see :data:`MAX_QUEUE_OFFSETS`.
    """

    def __init__(
        self,
        path: Path | None = None,
        table: OffsetTable | None = None,
        *,
        max_entries: int = MAX_OFFSET_ENTRIES,
        max_queue_offsets: int = MAX_QUEUE_OFFSETS,
    ) -> None:
        self.path = path
        self._table: dict[tuple[str, str], dict[int, int]] = {
            key: dict(queues) for key, queues in (table or {}).items()
        }
        self.max_entries = max_entries
        self.max_queue_offsets = max_queue_offsets
        self._queue_offsets = sum(len(queues) for queues in self._table.values())
        self._dirty = False
        self.persists = 0
        """How many times the file was written."""
        self.last_persisted: float | None = None
        """When (trio time) the file was last written (None: not since start, or written
        outside trio)."""
        self.last_error: str | None = None
        """Why the last write failed (None after a success)."""
        # Writes from worker threads (persist_async) and the final blocking one never overlap
        # on the file; the trio lock keeps the async writes in the order of their snapshots.
        self._file_lock = threading.Lock()
        self._async_lock = trio.Lock()

    @classmethod
    def load(cls, path: Path) -> ConsumerOffsets:
        """The offsets persisted in ``path`` (none when it does not exist).

        Raises:
            ConfigFileError: the file and its ``.bak`` are unusable.
        """
        table = read_config_file(path, _table)
        offsets = cls(path, table)
        if table:
            log.info("consumer offsets: %d topic@group entries from %s", len(table), path)
        return offsets

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record that ``group`` consumed ``topic``'s queue up to ``offset`` (the next offset
        it will read).

        Raises:
            ConsumerOffsetsFull: the commit would add a ``topic@group`` or a queue offset
                beyond the table's bounds, or a queue id outside ``[0, MAX_QUEUE_ID]``.
        """
        queues = self._table.get((topic, group))
        if queues is not None and queue_id in queues:
            if queues[queue_id] != offset:
                queues[queue_id] = offset
                self._dirty = True
            return
        if not 0 <= queue_id <= MAX_QUEUE_ID:
            raise ConsumerOffsetsFull(
                f"queue id {queue_id} of {topic}@{group} is outside [0, {MAX_QUEUE_ID}]"
            )
        if queues is None and len(self._table) >= self.max_entries:
            raise ConsumerOffsetsFull(
                f"consumer offsets already hold {len(self._table)} topic@group entries "
                f"(at most {self.max_entries}): {topic}@{group} is not added"
            )
        if self._queue_offsets >= self.max_queue_offsets:
            raise ConsumerOffsetsFull(
                f"consumer offsets already hold {self._queue_offsets} queue offsets "
                f"(at most {self.max_queue_offsets}): queue {queue_id} of {topic}@{group} "
                "is not added"
            )
        if queues is None:
            queues = self._table[(topic, group)] = {}
        queues[queue_id] = offset
        self._queue_offsets += 1
        self._dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when ``group`` never committed one for the queue."""
        queues = self._table.get((topic, group))
        if queues is None:
            return -1
        return queues.get(queue_id, -1)

    def remove_group(self, group: str) -> int:
        """Forget every offset of ``group`` (DELETE_SUBSCRIPTIONGROUP with ``removeOffset``);
        returns how many ``topic@group`` entries went."""
        keys = [key for key in self._table if key[1] == group]
        for key in keys:
            self._queue_offsets -= len(self._table.pop(key))
        if keys:
            self._dirty = True
        return len(keys)

    def groups(self) -> int:
        """How many consumer groups have an offset."""
        return len({group for _, group in self._table})

    def entries(self) -> int:
        """How many ``topic@group`` entries the table holds."""
        return len(self._table)

    def table(self) -> dict[tuple[str, str], dict[int, int]]:
        """A copy of the table: ``(topic, group) -> {queue_id: offset}``."""
        return {key: dict(queues) for key, queues in self._table.items()}

    def update(self, table: OffsetTable) -> None:
        """Take every ``(topic, group)`` of ``table`` as it is there (a slave copying its
        master's offsets: RocketMQ's ``offsetTable.putAll``); others are kept."""
        for key, queues in table.items():
            old = self._table.get(key)
            if old != queues:
                self._queue_offsets += len(queues) - (len(old) if old is not None else 0)
                self._table[key] = dict(queues)
                self._dirty = True

    def merge(self, table: OffsetTable) -> dict[tuple[str, str], dict[int, int]]:
        """Take, per queue, the larger of this table's offset and ``table``'s (a slave
        syncing from its master: neither side's newer commits are lost); returns the
        offsets this table holds that are larger than ``table``'s (what the master lacks:
        commits made to the slave while the master was down), queues it lacks included."""
        self.check_merge(table)
        newer: dict[tuple[str, str], dict[int, int]] = {}
        for key, queues in table.items():
            mine = self._table.get(key)
            if mine is None:
                mine = self._table[key] = {}
            for queue_id, offset in queues.items():
                old = mine.get(queue_id)
                if old is None:
                    mine[queue_id] = offset
                    self._queue_offsets += 1
                    self._dirty = True
                elif offset > old:
                    mine[queue_id] = offset
                    self._dirty = True
        for key, mine in self._table.items():
            theirs = table.get(key, {})
            for queue_id, offset in mine.items():
                if offset > theirs.get(queue_id, -1):
                    newer.setdefault(key, {})[queue_id] = offset
        return newer

    def check_merge(self, table: OffsetTable) -> None:
        """Refuse a master's table that would take this one past its bounds (a slave's copy is
        bounded like its own commits); :meth:`merge` checks first too.

        Raises:
            ConsumerOffsetsFull: it would (nothing is changed).
        """
        entries = len(self._table)
        queue_offsets = self._queue_offsets
        for key, queues in table.items():
            mine = self._table.get(key)
            if mine is None:
                entries += 1
                mine = {}
            for queue_id in queues:
                if not 0 <= queue_id <= MAX_QUEUE_ID:
                    raise ConsumerOffsetsFull(
                        f"the master's offset table holds queue id {queue_id} of "
                        f"{key[0]!r:.80}@{key[1]!r:.80}, outside [0, {MAX_QUEUE_ID}]"
                    )
                if queue_id not in mine:
                    queue_offsets += 1
        if entries > self.max_entries or queue_offsets > self.max_queue_offsets:
            raise ConsumerOffsetsFull(
                f"the master's offset table would make {entries} topic@group entries and "
                f"{queue_offsets} queue offsets here (at most {self.max_entries} and "
                f"{self.max_queue_offsets}): not taken"
            )

    def status(self) -> ConsumerOffsetsInfo:
        """The STATUS document's ``consumer_offsets`` section (ages by trio's clock)."""
        now = _now()
        last = self.last_persisted
        return ConsumerOffsetsInfo(
            groups=self.groups(),
            entries=self.entries(),
            dirty=self._dirty,
            persists=self.persists,
            last_persisted_ago=None if last is None or now is None else round(now - last, 3),
            last_error=self.last_error,
        )

    @property
    def dirty(self) -> bool:
        """Whether the table changed since it was last persisted."""
        return self._dirty

    def persist(self) -> bool:
        """Write the table if it changed (and has a file); returns whether it wrote. Blocks:
        within trio, :meth:`persist_async` writes in a worker thread.

        Raises:
            OSError: the file cannot be written (the table stays dirty).
        """
        document = self._snapshot()
        if document is None:
            return False
        try:
            self._write(document)
        except OSError as exc:
            self._failed(exc)
            raise
        self._wrote()
        return True

    async def persist_async(self) -> bool:
        """:meth:`persist` with the file written in a worker thread: the table is snapshotted
        on the trio thread, so commits go on while the file is written (they make the table
        dirty again for the next write).

        Raises:
            OSError: the file cannot be written (the table is dirty again).
        """
        async with self._async_lock:
            document = self._snapshot()
            if document is None:
                return False
            try:
                await trio.to_thread.run_sync(self._write, document)
            except OSError as exc:
                self._failed(exc)
                raise
            self._wrote()
            return True

    def _snapshot(self) -> dict[str, Any] | None:
        """The document to write (the table is then clean), None when nothing is to be written."""
        if not self._dirty or self.path is None:
            return None
        self._dirty = False
        return {"offsetTable": offset_table_to_json(self._table)}

    def _write(self, document: dict[str, Any]) -> None:
        """Write ``document`` (a snapshot) to the file (any thread).

        Raises:
            OSError: the file cannot be written.
        """
        assert self.path is not None
        with self._file_lock:
            write_config_file(self.path, document)

    def _wrote(self) -> None:
        self.persists += 1
        self.last_persisted = _now()
        self.last_error = None

    def _failed(self, exc: OSError) -> None:
        self._dirty = True  # the snapshot was not written: the next round tries again
        self.last_error = f"{type(exc).__name__}: {exc}"

    async def run(
        self, interval: float, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Persist every ``interval`` seconds (in a worker thread) until cancelled, then once
        more (blocking, so that it happens while the run is cancelled).

        A failed write is logged at WARNING and tried again next round.
        """
        task_status.started()
        try:
            while True:
                await trio.sleep(interval)
                try:
                    await self.persist_async()
                except OSError as exc:
                    self._log_failure(exc)
        finally:
            try:
                self.persist()
            except OSError as exc:
                self._log_failure(exc)

    def _log_failure(self, exc: OSError) -> None:
        log.warning("cannot write consumer offsets to %s: %s", self.path, exc)
