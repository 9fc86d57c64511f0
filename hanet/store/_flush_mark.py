"""How far the commit log is on disk: the flushed offset and the store timestamp of its last
record, always set together.

Worker threads fsync the commit log (the group commit of a SYNC_FLUSH put and the periodic
flush may run at the same time) while the event loop's thread truncates it. Each flush takes a
:meth:`FlushMark.token` *before* it reads what it will flush; :meth:`FlushMark.advance` then
moves the mark forward only (a flush that finishes after a later one never moves it back) and
only if nothing set the mark since the token was taken (a truncation, recovery: the bytes that
flush covered may be gone). Readers get the offset and its timestamp as one pair.
"""

from __future__ import annotations

import threading

__all__ = ["FlushMark"]


class FlushMark:
    """The flushed offset of a commit log with its store timestamp (see the module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offset = 0
        self._timestamp = 0
        self._sets = 0  # times :meth:`set` was called: a token from before is void
        self.flushes = 0
        """Commit log flushes finished (whether they moved the mark or not)."""

    @property
    def offset(self) -> int:
        """Commit log data before this offset is on disk."""
        return self._offset

    @property
    def timestamp(self) -> int:
        """The store timestamp of the last record before :attr:`offset` (ms; 0: none known)."""
        return self._timestamp

    def pair(self) -> tuple[int, int]:
        """``(offset, timestamp)``, read together."""
        with self._lock:
            return self._offset, self._timestamp

    def token(self) -> int:
        """What a flush takes before it reads its target: :meth:`advance` checks it."""
        return self._sets

    def advance(self, token: int, offset: int, timestamp: int) -> bool:
        """A flush that took ``token`` made ``offset`` (records up to ``timestamp``) durable:
        move the mark there if that is forward and nothing set the mark since. Returns whether
        it moved."""
        with self._lock:
            self.flushes += 1
            if token != self._sets or offset <= self._offset:
                return False
            self._offset = offset
            self._timestamp = timestamp
            return True

    def set(self, offset: int | None = None, timestamp: int | None = None) -> None:
        """Set the offset and/or the timestamp (recovery, a truncation: may move it back);
        flushes in progress no longer count."""
        with self._lock:
            if offset is not None:
                self._offset = offset
            if timestamp is not None:
                self._timestamp = timestamp
            self._sets += 1
