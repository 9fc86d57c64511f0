"""A broker's cluster state in its STATUS document (``cluster``, ``metadata_sync``,
``consumer_offsets``), in ``hanet status`` and in its metrics (in-process brokers; a fake name
server where one is needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from broker_support import config, connect, fmt, name_server, put, running, status

from hanet.broker import ConsumerOffsets, DLedgerBrokerService
from hanet.dledger import (
    DLedgerNode,
    NodeConfig,
    RaftConfig,
)
from hanet.ha import BrokerRole
from hanet.testing import MemoryNetwork, wait_until


async def dead_address() -> str:
    """A ``host:port`` nothing listens on."""
    dead = trio.socket.socket()
    await dead.bind(("127.0.0.1", 0))
    address = fmt(dead.getsockname())
    dead.close()
    return address


def sample(text: str, line_start: str) -> float:
    (line,) = [line for line in text.splitlines() if line.startswith(line_start)]
    return float(line.rsplit(" ", 1)[1])


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich: one line per row


# -- a registered master -----------------------------------------------------------------------


async def test_a_registered_master_shows_its_cluster_link_and_consumer_offsets(
    tmp_path: Path,
) -> None:
    async with name_server() as (_, ns_address):
        cfg = config(
            tmp_path,
            namesrv_addr=ns_address,
            broker_cluster_name="C1",
            broker_name="broker-x",
            register_broker_interval=0.2,
            flush_consumer_offset_interval=0.1,
        )
        async with running(cfg) as (broker, addresses):
            registrar = broker.registrar
            assert registrar is not None
            await wait_until(lambda: registrar.registrations >= 1)
            cluster = broker.status().cluster
            assert cluster is not None
            assert (cluster.name, cluster.broker_name, cluster.broker_id) == ("C1", "broker-x", 0)
            assert cluster.name_servers == (ns_address,)
            assert cluster.registrations >= 1 and cluster.failures == 0
            assert cluster.last_registered_ago is not None
            assert 0 <= cluster.last_registered_ago < 5
            assert cluster.last_error is None
            assert (cluster.master_address, cluster.master_ha_address) == (None, None)
            assert broker.status().metadata_sync is None  # a master syncs from nobody

            offsets = broker.status().consumer_offsets
            assert offsets is not None and (offsets.groups, offsets.entries) == (0, 0)
            assert offsets.last_persisted_ago is None  # nothing to write yet
            broker.offsets.commit("g1", "T", 0, 5)
            broker.offsets.commit("g2", "T", 0, 1)
            broker.offsets.commit("g1", "U", 1, 2)
            offsets = broker.status().consumer_offsets
            assert offsets is not None and (offsets.groups, offsets.entries) == (2, 3)
            assert offsets.dirty
            await wait_until(lambda: broker.offsets.persists >= 1)
            offsets = broker.status().consumer_offsets
            assert offsets is not None and not offsets.dirty and offsets.last_error is None
            assert offsets.last_persisted_ago is not None and offsets.last_persisted_ago >= 0

            assert addresses.broker is not None
            async with connect(addresses.broker) as client:
                remote = await status(client)  # the sections cross the wire
            assert remote.cluster is not None and remote.cluster.name == "C1"
            assert remote.consumer_offsets is not None and remote.consumer_offsets.entries == 3

            text = broker.metrics.exposition().decode()
            assert sample(text, "hanet_namesrv_registrations_total") >= 1
            assert sample(text, "hanet_namesrv_registration_failures_total") == 0
            assert sample(text, "hanet_namesrv_registration_failing") == 0
            assert sample(text, "hanet_namesrv_registration_age_seconds") >= 0
            assert sample(text, "hanet_consumer_offset_entries") == 3
            assert sample(text, "hanet_consumer_offset_groups") == 2
            assert sample(text, "hanet_consumer_offsets_persist_failing") == 0
            assert "hanet_metadata_syncs" not in text


async def test_a_broker_without_name_servers_has_no_cluster_section(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (broker, _):
        status = broker.status()
        assert status.cluster is None and status.metadata_sync is None
        assert status.consumer_offsets is not None
        assert "hanet_namesrv" not in broker.metrics.exposition().decode()


async def test_a_failing_name_server_shows_the_last_error(
    tmp_path: Path,
) -> None:
    address = await dead_address()
    cfg = config(tmp_path, namesrv_addr=address, register_broker_interval=0.05)
    async with running(cfg) as (broker, _addresses):
        registrar = broker.registrar
        assert registrar is not None
        await wait_until(lambda: registrar.failures >= 2)
        cluster = broker.status().cluster
        assert cluster is not None and cluster.name_servers == (address,)
        assert cluster.registrations == 0 and cluster.failures >= 2
        assert cluster.last_registered_ago is None
        assert cluster.last_error is not None and "Error" in cluster.last_error

        text = broker.metrics.exposition().decode()
        assert sample(text, "hanet_namesrv_registration_failing") == 1
        assert sample(text, "hanet_namesrv_registration_failures_total") >= 2
        assert sample(text, "hanet_namesrv_registrations_total") == 0
        assert "hanet_namesrv_registration_age_seconds" not in text


# -- a slave's metadata sync --------------------------------------------------------------------


async def test_a_slave_shows_its_metadata_sync_and_the_master_the_name_server_named(
    tmp_path: Path,
) -> None:
    async with name_server() as (ns, ns_address), running(config(tmp_path / "m")) as (master, m):
        await put(master, "A", b"a")
        master.offsets.commit("g", "A", 0, 1)
        ns.master = (fmt(m.broker), fmt(m.ha))
        slave_cfg = config(
            tmp_path / "s",
            broker_role=BrokerRole.SLAVE,
            namesrv_addr=ns_address,
            register_broker_interval=0.1,
            slave_sync_interval=0.2,
        )
        async with running(slave_cfg) as (slave, _s):
            sync = slave.sync
            assert sync is not None
            await wait_until(lambda: sync.syncs >= 1)
            status = slave.status()
            cluster = status.cluster
            assert cluster is not None and cluster.broker_id == 1
            assert cluster.master_address == fmt(m.broker)
            assert cluster.master_ha_address == fmt(m.ha)
            info = status.metadata_sync
            assert info is not None
            assert info.master_address == fmt(m.broker)
            assert info.syncs >= 1 and info.failures == 0 and info.last_error is None
            assert info.last_synced_ago is not None and info.last_synced_ago >= 0
            assert (info.topics, info.offset_entries) == (2, 1)  # the topic and TBW102
            assert status.consumer_offsets is not None
            assert status.consumer_offsets.entries == 1  # the copied A@g

            text = slave.metrics.exposition().decode()
            assert sample(text, "hanet_metadata_syncs_total") >= 1
            assert sample(text, "hanet_metadata_sync_failures_total") == 0
            assert sample(text, "hanet_metadata_sync_age_seconds") >= 0


async def test_a_failing_metadata_sync_shows_its_error(
    tmp_path: Path,
) -> None:
    cfg = config(
        tmp_path,
        broker_role=BrokerRole.SLAVE,
        ha_master_address=await dead_address(),
        master_broker_address=await dead_address(),
        slave_sync_interval=0.05,
    )
    async with running(cfg) as (slave, _s):
        sync = slave.sync
        assert sync is not None
        await wait_until(lambda: sync.failures >= 2)
        status = slave.status()
        assert status.cluster is None  # no --namesrv
        info = status.metadata_sync
        assert info is not None and info.master_address == cfg.master_broker_address
        assert info.syncs == 0 and info.failures >= 2 and info.last_synced_ago is None
        assert info.last_error is not None and "cannot connect" in info.last_error

        text = slave.metrics.exposition().decode()
        assert sample(text, "hanet_metadata_sync_failures_total") >= 2
        assert "hanet_metadata_sync_age_seconds" not in text


# -- consumer offsets ---------------------------------------------------------------------------


async def test_a_failed_offsets_write_shows_in_the_section(tmp_path: Path) -> None:
    blocker = tmp_path / "config"
    blocker.write_text("a file where the directory should be")
    offsets = ConsumerOffsets(blocker / "consumerOffset.json")
    offsets.commit("g", "T", 0, 1)
    with pytest.raises(OSError):
        offsets.persist()
    info = offsets.status()
    assert info.dirty and info.persists == 0 and info.last_persisted_ago is None
    assert info.last_error is not None and info.last_error.startswith(
        ("FileExistsError", "NotADirectoryError")
    )
    blocker.unlink()
    assert offsets.persist()
    info = offsets.status()
    assert not info.dirty and info.persists == 1 and info.last_error is None
    assert info.last_persisted_ago is not None and 0 <= info.last_persisted_ago < 5


def test_offsets_persisted_outside_trio_have_no_age(tmp_path: Path) -> None:
    offsets = ConsumerOffsets(tmp_path / "o.json")
    offsets.commit("g", "T", 0, 1)
    assert offsets.persist()
    assert offsets.status().last_persisted_ago is None and offsets.status().persists == 1


async def test_a_dledger_node_shows_its_consumer_offsets_only(tmp_path: Path) -> None:
    raft = RaftConfig(election_timeout=0.3, heartbeat_interval=0.05, retransmit_timeout=0.15)
    node_config = NodeConfig(
        group="g", node_id="solo", peers={"solo": "x:0"}, store_dir=tmp_path, raft=raft
    )
    node = DLedgerNode(node_config, connector=MemoryNetwork().connector_for("solo"), listen=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        service = DLedgerBrokerService(node)
        service.offsets.commit("grp", "T", 2, 9)
        status = service.status()
        assert status.dledger is not None
        assert (status.cluster, status.metadata_sync) == (None, None)
        assert status.consumer_offsets is not None
        assert (status.consumer_offsets.groups, status.consumer_offsets.entries) == (1, 1)
        nursery.cancel_scope.cancel()
