"""A pull consumer of a topic for a group: its share of the queues, offsets committed.

The consumer looks the topic's route up through the name servers, takes its share of the
topic's queues among the group's members (rebalancing), pulls them in one loop, hands the
messages to the caller, and commits how far the group got. What it does follows RocketMQ's
``DefaultMQPushConsumer``:

- **Membership.** Each consumer has a ``client_id`` (default ``host@pid@random``). Every
  ``heartbeat_interval`` seconds (10; RocketMQ's ``heartbeatBrokerInterval`` is 30) it
  heartbeats (``HEART_BEAT``: its id, group and ``*`` subscription) to every member (master
  and slaves) of each broker name of the route it can reach; a broker counts it a member for
  120 s after the last one (RocketMQ's channel expiry). On a clean exit it unregisters from
  them (``UNREGISTER_CLIENT``): it leaves at once.
- **Rebalancing.** At the start, every ``rebalance_interval`` seconds (20, RocketMQ's
  ``rebalanceInterval``), at once when a broker sends the oneway
  ``NOTIFY_CONSUMER_IDS_CHANGED`` (a member joined or left: RocketMQ's
  ``rebalanceImmediately``), when the route's queues change, and right after a heartbeat
  round sees the member list change (that round's list is used as it is), it asks a broker
  for the group's members (``GET_CONSUMER_LIST_BY_GROUP``: the master of the first broker
  name that answers, else a slave), sorts them and the topic's queues (by broker name, then
  queue id) and takes its share with :func:`allocate_averagely` (RocketMQ's
  ``AllocateMessageQueueAveragely``: contiguous ranges, the first ``len(queues) %
  len(members)`` members one queue more). A queue it loses is committed first (the consumed
  offset), then released: messages of it pulled but not yet handed out are dropped; the
  member that takes a queue starts from the group's committed offset. So a rebalance may
  deliver a message twice (two members briefly hold a queue until both have rebalanced) but
  never skips one. When no broker answers the member list, or the list does not name this
  consumer yet, it keeps the queues it has; when the brokers do not serve consumer groups
  (answering ``REQUEST_CODE_NOT_SUPPORTED``) it is alone and takes every queue.

- **Route.** Looked up at the start, every ``route_interval`` seconds (30, RocketMQ's
  ``pollNameServerInterval``), after a broker's connection failed (at most once every
  ``retry_interval``) and every ``retry_interval`` while a broker name has no master in it
  (the name server drops a broker whose connection closes). Until the topic has a route (no
  broker holds it yet) it asks every second. Queues that appear (a broker name joins) are
  shared out at once; queues of a broker name that left the route are not pulled but keep
  their offsets.
- **Where it starts.** On a queue it takes: the group's committed offset of the queue
  (``query_offset``: the master, or a slave when the master cannot be reached). With none:
  the queue's first message with ``from_beginning``, else the queue's end as a pull learns it
  (RocketMQ's ``CONSUME_FROM_LAST_OFFSET``: only messages stored from now on). Either start is
  committed at the next commit, so a restart resumes from it rather than from a newer end.
- **Which member it pulls from.** The one the last answer of the queue suggested
  (``suggested_broker_id``: 0 the master, 1 and up a slave), else the master. A member whose
  connection failed is skipped for ``retry_interval`` seconds: the pull goes to the master,
  else to a slave (lowest id first). After that time the member is tried again, so the
  consumer goes back to the master once it answers (and the route still lists it).
- **Offsets it keeps.** For each queue, where the next pull starts, and how far the caller
  consumed. A pull's ``next_offset`` is followed on FOUND and on answers saying the offset is
  before the queue's start; an answer saying it is past the end is followed only from the
  master (a slave that is behind keeps the offset until it catches up); nothing else moves
  it. It may move back (a member that has less): messages are then delivered again, never
  skipped.
- **Commits.** Every ``commit_interval`` seconds (5, RocketMQ's
  ``persistConsumerOffsetInterval``) and when the consumer closes, each queue consumed further
  since its last commit (and each queue it releases) is committed to its master, or to a
  slave when the master cannot be reached; an offset a slave took is committed again to the
  master once it answers.

Delivery is at least once: a message counts as consumed when the caller asks for the next one
(or calls :meth:`Consumer.ack`); the last one also when the ``async with`` block exits
without an exception. A consumer that stops before committing, or a failover that makes a
member hand out what was already delivered, delivers those messages again; none is skipped.

Usage (run it twice: the two processes share the queues)::

    names = NameServerClient([("127.0.0.1", 9876)])
    async with Consumer.open(names, "my-group", "TopicTest", from_beginning=True) as consumer:
        async for message in consumer:
            print(message.queue_id, message.queue_offset, message.body)

The settings are a :class:`ConsumerConfig` (``config=``), or its fields as keyword arguments
(as above); both together: the keywords override the config's fields.

The consumer is the I/O driver of four parts: the connections (:mod:`._pool`), which member
to ask (:mod:`._members`), which queues to hold (:mod:`._assignment`, sans-IO) and where it
is in each (:mod:`._consumer_state`, sans-IO).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Protocol, Self, Unpack

import attrs
import trio

from hanet.protocol import (
    MASTER_ID,
    NotifyConsumerIdsChangedRequestHeader,
    RemotingCommand,
    RemotingHeaderError,
    RequestCode,
    ResponseCode,
    RouteBroker,
    TopicRoute,
)

from ._assignment import Assignment, QueueKey, RebalanceOutcome, bounded_route, queues_of
from ._broker import BrokerRequestError, PullResult
from ._consumer_config import ConsumerConfig, ConsumerSettings
from ._consumer_state import ConsumedMessage, ConsumerStats, QueuePosition
from ._members import MemberCaller
from ._messages import PullStatus
from ._pool import BrokerConnector, BrokerLink, ConnectionPool, MembershipLink, broker_connector
from ._remoting import RemotingError, RemotingResponseError

__all__ = ["Consumer", "RouteSource", "default_client_id"]

log = logging.getLogger("hanet.client.consumer")


def default_client_id() -> str:
    """``host@pid@random``: unique per consumer (RocketMQ's ``clientIP@instanceName``)."""
    return f"{socket.gethostname()}@{os.getpid()}@{secrets.token_hex(4)}"


class RouteSource(Protocol):
    """Where routes come from (:class:`~hanet.client.NameServerClient` is one): raises a
    :class:`~hanet.client.RemotingResponseError` (or :class:`BrokerRequestError`) with
    TOPIC_NOT_EXIST when no broker holds the topic, another
    :class:`~hanet.client.RemotingError` when no name server answers."""

    async def route(self, topic: str) -> TopicRoute: ...


class Consumer:
    """A consumer of one topic for one group; open it with :meth:`open` and iterate it.

    See the module docstring for how it follows the route, picks members, keeps and commits
    offsets. Iterate it from one task.
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        names: RouteSource,
        group: str,
        topic: str,
        *,
        connector: BrokerConnector,
        config: ConsumerConfig | None = None,
    ) -> None:
        config = config if config is not None else ConsumerConfig()
        self.group = group
        self.topic = topic
        self.config = config
        self.client_id = config.client_id or default_client_id()
        self.stats = ConsumerStats()
        self.route: TopicRoute | None = None
        """The route last looked up (None: none yet)."""
        self.notifications = 0
        """NOTIFY_CONSUMER_IDS_CHANGED requests received for this group."""
        self._names = names
        self._pool = ConnectionPool(
            nursery, connector, config.retry_interval, self._on_broker_request
        )
        self._members = MemberCaller(self._pool, self._route_failed)
        self._assignment = Assignment(
            self.client_id, config.rebalance_interval, config.heartbeat_interval
        )
        self._wake = trio.Event()  # set to end the pull loop's idle wait at once
        self._sub_version = int(time.time() * 1000)  # the subscription's, kept
        self._brokers: dict[str, RouteBroker] = {}
        self._queues: dict[QueueKey, QueuePosition] = {}
        self._route_due = -1.0
        self._send, self._receive = trio.open_memory_channel[tuple[ConsumedMessage, int]](
            config.buffer
        )
        self._last: tuple[ConsumedMessage, int] | None = None
        self._commit_lock = trio.Lock()

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        names: RouteSource,
        group: str,
        topic: str,
        *,
        config: ConsumerConfig | None = None,
        connector: BrokerConnector | None = None,
        tls: ssl.SSLContext | None = None,
        **settings: Unpack[ConsumerSettings],
    ) -> AsyncIterator[Self]:
        """Start consuming ``topic`` for ``group``; at the block's exit, pulling stops, the
        offsets consumed are committed and the consumer leaves the group (within
        ``request_timeout`` seconds).

        An exception raised in the block propagates as it is (not in an exception group).

        Args:
            names: the name servers (:class:`~hanet.client.NameServerClient`).
            config: the settings (default: :class:`ConsumerConfig`'s defaults).
            connector: opens broker connections (default: :class:`BrokerClient` with ``tls``
                and ``request_timeout``).
            settings: :class:`ConsumerConfig` fields (``from_beginning``, ``pull_batch``,
                ``commit_interval``, ...) overriding ``config``'s.

        Raises:
            ValueError: a setting out of range.
        """
        config = attrs.evolve(config if config is not None else ConsumerConfig(), **settings)
        if connector is None:
            connector = broker_connector(tls=tls, timeout=config.request_timeout)
        error: BaseException | None = None
        async with trio.open_nursery() as links:
            consumer = cls(links, names, group, topic, connector=connector, config=config)
            clean = False
            try:
                async with trio.open_nursery() as loops:
                    loops.start_soon(consumer._pull_loop)
                    loops.start_soon(consumer._commit_loop)
                    loops.start_soon(consumer._heartbeat_loop)
                    try:
                        yield consumer
                        clean = True
                    except BaseException as exc:
                        # Raised by the caller's block: re-raised as it is once everything
                        # is closed, not wrapped in the nurseries' exception groups.
                        error = exc
                    finally:
                        loops.cancel_scope.cancel()
            finally:
                # However the block ended (a cancellation included: SIGTERM), what was
                # consumed is committed; the connections outlive a cancellation for that.
                with trio.CancelScope(shield=True):
                    if clean:
                        consumer.ack()
                    with trio.move_on_after(config.request_timeout):
                        await consumer.commit()
                        await consumer._unregister()
                consumer._pool.close()
                links.cancel_scope.cancel()
        if error is not None:
            raise error

    # -- the caller's side ------------------------------------------------------------------

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ConsumedMessage:
        """The next message; the one before counts as consumed."""
        self.ack()
        while True:
            try:
                message, generation = await self._receive.receive()
            except (trio.EndOfChannel, trio.ClosedResourceError):
                raise StopAsyncIteration from None
            if generation == self._assignment.generation(message.key):
                break
            # Its queue was released since it was pulled: its new holder delivers it.
        self._last = (message, generation)
        self.stats.delivered += 1
        return message

    def ack(self) -> None:
        """Count the last message handed out as consumed (its offset is committed at the
        next commit). Asking for the next message does it too."""
        last, self._last = self._last, None
        if last is None:
            return
        message, generation = last
        position = self._queues.get(message.key)
        if position is None or generation != self._assignment.generation(message.key):
            return  # its queue was released meanwhile
        position.consume(message.queue_offset + 1)

    @property
    def buffered(self) -> int:
        """Messages pulled and not yet handed out."""
        return self._receive.statistics().current_buffer_used

    @property
    def assigned(self) -> list[QueueKey]:
        """The queues this member holds now, sorted."""
        return sorted(self._assignment.held)

    @property
    def members(self) -> tuple[str, ...]:
        """The group's members at the last rebalance (sorted client ids)."""
        return self._assignment.members

    def positions(self) -> dict[QueueKey, QueuePosition]:
        """The state (a copy) of each queue held now or before, by ``(broker_name,
        queue_id)``."""
        return {key: attrs.evolve(position) for key, position in sorted(self._queues.items())}

    # -- the route ---------------------------------------------------------------------------

    async def refresh_route(self) -> None:
        """Look the route up now; a failure keeps the last route (and is retried soon)."""
        self.stats.route_lookups += 1
        retry = min(1.0, self.config.retry_interval)
        try:
            route = await self._names.route(self.topic)
        except (BrokerRequestError, RemotingResponseError) as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                log.warning("route of %s: %s", self.topic, exc)
            else:
                log.debug("no broker holds %s yet", self.topic)
            self._route_due = trio.current_time() + retry
            return
        except RemotingError as exc:
            log.warning("route of %s: no name server answers: %s", self.topic, exc)
            self._route_due = trio.current_time() + retry
            return
        route = bounded_route(route)
        if route != self.route:
            log.info("route of %s: %s", self.topic, _describe(route))
        self._assignment.route_changed(self.route, route, trio.current_time())
        self.route = route
        self._brokers = {broker.broker_name: broker for broker in route.brokers}
        interval = self.config.route_interval
        if any(broker.address_of(MASTER_ID) is None for broker in route.brokers):
            # A broker name without its master (the name server dropped it when its
            # connection closed): looked up again soon, to go back to it once it returns.
            interval = min(interval, self.config.retry_interval)
        self._route_due = trio.current_time() + interval

    def _route_failed(self) -> None:
        """A member failed: look the route up again soon (not more than once a retry)."""
        soon = trio.current_time() + min(1.0, self.config.retry_interval)
        self._route_due = min(self._route_due, soon)

    def _live_queues(self) -> list[QueueKey]:
        held = self._assignment.held
        return [
            key
            for key in self._queues
            if key in held and key[0] in self._brokers and key[1] < self._brokers[key[0]].queues
        ]

    # -- pulling -----------------------------------------------------------------------------

    async def _pull_loop(self) -> None:
        while True:
            if trio.current_time() >= self._route_due:
                await self.refresh_route()
            if self._assignment.is_due(trio.current_time()):
                await self.rebalance()
            found = False
            for key in self._live_queues():
                if await self._pull_queue(key):
                    found = True
            if not found:
                with trio.move_on_after(self.config.poll_interval):
                    await self._wake.wait()
                if self._wake.is_set():
                    self._wake = trio.Event()

    def _on_broker_request(self, request: RemotingCommand) -> RemotingCommand | None:
        """Serve a request a broker sent: NOTIFY_CONSUMER_IDS_CHANGED for this group starts
        a rebalance at once (RocketMQ's ``rebalanceImmediately``); any other code is answered
        REQUEST_CODE_NOT_SUPPORTED (nothing for a oneway)."""
        if request.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            try:
                group = NotifyConsumerIdsChangedRequestHeader.from_fields(request.fields)
            except RemotingHeaderError:
                group = None  # no group named: taken as ours (a rebalance is harmless)
            if group is None or group.consumer_group == self.group:
                self.notifications += 1
                log.debug("group %s: the broker says its members changed", self.group)
                self._assignment.request(trio.current_time())
                self._wake.set()
            return None if request.is_oneway else request.response(ResponseCode.SUCCESS)
        if request.is_oneway:
            return None
        return request.response(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request code {request.code} not supported"
        )

    async def _pull_queue(self, key: QueueKey) -> bool:
        """Pull one batch of ``key`` and hand it to the caller; True when it found messages.
        An error answer ends the round for this queue (the next round asks again)."""
        broker = self._brokers[key[0]]
        position = self._queues[key]
        if not position.started and not await self._start(key, broker, position):
            return False

        async def pull(link: BrokerLink) -> tuple[int, PullResult]:
            offset = position.pull_offset
            if offset is None:
                # CONSUME_FROM_LAST_OFFSET: the queue's end, as this member knows it.
                probe = await link.pull(self.topic, key[1], 0, 1, group=self.group)
                offset = self._begin(key, position, probe.max_offset)
            batch = self.config.pull_batch
            return offset, await link.pull(self.topic, key[1], offset, batch, group=self.group)

        answer = await self._members.first(
            broker,
            pull,
            what=f"pull {key[0]} queue {key[1]}",
            first=position.suggested_broker_id,
            after_error=False,
        )
        if answer is None:
            return False
        if answer.tried > 1:
            self.stats.failovers += 1
        offset, result = answer.value
        return await self._take(key, answer.broker_id, position, offset, result)

    async def _start(self, key: QueueKey, broker: RouteBroker, position: QueuePosition) -> bool:
        """Set where ``key`` starts: the committed offset (master first), else per
        ``from_beginning`` (the end is left to the first pull: ``pull_offset`` stays None).
        False when no member answered."""
        answer = await self._members.first(
            broker,
            lambda link: link.query_offset(self.group, self.topic, key[1]),
            what=f"offset of {key[0]} queue {key[1]}",
        )
        if answer is None:
            log.debug("%s queue %d: no member answers the offset query", *key)
            return False
        position.started = True
        committed = answer.value
        if committed is not None:
            position.committed_at(committed, answer.broker_id)
            self._begin(key, position, committed, "the committed offset")
        elif self.config.from_beginning:
            self._begin(key, position, 0, "the beginning")
        return True

    def _begin(self, key: QueueKey, position: QueuePosition, offset: int, why: str = "") -> int:
        position.begin(offset)
        log.info(
            "%s queue %d of %s: starting at %d (%s)",
            key[0], key[1], self.topic, offset, why or "the queue's end",
        )  # fmt: skip
        return offset

    async def _take(
        self,
        key: QueueKey,
        broker_id: int,
        position: QueuePosition,
        offset: int,
        result: PullResult,
    ) -> bool:
        self.stats.pulls += 1
        if broker_id != MASTER_ID:
            self.stats.slave_pulls += 1
        position.follow(key, broker_id, offset, result)
        if result.status is not PullStatus.FOUND:
            return False
        generation = self._assignment.generation(key)
        for record in result.messages:
            await self._send.send((ConsumedMessage(record, key[0], broker_id), generation))
        return bool(result.messages)

    # -- membership and rebalancing ----------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        while True:
            await trio.sleep(self.config.heartbeat_interval)
            await self.heartbeat()
            members = await self._member_list()
            # The rebalance a change starts takes the list as it is (no second heartbeat
            # round and member list request).
            if members is not None and self._assignment.members_seen(members, trio.current_time()):
                log.info("group %s: members now %s", self.group, ", ".join(members) or "none")

    def _membership_brokers(self) -> Iterator[RouteBroker]:
        for name in sorted(self._brokers):
            yield self._brokers[name]

    async def heartbeat(self) -> None:
        """Heartbeat to every member of each broker name that can be reached now."""

        async def beat(link: BrokerLink) -> bool:
            if not isinstance(link, MembershipLink):
                return False
            await link.consumer_heartbeat(
                self.group,
                self.client_id,
                (self.topic,),
                from_beginning=self.config.from_beginning,
                sub_version=self._sub_version,
            )
            return True

        for broker in self._membership_brokers():
            await self._members.each(broker, beat, what="heartbeat")

    async def _unregister(self) -> None:
        """Leave the group on every member that can be reached (a clean exit)."""

        async def leave(link: BrokerLink) -> bool:
            if not isinstance(link, MembershipLink):
                return False
            await link.unregister_consumer(self.group, self.client_id)
            return True

        for broker in self._membership_brokers():
            await self._members.each(broker, leave, what="unregister")

    async def _member_list(self) -> tuple[str, ...] | None:
        """The group's members from the master of the first broker name that answers, else a
        slave; ``(client_id,)`` when the brokers do not serve consumer groups; None when no
        broker answers."""

        async def ask(link: BrokerLink) -> tuple[str, ...] | None:
            if not isinstance(link, MembershipLink):
                return None  # no consumer groups here
            try:
                return await link.consumer_list(self.group)
            except BrokerRequestError as exc:
                if exc.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                    return None
                raise

        unsupported = False
        for broker in self._membership_brokers():
            answer = await self._members.first(broker, ask, what=f"member list of {self.group}")
            if answer is not None and answer.value is not None:
                return answer.value
            unsupported = unsupported or answer is not None
        return (self.client_id,) if unsupported else None

    async def rebalance(self) -> None:
        """Take this member's share of the queues now (see the module docstring): heartbeat,
        ask the members, release (commit first) the queues lost, take the ones gained."""
        members = self._assignment.start(trio.current_time())
        if self.route is None:
            return
        if members is None:
            await self.heartbeat()
            members = await self._member_list()
        queues = queues_of(self.route)
        decision = self._assignment.decide(queues, members, trio.current_time())
        if decision.outcome is RebalanceOutcome.NO_MEMBERS:
            log.warning(
                "group %s: no broker answers the member list; keeping my queues", self.group
            )
            return
        if decision.outcome is RebalanceOutcome.NOT_LISTED:
            log.info("group %s: %s not listed yet; keeping my queues", self.group, self.client_id)
            return
        if decision.outcome is RebalanceOutcome.UNCHANGED:
            return
        for key in decision.lost:
            await self._release(key)
        for key in decision.gained:  # a queue's state exists once it is held
            self._queues.setdefault(key, QueuePosition())
        self._assignment.take(decision)
        self.stats.held |= decision.held
        self.stats.rebalances += 1
        log.info(
            "group %s: %s holds %d of %d queues (%d members): %s",
            self.group, self.client_id, len(decision.held), len(queues), len(self.members),
            ", ".join(f"{b}/{q}" for b, q in sorted(decision.held)) or "none",
        )  # fmt: skip

    async def _release(self, key: QueueKey) -> None:
        """Commit ``key`` then give it up: its next holder starts from the commit."""
        self._assignment.release(key)
        broker = self._brokers.get(key[0])
        if broker is None:
            return  # left the route: offsets kept, as for any queue of a missing broker name
        position = self._queues.get(key)
        async with self._commit_lock:
            due = None if position is None else position.commit_due()
            if due is not None:
                taken_by = await self._commit_one(key, broker, due)
                if taken_by is None:
                    self.stats.commit_failures += 1
                    log.warning("%s queue %d: released without a commit", *key)
            self._queues[key] = QueuePosition()

    # -- committing --------------------------------------------------------------------------

    async def _commit_loop(self) -> None:
        while True:
            await trio.sleep(self.config.commit_interval)
            await self.commit()

    async def commit(self) -> None:
        """Commit now every queue consumed further since its last commit (or whose last
        commit went to a slave): to its master, or to a slave when the master cannot be
        reached. A queue no member takes is retried at the next commit."""
        async with self._commit_lock:
            for key, position in list(self._queues.items()):
                due = position.commit_due()
                if due is None:
                    continue
                broker = self._brokers.get(key[0])
                taken_by = None if broker is None else await self._commit_one(key, broker, due)
                if taken_by is None:
                    self.stats.commit_failures += 1
                    continue
                position.committed_at(due, taken_by)

    async def _commit_one(self, key: QueueKey, broker: RouteBroker, offset: int) -> int | None:
        """Commit to the master, else a slave; the member that took it, or None."""
        answer = await self._members.first(
            broker,
            lambda link: link.commit_offset(self.group, self.topic, key[1], offset),
            what=f"commit {key[0]} queue {key[1]}",
        )
        if answer is None:
            return None
        self.stats.commits += 1
        if answer.broker_id != MASTER_ID:
            self.stats.slave_commits += 1
        if answer.tried > 1:
            self.stats.failovers += 1
        return answer.broker_id


def _describe(route: TopicRoute) -> str:
    parts = []
    for broker in route.brokers:
        members = ", ".join(f"{i}={address}" for i, address in broker.addresses)
        parts.append(f"{broker.broker_name} ({broker.queues} queues: {members or 'no member'})")
    return "; ".join(parts) or "no broker"
