"""``hanet.testing``'s process runner and ``wait_until``: a verb started, ready, restarted with a
ready file and log of each run, stopped; one that exits before it is ready fails with its
output; ``wait_until`` polls functions and async functions in virtual time."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import trio
import trio.testing

from hanet.client import NameServerClient
from hanet.testing import HanetProcess, HanetProcesses, wait_until, wait_until_blocking


@pytest.mark.slow
async def test_a_verb_is_started_restarted_and_stopped(processes: HanetProcesses) -> None:
    namesrv = await processes.start("ns", "namesrv", "--listen", "127.0.0.1:0")
    first = namesrv.address("namesrv")
    assert first[0] == "127.0.0.1" and processes.running
    assert (await NameServerClient([first]).cluster()).members() == []
    assert await namesrv.kill() == -signal.SIGKILL
    assert namesrv.returncode == -signal.SIGKILL
    await namesrv.start("--log-level", "DEBUG")  # the same argv, and more for this run
    assert namesrv.runs == 2 and namesrv.ready_file.name == "ns-2.ready"
    assert (await NameServerClient([namesrv.address("namesrv")]).cluster()).members() == []
    assert await namesrv.stop() == 0  # SIGTERM: a clean stop
    assert namesrv.text(1) != "" and namesrv.text(2) != ""
    assert namesrv.text(0) == namesrv.text(1) + namesrv.text(2)
    assert "DEBUG" in namesrv.text() and "DEBUG" not in namesrv.text(1)


@pytest.mark.slow
def test_a_verb_that_exits_before_it_is_ready_fails_with_its_output(tmp_path: Path) -> None:
    with HanetProcesses(tmp_path) as processes:
        broken = processes.add("bad", "namesrv", "--listen", "not-an-address")
        with pytest.raises(AssertionError, match=r"bad exited \(2\) before it was ready"):
            broken.start_blocking()
        assert "not-an-address" in broken.text()
        assert broken.returncode == 2 and not broken.running


def test_a_process_never_started_is_no_process(tmp_path: Path) -> None:
    process = HanetProcess(tmp_path, "idle", "namesrv")
    assert process.returncode is None and not process.running and process.text() == ""
    process.close()  # nothing to stop


async def test_wait_until_polls_functions_and_async_functions(
    autojump_clock: trio.testing.MockClock,
) -> None:
    started = trio.current_time()
    assert await wait_until(lambda: trio.current_time() - started > 5 and "done") == "done"

    async def later() -> int:
        return 7 if trio.current_time() - started > 10 else 0

    assert await wait_until(later) == 7
    with pytest.raises(trio.TooSlowError):
        await wait_until(lambda: False, 3)
    with pytest.raises(AssertionError, match="timed out after 2 s waiting for the moon"):
        await wait_until(lambda: False, 2, what="the moon")


def test_wait_until_blocking_returns_the_value_or_names_what_it_waited_for() -> None:
    calls: list[int] = []

    def third_call() -> str:
        calls.append(1)
        return "yes" if len(calls) == 3 else ""

    assert wait_until_blocking(third_call, 5, 0.001) == "yes"
    with pytest.raises(AssertionError, match=r"timed out after 0\.05 s waiting for nothing"):
        wait_until_blocking(lambda: 0, 0.05, 0.01, what="nothing")
