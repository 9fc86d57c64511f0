"""A 1-node DLedger group's broker port in process: CPU per send, no sockets.

Run: ``.venv/bin/python bench/dledger_port_path.py [--count N] [--rounds R] [--ab DIR]``

A child process runs a 1-node ``DLedgerNode`` (ASYNC_FLUSH, no peer port) and its
:class:`~hanet.broker.DLedgerBrokerService`, and beside it a classic broker (ASYNC_MASTER,
ASYNC_FLUSH): each port's pipeline serves an ``EmbeddedChannel`` fed with frames built
beforehand, ``--count`` SEND_MESSAGE_V2 requests of ``--size`` bytes with the JSON header
ali-ons sends, ``--per-read`` a read over 4 queues, each read's answers awaited (the node
answers from its own task: trio's scheduling between the port and the node's loop is counted,
the socket reads and writes are not). The figure is the child's CPU time
(``time.process_time``) per send of each: the DLedger node's and the classic master's, whose
ratio is the part of a put that the Raft path adds.

``--ab DIR`` also runs the hanet source tree in ``DIR`` (a worktree of another commit with its
built extensions) in every round, the two alternating; each figure's median and range per
tree.

A table for humans, then the last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).resolve().parent))

from port_path import _send_frame

from hanet.broker import Broker, DLedgerBrokerService
from hanet.dledger import DLedgerNode, NodeConfig
from hanet.ha import BrokerConfig
from hanet.testing import EmbeddedChannel

ROOT = Path(__file__).resolve().parents[1]
FILE_SIZE = 256 * 1024 * 1024


async def _serve(channel: EmbeddedChannel, reads: list[tuple[bytes, int]]) -> float:
    """Feed each read, wait for its answers (as many as its sends); CPU seconds."""
    started = time.process_time()
    for read, answers in reads:
        channel.write_inbound(read)
        got = 0
        while True:
            while (chunk := channel.read_outbound()) is not None:
                got += bytes(chunk).count(b'"code":0')
            if got >= answers:
                break
            await trio.lowlevel.checkpoint()
    return time.process_time() - started


def _reads(count: int, per_read: int, first: int) -> list[tuple[bytes, int]]:
    """The sends as reads of ``per_read`` frames, each with its number of sends."""
    frames = [_send_frame(i) for i in range(first, first + count)]
    chunks = [frames[i : i + per_read] for i in range(0, count, per_read)]
    return [(b"".join(chunk), len(chunk)) for chunk in chunks]


async def _child(count: int, per_read: int, file_size: int = FILE_SIZE) -> None:
    """Measure in this process (the tree on sys.path) and print one JSON line."""
    with tempfile.TemporaryDirectory(prefix="hanet-bench-dledger-port-") as tmp:
        async with trio.open_nursery() as nursery:
            node = DLedgerNode(
                NodeConfig(
                    group="bench",
                    node_id="n0",
                    peers={"n0": "127.0.0.1:0"},
                    store_dir=Path(tmp) / "n0",
                    data_file_size=file_size,
                    index_file_size=min(4 * 1024 * 1024, file_size),
                    mapped_file_size=file_size,
                ),
                listen=False,
            )
            await nursery.start(node.run)
            while not node.is_leader:
                await node.wait_role_change()
            service = DLedgerBrokerService(node)
            service.broker_address = "127.0.0.1:10911"
            channel = EmbeddedChannel()
            service.initialize(cast(Any, channel))
            await _serve(channel, _reads(per_read, per_read, 0))  # creates the topic
            dledger_cpu = await _serve(channel, _reads(count, per_read, per_read))

            config = BrokerConfig(
                store_path_root_dir=Path(tmp) / "classic",
                listen_port=0,
                ha_listen_port=0,
                mapped_file_size_commit_log=file_size,
            )
            broker = Broker(config)
            await nursery.start(broker.run)
            channel = EmbeddedChannel()
            broker.port.initialize(cast(Any, channel))
            await _serve(channel, _reads(per_read, per_read, 0))
            classic_cpu = await _serve(channel, _reads(count, per_read, per_read))
            nursery.cancel_scope.cancel()
    print(
        json.dumps(
            {
                "dledger_send_cpu_us": dledger_cpu / count * 1e6,
                "classic_send_cpu_us": classic_cpu / count * 1e6,
            }
        )
    )


def _run_child(tree: Path | None, args: argparse.Namespace) -> dict[str, float]:
    cwd = tree or ROOT
    out = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            "--count",
            str(args.count),
            "--per-read",
            str(args.per_read),
            "--file-size",
            str(args.file_size),
        ],
        check=False,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=str(cwd)),
    )
    if out.returncode != 0:
        sys.exit(f"the measuring process failed ({cwd}):\n{out.stderr[-3000:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


KEYS = ("dledger_send_cpu_us", "classic_send_cpu_us")


def main(args: argparse.Namespace) -> None:
    trees: list[tuple[str, Path | None]] = [("A", None)]
    if args.ab is not None:
        trees.append(("B", args.ab))
    rows: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    for r in range(args.rounds):
        for name, tree in trees if r % 2 == 0 else trees[::-1]:
            result = _run_child(tree, args)
            rows[name].append(result)
            print(
                f"round {r + 1} {name}: 1-node DLedger {result['dledger_send_cpu_us']:6.1f} us "
                f"a send, classic master {result['classic_send_cpu_us']:6.1f} "
                f"(load {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    summary: dict[str, Any] = {}
    print()
    for name, tree in trees:
        figures: dict[str, Any] = {"tree": str(tree) if tree else "this tree"}
        for key in KEYS:
            values = [round(row[key], 2) for row in rows[name]]
            figures[key] = {
                "median": statistics.median(values),
                "range": [min(values), max(values)],
                "rounds": values,
            }
        summary[name] = figures
        d, c = figures[KEYS[0]], figures[KEYS[1]]
        print(
            f"{name} ({figures['tree']}): DLedger {d['median']:.1f} us a send "
            f"({d['range'][0]:.1f}-{d['range'][1]:.1f}), classic {c['median']:.1f} "
            f"({c['range'][0]:.1f}-{c['range'][1]:.1f}); median (range)"
        )
    ratios = {}
    if "B" in summary:
        for key in KEYS:
            ratios[key] = round(summary["A"][key]["median"] / summary["B"][key]["median"], 3)
        print(f"A / B: {ratios[KEYS[0]]:.2f} of the DLedger CPU a send")
    print(
        json.dumps(
            {
                "bench": "dledger_port_path",
                "count": args.count,
                "per_read": args.per_read,
                "rounds": args.rounds,
                "cpus": os.cpu_count(),
                "loadavg": os.getloadavg(),
                "trees": summary,
                "a_over_b": ratios,
            }
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20_000, help="sends a round (20000)")
    parser.add_argument("--per-read", type=int, default=16, help="sends a read (16)")
    parser.add_argument(
        "--file-size", type=int, default=FILE_SIZE, help="log and commit log file bytes (256 MiB)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds (5)")
    parser.add_argument(
        "--ab", type=Path, default=None, metavar="DIR", help="also run the hanet tree in DIR"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        trio.run(_child, arguments.count, arguments.per_read, arguments.file_size)
    else:
        if arguments.ab is not None:
            arguments.ab = arguments.ab.resolve()
        main(arguments)
