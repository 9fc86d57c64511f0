"""Real RocketMQ clients against hanet as real processes: npm ``ali-ons`` and PyPI
``rocketmq`` (the C++ client), driven by ``tests/interop`` (see ``interop_support``), talk to
``hanet namesrv`` and ``hanet master`` (and ``hanet slave``) subprocesses.

For each client: every send is SEND_OK; a group of two members shares the queues and loses
nothing; a restarted consumer goes on from its committed offsets; a refused delivery comes
back through ``%RETRY%<group>``; a delayed message waits for its level; after the master's
kill -9 the group consumes on from the slave and every SEND_OK message is consumed.

One name server and master serve the first five scenarios of both clients (each scenario has
its own topic, written to the master's ``config/topics.json`` before it starts: ali-ons, like
RocketMQ's own clients without ``TBW102``, sends only to topics the name server routes);
the failover scenario gets a cluster of its own. A consumer is a driver process stopped with
SIGTERM (the client commits its offsets and unregisters).
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Self

import pytest
import trio
from interop_support import (
    Driver,
    DriverOutput,
    Line,
    alions_command,
    cpp_command,
    run_driver,
    start_driver,
)

from hanet.client import BrokerClient, NameServerClient
from hanet.protocol import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from hanet.testing import HanetProcess, HanetProcesses, split_address

pytestmark = pytest.mark.slow

Command = Callable[..., list[str]]
BUILDERS: dict[str, Command] = {"alions": alions_command, "cpp": cpp_command}
CASES = ("produce", "group", "restart", "retry", "delay")
QUEUES = 4
BROKER_CONF = "\n".join(
    [
        "registerNameServerPeriod=1000",  # a slave learns its master's address quickly
        "slaveSyncInterval=500",  # a slave copies the master's offsets twice a second
        "flushConsumerOffsetInterval=1000",
        "",
    ]
)
DRIVER_SECONDS = 40.0


def topic_of(client: str, case: str) -> str:
    return f"Interop-{client}-{case}"


# --- hanet as processes ------------------------------------------------------------------


def write_topics(store: Path, topics: Iterable[str]) -> None:
    """The master's ``config/topics.json`` with ``topics`` (``QUEUES`` queues each)."""
    table = {topic: TopicConfig(topic, QUEUES, QUEUES) for topic in topics}
    wrapper = TopicConfigSerializeWrapper(table, DataVersion(int(time.time() * 1000), 1))
    (store / "config").mkdir(parents=True, exist_ok=True)
    (store / "config" / "topics.json").write_text(json.dumps(wrapper.to_json()))


class NamesrvCluster(HanetProcesses):
    """``hanet namesrv`` and brokers that register with it (``--namesrv`` added when they
    start), as ``Popen`` children (a module's cluster outlives one trio run), stopped with
    SIGTERM."""

    def __init__(self, root: Path, *namesrv_argv: str) -> None:
        super().__init__(root, close_signal=signal.SIGTERM)
        self.namesrv = self.add("namesrv", "namesrv", "--listen", "127.0.0.1:0", *namesrv_argv)
        self.brokers: list[HanetProcess] = []

    def add_broker(self, name: str, *argv: str) -> HanetProcess:
        broker = self.add(name, *argv)
        self.brokers.append(broker)
        return broker

    def start_all(self) -> Self:
        """The name server, then each broker; all killed if one does not start."""
        try:
            address = self.namesrv.start_blocking()["namesrv"]
            for broker in self.brokers:
                broker.argv += ("--namesrv", address)
                broker.start_blocking()
        except BaseException:
            self.close()
            raise
        return self

    @property
    def namesrv_address(self) -> str:
        address: str = self.namesrv.ready["namesrv"]
        return address

    def assert_no_traceback(self) -> None:
        for service in self.all:
            assert "Traceback" not in service.text(0), service.text(0)


class Cluster(NamesrvCluster):
    """``hanet namesrv``, ``hanet master`` and optionally ``hanet slave`` on any free ports,
    the master holding ``topics``; both brokers with ``--slave-read-enable``."""

    def __init__(
        self, root: Path, topics: Iterable[str], *, slave: bool = False, role: str = "ASYNC_MASTER"
    ) -> None:
        super().__init__(root)
        conf = root / "broker.conf"
        conf.write_text(BROKER_CONF)
        write_topics(root / "master", topics)
        common = ("--listen", "127.0.0.1:0", "--mapped-file-size", "4M", "--config", str(conf))
        reads = ("--slave-read-enable", *common)
        ha = ("--ha-listen", "127.0.0.1:0", "--role", role)
        master = ("--store", str(root / "master"))
        self.master = self.add_broker("master", "master", *master, *ha, *reads)
        self.slave: HanetProcess | None = None
        if slave:
            store = ("--store", str(root / "slave"), "--reconnect-interval", "0.2")
            self.slave = self.add_broker("slave", "slave", *store, *reads)

    def broker(self, service: HanetProcess | None = None) -> tuple[str, int]:
        return (service or self.master).address()

    def logs(self, tail: int = 4000) -> str:
        return super().logs(tail)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("interop")
    topics = [topic_of(client, case) for client in BUILDERS for case in CASES]
    topics.append(topic_of("alions", "no-keys"))
    cluster = Cluster(root, topics).start_all()
    try:
        yield cluster
    finally:
        cluster.close()
    cluster.assert_no_traceback()


@pytest.fixture(params=sorted(BUILDERS))
def client(request: pytest.FixtureRequest) -> str:
    """A client name; the test skips (with the reason) when that client cannot run here."""
    name: str = request.param
    BUILDERS[name]("produce", "127.0.0.1:1", "T")  # skips here when unavailable
    return name


class Clients:
    """Driver command lines of one client against one cluster."""

    def __init__(self, client: str, cluster: Cluster) -> None:
        self.client = client
        self.cluster = cluster

    def command(self, mode: str, topic: str, **options: Any) -> list[str]:
        return BUILDERS[self.client](mode, self.cluster.namesrv_address, topic, **options)

    async def produce(self, topic: str, count: int, prefix: str, **options: Any) -> list[Line]:
        """Sends ``count`` messages ``<prefix>-<i>``; asserts each is SEND_OK; their lines."""
        cmd = self.command("produce", topic, count=count, prefix=prefix, **options)
        out = await run_driver(cmd, timeout=DRIVER_SECONDS)
        sent = out.events("sent")
        assert out.returncode == 0, (out, out.stderr, self.cluster.logs())
        assert not out.events("send_error"), out
        assert [line["body"] for line in sent] == [f"{prefix}-{i}" for i in range(count)]
        assert {line["status"] for line in sent} == {"SEND_OK"}, sent
        assert out.summary["sent"] == count
        return sent

    def consumer(self, topic: str, group: str, **options: Any) -> list[str]:
        return self.command("consume", topic, group=group, timeout=120, **options)


def bodies(*outputs: Iterable[Line]) -> list[str]:
    """The bodies received successfully (``action`` ok), over every output, in order."""
    return [
        line["body"]
        for output in outputs
        for line in output
        if line.get("event") == "received" and line.get("action") == "ok"
    ]


async def until_received(
    drivers: Iterable[Driver], expected: Iterable[str], seconds: float = 20.0
) -> None:
    """Waits until every body of ``expected`` was received (ok) by one of ``drivers``."""
    drivers = list(drivers)
    missing = set(expected)
    with trio.move_on_after(seconds):
        while missing - set(bodies(*(d.lines for d in drivers))):
            for driver in drivers:
                if driver.returncode is not None:
                    raise AssertionError(f"a consumer exited: {driver.output()} {driver.stderr}")
            await trio.sleep(0.05)
        return
    got = set(bodies(*(d.lines for d in drivers)))
    raise AssertionError(
        f"not received within {seconds} s: {sorted(missing - got)}; "
        f"stderr: {[d.stderr[-1500:] for d in drivers]}"
    )


async def started(driver: Driver) -> None:
    [line] = await driver.wait_for("started", seconds=30)
    assert line["event"] == "started"


def clean_stop(output: DriverOutput) -> None:
    assert output.returncode == 0, (output, output.stderr)
    assert output.summary["stoppedBy"] == "SIGTERM"
    assert output.summary["closed"] is True, output.stderr


# --- the scenarios -----------------------------------------------------------------------


async def test_every_send_is_send_ok(client: str, shared: Cluster) -> None:
    clients = Clients(client, shared)
    topic = topic_of(client, "produce")
    sent = await clients.produce(topic, 40, "p")
    assert len({line["msgId"] for line in sent}) == 40
    offsets = Counter(line["queueOffset"] for line in sent)
    assert all(isinstance(o, int) and o >= 0 for o in offsets)
    async with BrokerClient.connect(*shared.broker()) as broker:
        ends = [await broker.max_offset(topic, q) for q in range(QUEUES)]
    assert sum(ends) == 40  # every message stored once, spread over the topic's queues
    if client == "alions":  # the C++ client's send result names no queue
        assert len({line["queueId"] for line in sent}) == QUEUES


async def test_the_alions_driver_sets_keys_unless_told_not_to(shared: Cluster) -> None:
    """The benches compare with RocketMQ's Java producer, which sends no KEYS: the ali-ons
    driver's ``--no-keys`` leaves them out (by default each body is its message's KEYS)."""
    clients = Clients("alions", shared)
    clients.command("produce", "T")  # skips here when ali-ons cannot run
    topic = topic_of("alions", "no-keys")
    await clients.produce(topic, 8, "with")
    await clients.produce(topic, 8, "without", no_keys=True)
    keys: dict[str, str | None] = {}
    async with BrokerClient.connect(*shared.broker()) as broker:
        for queue in range(QUEUES):
            for message in (await broker.pull(topic, queue, 0, 32)).messages:
                keys[message.body.decode()] = message.properties.get("KEYS")
    assert keys == {
        **{f"with-{i}": f"with-{i}" for i in range(8)},
        **{f"without-{i}": None for i in range(8)},
    }


async def test_the_cpp_client_sends_to_a_topic_no_name_server_knows_yet(shared: Cluster) -> None:
    """RocketMQ's own clients borrow TBW102's route for a topic without one and the broker
    creates the topic on the send (autoCreateTopicEnable), then registers it at once. (ali-ons
    looks up the topic's own route only: its topics must exist first, as with RocketMQ.)"""
    clients = Clients("cpp", shared)
    clients.command("produce", "T", count=1)  # skips here when the C++ client cannot run
    topic = "Interop-cpp-created-by-a-send"
    await clients.produce(topic, 5, "n")
    names = NameServerClient([split_address(shared.namesrv_address)])
    route = await names.route(topic)
    assert [(b.broker_name, b.write_queues) for b in route.brokers] == [("broker-a", QUEUES)]
    async with BrokerClient.connect(*shared.broker()) as broker:
        assert sum([await broker.max_offset(topic, q) for q in range(QUEUES)]) == 5


async def test_a_group_of_two_members_shares_the_queues_and_loses_nothing(
    client: str, shared: Cluster
) -> None:
    clients = Clients(client, shared)
    topic, group = topic_of(client, "group"), f"G-{client}-group"
    async with (
        start_driver(clients.consumer(topic, group, instance="m1")) as one,
        start_driver(clients.consumer(topic, group, instance="m2")) as two,
    ):
        await started(one)
        await started(two)
        async with BrokerClient.connect(*shared.broker()) as broker:
            with trio.fail_after(15):
                while len(await broker.consumer_list(group)) < 2:  # noqa: ASYNC110
                    await trio.sleep(0.05)
        await trio.sleep(1.0)  # the members rebalance on NOTIFY_CONSUMER_IDS_CHANGED
        sent = await clients.produce(topic, 60, "g")
        await until_received([one, two], [line["body"] for line in sent])
        first, second = await one.stop(), await two.stop()
    clean_stop(first)
    clean_stop(second)
    got_one, got_two = bodies(first), bodies(second)
    assert set(got_one) | set(got_two) == {line["body"] for line in sent}  # nothing lost
    assert got_one and got_two, "both members consumed"
    # at least once: a body twice only when two members held its queue during a rebalance
    assert len(got_one) == len(set(got_one)) and len(got_two) == len(set(got_two))


async def test_offsets_are_kept_across_a_consumer_restart(client: str, shared: Cluster) -> None:
    clients = Clients(client, shared)
    topic, group = topic_of(client, "restart"), f"G-{client}-restart"
    cmd = clients.consumer(topic, group, instance="r")
    async with start_driver(cmd) as consumer:
        await started(consumer)
        before = await clients.produce(topic, 20, "a")
        await until_received([consumer], [line["body"] for line in before])
        first = await consumer.stop()
    clean_stop(first)
    async with BrokerClient.connect(*shared.broker()) as broker:
        committed = [await broker.query_offset(group, topic, q) for q in range(QUEUES)]
        ends = [await broker.max_offset(topic, q) for q in range(QUEUES)]
    assert committed == ends, "a clean stop commits every consumed offset"
    after = await clients.produce(topic, 20, "b")
    async with start_driver(cmd) as consumer:
        await started(consumer)
        await until_received([consumer], [line["body"] for line in after])
        await trio.sleep(0.5)  # anything else it would deliver
        second = await consumer.stop()
    clean_stop(second)
    assert sorted(bodies(first)) == sorted(line["body"] for line in before)
    again = bodies(second)
    assert sorted(again) == sorted(line["body"] for line in after), "none again, none skipped"


async def test_a_failed_consume_comes_back_as_a_retry(client: str, shared: Cluster) -> None:
    clients = Clients(client, shared)
    topic, group = topic_of(client, "retry"), f"G-{client}-retry"
    async with start_driver(clients.consumer(topic, group, fail_first=True)) as consumer:
        await started(consumer)
        sent = await clients.produce(topic, 2, "r")
        expected = [line["body"] for line in sent]
        with trio.fail_after(10):
            while len(consumer.output().events("received")) < 2:  # noqa: ASYNC110
                await trio.sleep(0.05)
        refused_at = trio.current_time()
        # the client sends the refused message back (CONSUMER_SEND_MSG_BACK, delay level 0):
        # the broker delays it by level 3 + reconsume times (10 s), then puts it in %RETRY%G
        await until_received([consumer], expected, seconds=30)
        waited = trio.current_time() - refused_at
        output = await consumer.stop()
    clean_stop(output)
    assert 9.0 <= waited < 25, waited
    received = output.events("received")
    for body in expected:
        deliveries = [r for r in received if r["body"] == body]
        assert [r["action"] for r in deliveries] == ["retry", "ok"], deliveries
        assert deliveries[0]["reconsumeTimes"] == 0
        assert deliveries[1]["reconsumeTimes"] >= 1
    async with BrokerClient.connect(*shared.broker()) as broker:
        assert await broker.max_offset(f"%RETRY%{group}", 0) == 2  # both went through it
        assert await broker.max_offset("SCHEDULE_TOPIC_XXXX", 2) >= 2  # level 3's queue


async def test_a_delayed_message_waits_for_its_level(client: str, shared: Cluster) -> None:
    clients = Clients(client, shared)
    topic, group = topic_of(client, "delay"), f"G-{client}-delay"
    async with start_driver(clients.consumer(topic, group)) as consumer:
        await started(consumer)
        await clients.produce(topic, 1, "now")
        await until_received([consumer], ["now-0"])
        await clients.produce(topic, 1, "later", delay_level=2)  # level 2: 5 s
        sent_at = trio.current_time()
        await until_received([consumer], ["later-0"], seconds=20)
        waited = trio.current_time() - sent_at
        output = await consumer.stop()
    clean_stop(output)
    assert 4.5 <= waited < 15, waited
    [later] = [line for line in output.events("received") if line["body"] == "later-0"]
    assert later["topic"] == topic


async def test_after_the_masters_kill_9_the_group_consumes_on_from_the_slave(
    client: str, tmp_path: Path
) -> None:
    """A SYNC_MASTER (a message that got SEND_OK is on the slave too) and its slave. A
    consumer consumes a first batch, then lags (SIGSTOP) while a producer sends; the master is
    killed with kill -9 in the middle of the sends. Every message that got SEND_OK is
    consumed, the group's offsets committed on the slave. The ali-ons consumer goes on
    (SIGCONT) and finds the slave at its next route poll (every second here); the C++ client
    reads its routes every 30 s and cannot be told otherwise, so its consumer is started again
    after the kill and starts on the slave."""
    topic, group = f"Interop-{client}-failover", f"G-{client}-failover"
    cluster = Cluster(tmp_path, [topic], slave=True, role="SYNC_MASTER").start_all()
    poll: dict[str, Any] = {"poll_ms": 1000} if client == "alions" else {}
    try:
        assert cluster.slave is not None
        clients = Clients(client, cluster)
        async with BrokerClient.connect(*cluster.broker()) as master:
            with trio.fail_after(15):  # a SYNC_MASTER's sends need the slave
                while not (await master.status()).slaves:  # noqa: ASYNC110
                    await trio.sleep(0.05)
        consume = clients.consumer(topic, group, instance="f", **poll)
        produce = clients.command("produce", topic, count=5000, prefix="b", timeout=60, **poll)
        async with start_driver(consume) as consumer:
            await started(consumer)
            before = [line["body"] for line in await clients.produce(topic, 20, "a")]
            await until_received([consumer], before)
            consumer.process.send_signal(signal.SIGSTOP)
            try:
                async with start_driver(produce) as producer:
                    await producer.wait_for("sent", count=100, seconds=30)
                    await cluster.master.kill()
                    await trio.sleep(0.5)  # the sends fail from now on
                    sends = await producer.stop(grace=5)
            finally:
                consumer.process.send_signal(signal.SIGCONT)
            during = [line["body"] for line in sends.events("sent") if line["status"] == "SEND_OK"]
            assert len(during) >= 100, sends
            if client == "alions":
                await until_received([consumer], during, seconds=30)
            first = await consumer.stop(grace=8)
        second: list[Line] = []
        if client != "alions":
            async with start_driver(consume) as consumer:
                await started(consumer)
                await until_received([consumer], set(during) - set(bodies(first)), seconds=30)
                second = await consumer.stop(grace=8)
        async with BrokerClient.connect(*cluster.broker(cluster.slave)) as slave:
            status = await slave.status()
            committed = [await slave.query_offset(group, topic, q) for q in range(QUEUES)]
    finally:
        cluster.close()
    logs = cluster.logs()
    got = set(bodies(first, second))
    assert set(before) | set(during) <= got, (sorted(set(during) - got), logs)
    # the group's progress is on the slave: past every message that got SEND_OK
    assert sum(offset or 0 for offset in committed) >= len(before) + len(during), committed
    assert status.master is not None and not status.master.connected
    assert "Traceback" not in logs, logs
