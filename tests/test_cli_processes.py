"""Real processes over loopback TCP: ``hanet master`` and ``hanet slave`` as subprocesses.

Short heartbeat, housekeeping and reconnect intervals keep each test well under 20 s. Every
subprocess is killed in ``finally`` whatever happens.
"""

from __future__ import annotations

import re
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from hanet.client import BrokerClient, BrokerStatus, PutMessage, PutStatus
from hanet.store import compare_commit_logs
from hanet.testing import HanetProcess, HanetProcesses, wait_until

pytestmark = pytest.mark.slow

FILE = 256 * 1024
FAST = ["--heartbeat-interval", "0.5", "--housekeeping-interval", "5"]


MASTER = ["--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0"]
SMALL = ["--mapped-file-size", str(FILE), *FAST]


async def start_master(processes: HanetProcesses, *extra: str) -> HanetProcess:
    """``hanet master`` on ``<root>/master``, ``extra`` last; its first run (started)."""
    store = ["--store", str(processes.root / "master")]
    return await processes.start("master", "master", *store, *MASTER, *SMALL, *extra)


async def start_slave(processes: HanetProcesses, master: HanetProcess) -> HanetProcess:
    """``hanet slave`` on ``<root>/slave`` following ``master``, started."""
    store = ["--store", str(processes.root / "slave"), "--master-ha", master.ready["ha"]]
    retry = ["--listen", "127.0.0.1:0", "--reconnect-interval", "0.2"]
    return await processes.start("slave", "slave", *store, *retry, *SMALL)


async def replicating(
    processes: HanetProcesses, *master_flags: str
) -> tuple[HanetProcess, HanetProcess]:
    """A master (``master_flags`` last) and a slave, once the slave is connected."""
    master = await start_master(processes, *master_flags)
    slave = await start_slave(processes, master)
    await wait_until(lambda: connected_slaves(master))
    return master, slave


@asynccontextmanager
async def connect(proc: HanetProcess) -> AsyncIterator[BrokerClient]:
    async with BrokerClient.connect(*proc.address()) as client:
        yield client


async def status_of(proc: HanetProcess) -> BrokerStatus:
    async with connect(proc) as client:
        return await client.status()


async def connected_slaves(master: HanetProcess) -> int:
    return sum(1 for s in (await status_of(master)).slaves if s.ack_offset >= 0)


async def in_sync(master: HanetProcess, *slaves: HanetProcess) -> bool:
    target = (await status_of(master)).max_offset
    for slave in slaves:
        if (await status_of(slave)).max_offset != target:
            return False
    return True


async def put_many(client: BrokerClient, count: int, *, batch: int = 50, workers: int = 8) -> int:
    """Put ``count`` numbered messages in batches from ``workers`` tasks; returns PUT_OKs."""
    next_index = 0
    ok = 0

    async def worker() -> None:
        nonlocal next_index, ok
        while next_index < count:
            start, next_index = next_index, min(next_index + batch, count)
            messages = [
                PutMessage("ProcTopic", b"message %06d " % i + b"." * (i % 200), tags="t")
                for i in range(start, next_index)
            ]
            replies = await client.put_batch(messages)
            ok += sum(1 for r in replies if r.status is PutStatus.PUT_OK)

    async with trio.open_nursery() as nursery:
        for _ in range(workers):
            nursery.start_soon(worker)
    return ok


def assert_identical(root: Path, master: str = "master", slave: str = "slave") -> None:
    comparison = compare_commit_logs(root / master, root / slave)
    assert comparison.identical, comparison.mismatch
    assert comparison.files > 1  # the run crossed files


async def test_10000_puts_replicated_byte_for_byte(
    processes: HanetProcesses, tmp_path: Path
) -> None:
    master, slave = await replicating(processes, "--role", "SYNC_MASTER", "--full-sync")
    async with connect(master) as client:
        assert await put_many(client, 10_000) == 10_000
        master_pull = await client.pull("ProcTopic", 1, 0, 100)
    await wait_until(lambda: in_sync(master, slave))
    async with connect(slave) as client:
        slave_pull = await client.pull("ProcTopic", 1, 0, 100)
    assert slave_pull.messages == master_pull.messages and len(slave_pull.messages) == 100
    assert await slave.stop() == 0
    assert await master.stop() == 0
    assert_identical(tmp_path)
    assert not (tmp_path / "master" / "abort").exists()
    assert not (tmp_path / "slave" / "abort").exists()


async def test_slave_killed_and_restarted_resumes_where_it_was(
    processes: HanetProcesses, tmp_path: Path
) -> None:
    master, slave = await replicating(processes, "--full-sync")
    stop = trio.Event()
    async with connect(master) as client, trio.open_nursery() as nursery:

        async def produce() -> None:
            while not stop.is_set():  # puts go on during the kill and the restart
                assert await put_many(client, 400, batch=20, workers=4) == 400

        nursery.start_soon(produce)

        async def slave_has_data() -> bool:
            return (await status_of(slave)).max_offset > 3 * FILE

        await wait_until(slave_has_data)
        assert await slave.stop(signal.SIGKILL) == -signal.SIGKILL
        assert (tmp_path / "slave" / "abort").exists()  # a crash, not a clean stop
        await trio.sleep(0.3)  # the master goes on storing meanwhile
        await slave.start()
        await wait_until(lambda: connected_slaves(master))
        await trio.sleep(0.3)
        stop.set()
    await wait_until(lambda: in_sync(master, slave))
    assert await slave.stop() == 0
    assert await master.stop() == 0
    reported = re.findall(r"reporting max offset (\d+)", slave.text())
    requested = re.findall(r"requests offset (\d+); transfer starts at (\d+)", master.text())
    resumed_at = int(reported[0])
    assert resumed_at > 3 * FILE
    assert (str(resumed_at), str(resumed_at)) in requested  # served from exactly there
    assert "not equal the max phy offset" not in slave.text()
    assert_identical(tmp_path)


async def test_master_restart_slave_reconnects_and_catches_up(
    processes: HanetProcesses, tmp_path: Path
) -> None:
    master, slave = await replicating(processes, "--full-sync")
    async with connect(master) as client:
        assert await put_many(client, 2000) == 2000
    await wait_until(lambda: in_sync(master, slave))
    assert await master.stop() == 0
    await master.start("--listen", master.ready["broker"], "--ha-listen", master.ready["ha"])
    await wait_until(lambda: connected_slaves(master))
    async with connect(master) as client:
        assert await put_many(client, 2000) == 2000
    await wait_until(lambda: in_sync(master, slave))
    link = (await status_of(slave)).master
    assert link is not None and link.connected and link.connects == 2
    assert await slave.stop() == 0
    assert await master.stop() == 0
    assert_identical(tmp_path)


async def test_garbage_to_the_ha_port_closes_only_that_connection(
    processes: HanetProcesses, tmp_path: Path
) -> None:
    master, slave = await replicating(processes, "--full-sync")
    for garbage in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\xff" * 108):
        assert await exchange(*master.address("ha"), garbage) == b""  # closed, never served
    async with connect(master) as client:
        assert await put_many(client, 3000) == 3000
    await wait_until(lambda: in_sync(master, slave))
    status = await status_of(master)
    assert len(status.slaves) == 1 and status.slaves[0].ack_offset == status.max_offset
    assert len(status.closed_slaves) == 2
    first, second = status.closed_slaves
    assert "outside the master's" in first.state  # a report beyond the data: refused
    assert second.state.startswith("closed: ") and second.ack_offset == -1  # never served
    link = (await status_of(slave)).master
    assert link is not None and link.connects == 1  # the real slave was never cut off
    assert await slave.stop() == 0
    assert await master.stop() == 0
    assert_identical(tmp_path)


async def exchange(host: str, port: int, data: bytes) -> bytes:
    """Send ``data`` and read until the peer closes (or resets) the connection."""
    received = b""
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        await stream.send_all(data)
        with trio.fail_after(10):
            try:
                while chunk := await stream.receive_some():
                    received += chunk
            except trio.BrokenResourceError:
                pass  # closed with our garbage unread: a reset
    return received


async def test_ctrl_c_shuts_a_broker_down_cleanly(
    processes: HanetProcesses, tmp_path: Path
) -> None:
    master = await start_master(processes)
    async with connect(master) as client:
        assert (await client.put("T", b"x")).ok
    assert (tmp_path / "master" / "abort").exists()
    status = await master.stop(signal.SIGINT)
    assert status == 130, master.text()
    assert not (tmp_path / "master" / "abort").exists()
    assert "interrupted, shut down cleanly" in master.text()
    assert "Traceback" not in master.text()
