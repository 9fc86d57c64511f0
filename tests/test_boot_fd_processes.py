"""A real ``hanet master`` under ``ulimit -n 256`` with 600 idle connections (300 on each
port): it keeps running, holds at most its connection caps (the rest closed at accept, one
WARNING per burst), keeps flushing, and once they go away its HA port serves a slave again
(checked raw: a report of offset 0 gets the heartbeat header). SIGTERM still shuts it down
cleanly."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from hanet.boot import default_max_connections

pytestmark = pytest.mark.slow

LIMIT = 256
IDLE = 300


def _limit_descriptors() -> None:  # runs in the child, before exec
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


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
    tmp_path: Path,
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4 * IDLE:  # the test's own side of 600 connections
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    ready = tmp_path / "ready.json"
    log = tmp_path / "master.log"
    with log.open("wb") as out:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "hanet", "master", "--store", str(tmp_path / "store"),
             "--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0",
             "--mapped-file-size", "262144", "--heartbeat-interval", "0.5",
             "--ready-file", str(ready)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out,
            preexec_fn=_limit_descriptors,
        )  # fmt: skip
    try:
        with trio.fail_after(20):
            while True:
                try:
                    data: dict[str, Any] = json.loads(ready.read_text())
                    break
                except (FileNotFoundError, ValueError):
                    assert process.returncode is None, log.read_text()
                    await trio.sleep(0.02)
        ha, broker = _address(data["ha"]), _address(data["broker"])
        cap = default_max_connections(LIMIT)
        idle = await _open_idle(ha, IDLE) + await _open_idle(broker, IDLE)
        await trio.sleep(1.0)
        assert process.returncode is None, log.read_text()
        held = len(os.listdir(f"/proc/{process.pid}/fd"))
        assert held < LIMIT, held
        kept = await _still_open(idle)
        assert kept <= 2 * cap, (kept, cap)
        assert kept >= cap  # the cap, not exhaustion, is what refused the rest
        # the checkpoint is rewritten (flush) while the process is at its caps
        checkpoint = tmp_path / "store" / "checkpoint"
        await trio.sleep(1.5)
        assert checkpoint.exists()
        assert process.returncode is None, log.read_text()

        for stream in idle:
            stream.socket.close()
        await trio.sleep(0.5)
        slave = await trio.open_tcp_stream(*ha)
        await slave.send_all((0).to_bytes(8, "big"))
        header = b""
        with trio.fail_after(5):
            while len(header) < 12:
                chunk = await slave.receive_some(12 - len(header))
                assert chunk, log.read_text()
                header += chunk
        assert header[8:12] == b"\0\0\0\0"  # a heartbeat: no data yet, the port serves
        await slave.aclose()

        process.send_signal(signal.SIGTERM)
        with trio.fail_after(15):
            code = await process.wait()
        text = log.read_text()
        assert code == 0, text
        assert "Too many open files" not in text
        assert text.count("HA port: refusing new connections") == 1, text
        assert "accepting connections again" in text
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
