"""What a consumer keeps, sans-IO: each queue's :class:`QueuePosition` and the rules that move
it (where the next pull starts, what the caller consumed, what is due for a commit), the
messages it hands out and its :class:`ConsumerStats`."""

from __future__ import annotations

import logging

import attrs

from hanet.protocol import MASTER_ID
from hanet.store import MessageRecord

from ._assignment import QueueKey
from ._broker import PullResult
from ._messages import PullStatus

__all__ = ["ConsumedMessage", "ConsumerStats", "QueuePosition"]

log = logging.getLogger("hanet.client.consumer")

_SKIP_FORWARD = frozenset(
    {
        PullStatus.OFFSET_TOO_SMALL,
        PullStatus.NO_MESSAGE_IN_QUEUE,
        PullStatus.NO_MATCHED_MESSAGE,
        PullStatus.OFFSET_FOUND_NULL,
        PullStatus.MESSAGE_WAS_REMOVING,
    }
)
"""Pull answers whose next offset is followed forward from any member."""


@attrs.frozen
class ConsumedMessage:
    """A message handed to the caller.

    Attributes:
        record: the message as stored (decoded, CRC checked).
        broker_name: the broker name whose queue holds it.
        broker_id: the member it was pulled from (0: the master, 1 and up: a slave).
    """

    record: MessageRecord
    broker_name: str
    broker_id: int

    @property
    def key(self) -> QueueKey:
        """Its queue: ``(broker_name, queue_id)``."""
        return (self.broker_name, self.record.queue_id)

    @property
    def queue_id(self) -> int:
        """The queue id within its broker name."""
        return self.record.queue_id

    @property
    def queue_offset(self) -> int:
        """Its offset in the queue."""
        return self.record.queue_offset

    @property
    def body(self) -> bytes:
        """The message body."""
        return self.record.body


@attrs.define
class ConsumerStats:
    """What a consumer did so far (for tools and tests).

    Attributes:
        delivered: messages handed to the caller.
        pulls: pull requests answered.
        slave_pulls: of which answered by a slave.
        failovers: pulls or commits that went to another member because one failed.
        commits: offsets committed (one per queue and commit).
        slave_commits: of which committed to a slave.
        commit_failures: commits no member took (retried at the next commit).
        route_lookups: routes looked up.
        rebalances: rebalances that changed the queues held.
        held: every queue held at some point (``(broker_name, queue_id)``).
    """

    delivered: int = 0
    pulls: int = 0
    slave_pulls: int = 0
    failovers: int = 0
    commits: int = 0
    slave_commits: int = 0
    commit_failures: int = 0
    route_lookups: int = 0
    rebalances: int = 0
    held: set[QueueKey] = attrs.field(factory=set)


@attrs.define
class QueuePosition:
    """The consumer's state of one queue.

    Attributes:
        pull_offset: where the next pull starts (None: not started yet).
        consumed: the offset after the last message the caller consumed (what is committed).
        committed: the offset last committed (None: never, or not known).
        committed_to: the member that took (or answered) it: a commit that went to a slave
            is made again on the master once it answers.
        suggested_broker_id: the member the last answer suggested.
        started: whether the committed offset was looked up.
    """

    pull_offset: int | None = None
    consumed: int | None = None
    committed: int | None = None
    committed_to: int | None = None
    suggested_broker_id: int = MASTER_ID
    started: bool = False

    def begin(self, offset: int) -> None:
        """Start at ``offset``: the next pull's, and what a commit would save."""
        self.pull_offset = offset
        self.consumed = offset

    def consume(self, after: int) -> None:
        """The caller consumed up to ``after`` (exclusive); never moves back."""
        if self.consumed is None or after > self.consumed:
            self.consumed = after

    def commit_due(self) -> int | None:
        """The offset to commit: consumed further since the last commit, or last committed
        to a slave (committed again to the master); None when nothing is due."""
        consumed = self.consumed
        if consumed is None or (consumed == self.committed and self.committed_to == MASTER_ID):
            return None
        return consumed

    def committed_at(self, offset: int, broker_id: int) -> None:
        """Member ``broker_id`` took (or answered) ``offset`` as the group's commit."""
        self.committed, self.committed_to = offset, broker_id

    def follow(self, key: QueueKey, broker_id: int, offset: int, result: PullResult) -> None:
        """Move the pull offset after ``result``, the answer of member ``broker_id`` to a
        pull of ``key`` at ``offset``: to the next offset on FOUND and on answers saying
        the offset is before the queue's start or matched nothing (never back); to the
        master's end when the master says it is past it (a slave behind is not followed)."""
        self.suggested_broker_id = result.suggested_broker_id
        status = result.status
        if status is PullStatus.FOUND:
            self.pull_offset = result.next_offset
        elif status in _SKIP_FORWARD:
            # Messages before the queue's start are gone, or those read matched nothing or
            # are no longer there: move up to the next offset (never back).
            self.pull_offset = max(offset, result.next_offset)
        elif status is PullStatus.OFFSET_OVERFLOW_BADLY and broker_id == MASTER_ID:
            log.warning(
                "%s queue %d: offset %d is past the master's end %d; pulling from there",
                key[0], key[1], offset, result.next_offset,
            )  # fmt: skip
            self.pull_offset = result.next_offset
