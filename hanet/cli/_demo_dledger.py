"""``hanet demo --dledger``: three DLedger nodes, the leader killed half-way, then checks.

Three ``hanet dledger`` processes (this interpreter) on free loopback ports, in a temporary
directory (or ``--dir``), with small files (16 MiB DLedger data files, ``--mapped-file-size``
view files) and a 0.5 s election timeout. A producer in this process puts ``--messages``
messages through a :class:`~hanet.client.FailoverClient` (``--concurrency`` tasks of
``--batch`` messages) while a live display shows each node's role, term, commit, applied and
last index and lag (from STATUS's ``dledger`` section) and the produced and acknowledged
counts. Once half the messages are acknowledged the leader is killed with SIGKILL; the display
shows the new leader and how long the election took, and the killed node is restarted so it
catches up. At the end the nodes are stopped cleanly (SIGTERM) and each node's commit log view
is read (:class:`~hanet.store.CommitLogReader`): every acknowledged message must be there on
all three nodes, in the same order, and the views must be byte-identical
(:func:`~hanet.store.compare_commit_logs`). Exit 0 when every check passes, 1 otherwise, 2 when
a process could not start. The processes are stopped however the demo ends, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import trio
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table

from hanet.client import (
    BrokerClient,
    BrokerError,
    BrokerRequestError,
    FailoverClient,
    PutMessage,
    PutStatus,
)
from hanet.dledger import INDEX_ENTRY_SIZE, DLedgerError, decode_index_entry, index_entry_offset
from hanet.protocol import DLedgerInfo
from hanet.store import CommitLogReader, StoreError, compare_commit_logs
from hanet.testing import free_ports

from ._demo import HOST, _Part, _Parts, run_parts

__all__ = ["run_dledger_demo"]

IDS = ("n0", "n1", "n2")
ELECTION_TIMEOUT = 0.5
DATA_FILE_SIZE = "16M"
INDEX_FILE_SIZE = "1M"
TOPIC = "DemoTopic"


def _body(seq: int, size: int) -> bytes:
    return (b"%d|" % seq).ljust(size, b"d")


# -- state and display ----------------------------------------------------------------------


@attrs.define
class _Node:
    name: str
    broker: tuple[str, int]
    part: _Part | None = None
    info: DLedgerInfo | None = None
    state: str = "starting"


@attrs.define
class _View:
    total: int
    nodes: dict[str, _Node]
    produced: int = 0
    acked: int = 0
    unknown: int = 0
    phase: str = "starting"
    events: list[str] = attrs.field(factory=list)
    started: float = attrs.field(factory=time.monotonic)

    def event(self, text: str) -> None:
        self.events.append(f"{time.monotonic() - self.started:6.2f} s  {text}")

    def leader(self) -> _Node | None:
        for node in self.nodes.values():
            if node.state == "up" and node.info is not None and node.info.role == "LEADER":
                return node
        return None

    def render(self) -> Any:
        elapsed = time.monotonic() - self.started
        rate = self.acked / elapsed if elapsed > 0 else 0.0
        head = Table.grid(padding=(0, 1))
        head.add_row(
            "acknowledged",
            ProgressBar(total=self.total, completed=self.acked, width=40),
            f"{self.acked:,}/{self.total:,}",
            f"{rate:,.0f} msg/s",
        )
        head.add_row(
            "produced",
            f"{self.produced:,}",
            f"unknown outcome {self.unknown:,}" if self.unknown else "",
            self.phase,
        )
        leader = self.leader()
        top = max((n.info.last_index for n in self.nodes.values() if n.info), default=-1)
        if leader is not None and leader.info is not None:
            top = leader.info.last_index
        table = Table(title="DLedger group (each node's STATUS)", title_justify="left")
        for column in ("node", "state", "role", "term", "commit", "applied", "last", "lag"):
            left = column in ("node", "state", "role")
            table.add_column(column, justify="left" if left else "right", no_wrap=True)
        for node in self.nodes.values():
            info = node.info
            if info is None or node.state != "up":
                table.add_row(f"{node.name} ({node.broker[1]})", node.state, *["-"] * 6)
                continue
            table.add_row(
                f"{node.name} ({node.broker[1]})",
                node.state,
                info.role,
                str(info.term),
                f"{info.commit_index:,}",
                f"{info.applied_index:,}",
                f"{info.last_index:,}",
                f"{max(top - info.applied_index, 0):,}",
            )
        parts: list[Any] = [head, table]
        if self.events:
            parts.append("\n".join(self.events[-6:]))
        return Group(*parts)


async def _status(node: _Node) -> DLedgerInfo | None:
    try:
        async with BrokerClient.connect(
            *node.broker, connect_timeout=0.5, request_timeout=0.5
        ) as client:
            return (await client.status()).dledger
    except BrokerError:
        return None


async def _poll(view: _View) -> None:
    async def one(node: _Node) -> None:
        if node.state != "up":
            return
        info = await _status(node)
        if node.state == "up":  # not killed meanwhile
            node.info = info

    async with trio.open_nursery() as nursery:
        for node in view.nodes.values():
            nursery.start_soon(one, node)


# -- the demo -------------------------------------------------------------------------------


async def run_dledger_demo(args: argparse.Namespace) -> int:
    """``hanet demo --dledger``."""
    if args.messages < 1 or args.size < 1 or args.mapped_file_size < 64 * 1024:
        print("hanet: --messages, --size >= 1; --mapped-file-size >= 65536", file=sys.stderr)
        return 2
    if args.tls:
        print("hanet: --tls is not available with --dledger", file=sys.stderr)
        return 2
    return await run_parts(args, _run, lost="the group went away")


class _Demo:
    def __init__(self, args: argparse.Namespace, workdir: Path, parts: _Parts) -> None:
        self.args = args
        self.workdir = workdir
        self.parts = parts
        ports = free_ports(2 * len(IDS), HOST)
        self.peers = ",".join(f"{n}={HOST}:{ports[i]}" for i, n in enumerate(IDS))
        self.view = _View(
            args.messages,
            {n: _Node(n, (HOST, ports[len(IDS) + i])) for i, n in enumerate(IDS)},
        )
        self.starts = 0
        self.acked: set[bytes] = set()
        self.half = trio.Event()
        self.killed: str | None = None
        self.killed_at: float | None = None
        self.new_leader: tuple[str, int, float] | None = None
        self.first_ack_after_kill: float | None = None
        self.restarted_at: float | None = None
        self.caught_up_after: float | None = None
        self.polled = trio.Event()  # set (and replaced) after each of the monitor's polls

    async def start(self, name: str) -> None:
        self.starts += 1
        node = self.view.nodes[name]
        label = name if self.starts <= len(IDS) else f"{name}-restart{self.starts - len(IDS)}"
        ready = self.workdir / f"{label}.ready"
        ready.unlink(missing_ok=True)
        node.state = "starting"
        node.part = await self.parts.start(
            label,
            [
                "dledger", "--group", "demo", "--id", name, "--peers", self.peers,
                "--store", str(self.workdir / name), "--listen", "{}:{}".format(*node.broker),
                "--ready-file", str(ready), "--election-timeout", str(ELECTION_TIMEOUT),
                "--data-file-size", DATA_FILE_SIZE, "--index-file-size", INDEX_FILE_SIZE,
                "--mapped-file-size", str(self.args.mapped_file_size),
            ],
        )  # fmt: skip
        await self.parts.wait_ready(node.part, ready)
        node.state = "up"

    async def produce(self) -> None:
        args = self.args
        sequence = iter(range(args.messages))
        addresses = [n.broker for n in self.view.nodes.values()]
        async with FailoverClient.connect(
            addresses, retry_for=20, connect_timeout=1, request_timeout=10
        ) as client:

            async def worker() -> None:
                view = self.view
                while True:
                    seqs = list(itertools.islice(sequence, args.batch))
                    batch = [_body(seq, args.size) for seq in seqs]
                    if not batch:
                        return
                    view.produced += len(batch)
                    try:
                        replies = await client.put_batch(
                            [PutMessage(TOPIC, body, tags="demo") for body in batch]
                        )
                    except BrokerRequestError:  # WAIT_QUORUM_ACK_TIMEOUT: the outcome is unknown
                        view.unknown += len(batch)
                        continue
                    for body, reply in zip(batch, replies, strict=True):
                        if reply.status is PutStatus.PUT_OK:
                            self.acked.add(body)
                            view.acked += 1
                            if self.killed_at is not None and self.first_ack_after_kill is None:
                                self.first_ack_after_kill = time.monotonic() - self.killed_at
                        else:
                            view.unknown += 1
                    if view.acked >= args.messages // 2:
                        self.half.set()

            async with trio.open_nursery() as nursery:
                for _ in range(args.concurrency):
                    nursery.start_soon(worker)

    async def failover(self) -> None:
        view = self.view
        await self.half.wait()
        leader = view.leader()
        while leader is None:
            await trio.sleep(0.02)
            await _poll(view)
            leader = view.leader()
        assert leader.part is not None and leader.info is not None
        old_term = leader.info.term
        leader.state = "killed"
        leader.part.process.kill()  # SIGKILL
        self.killed_at = time.monotonic()
        self.killed = leader.name
        view.event(f"[red]leader {leader.name} killed[/] (SIGKILL) at {view.acked:,} acknowledged")
        while True:
            await trio.sleep(0.02)
            await _poll(view)
            new = view.leader()
            if new is not None and new.info is not None and new.info.term > old_term:
                took = time.monotonic() - self.killed_at
                self.new_leader = (new.name, new.info.term, took)
                view.event(
                    f"[green]new leader {new.name}[/] (term {new.info.term}) after {took:.2f} s"
                )
                break
        await leader.part.process.wait()
        await trio.sleep(0.5)  # a little behind, so there is something to catch up
        self.restarted_at = time.monotonic()
        await self.start(leader.name)
        view.event(f"{leader.name} restarted, catching up")

    async def monitor(self, live: Live, done: trio.Event) -> None:
        while not done.is_set():
            await _poll(self.view)
            self.polled.set()
            self.polled = trio.Event()
            live.update(self.view.render())
            await trio.sleep(0.1)

    def in_sync(self) -> bool:
        nodes = self.view.nodes.values()
        if any(n.state != "up" or n.info is None for n in nodes):
            return False
        infos = [n.info for n in nodes if n.info is not None]
        leaders = [i for i in infos if i.role == "LEADER"]
        return (
            len(leaders) == 1
            and len({(i.commit_index, i.applied_index, i.last_index) for i in infos}) == 1
            and leaders[0].commit_index == leaders[0].last_index
        )


async def _run(args: argparse.Namespace, workdir: Path, parts: _Parts) -> bool:
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 110)
    demo = _Demo(args, workdir, parts)
    view = demo.view
    console.print(
        f"[bold]hanet demo --dledger[/] in {workdir}: three DLedger nodes, {args.messages:,} "
        f"messages of {args.size} bytes, election timeout {ELECTION_TIMEOUT} s, "
        f"{DATA_FILE_SIZE} data files"
    )
    for name in IDS:
        await demo.start(name)
        node = view.nodes[name]
        console.print(f"{name}  broker {node.broker[0]}:{node.broker[1]}")
    with trio.fail_after(20):
        while view.leader() is None:
            await _poll(view)
            await trio.sleep(0.05)
    leader = view.leader()
    assert leader is not None and leader.info is not None
    console.print(f"leader {leader.name} (term {leader.info.term})")

    view.started = time.monotonic()
    view.phase = "producing"
    done = trio.Event()
    with Live(view.render(), console=console, refresh_per_second=8) as live:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(demo.monitor, live, done)
            async with trio.open_nursery() as work:
                work.start_soon(demo.failover)
                await demo.produce()
                demo.half.set()  # fewer acknowledged than half: kill now all the same
                view.phase = "produced; failover under way"
            produce_seconds = time.monotonic() - view.started
            view.phase = "catching up"
            while not demo.in_sync():  # the monitor's view: no polls of its own
                await demo.polled.wait()
            if demo.restarted_at is not None:
                demo.caught_up_after = time.monotonic() - demo.restarted_at
            view.phase = "in sync"
            view.event("all three nodes in sync")
            done.set()
        live.update(view.render())
    console.print()
    final = {n: node.info for n, node in view.nodes.items()}

    console.print("stopping the nodes (SIGTERM: clean shutdown) ...")
    codes = {}
    for name, node in view.nodes.items():
        assert node.part is not None
        codes[name] = await parts.stop(node.part)
        node.state = "stopped"
    return _check(args, demo, console, final, codes, produce_seconds)


def _bodies(root: Path, file_size: int) -> tuple[list[bytes], str | None]:
    try:
        reader = CommitLogReader(root / "commitlog", file_size)
        bodies = [record.body for _, record in reader.records()]
    except (StoreError, OSError) as exc:
        return [], str(exc)
    return bodies, None


def _committed_data(root: Path, commit_index: int) -> tuple[int, str]:
    """The length and SHA-256 of the DLedger data files up to the end of entry ``commit_index``
    (a Raft index: DLedger index ``commit_index - 1``), read through the index files."""
    if commit_index < 1:
        return 0, hashlib.sha256().hexdigest()
    at = index_entry_offset(commit_index - 1)
    index_files = sorted((root / "dledger" / "index").iterdir())
    index_file_size = index_files[0].stat().st_size
    name = f"{at - at % index_file_size:020d}"
    with (root / "dledger" / "index" / name).open("rb") as f:
        f.seek(at % index_file_size)
        entry = decode_index_entry(f.read(INDEX_ENTRY_SIZE))
    end = entry.pos + entry.size
    digest = hashlib.sha256()
    left = end
    for path in sorted((root / "dledger" / "data").iterdir()):
        with path.open("rb") as f:
            while left > 0:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    break
                digest.update(chunk)
                left -= len(chunk)
    if left:
        raise OSError(f"the data files end {left} bytes before entry {commit_index - 1}")
    return end, digest.hexdigest()


def _check(
    args: argparse.Namespace,
    demo: _Demo,
    console: Console,
    final: dict[str, DLedgerInfo | None],
    codes: dict[str, int],
    produce_seconds: float,
) -> bool:
    view = demo.view
    table = Table(title="summary", title_justify="left", show_header=False)
    table.add_column(justify="left", no_wrap=True)
    table.add_column(justify="left")
    good = True
    table.add_row(
        "producer",
        f"{view.produced:,} sent, {view.acked:,} acknowledged, {view.unknown:,} unknown outcome, "
        f"in {produce_seconds:.1f} s ({view.acked / max(produce_seconds, 1e-9):,.0f} msg/s)",
    )
    if demo.killed is None or demo.new_leader is None:
        table.add_row("failover", "[red]the leader was not killed or no new leader was seen[/]")
        good = False
    else:
        name, term, took = demo.new_leader
        after = demo.first_ack_after_kill
        table.add_row(
            "failover",
            f"leader {demo.killed} killed (SIGKILL); new leader {name} (term {term}) "
            f"elected in {took:.2f} s"
            + (f"; first put acknowledged {after:.2f} s after the kill" if after else ""),
        )
        caught = demo.caught_up_after
        table.add_row(
            "restart",
            f"{demo.killed} restarted"
            + (f", caught up in {caught:.1f} s" if caught is not None else ""),
        )
    root = demo.workdir
    reference: list[bytes] | None = None
    data: dict[str, tuple[int, str]] = {}
    for name in IDS:
        bodies, error = _bodies(root / name, args.mapped_file_size)
        info = final.get(name)
        commit = f"commit index {info.commit_index:,}; " if info is not None else ""
        if error is not None:
            table.add_row(name, f"[red]cannot read the commit log view: {error}[/]")
            good = False
            continue
        missing = len(demo.acked - set(bodies))
        verdict = (
            f"{commit}{len(bodies):,} messages, "
            f"{len(demo.acked) - missing:,}/{len(demo.acked):,} acknowledged present"
        )
        duplicates = len(bodies) - len(set(bodies))
        if duplicates:
            verdict += f" ({duplicates:,} stored twice: resent after a lost connection)"
        if missing:
            verdict += f", [red]{missing:,} MISSING[/]"
            good = False
        if reference is None:
            reference = bodies
        elif bodies != reference:
            verdict += f", [red]messages differ from {IDS[0]}'s[/]"
            good = False
        if info is not None:
            try:
                data[name] = _committed_data(root / name, info.commit_index)
            except (DLedgerError, OSError, IndexError) as exc:
                verdict += f"; [red]cannot read the DLedger files: {exc}[/]"
                good = False
        if name != IDS[0]:
            comparison = compare_commit_logs(root / IDS[0], root / name)
            same_data = name in data and data.get(IDS[0]) == data[name]
            if comparison.identical and same_data:
                verdict += (
                    f"; committed log identical to {IDS[0]}'s (DLedger data "
                    f"{data[name][0]:,} bytes, commit log view {comparison.bytes:,} bytes)"
                )
            else:
                problem = comparison.mismatch or "the DLedger data files differ"
                verdict += f"; [red]committed log NOT identical: {problem}[/]"
                good = False
        table.add_row(name, verdict)
    if view.acked != args.messages:
        table.add_row("acknowledged", f"[yellow]{args.messages - view.acked:,} not acknowledged[/]")
    if len(demo.acked) == 0:
        good = False
    bad = {n: c for n, c in codes.items() if c != 0}
    if bad:
        table.add_row("shutdown", f"[red]exit statuses {bad}[/]")
        good = False
    table.add_row(
        "result",
        "[green]OK: every acknowledged message is on all three nodes[/]"
        if good
        else "[red]FAILED[/]",
    )
    console.print(table)
    return good
