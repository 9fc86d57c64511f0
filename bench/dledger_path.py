"""A DLedger node's own per-entry work in process: CPU per entry on a follower and a leader,
no sockets, no trio, no Raft core.

Run: ``.venv/bin/python bench/dledger_path.py [--count N] [--batch B] [--rounds R] [--ab DIR]``

A child process holds a node's log (``FileLog``), kept bodies and commit log view (a SLAVE
store, ASYNC_FLUSH) in a temporary directory and does, ``--batch`` entries at a time, what the
node's loop does with them once Raft has decided:

- follower: decode an APPEND frame of ``--batch`` 100-byte messages over 4 queues (built
  beforehand by a leader's encoder), append its entries to the log, keep their bodies, apply
  them to the view (commit index: the last) and release them;
- leader: encode the batch's messages as the leader's records (``put_records``), append the
  entries, keep the bodies, apply them with every index wanted (each put learns where its
  message went) and release them.

The figure is the child's CPU time (``time.process_time``) per entry of each role: the Python
and native work of the DLedger loop without the socket reads and writes, trio's scheduling and
the Raft core, which ``bench/dledger_put.py`` includes. CPU time, not wall time, so it moves
much less with the machine's load (other processes still slow a CPU's caches and clock:
compare rounds run side by side).

``--ab DIR`` also runs the hanet source tree in ``DIR`` (a worktree of another commit with its
built extensions) in every round, the two alternating; each figure's median and range per
tree, and the ratio of the medians.

A table for humans, then the last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SIZE = 100
QUEUES = 4
HOST = (b"\x7f\x00\x00\x01", 10911)
ROLES = ("follower_cpu_us", "leader_cpu_us")


def _child(count: int, batch: int) -> None:
    # the child's hanet: the tree under test comes first on sys.path
    from hanet import dledger
    from hanet.dledger import (
        AppendRequest,
        Bodies,
        Envelope,
        FileLog,
        LogEntry,
        decode_envelope,
        encode_envelope,
        put_records,
    )
    from hanet.store import CommitLogStore, Message, StoreConfig, StoreRole

    # an --ab baseline from before the view was a public name (session 9's integ) has it only
    # in its module
    view_class: Any = (
        getattr(dledger, "CommitLogView", None)
        or importlib.import_module("hanet.dledger._view").CommitLogView
    )

    rounds = max(count // batch, 1)
    messages = [
        [Message(topic="BenchPath", body=b"x" * SIZE, queue_id=(r * batch + k) % QUEUES)]
        for r in range(rounds)
        for k in range(batch)
    ]
    root = Path(tempfile.mkdtemp(prefix="dledger-path-"))
    figures: dict[str, float] = {}
    try:
        for role in ("follower", "leader"):
            directory = root / role
            log = FileLog.open(directory / "log")
            store = CommitLogStore.open(
                directory / "store",
                StoreConfig(role=StoreRole.SLAVE, store_host="127.0.0.1:10911"),
            )
            bodies = Bodies()
            view = view_class(role, log, store, bodies)
            view.load()

            def place(size: int, end: int) -> int:
                return end

            def now() -> int:
                return 1_700_000_000_000

            frames: list[bytes] = []
            if role == "follower":
                index = 0
                for r in range(rounds):
                    chunk = [m for ms in messages[r * batch : (r + 1) * batch] for m in ms]
                    raws = put_records(chunk, 0, place, HOST, now)
                    entries = tuple(LogEntry(index + 1 + k, 1, raw) for k, raw in enumerate(raws))
                    request = AppendRequest(1, "a", index, 1 if index else 0, entries, index)
                    frames.append(bytes(encode_envelope(Envelope("a", "b", request))))
                    index += len(entries)
            started = time.process_time()
            if role == "follower":
                for frame in frames:
                    envelope = decode_envelope(frame)
                    assert isinstance(envelope, Envelope)
                    append = envelope.message
                    assert isinstance(append, AppendRequest)
                    entries = append.entries
                    log.append(entries)
                    for entry in entries:
                        bodies.keep(entry.index, entry.term, entry.body)
                    view.apply(entries[-1].index)
                    bodies.release_through(view.applied)
            else:
                index = 0
                wanted: dict[int, None] = {}
                for r in range(rounds):
                    chunk = [m for ms in messages[r * batch : (r + 1) * batch] for m in ms]
                    raws = put_records(chunk, log.end_pos, log.next_entry_pos, HOST, now)
                    entries = tuple(LogEntry(index + 1 + k, 1, raw) for k, raw in enumerate(raws))
                    log.append(entries)
                    for entry in entries:
                        bodies.keep(entry.index, entry.term, entry.body)
                        wanted[entry.index] = None
                    placed = view.apply(entries[-1].index, wanted)
                    assert len(placed) == len(entries)
                    for each in placed:
                        del wanted[each]
                    bodies.release_through(view.applied)
                    index += len(entries)
            spent = time.process_time() - started
            assert view.applied == rounds * batch and store.max_offset > 0
            figures[f"{role}_cpu_us"] = spent / (rounds * batch) * 1e6
            log.close()
            store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(figures))


def _run_child(tree: Path | None, count: int, batch: int) -> dict[str, float]:
    cwd = tree or ROOT
    out = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            "--count",
            str(count),
            "--batch",
            str(batch),
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


def main(args: argparse.Namespace) -> None:
    trees: list[tuple[str, Path | None]] = [("A", None)]
    if args.ab is not None:
        trees.append(("B", args.ab))
    rows: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    for r in range(args.rounds):
        for name, tree in trees if r % 2 == 0 else trees[::-1]:
            result = _run_child(tree, args.count, args.batch)
            rows[name].append(result)
            print(
                f"round {r + 1} {name}: follower {result['follower_cpu_us']:5.2f} us an entry, "
                f"leader {result['leader_cpu_us']:5.2f} us an entry "
                f"(load {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    summary: dict[str, Any] = {}
    print()
    for name, tree in trees:
        figures: dict[str, Any] = {"tree": str(tree) if tree else "this tree"}
        for key in ROLES:
            values = [round(row[key], 2) for row in rows[name]]
            figures[key] = {
                "median": statistics.median(values),
                "range": [min(values), max(values)],
                "rounds": values,
            }
        summary[name] = figures
        f, lead = figures["follower_cpu_us"], figures["leader_cpu_us"]
        print(
            f"{name} ({figures['tree']}): follower {f['median']:.2f} us an entry "
            f"({f['range'][0]:.2f}-{f['range'][1]:.2f}), leader {lead['median']:.2f} "
            f"({lead['range'][0]:.2f}-{lead['range'][1]:.2f}); median (range)"
        )
    ratios = {}
    if "B" in summary:
        for key in ROLES:
            ratios[key] = round(summary["A"][key]["median"] / summary["B"][key]["median"], 3)
        print(
            f"A / B: {ratios['follower_cpu_us']:.2f} of the CPU an entry on a follower, "
            f"{ratios['leader_cpu_us']:.2f} on a leader"
        )
    print(
        json.dumps(
            {
                "bench": "dledger_path",
                "count": args.count,
                "batch": args.batch,
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
    parser.add_argument("--count", type=int, default=20_000, help="entries a round (20000)")
    parser.add_argument("--batch", type=int, default=10, help="entries an append (10)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (5)")
    parser.add_argument(
        "--ab", type=Path, default=None, metavar="DIR", help="also run the hanet tree in DIR"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        _child(arguments.count, arguments.batch)
    else:
        if arguments.ab is not None:
            arguments.ab = arguments.ab.resolve()
        main(arguments)
