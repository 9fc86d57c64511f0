"""CI's short run of the kill -9 soak (bench/soak.py): 10 seeded chaos cycles."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def test_ten_kill_cycles_lose_no_acknowledged_message() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "soak.py"), "--cycles", "10", "--seed", "11"],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["problems"] == [], out.stdout[-3000:]
    assert out.returncode == 0
    assert result["acked"] > 1000
    assert sum(result["kills"].values()) == 10
