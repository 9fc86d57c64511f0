"""A short run of the DLedger put benchmark (bench/dledger_put.py): one round, few messages,
1 and 3 nodes with hanet's client; every put acknowledged, the figures reported."""

from __future__ import annotations

import subprocess
import sys

import pytest
from bench_support import run_bench

from hanet.testing import cli_flags

pytestmark = pytest.mark.slow


def test_a_short_round_reports_each_case_with_its_load() -> None:
    flags = cli_flags(rounds=1, count=200, sizes=100, clients="hanet")
    result = run_bench("dledger_put.py", flags)
    assert set(result["cases"]) == {"1n/100B/hanet", "3n/100B/hanet"}
    for case in result["cases"].values():
        assert case["failed"] == 0
        assert case["msg_s_median"] > 0 and case["p99_ms_median"] > 0
        assert len(case["load1"]) == 1 and case["cpu_us_per_msg_median"] >= 0
        assert case["vs_rocketmq_dledger"] > 0


def test_the_cpp_client_follows_a_leader_change_mid_run() -> None:
    """The leader stops mid-run: the bench registers the new leader, the C++ client's failed
    sends go again through a fresh producer, and every message is acknowledged."""
    probe = subprocess.run(
        [sys.executable, "-c", "import rocketmq.client"],
        check=False,
        capture_output=True,
        timeout=60,
    )
    if probe.returncode != 0:
        pytest.skip("the C++ client (PyPI rocketmq) is not installed")
    flags = cli_flags(rounds=1, count=10_000, nodes=3, sizes=100, clients="cpp", pause_leader=1.5)
    case = run_bench("dledger_put.py", flags, timeout=180)["cases"]["3n/100B/cpp"]
    assert case["leader_changes"] >= 1
    assert case["failed"] == 0
