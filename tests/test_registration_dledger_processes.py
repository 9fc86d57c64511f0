"""Three ``hanet dledger --namesrv`` processes and ``hanet namesrv``: the routes name the
leader as broker id 0 and the followers as slaves; after the leader's kill -9 the new leader
takes id 0, so a client that looks the route up (hanet's, and RocketMQ's C++ client when it is
installed) sends to it."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import trio
from interop_support import cpp_client_available, cpp_command, run_driver

from hanet.client import BrokerClient, NameServerClient, RemotingError
from hanet.testing import HanetProcess, HanetProcesses, free_ports

pytestmark = pytest.mark.slow

IDS = ("n0", "n1", "n2")
SMALL = ("--data-file-size", "1M", "--index-file-size", "64K", "--mapped-file-size", "1M")


async def group_members(names: NameServerClient) -> dict[int, str]:
    """broker id -> address of broker name ``g`` as the name server lists it."""
    try:
        cluster = await names.cluster()
    except RemotingError:
        return {}
    return {broker_id: address for _, name, broker_id, address in cluster.members() if name == "g"}


async def wait_members(names: NameServerClient, check: Any, what: str) -> dict[int, str]:
    seen: dict[int, str] = {}
    with trio.move_on_after(20):
        while not check(seen := await group_members(names)):  # noqa: ASYNC110
            await trio.sleep(0.1)
        return seen
    raise AssertionError(f"{what}: the name server lists {seen}")


async def put_through_the_route(names: NameServerClient, body: bytes) -> str:
    """A put where the route of ``TopicTest`` says (the master, id 0); returns its address."""
    (address,) = await names.put_addresses("TopicTest")
    async with BrokerClient.connect(*address) as client:
        assert (await client.put("TopicTest", body)).ok
    return f"{address[0]}:{address[1]}"


async def test_the_routes_follow_the_dledger_leader(tmp_path: Path) -> None:
    ports = free_ports(6)
    peers = ",".join(f"{i}=127.0.0.1:{ports[k]}" for k, i in enumerate(IDS))
    brokers = {i: f"127.0.0.1:{ports[3 + k]}" for k, i in enumerate(IDS)}
    closing = HanetProcesses(tmp_path, close_signal=signal.SIGTERM)  # a clean stop at the end
    with closing:
        namesrv = await closing.start("namesrv", "namesrv", "--listen", "127.0.0.1:0")
        ready = namesrv.ready
        names = NameServerClient([namesrv.address("namesrv")])
        nodes: dict[str, HanetProcess] = {}
        for node_id in IDS:
            group = (
                "--group",
                "g",
                "--id",
                node_id,
                "--peers",
                peers,
                "--namesrv",
                ready["namesrv"],
            )
            node = ("--store", str(tmp_path / node_id), "--listen", brokers[node_id])
            timeout = ("--election-timeout", "0.5")
            nodes[node_id] = await closing.start(
                node_id, "dledger", *group, *node, *timeout, *SMALL
            )
        followers = {1: brokers["n0"], 2: brokers["n1"], 3: brokers["n2"]}

        def settled(seen: dict[int, str]) -> bool:
            leader = seen.get(0)
            return leader is not None and {k: v for k, v in seen.items() if k} == {
                k: v for k, v in followers.items() if v != leader
            }

        seen = await wait_members(names, settled, "a leader at id 0, the others at theirs")
        first = seen[0]
        assert await put_through_the_route(names, b"before") == first
        # kill -9 of the leader: the next leader registers as id 0 at once.
        (killed,) = [i for i in IDS if brokers[i] == first]
        await nodes[killed].kill()
        seen = await wait_members(
            names, lambda m: m.get(0) not in (None, first), "a new leader at id 0"
        )
        second = seen[0]
        assert await put_through_the_route(names, b"after") == second
        if cpp_client_available():  # RocketMQ's C++ client finds the new leader too
            out = await run_driver(
                cpp_command("produce", ready["namesrv"], "TopicTest", count=5, prefix="cpp"),
                timeout=40,
            )
            sent = out.events("sent")
            assert out.returncode == 0 and not out.events("send_error"), (out, out.stderr)
            assert {line["status"] for line in sent} == {"SEND_OK"} and len(sent) == 5
        # Every node that is up still serves its status; the leader took the sends.
        host, port = second.rpartition(":")[::2]
        async with BrokerClient.connect(host, int(port)) as client:
            status = await client.status()
        assert status.role == "LEADER" and status.cluster is not None
        assert status.cluster.broker_id == 0
