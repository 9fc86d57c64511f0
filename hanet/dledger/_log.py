"""The replicated log as the Raft core sees it: :class:`LogEntry`, :class:`RaftLog`, and
:class:`InMemoryLog`.

Indexes start at 1, as in the Raft paper; index 0 is the empty prefix (term 0) every log
shares. (DLedger's files number entries from 0: the file store will map Raft index ``i`` to
DLedger index ``i - 1``.) Terms never decrease along a log, which lets the core binary-search
for the first or last entry of a term with :meth:`RaftLog.term_at` alone.

The core only reads its log: each of its outputs names the writes (``truncate_from``, then
``entries``) and the driver makes them with ``truncate_from`` and ``append``, durably before it
sends what depends on them. Pure and synchronous (no I/O, no trio).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

__all__ = ["InMemoryLog", "LogEntry", "RaftLog"]


@attrs.frozen
class LogEntry:
    """One entry of the replicated log.

    Attributes:
        index: the entry's position (1-based).
        term: the term of the leader that appended it.
        body: the client's payload (empty for a no-op).
        noop: the entry a new leader appends at the start of its term (never applied).
    """

    index: int
    term: int
    body: bytes = b""
    noop: bool = False


class RaftLog(Protocol):
    """What the Raft core needs of a log."""

    @property
    def last_index(self) -> int:
        """Index of the last entry (0 for an empty log)."""
        ...

    @property
    def last_term(self) -> int:
        """Term of the last entry (0 for an empty log)."""
        ...

    def term_at(self, index: int) -> int | None:
        """Term of the entry at ``index``: 0 for index 0, None past the end."""
        ...

    def append(self, entries: Sequence[LogEntry]) -> None:
        """Append entries whose indexes follow :attr:`last_index` (the driver's write)."""
        ...

    def truncate_from(self, index: int) -> None:
        """Remove the entries at ``index`` and after (the driver's write)."""
        ...

    def entries_from(self, index: int, max_count: int) -> list[LogEntry]:
        """Up to ``max_count`` entries from ``index`` (fewer at the end of the log)."""
        ...


class InMemoryLog:
    """A :class:`RaftLog` in a Python list: for the simulation, tests and a one-shot node."""

    def __init__(self, entries: Sequence[LogEntry] = ()) -> None:
        self._entries: list[LogEntry] = []
        self.append(entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"InMemoryLog(last_index={self.last_index}, last_term={self.last_term})"

    @property
    def last_index(self) -> int:
        """Index of the last entry (0 for an empty log)."""
        return len(self._entries)

    @property
    def last_term(self) -> int:
        """Term of the last entry (0 for an empty log)."""
        return self._entries[-1].term if self._entries else 0

    def term_at(self, index: int) -> int | None:
        """Term of the entry at ``index``: 0 for index 0, None past the end or below 0."""
        if index == 0:
            return 0
        if 0 < index <= len(self._entries):
            return self._entries[index - 1].term
        return None

    def entry(self, index: int) -> LogEntry:
        """The entry at ``index`` (1-based).

        Raises:
            IndexError: no entry there.
        """
        if not 0 < index <= len(self._entries):
            raise IndexError(f"no entry at index {index} (last {self.last_index})")
        return self._entries[index - 1]

    def append(self, entries: Sequence[LogEntry]) -> None:
        """Append entries; each index must follow the last one and terms must not decrease.

        Raises:
            ValueError: an index out of sequence or a term below the last one.
        """
        for entry in entries:
            if entry.index != len(self._entries) + 1:
                raise ValueError(f"entry index {entry.index}, expected {len(self._entries) + 1}")
            if entry.term < self.last_term:
                raise ValueError(f"entry term {entry.term} below the last term {self.last_term}")
            self._entries.append(entry)

    def truncate_from(self, index: int) -> None:
        """Remove the entries at ``index`` and after (index >= 1)."""
        if index < 1:
            raise ValueError(f"cannot truncate from index {index}")
        del self._entries[index - 1 :]

    def entries_from(self, index: int, max_count: int) -> list[LogEntry]:
        """Up to ``max_count`` entries from ``index`` (1-based)."""
        start = max(index, 1) - 1
        return self._entries[start : start + max(max_count, 0)]

    def snapshot(self) -> tuple[LogEntry, ...]:
        """Every entry, as an immutable tuple."""
        return tuple(self._entries)
