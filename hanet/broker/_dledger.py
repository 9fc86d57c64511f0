"""The broker port of a DLedger node: the same dispatch table as a classic broker
(:class:`~hanet.broker.BrokerPort`), sends appended through Raft, everything else served from
the node's commit log view.

A follower or candidate is a slave in RocketMQ's DLedger mode: it answers a send
SERVICE_NOT_AVAILABLE, its remark naming the leader and its broker address when the node
knows them, and pulls beyond its data PULL_RETRY_IMMEDIATELY. A leader's append that a quorum
did not acknowledge in time (the outcome is unknown: the entry may still commit) and a put
refused because too many wait for a quorum (LEADER_PENDING_FULL) answer as RocketMQ 4.9.8's
DLedger broker does: SYSTEM_ERROR, remark ``[PC_SYNCHRONIZED]broker busy, ...`` (OS_PAGECACHE_BUSY),
which RocketMQ's clients retry.

Consumer offsets (QUERY/UPDATE_CONSUMER_OFFSET) are kept per node in a :class:`ConsumerOffsets`
(memory only unless one with a file is given; they are not replicated through Raft), and so
are the consumer groups' members (a consumer heartbeats to each node it reaches) and the
topics (a :class:`TopicTable`, completed from the view's consume queues).

With name servers (:meth:`DLedgerBrokerService.run_registration`) a node registers as RocketMQ
4.9.8's DLedger brokers do, so RocketMQ's clients find the leader through the routes: the
leader as broker id 0 (the master), a follower or candidate as a slave whose id is the number
in its self id plus one (``n0`` -> 1, ``n2`` -> 3: ``DLedgerCommitLog``'s id; an id without a
number: its place among the peers plus one), all under one broker name (default: the group).
A role change registers again at once (RocketMQ's ``changeToMaster`` / ``changeToSlave``); the
name server drops the node's entry under its old id, its address being the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import trio

from hanet.channel import HandlerContext, StreamChannel, format_address
from hanet.client import NameServerClient
from hanet.dledger import AppendStatus, DLedgerNode, NodeNotRunningError, PutOutcome
from hanet.protocol import (
    MAX_FRAME_LENGTH,
    BrokerRegistration,
    BrokerStatus,
    ClusterLink,
    PullMessageRequestHeader,
    RemotingCommand,
    SubscriptionGroupWrapper,
)
from hanet.store import CommitLogStore, Message, PutResult, PutStatus, StoreClosedError

from ._connection import DEFAULT_MAX_IN_FLIGHT
from ._consumers import ConsumerRegistry, consumer_groups
from ._hold import PullHoldService
from ._offsets import ConsumerOffsets
from ._port import BrokerPort, default_subscription_groups
from ._registration import NameServerRegistrar
from ._send import BUSY_REMARK
from ._status import store_status
from ._topics import TopicTable

__all__ = ["DEFAULT_QUEUES", "DLedgerBrokerService", "dledger_broker_id"]

DEFAULT_QUEUES = 4
"""Queues of a topic created by a send (RocketMQ's defaultTopicQueueNums)."""

# RocketMQ 4.9.8's DLedgerCommitLog answers OS_PAGECACHE_BUSY for a quorum timeout and a full
# pending queue (SYSTEM_ERROR: the clients retry it, where a FLUSH_SLAVE_TIMEOUT counts as sent)
_WAIT_DETAIL = (
    f"{BUSY_REMARK}; WAIT_QUORUM_ACK_TIMEOUT: appended but not acknowledged by a quorum in time: "
    "the outcome is unknown (it may still be committed)"
)
_FULL_DETAIL = (
    f"{BUSY_REMARK}; LEADER_PENDING_FULL: too many puts waiting for a quorum, not appended"
)


class DLedgerBrokerService:
    """The broker port of a DLedger node (see the module docstring); consumer offsets from
    ``offsets`` (default: in memory only; run its :meth:`ConsumerOffsets.run` to persist one
    with a file)."""

    def __init__(
        self,
        node: DLedgerNode,
        *,
        queues: int = DEFAULT_QUEUES,
        max_frame_length: int = MAX_FRAME_LENGTH,
        offsets: ConsumerOffsets | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        cluster_name: str = "DefaultCluster",
        broker_name: str | None = None,
    ) -> None:
        self.node = node
        self.max_in_flight = max_in_flight
        """Per connection, puts awaiting their answer before reads pause."""
        self._offsets = offsets if offsets is not None else ConsumerOffsets()
        self._consumers = ConsumerRegistry(clock=trio.current_time)
        self._topics = TopicTable(default_queues=queues)
        self._queues_seen: tuple[CommitLogStore, int] | None = None
        self.queues = queues
        self.cluster_name = cluster_name
        self.broker_name = broker_name if broker_name is not None else node.config.group
        """The broker name registered with the name servers (default: the DLedger group)."""
        self.registrar: NameServerRegistrar | None = None
        """The registration with the name servers (None unless :meth:`run_registration`)."""
        self.broker_address: str | None = None
        self._started = trio.current_time()
        self.puts = 0
        self.port = BrokerPort(self, max_frame_length=max_frame_length)
        """The broker port's dispatch table and pipeline."""
        self.stored_listeners: list[Callable[[Sequence[Message], Sequence[PutResult]], None]] = []
        """Called after each append through this node, with the messages and results."""

    def initialize(self, channel: StreamChannel) -> None:
        """The pipeline of a broker port connection."""
        self.port.initialize(channel)

    async def run_holds(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Long polling on this node's broker port until cancelled (the node must be
        running: its commit log view is read): a suspended pull that found nothing waits for
        a message, woken by this node's appends and, for what replication brings, by the
        hold service's periodic re-check."""
        holds = PullHoldService(self._repull, self.store.max_queue_offset)
        self.port.hold = holds.hold
        self.stored_listeners.append(holds.notify_put)
        try:
            await holds.run(task_status=task_status)
        finally:
            self.port.hold = None
            self.stored_listeners.remove(holds.notify_put)

    def _repull(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand | None:
        header = PullMessageRequestHeader.from_fields(request.fields)
        return self.port.serve_pull(ctx, request, header, allow_suspend=False)

    # -- registration with the name servers ---------------------------------------------------

    @property
    def broker_id(self) -> int:
        """The broker id registered: 0 on the leader, else :func:`dledger_broker_id`."""
        if self.node.is_leader:
            return 0
        config = self.node.config
        return dledger_broker_id(config.node_id, config.peers)

    def registration(self) -> BrokerRegistration:
        """What this node registers now (see the module docstring): the leader as
        SYNC_MASTER id 0, any other role as a SLAVE; its broker port and topics.

        Raises:
            RuntimeError: :attr:`broker_address` is not set.
        """
        if not self.broker_address:
            raise RuntimeError("the DLedger node's broker address is not set")
        leader = self.node.is_leader
        topics = self.topic_table.queue_counts() if self.node.store is not None else {}
        return BrokerRegistration(
            cluster=self.cluster_name,
            broker_name=self.broker_name,
            broker_id=self.broker_id,
            role="SYNC_MASTER" if leader else "SLAVE",
            broker_address=self.broker_address,
            topics=tuple(sorted(topics.items())),
        )

    async def run_registration(
        self,
        client: NameServerClient,
        *,
        interval: float = 30.0,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Register with ``client``'s name servers every ``interval`` seconds, at once (and
        awaiting the answers) after each role change, oneway when a topic is created here;
        unregister when cancelled. Needs :attr:`broker_address`.

        Raises:
            RuntimeError: :attr:`broker_address` is not set.
        """
        self.registration()  # fail now, not in the registrar's task
        registrar = self.registrar = NameServerRegistrar(
            client, self.registration, interval=interval
        )
        self._topics.on_change = registrar.wake
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(registrar.run)
                task_status.started()
                while True:
                    # Each change, and a check every second (a change missed while this task
                    # was waking up from the one before).
                    with trio.move_on_after(1.0):
                        await self.node.wait_role_change()
                        registrar.renew()
                        continue
                    registered = registrar.registered
                    if registered is not None and registered.broker_id != self.broker_id:
                        registrar.renew()
        finally:
            self._topics.on_change = None

    def cluster_link(self) -> ClusterLink | None:
        """The status's ``cluster`` section (None without :meth:`run_registration`)."""
        registrar = self.registrar
        if registrar is None:
            return None
        last = registrar.last_registered
        return ClusterLink(
            name=self.cluster_name,
            broker_name=self.broker_name,
            broker_id=self.broker_id,
            name_servers=tuple(format_address(a) for a in registrar.client.addresses),
            registrations=registrar.registrations,
            failures=registrar.failures,
            last_registered_ago=None if last is None else round(trio.current_time() - last, 3),
            last_error=registrar.last_error,
        )

    async def housekeeping(self, interval: float = 10.0) -> None:
        """Every ``interval`` seconds until cancelled, drop the consumers not heard from in
        time and tell their groups."""
        while True:
            await trio.sleep(interval)
            self.port.housekeeping()

    # -- the broker port's backend --------------------------------------------------------------

    @property
    def store(self) -> CommitLogStore:
        """The node's commit log view.

        Raises:
            StoreClosedError: the node has no view (not running).
        """
        store = self.node.store
        if store is None:
            raise StoreClosedError("the DLedger node's commit log view is not open")
        return store

    @property
    def offsets(self) -> ConsumerOffsets:
        """The consumer groups' committed offsets (this node's)."""
        return self._offsets

    @property
    def consumers(self) -> ConsumerRegistry:
        """The live members of each consumer group."""
        return self._consumers

    @property
    def topic_table(self) -> TopicTable:
        """The topics served, completed from the view's consume queues."""
        store = self.node.store
        if store is not None:
            # read on every send: the store's queues again only when the view has a new one
            seen, version = self._queues_seen, self.node.queue_version
            if seen is None or seen[0] is not store or seen[1] != version:
                self._topics.add_store_queues(store.queues())
                self._queues_seen = (store, version)
        return self._topics

    @property
    def is_slave(self) -> bool:
        """Every member but the leader is a slave."""
        return not self.node.is_leader

    def send_refusal(self) -> str | None:
        """A follower or candidate refuses sends, naming the leader when known."""
        if self.node.is_leader:
            return None
        try:
            state = self.node.status()
        except NodeNotRunningError:
            return "not master: the DLedger node is not running"
        if state.leader:
            where = f" at {state.leader_address}" if state.leader_address else ""
            return f"not master: this node is {state.role}; the leader is {state.leader}{where}"
        return f"not master: this node is {state.role}; no leader known"

    def put_now(self, messages: Sequence[Message]) -> list[PutResult] | None:
        """None: every send goes through Raft (:meth:`put`)."""
        return None

    async def put(self, messages: Sequence[Message]) -> list[PutResult]:
        """Append ``messages`` through Raft; one result per message."""
        return self._stored(messages, await self.node.put_many(messages))

    def put_later(
        self, messages: Sequence[Message], done: Callable[[list[PutResult]], None]
    ) -> None:
        """Append ``messages`` through Raft (one proposal batch, no task waiting): ``done``
        gets one result per message once all are final (from the node's task)."""
        self.node.put_many_nowait(messages, lambda outcomes: done(self._stored(messages, outcomes)))

    def _stored(self, messages: Sequence[Message], outcomes: list[PutOutcome]) -> list[PutResult]:
        results = [_result(o) for o in outcomes]
        self.puts += sum(1 for r in results if r.status is PutStatus.PUT_OK)
        for listener in self.stored_listeners:
            listener(messages, results)
        return results

    def must_wait(self) -> bool:
        """An answered append is final."""
        return False

    async def settle(self, end_offset: int, stored_at: float | None = None) -> PutStatus:
        """Nothing to wait for (a Raft append answers when committed)."""
        await trio.lowlevel.checkpoint()
        return PutStatus.PUT_OK

    def settled_offset(self) -> int:
        """Everything answered is settled."""
        return self.store.max_offset

    def suggest(self, behind: int) -> int:
        """Always the leader's id 0 (a DLedger group has no slave reads)."""
        return 0

    def in_memory_limit(self) -> int:
        """Commit log bytes behind the end that count as in memory (a new group's first
        query answers 0 while its queue's first message is within)."""
        return 1 << 62

    def delay_offsets(self) -> bytes:
        """No delay service on a DLedger node: an empty table."""
        return b'{"offsetTable":{}}'

    def subscription_groups(self) -> SubscriptionGroupWrapper:
        """Every consumer group heard from, with RocketMQ's defaults."""
        return default_subscription_groups(self._consumers)

    def observe_put(self, statuses: Sequence[PutStatus], seconds: float) -> None:
        """No metrics on a DLedger node."""

    def connection_event(self, event: str) -> None:
        """No metrics on a DLedger node."""

    def status(self) -> BrokerStatus:
        """The status document: the view's offsets, ``role``, the ``dledger`` section, the
        ``consumer_offsets`` and, when it registers with name servers, ``cluster`` (no
        ``metadata_sync``: a DLedger group has no classic slaves).

        Raises:
            StoreClosedError: the node is not running (starting or stopping)."""
        try:
            state = self.node.status()
        except NodeNotRunningError as exc:
            raise StoreClosedError(str(exc)) from None
        stats = self.store.statistics()
        return store_status(
            stats,
            role=state.role,
            broker_address=self.broker_address,
            ha_address=None,
            puts=self.puts,
            uptime=round(trio.current_time() - self._started, 3),
            dledger=state,
            cluster=self.cluster_link(),
            consumer_offsets=self._offsets.status(),
            consumer_groups=consumer_groups(self._consumers),
        )


def _result(outcome: PutOutcome) -> PutResult:
    if outcome.status is AppendStatus.SUCCESS:
        return PutResult(
            PutStatus.PUT_OK,
            outcome.wrote_offset,
            outcome.wrote_size,
            outcome.queue_offset,
            outcome.msg_id,
            outcome.store_timestamp,
        )
    if outcome.status is AppendStatus.WAIT_QUORUM_ACK_TIMEOUT:  # as 4.9.8: busy, not a slave
        return PutResult(PutStatus.OS_PAGE_CACHE_BUSY, detail=_WAIT_DETAIL)
    if outcome.status is AppendStatus.NOT_LEADER:
        leader = f"; the leader is {outcome.leader_id}" if outcome.leader_id else ""
        where = f" at {outcome.leader_address}" if outcome.leader_address else ""
        return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, detail=f"not master{leader}{where}")
    return PutResult(PutStatus.OS_PAGE_CACHE_BUSY, detail=_FULL_DETAIL)  # LEADER_PENDING_FULL


def dledger_broker_id(node_id: str, peers: Iterable[str]) -> int:
    """A DLedger follower's broker id as RocketMQ 4.9.8 derives it: the number after the self
    id's first character plus one (``n0`` -> 1; ``DLedgerCommitLog``'s id), else (an id
    without such a number) its place among ``peers`` plus one."""
    number = node_id[1:]
    if number.isascii() and number.isdigit() and len(number) < 10:
        return int(number) + 1
    return list(peers).index(node_id) + 1
