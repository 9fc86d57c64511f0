"""What the tests that run a ``bench/`` script share."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_bench(script: str, argv: list[str], *, timeout: float = 120) -> dict[str, Any]:
    """``bench/<script>`` with ``argv`` run to its end from the repository's root: it exited
    0; the figures of its last line (one JSON object)."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *argv],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def load_bench(script: str, name: str) -> ModuleType:
    """``bench/<script>`` imported as the module ``name`` (for its helpers)."""
    path = ROOT / "bench" / script
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
