"""Registration as real processes: ``hanet master`` started before its name server is
registered within seconds of ``hanet namesrv`` coming up (not at the next 30 s round), a
broker given two name servers as RocketMQ writes them (``A;B``) registers with both, and a
clean stop (SIGTERM) unregisters from both."""

from __future__ import annotations

import re

import pytest
import trio

from hanet.client import NameServerClient, RemotingError
from hanet.testing import HanetProcess, HanetProcesses, free_ports

pytestmark = pytest.mark.slow


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


MASTER = ["--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--mapped-file-size", "1M"]


def master(processes: HanetProcesses, namesrv: str) -> HanetProcess:
    store = str(processes.root / "m")
    return processes.add("master", "master", "--store", store, *MASTER, "--namesrv", namesrv)


async def test_a_broker_started_before_its_name_server_registers_within_seconds(
    processes: HanetProcesses,
) -> None:
    (port,) = free_ports(1)
    broker = master(processes, f"127.0.0.1:{port}")
    namesrv = processes.add("namesrv", "namesrv", "--listen", f"127.0.0.1:{port}")
    await broker.start()
    await trio.sleep(3)  # the broker retries meanwhile (0.5, 1, 2 s ...)
    await namesrv.start()
    # Well before the next 30 s round: the back-off is at most 5 s.
    await wait_members(port, [("broker-a", 0)], within=15)
    assert "cannot register DefaultCluster/broker-a id 0" in broker.text()
    assert await broker.stop() == 0
    await wait_members(port, [], within=5)


async def test_two_name_servers_as_rocketmq_writes_them_and_unregister_on_stop(
    processes: HanetProcesses,
) -> None:
    a, b = free_ports(2)
    first = await processes.start("ns-a", "namesrv", "--listen", f"127.0.0.1:{a}")
    second = await processes.start("ns-b", "namesrv", "--listen", f"127.0.0.1:{b}")
    broker = master(processes, f"127.0.0.1:{a};127.0.0.1:{b}")
    await broker.start()
    await wait_members(a, [("broker-a", 0)], within=10)
    await wait_members(b, [("broker-a", 0)], within=10)
    assert await broker.stop() == 0
    assert await members(a) == [] and await members(b) == []
    for ns in (first, second):  # UNREGISTER_BROKER, before the connection closed
        text = ns.text()
        assert re.search(r"broker DefaultCluster/broker-a/0 at 127\.0\.0\.1:\d+ unregistered", text)
        assert "its connection closed" not in text
    assert "unregistered from the name servers (2 of 2)" in broker.text()
