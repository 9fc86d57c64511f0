"""Run the deterministic DLedger simulation over many seeds and check Raft's safety properties.

Run: ``.venv/bin/python bench/dledger_sim.py [--seeds 5000] [--nodes 3,5] [--first 0]``, or
replay one run with ``--seed N --nodes K`` (prints its result in full).

Each seed is one simulated group (``hanet.testing.simulate``): seeded crashes (some losing the
output of the step they interrupt), restarts, partitions, message delays, reordering, loss and
duplication, client appends at random, then a settle phase. A seed fails when a safety check
fails (election safety, log matching, leader completeness, state machine safety, acknowledged
appends in every later leader's log) or the group did not settle; each failure is printed with
the command that replays it. A table for humans, then the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from hanet.testing import SimConfig, SimResult, simulate


def _replay(seed: int, nodes: int) -> int:
    result = simulate(seed, SimConfig(nodes=nodes))
    for name, value in result.to_json().items():
        print(f"{name:>18}: {value}")
    print(json.dumps(result.to_json()))
    return 0 if result.ok else 1


def _row(nodes: int, results: list[SimResult], seconds: float) -> dict[str, Any]:
    return {
        "nodes": nodes,
        "seeds": len(results),
        "failed": sum(1 for r in results if r.violations),
        "unsettled": sum(1 for r in results if not r.settled),
        "elections": sum(r.leaders for r in results),
        "max_term": max((r.max_term for r in results), default=0),
        "committed": sum(r.committed for r in results),
        "acknowledged": sum(r.acknowledged for r in results),
        "messages": sum(r.messages for r in results),
        "dropped": sum(r.dropped for r in results),
        "crashes": sum(r.crashes for r in results),
        "mid_step_crashes": sum(r.mid_step_crashes for r in results),
        "partitions": sum(r.partitions for r in results),
        "seconds": round(seconds, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1000, help="seeds per group size")
    parser.add_argument("--first", type=int, default=0, help="the first seed")
    parser.add_argument("--nodes", default="3,5", help="group sizes, comma-separated")
    parser.add_argument("--seed", type=int, help="replay this one seed (with one --nodes)")
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.nodes.split(",")]
    if args.seed is not None:
        return _replay(args.seed, sizes[0])
    rows = []
    failures: list[str] = []
    for nodes in sizes:
        started = time.perf_counter()
        results = []
        for seed in range(args.first, args.first + args.seeds):
            result = simulate(seed, SimConfig(nodes=nodes))
            results.append(result)
            if not result.ok:
                failure = (
                    f"FAILED seed {seed} ({nodes} nodes, settled={result.settled}): "
                    f"{'; '.join(result.violations) or 'did not settle'}\n"
                    f"  replay: python bench/dledger_sim.py --seed {seed} --nodes {nodes}"
                )
                failures.append(failure)
                print(failure, file=sys.stderr)
        rows.append(_row(nodes, results, time.perf_counter() - started))
    columns = list(rows[0])
    print(" ".join(f"{c:>12}" for c in columns))
    for row in rows:
        print(" ".join(f"{row[c]!s:>12}" for c in columns))
    print(json.dumps({"ok": not failures, "failures": len(failures), "groups": rows}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
