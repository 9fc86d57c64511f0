"""The cluster as real processes: ``hanet namesrv``, a master and a slave that knows only the
name server. The slave finds its master through its registration, replicates, and follows the
master to a new HA port after the master is killed with kill -9 and restarted."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from hanet.client import BrokerClient, NameServerClient

pytestmark = pytest.mark.slow


class Service:
    """A ``hanet`` verb as a subprocess, ready once its ready file is written."""

    def __init__(self, root: Path, name: str, *argv: str) -> None:
        self.root = root
        self.name = name
        self.argv = argv
        self.process: trio.Process | None = None
        self.ready: dict[str, Any] = {}
        self.runs = 0

    @property
    def log(self) -> Path:
        return self.root / f"{self.name}-{self.runs}.log"

    async def start(self, *extra: str) -> dict[str, Any]:
        self.runs += 1
        ready = self.root / f"{self.name}-{self.runs}.ready"
        with self.log.open("wb") as out:
            self.process = await trio.lowlevel.open_process(
                [sys.executable, "-m", "hanet", *self.argv, *extra, "--ready-file", str(ready)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out,
            )  # fmt: skip
        with trio.fail_after(30):
            while True:
                try:
                    self.ready = json.loads(ready.read_text())
                    return self.ready
                except (FileNotFoundError, ValueError):
                    assert self.process.returncode is None, self.log.read_text()
                    await trio.sleep(0.02)

    async def stop(self, sig: int) -> int:
        assert self.process is not None
        self.process.send_signal(sig)
        with trio.fail_after(15):
            return await self.process.wait()

    async def close(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            with trio.CancelScope(shield=True):
                await self.process.wait()


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


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
    tmp_path: Path,
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("registerNameServerPeriod=500\nslaveSyncInterval=1000\n")
    namesrv = Service(tmp_path, "namesrv", "namesrv", "--listen", "127.0.0.1:0")
    common = ("--mapped-file-size", "1M", "--config", str(conf), "--listen", "127.0.0.1:0")
    master = Service(
        tmp_path, "master", "master", "--store", str(tmp_path / "m"), "--ha-listen",
        "127.0.0.1:0", "--role", "ASYNC_MASTER", *common,
    )  # fmt: skip
    slave = Service(tmp_path, "slave", "slave", "--store", str(tmp_path / "s"), *common)
    try:
        address = (await namesrv.start())["namesrv"]
        names = NameServerClient([_split(address)])
        first = await master.start("--namesrv", address)
        slave_port = _split((await slave.start("--namesrv", address))["broker"])
        async with BrokerClient.connect(*_split(first["broker"])) as producer:
            for i in range(200):
                assert (await producer.put("TopicTest", b"m%d" % i)).ok
            end = (await producer.status()).max_offset
        await _wait_for_slave(slave_port, (first["ha"], True, end))
        members = [(name, broker_id) for _, name, broker_id, _ in (await names.cluster()).members()]
        assert members == [("broker-a", 0), ("broker-a", 1)]
        route = await names.route("TopicTest")
        assert [b.addresses for b in route.brokers] == [
            ((0, first["broker"]), (1, slave.ready["broker"]))
        ]

        # kill -9; the master comes back on other ports, the slave follows it there.
        assert await master.stop(signal.SIGKILL) == -signal.SIGKILL
        second = await master.start("--namesrv", address)
        assert second["ha"] != first["ha"]
        async with BrokerClient.connect(*_split(second["broker"])) as producer:
            assert (await producer.put("TopicTest", b"after the restart")).ok
            end = (await producer.status()).max_offset
        await _wait_for_slave(slave_port, (second["ha"], True, end))
        assert await slave.stop(signal.SIGTERM) == 0
        assert await master.stop(signal.SIGTERM) == 0
        assert await namesrv.stop(signal.SIGTERM) == 0
    finally:
        for service in (slave, master, namesrv):
            await service.close()
    slave_log = "\n".join(
        (tmp_path / f"slave-{run}.log").read_text() for run in range(1, slave.runs + 1)
    )
    assert "Traceback" not in slave_log
