"""A short run of bench/dledger_port_path.py: a 1-node DLedger port and a classic master's in
process, small files; both answer every send and the figures are reported."""

from __future__ import annotations

import pytest
from bench_support import run_bench

pytestmark = pytest.mark.slow


def test_a_short_round_reports_both_figures() -> None:
    flags = ["--rounds", "1", "--count", "96", "--per-read", "16", "--file-size", "1048576"]
    result = run_bench("dledger_port_path.py", flags)
    figures = result["trees"]["A"]
    assert figures["dledger_send_cpu_us"]["median"] > 0
    assert figures["classic_send_cpu_us"]["median"] > 0
