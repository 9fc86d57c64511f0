"""What RocketMQ's ACL costs the broker port: CPU per send and per pull, ACL on against off.

Run: ``.venv/bin/python bench/acl.py [--count N] [--rounds R]``

Each round starts ``hanet master`` twice, as processes, in alternating order: once as it is
(ACL off) and once with ``--acl-enable`` and a ``plain_acl.yml`` of one account allowed
everything by its default permissions (so every request is signature-checked and its topic
and group looked up). The client is ``bench/remoting.py``'s: one connection, ``--count``
SEND_MESSAGE_V2 requests of 1 KiB, 16 in flight, over 4 queues, then PULL_MESSAGE drains; with
ACL on it signs every request (``hanet.client.signing``). The figure is the broker's CPU per
message (``utime + stime``), and the ratio ACL on / ACL off.

A table for humans, then the last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import trio

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

import remoting as base  # noqa: E402

from hanet.client import Credentials, signing  # noqa: E402
from hanet.testing import cli_flags  # noqa: E402

ACL = """accounts:
  - accessKey: benchUser
    secretKey: bench-secret
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""
CREDENTIALS = Credentials("benchUser", "bench-secret")


async def _one(acl: bool, count: int, work: Path) -> dict[str, float]:
    directory = Path(tempfile.mkdtemp(prefix="acl-on-" if acl else "acl-off-", dir=work))
    ready = directory / "ready.json"
    argv = [sys.executable, "-m", "hanet", "--log-level", "WARNING", "master"]
    argv += cli_flags(store=directory / "store", listen="127.0.0.1:0", ha_listen="127.0.0.1:0")
    argv += cli_flags(mapped_file_size="256M", ready_file=ready)
    if acl:
        (directory / "plain_acl.yml").write_text(ACL)
        argv += cli_flags(acl_enable=True, acl_file=directory / "plain_acl.yml")
    env = {**os.environ, "PYTHONPATH": str(base.ROOT)}
    process, info = await base._start(argv, directory / "server.log", ready, env, base.ROOT)
    try:
        with signing(CREDENTIALS if acl else None):
            return await base._measure(info["broker"], process.pid, count)
    finally:
        await base._stop(process)


async def main(args: argparse.Namespace) -> None:
    rows: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="hanet-bench-acl-") as tmp:
        for round_ in range(args.rounds):
            order = ["off", "on"] if round_ % 2 == 0 else ["on", "off"]
            for kind in order:
                rows[kind].append(await _one(kind == "on", args.count, Path(tmp)))
    med = {
        kind: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for kind, runs in rows.items()
    }
    print(f"{'ACL':<5} {'sends/s':>9} {'send CPU µs':>12} {'pulls/s':>9} {'pull CPU µs':>12}")
    for kind, m in med.items():
        print(
            f"{kind:<5} {m['send_msgs_per_sec']:>9.0f} {m['send_cpu_us']:>12.1f} "
            f"{m['pull_msgs_per_sec']:>9.0f} {m['pull_cpu_us']:>12.2f}"
        )
    send_ratio = med["on"]["send_cpu_us"] / med["off"]["send_cpu_us"]
    pull_ratio = med["on"]["pull_cpu_us"] / med["off"]["pull_cpu_us"]
    print(f"broker CPU, ACL on / off: sends {send_ratio:.2f}x, pulls {pull_ratio:.2f}x")
    print(
        json.dumps(
            {
                "count": args.count,
                "rounds": args.rounds,
                "median": med,
                "rounds_detail": rows,
                "send_cpu_ratio": send_ratio,
                "pull_cpu_ratio": pull_ratio,
            }
        )
    )


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20_000, help="sends per round (20000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (3)")
    return parser.parse_args()


if __name__ == "__main__":
    trio.run(main, _parse())
