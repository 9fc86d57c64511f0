"""The broker in a cluster: requests it does not serve, the pull suggestion, metadata sync and
registration with name servers (in-process; a fake name server where one is needed)."""

from __future__ import annotations

import json
import logging
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from broker_support import (
    commit,
    config,
    connect,
    fmt,
    name_server,
    pull_request,
    put,
    query,
    running,
    send,
    status,
)

from hanet.boot import serve_on
from hanet.broker import (
    OFFSETS_FILE,
    TOPICS_FILE,
    Broker,
    ConsumerOffsets,
    DLedgerBrokerService,
    GetMessageStatus,
    PullResult,
    SlaveSync,
    TopicTable,
    serve_pull,
    suggest_broker_id,
)
from hanet.client import RemotingConnection
from hanet.dledger import (
    DLedgerNode,
    NodeConfig,
    RaftConfig,
)
from hanet.errors import ConfigError
from hanet.ha import BrokerConfig, BrokerRole
from hanet.protocol import (
    MASTER_ID,
    BrokerRegistration,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    TopicConfigSerializeWrapper,
)
from hanet.store import PutStatus
from hanet.testing import MemoryNetwork, wait_until

REGISTRATION = BrokerRegistration("C", "b", 0, "ASYNC_MASTER", "127.0.0.1:1")


# -- requests a broker port does not serve ---------------------------------------------------


async def test_a_name_server_request_to_a_broker_is_not_supported(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (_, addresses), connect(addresses.broker) as c:
        answer = await c.invoke(REGISTRATION.request())
        assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert "request type 103 not supported" in str(answer.remark)
        route = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
        assert (await c.invoke(route)).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert c.is_connected  # the connection stays open
        assert (await status(c)).role == "ASYNC_MASTER"


async def _dledger_leader(
    tmp_path: Path, nursery: trio.Nursery, **kwargs: Any
) -> tuple[DLedgerNode, DLedgerBrokerService, int]:
    raft = RaftConfig(election_timeout=0.3, heartbeat_interval=0.05, retransmit_timeout=0.15)
    node_config = NodeConfig(
        group="g",
        node_id="solo",
        peers={"solo": "x:0"},
        store_dir=tmp_path,
        raft=raft,
        data_file_size=1 << 20,
        index_file_size=64 * 1024,
        mapped_file_size=1 << 20,
    )
    node = DLedgerNode(node_config, connector=MemoryNetwork().connector_for("solo"), listen=False)
    await nursery.start(node.run)
    service = DLedgerBrokerService(node, **kwargs)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    await nursery.start(partial(serve_on, service.initialize, listeners))
    with trio.fail_after(10):
        while node.status().role != "LEADER":  # noqa: ASYNC110
            await trio.sleep(0.05)
    return node, service, port


async def test_a_dledger_broker_port_pauses_reading_past_its_puts_in_flight(
    tmp_path: Path,
) -> None:
    """With one put in flight allowed, pipelined sends are still all answered, in turn."""
    async with trio.open_nursery() as nursery:
        _, service, port = await _dledger_leader(tmp_path, nursery, max_in_flight=1)
        async with RemotingConnection.connect("127.0.0.1", port) as c:
            codes: list[int] = []

            async def one(i: int) -> None:
                codes.append((await send(c, "T", b"m%d" % i, 0)).code)

            async with trio.open_nursery() as sends:
                for i in range(20):
                    sends.start_soon(one, i)
        assert codes == [ResponseCode.SUCCESS] * 20 and service.puts == 20
        nursery.cancel_scope.cancel()


async def test_a_dledger_broker_port_serves_the_same_table(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        _, _, port = await _dledger_leader(tmp_path, nursery)
        async with RemotingConnection.connect("127.0.0.1", port) as c:
            sent = await send(c, "T", b"hello", 1)
            assert sent.code == ResponseCode.SUCCESS and sent.header is not None
            assert (sent.header.queue_id, sent.header.queue_offset) == (1, 0)
            await commit(c, "grp", "T", 2, 9)
            assert await query(c, "grp", "T", 2) == 9
            assert await query(c, "grp", "T", 0) == 0  # a new group: nothing on disk yet
            topics = await c.invoke_checked(
                RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG)
            )
            table = TopicConfigSerializeWrapper.decode(topics.body).topic_config_table
            assert table["T"].write_queue_nums == 4
            doc = await status(c)
            assert doc.role == "LEADER" and doc.dledger is not None
        nursery.cancel_scope.cancel()


async def test_a_dledger_node_holds_a_suspended_pull_until_a_message_arrives(
    tmp_path: Path,
) -> None:
    async with trio.open_nursery() as nursery:
        _, service, port = await _dledger_leader(tmp_path, nursery)
        await nursery.start(service.run_holds)
        async with RemotingConnection.connect("127.0.0.1", port) as c:
            await send(c, "T", b"first", 0)
            answers: list[RemotingCommand] = []

            async def held() -> None:
                answers.append(await c.invoke(pull_request("T", 0, 1, suspend_ms=10_000)))

            async with trio.open_nursery() as pulls:
                pulls.start_soon(held)
                await trio.sleep(0.2)
                assert answers == []
                started = trio.current_time()
                await send(c, "T", b"second", 0)
            assert trio.current_time() - started < 2  # woken by the append, not the re-check
            assert answers[0].code == ResponseCode.SUCCESS
        nursery.cancel_scope.cancel()


async def test_a_dledger_follower_refuses_sends_naming_the_leader(tmp_path: Path) -> None:
    raft = RaftConfig(election_timeout=0.3, heartbeat_interval=0.05, retransmit_timeout=0.15)
    network = MemoryNetwork()
    peers = {"n0": "n0:0", "n1": "n1:0"}
    nodes = [
        DLedgerNode(
            NodeConfig(
                group="g",
                node_id=n,
                peers=peers,
                store_dir=tmp_path / n,
                data_file_size=1 << 20,
                index_file_size=64 * 1024,
                mapped_file_size=1 << 20,
                raft=raft,
                broker_addresses={n: f"127.0.0.1:1{i}"},
            ),
            connector=network.connector_for(n),
            listen=False,
        )
        for i, n in enumerate(peers)
    ]
    async with trio.open_nursery() as nursery:
        for node in nodes:
            network.register(node, nursery)
            await nursery.start(node.run)
        with trio.fail_after(10):
            while not any(n.is_leader for n in nodes):  # noqa: ASYNC110
                await trio.sleep(0.05)
        follower = next(n for n in nodes if not n.is_leader)
        service = DLedgerBrokerService(follower)
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        await nursery.start(partial(serve_on, service.initialize, listeners))
        async with RemotingConnection.connect("127.0.0.1", port) as c:
            refused = await send(c, "T", b"x", 0)
            assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert "not master" in str(refused.remark) and "leader is n" in str(refused.remark)
        nursery.cancel_scope.cancel()


# -- the pull suggestion ---------------------------------------------------------------------


def test_suggest_broker_id_rules() -> None:
    slow = partial(suggest_broker_id, memory=100, which_broker=1)
    assert slow(101, slave_read_enable=True) == 1
    assert slow(100, slave_read_enable=True) == MASTER_ID  # not more than the memory
    assert slow(10**9, slave_read_enable=False) == MASTER_ID
    assert suggest_broker_id(5, memory=1, slave_read_enable=True, which_broker=3) == 3


async def _fill(broker: Broker, count: int, size: int = 200) -> None:
    for i in range(count):
        reply = await put(broker, "T", b"%05d" % i + b"x" * size)
        assert reply.status is PutStatus.PUT_OK


def _pull(broker: Broker, offset: int, count: int = 1) -> PullResult:
    return serve_pull(broker.store, "T", 0, offset, count, suggest=broker.suggest)


async def test_a_master_suggests_the_slave_to_a_consumer_far_behind(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # memory = 10_000 * 40 % = 4000 bytes: a consumer more than that behind reads from disk.
    cfg = config(
        tmp_path,
        total_memory_bytes=10_000,
        slave_read_enable=True,
        which_broker_when_consume_slowly=2,
    )
    async with running(cfg, serve_broker_port=False) as (broker, _):
        await _fill(broker, 100)
        end = broker.store.max_offset
        assert end > 20_000

        def pull(offset: int, count: int = 1) -> PullResult:
            return _pull(broker, offset, count)

        far = pull(0)
        assert far.status is GetMessageStatus.FOUND and far.suggested == 2
        size = len(far.records[0])
        # Exactly at the memory figure: the master; one byte more: the slave.
        at = 99 - 4000 // size  # the first offset whose pull leaves <= 4000 bytes behind
        assert pull(at).suggested == MASTER_ID
        assert pull(at - 1).suggested == 2
        assert pull(0, 100).suggested == MASTER_ID  # everything pulled: none behind
        assert pull(100).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        assert pull(100).suggested == MASTER_ID
    async with running(attrs.evolve(cfg, slave_read_enable=False), serve_broker_port=False) as (
        broker,
        _,
    ):
        assert _pull(broker, 0).suggested == MASTER_ID


async def test_a_slave_suggests_itself_only_with_slave_read_enable(tmp_path: Path) -> None:
    async with running(config(tmp_path / "m")) as (master, addresses):
        assert addresses.ha is not None
        await _fill(master, 50)
        end = master.store.max_offset

        def slave_config(name: str, enable: bool) -> BrokerConfig:
            return config(
                tmp_path / name,
                broker_role=BrokerRole.SLAVE,
                ha_master_address=f"127.0.0.1:{addresses.ha[1]}",  # type: ignore[index]
                slave_read_enable=enable,
                total_memory_bytes=10_000,
            )

        async with (
            running(slave_config("reads", True), serve_broker_port=False) as (reads, _),
            running(slave_config("no-reads", False), serve_broker_port=False) as (refuses, _),
        ):
            stores = (reads.store, refuses.store)
            with trio.fail_after(10):
                while min(s.dispatched_offset for s in stores) < end:  # noqa: ASYNC110
                    await trio.sleep(0.01)
            assert _pull(reads, 0).status is GetMessageStatus.FOUND
            assert _pull(reads, 0).suggested == 1  # far behind: stay here
            assert _pull(reads, 49).suggested == MASTER_ID
            assert _pull(refuses, 0).status is GetMessageStatus.FOUND
            assert _pull(refuses, 0).suggested == MASTER_ID


# -- a slave's metadata sync -------------------------------------------------------------------


async def test_a_slave_copies_topics_and_offsets_3_s_after_it_knows_its_master_and_every_interval(
    tmp_path: Path,
) -> None:
    async with running(config(tmp_path / "m")) as (master, m):
        await put(master, "A", b"a", 5 % 4)
        master.offsets.commit("g", "A", 1, 1)
        slave_cfg = config(
            tmp_path / "s",
            broker_role=BrokerRole.SLAVE,
            ha_master_address=fmt(m.ha),
            master_broker_address=fmt(m.broker),
            slave_sync_interval=0.3,
        )
        async with running(slave_cfg, serve_broker_port=False) as (slave, _):
            sync = slave.sync
            assert sync is not None
            await wait_until(lambda: sync.syncs >= 1)  # 3 s after start (RocketMQ's first delay)
            assert sync.topics == {"A": 4, "TBW102": 4}  # TBW102: see test_broker_service
            assert slave.offsets.table() == {("A", "g"): {1: 1}}
            # Changes on the master arrive with the next round.
            await put(master, "B", b"b")
            master.offsets.commit("g", "A", 1, 2)
            master.offsets.commit("h", "B", 0, 1)
            rounds = sync.syncs
            await wait_until(lambda: sync.syncs >= rounds + 2)
            assert sync.topics == {"A": 4, "B": 4, "TBW102": 4}
            assert slave.topics() == {"A": 4, "B": 4, "TBW102": 4}
            assert slave.offsets.table() == {("A", "g"): {1: 2}, ("B", "h"): {0: 1}}
    topics = json.loads((tmp_path / "s" / TOPICS_FILE).read_text())
    assert set(topics) == {"dataVersion", "topicConfigTable"}
    assert topics["topicConfigTable"]["B"] == {
        "order": False,
        "perm": 6,
        "readQueueNums": 4,
        "topicFilterType": "SINGLE_TAG",
        "topicName": "B",
        "topicSysFlag": 0,
        "writeQueueNums": 4,
    }
    for name in ("delayOffset.json", "subscriptionGroup.json"):
        assert json.loads((tmp_path / "s" / "config" / name).read_text())
    offsets = json.loads((tmp_path / "s" / OFFSETS_FILE).read_text())
    assert offsets == {"offsetTable": {"A@g": {"1": 2}, "B@h": {"0": 1}}}
    # A restarted slave knows its topics before any sync.
    async with running(slave_cfg, serve_broker_port=False) as (slave, _):
        assert slave.topics() == {"A": 4, "B": 4, "TBW102": 4}
        assert slave.offsets.query("h", "B", 0) == 1


async def test_a_failed_sync_is_logged_and_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    offsets = ConsumerOffsets(tmp_path / "o.json")
    dead = trio.socket.socket()
    await dead.bind(("127.0.0.1", 0))
    sync = SlaveSync(
        offsets,
        TopicTable(tmp_path / "topics.json"),
        master_address=fmt(dead.getsockname()),
        interval=0.05,
    )
    dead.close()
    with caplog.at_level(logging.WARNING, "hanet.broker"):
        assert not await sync.sync_logged()
    assert "metadata sync from master 127.0.0.1:" in caplog.text
    assert sync.last_error is not None and "cannot connect" in sync.last_error
    async with running(config(tmp_path / "m")) as (master, m), trio.open_nursery() as nursery:
        master.offsets.commit("g", "T", 0, 3)
        await nursery.start(sync.run)
        sync.set_master_address(fmt(m.broker))
        await wait_until(lambda: sync.syncs == 1 and sync.last_error is None)
        assert offsets.table() == {("T", "g"): {0: 3}}
        nursery.cancel_scope.cancel()


async def test_a_malformed_body_from_the_master_writes_nothing(tmp_path: Path) -> None:
    def bad_delay(ctx: Any, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=b'{"offsetTable":{"1":"twelve"}}')

    store_dir = tmp_path / "s"
    sync = SlaveSync(ConsumerOffsets(tmp_path / "o.json"), TopicTable(None), store_dir)
    async with running(config(tmp_path / "m")) as (master, m):
        master.port.register(RequestCode.GET_ALL_DELAY_OFFSET, bad_delay)
        sync.set_master_address(fmt(m.broker))
        assert not await sync.sync_logged()
        assert sync.last_error is not None and "offsetTable" in sync.last_error
        assert not (store_dir / "config").exists()  # checked before anything is written
        master.port.register(
            RequestCode.GET_ALL_DELAY_OFFSET,
            lambda ctx, r: r.response(body=b'{"offsetTable":{1:12}}'),
        )
        assert await sync.sync_logged()
    saved = json.loads((store_dir / "config" / "delayOffset.json").read_text())
    assert saved == {"offsetTable": {"1": 12}}


async def test_a_master_table_past_the_slaves_bounds_is_refused_whole(tmp_path: Path) -> None:
    """A slave bounds its master's tables as its own: too many offsets or topics are not
    taken (nothing changes, nothing is pushed back), the sync fails logged, and a table
    back within bounds is taken next round."""
    offsets = ConsumerOffsets(tmp_path / "o.json", max_entries=2)
    offsets.commit("mine", "T", 0, 7)
    topics = TopicTable(tmp_path / "topics.json", max_topics=3)
    sync = SlaveSync(offsets, topics)
    async with running(config(tmp_path / "m")) as (master, m):
        sync.set_master_address(fmt(m.broker))
        for group in ("a", "b"):
            master.offsets.commit(group, "T", 0, 1)
        assert not await sync.sync_logged()
        assert sync.last_error is not None and "at most 2" in sync.last_error
        assert offsets.table() == {("T", "mine"): {0: 7}}
        assert master.offsets.query("mine", "T", 0) < 0  # nothing pushed to the master
        assert not topics.path.exists()  # type: ignore[union-attr]
        offsets.max_entries = 3
        for topic in ("A", "B", "C"):
            await put(master, topic, b"x")
        assert not await sync.sync_logged()
        assert sync.last_error is not None and "more than 3" in sync.last_error
        assert offsets.table() == {("T", "mine"): {0: 7}}
        topics.max_topics = 10
        assert await sync.sync_logged()
        assert set(topics.queue_counts()) >= {"A", "B", "C"}
        assert offsets.query("a", "T", 0) == 1 and master.offsets.query("mine", "T", 0) == 7


async def test_offsets_committed_to_the_slave_while_the_master_is_down_are_not_lost(
    tmp_path: Path,
) -> None:
    """Item 4 of the remoting move: the master takes the slave's newer offsets back."""
    master_cfg = config(tmp_path / "m")
    async with running(master_cfg) as (master, m):
        for i in range(10):
            await put(master, "T", b"%d" % i)
        master.offsets.commit("g", "T", 0, 3)
        master.offsets.commit("g", "T", 1, 0)
        master_address, ha_address = fmt(m.broker), fmt(m.ha)
    # The master is down. Its address is kept for the slave (its files stay on disk).
    slave_cfg = config(
        tmp_path / "s",
        broker_role=BrokerRole.SLAVE,
        ha_master_address=ha_address,
        master_broker_address=master_address,
        slave_sync_interval=0.2,
    )
    async with running(slave_cfg) as (slave, s):
        # What the slave knew before: the master's offsets (as a sync copied them).
        slave.offsets.commit("g", "T", 0, 3)
        slave.offsets.commit("g", "T", 1, 0)
        async with connect(s.broker) as c:  # consumers commit to the slave meanwhile
            assert (await commit(c, "g", "T", 0, 8)).code == ResponseCode.SUCCESS
            assert (await commit(c, "h", "T", 2, 1)).code == ResponseCode.SUCCESS
        sync = slave.sync
        assert sync is not None
        # The master comes back on the same ports; the slave reconnects and syncs.
        host, port = m.broker  # type: ignore[misc]
        back = attrs.evolve(
            master_cfg,
            listen_port=port,
            ha_listen_port=m.ha[1],  # type: ignore[index]
        )
        async with running(back) as (master, _):
            # The master went on too: a consumer committed queue 1 there (larger: kept).
            master.offsets.commit("g", "T", 1, 5)
            await wait_until(lambda: sync.syncs >= 1 and sync.pushed >= 2)
            await wait_until(lambda: master.offsets.query("g", "T", 0) == 8)
            assert master.offsets.query("h", "T", 2) == 1
            assert master.offsets.query("g", "T", 1) == 5
            # The slave's sync did not overwrite its larger offsets with the master's.
            assert slave.offsets.query("g", "T", 0) == 8
            assert slave.offsets.query("g", "T", 1) == 5
            async with connect((host, port)) as c:  # a consumer restarted on the master
                assert await query(c, "g", "T", 0) == 8


# -- registration with the name servers --------------------------------------------------------


async def test_a_master_registers_at_start_and_every_interval_and_leaves_on_shutdown(
    tmp_path: Path,
) -> None:
    async with name_server() as (ns, ns_address), name_server() as (ns2, ns2_address):
        cfg = config(
            tmp_path,
            namesrv_addr=f"{ns_address},{ns2_address}",
            broker_cluster_name="C1",
            broker_name="broker-x",
            register_broker_interval=0.2,
        )
        async with running(cfg) as (broker, addresses):
            await wait_until(lambda: len(ns.registrations) >= 1 and len(ns2.registrations) >= 1)
            first = ns.registrations[0]
            assert attrs.evolve(first, data_version=None) == BrokerRegistration(
                "C1",
                "broker-x",
                0,
                "MASTER",
                fmt(addresses.broker),
                fmt(addresses.ha),
                (("TBW102", 4),),
            )
            await put(broker, "T", b"x")
            await wait_until(lambda: len(ns.registrations) >= 3)
            assert ns.registrations[-1].topics == (("T", 4), ("TBW102", 4))
            assert broker.registrar is not None and broker.registrar.last_error is None
        assert ns.unregistered == [("broker-x", 0)] and ns2.unregistered == [("broker-x", 0)]


async def test_a_broker_on_a_wildcard_address_registers_its_broker_ip(tmp_path: Path) -> None:
    async with name_server() as (ns, ns_address):
        cfg = config(
            tmp_path,
            namesrv_addr=ns_address,
            listen_host="0.0.0.0",
            ha_listen_host="0.0.0.0",
            broker_ip1="10.1.2.3",
            broker_ip2="10.1.2.4",
        )
        async with running(cfg) as (broker, addresses):
            await wait_until(lambda: len(ns.registrations) >= 1)
            registration = ns.registrations[0]
            assert registration.broker_address == f"10.1.2.3:{addresses.broker[1]}"  # type: ignore[index]
            assert registration.ha_address == f"10.1.2.4:{addresses.ha[1]}"  # type: ignore[index]
            reply = await put(broker, "T", b"x")
            record = broker.store.read_record(reply.wrote_offset)
            assert record.store_address == f"10.1.2.3:{addresses.broker[1]}"  # type: ignore[index]


def test_a_broker_has_at_most_what_a_name_server_accepts_of_queues(tmp_path: Path) -> None:
    for bad in (0, 1025):
        with pytest.raises(ConfigError, match=r"default_topic_queue_nums must be in 1\.\.1024"):
            config(tmp_path, default_topic_queue_nums=bad)
    assert config(tmp_path, default_topic_queue_nums=1024).default_topic_queue_nums == 1024


def test_broker_ips_must_be_hosts(tmp_path: Path) -> None:
    for bad in ("", "10.0.0.1:80", "a b", "[::1]"):
        with pytest.raises(ConfigError, match="broker_ip1"):
            config(tmp_path, broker_ip1=bad)
    config(tmp_path, broker_ip1="::1", broker_ip2="broker-a.example")


async def test_a_new_topic_is_registered_at_once_not_at_the_next_interval(
    tmp_path: Path,
) -> None:
    async with name_server() as (ns, ns_address):
        cfg = config(tmp_path, namesrv_addr=ns_address, register_broker_interval=30.0)
        async with running(cfg) as (broker, _):
            await wait_until(lambda: len(ns.registrations) == 1)
            await put(broker, "T", b"x")
            await wait_until(lambda: len(ns.registrations) == 2)
            assert ns.registrations[-1].topics == (("T", 4), ("TBW102", 4))
            await put(broker, "T", b"y", 1)  # a known topic: no round
            await trio.sleep(0.3)
            assert len(ns.registrations) == 2


async def test_registration_failures_are_logged_once_and_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dead = trio.socket.socket()
    await dead.bind(("127.0.0.1", 0))
    address = fmt(dead.getsockname())
    dead.close()
    cfg = config(tmp_path, namesrv_addr=address, register_broker_interval=0.05)
    with caplog.at_level(logging.WARNING, "hanet.broker"):
        async with running(cfg, serve_broker_port=False) as (broker, _):
            registrar = broker.registrar
            assert registrar is not None
            await wait_until(lambda: registrar.last_error is not None)
            await trio.sleep(0.3)
    assert registrar.registrations == 0
    assert caplog.text.count("cannot register") == 1


async def test_a_slave_learns_its_master_from_the_name_server_and_follows_a_change(
    tmp_path: Path,
) -> None:
    async with (
        name_server() as (ns, ns_address),
        running(config(tmp_path / "a")) as (master_a, a),
        running(config(tmp_path / "b")) as (master_b, b),
    ):
        slave_cfg = config(
            tmp_path / "s",
            broker_role=BrokerRole.SLAVE,
            namesrv_addr=ns_address,
            register_broker_interval=0.1,
        )
        async with running(slave_cfg) as (slave, s):
            ha = slave.slave
            assert ha is not None and slave.sync is not None
            # No master registered yet: the slave waits, connecting nowhere.
            await wait_until(lambda: len(ns.registrations) >= 2)
            assert ns.registrations[0].broker_id == 1 and ns.registrations[0].role == "SLAVE"
            assert ns.registrations[0].ha_address == ""
            assert ns.registrations[0].broker_address == fmt(s.broker)
            assert ha.status().master_address == "" and ha.status().attempts == 0
            link = slave.status().master
            assert link is not None and link.address == "" and not link.connected
            master_a.offsets.commit("g", "T", 0, 1)
            ns.master = (fmt(a.broker), fmt(a.ha))
            await wait_until(lambda: ha.status().connected)
            assert ha.status().master_address == fmt(a.ha)
            await wait_until(lambda: slave.offsets.query("g", "T", 0) == 1)  # 3 s after
            assert slave.sync.master_address == fmt(a.broker)
            # The master moves: the slave drops A and follows B.
            ns.master = (fmt(b.broker), fmt(b.ha))
            await wait_until(lambda: ha.status().master_address == fmt(b.ha))
            await wait_until(lambda: ha.status().connected)
            reply = await put(master_b, "T", b"from b")
            await wait_until(
                lambda: slave.store.dispatched_offset == reply.wrote_offset + reply.wrote_size
            )
            assert master_a.status().slaves == ()
            assert len(master_b.status().slaves) == 1
        assert ns.unregistered == [("broker-a", 1)]


async def test_a_garbage_answer_from_a_name_server_is_logged_not_followed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with name_server() as (ns, ns_address):
        ns.master = ("not an address", "nor:this")
        slave_cfg = config(
            tmp_path / "s",
            broker_role=BrokerRole.SLAVE,
            namesrv_addr=ns_address,
            register_broker_interval=0.05,
        )
        async with running(slave_cfg) as (slave, _):
            await wait_until(lambda: len(ns.registrations) >= 3)  # the broker goes on
            assert slave.slave is not None and slave.slave.status().master_address == ""
            assert slave.registrar is not None and slave.registrar.last_error is None
        assert "ignoring the name server's master addresses" in caplog.text


def test_a_slave_needs_a_master_address_or_a_name_server(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="haMasterAddress"):
        Broker(config(tmp_path, broker_role=BrokerRole.SLAVE))
    Broker(config(tmp_path, broker_role=BrokerRole.SLAVE, namesrv_addr="127.0.0.1:9876"))
    with pytest.raises(ConfigError, match="brokerId"):
        config(tmp_path, broker_role=BrokerRole.SLAVE, broker_id=0)
    with pytest.raises(ConfigError, match="brokerId is 0"):
        config(tmp_path, broker_id=2)
    assert config(tmp_path, broker_role=BrokerRole.SLAVE).effective_broker_id == 1
    assert config(tmp_path, broker_role=BrokerRole.SLAVE, broker_id=3).effective_broker_id == 3
    assert config(tmp_path).effective_broker_id == 0
    assert config(tmp_path, namesrv_addr="a:1, b:2").namesrv_addresses == [("a", 1), ("b", 2)]
    with pytest.raises(ConfigError):
        config(tmp_path, namesrv_addr="a:1,,b:2")


async def test_a_dledger_leader_without_a_quorum_answers_busy_as_rocketmq(tmp_path: Path) -> None:
    """RocketMQ 4.9.8's DLedger broker answers a quorum timeout OS_PAGECACHE_BUSY (SYSTEM_ERROR
    with its [PC_SYNCHRONIZED] remark), which clients retry; FLUSH_SLAVE_TIMEOUT would count as
    sent."""
    raft = RaftConfig(
        election_timeout=0.5, heartbeat_interval=0.05, retransmit_timeout=0.15, append_timeout=0.3
    )
    network = MemoryNetwork()
    peers = {"n0": "n0:0", "n1": "n1:0", "n2": "n2:0"}
    nodes = {
        n: DLedgerNode(
            NodeConfig(
                group="g",
                node_id=n,
                peers=peers,
                store_dir=tmp_path / n,
                raft=raft,
                data_file_size=1 << 20,
                index_file_size=64 * 1024,
                mapped_file_size=1 << 20,
            ),
            connector=network.connector_for(n),
            listen=False,
        )
        for n in peers
    }
    async with trio.open_nursery() as nursery:
        for node in nodes.values():
            network.register(node, nursery)
            await nursery.start(node.run)
        leader = await wait_until(
            lambda: next((n for n in nodes.values() if n.is_leader), None), 10
        )
        assert leader is not None
        service = DLedgerBrokerService(leader)
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        await nursery.start(partial(serve_on, service.initialize, listeners))
        async with RemotingConnection.connect("127.0.0.1", port) as c:
            assert (await send(c, "T", b"with a quorum", 0)).code == ResponseCode.SUCCESS
            for other, node in nodes.items():
                if node is not leader:
                    network.cut(leader.config.node_id, other)
            busy = await send(c, "T", b"alone", 0)
        assert busy.code == ResponseCode.SYSTEM_ERROR
        assert "[PC_SYNCHRONIZED]broker busy, start flow control for a while" in str(busy.remark)
        assert "WAIT_QUORUM_ACK_TIMEOUT" in str(busy.remark)
        nursery.cancel_scope.cancel()
