"""kill -9 soak: a SYNC master and two slaves as processes, SYNC producers, a seeded chaos loop.

Each cycle kills one process chosen at random (master, slave1 or slave2) with SIGKILL, waits a
moment and starts it again on the same store and ports, while producers keep putting through
the master (reconnecting while it is down). Every ``--fault-every``-th cycle hits the master's
disk instead, in turn: a **disk flip** (the master stopped, one byte of a record in its last
file flipped) or a **lost tail** (the master killed, the last bytes of its data zeroed: pages
never written back). The master always starts with ``--repair-from`` its slaves' broker ports,
so it repairs the flipped record, or takes its lost tail back, from a slave before it serves.
At the end the producers stop, the slaves catch up, every process is stopped with SIGTERM and
the stores are checked offline:

- every message answered PUT_OK is on the master and on at least one slave, at the offset the
  answer named, with its body intact;
- each slave's commit log is a byte-identical prefix of the master's;
- no process grew its file descriptors past its store files and its connections.

    .venv/bin/python bench/soak.py --cycles 200 --seed 7

A table for humans, then the last line is one JSON object. Exit status 1 when a check fails
(the seed is printed so the run can be replayed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from hanet.client import BrokerClient, BrokerError, PutStatus
from hanet.store import CommitLogReader
from hanet.store.lowlevel import list_mapped_files
from hanet.testing import cli_flags, flip_store_byte, free_ports

FILE = 1024 * 1024
FAST = cli_flags(heartbeat_interval=0.3, housekeeping_interval=3, mapped_file_size=FILE)


class Node:
    """One ``hanet`` process with a fixed store and fixed ports, restartable."""

    def __init__(self, name: str, root: Path, argv: list[str]) -> None:
        self.name = name
        self.root = root
        self.argv = argv
        self.process: trio.Process | None = None
        self.starts = 0
        self.kills = 0
        self.fds_at_start = 0

    @property
    def store(self) -> Path:
        return self.root / self.name

    async def start(self) -> None:
        self.starts += 1
        ready = self.root / f"{self.name}.ready"
        ready.unlink(missing_ok=True)
        log = (self.root / f"{self.name}.log").open("ab")
        self.process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "hanet", *self.argv, "--ready-file", str(ready)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        log.close()
        with trio.fail_after(30):
            while not ready.exists():
                if self.process.returncode is not None:
                    raise RuntimeError(f"{self.name} exited with {self.process.returncode}")
                await trio.sleep(0.02)
        self.fds_at_start = self.fds() - self.mapped_files()

    def mapped_files(self) -> int:
        """Descriptors commit log and consume queue files legitimately hold: two each (the
        open file and the duplicate Python's mmap keeps)."""
        files = [p for p in self.store.rglob("*") if p.is_file() and p.parent != self.store]
        return 2 * len(files)

    def fds(self) -> int:
        if self.process is None or self.process.returncode is not None:
            return 0
        try:
            return len(os.listdir(f"/proc/{self.process.pid}/fd"))
        except OSError:
            return 0

    async def kill(self) -> None:
        assert self.process is not None
        self.kills += 1
        self.process.kill()
        await self.process.wait()

    async def stop(self) -> int:
        if self.process is None:
            return 0
        if self.process.returncode is not None:
            return self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            return await self.process.wait()


class Producers:
    """SYNC producers through the master; remember every PUT_OK."""

    def __init__(self, port: int, count: int) -> None:
        self.port = port
        self.count = count
        self.acked: dict[bytes, int] = {}  # body -> wrote offset
        self.statuses: dict[str, int] = {}
        self.errors = 0
        self.running = True

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            for n in range(self.count):
                nursery.start_soon(self._one, n)

    async def _one(self, n: int) -> None:
        seq = 0
        while self.running:
            try:
                async with BrokerClient.connect(
                    "127.0.0.1", self.port, connect_timeout=2, request_timeout=10
                ) as client:
                    while self.running:
                        body = b"p%d-%d-" % (n, seq) + bytes([seq % 256]) * 200
                        seq += 1
                        reply = await client.put("Soak", body)
                        name = reply.status.value
                        self.statuses[name] = self.statuses.get(name, 0) + 1
                        if reply.status is PutStatus.PUT_OK:
                            self.acked[body] = reply.wrote_offset
            except (BrokerError, OSError):
                self.errors += 1
                await trio.sleep(0.1)


def read_all(store: Path) -> dict[int, bytes]:
    """Physical offset -> body of every valid record of a store's commit log."""
    if not list_mapped_files(store / "commitlog"):
        return {}
    reader = CommitLogReader(store / "commitlog", FILE)
    return {offset: record.body for offset, record in reader.records()}


def commit_log_bytes(store: Path) -> bytes:
    out = bytearray()
    for _, path in list_mapped_files(store / "commitlog"):
        out += path.read_bytes()
    return bytes(out)


def data_end(store: Path) -> int:
    """Where the valid records of a store's commit log end."""
    if not list_mapped_files(store / "commitlog"):
        return 0
    end = 0
    for offset, record in CommitLogReader(store / "commitlog", FILE).records(check_crc=False):
        end = offset + record.size
    return end


def flip_a_record(store: Path, rng: random.Random) -> int | None:
    """Flip one body byte of a record in the second half of the last file (where recovery
    walks); its offset, or None when that file holds too few records."""
    files = list_mapped_files(store / "commitlog")
    start = files[-1][0]
    offsets = [
        offset
        for offset, _ in CommitLogReader(store / "commitlog", FILE).records(start)
        if offset >= start
    ]
    if len(offsets) < 4:
        return None
    offset = rng.choice(offsets[len(offsets) // 2 : -1])
    flip_store_byte(store, offset + 88, FILE)  # the body's first byte (IPv4: 88-byte header)
    return offset


def lose_tail(store: Path, rng: random.Random) -> int:
    """Zero the last bytes of the store's data (at most to its last file's start); how many."""
    end = data_end(store)
    lost = min(rng.randint(500, 8000), end % FILE)
    path = store / "commitlog" / f"{end - end % FILE:020d}"
    with path.open("r+b") as f:
        f.seek(end % FILE - lost)
        f.write(bytes(lost))
    return lost


async def disk_fault(master: Node, cycle: int, rng: random.Random) -> str:
    """Hit the master's disk (a flip or a lost tail, alternately) and restart it."""
    if cycle % 2 == 0:
        await master.stop()  # a clean stop, then one flipped byte on the disk
        flipped = flip_a_record(master.store, rng)
        what = "nothing to flip" if flipped is None else f"flipped a byte of {flipped}"
    else:
        await master.kill()  # kill -9, and the pages of its last bytes never written back
        what = f"lost its last {lose_tail(master.store, rng)} bytes"
    await master.start()
    return what


async def soak(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    rng = random.Random(args.seed)
    broker, ha, *slave_ports = free_ports(4)
    replicas = ",".join(f"127.0.0.1:{port}" for port in slave_ports)
    master = Node(
        "master",
        root,
        [
            "master",
            *cli_flags(store=root / "master", role="SYNC_MASTER", slave_timeout=2),
            *cli_flags(listen=f"127.0.0.1:{broker}", ha_listen=f"127.0.0.1:{ha}"),
            *cli_flags(repair_from=replicas),
            *FAST,
        ],
    )
    slaves = [
        Node(
            name,
            root,
            [
                "slave",
                *cli_flags(store=root / name, master_ha=f"127.0.0.1:{ha}"),
                # the master's broker port: the slave compares epochs before it follows
                *cli_flags(master_broker=f"127.0.0.1:{broker}"),
                *cli_flags(listen=f"127.0.0.1:{port}", reconnect_interval=0.2),
                *FAST,
            ],
        )
        for name, port in zip(("slave1", "slave2"), slave_ports, strict=True)
    ]
    nodes = [master, *slaves]
    producers = Producers(broker, args.producers)
    faults: list[str] = []
    started = time.monotonic()
    try:
        for node in nodes:
            await node.start()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(producers.run)
            for cycle in range(args.cycles):
                await trio.sleep(rng.uniform(0.3, 1.0))
                if args.fault_every and (cycle + 1) % args.fault_every == 0:
                    what = await disk_fault(master, len(faults), rng)
                    faults.append(what)
                    print(f"cycle {cycle + 1:>4}: master {what}", flush=True)
                    continue
                victim = rng.choice(nodes)
                await victim.kill()
                await trio.sleep(rng.uniform(0.05, 0.5))
                await victim.start()
                print(
                    f"cycle {cycle + 1:>4}: killed {victim.name:<7} acked "
                    f"{len(producers.acked):>8,}",
                    flush=True,
                )
            await trio.sleep(1.0)
            producers.running = False
            # Let the slaves catch up with the master.
            with trio.move_on_after(30):
                async with BrokerClient.connect("127.0.0.1", broker) as client:
                    target = (await client.status()).max_offset
                while True:
                    ends = [data_end(s.store) for s in slaves]
                    if min(ends) >= target:
                        break
                    await trio.sleep(0.2)
            fd_growth = {n.name: n.fds() - n.mapped_files() - n.fds_at_start for n in nodes}
    finally:
        codes = [await n.stop() for n in nodes]
    elapsed = time.monotonic() - started
    master_records = read_all(master.store)
    slave_records = [read_all(s.store) for s in slaves]
    master_bytes = commit_log_bytes(master.store)
    problems: list[str] = []
    for body, offset in producers.acked.items():
        if master_records.get(offset) != body:
            problems.append(f"acked message at {offset} missing or altered on the master")
        if not any(records.get(offset) == body for records in slave_records):
            problems.append(f"acked message at {offset} on no slave")
    for slave in slaves:
        end = data_end(slave.store)
        if commit_log_bytes(slave.store)[:end] != master_bytes[:end]:
            problems.append(f"{slave.name} is not a byte-identical prefix of the master")
    # Connections come and go (producers, slaves): a leak grows past any of them.
    if any(growth > args.producers + 8 for growth in fd_growth.values()):
        problems.append(f"fd growth {fd_growth}")
    if codes != [0, 0, 0]:
        problems.append(f"exit statuses {codes}")
    return {
        "seed": args.seed,
        "cycles": args.cycles,
        "kills": {n.name: n.kills for n in nodes},
        "disk_faults": faults,
        "master_repairs": _repairs(root / "master.log"),
        "acked": len(producers.acked),
        "statuses": producers.statuses,
        "producer_reconnects": producers.errors,
        "fd_growth": fd_growth,
        "seconds": round(elapsed, 1),
        "problems": problems[:20],
        "problem_count": len(problems),
        "ok": not problems,
    }


def _repairs(log: Path) -> dict[str, int]:
    """What the master's ``--repair-from`` did across its starts (from its log)."""
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    return {"ranges": text.count(": repaired ["), "lost_tails": text.count("(a lost tail)")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=20, help="kill/restart cycles (20)")
    parser.add_argument("--seed", type=int, default=1, help="chaos seed (1)")
    parser.add_argument("--producers", type=int, default=8, help="SYNC producers (8)")
    parser.add_argument(
        "--fault-every",
        type=int,
        default=5,
        help="every Nth cycle flips a byte on the master's disk or loses its tail (5; 0: never)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the stores and logs")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="hanet-soak-"))
    try:
        result = trio.run(soak, args, root)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"seed {result['seed']}: {result['cycles']} cycles, kills {result['kills']}")
    print(f"acknowledged {result['acked']:,} messages; statuses {result['statuses']}")
    verdict = "OK" if result["ok"] else f"{result['problem_count']} PROBLEMS"
    print(f"checked master and slaves offline: {verdict}")
    for problem in result["problems"]:
        print(f"  {problem}")
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
