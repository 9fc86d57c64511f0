"""The leader's view of one follower: :class:`Progress` (sans-IO, part of the Raft core).

A follower is *probing* until its position is known (one append in flight at a time, as
etcd-io/raft's probe state), then *replicating*: up to ``max_inflight`` appends with entries
pipelined. Each append with entries in flight is remembered as its (first, last) index; an
acknowledgement drops those it covers. No progress for ``retransmit_timeout`` with appends in
flight sends everything again from the oldest one not acknowledged.
"""

from __future__ import annotations

import math

import attrs

__all__ = ["Progress"]


@attrs.define
class Progress:
    """One follower as the leader sees it.

    Attributes:
        next_index: the next index to send it.
        match_index: the last index known to match the leader's log.
        inflight: (first, last) index of each append with entries in flight, oldest first.
        probing: one append at a time until its position is known.
        last_progress: when its match index last moved (or a pipeline started).
        last_heard: when it last answered an append of this term.
        sent: the highest index sent to it in this term (an acknowledgement beyond is forged).
    """

    next_index: int
    match_index: int = 0
    inflight: list[tuple[int, int]] = attrs.field(factory=list)
    probing: bool = True
    last_progress: float = 0.0
    last_heard: float = -math.inf
    sent: int = 0

    def window(self, max_inflight: int) -> int:
        """Appends with entries it may have in flight now."""
        return 1 if self.probing else max_inflight

    def sent_append(self, prev_index: int, count: int, now: float) -> None:
        """An append of ``count`` entries after ``prev_index`` left for it."""
        self.sent = max(self.sent, prev_index + count)
        if count:
            if not self.inflight:
                self.last_progress = now
            self.next_index += count
            self.inflight.append((prev_index + 1, prev_index + count))

    def acknowledged(self, match_index: int, now: float) -> None:
        """It holds everything up to ``match_index``."""
        if match_index > self.match_index:
            self.match_index = match_index
            self.last_progress = now
        self.inflight = [sent for sent in self.inflight if sent[1] > self.match_index]
        self.next_index = max(self.next_index, self.match_index + 1)
        if self.probing and self.match_index + 1 >= self.next_index:
            self.probing = False

    def refused(self, target: int, now: float) -> int | None:
        """It refused an append: send again from ``target`` (at most :attr:`next_index`),
        probing. Returns the match index it had acknowledged when ``target`` goes below it
        (it lost entries: its log was cut after damage), else None."""
        lost = None
        target = min(target, self.next_index)
        if target <= self.match_index:
            lost = self.match_index
            self.match_index = max(target - 1, 0)
        self.next_index = max(target, self.match_index + 1)
        self.inflight.clear()
        self.probing = True
        self.last_progress = now
        return lost

    def stalled(self, now: float, retransmit_timeout: float) -> bool:
        """Appends in flight and no progress for ``retransmit_timeout``: go back to the
        oldest one not acknowledged (:meth:`rewind`)."""
        return bool(self.inflight) and now - self.last_progress >= retransmit_timeout

    def rewind(self) -> None:
        """Send again from the oldest append not acknowledged, probing."""
        if self.inflight:
            self.next_index = max(self.inflight[0][0], self.match_index + 1)
        self.inflight.clear()
        self.probing = True

    def heard_since(self, horizon: float) -> bool:
        return self.last_heard >= horizon
