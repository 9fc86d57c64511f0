"""The echo examples as a user runs them: two processes over loopback; the client reconnects
when the server is stopped with Ctrl-C (SIGINT) and started again."""

from __future__ import annotations

import signal
import socket
import sys
from pathlib import Path

import pytest
import trio

ROOT = Path(__file__).resolve().parents[1]
SERVER = str(ROOT / "examples" / "echo_server.py")
CLIENT = str(ROOT / "examples" / "echo_client.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class Output:
    """Collects a process's output stream as it arrives."""

    def __init__(self) -> None:
        self.text = ""
        self.changed = trio.Event()

    async def pump(self, stream: trio.abc.ReceiveStream) -> None:
        async for chunk in stream:
            self.text += chunk.decode(errors="replace")
            self.changed.set()
            self.changed = trio.Event()

    async def wait_for(self, needle: str, count: int = 1) -> None:
        with trio.fail_after(20):
            while self.text.count(needle) < count:
                await self.changed.wait()


async def start(nursery: trio.Nursery, *args: str) -> tuple[trio.Process, Output, Output]:
    process = await trio.lowlevel.open_process(
        [sys.executable, *args], stdout=-1, stderr=-1, cwd=ROOT
    )
    out, err = Output(), Output()
    assert process.stdout is not None and process.stderr is not None
    nursery.start_soon(out.pump, process.stdout)
    nursery.start_soon(err.pump, process.stderr)
    return process, out, err


async def stop(process: trio.Process) -> int:
    process.send_signal(signal.SIGINT)
    with trio.fail_after(10):
        return await process.wait()


@pytest.mark.slow
async def test_echo_client_reconnects_when_the_server_restarts() -> None:
    port = str(free_port())
    async with trio.open_nursery() as nursery:
        server, _, server_err = await start(nursery, SERVER, "--port", port)
        await server_err.wait_for("echo server on")
        client, client_out, client_err = await start(
            nursery,
            CLIENT,
            *("--port", port, "--count", "8", "--interval", "0.1", "--heartbeat", "0.3"),
        )
        await client_out.wait_for("echo: message #", 3)
        assert await stop(server) == 130  # Ctrl-C: a clean shutdown
        await client_err.wait_for("disconnected")
        server, _, server_err = await start(nursery, SERVER, "--port", port)
        await server_err.wait_for("echo server on")
        with trio.fail_after(20):
            status = await client.wait()
        assert await stop(server) == 130
    assert status == 0, client_err.text
    assert client_out.text.count("echo: message #") >= 8
    assert client_err.text.count("connected to") >= 2
    assert "sent " in client_out.text and "connects=2" in client_out.text


@pytest.mark.slow
async def test_heartbeats_keep_an_idle_client_connected() -> None:
    port = str(free_port())
    async with trio.open_nursery() as nursery:
        server, _, server_err = await start(nursery, SERVER, "--port", port, "--idle", "0.5")
        await server_err.wait_for("echo server on")
        # One message every 3 s, heartbeats every 0.1 s: the server's 0.5 s idle limit is
        # never reached, so both messages arrive on one connection.
        client, client_out, client_err = await start(
            nursery,
            CLIENT,
            *("--port", port, "--count", "2", "--interval", "1.5", "--heartbeat", "0.1"),
        )
        with trio.fail_after(20):
            status = await client.wait()
        assert await stop(server) == 130
    assert status == 0, client_err.text
    assert client_err.text.count("connected to") == 1
    match = client_out.text.split("heartbeats ")[1].split(",")[0]
    assert int(match) >= 5
