"""The log as the Raft core sees it within one call: :class:`StagedLog` (sans-IO).

The core never writes its log. What it decides to write during a call (entries to append, a
conflicting tail to drop) is staged here, on top of the driver's log, so the rest of the call
reads the log as it will be; the call's :class:`~hanet.dledger.Output` then names the writes
(``truncate_from``, ``entries``), and the driver makes them, durably, before it sends the
messages that depend on them, as etcd-io/raft's ``Ready``. The next call starts from the
driver's log again, and checks that the driver did write what it was told to.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._log import LogEntry, RaftLog

__all__ = ["StagedLog"]


class StagedLog:
    """``stable`` (the driver's log, only read) with the writes of the current call on top."""

    def __init__(self, stable: RaftLog) -> None:
        self.stable = stable
        self._cut: int | None = None  # the first stable index dropped (None: none)
        self._tail: list[LogEntry] = []  # appended after the kept stable prefix
        self._expected = stable.last_index  # where the stable log ends once the driver wrote

    @property
    def _base(self) -> int:
        """The last stable index kept."""
        return self.stable.last_index if self._cut is None else self._cut - 1

    @property
    def last_index(self) -> int:
        return self._base + len(self._tail)

    @property
    def last_term(self) -> int:
        if self._tail:
            return self._tail[-1].term
        term = self.stable.term_at(self._base)
        assert term is not None
        return term

    def term_at(self, index: int) -> int | None:
        base = self._base
        if index <= base:
            return self.stable.term_at(index)
        if index <= base + len(self._tail):
            return self._tail[index - base - 1].term
        return None

    def append(self, entries: Sequence[LogEntry]) -> None:
        """Stage ``entries`` (their indexes follow :attr:`last_index`)."""
        for entry in entries:
            if entry.index != self.last_index + 1:
                raise ValueError(f"entry index {entry.index}, expected {self.last_index + 1}")
            self._tail.append(entry)

    def truncate_from(self, index: int) -> None:
        """Stage dropping the entries at ``index`` and after."""
        if index < 1:
            raise ValueError(f"cannot truncate from index {index}")
        base = self._base
        if index <= base:
            self._cut = index
            self._tail.clear()
        else:
            del self._tail[index - base - 1 :]

    def entries_from(self, index: int, max_count: int) -> list[LogEntry]:
        start = max(index, 1)
        count = max(max_count, 0)
        base = self._base
        out: list[LogEntry] = []
        if start <= base:
            out = self.stable.entries_from(start, min(count, base - start + 1))
            start += len(out)
            count -= len(out)
        if count and start > base:
            first = start - base - 1
            out += self._tail[first : first + count]
        return out

    def take(self) -> tuple[int | None, tuple[LogEntry, ...]]:
        """The staged writes (truncate from, then append), cleared: the driver makes them
        before the core is called again."""
        cut, tail = self._cut, tuple(self._tail)
        self._expected = self.last_index
        self._cut, self._tail = None, []
        return cut, tail

    def check_written(self) -> None:
        """Raise when the driver's log does not end where the last writes left it.

        Raises:
            RuntimeError: the driver did not make the writes of the previous output.
        """
        if self.stable.last_index != self._expected:
            raise RuntimeError(
                f"the log ends at {self.stable.last_index}, the Raft core's last output left "
                f"it at {self._expected}: write each Output's truncate_from and entries "
                "before the next call"
            )
