"""The cluster as real processes: ``hanet namesrv``, a master and a slave that knows only the
name server. The slave finds its master through its registration, replicates, and follows the
master to a new HA port after the master is killed with kill -9 and restarted."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import trio

from hanet.client import BrokerClient, NameServerClient
from hanet.testing import HanetProcesses

pytestmark = pytest.mark.slow


async def _slave_state(slave: tuple[str, int]) -> tuple[str | None, bool, int]:
    async with BrokerClient.connect(*slave) as client:
        status = await client.status()
    assert status.master is not None
    return status.master.address, status.master.connected, status.max_offset


async def _wait_for_slave(slave: tuple[str, int], expected: tuple[str, bool, int]) -> None:
    """Until the slave is connected to the expected master with the expected max offset."""
    state = None
    with trio.move_on_after(20):
        while True:
            state = await _slave_state(slave)
            if state == expected:
                return
            await trio.sleep(0.1)
    raise AssertionError(f"slave state {state}, expected {expected}")


async def test_a_slave_finds_its_master_through_the_name_server_and_follows_it(
    processes: HanetProcesses, tmp_path: Path
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("registerNameServerPeriod=500\nslaveSyncInterval=1000\n")
    namesrv = await processes.start("namesrv", "namesrv", "--listen", "127.0.0.1:0")
    address = namesrv.ready["namesrv"]
    names = NameServerClient([namesrv.address("namesrv")])
    common = ["--mapped-file-size", "1M", "--config", str(conf), "--listen", "127.0.0.1:0"]
    common += ["--namesrv", address]
    store = ("--store", str(tmp_path / "m"), "--ha-listen", "127.0.0.1:0")
    master = processes.add("master", "master", *store, "--role", "ASYNC_MASTER", *common)
    first = await master.start()
    slave = await processes.start("slave", "slave", "--store", str(tmp_path / "s"), *common)
    async with BrokerClient.connect(*master.address()) as producer:
        for i in range(200):
            assert (await producer.put("TopicTest", b"m%d" % i)).ok
        end = (await producer.status()).max_offset
    await _wait_for_slave(slave.address(), (first["ha"], True, end))
    members = [(name, broker_id) for _, name, broker_id, _ in (await names.cluster()).members()]
    assert members == [("broker-a", 0), ("broker-a", 1)]
    route = await names.route("TopicTest")
    assert [b.addresses for b in route.brokers] == [
        ((0, first["broker"]), (1, slave.ready["broker"]))
    ]

    # kill -9; the master comes back on other ports, the slave follows it there.
    assert await master.kill() == -signal.SIGKILL
    second = await master.start()
    assert second["ha"] != first["ha"]
    async with BrokerClient.connect(*master.address()) as producer:
        assert (await producer.put("TopicTest", b"after the restart")).ok
        end = (await producer.status()).max_offset
    await _wait_for_slave(slave.address(), (second["ha"], True, end))
    assert await slave.stop() == 0
    assert await master.stop() == 0
    assert await namesrv.stop() == 0
    assert "Traceback" not in slave.text(0)
