"""A real ``hanet master`` under ``ulimit -n 256`` with 600 idle connections (300 on each
port): it keeps running, holds at most its connection caps (the rest closed at accept, one
WARNING per burst), keeps flushing, and once they go away its HA port serves a slave again
(checked raw: a report of offset 0 gets the heartbeat header). SIGTERM still shuts it down
cleanly."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest
import trio

from hanet.boot import default_max_connections
from hanet.testing import HanetProcesses

pytestmark = pytest.mark.slow

LIMIT = 256
IDLE = 300


def _limit_descriptors() -> None:  # runs in the child, before exec
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


async def _open_idle(address: tuple[str, int], count: int) -> list[trio.SocketStream]:
    streams = []
    for _ in range(count):
        streams.append(await trio.open_tcp_stream(*address))
    return streams


async def _still_open(streams: list[trio.SocketStream]) -> int:
    """How many of ``streams`` the server kept (the others read EOF or a reset at once)."""
    kept = 0
    for stream in streams:
        with trio.move_on_after(0.005) as scope:
            try:
                data = await stream.receive_some(1)
            except trio.BrokenResourceError:
                continue
            if data:
                kept += 1  # a heartbeat: kept
        if scope.cancelled_caught:
            kept += 1
    return kept


async def test_a_master_under_a_small_descriptor_limit_survives_idle_connections(
    processes: HanetProcesses, tmp_path: Path
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4 * IDLE:  # the test's own side of 600 connections
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    store = ("--store", str(tmp_path / "store"), "--mapped-file-size", "262144")
    ports = ("--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0")
    argv = ("master", *store, *ports, "--heartbeat-interval", "0.5")
    process = processes.add("master", *argv, preexec_fn=_limit_descriptors)
    await process.start()
    ha, broker = process.address("ha"), process.address("broker")
    cap = default_max_connections(LIMIT)
    idle = await _open_idle(ha, IDLE) + await _open_idle(broker, IDLE)
    await trio.sleep(1.0)
    assert process.running, process.text()
    held = len(os.listdir(f"/proc/{process.pid}/fd"))
    assert held < LIMIT, held
    kept = await _still_open(idle)
    assert kept <= 2 * cap, (kept, cap)
    assert kept >= cap  # the cap, not exhaustion, is what refused the rest
    # the checkpoint is rewritten (flush) while the process is at its caps
    checkpoint = tmp_path / "store" / "checkpoint"
    await trio.sleep(1.5)
    assert checkpoint.exists()
    assert process.running, process.text()

    for stream in idle:
        stream.socket.close()
    await trio.sleep(0.5)
    slave = await trio.open_tcp_stream(*ha)
    await slave.send_all((0).to_bytes(8, "big"))
    header = b""
    with trio.fail_after(5):
        while len(header) < 12:
            chunk = await slave.receive_some(12 - len(header))
            assert chunk, process.text()
            header += chunk
    assert header[8:12] == b"\0\0\0\0"  # a heartbeat: no data yet, the port serves
    await slave.aclose()

    code = await process.stop()
    text = process.text()
    assert code == 0, text
    assert "Too many open files" not in text
    assert text.count("HA port: refusing new connections") == 1, text
    assert "accepting connections again" in text
