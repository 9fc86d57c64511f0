"""DLedger put throughput: three nodes as a ratio of one node, in the same run.

For each group size and flush mode, ``hanet put`` sends ``--count`` messages of ``--size``
bytes with ``--concurrency`` requests in flight through the group's leader (the put follows a
follower's SERVICE_NOT_AVAILABLE to the leader), and reports messages per second and p99 latency.

    .venv/bin/python bench/dledger_put.py --count 4000

A table, then the last line one JSON object (goal: 3 nodes >= 0.6 x one node).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dledger_group import Group


def measure(root: Path, size: int, flush: str, args: argparse.Namespace) -> dict[str, Any]:
    group = Group(root / f"{size}-{flush}", size, flush=flush)
    group.start_all()
    try:
        trio.run(group.leader)
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "hanet",
                "put",
                "--broker",
                group.broker_list,
                "--topic",
                "T",
                "--size",
                str(args.size),
                "--count",
                str(args.count),
                "--concurrency",
                str(args.concurrency),
                "--json",
                "--quiet",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
        summary: dict[str, Any] = json.loads(out.stdout)
        return summary
    finally:
        group.stop_all()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=4000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="hanet-dledger-put-"))
    figures: dict[str, Any] = {"count": args.count, "size": args.size}
    try:
        print(f"{'flush':12s} {'nodes':>5s} {'msg/s':>10s} {'p99 ms':>8s}")
        for flush in ("SYNC_FLUSH", "ASYNC_FLUSH"):
            rates = {}
            for size in (1, 3):
                summary = measure(root, size, flush, args)
                rates[size] = summary["messages_per_second"]
                print(f"{flush:12s} {size:>5d} {rates[size]:>10,.0f} "
                      f"{summary['latency_ms_p99']:>8}")  # fmt: skip
                figures[f"{flush.lower()}_{size}_node_msg_s"] = rates[size]
                figures[f"{flush.lower()}_{size}_node_p99_ms"] = summary["latency_ms_p99"]
            figures[f"{flush.lower()}_ratio_3_vs_1"] = round(rates[3] / rates[1], 3)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
