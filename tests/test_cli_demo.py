"""``hanet demo`` end to end, and its clean-up when interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from hanet.testing import cli_flags, wait_until

pytestmark = pytest.mark.slow


def flat(out: str) -> str:
    """The demo's output with its tables' borders gone and whitespace collapsed: a summary
    cell wraps wherever the text before it happens to end (the notes differ run to run)."""
    return " ".join(out.translate(str.maketrans("│┃", "  ")).split())


async def demo(work: Path, *flags: str, messages: int) -> str:
    """``hanet demo`` run to its end in ``work``: its output, :func:`flat`; it exits 0."""
    result = await trio.run_process(
        [sys.executable, "-m", "hanet", "demo", *flags, *cli_flags(messages=messages, dir=work)],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    out = result.stdout.decode()
    assert result.returncode == 0, out + result.stderr.decode()
    return flat(out)


async def test_demo_end_to_end(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    out = await demo(work, messages=4000)
    assert out.count("bytes identical to the master's") == 2
    assert "PUT_OK 4,000" in out and "OK" in out
    for store in ("master", "slave1", "slave2"):
        assert (work / store / "commitlog").is_dir()
        assert not (work / store / "abort").exists()  # every broker shut down cleanly
    assert len(list((work / "master" / "commitlog").iterdir())) > 3  # crossed files


async def test_demo_over_mutual_tls(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    out = await demo(work, "--tls", messages=2000)
    assert "mutual TLS everywhere" in out
    assert out.count("bytes identical to the master's") == 2 and "PUT_OK 2,000" in out
    assert (work / "tls" / "ca.pem").exists()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers; it has exited all the same.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


async def interrupt_demo(
    work: Path,
    *flags: str,
    started: str,
    parts: tuple[str, ...],
    puts_for: float,
    sigint_ignored: bool = False,
) -> None:
    """An endless ``hanet demo`` in ``work``: once ``started`` exists and its ``parts`` (the
    processes with a ready file) run, ``puts_for`` seconds of puts, then Ctrl-C: it exits 130
    and none of its parts still runs. ``sigint_ignored``: the demo starts with SIGINT ignored,
    as a background job of a shell script does."""
    demo = await trio.lowlevel.open_process(
        [sys.executable, "-m", "hanet", "demo", *flags, *cli_flags(messages=10**7, dir=work)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=_ignore_sigint if sigint_ignored else None,
    )
    pids: list[int] = []
    try:
        await wait_until((work / started).exists, 20)
        for name in parts:
            pids.append(json.loads((work / f"{name}.ready").read_text())["pid"])
        assert all(_alive(pid) for pid in pids)
        await trio.sleep(puts_for)
        demo.send_signal(signal.SIGINT)  # the demo only, not its process group
        with trio.fail_after(20):
            assert await demo.wait() == 130
        assert not any(_alive(pid) for pid in pids)
    finally:
        if demo.returncode is None:
            demo.kill()
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["foreground", "sigint-ignored"])
async def test_ctrl_c_stops_every_part_of_the_demo(tmp_path: Path, sigint_ignored: bool) -> None:
    """Also when the demo started with SIGINT ignored (a background job of a script, or a CI
    runner's): a SIGINT sent to it still stops it, as it stops every hanet service."""
    work = tmp_path / "demo"
    stores = ("master", "slave1", "slave2")
    await interrupt_demo(
        work, started="producer.log", parts=stores, puts_for=0.5, sigint_ignored=sigint_ignored
    )
    for store in stores:
        assert not (work / store / "abort").exists()  # stopped cleanly, not killed


async def test_dledger_demo_kills_the_leader_and_checks_every_node(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    out = await demo(work, "--dledger", messages=2000)
    assert "killed (SIGKILL)" in out and "new leader n" in out
    assert "2,000/2,000 acknowledged present" in out
    assert out.count("identical to n0's") == 2
    assert "OK: every acknowledged message is on all three nodes" in out
    for node in ("n0", "n1", "n2"):
        assert (work / node / "dledger" / "data").is_dir()
        assert (work / node / "commitlog").is_dir()
    assert len(list(work.glob("*-restart1.ready"))) == 1  # the killed leader came back


async def test_ctrl_c_stops_every_dledger_node(tmp_path: Path) -> None:
    nodes = ("n0", "n1", "n2")
    await interrupt_demo(
        tmp_path / "demo", "--dledger", started="n2.ready", parts=nodes, puts_for=1.0
    )
