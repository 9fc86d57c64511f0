"""The broker port's request path in process: CPU per send and per pulled message, no sockets.

Run: ``.venv/bin/python bench/port_path.py [--count N] [--rounds R] [--ab DIR]``

A broker (ASYNC_MASTER, ASYNC_FLUSH, 256 MiB commit log files) runs in a child process; its
port's pipeline (frame decoder, remoting codec, connection, dispatch) serves an
``EmbeddedChannel`` fed with frames built beforehand: ``--count`` SEND_MESSAGE_V2 requests of
1 KiB with the JSON header ali-ons sends (numbers and booleans among the ext fields), 16 a read
over 4 queues, then PULL_MESSAGE requests draining them, 32 messages a pull, 4 pulls a read.
The answers are taken from the channel and dropped. The figure is the child's CPU time
(``time.process_time``) per send and per pulled message: the Python work of the path from
frame to answer bytes (decoding, the store's put, the answer's encoding) without the socket
reads and writes and trio's scheduling, which ``bench/remoting.py`` and ``bench/clients.py``
include. CPU time, not wall time, so it moves much less with the machine's load than those
(other processes still slow a CPU's caches and clock: compare rounds run side by side).

``--ab DIR`` also runs the hanet source tree in ``DIR`` (a worktree of another commit with its
built extensions) in every round, the two alternating; each figure's median and range per tree.

A table for humans, then the last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import trio

from hanet.broker import Broker  # the child's: the tree under test comes first on sys.path
from hanet.ha import BrokerConfig
from hanet.testing import EmbeddedChannel

ROOT = Path(__file__).resolve().parents[1]

TOPIC = "BenchPortPath"
QUEUES = 4
SIZE = 1024
SENDS_A_READ = 16
PULLS_A_READ = 4
PULL_BATCH = 32


def _frame(header: dict[str, Any], body: bytes = b"") -> bytes:
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack(">II", 4 + len(text) + len(body), len(text)) + text + body


def _send_frame(i: int) -> bytes:
    """A SEND_MESSAGE_V2 as ali-ons writes it (its header's key order and value types)."""
    properties = (
        f"TAGS\x01TagA\x02KEYS\x01key{i}\x02UNIQ_KEY\x017F00000100002A9F0000{i:012X}\x02"
        "WAIT\x01true\x02"
    )
    ext = {
        "a": "bench-producer",
        "b": TOPIC,
        "c": "TBW102",
        "d": QUEUES,
        "e": i % QUEUES,
        "f": 0,
        "g": 1795624595700 + i,
        "h": 0,
        "i": properties,
        "j": 0,
        "k": False,
    }
    header = {
        "code": 310,
        "language": "JAVA",
        "opaque": i,
        "flag": 0,
        "version": 121,
        "extFields": ext,
    }
    return _frame(header, b"x" * SIZE)


def _pull_frame(i: int, queue_id: int, offset: int) -> bytes:
    ext = {
        "consumerGroup": "bench-group",
        "topic": TOPIC,
        "queueId": queue_id,
        "queueOffset": offset,
        "maxMsgNums": PULL_BATCH,
        "sysFlag": 2,
        "commitOffset": 0,
        "suspendTimeoutMillis": 15000,
        "subscription": "*",
        "subVersion": 1795624595998,
    }
    header = {
        "code": 11,
        "language": "JAVA",
        "opaque": i,
        "flag": 0,
        "version": 121,
        "extFields": ext,
    }
    return _frame(header)


async def _child(count: int) -> None:
    """Measure in this process (the tree on sys.path) and print one JSON line."""
    with tempfile.TemporaryDirectory(prefix="hanet-bench-port-path-") as tmp:
        config = BrokerConfig(
            store_path_root_dir=Path(tmp),
            listen_port=0,
            ha_listen_port=0,
            mapped_file_size_commit_log=256 * 1024 * 1024,
        )
        async with trio.open_nursery() as nursery:
            broker = Broker(config)
            await nursery.start(broker.run)
            channel = EmbeddedChannel()
            broker.port.initialize(cast(Any, channel))

            def serve(batches: list[bytes]) -> tuple[float, int]:
                answered = 0
                started = time.process_time()
                for batch in batches:
                    channel.write_inbound(batch)
                    while (chunk := channel.read_outbound()) is not None:
                        answered += len(chunk)
                return time.process_time() - started, answered

            warm = [_send_frame(i) for i in range(SENDS_A_READ)]
            serve([b"".join(warm)])  # creates the topic
            frames = [_send_frame(i) for i in range(SENDS_A_READ, SENDS_A_READ + count)]
            sends = [b"".join(frames[i : i + SENDS_A_READ]) for i in range(0, count, SENDS_A_READ)]
            send_cpu, _ = serve(sends)
            highs = [broker.store.max_queue_offset(TOPIC, q) for q in range(QUEUES)]
            pulls = [
                _pull_frame(n, q, offset)
                for n, (q, offset) in enumerate(
                    (q, o) for q in range(QUEUES) for o in range(0, highs[q], PULL_BATCH)
                )
            ]
            reads = [
                b"".join(pulls[i : i + PULLS_A_READ]) for i in range(0, len(pulls), PULLS_A_READ)
            ]
            pull_cpu, pulled_bytes = serve(reads)
            nursery.cancel_scope.cancel()
    total = sum(highs)
    print(
        json.dumps(
            {
                "send_cpu_us": send_cpu / count * 1e6,
                "pull_cpu_us": pull_cpu / total * 1e6,
                "pulled_messages": total,
                "answer_bytes_per_pulled_message": pulled_bytes / total,
            }
        )
    )


def _run_child(tree: Path | None, count: int) -> dict[str, float]:
    cwd = tree or ROOT
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", "--count", str(count)],
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


def main(args: argparse.Namespace) -> None:
    trees: list[tuple[str, Path | None]] = [("A", None)]
    if args.ab is not None:
        trees.append(("B", args.ab))
    rows: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    for r in range(args.rounds):
        for name, tree in trees if r % 2 == 0 else trees[::-1]:
            result = _run_child(tree, args.count)
            rows[name].append(result)
            print(
                f"round {r + 1} {name}: {result['send_cpu_us']:6.1f} us a send, "
                f"{result['pull_cpu_us']:5.2f} us a pulled message "
                f"(load {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    summary: dict[str, Any] = {}
    print()
    for name, tree in trees:
        figures: dict[str, Any] = {"tree": str(tree) if tree else "this tree"}
        for key in ("send_cpu_us", "pull_cpu_us"):
            values = [round(row[key], 2) for row in rows[name]]
            figures[key] = {
                "median": statistics.median(values),
                "range": [min(values), max(values)],
                "rounds": values,
            }
        summary[name] = figures
        s, p = figures["send_cpu_us"], figures["pull_cpu_us"]
        print(
            f"{name} ({figures['tree']}): {s['median']:.1f} us a send "
            f"({s['range'][0]:.1f}-{s['range'][1]:.1f}), {p['median']:.2f} us a pulled "
            f"message ({p['range'][0]:.2f}-{p['range'][1]:.2f}); median (range)"
        )
    ratios = {}
    if "B" in summary:
        for key in ("send_cpu_us", "pull_cpu_us"):
            ratios[key] = round(summary["A"][key]["median"] / summary["B"][key]["median"], 3)
        print(
            f"A / B: {ratios['send_cpu_us']:.2f} of the CPU a send, "
            f"{ratios['pull_cpu_us']:.2f} a pulled message"
        )
    print(
        json.dumps(
            {
                "bench": "port_path",
                "count": args.count,
                "rounds": args.rounds,
                "size": SIZE,
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
    parser.add_argument("--rounds", type=int, default=5, help="rounds (5)")
    parser.add_argument(
        "--ab", type=Path, default=None, metavar="DIR", help="also run the hanet tree in DIR"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        trio.run(_child, arguments.count)
    else:
        if arguments.ab is not None:
            arguments.ab = arguments.ab.resolve()
        main(arguments)
