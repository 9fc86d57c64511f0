"""Disk faults for tests and soaks: flip bits of a commit log on disk."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["flip_store_byte"]


def flip_store_byte(store: Path, offset: int, file_size: int, mask: int = 0x01) -> None:
    """XOR ``mask`` into the commit log byte at physical ``offset`` of the store at ``store``
    (its ``commitlog/`` files of ``file_size`` bytes), through the file and fsynced (a
    mapping of it sees the change at once)."""
    path = store / "commitlog" / f"{offset - offset % file_size:020d}"
    with path.open("r+b") as f:
        f.seek(offset % file_size)
        byte = f.read(1)[0]
        f.seek(offset % file_size)
        f.write(bytes([byte ^ mask]))
        f.flush()
        os.fsync(f.fileno())
