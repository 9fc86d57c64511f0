"""A DLedger node's disk work off the event loop: :class:`Persister`.

Every fsync a node needs (the log's data and index files with their directories, the hard
state, a follower's truncation of a conflicting tail) runs in a worker thread, one at a time,
so a slow disk delays only what depends on it; the event loop goes on reading peers and
clients meanwhile. The log's dirty files are taken on the event loop as
duplicated descriptors (:meth:`FileLog.take_dirty`), so appends made while a thread fsyncs are
never lost from the next flush, and a file closed by a truncation meanwhile cannot be confused
with another.

Under a virtual clock (:class:`trio.testing.MockClock`, the deterministic tests) the same work
runs inline: with ``autojump_threshold`` the clock would jump while a thread works, firing
election timers no real disk would.

Flushes are serialized: :meth:`Persister.sync_log` returns only once everything written
before it was called is on disk, even when another flush had already taken some of it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TypeVar

import attrs
import trio

from ._filelog import FileLog
from ._messages import HardState

__all__ = ["Persister", "off_loop"]

_T = TypeVar("_T")


def _virtual_clock() -> bool:
    """Whether the run's clock is trio's :class:`~trio.testing.MockClock`. A program that never
    imported ``trio.testing`` cannot be using one, and this module does not import it: it
    imports pytest, which a broker must neither need nor spend its start-up on."""
    testing = sys.modules.get("trio.testing")
    return testing is not None and isinstance(trio.lowlevel.current_clock(), testing.MockClock)


async def off_loop(fn: Callable[..., _T], *args: object) -> _T:
    """``fn(*args)`` in a worker thread (inline under a virtual clock: see above)."""
    if _virtual_clock():
        await trio.lowlevel.checkpoint()
        return fn(*args)
    return await trio.to_thread.run_sync(fn, *args)


def _fsync_all(fds: list[int]) -> None:
    try:
        for fd in fds:
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)


@attrs.define
class Persister:
    """Runs ``log``'s fsyncs and hard state writes in worker threads, one at a time.

    Attributes:
        log: the node's log.
        syncs: log flushes that had something to fsync.
        hard_states: hard states saved.
    """

    log: FileLog
    syncs: int = 0
    hard_states: int = 0
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)

    async def sync_log(self) -> None:
        """fsync what was appended to the log before this call (data, then index)."""
        async with self._lock:
            fds = self.log.take_dirty()
            if fds:
                self.syncs += 1
                # the marks are cleared: a cancel before the thread starts (off_loop
                # checkpoints first) would leak the descriptors and lose their fsync
                with trio.CancelScope(shield=True):
                    await off_loop(_fsync_all, fds)

    async def truncate_log(self, index: int) -> None:
        """Remove the log's entries at ``index`` and after, durably
        (:meth:`FileLog.truncate_from`), between two flushes."""
        async with self._lock:
            with trio.CancelScope(shield=True):  # never half done for the driver
                await off_loop(self.log.truncate_from, index)

    async def save_hard_state(self, state: HardState) -> None:
        """Persist the term and vote (atomically, fsynced: :meth:`FileLog.save_hard_state`)."""
        async with self._lock:
            self.hard_states += 1
            await off_loop(self.log.save_hard_state, state)
