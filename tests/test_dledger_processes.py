"""Three ``hanet dledger`` processes on loopback: puts through the leader, SIGKILL of the
leader, a new leader, no acknowledged message lost, the restarted node catching up."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from hanet.client import (
    BrokerClient,
    BrokerRequestError,
    FailoverClient,
    PutStatus,
)
from hanet.store import CommitLogReader, compare_commit_logs
from hanet.testing import HanetProcesses, free_ports

pytestmark = pytest.mark.slow

IDS = ("n0", "n1", "n2")
ELECTION = 0.5
SMALL = ["--data-file-size", "1M", "--index-file-size", "64K", "--mapped-file-size", "1M"]


class Group(HanetProcesses):
    """Three ``hanet dledger`` nodes on fixed ports (a restarted node keeps its addresses)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        ports = free_ports(6)
        self.peer = {i: f"127.0.0.1:{ports[k]}" for k, i in enumerate(IDS)}
        self.broker = {i: ("127.0.0.1", ports[3 + k]) for k, i in enumerate(IDS)}
        peers = ",".join(f"{i}={a}" for i, a in self.peer.items())
        for node_id, (host, port) in self.broker.items():
            group = ("--group", "g", "--id", node_id, "--peers", peers)
            node = ("--store", str(root / node_id), "--listen", f"{host}:{port}")
            timeout = ("--election-timeout", str(ELECTION))
            self.add(node_id, "dledger", *group, *node, *timeout, *SMALL)

    def log(self, node_id: str) -> str:
        return self[node_id].text(0)

    def kill(self, node_id: str) -> None:
        self[node_id].send_signal(signal.SIGKILL)

    async def start_node(self, node_id: str) -> None:
        await self[node_id].start()

    async def status(self, node_id: str) -> dict[str, Any]:
        host, port = self.broker[node_id]
        async with BrokerClient.connect(host, port, connect_timeout=2, request_timeout=2) as c:
            return (await c.status()).to_json()

    async def leader(self, among: tuple[str, ...] = IDS) -> str:
        with trio.fail_after(20):
            while True:
                roles = {}
                for i in among:
                    try:
                        roles[i] = (await self.status(i))["dledger"]
                    except Exception:
                        continue
                leaders = [i for i, d in roles.items() if d["role"] == "LEADER"]
                if len(leaders) == 1:
                    return leaders[0]
                await trio.sleep(0.05)


async def hanet(*argv: str) -> subprocess.CompletedProcess[bytes]:
    """``hanet <argv>`` to its end, its output captured."""
    command = [sys.executable, "-m", "hanet", *argv]
    return await trio.run_process(command, capture_stdout=True, capture_stderr=True, check=False)


async def test_kill_the_leader_under_puts(tmp_path: Path) -> None:
    group = Group(tmp_path)
    acked: list[bytes] = []
    try:
        for node_id in IDS:
            await group.start_node(node_id)
        leader = await group.leader()
        follower = next(i for i in IDS if i != leader)
        # a follower refuses a put SERVICE_NOT_AVAILABLE, naming the leader's broker port
        host, port = group.broker[follower]
        async with BrokerClient.connect(host, port) as direct:
            refused = await direct.put("T", b"direct")
            assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
            assert "{}:{}".format(*group.broker[leader]) in refused.detail
        status = await group.status(leader)
        assert status["role"] == "LEADER" and status["dledger"]["group"] == "g"
        assert {p["id"] for p in status["dledger"]["peers"]} == set(IDS) - {leader}

        # the client is given a follower first, and the dead leader's address stays in the list
        order = [group.broker[follower], *(group.broker[i] for i in IDS if i != follower)]
        async with FailoverClient.connect(order, retry_for=20, request_timeout=5) as client:
            for n in range(50):
                reply = await client.put("T", b"m%d" % n)
                assert reply.status is PutStatus.PUT_OK, reply
                acked.append(b"m%d" % n)
            assert client.redirects >= 1
            killed_at = trio.current_time()
            group.kill(leader)
            first_after: float | None = None
            for n in range(50, 100):
                try:
                    reply = await client.put("T", b"m%d" % n)
                except BrokerRequestError:  # an unknown outcome: not acknowledged
                    continue
                if reply.status is PutStatus.PUT_OK:
                    acked.append(b"m%d" % n)
                    if first_after is None:
                        first_after = trio.current_time() - killed_at
        assert first_after is not None and first_after < 6 * ELECTION + 2, first_after
        new_leader = await group.leader(tuple(i for i in IDS if i != leader))
        assert new_leader != leader
        # `hanet put` and `hanet status` with a list whose first address is down
        addresses = ",".join("{}:{}".format(*group.broker[i]) for i in (leader, *IDS))
        via_cli = ("--topic", "T", "--body", "via-cli", "--timeout", "10")
        put = await hanet("put", "--broker", addresses, *via_cli)
        assert put.returncode == 0, put.stderr.decode()
        assert put.stdout.startswith(b"PUT_OK"), put.stdout
        acked.append(b"via-cli")
        shown = await hanet("status", "--broker", addresses, "--json")
        assert shown.returncode == 0, shown.stderr.decode()
        document = json.loads(shown.stdout)
        assert document["role"] in ("LEADER", "FOLLOWER", "CANDIDATE")
        assert {"group", "id", "role", "term", "leader", "commit_index", "peers"} <= set(
            document["dledger"]
        )
        await group.start_node(leader)  # the old leader restarts and catches up
        with trio.fail_after(20):
            while True:
                states = [(await group.status(i))["dledger"] for i in IDS]
                if len({(s["applied_index"], s["last_index"]) for s in states}) == 1:
                    break
                await trio.sleep(0.1)
    finally:
        await group.stop_all()
    bodies = {}
    for node_id in IDS:
        reader = CommitLogReader(tmp_path / node_id / "commitlog")
        bodies[node_id] = [record.body for _, record in reader.records()]
    for node_id in IDS:
        assert set(acked) <= set(bodies[node_id]), node_id
        assert bodies[node_id] == bodies["n0"]
    for other in IDS[1:]:
        assert compare_commit_logs(tmp_path / "n0", tmp_path / other).identical

    def data(node_id: str) -> bytes:
        files = sorted((tmp_path / node_id / "dledger" / "data").iterdir())
        return b"".join(p.read_bytes() for p in files)

    assert data("n0") == data("n1") == data("n2")  # the committed logs, byte-identical
    for node_id in IDS:
        verified = await hanet("verify", str(tmp_path / node_id))
        assert verified.returncode == 0, verified.stdout + verified.stderr
    print(json.dumps({"first_put_after_kill_s": round(first_after, 3), "acked": len(acked)}))


async def test_a_node_keeps_the_offsets_committed_to_it_across_a_restart(tmp_path: Path) -> None:
    group = Group(tmp_path)
    try:
        await group.start_node("n0")  # alone: no leader, but its broker port serves offsets
        async with BrokerClient.connect(*group.broker["n0"]) as client:
            await client.commit_offset("g", "T", 2, 17)
        assert await group["n0"].stop() == 0
        saved = json.loads((tmp_path / "n0" / "config" / "consumerOffset.json").read_text())
        assert saved == {"offsetTable": {"T@g": {"2": 17}}}
        await group.start_node("n0")
        async with BrokerClient.connect(*group.broker["n0"]) as client:
            assert await client.query_offset("g", "T", 2) == 17
            # Never committed, and the queue's start (it is empty) counts as in memory: 0, as
            # 4.9.8's ConsumerManageProcessor answers, not QUERY_NOT_FOUND.
            assert await client.query_offset("g", "T", 0) == 0
    finally:
        await group.stop_all()
