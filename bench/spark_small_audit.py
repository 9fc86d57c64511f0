"""How long ``hanet audit --json`` takes on a small store, JVM start included, as a user runs it.

Run: ``.venv/bin/python bench/spark_small_audit.py [--messages 5000] [--rounds 3]``

A store of ``--messages`` messages (three topics, four queues, 200-1000 byte bodies, RocketMQ's
1 GiB commit log file) in a temporary directory; then ``--rounds`` rounds, each running, one
after the other in the same round:

- baseline: ``hanet audit STORE --json --driver-rows 0`` with ``HANET_SPARK_CDS=0``: the
  store read by the executors through the data sources, Spark started as for a long job;
- quick: ``hanet audit STORE --json``: the store read in the driver, the JVM started for a
  short job with its class data sharing archive (the archive is written by a first, unmeasured
  quick run, into a temporary cache directory).

With ``--connect``, a Spark Connect server (``hanet.spark.start_connect_server``, local[*] on
127.0.0.1) is started once before the rounds, and each round also runs

- connect: ``hanet audit STORE --json --remote sc://...``: the same command on that running
  Spark (needs ``pip install 'hanet[connect]'``); the server's first audit, which warms it up,
  is not counted.

Each line gives the wall times and the load average; the goal is the quick run <= 10 s on a
2-core machine. The last line is one JSON object with every round's figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

from hanet.spark import start_connect_server
from hanet.store import CommitLogStore, Message, StoreConfig

GOAL_S = 10.0


def make_store(root: Path, count: int) -> None:
    with CommitLogStore.open(root, StoreConfig()) as store:
        for i in range(count):
            topic = ("Orders", "Payments", "Audit")[i % 3]
            body = b"x" * (200 + i % 800)
            message = Message(topic, body, queue_id=i % 4, born_timestamp=1_700_000_000_000 + i)
            assert store.put(message).ok


def audit(store: Path, env: dict[str, str], *extra: str) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "hanet", "audit", str(store), "--json", *extra],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"hanet audit failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000, help="messages in the store")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of baseline + quick")
    parser.add_argument(
        "--connect", action="store_true", help="also audit through a Spark Connect server"
    )
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        remote = None
        if args.connect:
            server = stack.enter_context(start_connect_server())
            remote = server.url
        return _rounds(args, remote)


def _rounds(args: argparse.Namespace, remote: str | None) -> int:
    with tempfile.TemporaryDirectory(prefix="hanet-small-audit-") as tmp:
        store, cache = Path(tmp) / "store", Path(tmp) / "cache"
        make_store(store, args.messages)
        quick_env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
        baseline_env = {**quick_env, "HANET_SPARK_CDS": "0"}
        first, _ = audit(store, quick_env)  # writes the archive when its JVM exits
        if remote is not None:
            warm, _ = audit(store, quick_env, "--remote", remote)
            print(f"first audit through Spark Connect (warms it up, not counted): {warm:.1f} s")
        print(f"first quick run (writes the CDS archive, not counted): {first:.1f} s")
        # the JVM writes the archive after the command returned; a later run adopts it
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not any((cache / "hanet").glob("*.jsa")):
            audit(store, quick_env)
            time.sleep(1)
        rounds = []
        for number in range(1, args.rounds + 1):
            load = os.getloadavg()[0]
            base_s, base = audit(store, baseline_env, "--driver-rows", "0")
            quick_s, quick = audit(store, quick_env)
            assert base["scanned"] == quick["scanned"] == args.messages, (base, quick)
            assert base["stores"] == quick["stores"]
            figures = {"round": number, "load": round(load, 2), "baseline_s": round(base_s, 2)}
            figures.update(quick_s=round(quick_s, 2), speed_up=round(base_s / quick_s, 2))
            line = f"round {number}: baseline {base_s:5.1f} s, quick {quick_s:5.1f} s "
            line += f"({base_s / quick_s:.2f}x)"
            if remote is not None:
                connect_s, through = audit(store, quick_env, "--remote", remote)
                assert through["stores"] == quick["stores"], (through, quick)
                assert through["problems"] == quick["problems"]
                figures["connect_s"] = round(connect_s, 2)
                line += f", connect {connect_s:5.1f} s"
            rounds.append(figures)
            print(f"{line}, load {load:.2f}", flush=True)
    quick_times = [r["quick_s"] for r in rounds]
    summary = {
        "bench": "spark_small_audit",
        "messages": args.messages,
        "rounds": rounds,
        "quick_median_s": median(quick_times),
        "quick_spread_s": [min(quick_times), max(quick_times)],
        "goal_s": GOAL_S,
        "goal_met": median(quick_times) <= GOAL_S,
    }
    if remote is not None:
        connect_times = [r["connect_s"] for r in rounds]
        summary["connect_median_s"] = median(connect_times)
        summary["connect_spread_s"] = [min(connect_times), max(connect_times)]
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
