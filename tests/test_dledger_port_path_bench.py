"""A short run of bench/dledger_port_path.py: a 1-node DLedger port and a classic master's in
process, small files; both answer every send and the figures are reported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def test_a_short_round_reports_both_figures() -> None:
    flags = ["--rounds", "1", "--count", "96", "--per-read", "16", "--file-size", "1048576"]
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "dledger_port_path.py"), *flags],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    figures = result["trees"]["A"]
    assert figures["dledger_send_cpu_us"]["median"] > 0
    assert figures["classic_send_cpu_us"]["median"] > 0
