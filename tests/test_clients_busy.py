"""``bench/clients.py --busy-cpus``: beside each send phase, one busy loop a CPU at nice 19,
gone when the phase ends. A stand-in driver (a Python process printing the driver's bench line)
counts the loops it sees running, and their niceness, from ``/proc``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import trio
from bench_support import load_bench

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

# The stand-in driver: the busy loops it finds (their command line, their nice value) in its
# bench line, as a driver prints its figures.
_DRIVER = r"""
import json, os, sys, time
marker = "bench/clients.py --busy-cpus"
def nices():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():  # (this script names the marker too)
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if marker in command:
            found.append(int(fields[16]))
    return found
deadline = time.monotonic() + 5  # (nice sets its priority, then runs Python: a moment)
while True:
    seen = nices()
    if seen == [19] * int(sys.argv[1]) or time.monotonic() > deadline:
        break
    time.sleep(0.01)
print(json.dumps({"event": "bench", "sent": 1, "failed": 0, "nices": seen}))
"""


clients = load_bench("clients.py", "clients_bench")


def _loops_running() -> int:
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        count += "bench/clients.py --busy-cpus" in command
    return count


def test_a_send_phase_runs_beside_one_lowest_priority_loop_a_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(clients, "_busy_cpus", True)
    cpus = os.cpu_count() or 1
    line = trio.run(clients.run_sends, [sys.executable, "-c", _DRIVER, str(cpus)], 1.0)
    assert line["sent"] == 1
    assert line["nices"] == [19] * cpus
    assert _loops_running() == 0  # killed with the phase


def test_without_the_flag_no_loop_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clients, "_busy_cpus", False)
    line = trio.run(clients.run_sends, [sys.executable, "-c", _DRIVER, "0"], 1.0)
    assert line["nices"] == []
