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
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import ssl
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol, Self, TypeVar, runtime_checkable

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
from hanet.store import MessageRecord

from ._broker import (
    BrokerClient,
    BrokerConnectionError,
    BrokerError,
    BrokerRequestError,
    BrokerTimeoutError,
    PullResult,
)
from ._failover import parse_broker_address
from ._messages import PullStatus
from ._remoting import RemotingError, RemotingResponseError, ServerRequestHandler

__all__ = [
    "MAX_ROUTE_QUEUES",
    "BrokerLink",
    "Connector",
    "ConsumedMessage",
    "Consumer",
    "ConsumerStats",
    "MembershipLink",
    "QueueKey",
    "QueuePosition",
    "RouteSource",
    "allocate_averagely",
    "broker_connector",
    "default_client_id",
]

log = logging.getLogger("hanet.client.consumer")

QueueKey = tuple[str, int]
"""A queue of the topic: ``(broker_name, queue_id)``."""


class BrokerLink(Protocol):
    """What the consumer asks of a broker connection (:class:`BrokerClient` has it)."""

    async def pull(
        self, topic: str, queue_id: int, offset: int = 0, max_messages: int = 32, *, group: str
    ) -> PullResult: ...

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...

    async def query_offset(self, group: str, topic: str, queue_id: int) -> int | None: ...


@runtime_checkable
class MembershipLink(Protocol):
    """A broker connection that serves consumer groups (:class:`BrokerClient` does); a link
    without these methods makes the consumer alone in its group."""

    async def consumer_heartbeat(
        self,
        group: str,
        client_id: str,
        topics: Sequence[str] = (),
        *,
        from_beginning: bool,
        sub_version: int | None = None,
    ) -> None: ...

    async def unregister_consumer(self, group: str, client_id: str) -> None: ...

    async def consumer_list(self, group: str) -> tuple[str, ...]: ...


@runtime_checkable
class _Closable(Protocol):
    """A link that tells whether its connection is still open (:class:`BrokerClient`)."""

    @property
    def is_connected(self) -> bool: ...


T = TypeVar("T")


def allocate_averagely(queues: Sequence[T], client_ids: Sequence[str], client_id: str) -> list[T]:
    """The queues ``client_id`` takes (RocketMQ's ``AllocateMessageQueueAveragely``).

    Both lists must be sorted the same way by every member. Each member takes a contiguous
    range; the first ``len(queues) % len(client_ids)`` members take one more. A member not in
    ``client_ids`` takes nothing; with more members than queues the last ones take nothing.
    """
    if client_id not in client_ids or not queues:
        return []
    index = client_ids.index(client_id)
    count, members = len(queues), len(client_ids)
    mod = count % members
    first = mod > 0 and index < mod  # one of the members taking one queue more
    size = 1 if count <= members else count // members + (1 if first else 0)
    start = index * size if first else index * size + mod
    return [queues[(start + i) % count] for i in range(min(size, count - start))]


def default_client_id() -> str:
    """``host@pid@random``: unique per consumer (RocketMQ's ``clientIP@instanceName``)."""
    return f"{socket.gethostname()}@{os.getpid()}@{secrets.token_hex(4)}"


class RouteSource(Protocol):
    """Where routes come from (:class:`~hanet.client.NameServerClient` is one): raises a
    :class:`~hanet.client.RemotingResponseError` (or :class:`BrokerRequestError`) with
    TOPIC_NOT_EXIST when no broker holds the topic, another
    :class:`~hanet.client.RemotingError` when no name server answers."""

    async def route(self, topic: str) -> TopicRoute: ...


class Connector(Protocol):
    """Opens a connection to a broker port given as ``host:port`` whose requests from the
    broker (``NOTIFY_CONSUMER_IDS_CHANGED``) go to ``on_request``; raises
    :class:`BrokerConnectionError` when it cannot."""

    def __call__(
        self, address: str, *, on_request: ServerRequestHandler | None = None
    ) -> AbstractAsyncContextManager[BrokerLink]: ...


MAX_ROUTE_QUEUES = 1024
"""Most queues of a broker name the consumer takes from a route (the name server refuses
registrations with more: ``hanet.namesrv.MAX_QUEUES``); queue ids above are ignored, so a
route naming 2**31-1 queues does not make it hold that many."""

_FRESH_MEMBERS = 1.0
"""Seconds a member list the heartbeat loop fetched stays good for the rebalance it starts."""

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

_LINK_ERRORS = (BrokerConnectionError, BrokerTimeoutError)
"""Failures that say a member cannot be reached (it is skipped for a while)."""


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


class _Links:
    """One connection per broker address, held open in a nursery; failed addresses are
    skipped for ``retry_interval`` seconds."""

    def __init__(
        self,
        nursery: trio.Nursery,
        connector: Connector,
        retry_interval: float,
        on_request: ServerRequestHandler | None = None,
    ) -> None:
        self._nursery = nursery
        self._connector = connector
        self._on_request = on_request
        self.retry_interval = retry_interval
        self._links: dict[str, BrokerLink] = {}
        self._stops: dict[str, trio.Event] = {}
        self._down_until: dict[str, float] = {}
        self._scopes: set[trio.CancelScope] = set()
        self._lock = trio.Lock()

    def has_failed(self, address: str) -> bool:
        """True when the last connection to ``address`` failed (it has not answered since)."""
        return address in self._down_until

    def is_down(self, address: str) -> bool:
        """True while a failed address is being skipped."""
        return self._down_until.get(address, -1.0) > trio.current_time()

    async def _hold(self, address: str, task_status: trio.TaskStatus[BrokerLink]) -> None:
        started = False
        stop = trio.Event()
        # Shielded: a cancellation of the consumer leaves the connections open for the last
        # commit; :meth:`close` ends them (connecting is bounded by the connect timeout).
        with trio.CancelScope(shield=True) as scope:
            self._scopes.add(scope)
            try:
                async with self._connector(address, on_request=self._on_request) as link:
                    self._stops[address] = stop
                    task_status.started(link)
                    started = True
                    await stop.wait()
            except BrokerError as exc:
                if not started:
                    raise
                log.debug("connection to %s ended: %s", address, exc)
            finally:
                self._scopes.discard(scope)
                if self._stops.get(address) is stop:
                    del self._stops[address]

    def close(self) -> None:
        """Close every connection."""
        self._links.clear()
        for scope in list(self._scopes):
            scope.cancel()

    async def get(self, address: str) -> BrokerLink:
        """The connection to ``address``, opened when there is none.

        Raises:
            BrokerConnectionError: the address is being skipped, or does not accept, or its
                connection closed since (a malformed answer closes it): then it is skipped
                for ``retry_interval`` seconds like any failed member.
        """
        link = self._links.get(address)
        if link is not None and isinstance(link, _Closable) and not link.is_connected:
            self.failed(address)
            raise BrokerConnectionError(f"connection to {address} closed")
        if link is not None:
            return link
        async with self._lock:
            link = self._links.get(address)
            if link is not None:
                return link
            if self.is_down(address):
                raise BrokerConnectionError(f"{address} failed recently; skipped for now")
            try:
                opened: BrokerLink = await self._nursery.start(self._hold, address)
            except BrokerError:
                self.failed(address)
                raise
            self._links[address] = opened
            if self._down_until.pop(address, None) is not None:
                log.info("%s answers again", address)
            return opened

    def failed(self, address: str) -> None:
        """Close the connection to ``address`` and skip it for ``retry_interval`` seconds."""
        self._links.pop(address, None)
        stop = self._stops.pop(address, None)
        if stop is not None:
            stop.set()
        self._down_until[address] = trio.current_time() + self.retry_interval


def broker_connector(*, tls: ssl.SSLContext | None = None, timeout: float = 5.0) -> Connector:
    """A :data:`Connector` opening :class:`BrokerClient` connections (``timeout``: seconds
    to connect and per request)."""

    def connect(
        address: str, *, on_request: ServerRequestHandler | None = None
    ) -> AbstractAsyncContextManager[BrokerLink]:
        parsed = parse_broker_address(address)
        if parsed is None:
            raise BrokerConnectionError(f"not a broker address: {address!r}")
        return BrokerClient.connect(
            parsed[0],
            parsed[1],
            connect_timeout=timeout,
            request_timeout=timeout,
            tls=tls,
            on_request=on_request,
        )

    return connect


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
        from_beginning: bool,
        connector: Connector,
        pull_batch: int,
        poll_interval: float,
        commit_interval: float,
        route_interval: float,
        retry_interval: float,
        buffer: int,
        client_id: str | None = None,
        heartbeat_interval: float = 10.0,
        rebalance_interval: float = 20.0,
    ) -> None:
        self.group = group
        self.topic = topic
        self.from_beginning = from_beginning
        self.pull_batch = pull_batch
        self.poll_interval = poll_interval
        self.commit_interval = commit_interval
        self.route_interval = route_interval
        self.retry_interval = retry_interval
        self.client_id = client_id or default_client_id()
        self.heartbeat_interval = heartbeat_interval
        self.rebalance_interval = rebalance_interval
        self.members: tuple[str, ...] = ()
        """The group's members at the last rebalance (sorted client ids)."""
        self.stats = ConsumerStats()
        self.route: TopicRoute | None = None
        """The route last looked up (None: none yet)."""
        self._names = names
        self._links = _Links(nursery, connector, retry_interval, self._on_broker_request)
        self._wake = trio.Event()  # set to end the pull loop's idle wait at once
        self._sub_version = int(time.time() * 1000)  # the subscription's, kept
        self.notifications = 0
        """NOTIFY_CONSUMER_IDS_CHANGED requests received for this group."""
        self._brokers: dict[str, RouteBroker] = {}
        self._queues: dict[QueueKey, QueuePosition] = {}
        self._route_due = -1.0
        self._assigned: set[QueueKey] = set()
        self._generations: dict[QueueKey, int] = {}  # bumped when a queue is released
        self._rebalance_due = -1.0
        self._fresh_members: tuple[tuple[str, ...], float] | None = None  # (list, when)
        self._send, self._receive = trio.open_memory_channel[tuple[ConsumedMessage, int]](buffer)
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
        from_beginning: bool = False,
        connector: Connector | None = None,
        tls: ssl.SSLContext | None = None,
        request_timeout: float = 5.0,
        pull_batch: int = 32,
        poll_interval: float = 0.2,
        commit_interval: float = 5.0,
        route_interval: float = 30.0,
        retry_interval: float = 5.0,
        buffer: int = 64,
        client_id: str | None = None,
        heartbeat_interval: float = 10.0,
        rebalance_interval: float = 20.0,
    ) -> AsyncIterator[Self]:
        """Start consuming ``topic`` for ``group``; at the block's exit, pulling stops, the
        offsets consumed are committed and the consumer leaves the group (within
        ``request_timeout`` seconds).

        An exception raised in the block propagates as it is (not in an exception group).

        Args:
            names: the name servers (:class:`~hanet.client.NameServerClient`).
            from_beginning: where a queue the group never committed starts: its first message
                (True) or its end (False, RocketMQ's CONSUME_FROM_LAST_OFFSET).
            connector: opens broker connections (default: :class:`BrokerClient` with ``tls``
                and ``request_timeout``).
            request_timeout: seconds to connect and per request.
            pull_batch: most messages a pull asks for.
            poll_interval: seconds to wait after a round of pulls that found nothing.
            commit_interval: seconds between commits.
            route_interval: seconds between route lookups.
            retry_interval: seconds a member whose connection failed is skipped.
            buffer: messages pulled ahead of the caller.
            client_id: this member's id in the group (default: :func:`default_client_id`).
            heartbeat_interval: seconds between heartbeats (and member list checks).
            rebalance_interval: seconds between rebalances when nothing changes.
        """
        if pull_batch < 1 or buffer < 0:
            raise ValueError("pull_batch must be >= 1, buffer >= 0")
        if heartbeat_interval <= 0 or rebalance_interval <= 0:
            raise ValueError("heartbeat_interval and rebalance_interval must be > 0")
        if connector is None:
            connector = broker_connector(tls=tls, timeout=request_timeout)
        error: BaseException | None = None
        async with trio.open_nursery() as links:
            consumer = cls(
                links,
                names,
                group,
                topic,
                from_beginning=from_beginning,
                connector=connector,
                pull_batch=pull_batch,
                poll_interval=poll_interval,
                commit_interval=commit_interval,
                route_interval=route_interval,
                retry_interval=retry_interval,
                buffer=buffer,
                client_id=client_id,
                heartbeat_interval=heartbeat_interval,
                rebalance_interval=rebalance_interval,
            )
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
                    with trio.move_on_after(request_timeout):
                        await consumer.commit()
                        await consumer._unregister()
                consumer._links.close()
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
            if generation == self._generations.get(message.key, 0):
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
        if position is None or generation != self._generations.get(message.key, 0):
            return  # its queue was released meanwhile
        after = message.queue_offset + 1
        if position.consumed is None or after > position.consumed:
            position.consumed = after

    @property
    def buffered(self) -> int:
        """Messages pulled and not yet handed out."""
        return self._receive.statistics().current_buffer_used

    @property
    def assigned(self) -> list[QueueKey]:
        """The queues this member holds now, sorted."""
        return sorted(self._assigned)

    def positions(self) -> dict[QueueKey, QueuePosition]:
        """The state (a copy) of each queue held now or before, by ``(broker_name,
        queue_id)``."""
        return {key: attrs.evolve(position) for key, position in sorted(self._queues.items())}

    # -- the route ---------------------------------------------------------------------------

    async def refresh_route(self) -> None:
        """Look the route up now; a failure keeps the last route (and is retried soon)."""
        self.stats.route_lookups += 1
        try:
            route = await self._names.route(self.topic)
        except (BrokerRequestError, RemotingResponseError) as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                log.warning("route of %s: %s", self.topic, exc)
            else:
                log.debug("no broker holds %s yet", self.topic)
            self._route_due = trio.current_time() + min(1.0, self.retry_interval)
            return
        except RemotingError as exc:
            log.warning("route of %s: no name server answers: %s", self.topic, exc)
            self._route_due = trio.current_time() + min(1.0, self.retry_interval)
            return
        route = _bounded(route)
        if route != self.route:
            log.info("route of %s: %s", self.topic, _describe(route))
        if _queues_of(route) != (_queues_of(self.route) if self.route is not None else []):
            self._rebalance_due = trio.current_time()
        self.route = route
        self._brokers = {broker.broker_name: broker for broker in route.brokers}
        self._route_due = trio.current_time() + self.route_interval
        if any(broker.address_of(MASTER_ID) is None for broker in route.brokers):
            # A broker name without its master (the name server dropped it when its
            # connection closed): looked up again soon, to go back to it once it returns.
            self._route_due = trio.current_time() + min(self.route_interval, self.retry_interval)

    def _route_failed(self) -> None:
        """A member failed: look the route up again soon (not more than once a retry)."""
        self._route_due = min(self._route_due, trio.current_time() + min(1.0, self.retry_interval))

    def _live_queues(self) -> list[QueueKey]:
        return [
            key
            for key in self._queues
            if key in self._assigned
            and key[0] in self._brokers
            and key[1] < self._brokers[key[0]].queues
        ]

    def _members(self, broker: RouteBroker, first: int) -> Iterator[tuple[int, str]]:
        """The members to try, in order: ``first``, the master, the slaves by id; those
        being skipped after a failure left out."""
        order = sorted(broker.addresses, key=lambda m: (m[0] != first, m[0] != MASTER_ID, m[0]))
        for broker_id, address in order:
            if not self._links.is_down(address):
                yield broker_id, address

    # -- pulling -----------------------------------------------------------------------------

    async def _pull_loop(self) -> None:
        while True:
            if trio.current_time() >= self._route_due:
                await self.refresh_route()
            if trio.current_time() >= self._rebalance_due:
                await self.rebalance()
            found = False
            for key in self._live_queues():
                if await self._pull_queue(key):
                    found = True
            if not found:
                with trio.move_on_after(self.poll_interval):
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
                self._rebalance_due = trio.current_time()
                self._fresh_members = None
                self._wake.set()
            return None if request.is_oneway else request.response(ResponseCode.SUCCESS)
        if request.is_oneway:
            return None
        return request.response(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request code {request.code} not supported"
        )

    async def _pull_queue(self, key: QueueKey) -> bool:
        """Pull one batch of ``key`` and hand it to the caller; True when it found messages."""
        broker = self._brokers[key[0]]
        position = self._queues[key]
        if not position.started:
            try:
                await self._start(key, broker, position)
            except BrokerError as exc:
                log.debug("%s queue %d: no member answers the offset query: %s", *key, exc)
                return False
        tried = 0
        for broker_id, address in self._members(broker, position.suggested_broker_id):
            tried += 1
            try:
                link = await self._links.get(address)
                offset = position.pull_offset
                if offset is None:
                    # CONSUME_FROM_LAST_OFFSET: the queue's end, as this member knows it.
                    probe = await link.pull(self.topic, key[1], 0, 1, group=self.group)
                    offset = self._begin(key, position, probe.max_offset)
                result = await link.pull(
                    self.topic, key[1], offset, self.pull_batch, group=self.group
                )
            except _LINK_ERRORS as exc:
                self._member_failed(key, broker_id, address, exc)
                continue
            except BrokerError as exc:
                log.warning("pull %s queue %d from %s: %s", key[0], key[1], address, exc)
                return False
            if tried > 1:
                self.stats.failovers += 1
            return await self._take(key, broker_id, position, offset, result)
        return False

    def _member_failed(
        self, key: QueueKey, broker_id: int, address: str, exc: BaseException
    ) -> None:
        role = "master" if broker_id == MASTER_ID else f"slave {broker_id}"
        # Said once; retried every retry interval until it answers again.
        level = logging.DEBUG if self._links.has_failed(address) else logging.WARNING
        log.log(
            level, "%s %s (%s) failed: %s; using another member, retrying every %g s",
            key[0], role, address, exc, self.retry_interval,
        )  # fmt: skip
        self._links.failed(address)
        self._route_failed()

    async def _start(self, key: QueueKey, broker: RouteBroker, position: QueuePosition) -> None:
        """Set where ``key`` starts: the committed offset (master first), else per
        ``from_beginning`` (the end is left to the first pull: ``pull_offset`` stays None).

        Raises:
            BrokerError: no member answered (the last member's error; BrokerConnectionError
                when every member is being skipped).
        """
        last: BrokerError | None = None
        for broker_id, address in self._members(broker, MASTER_ID):
            try:
                link = await self._links.get(address)
                committed = await link.query_offset(self.group, self.topic, key[1])
            except _LINK_ERRORS as exc:
                self._member_failed(key, broker_id, address, exc)
                last = exc
                continue
            except BrokerError as exc:
                # An ERROR answer or a malformed one: ask the next member.
                log.warning("offset of %s queue %d from %s: %s", key[0], key[1], address, exc)
                last = exc
                continue
            position.started = True
            if committed is not None:
                position.committed, position.committed_to = committed, broker_id
                self._begin(key, position, committed, "the committed offset")
            elif self.from_beginning:
                self._begin(key, position, 0, "the beginning")
            return
        raise last if last is not None else BrokerConnectionError(f"no member of {key[0]}")

    def _begin(self, key: QueueKey, position: QueuePosition, offset: int, why: str = "") -> int:
        position.pull_offset = offset
        position.consumed = offset
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
        position.suggested_broker_id = result.suggested_broker_id
        status = result.status
        if status is PullStatus.FOUND:
            position.pull_offset = result.next_offset
            generation = self._generations.get(key, 0)
            for record in result.messages:
                await self._send.send((ConsumedMessage(record, key[0], broker_id), generation))
            return bool(result.messages)
        if status in _SKIP_FORWARD:
            # Messages before the queue's start are gone, or those read matched nothing or
            # are no longer there: move up to the next offset (never back).
            position.pull_offset = max(offset, result.next_offset)
        elif status is PullStatus.OFFSET_OVERFLOW_BADLY and broker_id == MASTER_ID:
            log.warning(
                "%s queue %d: offset %d is past the master's end %d; pulling from there",
                key[0], key[1], offset, result.next_offset,
            )  # fmt: skip
            position.pull_offset = result.next_offset
        return False

    # -- membership and rebalancing ----------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        while True:
            await trio.sleep(self.heartbeat_interval)
            await self.heartbeat()
            members = await self._member_list()
            if members is not None and members != self.members:
                log.info("group %s: members now %s", self.group, ", ".join(members) or "none")
                self._rebalance_due = trio.current_time()
                # The rebalance this starts takes the list as it is (no second heartbeat
                # round and member list request).
                self._fresh_members = (members, trio.current_time())

    def _membership_links(self) -> Iterator[tuple[str, RouteBroker]]:
        for name in sorted(self._brokers):
            yield name, self._brokers[name]

    async def heartbeat(self) -> None:
        """Heartbeat to every member of each broker name that can be reached now."""
        for name, broker in self._membership_links():
            for broker_id, address in self._members(broker, MASTER_ID):
                try:
                    link = await self._links.get(address)
                    if not isinstance(link, MembershipLink):
                        break
                    await link.consumer_heartbeat(
                        self.group,
                        self.client_id,
                        (self.topic,),
                        from_beginning=self.from_beginning,
                        sub_version=self._sub_version,
                    )
                except _LINK_ERRORS as exc:
                    self._member_failed((name, -1), broker_id, address, exc)
                except BrokerError as exc:
                    log.debug("heartbeat to %s: %s", address, exc)

    async def _unregister(self) -> None:
        """Leave the group on every member that can be reached (a clean exit)."""
        for _name, broker in self._membership_links():
            for _broker_id, address in self._members(broker, MASTER_ID):
                try:
                    link = await self._links.get(address)
                    if not isinstance(link, MembershipLink):
                        break
                    await link.unregister_consumer(self.group, self.client_id)
                except BrokerError as exc:
                    log.debug("unregister from %s: %s", address, exc)

    async def _member_list(self) -> tuple[str, ...] | None:
        """The group's members from the master of the first broker name that answers, else a
        slave; ``(client_id,)`` when the brokers do not serve consumer groups; None when no
        broker answers."""
        unsupported = False
        for name, broker in self._membership_links():
            for broker_id, address in self._members(broker, MASTER_ID):
                try:
                    link = await self._links.get(address)
                    if not isinstance(link, MembershipLink):
                        unsupported = True
                        continue
                    return await link.consumer_list(self.group)
                except _LINK_ERRORS as exc:
                    self._member_failed((name, -1), broker_id, address, exc)
                except BrokerRequestError as exc:
                    if exc.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                        unsupported = True
                    else:
                        log.warning("member list of %s from %s: %s", self.group, address, exc)
                except BrokerError as exc:
                    log.warning("member list of %s from %s: %s", self.group, address, exc)
        return (self.client_id,) if unsupported else None

    async def rebalance(self) -> None:
        """Take this member's share of the queues now (see the module docstring): heartbeat,
        ask the members, release (commit first) the queues lost, take the ones gained."""
        self._rebalance_due = trio.current_time() + self.rebalance_interval
        if self.route is None:
            return
        fresh, self._fresh_members = self._fresh_members, None
        if fresh is not None and trio.current_time() - fresh[1] <= _FRESH_MEMBERS:
            members: tuple[str, ...] | None = fresh[0]  # the heartbeat loop just asked
        else:
            await self.heartbeat()
            members = await self._member_list()
        if members is None:
            log.warning(
                "group %s: no broker answers the member list; keeping my queues", self.group
            )
            return
        self.members = members
        if self.client_id not in members:
            log.info("group %s: %s not listed yet; keeping my queues", self.group, self.client_id)
            self._rebalance_due = trio.current_time() + min(1.0, self.heartbeat_interval)
            return
        mine = set(allocate_averagely(_queues_of(self.route), members, self.client_id))
        lost = self._assigned - mine
        gained = mine - self._assigned
        if not lost and not gained:
            return
        for key in sorted(lost):
            await self._release(key)
        for key in gained:  # a queue's state exists once it is held
            self._queues.setdefault(key, QueuePosition())
        self._assigned = mine
        self.stats.held |= mine
        self.stats.rebalances += 1
        log.info(
            "group %s: %s holds %d of %d queues (%d members): %s",
            self.group, self.client_id, len(mine), len(_queues_of(self.route)), len(members),
            ", ".join(f"{b}/{q}" for b, q in sorted(mine)) or "none",
        )  # fmt: skip

    async def _release(self, key: QueueKey) -> None:
        """Commit ``key`` then give it up: its next holder starts from the commit."""
        self._assigned.discard(key)
        self._generations[key] = self._generations.get(key, 0) + 1
        broker = self._brokers.get(key[0])
        if broker is None:
            return  # left the route: offsets kept, as for any queue of a missing broker name
        position = self._queues.get(key)
        async with self._commit_lock:
            consumed = None if position is None else position.consumed
            due = (
                position is not None
                and consumed is not None
                and (consumed != position.committed or position.committed_to != MASTER_ID)
            )
            if due and consumed is not None:
                taken_by = await self._commit_one(key, broker, consumed)
                if taken_by is None:
                    self.stats.commit_failures += 1
                    log.warning("%s queue %d: released without a commit", *key)
            self._queues[key] = QueuePosition()

    # -- committing --------------------------------------------------------------------------

    async def _commit_loop(self) -> None:
        while True:
            await trio.sleep(self.commit_interval)
            await self.commit()

    async def commit(self) -> None:
        """Commit now every queue consumed further since its last commit (or whose last
        commit went to a slave): to its master, or to a slave when the master cannot be
        reached. A queue no member takes is retried at the next commit."""
        async with self._commit_lock:
            for key, position in list(self._queues.items()):
                consumed = position.consumed
                if consumed is None or (
                    consumed == position.committed and position.committed_to == MASTER_ID
                ):
                    continue
                broker = self._brokers.get(key[0])
                taken_by = None if broker is None else await self._commit_one(key, broker, consumed)
                if taken_by is None:
                    self.stats.commit_failures += 1
                    continue
                position.committed, position.committed_to = consumed, taken_by

    async def _commit_one(self, key: QueueKey, broker: RouteBroker, offset: int) -> int | None:
        """Commit to the master, else a slave; the member that took it, or None."""
        tried = 0
        for broker_id, address in self._members(broker, MASTER_ID):
            tried += 1
            try:
                link = await self._links.get(address)
                await link.commit_offset(self.group, self.topic, key[1], offset)
            except _LINK_ERRORS as exc:
                self._member_failed(key, broker_id, address, exc)
                continue
            except BrokerError as exc:
                log.warning("commit %s queue %d to %s: %s", key[0], key[1], address, exc)
                continue
            self.stats.commits += 1
            if broker_id != MASTER_ID:
                self.stats.slave_commits += 1
            if tried > 1:
                self.stats.failovers += 1
            return broker_id
        return None


def _bounded(route: TopicRoute) -> TopicRoute:
    """``route`` with at most :data:`MAX_ROUTE_QUEUES` queues per broker name."""
    if all(broker.queues <= MAX_ROUTE_QUEUES for broker in route.brokers):
        return route
    for broker in route.brokers:
        if broker.queues > MAX_ROUTE_QUEUES:
            log.warning(
                "route of %s: %s has %d queues; taking the first %d",
                route.topic, broker.broker_name, broker.queues, MAX_ROUTE_QUEUES,
            )  # fmt: skip
    brokers = tuple(
        attrs.evolve(broker, queues=min(broker.queues, MAX_ROUTE_QUEUES))
        for broker in route.brokers
    )
    return attrs.evolve(route, brokers=brokers)


def _queues_of(route: TopicRoute) -> list[QueueKey]:
    """Every queue of the route, sorted (how each member lists them to share them out)."""
    return sorted((b.broker_name, q) for b in route.brokers for q in range(b.queues))


def _describe(route: TopicRoute) -> str:
    parts = []
    for broker in route.brokers:
        members = ", ".join(f"{i}={address}" for i, address in broker.addresses)
        parts.append(f"{broker.broker_name} ({broker.queues} queues: {members or 'no member'})")
    return "; ".join(parts) or "no broker"
