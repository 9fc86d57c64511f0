"""The small files of a store root: ``checkpoint``, ``abort`` and ``lock`` (RocketMQ's layout).

- ``checkpoint``: 4096 bytes of ``i64``: 0 physical message timestamp (STORETIMESTAMP of the
  last flushed record), 8 logical (consume queue) timestamp, 16 index timestamp, 24 master
  flushed offset, 32 confirm offset (5.x). hanet adds, at 40, the commit log's data start
  (non-zero only for a slave whose first replayed byte was not at a file start).
- ``abort``: exists while a store is open; found at open, it means the last run crashed.
- ``lock``: held with ``fcntl.flock`` while a store is open, so a second process gets a clear
  :class:`StoreLockedError` instead of two writers on one commit log.
- ``store.properties`` (hanet's own): the file sizes the store was created with
  (``mappedFileSizeCommitLog``, ``mappedFileSizeConsumeQueue``), so a restart need not repeat
  them and a conflicting setting is a clear error.

An open store keeps the descriptors of ``checkpoint`` (:class:`CheckpointFile`) and ``lock``
open for its whole life (``abort`` needs none after open: it is created at open and unlinked at
close), so a process that runs out of descriptors elsewhere (connections) can still flush.
"""

from __future__ import annotations

import fcntl
import os
import struct
from pathlib import Path

import attrs

from ._errors import StoreLayoutError, StoreLockedError

__all__ = [
    "CHECKPOINT_SIZE",
    "STORE_PROPERTIES",
    "Checkpoint",
    "CheckpointFile",
    "StoreLock",
    "fsync_directory",
    "read_checkpoint",
    "read_store_sizes",
    "write_checkpoint",
    "write_file_durably",
    "write_store_sizes",
]

CHECKPOINT_SIZE = 4096
_CHECKPOINT = struct.Struct(">qqqqqq")


@attrs.frozen
class Checkpoint:
    """The values of a ``checkpoint`` file (all 0 when it does not exist)."""

    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0
    data_start_offset: int = 0


def read_checkpoint(path: Path) -> Checkpoint:
    """Read a checkpoint file; a missing or short file reads as zeros."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Checkpoint()
    if len(data) < _CHECKPOINT.size:
        data = data + bytes(_CHECKPOINT.size - len(data))
    return Checkpoint(*_CHECKPOINT.unpack_from(data))


def write_checkpoint(path: Path, checkpoint: Checkpoint, *, sync: bool = True) -> None:
    """Write a checkpoint file in place (4096 bytes); with ``sync``, fdatasync it (blocks)."""
    buf = bytearray(CHECKPOINT_SIZE)
    _CHECKPOINT.pack_into(buf, 0, *attrs.astuple(checkpoint))
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, buf, 0)
        if sync:
            os.fdatasync(fd)
    finally:
        os.close(fd)


class CheckpointFile:
    """The ``checkpoint`` file, open for the life of a store: each write is a ``pwrite`` of the
    4096 bytes in place (and an ``fdatasync``), never a new descriptor."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def write(self, checkpoint: Checkpoint, *, sync: bool = True) -> None:
        """Write ``checkpoint``; with ``sync``, fdatasync it (blocks)."""
        if self._fd < 0:
            raise ValueError(f"{self.path} is closed")
        buf = bytearray(CHECKPOINT_SIZE)
        _CHECKPOINT.pack_into(buf, 0, *attrs.astuple(checkpoint))
        os.pwrite(self._fd, buf, 0)
        if sync:
            os.fdatasync(self._fd)

    def close(self) -> None:
        """Close the descriptor (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def fsync_directory(directory: Path) -> None:
    """fsync a directory: a file created, renamed or deleted in it survives a power loss."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class StoreLock:
    """An exclusive ``flock`` on ``<root>/lock`` for the life of an open store."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(self._fd)
            raise StoreLockedError(
                f"the store at {path.parent} is in use by another process (lock file {path})"
            ) from exc
        os.ftruncate(self._fd, 0)
        os.write(self._fd, f"{os.getpid()}\n".encode())

    def release(self) -> None:
        """Release the lock (idempotent)."""
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


STORE_PROPERTIES = "store.properties"
"""The file under a store root that records the file sizes it was created with."""

_SIZE_KEYS = ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue")


def read_store_sizes(root: Path) -> dict[str, int]:
    """The sizes ``<root>/store.properties`` records (``mappedFileSizeCommitLog``,
    ``mappedFileSizeConsumeQueue``; empty when it does not exist).

    Raises:
        StoreLayoutError: the file cannot be read or holds something else than
            ``key=positive integer`` lines of those keys.
    """
    path = root / STORE_PROPERTIES
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreLayoutError(f"{path}: cannot read it: {exc}") from exc
    sizes: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in _SIZE_KEYS or not value.isdigit() or int(value) <= 0:
            raise StoreLayoutError(f"{path}:{number}: expected {'|'.join(_SIZE_KEYS)}=BYTES")
        sizes[key] = int(value)
    return sizes


def write_file_durably(path: Path, data: bytes) -> None:
    """Write ``path`` whole: a temporary file beside it, fsynced, renamed over it, the directory
    fsynced (a reader finds the old bytes or the new ones, never a mix)."""
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    fsync_directory(path.parent)


def write_store_sizes(root: Path, commit_log: int, consume_queue: int) -> None:
    """Write ``<root>/store.properties`` atomically (a temporary file renamed, fsynced)."""
    text = (
        "# The file sizes this store was created with (hanet); its files keep them.\n"
        f"mappedFileSizeCommitLog={commit_log}\n"
        f"mappedFileSizeConsumeQueue={consume_queue}\n"
    )
    write_file_durably(root / STORE_PROPERTIES, text.encode("utf-8"))
