"""SYNC_MASTER waiters: puts waiting until enough slaves acknowledged their end offset."""

from __future__ import annotations

import heapq
import itertools

import trio

__all__ = ["ReplicaWaiters"]


class ReplicaWaiters:
    """Waiters ordered by the offset they need, woken in that order.

    :meth:`advance` pops only the waiters now satisfied (O(k log n) for k woken), never scans
    the others: an ack wakes the puts it covers and touches nothing else.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, trio.Event]] = []
        self._seq = itertools.count()
        self._replicated = -1

    @property
    def replicated_offset(self) -> int:
        """The highest offset known to be replicated enough (-1 before any)."""
        return self._replicated

    def __len__(self) -> int:
        return len(self._heap)

    async def wait(self, end_offset: int) -> None:
        """Wait until :meth:`advance` reached ``end_offset``.

        Cancellation (a timeout around it) leaves only a stale entry, dropped when reached.
        """
        if self._replicated >= end_offset:
            await trio.lowlevel.checkpoint()
            return
        event = trio.Event()
        heapq.heappush(self._heap, (end_offset, next(self._seq), event))
        await event.wait()

    def advance(self, replicated: int) -> None:
        """Everything before ``replicated`` is replicated enough: wake who waited for it."""
        if replicated <= self._replicated:
            return
        self._replicated = replicated
        heap = self._heap
        while heap and heap[0][0] <= replicated:
            heapq.heappop(heap)[2].set()
