"""examples/master.py, slave.py and custom_pipeline.py as a user runs them (three processes)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from hanet.testing import cli_flags

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
WAIT = 30  # seconds; generous: these are processes on a loaded 2-core machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class Script:
    """A running example and what it printed so far."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.out = ""
        self.changed = trio.Event()

    async def pump(self) -> None:
        assert self.process.stdout is not None
        async for chunk in self.process.stdout:
            self.out += chunk.decode(errors="replace")
            self.changed.set()
            self.changed = trio.Event()

    async def wait_for(self, predicate_text: str) -> None:
        with trio.move_on_after(WAIT):
            while predicate_text not in self.out:
                await self.changed.wait()
        assert predicate_text in self.out, f"no {predicate_text!r} within {WAIT} s in:\n{self.out}"


async def test_master_slave_and_custom_pipeline_examples(tmp_path: Path) -> None:
    port, ha_port, slave_port = free_port(), free_port(), free_port()
    master_ha = f"127.0.0.1:{ha_port}"
    scripts: list[Script] = []

    async def run(nursery: trio.Nursery, name: str, *argv: str) -> Script:
        process = await trio.lowlevel.open_process(
            [sys.executable, str(ROOT / "examples" / name), *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        script = Script(process)
        scripts.append(script)
        nursery.start_soon(script.pump)
        return script

    try:
        async with trio.open_nursery() as nursery:
            flags = cli_flags(store=tmp_path / "m", port=port, ha_port=ha_port, every=0.2)
            master = await run(nursery, "master.py", *flags)
            await master.wait_for("put: PUT_OK at offset 0")
            flags = cli_flags(store=tmp_path / "s", master=master_ha, port=slave_port)
            slave = await run(nursery, "slave.py", *flags, *cli_flags(reconnect=0.2, every=0.2))
            flags = cli_flags(store=tmp_path / "c", master=master_ha)
            metrics = await run(nursery, "custom_pipeline.py", *flags)
            await slave.wait_for("connected; max offset ")
            await metrics.wait_for("connections 1  frames 1  bytes ")
            await master.wait_for("lag 0 B")
            with trio.move_on_after(WAIT):
                while slave.out.count("connected; max offset 0\n") == slave.out.count(
                    "connected; max offset "
                ):
                    await slave.changed.wait()
            replicated = slave.out.count("connected; max offset ") - slave.out.count(
                "connected; max offset 0\n"
            )
            assert replicated, f"the slave never replicated:\n{slave.out}\nmaster:\n{master.out}"
            for script in scripts:
                script.process.send_signal(signal.SIGINT)
            with trio.fail_after(15):
                for script in scripts:
                    assert await script.process.wait() == 0, script.out
    finally:
        for script in scripts:
            if script.process.returncode is None:
                script.process.kill()
    for script in scripts:
        assert script.out.rstrip().endswith("stopped"), script.out
    for store in ("m", "s", "c"):
        assert not (tmp_path / store / "abort").exists()
