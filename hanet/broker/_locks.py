"""LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42): the queue locks of orderly consumers (RocketMQ
4.9.8's ``RebalanceLockManager`` and ``AdminBrokerProcessor.lockBatchMQ/unlockBatchMQ``).

An orderly consumer locks the queues its rebalance gave it before consuming them, so that two
members of a group never consume the same queue at once while a rebalance moves it. Per
(consumer group, queue) one client id holds the lock:

- a LOCK_BATCH_MQ locks each queue of its set that is free, already held by the same client
  (the lock is renewed) or held by another client whose lock expired (taken over, logged at
  WARNING); the answer lists the queues the client now holds (``lockOKMQSet``);
- a lock expires :data:`LOCK_MAX_LIVE_TIME` (60 s, RocketMQ's
  ``rocketmq.broker.rebalance.lockMaxLiveTime``) after its last lock request: consumers renew
  theirs every 20 s;
- an UNLOCK_BATCH_MQ frees the queues of its set that the client holds (others are left and
  logged); the answer is SUCCESS with no body.

Bodies are RocketMQ's JSON (:class:`~hanet.protocol.LockBatchRequestBody`,
:class:`~hanet.protocol.UnlockBatchRequestBody`, :class:`~hanet.protocol.LockBatchResponseBody`);
a body that does not decode raises :class:`~hanet.protocol.RemotingHeaderError` (SYSTEM_ERROR
with the reason). Bounded: at most :data:`MAX_LOCKS` locks; when full, expired ones are
dropped and then a queue that finds no room is not locked (left out of the answer, as a queue
held by another client).

Wiring (what the broker does): one ``locks = QueueLocks()`` per broker (masters and slaves
alike; the locks live in memory, as RocketMQ's), then register ``locks.lock_batch_mq`` for
``RequestCode.LOCK_BATCH_MQ`` and ``locks.unlock_batch_mq`` for ``RequestCode.UNLOCK_BATCH_MQ``.
Nothing to run and nothing to call on a connection's close: locks expire.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

import attrs

from hanet.channel import HandlerContext
from hanet.protocol import (
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    RemotingCommand,
    ResponseCode,
    UnlockBatchRequestBody,
)

__all__ = ["LOCK_MAX_LIVE_TIME", "MAX_LOCKS", "LockStatistics", "QueueLocks"]

log = logging.getLogger("hanet.broker")

LOCK_MAX_LIVE_TIME = 60.0
"""Seconds a queue lock lives after its last lock request."""

MAX_LOCKS = 1_000_000
"""Most (group, queue) locks held at once."""


@attrs.frozen
class LockStatistics:
    """What :meth:`QueueLocks.statistics` reports.

    Attributes:
        groups: consumer groups holding at least one lock (expired ones included).
        locks: locks held (expired ones included until dropped).
        refused: lock requests for a queue that another live client held, or with no room.
    """

    groups: int
    locks: int
    refused: int


@attrs.define
class _Lock:
    client_id: str
    renewed: float


@attrs.define(eq=False)
class QueueLocks:
    """The (consumer group, queue) locks of a broker; synchronous, in memory.

    Args:
        max_live_time: seconds a lock lives after its last renewal.
        max_locks: most locks held at once.
        clock: monotonic seconds (tests drive it).
    """

    max_live_time: float = LOCK_MAX_LIVE_TIME
    max_locks: int = MAX_LOCKS
    clock: Callable[[], float] = time.monotonic
    _table: dict[str, dict[MessageQueue, _Lock]] = attrs.field(init=False, factory=dict)
    _count: int = attrs.field(init=False, default=0)
    _refused: int = attrs.field(init=False, default=0)

    def _expired(self, lock: _Lock, now: float) -> bool:
        return now - lock.renewed > self.max_live_time

    def try_lock_batch(
        self, group: str, queues: Iterable[MessageQueue], client_id: str
    ) -> frozenset[MessageQueue]:
        """Lock (or renew) each queue for ``client_id`` where possible; returns those held."""
        now = self.clock()
        locks = self._table.setdefault(group, {})
        held = set()
        for mq in queues:
            lock = locks.get(mq)
            if lock is None:
                if self._count >= self.max_locks and not self._purge(now):
                    self._refused += 1
                    log.warning("queue locks full (%d): %s not locked", self.max_locks, mq)
                    continue
                locks[mq] = _Lock(client_id, now)
                self._count += 1
                log.info("queue lock: %s of %s taken by %s", mq, group, client_id)
                held.add(mq)
            elif lock.client_id == client_id:
                lock.renewed = now
                held.add(mq)
            elif self._expired(lock, now):
                log.warning(
                    "queue lock: %s of %s expired for %s, taken by %s",
                    mq,
                    group,
                    lock.client_id,
                    client_id,
                )
                lock.client_id, lock.renewed = client_id, now
                held.add(mq)
            else:
                self._refused += 1
                log.warning(
                    "queue lock: %s of %s is held by %s, refused to %s",
                    mq,
                    group,
                    lock.client_id,
                    client_id,
                )
        if not locks:
            del self._table[group]
        return frozenset(held)

    def unlock_batch(self, group: str, queues: Iterable[MessageQueue], client_id: str) -> None:
        """Free each queue of ``queues`` that ``client_id`` holds in ``group``."""
        locks = self._table.get(group)
        if locks is None:
            log.warning("queue unlock: group %s holds no lock (%s)", group, client_id)
            return
        for mq in queues:
            lock = locks.get(mq)
            if lock is None:
                log.warning("queue unlock: %s of %s is not locked (%s)", mq, group, client_id)
            elif lock.client_id != client_id:
                log.warning(
                    "queue unlock: %s of %s is held by %s, not %s",
                    mq,
                    group,
                    lock.client_id,
                    client_id,
                )
            else:
                del locks[mq]
                self._count -= 1
                log.info("queue unlock: %s of %s freed by %s", mq, group, client_id)
        if not locks:
            del self._table[group]

    def is_locked(self, group: str, mq: MessageQueue, client_id: str) -> bool:
        """Whether ``client_id`` holds a live lock on ``mq`` in ``group``."""
        lock = self._table.get(group, {}).get(mq)
        return (
            lock is not None
            and lock.client_id == client_id
            and not self._expired(lock, self.clock())
        )

    def _purge(self, now: float) -> bool:
        """Drop the expired locks; whether there is room now."""
        for group in list(self._table):
            locks = self._table[group]
            for mq in [mq for mq, lock in locks.items() if self._expired(lock, now)]:
                del locks[mq]
                self._count -= 1
            if not locks:
                del self._table[group]
        return self._count < self.max_locks

    def statistics(self) -> LockStatistics:
        """Groups, locks and refusals."""
        return LockStatistics(len(self._table), self._count, self._refused)

    # -- processors ----------------------------------------------------------------------------

    def lock_batch_mq(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        """LOCK_BATCH_MQ (41): SUCCESS with the ``LockBatchResponseBody`` of the queues held."""
        body = LockBatchRequestBody.from_json(request.body)
        held = self.try_lock_batch(body.consumer_group, body.mq_set, body.client_id)
        answer = LockBatchResponseBody(held).to_json()
        return request.response(ResponseCode.SUCCESS, None, body=answer)

    def unlock_batch_mq(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        """UNLOCK_BATCH_MQ (42): SUCCESS, no body."""
        body = UnlockBatchRequestBody.from_json(request.body)
        self.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
        return request.response(ResponseCode.SUCCESS)
