"""Registration as real processes: ``hanet master`` started before its name server is
registered within seconds of ``hanet namesrv`` coming up (not at the next 30 s round), a
broker given two name servers as RocketMQ writes them (``A;B``) registers with both, and a
clean stop (SIGTERM) unregisters from both."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from hanet.client import NameServerClient, RemotingError
from hanet.testing import free_ports

pytestmark = pytest.mark.slow


class Service:
    """A ``hanet`` verb as a subprocess, ready once its ready file is written."""

    def __init__(self, root: Path, name: str, *argv: str) -> None:
        self.root = root
        self.name = name
        self.argv = argv
        self.process: trio.Process | None = None
        self.ready: dict[str, Any] = {}

    @property
    def log(self) -> Path:
        return self.root / f"{self.name}.log"

    async def start(self) -> dict[str, Any]:
        ready = self.root / f"{self.name}.ready"
        with self.log.open("wb") as out:
            self.process = await trio.lowlevel.open_process(
                [sys.executable, "-m", "hanet", *self.argv, "--ready-file", str(ready)],
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

    async def stop(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        with trio.fail_after(15):
            return await self.process.wait()

    async def close(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            with trio.CancelScope(shield=True):
                await self.process.wait()


async def members(port: int) -> list[tuple[str, int]]:
    """``(broker name, id)`` of each broker the name server on ``port`` lists."""
    try:
        info = await NameServerClient([("127.0.0.1", port)], timeout=2.0).cluster()
    except RemotingError:
        return []
    return [(name, broker_id) for _, name, broker_id, _ in info.members()]


async def wait_members(port: int, expected: list[tuple[str, int]], within: float) -> None:
    seen: list[tuple[str, int]] = []
    with trio.move_on_after(within):
        while (seen := await members(port)) != expected:  # noqa: ASYNC110 - another process
            await trio.sleep(0.1)
        return
    raise AssertionError(f"name server :{port} lists {seen}, expected {expected}")


def master(root: Path, namesrv: str) -> Service:
    return Service(
        root, "master", "master", "--store", str(root / "m"), "--listen", "127.0.0.1:0",
        "--ha-listen", "127.0.0.1:0", "--mapped-file-size", "1M", "--namesrv", namesrv,
    )  # fmt: skip


async def test_a_broker_started_before_its_name_server_registers_within_seconds(
    tmp_path: Path,
) -> None:
    (port,) = free_ports(1)
    broker = master(tmp_path, f"127.0.0.1:{port}")
    namesrv = Service(tmp_path, "namesrv", "namesrv", "--listen", f"127.0.0.1:{port}")
    try:
        await broker.start()
        await trio.sleep(3)  # the broker retries meanwhile (0.5, 1, 2 s ...)
        await namesrv.start()
        # Well before the next 30 s round: the back-off is at most 5 s.
        await wait_members(port, [("broker-a", 0)], within=15)
        assert "cannot register DefaultCluster/broker-a id 0" in broker.log.read_text()
        assert await broker.stop() == 0
        await wait_members(port, [], within=5)
    finally:
        await broker.close()
        await namesrv.close()


async def test_two_name_servers_as_rocketmq_writes_them_and_unregister_on_stop(
    tmp_path: Path,
) -> None:
    a, b = free_ports(2)
    first = Service(tmp_path, "ns-a", "namesrv", "--listen", f"127.0.0.1:{a}")
    second = Service(tmp_path, "ns-b", "namesrv", "--listen", f"127.0.0.1:{b}")
    broker = master(tmp_path, f"127.0.0.1:{a};127.0.0.1:{b}")
    try:
        await first.start()
        await second.start()
        await broker.start()
        await wait_members(a, [("broker-a", 0)], within=10)
        await wait_members(b, [("broker-a", 0)], within=10)
        assert await broker.stop() == 0
        assert await members(a) == [] and await members(b) == []
        for ns in (first, second):  # UNREGISTER_BROKER, before the connection closed
            text = ns.log.read_text()
            assert re.search(
                r"broker DefaultCluster/broker-a/0 at 127\.0\.0\.1:\d+ unregistered", text
            )
            assert "its connection closed" not in text
        assert "unregistered from the name servers (2 of 2)" in broker.log.read_text()
    finally:
        await broker.close()
        await first.close()
        await second.close()
