"""Repair, not loss, with real processes: a master whose commit log has a flipped byte keeps the
records after it, and ``hanet master --repair-from`` repairs the damaged record from its slave's
broker port (HANET_READ_LOG) before it serves: the two logs end byte-identical."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
import trio
from cluster_support import Cluster, cluster
from test_cli_processes import (
    FILE,
    assert_identical,
    connect,
    connected_slaves,
    in_sync,
    put_many,
    status_of,
)

from hanet.store import CommitLogReader
from hanet.testing import HanetProcess, flip_store_byte, free_ports, wait_until

pytestmark = pytest.mark.slow


def flip_a_body_byte(store: Path, index: int) -> int:
    """Flip the first body byte of the ``index``-th record of ``store``; its offset."""
    reader = CommitLogReader(store / "commitlog", FILE)
    offset = next(o for i, (o, _) in enumerate(reader.records()) if i == index)
    flip_store_byte(store, offset + 88, FILE)  # the body's first byte (IPv4: 88-byte header)
    return offset


async def replicated(c: Cluster) -> tuple[HanetProcess, HanetProcess, int]:
    """A master and its slave holding the same 1500 messages; the master's max offset."""
    master = await c.master("master", "--full-sync")
    slave = await c.slave(master)
    await wait_until(lambda: connected_slaves(master))
    async with connect(master) as client:
        assert await put_many(client, 1500) == 1500
    await wait_until(lambda: in_sync(master, slave))
    return master, slave, (await status_of(master)).max_offset


async def test_a_master_repairs_a_damaged_record_from_its_slave(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        master, slave, end = await replicated(c)
        assert await c.stop(master) == 0
        assert await c.stop(slave) == 0
        bad = flip_a_body_byte(tmp_path / "master", 700)
        ports = ("--listen", master.ready["broker"], "--ha-listen", master.ready["ha"])
        master = await c.master("master", *ports)  # keeps everything, names the damage
        status = await status_of(master)
        (damaged,) = status.damaged_ranges
        assert damaged.start == bad and status.max_offset == end
        assert await c.stop(master) == 0
        slave = await c.slave(master)  # serves its broker port while the master is down
        master = await c.master("master", *ports, "--repair-from", slave.ready["broker"])
        assert f"repaired [{bad}, " in master.text()
        status = await status_of(master)
        assert status.max_offset == end and not status.damaged_ranges  # nothing dropped
        await wait_until(lambda: connected_slaves(master))
        assert await c.stop(master) == 0
        assert await c.stop(slave) == 0
    assert not (tmp_path / "master" / "damaged.json").exists()
    assert_identical(tmp_path)
    verify = ["verify", str(tmp_path / "master"), "--mapped-file-size", str(FILE)]
    done = await trio.run_process([sys.executable, "-m", "hanet", *verify], capture_stdout=True)
    assert done.returncode == 0 and done.stdout.startswith(b"OK: 1500 messages")


async def test_a_master_that_lost_its_tail_takes_it_back_from_its_slave(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        master, slave, end = await replicated(c)
        assert await c.stop(master, signal.SIGKILL) == -signal.SIGKILL
        # pages never written back: the last 3000 bytes of the master's data are zeros
        path = tmp_path / "master" / "commitlog" / f"{end - end % FILE:020d}"
        with path.open("r+b") as f:
            f.seek(end % FILE - 3000)
            f.write(bytes(3000))
        ports = ("--listen", master.ready["broker"], "--ha-listen", master.ready["ha"])
        master = await c.master("master", *ports, "--repair-from", slave.ready["broker"])
        assert "(a lost tail)" in master.text()
        assert (await status_of(master)).max_offset == end  # every acknowledged record back
        await wait_until(lambda: connected_slaves(master))  # the slave follows again
        async with connect(master) as client:
            assert await put_many(client, 100) == 100
        await wait_until(lambda: in_sync(master, slave))
        assert await c.stop(master) == 0
        assert await c.stop(slave) == 0
    assert_identical(tmp_path)


async def test_a_slave_repairs_a_damaged_record_from_its_master(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        master, slave, end = await replicated(c)
        assert await c.stop(slave) == 0
        bad = flip_a_body_byte(tmp_path / "slave", 900)
        slave = await c.slave(master, "slave", "--repair-from", master.ready["broker"])
        assert f"repaired [{bad}, " in slave.text()
        status = await status_of(slave)
        assert status.max_offset == end and not status.damaged_ranges
        assert await c.stop(slave) == 0
        assert await c.stop(master) == 0
    assert_identical(tmp_path)


async def test_a_serving_master_repairs_damage_found_in_a_transfer_from_its_slave(
    tmp_path: Path,
) -> None:
    (port,) = free_ports(1)
    async with cluster(tmp_path) as c:
        master = await c.master("master", "--full-sync", "--repair-from", f"127.0.0.1:{port}")
        first = await c.slave(master, "slave", "--listen", f"127.0.0.1:{port}")
        await wait_until(lambda: connected_slaves(master))
        async with connect(master) as client:
            assert await put_many(client, 1500) == 1500
        await wait_until(lambda: in_sync(master, first))
        bad = flip_a_body_byte(tmp_path / "master", 300)  # under the running master
        # a new slave reads from 0: the master finds the damage, marks it, repairs it from
        # the first slave and goes on; the new slave gets every byte
        second = await c.slave(master, "slave2")
        await wait_until(lambda: in_sync(master, first, second), 30)
        assert f"repaired [{bad}, " in master.text()
        assert not (await status_of(master)).damaged_ranges
        for proc in (second, first, master):
            assert await c.stop(proc) == 0
    assert_identical(tmp_path)
    assert_identical(tmp_path, slave="slave2")
