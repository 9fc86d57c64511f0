"""Where the data is: stores named by a path or a glob, and how their files split into ranges.

Pure and synchronous (no pyspark, no pyarrow): the data sources plan their partitions with it
on the driver, and ``bench/spark_scan.py`` uses it for its single-process baseline.

- :func:`find_stores` turns a ``load()`` path (a store root, a ``commitlog/`` directory, or a
  glob of several) into :class:`StoreLocation` objects, checked by the store's own
  :class:`~hanet.store.CommitLogReader` (equal file sizes, no gaps).
- :func:`plan_commit_log` gives one :class:`CommitLogRange` per commit log file, or several
  for a file larger than ``max_range_bytes``, cut at record boundaries found by
  :func:`find_record_start`.
- :func:`plan_consume_queues` lists the consume queue files (:class:`ConsumeQueueFile`).
"""

from __future__ import annotations

import glob
import mmap
import os
from pathlib import Path

import attrs

from hanet.store import (
    CommitLogReader,
    CorruptRecordError,
    StoreLayoutError,
    decode_record,
    resolve_store_dir,
)
from hanet.store.lowlevel import MAGIC_V1, MAGIC_V2, list_mapped_files

__all__ = [
    "DEFAULT_DRIVER_ROWS",
    "DEFAULT_MAX_RANGE_BYTES",
    "SYNC_SEARCH_BYTES",
    "CommitLogRange",
    "ConsumeQueueFile",
    "StoreLocation",
    "find_record_start",
    "find_stores",
    "plan_commit_log",
    "plan_consume_queues",
]

DEFAULT_MAX_RANGE_BYTES = 128 * 1024 * 1024
"""Files larger than this (128 MiB, Spark's ``maxPartitionBytes``) are read in several ranges."""
DEFAULT_DRIVER_ROWS = 200_000
"""The jobs read stores of at most this many rows in the driver (:mod:`hanet.spark._local`): a
fraction of a second of native scan, about 30 MB of the audit's columns. Here, not there,
because the command line needs it without pyarrow."""
SYNC_SEARCH_BYTES = 8 * 1024 * 1024
"""How far :func:`find_record_start` looks for a record start before giving up (8 MiB: twice
the largest RocketMQ message)."""

_MAGICS = (MAGIC_V1.to_bytes(4, "big"), MAGIC_V2.to_bytes(4, "big"))
_MAGIC_POSITION = 4  # MAGICCODE follows TOTALSIZE
_GLOB_CHARS = frozenset("*?[")


@attrs.frozen
class StoreLocation:
    """One store found by :func:`find_stores`.

    Attributes:
        name: what the ``store`` column says: the path as given (or as the glob matched it).
        commit_log_dir: its ``commitlog/`` directory (absolute).
        root: the store root holding ``consumequeue/`` (absolute), or None for a bare commit
            log directory.
    """

    name: str
    commit_log_dir: Path
    root: Path | None


@attrs.frozen
class CommitLogRange:
    """A byte range of one commit log file: what one partition reads.

    Attributes:
        store: the ``store`` column.
        path: the file (absolute path).
        file_start: the file's start offset (its name).
        start: position in the file of the first record (a record boundary).
        end: position where the range ends (a record boundary, or the file size).
        last_file: the file is the last of its store (unwritten zeros there end the data).
    """

    store: str
    path: str
    file_start: int
    start: int
    end: int
    last_file: bool


@attrs.frozen
class ConsumeQueueFile:
    """One consume queue file: ``consumequeue/<topic>/<queue_id>/<start>``.

    Attributes:
        store: the ``store`` column.
        topic: the topic (the directory name).
        queue_id: the queue id (the directory name).
        path: the file (absolute path).
        start: its start byte offset (its name); entry ``q`` is at byte ``q * 20``.
        log_start: the store's first commit log offset (its first file's name): entries
            below it point at records retention deleted, and are not read.
    """

    store: str
    topic: str
    queue_id: int
    path: str
    start: int
    log_start: int = 0


def find_stores(path: str) -> list[StoreLocation]:
    """The stores named by a ``load()`` path: a store root, a ``commitlog/`` directory, or a
    glob (``/data/broker-*/store``) of several of them, in sorted order.

    Raises:
        StoreLayoutError: nothing matches, or a match is not a store.
    """
    if _GLOB_CHARS.intersection(path):
        matches = sorted(glob.glob(path))
        if not matches:
            raise StoreLayoutError(f"{path}: no store matches")
    else:
        matches = [path]
    stores = []
    for match in matches:
        commit_log_dir, root = resolve_store_dir(Path(match))
        stores.append(
            StoreLocation(
                name=os.path.normpath(match),
                commit_log_dir=commit_log_dir.resolve(),
                root=None if root is None else root.resolve(),
            )
        )
    return stores


def plan_commit_log(
    store: StoreLocation, max_range_bytes: int = DEFAULT_MAX_RANGE_BYTES
) -> list[CommitLogRange]:
    """The ranges to read a store's commit log in: one per file, or several per file larger
    than ``max_range_bytes`` (cut where :func:`find_record_start` finds a record).

    Raises:
        StoreLayoutError: files of different sizes, a gap, no files.
    """
    reader = CommitLogReader(store.commit_log_dir)
    ranges: list[CommitLogRange] = []
    file_size = reader.file_size
    for index, (start, path) in enumerate(reader.files):
        last_file = index == len(reader.files) - 1
        cuts = [0]
        if file_size > max_range_bytes:
            cuts.extend(_record_cuts(path, start, file_size, max_range_bytes))
        cuts.append(file_size)
        for i in range(len(cuts) - 1):
            ranges.append(
                CommitLogRange(
                    store=store.name,
                    path=str(path),
                    file_start=start,
                    start=cuts[i],
                    end=cuts[i + 1],
                    last_file=last_file,
                )
            )
    return ranges


def _record_cuts(path: Path, file_start: int, file_size: int, step: int) -> list[int]:
    cuts: list[int] = []
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapping:
        target = step
        while target < file_size:
            found = find_record_start(mapping, target, base_offset=file_start)
            if found is None:
                break  # unwritten or garbage from here on: the last range reads to the end
            if found > (cuts[-1] if cuts else 0):
                cuts.append(found)
            target = max(found + 1, target + step)
    return cuts


def find_record_start(
    buf: mmap.mmap | bytes, position: int, *, base_offset: int, limit: int = SYNC_SEARCH_BYTES
) -> int | None:
    """The first record boundary at or after ``position``, found without walking from the
    start of the file; None if there is none within ``limit`` bytes.

    A candidate is where a magic code (V1 or V2) follows four bytes, found at C speed with
    ``find``; it counts when the store's codec decodes a whole valid record there (lengths
    consistent; the CRC is not checked) whose PHYSICALOFFSET field is its own offset
    (``base_offset`` + position). A body holding a copy of a record at the very same offset
    would fool it; a range that starts at a false boundary shows up as a corrupt row at the
    end of the range before it, never as silently wrong rows there.
    """
    stop = min(len(buf), position + limit)
    search = position + _MAGIC_POSITION
    while search < stop:
        found = (buf.find(magic, search, stop + _MAGIC_POSITION) for magic in _MAGICS)
        hits = [h for h in found if h >= 0]
        if not hits:
            return None
        candidate = min(hits) - _MAGIC_POSITION
        try:
            record = decode_record(
                memoryview(buf), candidate, base_offset=base_offset, check_crc=False
            )
        except CorruptRecordError:
            pass
        else:
            if record.physical_offset == base_offset + candidate:
                return candidate
        search = candidate + _MAGIC_POSITION + 1
    return None


def plan_consume_queues(store: StoreLocation) -> list[ConsumeQueueFile]:
    """The consume queue files of a store (none for a bare commit log directory), sorted by
    topic, queue id and start offset. Directories that are not ``<topic>/<number>`` are
    skipped."""
    if store.root is None:
        return []
    base = store.root / "consumequeue"
    if not base.is_dir():
        return []
    found: list[ConsumeQueueFile] = []
    log_files = list_mapped_files(store.commit_log_dir)
    log_start = log_files[0][0] if log_files else 0
    for topic_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        for queue_dir in sorted(p for p in topic_dir.iterdir() if p.is_dir()):
            if not queue_dir.name.isdigit():
                continue
            for start, path in list_mapped_files(queue_dir):
                found.append(
                    ConsumeQueueFile(
                        store=store.name,
                        topic=topic_dir.name,
                        queue_id=int(queue_dir.name),
                        path=str(path),
                        start=start,
                        log_start=log_start,
                    )
                )
    found.sort(key=lambda f: (f.topic, f.queue_id, f.start))
    return found
