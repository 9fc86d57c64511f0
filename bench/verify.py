"""Benchmark ``hanet verify`` as a user runs it, start-up included: with the native code
against ``HANET_NO_EXTENSIONS=1`` (the pure-Python scanner and per-record checks), and the
command line's start-up alone.

Run: ``.venv/bin/python bench/verify.py [--records 600000] [--body-bytes 100] [--file-mib 64]
[--repeat 3] [--dir bench/out/verify]``

The store: ``--records`` messages of ``--body-bytes`` bodies in ``--file-mib`` commit log files
(pre-encoded records written straight into the files, as ``bench/spark_scan.py`` does), then
opened once and closed cleanly so that its consume queues are built; reused by later runs with
the same parameters. Each trial is a fresh ``python -m hanet verify STORE`` process (warm page
cache), timed from spawn to exit; the native and the pure-Python runs are interleaved, best
of ``--repeat``. ``hanet --version`` is timed the same way (the start-up every verb pays).

Figures: seconds for each, the ratio pure-Python / native (goal >= 5x) and the start-up
(goal <= 0.15 s). A table, then the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from spark_scan import generate  # bench/ is the script's directory

from hanet.store import CommitLogStore, StoreConfig

DEFAULT_DIR = Path(__file__).resolve().parent / "out" / "verify"


def build(root: Path, records: int, body_bytes: int, file_size: int) -> dict[str, Any]:
    """The store (reused when its parameters match): its description."""
    probe = generate(root / "probe", 1, body_bytes, 1 << 20)  # one record: its size
    record_size = int(probe["record_size"])
    store = generate(root / "store", records * record_size, body_bytes, file_size)
    if not (root / "store" / "consumequeue").is_dir():
        CommitLogStore.open(root / "store", StoreConfig(mapped_file_size=file_size)).close()
    return store


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Seconds from spawn to exit of ``python -m hanet <argv>``, and its stdout."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "hanet", *argv], capture_output=True, text=True, env=env, check=False
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"hanet {' '.join(argv)} failed: {done.stdout}{done.stderr}")
    return seconds, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=600_000)
    parser.add_argument("--body-bytes", type=int, default=100)
    parser.add_argument("--file-mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args()
    store = build(args.dir, args.records, args.body_bytes, args.file_mib << 20)
    native_env = {k: v for k, v in os.environ.items() if k != "HANET_NO_EXTENSIONS"}
    python_env = {**native_env, "HANET_NO_EXTENSIONS": "1"}
    verify = ["verify", str(args.dir / "store")]
    native: list[float] = []
    python: list[float] = []
    startup: list[float] = []
    out = ""
    for _ in range(args.repeat):
        seconds, out = timed(verify, native_env)
        native.append(seconds)
        python.append(timed(verify, python_env)[0])
        startup.append(timed(["--version"], native_env)[0])
    figures = {
        "records": store["records"],
        "native_s": round(min(native), 3),
        "python_s": round(min(python), 3),
        "ratio": round(min(python) / min(native), 2),
        "version_s": round(min(startup), 3),
        "goal_ratio": 5.0,
        "goal_version_s": 0.15,
        "load": round(os.getloadavg()[0], 1),
    }
    print(out.strip())
    print(f"{'':<28}{'seconds':>10}")
    print(f"{'hanet verify (native)':<28}{figures['native_s']:>10.3f}")
    print(f"{'hanet verify (pure Python)':<28}{figures['python_s']:>10.3f}")
    print(f"{'hanet --version':<28}{figures['version_s']:>10.3f}")
    print(f"ratio {figures['ratio']}x (goal >= 5x), load {figures['load']}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
