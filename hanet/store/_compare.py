"""Compare two stores' commit logs byte for byte (a master and its replica)."""

from __future__ import annotations

from pathlib import Path

import attrs

from ._mapped_queue import list_mapped_files

__all__ = ["CommitLogComparison", "compare_commit_logs"]

_CHUNK = 1 << 20


@attrs.frozen
class CommitLogComparison:
    """The outcome of :func:`compare_commit_logs`.

    Attributes:
        files: commit log files compared.
        bytes: bytes found equal before the first difference (all of them when identical).
        mismatch: where the two differ (a file set, or a file and byte), None when identical.
    """

    files: int
    bytes: int
    mismatch: str | None

    @property
    def identical(self) -> bool:
        return self.mismatch is None


def compare_commit_logs(master_root: Path, slave_root: Path) -> CommitLogComparison:
    """Compare the ``commitlog/`` files of two store roots: the same names, the same bytes."""
    master_files = {p.name: p for _, p in list_mapped_files(master_root / "commitlog")}
    slave_files = {p.name: p for _, p in list_mapped_files(slave_root / "commitlog")}
    if set(master_files) != set(slave_files):
        only_master = sorted(set(master_files) - set(slave_files))
        only_slave = sorted(set(slave_files) - set(master_files))
        return CommitLogComparison(
            0, 0, f"different files: master only {only_master}, slave only {only_slave}"
        )
    total = 0
    for name in sorted(master_files):
        with master_files[name].open("rb") as a, slave_files[name].open("rb") as b:
            position = 0
            while True:
                chunk_a = a.read(_CHUNK)
                chunk_b = b.read(_CHUNK)
                if chunk_a != chunk_b:
                    at = position + _first_difference(chunk_a, chunk_b)
                    return CommitLogComparison(
                        len(master_files), total, f"{name} differs at byte {at}"
                    )
                if not chunk_a:
                    break
                position += len(chunk_a)
                total += len(chunk_a)
    return CommitLogComparison(len(master_files), total, None)


def _first_difference(a: bytes, b: bytes) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))
