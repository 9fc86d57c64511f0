"""A heap of timers driven by a clock the channel owns (trio's, or a manual one)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

import attrs

__all__ = ["TimerHandle", "TimerQueue"]


@attrs.define(eq=False)
class TimerHandle:
    """A scheduled callback; :meth:`cancel` makes sure it never runs."""

    deadline: float
    _callback: Callable[[], None] | None

    @property
    def cancelled(self) -> bool:
        return self._callback is None

    def cancel(self) -> None:
        """Forget the callback; cheap, idempotent, safe after it ran."""
        self._callback = None


@attrs.define(eq=False)
class TimerQueue:
    """Timers ordered by deadline. ``on_earlier`` is called when a new timer becomes the
    earliest, so a driver sleeping until the old earliest deadline can wake up."""

    on_earlier: Callable[[], None] | None = None
    _heap: list[tuple[float, int, TimerHandle]] = attrs.field(factory=list)
    _seq: itertools.count[int] = attrs.field(factory=itertools.count)

    def schedule_at(self, deadline: float, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` once the clock reaches ``deadline``."""
        handle = TimerHandle(deadline, callback)
        earlier = not self._heap or deadline < self._heap[0][0]
        heapq.heappush(self._heap, (deadline, next(self._seq), handle))
        if earlier and self.on_earlier is not None:
            self.on_earlier()
        return handle

    def next_deadline(self) -> float:
        """The earliest live deadline, or +inf."""
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        return heap[0][0] if heap else float("inf")

    def pop_due(self, now: float) -> Callable[[], None] | None:
        """Remove and return the callback of the earliest timer due at ``now``, if any."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, handle = heapq.heappop(heap)
            callback = handle._callback
            if callback is not None:
                handle._callback = None
                return callback
        return None

    def clear(self) -> None:
        """Cancel every timer."""
        for _, _, handle in self._heap:
            handle.cancel()
        self._heap.clear()

    def __len__(self) -> int:
        return sum(1 for _, _, h in self._heap if not h.cancelled)
