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
from broker_support import config, fmt, name_server, running, wait_for

from hanet.boot import serve_listeners
from hanet.broker import (
    OFFSETS_FILE,
    TOPICS_FILE,
    Broker,
    ConsumerOffsets,
    DLedgerBrokerService,
    SlaveSync,
    suggest_broker_id,
)
from hanet.client import BrokerClient, BrokerRequestError, NameServerConnection
from hanet.dledger import DLedgerNode, MemoryNetwork, NodeConfig, RaftConfig
from hanet.errors import ConfigError
from hanet.ha import BrokerConfig, BrokerRole
from hanet.protocol import (
    MASTER_ID,
    BrokerRegistration,
    ErrorCode,
    PullRequest,
    PullResponse,
    PullStatus,
    PutMessage,
)
from hanet.store import PutStatus

REGISTRATION = BrokerRegistration("C", "b", 0, "ASYNC_MASTER", "127.0.0.1:1")


# -- requests a broker port does not serve ---------------------------------------------------


async def test_a_name_server_request_to_a_broker_is_not_supported(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (_, addresses):
        assert addresses.broker is not None
        async with NameServerConnection.connect(*addresses.broker) as c:
            with pytest.raises(BrokerRequestError) as info:
                await c.register_broker(REGISTRATION)
            assert info.value.code is ErrorCode.NOT_SUPPORTED
            assert "RegisterBroker is not served by a broker port" in str(info.value)
            with pytest.raises(BrokerRequestError, match="NOT_SUPPORTED"):
                await c.route("T")
            assert c.is_connected  # the connection stays open
        async with BrokerClient.connect(*addresses.broker) as b:
            assert (await b.status()).role == "ASYNC_MASTER"


async def test_a_dledger_broker_port_pauses_reading_past_its_puts_in_flight(
    tmp_path: Path,
) -> None:
    """With one put in flight allowed, pipelined puts are still all answered, in turn."""
    raft = RaftConfig(election_timeout=0.3, heartbeat_interval=0.05, retransmit_timeout=0.15)
    node_config = NodeConfig(
        group="g", node_id="solo", peers={"solo": "x:0"}, store_dir=tmp_path, raft=raft
    )
    node = DLedgerNode(node_config, connector=MemoryNetwork().connector_for("solo"), listen=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        service = DLedgerBrokerService(node, max_in_flight=1)
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        await nursery.start(partial(serve_listeners, service.initialize, listeners))
        with trio.fail_after(10):
            while node.status().role != "LEADER":  # noqa: ASYNC110
                await trio.sleep(0.05)
        async with BrokerClient.connect("127.0.0.1", port) as c:
            replies: list[Any] = []

            async def put(i: int) -> None:
                replies.append(await c.put("T", b"m%d" % i, queue_id=0))

            async with trio.open_nursery() as puts:
                for i in range(20):
                    puts.start_soon(put, i)
        assert len(replies) == 20 and service.puts == 20
        nursery.cancel_scope.cancel()


async def test_a_dledger_broker_port_serves_offsets_and_refuses_metadata(tmp_path: Path) -> None:
    raft = RaftConfig(election_timeout=0.3, heartbeat_interval=0.05, retransmit_timeout=0.15)
    node_config = NodeConfig(
        group="g", node_id="solo", peers={"solo": "x:0"}, store_dir=tmp_path, raft=raft
    )
    node = DLedgerNode(node_config, connector=MemoryNetwork().connector_for("solo"), listen=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        service = DLedgerBrokerService(node)
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        await nursery.start(partial(serve_listeners, service.initialize, listeners))
        async with BrokerClient.connect("127.0.0.1", port) as c:
            await c.commit_offset("grp", "T", 2, 9)
            assert await c.query_offset("grp", "T", 2) == 9
            assert await c.query_offset("grp", "T", 0) is None
            with pytest.raises(BrokerRequestError) as info:
                await c.metadata()
            assert info.value.code is ErrorCode.NOT_SUPPORTED
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
        (reply,) = await broker.put([PutMessage("T", b"%05d" % i + b"x" * size, queue_id=0)])
        assert reply.status is PutStatus.PUT_OK


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

        def pull(offset: int, count: int = 1) -> PullResponse:
            return broker.pull(PullRequest(1, "T", 0, offset, count))

        far = pull(0)
        assert far.status is PullStatus.FOUND and far.suggested_broker_id == 2
        size = len(far.records[0])
        # Exactly at the memory figure: the master; one byte more: the slave.
        at = 99 - 4000 // size  # the first offset whose pull leaves <= 4000 bytes behind
        assert pull(at).suggested_broker_id == MASTER_ID
        assert pull(at - 1).suggested_broker_id == 2
        assert pull(0, 100).suggested_broker_id == MASTER_ID  # everything pulled: none behind
        assert pull(100).status is PullStatus.OFFSET_OVERFLOW_ONE
        assert pull(100).suggested_broker_id == MASTER_ID
    async with running(attrs.evolve(cfg, slave_read_enable=False), serve_broker_port=False) as (
        broker,
        _,
    ):
        assert broker.pull(PullRequest(1, "T", 0, 0, 1)).suggested_broker_id == MASTER_ID


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
            request = PullRequest(1, "T", 0, 0, 1)
            assert reads.pull(request).status is PullStatus.FOUND
            assert reads.pull(request).suggested_broker_id == 1  # far behind: stay here
            assert reads.pull(PullRequest(1, "T", 0, 49, 1)).suggested_broker_id == MASTER_ID
            assert refuses.pull(request).status is PullStatus.FOUND
            assert refuses.pull(request).suggested_broker_id == MASTER_ID


# -- a slave's metadata sync -------------------------------------------------------------------


async def test_a_slave_copies_topics_and_offsets_at_connect_and_every_interval(
    tmp_path: Path,
) -> None:
    async with running(config(tmp_path / "m")) as (master, m):
        await master.put([PutMessage("A", b"a", queue_id=5 % 4)])
        master.commit_offset("g", "A", 1, 1)
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
            await wait_for(lambda: sync.syncs >= 1)  # at connect, not after the interval
            assert sync.topics == {"A": 4}
            assert slave.offsets.table() == {("A", "g"): {1: 1}}
            # Changes on the master arrive with the next round.
            await master.put([PutMessage("B", b"b", queue_id=0)])
            master.commit_offset("g", "A", 1, 2)
            master.commit_offset("h", "B", 0, 1)
            rounds = sync.syncs
            await wait_for(lambda: sync.syncs >= rounds + 2)
            assert sync.topics == {"A": 4, "B": 4}
            assert slave.topics() == {"A": 4, "B": 4}
            assert slave.offsets.table() == {("A", "g"): {1: 2}, ("B", "h"): {0: 1}}
    topics = json.loads((tmp_path / "s" / TOPICS_FILE).read_text())
    assert topics == {
        "topicConfigTable": {
            "A": {"topicName": "A", "readQueueNums": 4, "writeQueueNums": 4},
            "B": {"topicName": "B", "readQueueNums": 4, "writeQueueNums": 4},
        }
    }
    offsets = json.loads((tmp_path / "s" / OFFSETS_FILE).read_text())
    assert offsets == {"offsetTable": {"A@g": {"1": 2}, "B@h": {"0": 1}}}
    # A restarted slave knows its topics before any sync.
    async with running(slave_cfg, serve_broker_port=False) as (slave, _):
        assert slave.topics() == {"A": 4, "B": 4}
        assert slave.query_offset("h", "B", 0) == 1


async def test_a_failed_sync_is_logged_and_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    offsets = ConsumerOffsets(tmp_path / "o.json")
    dead = trio.socket.socket()
    await dead.bind(("127.0.0.1", 0))
    sync = SlaveSync(
        offsets, tmp_path / "topics.json", master_address=fmt(dead.getsockname()), interval=0.05
    )
    dead.close()
    with caplog.at_level(logging.WARNING, "hanet.broker"):
        assert not await sync.sync_logged()
    assert "metadata sync from master 127.0.0.1:" in caplog.text
    assert sync.last_error is not None and "cannot connect" in sync.last_error
    async with running(config(tmp_path / "m")) as (master, m), trio.open_nursery() as nursery:
        master.commit_offset("g", "T", 0, 3)
        await nursery.start(sync.run)
        sync.set_master_address(fmt(m.broker))
        await wait_for(lambda: sync.syncs == 1 and sync.last_error is None)
        assert offsets.table() == {("T", "g"): {0: 3}}
        nursery.cancel_scope.cancel()


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
            await wait_for(lambda: len(ns.registrations) >= 1 and len(ns2.registrations) >= 1)
            first = ns.registrations[0]
            assert first == BrokerRegistration(
                "C1", "broker-x", 0, "ASYNC_MASTER", fmt(addresses.broker), fmt(addresses.ha), ()
            )
            await broker.put([PutMessage("T", b"x", queue_id=0)])
            await wait_for(lambda: len(ns.registrations) >= 3)
            assert ns.registrations[-1].topics == (("T", 4),)
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
            await wait_for(lambda: len(ns.registrations) >= 1)
            registration = ns.registrations[0]
            assert registration.broker_address == f"10.1.2.3:{addresses.broker[1]}"  # type: ignore[index]
            assert registration.ha_address == f"10.1.2.4:{addresses.ha[1]}"  # type: ignore[index]
            (reply,) = await broker.put([PutMessage("T", b"x", queue_id=0)])
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
            await wait_for(lambda: len(ns.registrations) == 1)
            await broker.put([PutMessage("T", b"x", queue_id=0)])
            await wait_for(lambda: len(ns.registrations) == 2)
            assert ns.registrations[-1].topics == (("T", 4),)
            await broker.put([PutMessage("T", b"y", queue_id=1)])  # a known topic: no round
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
            await wait_for(lambda: registrar.last_error is not None)
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
            await wait_for(lambda: len(ns.registrations) >= 2)
            assert ns.registrations[0].broker_id == 1 and ns.registrations[0].role == "SLAVE"
            assert ns.registrations[0].ha_address == ""
            assert ns.registrations[0].broker_address == fmt(s.broker)
            assert ha.status().master_address == "" and ha.status().attempts == 0
            link = slave.status().master
            assert link is not None and link.address == "" and not link.connected
            master_a.commit_offset("g", "T", 0, 1)
            ns.master = (fmt(a.broker), fmt(a.ha))
            await wait_for(lambda: ha.status().connected)
            assert ha.status().master_address == fmt(a.ha)
            await wait_for(lambda: slave.offsets.query("g", "T", 0) == 1)  # synced at connect
            assert slave.sync.master_address == fmt(a.broker)
            # The master moves: the slave drops A and follows B.
            ns.master = (fmt(b.broker), fmt(b.ha))
            await wait_for(lambda: ha.status().master_address == fmt(b.ha))
            await wait_for(lambda: ha.status().connected)
            (reply,) = await master_b.put([PutMessage("T", b"from b", queue_id=0)])
            await wait_for(
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
            await wait_for(lambda: len(ns.registrations) >= 3)  # the broker goes on
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
