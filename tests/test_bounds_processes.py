"""Unfinished frames against real processes (issue 20, item 3).

- 60 connections each send ~8 MiB of a frame they never finish to a ``hanet master``'s broker
  port. Without a budget (``--max-partial-bytes 0``, what hanet did before) the broker holds
  every byte (+430 to +516 MiB in the test's 4 s; an honest producer made 13-64 puts
  meanwhile against 125-165 with the budget); with the default 64 MiB budget its peak
  resident memory grows by the budget plus a margin, and an honest producer's puts succeed
  meanwhile.
- Six connections each send most of a 250 MiB frame to a ``hanet dledger`` node's peer port
  (from a member's host: plain TCP admits it): without a budget the node holds all it is sent
  (470-990 MiB in the test's 4 s, 1.3 GiB given the time); with it, it grows by the budget plus
  a margin, and puts to the group succeed meanwhile.

Command: ``.venv/bin/pytest -q tests/test_bounds_processes.py``.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Any

import pytest
import trio

from hanet.client import BrokerClient, PutStatus
from hanet.testing import HanetProcesses

pytestmark = pytest.mark.slow

MIB = 1 << 20
BUDGET = 64 * MIB
MARGIN = 64 * MIB
"""Beyond the budget: a read per waiting connection (256 KiB each, 52 of them here), the
receive buffer's chunks, the allocator's slack from growing buffers (measured: the broker
+98 to +109 MiB in all, the DLedger node +71 MiB)."""


def _memory(pid: int) -> tuple[int, int]:
    """(resident, peak resident) bytes of process ``pid``."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024
    return fields["VmRSS"], fields["VmHWM"]


async def _unfinished(
    address: tuple[str, int],
    length: int,
    sent: int,
    streams: list[Any],
    local_address: str | None = None,
) -> None:
    """Open a connection and send the first ``sent`` bytes of a frame of ``length``."""
    stream = await trio.open_tcp_stream(*address, local_address=local_address)
    streams.append(stream)
    chunk = b"\0" * MIB
    data_left = sent - 4
    try:
        await stream.send_all(struct.pack(">I", length))
        while data_left > 0:
            n = min(data_left, len(chunk))
            await stream.send_all(chunk[:n])
            data_left -= n
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # closed by the server: what the budget does to frames held too long


async def _attack(
    address: tuple[str, int],
    pid: int,
    *,
    connections: int,
    length: int,
    seconds: float,
    honest: tuple[str, int],
    topic: str,
    local_address: str | None = None,
) -> tuple[int, int]:
    """Run the attack for ``seconds`` while an honest producer puts; returns the growth of
    the target's peak resident memory and the honest puts that succeeded."""
    rss_before, _ = _memory(pid)
    streams: list[Any] = []
    ok = 0
    async with trio.open_nursery() as nursery:
        for _ in range(connections):
            nursery.start_soon(_unfinished, address, length, length - 1, streams, local_address)
        with trio.move_on_after(seconds):
            async with BrokerClient.connect(*honest, request_timeout=5.0) as client:
                while True:
                    reply = await client.put(topic, b"honest message")
                    # without a budget a put may time out under the attack: count the good ones
                    ok += reply.status is PutStatus.PUT_OK
                    await trio.sleep(0.02)
        _, peak = _memory(pid)
        nursery.cancel_scope.cancel()
    for stream in streams:
        await stream.aclose()
    return peak - rss_before, ok


@pytest.mark.parametrize("budget", ["0", None], ids=["no-budget", "default-budget"])
async def test_unfinished_frames_to_the_broker_port(
    processes: HanetProcesses, tmp_path: Path, budget: str | None
) -> None:
    extra = ["--max-partial-bytes", budget] if budget is not None else []
    store = ["--store", str(tmp_path / "store"), "--mapped-file-size", "1M"]
    ports = ["--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0"]
    process = await processes.start("master", "master", *store, *ports, *extra)
    broker = process.address()
    growth, ok = await _attack(
        broker,
        process.pid,
        connections=60,
        length=8 * MIB,
        seconds=4.0,
        honest=broker,
        topic="Honest",
    )
    print(f"broker port, budget {budget or 'default'}: +{growth / MIB:.0f} MiB, {ok} puts")
    if budget == "0":
        assert growth > 4 * BUDGET  # what the attack does without a budget
    else:
        assert growth < BUDGET + MARGIN
        assert ok > 20  # the honest producer went on
    assert process.running


@pytest.mark.parametrize("budget", ["0", None], ids=["no-budget", "default-budget"])
async def test_unfinished_frames_to_the_dledger_peer_port(
    processes: HanetProcesses, tmp_path: Path, budget: str | None
) -> None:
    """Two members of three run (n0 on 127.0.0.1, n1 on 127.0.0.2); the attacker connects to
    n0's peer port from n2's host (plain TCP admits a member's address)."""
    extra = ["--max-partial-bytes", budget] if budget is not None else []
    hosts = {"n0": "127.0.0.1", "n1": "127.0.0.2", "n2": "127.0.0.3"}
    ports = {i: _free_port(h) for i, h in hosts.items()}
    peers = ",".join(f"{i}={hosts[i]}:{ports[i]}" for i in hosts)
    sizes = ["--mapped-file-size", "1M", "--data-file-size", "4M", "--index-file-size", "320K"]
    for node_id in ("n0", "n1"):
        group = ["--group", "G", "--id", node_id, "--peers", peers, "--election-timeout", "0.5"]
        node = ["--store", str(tmp_path / node_id), "--listen", f"{hosts[node_id]}:0"]
        await processes.start(node_id, "dledger", *group, *node, *sizes, *extra)
    leader = await _leader(processes)
    growth, ok = await _attack(
        (hosts["n0"], ports["n0"]),
        processes["n0"].pid,
        connections=6,
        length=250 * MIB,
        seconds=4.0,
        honest=leader,
        topic="Honest",
        local_address=hosts["n2"],
    )
    print(f"dledger peer port, budget {budget or 'default'}: +{growth / MIB:.0f} MiB, {ok} puts")
    if budget == "0":
        # what the attack does without a budget (it goes on to 1.4 GB given the time)
        assert growth > 4 * BUDGET
    else:
        assert growth < BUDGET + MARGIN
        assert ok > 20
    assert processes.running


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


async def _leader(processes: HanetProcesses) -> tuple[str, int]:
    """The broker port of the node that answers a put with PUT_OK."""
    addresses = [processes[i].address() for i in ("n0", "n1")]
    with trio.fail_after(15):
        while True:
            for address in addresses:
                async with BrokerClient.connect(*address) as client:
                    if (await client.put("Honest", b"first")).status is PutStatus.PUT_OK:
                        return address
            await trio.sleep(0.1)
