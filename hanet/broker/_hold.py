"""Long polling: pulls that found nothing wait for a message (RocketMQ 4.9.8's
``PullRequestHoldService`` and ``NotifyMessageArrivingListener``).

A PULL_MESSAGE with the suspend flag (``sysFlag`` bit 1) that finds no new message in its queue
is not answered PULL_NOT_FOUND at once: the broker holds it for up to its
``suspendTimeoutMillis`` (15 s from RocketMQ's clients). :class:`PullHoldService` answers a
held pull

- as soon as a message arrives in its topic and queue past the pull's offset
  (:meth:`~PullHoldService.notify_message_arriving`, called by the put path; on a slave, whose
  data arrives by replication, the re-check every ``check_interval`` finds it);
- else at its deadline;

both times with what the broker's pull gives when run again without the right to suspend
(``repull``: the messages, or PULL_NOT_FOUND at the deadline). A held pull whose connection
closed is dropped, unanswered. At most ``max_held`` pulls (:data:`MAX_HELD_PULLS`) are held at
once: :meth:`~PullHoldService.hold` refuses more (returns False) and the broker answers such
a pull at once.

Wiring (what the broker does):

- one ``holds = PullHoldService(repull, store.max_queue_offset)`` per broker, and
  ``await nursery.start(holds.run)`` (masters and slaves; cancelling it drops the held pulls);
- ``port.hold = holds.hold`` (:attr:`~hanet.broker.BrokerPort.hold`, a
  :data:`~hanet.broker.HoldHook`): the PULL_MESSAGE processor, when its answer would be
  PULL_NOT_FOUND, the request has the suspend flag and suspending is allowed, calls
  ``holds.hold(ctx, request, header, result)``; True: answered later (return None), False:
  answer PULL_NOT_FOUND now;
- ``repull(ctx, request)`` is that same pull with suspending not allowed (RocketMQ's
  ``brokerAllowSuspend=false``; with :class:`~hanet.broker.BrokerPort`: ``port.serve_pull(ctx,
  request, PullMessageRequestHeader.from_fields(request.fields), allow_suspend=False)``): it
  must not hold again; it may return None (nothing to write);
- after every put that stored messages (sends, batches, retries, delayed deliveries):
  ``broker.stored_listeners.append(holds.notify_put)`` (:meth:`~PullHoldService.notify_put`;
  or :meth:`~PullHoldService.notify_message_arriving` per queue put to). Synchronous and
  cheap: a dictionary look-up when nothing is held there. A put whose status is a durability
  or replica timeout stored its message all the same and is notified too.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable, Sequence

import attrs
import trio

from hanet.channel import HandlerContext
from hanet.protocol import (
    PullMessageRequestHeader,
    RemotingCommand,
    RemotingHeaderError,
    ResponseCode,
)
from hanet.store import Message, PutResult

__all__ = [
    "CHECK_INTERVAL",
    "MAX_HELD_PULLS",
    "MAX_SUSPEND",
    "HoldStatistics",
    "PullHoldService",
    "Repull",
]

log = logging.getLogger("hanet.broker")

MAX_HELD_PULLS = 100_000
"""Most pulls held at once (about one per consumer and queue)."""

CHECK_INTERVAL = 5.0
"""Seconds between re-checks of every held pull's queue (RocketMQ's: 5 s)."""

MAX_SUSPEND = 60.0
"""Most seconds a pull is held, whatever its ``suspendTimeoutMillis`` (clients ask 15-30 s)."""

Repull = Callable[[HandlerContext, RemotingCommand], RemotingCommand | None]
"""Runs a held pull again, not allowed to suspend: its answer (None: nothing to write)."""


@attrs.frozen
class HoldStatistics:
    """What :meth:`PullHoldService.statistics` reports.

    Attributes:
        held: pulls held now.
        woken: pulls answered because a message arrived.
        expired: pulls answered at their deadline.
        dropped: held pulls dropped because their connection closed.
        refused: pulls not held because ``max_held`` were.
    """

    held: int
    woken: int
    expired: int
    dropped: int
    refused: int


@attrs.define(eq=False)
class _Held:
    ctx: HandlerContext
    request: RemotingCommand
    key: tuple[str, int]
    offset: int
    deadline: float
    done: bool = False


@attrs.define(eq=False)
class PullHoldService:
    """Holds suspended pulls until a message arrives or they time out (see the module
    docstring).

    Args:
        repull: the broker's pull, not allowed to suspend.
        max_queue_offset: ``(topic, queue_id) -> the queue's max offset`` (the store's).
        max_held: most pulls held at once.
        check_interval: seconds between re-checks of every held queue.
        max_suspend: most seconds a pull is held.
    """

    repull: Repull
    max_queue_offset: Callable[[str, int], int]
    max_held: int = MAX_HELD_PULLS
    check_interval: float = CHECK_INTERVAL
    max_suspend: float = MAX_SUSPEND
    _table: dict[tuple[str, int], list[_Held]] = attrs.field(init=False, factory=dict)
    _deadlines: list[tuple[float, int, _Held]] = attrs.field(init=False, factory=list)
    _ready: list[tuple[_Held, bool]] = attrs.field(init=False, factory=list)
    _wake: trio.Event = attrs.field(init=False, factory=trio.Event)
    _seq: itertools.count[int] = attrs.field(init=False, factory=itertools.count)
    _held: int = attrs.field(init=False, default=0)
    _woken: int = attrs.field(init=False, default=0)
    _expired: int = attrs.field(init=False, default=0)
    _dropped: int = attrs.field(init=False, default=0)
    _refused: int = attrs.field(init=False, default=0)

    def hold(
        self,
        ctx: HandlerContext,
        request: RemotingCommand,
        header: PullMessageRequestHeader,
        result: object = None,
    ) -> bool:
        """Hold a pull that found nothing at ``header.queue_offset`` for up to its
        ``suspendTimeoutMillis`` (at most ``max_suspend``).

        A :data:`~hanet.broker.HoldHook` (``result``, the pull's result, is not used).

        Must be called from the trio run :meth:`run` is in (uses its clock). Returns False,
        holding nothing, when ``max_held`` pulls are held: answer the pull now.
        """
        topic, queue_id, offset = header.topic, header.queue_id, header.queue_offset
        timeout_ms = header.suspend_timeout_millis
        if self._held >= self.max_held:
            self._refused += 1
            log.warning(
                "long polling: %d pulls held, %s of %s@%d answered at once",
                self._held,
                request.describe(),
                topic,
                queue_id,
            )
            return False
        deadline = trio.current_time() + min(max(timeout_ms, 0) / 1000, self.max_suspend)
        if len(self._deadlines) > 2 * self._held + 1024:  # answered ones wait in the heap
            self._deadlines = [d for d in self._deadlines if not d[2].done]
            heapq.heapify(self._deadlines)
        held = _Held(ctx, request, (topic, queue_id), offset, deadline)
        self._table.setdefault(held.key, []).append(held)
        earliest = self._deadlines[0][0] if self._deadlines else None
        heapq.heappush(self._deadlines, (deadline, next(self._seq), held))
        self._held += 1
        if earliest is None or deadline < earliest:
            self._wake.set()  # run() sleeps until the earliest deadline: wake it to look again
        return True

    def notify_message_arriving(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Messages were stored in ``topic``/``queue_id`` up to (excluding) ``max_offset``:
        the pulls held there from an offset before it are answered (by :meth:`run`, soon).

        Synchronous; a dictionary look-up when no pull is held there.
        """
        held = self._table.get((topic, queue_id))
        if not held:
            return
        newest, looked = max_offset, False
        keep = []
        for entry in held:
            if newest <= entry.offset and not looked:  # as RocketMQ: ask the queue itself once
                newest, looked = max(newest, self.max_queue_offset(topic, queue_id)), True
            if newest > entry.offset:
                self._take(entry)
                self._ready.append((entry, True))
            else:
                keep.append(entry)
        self._store(held[0].key, keep)
        if self._ready:
            self._wake.set()

    def notify_put(self, messages: Sequence[Message], results: Sequence[PutResult]) -> None:
        """:meth:`notify_message_arriving` for each queue a put stored messages in
        (``results[i]`` answers ``messages[i]``; refused ones are skipped)."""
        if not self._table:  # no pull held anywhere: nothing to wake
            return
        ends: dict[tuple[str, int], int] = {}
        for message, result in zip(messages, results, strict=False):
            if result.queue_offset >= 0:  # stored (a refused put has -1)
                key = (message.topic, message.queue_id)
                ends[key] = max(ends.get(key, 0), result.queue_offset + 1)
        for (topic, queue_id), end in ends.items():
            self.notify_message_arriving(topic, queue_id, end)

    def _store(self, key: tuple[str, int], entries: list[_Held]) -> None:
        if entries:
            self._table[key] = entries
        else:
            self._table.pop(key, None)

    def _take(self, entry: _Held) -> None:
        entry.done = True
        self._held -= 1

    def statistics(self) -> HoldStatistics:
        """Pulls held and how the others ended."""
        return HoldStatistics(self._held, self._woken, self._expired, self._dropped, self._refused)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Answer held pulls when woken, at their deadlines and at each re-check, until
        cancelled (the pulls held then are dropped unanswered: their connections close with
        the broker)."""
        next_check = trio.current_time() + self.check_interval
        task_status.started()
        try:
            while True:
                wake_at = next_check
                while self._deadlines and self._deadlines[0][2].done:
                    heapq.heappop(self._deadlines)
                if self._deadlines:
                    wake_at = min(wake_at, self._deadlines[0][0])
                with trio.move_on_at(wake_at):
                    await self._wake.wait()
                self._wake = trio.Event()
                now = trio.current_time()
                if now >= next_check:
                    self._check_all()
                    next_check = now + self.check_interval
                self._expire(now)
                self._answer_ready()
        finally:
            self._table.clear()
            self._deadlines.clear()
            self._ready.clear()
            self._held = 0

    def _check_all(self) -> None:
        """Drop pulls of closed connections; wake those whose queue moved on (a slave's
        replicated data, a put path that did not notify)."""
        for key in list(self._table):
            entries = self._table[key]
            alive = []
            for entry in entries:
                if entry.ctx.channel.is_active:
                    alive.append(entry)
                else:
                    self._take(entry)
                    self._dropped += 1
            self._store(key, alive)
            if alive:
                self.notify_message_arriving(key[0], key[1], self.max_queue_offset(*key))

    def _expire(self, now: float) -> None:
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, entry = heapq.heappop(self._deadlines)
            if entry.done:
                continue
            self._take(entry)
            entries = self._table.get(entry.key, [])
            self._store(entry.key, [e for e in entries if e is not entry])
            self._ready.append((entry, False))

    def _answer_ready(self) -> None:
        ready, self._ready = self._ready, []
        for entry, woken in ready:
            if not entry.ctx.channel.is_active:
                self._dropped += 1
                continue
            if woken:
                self._woken += 1
            else:
                self._expired += 1
            answer = self._repull(entry)
            if answer is not None and not entry.request.is_oneway:
                entry.ctx.write_and_flush(answer)

    def _repull(self, entry: _Held) -> RemotingCommand | None:
        request = entry.request
        try:
            return self.repull(entry.ctx, request)
        except RemotingHeaderError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        except Exception as exc:  # a bug of ours: answer, log, go on with the others
            log.exception("long polling: answering %s failed", request.describe())
            return request.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
