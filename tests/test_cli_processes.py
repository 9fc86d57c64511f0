"""Real processes over loopback TCP: ``hanet master`` and ``hanet slave`` as subprocesses.

Short heartbeat, housekeeping and reconnect intervals keep each test well under 20 s. Every
subprocess is killed in ``finally`` whatever happens.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from hanet.client import BrokerClient, BrokerStatus, PutMessage, PutStatus
from hanet.store import compare_commit_logs

pytestmark = pytest.mark.slow

FILE = 256 * 1024
FAST = ["--heartbeat-interval", "0.5", "--housekeeping-interval", "5"]


@attrs.define(eq=False)
class Proc:
    name: str
    process: trio.Process
    log: Path
    ready: dict[str, Any]

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    return data


class Cluster:
    """Starts ``hanet`` subprocesses; :meth:`close` kills whatever still runs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[Proc] = []
        self._count = 0

    async def start(self, name: str, *argv: str) -> Proc:
        self._count += 1
        log = self.root / f"{name}-{self._count}.log"
        ready = self.root / f"{name}-{self._count}.ready"
        with log.open("wb") as out:
            process = await trio.lowlevel.open_process(
                [sys.executable, "-m", "hanet", *argv, "--ready-file", str(ready)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )
        proc = Proc(name, process, log, {})
        self.procs.append(proc)
        with trio.fail_after(15):
            while (data := _read_json(ready)) is None:
                assert process.returncode is None, f"{name} exited: {proc.text()}"
                await trio.sleep(0.02)
        proc.ready = data
        return proc

    async def master(self, store: str = "master", *extra: str) -> Proc:
        return await self.start(
            "master", "master", "--store", str(self.root / store),
            "--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0",
            "--mapped-file-size", str(FILE), *FAST, *extra,
        )  # fmt: skip

    async def slave(self, master: Proc, store: str = "slave", *extra: str) -> Proc:
        return await self.start(
            "slave", "slave", "--store", str(self.root / store), "--master-ha", master.ready["ha"],
            "--listen", "127.0.0.1:0", "--mapped-file-size", str(FILE), *FAST,
            "--reconnect-interval", "0.2", *extra,
        )  # fmt: skip

    async def stop(self, proc: Proc, sig: int = signal.SIGTERM) -> int:
        if proc.process.returncode is None:
            proc.process.send_signal(sig)
        with trio.fail_after(10):
            return await proc.process.wait()

    async def close(self) -> None:
        with trio.CancelScope(shield=True):
            for proc in self.procs:
                if proc.process.returncode is None:
                    proc.process.kill()
                await proc.process.wait()


@asynccontextmanager
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        await c.close()


@asynccontextmanager
async def connect(proc: Proc) -> AsyncIterator[BrokerClient]:
    host, _, port = proc.ready["broker"].rpartition(":")
    async with BrokerClient.connect(host, int(port)) as client:
        yield client


async def wait_for(check: Callable[[], Awaitable[bool]], seconds: float = 15) -> None:
    with trio.fail_after(seconds):
        while not await check():  # noqa: ASYNC110 - polls other processes
            await trio.sleep(0.02)


async def status_of(proc: Proc) -> BrokerStatus:
    async with connect(proc) as client:
        return await client.status()


async def connected_slaves(master: Proc) -> int:
    return sum(1 for s in (await status_of(master)).slaves if s.ack_offset >= 0)


async def in_sync(master: Proc, *slaves: Proc) -> bool:
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


async def test_10000_puts_replicated_byte_for_byte(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        master = await c.master("master", "--role", "SYNC_MASTER", "--full-sync")
        slave = await c.slave(master)
        await wait_for(lambda: _truthy(connected_slaves(master)))
        async with connect(master) as client:
            assert await put_many(client, 10_000) == 10_000
            master_pull = await client.pull("ProcTopic", 1, 0, 100)
        await wait_for(lambda: in_sync(master, slave))
        async with connect(slave) as client:
            slave_pull = await client.pull("ProcTopic", 1, 0, 100)
        assert slave_pull.messages == master_pull.messages and len(slave_pull.messages) == 100
        assert await c.stop(slave) == 0
        assert await c.stop(master) == 0
    assert_identical(tmp_path)
    assert not (tmp_path / "master" / "abort").exists()
    assert not (tmp_path / "slave" / "abort").exists()


async def _truthy(value: Awaitable[int]) -> bool:
    return bool(await value)


async def test_slave_killed_and_restarted_resumes_where_it_was(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        master = await c.master("master", "--full-sync")
        slave = await c.slave(master)
        await wait_for(lambda: _truthy(connected_slaves(master)))
        stop = trio.Event()
        async with connect(master) as client, trio.open_nursery() as nursery:

            async def produce() -> None:
                while not stop.is_set():  # puts go on during the kill and the restart
                    assert await put_many(client, 400, batch=20, workers=4) == 400

            nursery.start_soon(produce)

            async def slave_has_data() -> bool:
                return (await status_of(slave)).max_offset > 3 * FILE

            await wait_for(slave_has_data)
            assert await c.stop(slave, signal.SIGKILL) == -signal.SIGKILL
            assert (tmp_path / "slave" / "abort").exists()  # a crash, not a clean stop
            await trio.sleep(0.3)  # the master goes on storing meanwhile
            slave = await c.slave(master)
            await wait_for(lambda: _truthy(connected_slaves(master)))
            await trio.sleep(0.3)
            stop.set()
        await wait_for(lambda: in_sync(master, slave))
        assert await c.stop(slave) == 0
        assert await c.stop(master) == 0
    reported = re.findall(r"reporting max offset (\d+)", slave.text())
    requested = re.findall(r"requests offset (\d+); transfer starts at (\d+)", master.text())
    resumed_at = int(reported[0])
    assert resumed_at > 3 * FILE
    assert (str(resumed_at), str(resumed_at)) in requested  # served from exactly there
    assert "not equal the max phy offset" not in slave.text()
    assert_identical(tmp_path)


async def test_master_restart_slave_reconnects_and_catches_up(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        master = await c.master(
            "master", "--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--full-sync"
        )
        slave = await c.slave(master)
        await wait_for(lambda: _truthy(connected_slaves(master)))
        async with connect(master) as client:
            assert await put_many(client, 2000) == 2000
        await wait_for(lambda: in_sync(master, slave))
        assert await c.stop(master) == 0
        master = await c.master(
            "master", "--listen", master.ready["broker"], "--ha-listen", master.ready["ha"]
        )
        await wait_for(lambda: _truthy(connected_slaves(master)))
        async with connect(master) as client:
            assert await put_many(client, 2000) == 2000
        await wait_for(lambda: in_sync(master, slave))
        link = (await status_of(slave)).master
        assert link is not None and link.connected and link.connects == 2
        assert await c.stop(slave) == 0
        assert await c.stop(master) == 0
    assert_identical(tmp_path)


async def test_garbage_to_the_ha_port_closes_only_that_connection(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        master = await c.master("master", "--full-sync")
        slave = await c.slave(master)
        await wait_for(lambda: _truthy(connected_slaves(master)))
        host, _, port = master.ready["ha"].rpartition(":")
        for garbage in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\xff" * 108):
            assert await exchange(host, int(port), garbage) == b""  # closed, never served
        async with connect(master) as client:
            assert await put_many(client, 3000) == 3000
        await wait_for(lambda: in_sync(master, slave))
        status = await status_of(master)
        assert len(status.slaves) == 1 and status.slaves[0].ack_offset == status.max_offset
        assert len(status.closed_slaves) == 2
        first, second = status.closed_slaves
        assert "outside the master's" in first.state  # a report beyond the data: refused
        assert second.state.startswith("closed: ") and second.ack_offset == -1  # never served
        link = (await status_of(slave)).master
        assert link is not None and link.connects == 1  # the real slave was never cut off
        assert await c.stop(slave) == 0
        assert await c.stop(master) == 0
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


async def test_ctrl_c_shuts_a_broker_down_cleanly(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        master = await c.master()
        async with connect(master) as client:
            assert (await client.put("T", b"x")).ok
        assert (tmp_path / "master" / "abort").exists()
        status = await c.stop(master, signal.SIGINT)
        assert status == 130, master.text()
    assert not (tmp_path / "master" / "abort").exists()
    assert "interrupted, shut down cleanly" in master.text()
    assert "Traceback" not in master.text()
