"""Epochs: which master term wrote which part of the commit log (``<store>/epoch``).

Each master term starts an epoch, an (epoch number, start offset) entry: a master that starts
(or a slave promoted to master) appends epoch ``last + 1`` at its commit log's max offset, and
a slave keeps a copy of its master's history as it replicates. Two histories then tell where
two logs stop being the same (:func:`find_consistent_point`, the rule of RocketMQ 5's
``EpochFileCache``, Kafka's leader epochs): the last epoch both have, with the same start,
ends at the smaller of the two ends; before that point the bytes were written by the same
master term.

The file is text, written whole each time (temp file, fsync, rename, directory fsync)::

    hanet-epochs 1
    1 0
    2 40960
    crc32 1a2b3c4d

one ``EPOCH START_OFFSET`` line per entry, epochs and start offsets strictly increasing, the
last line the CRC-32 of every byte before it. A file that does not read so is an
:class:`EpochFileError` naming the file and the byte offset of the first bad line: never
guessed at, never silently replaced.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TypeGuard

import attrs

from ._errors import StoreError
from ._store_files import write_file_durably

__all__ = [
    "EPOCH_FILE",
    "EpochEntry",
    "EpochFile",
    "EpochFileError",
    "EpochHistory",
    "find_consistent_point",
    "format_epoch_file",
    "parse_epoch_file",
]

EPOCH_FILE = "epoch"
"""The epoch file's name in the store directory."""

_HEADER = "hanet-epochs 1"
_MAX_ENTRIES = 1_000_000  # far beyond any real history: a bigger file is damage


class EpochFileError(StoreError):
    """The epoch file is damaged (or an entry would break its order).

    Attributes:
        path: the file.
        offset: the byte offset of the bad line (None when not about a read).
    """

    def __init__(self, path: Path, offset: int | None, reason: str) -> None:
        where = f"{path}" if offset is None else f"{path} at byte {offset}"
        super().__init__(f"epoch file {where}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


@attrs.frozen
class EpochEntry:
    """One master term: ``epoch`` wrote the commit log from ``start_offset`` on (until the
    next entry's start, the last entry until the log's end)."""

    epoch: int
    start_offset: int


@attrs.frozen
class EpochHistory:
    """A log's epochs (ascending) and where the log ends (the last epoch's end)."""

    entries: tuple[EpochEntry, ...]
    end_offset: int

    def to_json(self) -> dict[str, object]:
        return {
            "entries": [{"epoch": e.epoch, "startOffset": e.start_offset} for e in self.entries],
            "maxOffset": self.end_offset,
        }

    @classmethod
    def from_json(cls, raw: object) -> EpochHistory:
        """Raises: ValueError: not a history (bad fields, or entries out of order)."""
        if not isinstance(raw, dict):
            raise ValueError("an epoch history is a JSON object")
        entries_raw, end = raw.get("entries"), raw.get("maxOffset")
        if not isinstance(entries_raw, list) or not _is_offset(end):
            raise ValueError("an epoch history has 'entries' (a list) and 'maxOffset' (>= 0)")
        if len(entries_raw) > _MAX_ENTRIES:
            raise ValueError(f"an epoch history of more than {_MAX_ENTRIES} entries")
        entries: list[EpochEntry] = []
        for item in entries_raw:
            if not isinstance(item, dict):
                raise ValueError(f"an epoch entry is an object, got {repr(item)[:80]}")
            epoch, start = item.get("epoch"), item.get("startOffset")
            if not (_is_offset(epoch) and _is_offset(start)):
                raise ValueError(
                    f"an epoch entry has integer 'epoch' and 'startOffset': {repr(item)[:80]}"
                )
            entries.append(EpochEntry(epoch, start))
        problem = order_problem(entries)
        if problem is not None:
            raise ValueError(problem)
        return cls(tuple(entries), end)


def _is_offset(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def order_problem(entries: Sequence[EpochEntry]) -> str | None:
    """Why ``entries`` are not a history (epochs and start offsets strictly increasing)."""
    for before, after in itertools.pairwise(entries):
        if after.epoch <= before.epoch or after.start_offset <= before.start_offset:
            return (
                f"epoch {after.epoch} at {after.start_offset} does not follow epoch "
                f"{before.epoch} at {before.start_offset} (both must increase)"
            )
    return None


def find_consistent_point(
    local: Sequence[EpochEntry],
    local_end: int,
    remote: Sequence[EpochEntry],
    remote_end: int,
) -> int:
    """The offset up to which two logs were written by the same master terms, or -1.

    Each history is ascending; an entry ends where the next one starts, the last at its log's
    end (``local_end``, ``remote_end``). Walking the local epochs from the newest, the first
    one the remote history has with the same start offset decides: the point is the smaller
    of its two ends. No such epoch: -1 (nothing is known to be shared).
    """
    by_epoch = {entry.epoch: i for i, entry in enumerate(remote)}
    for i in range(len(local) - 1, -1, -1):
        entry = local[i]
        j = by_epoch.get(entry.epoch)
        if j is None or remote[j].start_offset != entry.start_offset:
            continue
        local_stop = local[i + 1].start_offset if i + 1 < len(local) else local_end
        remote_stop = remote[j + 1].start_offset if j + 1 < len(remote) else remote_end
        return min(local_stop, remote_stop)
    return -1


def clip(entries: Iterable[EpochEntry], end_offset: int) -> tuple[EpochEntry, ...]:
    """The entries that start at or before ``end_offset`` (a log that ends there)."""
    return tuple(e for e in entries if e.start_offset <= end_offset)


class EpochFile:
    """The store's epoch file: loaded whole, every change written whole and durably."""

    def __init__(self, path: Path, entries: Sequence[EpochEntry] = ()) -> None:
        self.path = path
        self._entries = tuple(entries)

    @classmethod
    def load(cls, root: Path) -> EpochFile:
        """Read ``<root>/epoch`` (absent: an empty history).

        Raises:
            EpochFileError: the file is damaged (its path and the bad line's offset named).
        """
        path = root / EPOCH_FILE
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return cls(path)
        return cls(path, parse_epoch_file(path, data))

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return self._entries

    @property
    def last(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def history(self, end_offset: int) -> EpochHistory:
        """The entries of a log ending at ``end_offset`` (later ones left out)."""
        return EpochHistory(clip(self._entries, end_offset), end_offset)

    def replace(self, entries: Sequence[EpochEntry]) -> bool:
        """Make ``entries`` the history (written durably); returns whether it changed.

        Raises:
            EpochFileError: the entries are out of order (nothing written).
            OSError: the file could not be written (the old one is left whole).
        """
        entries = tuple(entries)
        if entries == self._entries:
            return False
        problem = order_problem(entries)
        if problem is not None:
            raise EpochFileError(self.path, None, problem)
        write_file_durably(self.path, format_epoch_file(entries))
        self._entries = entries
        return True

    def append(self, entry: EpochEntry) -> None:
        """Add ``entry`` after the last one (see :meth:`replace` for the errors)."""
        self.replace((*self._entries, entry))

    def truncate_from(self, offset: int) -> bool:
        """Drop the entries that start at or after ``offset`` (their log was cut there)."""
        return self.replace(tuple(e for e in self._entries if e.start_offset < offset))

    def begin_term(self, max_offset: int) -> EpochEntry:
        """Start a master term on a log ending at ``max_offset``: the entries from there on
        are dropped (their terms wrote nothing this log still holds) and epoch ``last + 1``
        (1 for the first) starts at ``max_offset``. Returns the new entry."""
        last = self.last
        entry = EpochEntry(1 if last is None else last.epoch + 1, max_offset)
        self.replace((*(e for e in self._entries if e.start_offset < max_offset), entry))
        return entry


def format_epoch_file(entries: Sequence[EpochEntry]) -> bytes:
    """The bytes of an epoch file holding ``entries`` (see the module)."""
    text = "".join(f"{e.epoch} {e.start_offset}\n" for e in entries)
    body = f"{_HEADER}\n{text}".encode("ascii")
    return body + f"crc32 {zlib.crc32(body):08x}\n".encode("ascii")


def parse_epoch_file(path: Path, data: bytes) -> tuple[EpochEntry, ...]:
    """The entries of an epoch file's bytes.

    Raises:
        EpochFileError: the bytes are not a whole, valid file (the bad line's offset named).
    """
    lines = data.split(b"\n")
    if not data.endswith(b"\n"):
        raise EpochFileError(
            path, len(data) - len(lines[-1]), "the last line is cut short (no newline)"
        )
    lines.pop()  # the empty string after the final newline
    if not lines or lines[0].decode("ascii", "replace") != _HEADER:
        raise EpochFileError(path, 0, f"the first line is not {_HEADER!r}")
    if len(lines) > _MAX_ENTRIES + 2:
        raise EpochFileError(path, 0, f"more than {_MAX_ENTRIES} entries")
    position = len(lines[0]) + 1
    entries: list[EpochEntry] = []
    for line in lines[1:-1]:
        parts = line.split(b" ")
        if len(parts) != 2 or not all(p.isdigit() and len(p) <= 20 for p in parts):
            raise EpochFileError(path, position, f"not an 'EPOCH START_OFFSET' line: {line[:60]!r}")
        entry = EpochEntry(int(parts[0]), int(parts[1]))
        if entries:
            problem = order_problem((entries[-1], entry))
            if problem is not None:
                raise EpochFileError(path, position, problem)
        entries.append(entry)
        position += len(line) + 1
    last = lines[-1] if len(lines) > 1 else b""
    if len(lines) < 2 or not last.startswith(b"crc32 "):
        raise EpochFileError(path, position, "no 'crc32' line at the end (the file is cut short)")
    expected = f"{zlib.crc32(data[:position]):08x}".encode("ascii")
    if last[6:] != expected:
        raise EpochFileError(
            path,
            position,
            f"CRC mismatch: the file says {last[6:26]!r}, its bytes give {expected!r}",
        )
    return tuple(entries)
