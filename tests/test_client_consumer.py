"""The pull consumer against fake brokers and a fake name server (virtual time): where it
starts, following the pull suggestion, failing over to the slave and back, committing to the
slave and back to the master, at least once across a lost connection."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from hanet.client import (
    MAX_ROUTE_QUEUES,
    BrokerConnectionError,
    BrokerLink,
    BrokerProtocolError,
    BrokerRequestError,
    ConsumedMessage,
    Consumer,
    ConsumerConfig,
    ConsumerSettings,
    PullResult,
    PullStatus,
    RouteBroker,
    ServerRequestHandler,
    TopicRoute,
)
from hanet.namesrv import MAX_QUEUES
from hanet.protocol import RemotingCommand, RequestCode, ResponseCode, decode_command
from hanet.store import MessageRecord

FIXTURES = Path(__file__).parent / "fixtures" / "remoting" / "java"
TOPIC = "T"
GROUP = "G"
MASTER = "10.0.0.1:10911"
SLAVE = "10.0.0.2:10911"

Queues = dict[int, list[MessageRecord]]


@attrs.define(eq=False)
class FakeBroker:
    """One member: its queues (shared with the other member when fully replicated), its
    offset table, what it was asked."""

    address: str
    queues: Queues
    suggest: int = 0
    alive: bool = True
    epoch: int = 0
    connects: int = 0
    offsets: dict[tuple[str, str, int], int] = attrs.field(factory=dict)
    pulls: list[tuple[int, int]] = attrs.field(factory=list)
    commits: list[tuple[int, int]] = attrs.field(factory=list)
    query_error: Exception | None = None
    """Raised (as an answer) by every offset query while set."""
    pull_error: Exception | None = None
    """Raised (as an answer) by every pull while set."""
    commit_error: Exception | None = None
    """Raised (as an answer) by every commit while set."""
    garbles: bool = False
    """Answers pulls with something malformed while set: the connection closes."""

    def kill(self) -> None:
        self.alive = False
        self.epoch += 1

    def check(self, epoch: int) -> None:
        if not self.alive or epoch != self.epoch:
            raise BrokerConnectionError(f"connection closed: {self.address} is gone")


@attrs.define(eq=False)
class FakeLink:
    broker: FakeBroker
    epoch: int
    closed_by: BrokerProtocolError | None = None

    @property
    def is_connected(self) -> bool:
        return self.closed_by is None

    async def pull(
        self, topic: str, queue_id: int, offset: int = 0, max_messages: int = 32, *, group: str
    ) -> PullResult:
        await trio.sleep(0.001)
        if self.closed_by is not None:
            raise self.closed_by  # what BrokerClient does on a connection a bad answer closed
        self.broker.check(self.epoch)
        if self.broker.garbles:
            self.closed_by = BrokerProtocolError("malformed answer from the broker")
            raise self.closed_by
        if self.broker.pull_error is not None:
            raise self.broker.pull_error
        self.broker.pulls.append((queue_id, offset))
        records = self.broker.queues.get(queue_id)
        suggest = self.broker.suggest
        if records is None:
            return PullResult(PullStatus.TOPIC_NOT_EXIST, 0, 0, 0, (), suggest)
        high = len(records)
        if high == 0:
            return PullResult(PullStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0, (), suggest)
        if offset == high:
            return PullResult(PullStatus.OFFSET_OVERFLOW_ONE, offset, 0, high, (), suggest)
        if offset > high:
            return PullResult(PullStatus.OFFSET_OVERFLOW_BADLY, high, 0, high, (), suggest)
        found = tuple(records[offset : offset + max_messages])
        return PullResult(PullStatus.FOUND, offset + len(found), 0, high, found, suggest)

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        await trio.sleep(0.001)
        self.broker.check(self.epoch)
        if self.broker.commit_error is not None:
            raise self.broker.commit_error
        self.broker.offsets[(group, topic, queue_id)] = offset
        self.broker.commits.append((queue_id, offset))

    async def query_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        await trio.sleep(0.001)
        self.broker.check(self.epoch)
        if self.broker.query_error is not None:
            raise self.broker.query_error
        return self.broker.offsets.get((group, topic, queue_id))


@attrs.define(eq=False)
class FakeCluster:
    """A broker name ``broker-a`` (a master and a slave) behind a fake name server."""

    queues: int = 2
    brokers: dict[str, FakeBroker] = attrs.field(factory=dict)
    route: TopicRoute | None = None
    lookups: int = 0

    def __attrs_post_init__(self) -> None:
        shared: Queues = {q: [] for q in range(self.queues)}
        self.brokers[MASTER] = FakeBroker(MASTER, shared)
        self.brokers[SLAVE] = FakeBroker(SLAVE, shared)
        self.route = TopicRoute(
            TOPIC, (RouteBroker("broker-a", self.queues, ((0, MASTER), (1, SLAVE))),)
        )

    @property
    def master(self) -> FakeBroker:
        return self.brokers[MASTER]

    @property
    def slave(self) -> FakeBroker:
        return self.brokers[SLAVE]

    def produce(self, count: int, start: int = 0) -> list[bytes]:
        """Append ``count`` numbered bodies round robin over the queues."""
        bodies = []
        for i in range(start, start + count):
            queue = self.master.queues[i % self.queues]
            body = b"m%d" % i
            queue.append(
                MessageRecord.create(
                    topic=TOPIC, body=body, queue_id=i % self.queues, queue_offset=len(queue)
                )
            )
            bodies.append(body)
        return bodies

    async def route_of(self, topic: str) -> TopicRoute:
        await trio.sleep(0.001)
        self.lookups += 1
        if self.route is None:
            raise BrokerRequestError(ResponseCode.TOPIC_NOT_EXIST, f"no route for {topic}")
        return self.route

    def connector(
        self, address: str, *, on_request: ServerRequestHandler | None = None
    ) -> AbstractAsyncContextManager[BrokerLink]:
        @asynccontextmanager
        async def connect() -> AsyncIterator[BrokerLink]:
            await trio.sleep(0.001)
            broker = self.brokers[address]
            if not broker.alive:
                raise BrokerConnectionError(f"cannot connect to {address}: refused")
            broker.connects += 1
            yield FakeLink(broker, broker.epoch)

        return connect()


class _Names:
    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster

    async def route(self, topic: str) -> TopicRoute:
        return await self.cluster.route_of(topic)


def open_consumer(
    cluster: FakeCluster, group: str = GROUP, **options: Any
) -> AbstractAsyncContextManager[Consumer]:
    options.setdefault("from_beginning", True)
    return Consumer.open(_Names(cluster), group, TOPIC, connector=cluster.connector, **options)


async def take(consumer: Consumer, count: int) -> list[ConsumedMessage]:
    out: list[ConsumedMessage] = []
    with trio.fail_after(60):
        async for message in consumer:
            out.append(message)
            if len(out) == count:
                break
    return out


def bodies(messages: list[ConsumedMessage]) -> list[bytes]:
    return sorted(m.body for m in messages)


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster()


async def test_consumes_every_queue_and_commits_to_the_master_at_exit(
    autojump_clock: trio.testing.MockClock, cluster: FakeCluster
) -> None:
    produced = cluster.produce(10)
    async with open_consumer(cluster) as consumer:
        got = await take(consumer, 10)
    assert bodies(got) == sorted(produced)
    assert {m.broker_name for m in got} == {"broker-a"}
    assert {m.broker_id for m in got} == {0}
    assert cluster.master.offsets == {(GROUP, TOPIC, 0): 5, (GROUP, TOPIC, 1): 5}
    assert consumer.stats.delivered == 10
    assert consumer.stats.slave_pulls == 0

    # The same group resumes from its commits: only what is new.
    more = cluster.produce(4, start=10)
    async with open_consumer(cluster) as consumer:
        again = await take(consumer, 4)
    assert bodies(again) == sorted(more)


async def test_commits_every_interval_while_consuming(
    autojump_clock: trio.testing.MockClock, cluster: FakeCluster
) -> None:
    cluster.produce(6)
    async with open_consumer(cluster, commit_interval=5.0) as consumer:
        await take(consumer, 6)
        await trio.sleep(5.5)
        # Taken and acknowledged up to the one before the last; the last counts at exit.
        assert sum(cluster.master.offsets.values()) == 5
    assert sum(cluster.master.offsets.values()) == 6


async def test_a_message_is_consumed_only_once_the_next_is_asked_for(
    autojump_clock: trio.testing.MockClock, cluster: FakeCluster
) -> None:
    produced = cluster.produce(6)
    with pytest.raises(RuntimeError, match="crash"):
        async with open_consumer(cluster) as consumer:
            got = await take(consumer, 4)
            raise RuntimeError("crash while handling the fourth message")
    # The fourth was not acknowledged: it is delivered again (at least once), nothing lost.
    async with open_consumer(cluster) as consumer:
        rest = await take(consumer, 3)
    assert got[-1].body in {m.body for m in rest}
    assert set(bodies(got)) | set(bodies(rest)) == set(produced)


async def test_without_a_commit_a_new_group_starts_at_the_queues_end(
    autojump_clock: trio.testing.MockClock, cluster: FakeCluster
) -> None:
    cluster.produce(6)
    async with open_consumer(cluster, from_beginning=False) as consumer:
        await trio.sleep(1)
        assert consumer.stats.delivered == 0
        new = cluster.produce(4, start=6)
        got = await take(consumer, 4)
    assert bodies(got) == sorted(new)
    assert cluster.master.offsets == {(GROUP, TOPIC, 0): 5, (GROUP, TOPIC, 1): 5}


async def test_the_start_at_the_end_is_committed_before_anything_is_consumed(
    autojump_clock: trio.testing.MockClock, cluster: FakeCluster
) -> None:
    cluster.produce(6)
    async with open_consumer(cluster, from_beginning=False) as consumer:
        await trio.sleep(1)
    assert consumer.stats.delivered == 0
    assert cluster.master.offsets == {(GROUP, TOPIC, 0): 3, (GROUP, TOPIC, 1): 3}
    # Stored while no consumer ran: the restarted group resumes where it started, not at
    # the newer end.
    missed = cluster.produce(2, start=6)
    async with open_consumer(cluster, from_beginning=False) as consumer:
        got = await take(consumer, 2)
    assert bodies(got) == sorted(missed)


async def test_follows_the_suggested_broker_id(autojump_clock: trio.testing.MockClock) -> None:
    cluster = FakeCluster(queues=1)
    cluster.produce(100)
    cluster.master.suggest = 1  # "you are behind: read from slave 1"
    async with open_consumer(cluster, pull_batch=10) as consumer:
        await take(consumer, 30)
        assert cluster.master.pulls[:1] == [(0, 0)]
        assert cluster.slave.pulls[:1] == [(0, 10)]
        # The slave suggests the master: the next pull goes back there.
        cluster.slave.suggest = 0
        cluster.master.suggest = 0
        pulls = len(cluster.master.pulls)
        await take(consumer, 50)
        assert len(cluster.master.pulls) > pulls
    assert consumer.stats.slave_pulls >= 1
    assert consumer.stats.failovers == 0
    assert not cluster.slave.commits  # commits still go to the master


async def test_fails_over_to_the_slave_when_the_master_dies_and_comes_back(
    autojump_clock: trio.testing.MockClock, cluster: FakeCluster
) -> None:
    produced = cluster.produce(20)
    async with open_consumer(cluster, commit_interval=2.0, retry_interval=5.0) as consumer:
        got = await take(consumer, 10)
        await trio.sleep(2.5)  # one commit to the master
        assert cluster.master.commits

        cluster.master.kill()
        produced += cluster.produce(20, start=20)  # replicated: the slave has them too
        got += await take(consumer, 30)
        assert bodies(got) == sorted(produced)
        assert consumer.stats.slave_pulls > 0
        assert consumer.stats.failovers >= 1

        # Commits go to the slave while the master is down.
        await trio.sleep(2.5)
        # 40 taken, the last not yet acknowledged (it is when the next is asked for).
        assert sum(cluster.slave.offsets.values()) == 39
        assert consumer.stats.slave_commits > 0

        # The master returns: after the retry interval, pulls and commits go to it again
        # (the offsets the slave took are committed to the master as well).
        cluster.master.alive = True
        master_pulls = len(cluster.master.pulls)
        produced += cluster.produce(4, start=40)
        got += await take(consumer, 4)
        await trio.sleep(12)
        assert len(cluster.master.pulls) > master_pulls
        assert sum(cluster.master.offsets.values()) == 43
        slave_pulls = consumer.stats.slave_pulls
        await trio.sleep(5)
        assert consumer.stats.slave_pulls == slave_pulls  # back on the master for good
    assert bodies(got) == sorted(produced)
    assert cluster.master.offsets == {(GROUP, TOPIC, 0): 22, (GROUP, TOPIC, 1): 22}


async def test_starts_from_the_offset_the_slave_holds_when_the_master_is_down(
    autojump_clock: trio.testing.MockClock, cluster: FakeCluster
) -> None:
    produced = cluster.produce(10)
    cluster.slave.offsets = {(GROUP, TOPIC, 0): 3, (GROUP, TOPIC, 1): 4}
    cluster.master.kill()
    async with open_consumer(cluster) as consumer:
        got = await take(consumer, 3)
    assert bodies(got) == sorted([produced[6], produced[8], produced[9]])
    assert {m.broker_id for m in got} == {1}
    assert cluster.slave.offsets == {(GROUP, TOPIC, 0): 5, (GROUP, TOPIC, 1): 5}


async def test_at_least_once_across_a_lost_connection(
    autojump_clock: trio.testing.MockClock, cluster: FakeCluster
) -> None:
    produced: list[bytes] = []
    got: list[ConsumedMessage] = []

    async def produce() -> None:
        for round_ in range(20):
            produced.extend(cluster.produce(5, start=round_ * 5))
            if round_ in (5, 12):
                cluster.master.kill()  # every connection to it drops; it restarts at once
                cluster.master.alive = True
            await trio.sleep(0.3)

    async with open_consumer(cluster, retry_interval=1.0) as consumer, trio.open_nursery() as n:
        n.start_soon(produce)
        got = await take(consumer, 100)
    assert set(bodies(got)) == set(produced)
    assert cluster.master.connects >= 3


async def test_a_slave_behind_never_makes_it_skip_or_rewind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = FakeCluster(queues=1)
    produced = cluster.produce(10)
    lagging: Queues = {0: list(cluster.master.queues[0][:4])}
    cluster.slave.queues = lagging
    async with open_consumer(cluster) as consumer:
        got = await take(consumer, 10)
        cluster.master.kill()
        await trio.sleep(3)  # the slave answers OFFSET_OVERFLOW_BADLY: the offset stays
        assert consumer.positions()[("broker-a", 0)].pull_offset == 10
        produced += cluster.produce(2, start=10)
        lagging[0] = list(cluster.master.queues[0])  # caught up
        got += await take(consumer, 2)
    assert sorted(m.body for m in got) == sorted(produced)  # no duplicate, none lost


async def test_waits_for_the_topic_and_picks_up_new_broker_names(
    autojump_clock: trio.testing.MockClock, cluster: FakeCluster
) -> None:
    route = cluster.route
    assert route is not None
    cluster.route = None  # no broker holds the topic yet
    async with open_consumer(cluster, route_interval=30.0) as consumer:
        await trio.sleep(3)
        assert cluster.lookups >= 3  # asked every second until it exists
        cluster.route = route
        produced = cluster.produce(4)
        got = await take(consumer, 4)
        assert bodies(got) == sorted(produced)

        other = FakeBroker("10.0.0.3:10911", {0: []})
        cluster.brokers[other.address] = other
        other.queues[0].append(MessageRecord.create(topic=TOPIC, body=b"b0", queue_id=0))
        cluster.route = TopicRoute(
            TOPIC, (*route.brokers, RouteBroker("broker-b", 1, ((0, other.address),)))
        )
        (message,) = await take(consumer, 1)  # within the route interval
    assert (message.broker_name, message.body) == ("broker-b", b"b0")
    assert other.offsets == {(GROUP, TOPIC, 0): 1}


async def test_a_cancelled_consumer_still_commits_what_was_consumed(
    autojump_clock: trio.testing.MockClock, cluster: FakeCluster
) -> None:
    cluster.produce(10)
    with trio.CancelScope() as scope:
        async with open_consumer(cluster, commit_interval=60.0) as consumer:
            await take(consumer, 5)
            scope.cancel()  # SIGTERM in ``hanet consume``
            await trio.sleep(1)
    # Four acknowledged (the fifth was being handled when the cancellation came).
    assert sum(cluster.master.offsets.values()) == 4


@pytest.mark.parametrize(
    "error",
    [
        BrokerRequestError(ResponseCode.SYSTEM_ERROR, "offset table unavailable"),
        BrokerProtocolError("malformed answer from the broker"),
    ],
)
async def test_an_error_answer_to_the_offset_query_asks_the_next_member(
    autojump_clock: trio.testing.MockClock, cluster: FakeCluster, error: Exception
) -> None:
    produced = cluster.produce(10)
    cluster.slave.offsets = {(GROUP, TOPIC, 0): 3, (GROUP, TOPIC, 1): 4}
    cluster.master.query_error = error
    async with open_consumer(cluster) as consumer:
        got = await take(consumer, 3)
    assert bodies(got) == sorted([produced[6], produced[8], produced[9]])


async def test_a_queue_whose_members_all_answer_error_waits_for_them(
    autojump_clock: trio.testing.MockClock, cluster: FakeCluster
) -> None:
    produced = cluster.produce(4)
    cluster.master.query_error = BrokerRequestError(ResponseCode.SYSTEM_ERROR, "not yet")
    cluster.slave.query_error = cluster.master.query_error
    async with open_consumer(cluster) as consumer:
        await trio.sleep(2)
        assert consumer.stats.delivered == 0
        cluster.master.query_error = cluster.slave.query_error = None
        got = await take(consumer, 4)
    assert bodies(got) == sorted(produced)


async def test_a_commit_the_master_answers_with_an_error_goes_to_the_slave(
    autojump_clock: trio.testing.MockClock, cluster: FakeCluster
) -> None:
    cluster.produce(4)
    cluster.master.commit_error = BrokerRequestError(ResponseCode.SYSTEM_ERROR, "disk full")
    async with open_consumer(cluster) as consumer:
        await take(consumer, 4)
    assert cluster.slave.offsets == {(GROUP, TOPIC, 0): 2, (GROUP, TOPIC, 1): 2}
    assert consumer.stats.slave_commits == 2 and consumer.stats.failovers >= 2
    assert consumer.positions()[("broker-a", 0)].committed_to == 1  # the master again later


async def test_a_pull_the_master_answers_with_an_error_waits_for_the_master(
    autojump_clock: trio.testing.MockClock, cluster: FakeCluster
) -> None:
    produced = cluster.produce(4)
    cluster.master.pull_error = BrokerRequestError(ResponseCode.SYSTEM_ERROR, "busy")
    async with open_consumer(cluster) as consumer:
        await trio.sleep(2)
        # An error answer is not a lost member: the slave is not asked instead.
        assert consumer.stats.delivered == 0 and cluster.slave.pulls == []
        cluster.master.pull_error = None
        got = await take(consumer, 4)
    assert bodies(got) == sorted(produced)
    assert {m.broker_id for m in got} == {0}


async def test_a_connection_closed_by_a_malformed_answer_fails_over_and_reconnects(
    autojump_clock: trio.testing.MockClock, cluster: FakeCluster
) -> None:
    produced = cluster.produce(10)
    async with open_consumer(cluster, retry_interval=2.0) as consumer:
        got = await take(consumer, 10)
        assert cluster.master.connects == 1
        cluster.master.garbles = True
        produced += cluster.produce(10, start=10)
        more = await take(consumer, 10)
        assert {m.broker_id for m in more} == {1}  # the slave took over
        cluster.master.garbles = False
        produced += cluster.produce(4, start=20)
        more += await take(consumer, 4)
        await trio.sleep(5)
        assert cluster.master.connects >= 2  # a new connection, not the closed one
        produced += cluster.produce(4, start=24)
        last = await take(consumer, 4)
        assert {m.broker_id for m in last} == {0}
    assert set(bodies(got + more + last)) == set(produced)


async def test_a_route_naming_too_many_queues_is_taken_up_to_the_bound(
    autojump_clock: trio.testing.MockClock, cluster: FakeCluster
) -> None:
    assert MAX_ROUTE_QUEUES == MAX_QUEUES  # the name server's bound
    produced = cluster.produce(4)
    assert cluster.route is not None
    (broker,) = cluster.route.brokers
    cluster.route = TopicRoute(TOPIC, (attrs.evolve(broker, queues=2**31 - 1),))
    async with open_consumer(cluster) as consumer:
        got = await take(consumer, 4)
        assert consumer.route is not None
        assert consumer.route.brokers[0].queues == MAX_ROUTE_QUEUES
        assert len(consumer.positions()) == MAX_ROUTE_QUEUES
    assert bodies(got) == sorted(produced)


@attrs.define(eq=False)
class MemberLink(FakeLink):
    """A link of a broker serving consumer groups: the members are ``group``."""

    group: list[str] = attrs.field(factory=list)
    lists: list[float] = attrs.field(factory=list)
    versions: set[int | None] = attrs.field(factory=set)

    async def consumer_heartbeat(
        self,
        group: str,
        client_id: str,
        topics: Sequence[str] = (),
        *,
        from_beginning: bool,
        sub_version: int | None = None,
    ) -> None:
        self.versions.add(sub_version)
        await trio.sleep(0.001)
        if client_id not in self.group:
            self.group.append(client_id)

    async def unregister_consumer(self, group: str, client_id: str) -> None:
        await trio.sleep(0.001)

    async def consumer_list(self, group: str) -> tuple[str, ...]:
        await trio.sleep(0.001)
        self.lists.append(trio.current_time())
        return tuple(sorted(self.group))


async def test_a_rebalance_the_heartbeat_loop_starts_reuses_its_member_list(
    autojump_clock: trio.testing.MockClock, cluster: FakeCluster
) -> None:
    group: list[str] = []
    lists: list[float] = []

    @asynccontextmanager
    async def connect(
        address: str, *, on_request: ServerRequestHandler | None = None
    ) -> AsyncIterator[BrokerLink]:
        await trio.sleep(0.001)
        broker = cluster.brokers[address]
        yield MemberLink(broker, broker.epoch, group=group, lists=lists)

    async with Consumer.open(
        _Names(cluster),
        GROUP,
        TOPIC,
        connector=connect,
        client_id="c1",
        heartbeat_interval=10.0,
        rebalance_interval=1000.0,
    ) as consumer:
        await trio.sleep(1)
        assert consumer.assigned == [("broker-a", 0), ("broker-a", 1)]
        assert len(lists) == 1  # the first rebalance
        group.append("c2")
        await trio.sleep(10)  # one heartbeat round: it sees c2 and rebalances
        assert consumer.members == ("c1", "c2")
        assert consumer.assigned == [("broker-a", 0)]
        assert len(lists) == 2  # the rebalance took the heartbeat round's list


async def test_only_the_queues_held_have_a_state(
    autojump_clock: trio.testing.MockClock, cluster: FakeCluster
) -> None:
    group = ["c0"]  # another member holds the first half

    @asynccontextmanager
    async def connect(
        address: str, *, on_request: ServerRequestHandler | None = None
    ) -> AsyncIterator[BrokerLink]:
        await trio.sleep(0.001)
        broker = cluster.brokers[address]
        yield MemberLink(broker, broker.epoch, group=group)

    options: dict[str, Any] = {"connector": connect, "client_id": "c1"}
    async with Consumer.open(_Names(cluster), GROUP, TOPIC, **options) as consumer:
        await trio.sleep(1)
        assert consumer.assigned == [("broker-a", 1)]
        assert list(consumer.positions()) == [("broker-a", 1)]


async def test_a_notify_consumer_ids_changed_rebalances_at_once(
    autojump_clock: trio.testing.MockClock, cluster: FakeCluster
) -> None:
    """The broker's oneway NOTIFY_CONSUMER_IDS_CHANGED (the captured 4.9.8 frame) makes the
    consumer rebalance at once: no heartbeat round, no 20 s rebalance interval."""
    group: list[str] = []
    lists: list[float] = []
    handlers: list[ServerRequestHandler] = []
    links: list[MemberLink] = []

    @asynccontextmanager
    async def connect(
        address: str, *, on_request: ServerRequestHandler | None = None
    ) -> AsyncIterator[BrokerLink]:
        await trio.sleep(0.001)
        assert on_request is not None
        handlers.append(on_request)
        broker = cluster.brokers[address]
        link = MemberLink(broker, broker.epoch, group=group, lists=lists)
        links.append(link)
        yield link

    captured = FIXTURES / "02-broker-produce-consume__NOTIFY_CONSUMER_IDS_CHANGED__oneway.bin"
    notify = decode_command(captured.read_bytes()[4:])
    assert notify.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and notify.is_oneway
    notify = RemotingCommand.request(
        notify.code, {"consumerGroup": GROUP}, oneway=True, opaque=notify.opaque
    )
    async with Consumer.open(
        _Names(cluster),
        GROUP,
        TOPIC,
        connector=connect,
        client_id="c1",
        heartbeat_interval=1000.0,
        rebalance_interval=1000.0,
        poll_interval=1000.0,
    ) as consumer:
        await trio.sleep(1)
        assert consumer.assigned == [("broker-a", 0), ("broker-a", 1)]
        group.append("c2")
        # Another group's notice changes nothing; ours rebalances within a few ms.
        other = RemotingCommand.request(notify.code, {"consumerGroup": "other"}, oneway=True)
        assert handlers[0](other) is None
        await trio.sleep(1)
        assert consumer.assigned == [("broker-a", 0), ("broker-a", 1)]
        before = trio.current_time()
        assert handlers[0](notify) is None  # oneway: no answer
        await trio.sleep(0.1)
        assert consumer.assigned == [("broker-a", 0)]
        assert lists[-1] - before < 0.1
        assert consumer.notifications == 1 and consumer.members == ("c1", "c2")
        # Any other request from the broker is answered REQUEST_CODE_NOT_SUPPORTED.
        asked = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, {}, opaque=7)
        answer = handlers[0](asked)
        assert answer is not None and answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    # Every heartbeat named the same subscription version (as RocketMQ's clients do).
    versions = set().union(*(link.versions for link in links))
    assert len(versions) == 1 and None not in versions


# -- the settings ---------------------------------------------------------------------------


def test_every_setting_is_a_keyword_of_open() -> None:
    assert set(ConsumerSettings.__annotations__) == set(attrs.fields_dict(ConsumerConfig))


@pytest.mark.parametrize(
    ("setting", "value"),
    [("pull_batch", 0), ("buffer", -1), ("heartbeat_interval", 0.0), ("commit_interval", -1.0)],
)
def test_a_setting_out_of_range_is_refused_by_name(setting: str, value: float) -> None:
    with pytest.raises(ValueError, match=setting):
        settings: dict[str, Any] = {setting: value}
        ConsumerConfig(**settings)


async def test_keywords_override_the_config_given(
    autojump_clock: trio.testing.MockClock, cluster: FakeCluster
) -> None:
    config = ConsumerConfig(pull_batch=2, client_id="me", from_beginning=False)
    produced = cluster.produce(8)
    async with Consumer.open(
        _Names(cluster),
        GROUP,
        TOPIC,
        config=config,
        connector=cluster.connector,
        from_beginning=True,
    ) as consumer:
        assert consumer.config == attrs.evolve(config, from_beginning=True)
        assert consumer.client_id == "me"
        got = await take(consumer, 8)
    assert bodies(got) == sorted(produced)
    assert {offset for _queue, offset in cluster.master.pulls} >= {0, 2}  # batches of two
    with pytest.raises(ValueError, match="pull_batch"):
        async with Consumer.open(_Names(cluster), GROUP, TOPIC, pull_batch=0):
            pass


def test_the_old_connector_name_still_imports() -> None:
    from hanet.client import BrokerConnector, Connector

    assert Connector is BrokerConnector
