"""``hanet demo --consumers``: a consumer group keeps consuming from the slave when the master
is killed.

Real processes of this interpreter on free loopback ports, in a temporary directory (or
``--dir``): a name server (``hanet namesrv``), a SYNC_MASTER and its slave (``hanet master`` /
``hanet slave`` registered with it, ``--slave-read-enable``) and a consumer
(``hanet consume --from-beginning --json --rate``, slow on purpose: about 6 s for all the
messages; its output in ``consumer.jsonl``). A producer in
this process puts ``--messages`` numbered messages to the master the name server names
(``--concurrency`` tasks of ``--batch`` messages) and keeps which were PUT_OK (a SYNC_MASTER's
PUT_OK: the slave has it too). Once the consumer has consumed half of them the master is
killed with SIGKILL; the producer stops (its unanswered puts count as not produced), and the
consumer goes on reading from the slave. When every PUT_OK message was consumed, the consumer
is stopped (SIGTERM: it commits its offsets, to the slave now) and the summary shows how many
messages came from the master and from the slave, and how many were delivered more than once.
Exit 0 when every PUT_OK message was consumed at least once, 1 otherwise (or too slow), 2 when
a process could not start.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections import Counter
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
    NameServerClient,
    PutMessage,
    PutStatus,
    RemotingError,
    parse_broker_address,
)

from ._demo import HOST, _Part, _Parts, run_parts

__all__ = ["run_consumers_demo"]

TOPIC = "DemoTopic"
GROUP = "demo-group"
BROKER_NAME = "broker-a"
CONSUME_SECONDS = 6.0


def _body(seq: int, size: int) -> bytes:
    return (b"%d|" % seq).ljust(size, b"c")


def _seq(body: str) -> int | None:
    head, sep, _ = body.partition("|")
    return int(head) if sep and head.isdigit() else None


@attrs.define
class _View:
    """What the demo shows, updated as it goes."""

    total: int
    produced: int = 0
    acked: set[int] = attrs.field(factory=set)
    consumed: Counter[int] = attrs.field(factory=Counter)
    from_members: Counter[int] = attrs.field(factory=Counter)
    phase: str = "starting"
    events: list[str] = attrs.field(factory=list)
    started: float = attrs.field(factory=time.monotonic)

    def event(self, text: str) -> None:
        self.events.append(f"{time.monotonic() - self.started:6.2f} s  {text}")

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.consumed.values() if n > 1)

    @property
    def missing(self) -> int:
        return sum(1 for seq in self.acked if seq not in self.consumed)

    def render(self) -> Any:
        head = Table.grid(padding=(0, 1))
        head.add_row(
            "produced (PUT_OK)",
            ProgressBar(total=self.total, completed=len(self.acked), width=40),
            f"{len(self.acked):,}/{self.total:,}",
        )
        head.add_row(
            "consumed",
            ProgressBar(total=max(1, len(self.acked)), completed=len(self.consumed), width=40),
            f"{len(self.consumed):,} distinct",
        )
        head.add_row(
            "from",
            f"master {self.from_members[0]:,}",
            f"slave {sum(n for m, n in self.from_members.items() if m != 0):,}",
        )
        head.add_row("duplicates", f"{self.duplicates:,}", self.phase)
        events = Table(title="events", title_justify="left", show_header=False, box=None)
        for line in self.events[-8:]:
            events.add_row(line)
        return Group(head, events)


class _ConsumerOutput:
    """Reads the consumer's JSON lines as they are written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._position = 0
        self._partial = b""

    def read_into(self, view: _View) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self._position)
                data = f.read()
        except OSError:
            return
        self._position += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            seq = _seq(message.get("body", ""))
            if seq is not None:
                view.consumed[seq] += 1
                view.from_members[int(message.get("broker_id", 0))] += 1


async def _produce(args: argparse.Namespace, address: str, view: _View, stop: trio.Event) -> None:
    """Put numbered messages until all are sent, the master is gone, or ``stop``."""
    parsed = parse_broker_address(address)
    assert parsed is not None
    next_seq = 0

    async def worker(client: BrokerClient) -> None:
        nonlocal next_seq
        while next_seq < args.messages and not stop.is_set():
            seqs = range(next_seq, min(next_seq + args.batch, args.messages))
            next_seq = seqs.stop
            view.produced += len(seqs)
            batch = [PutMessage(TOPIC, _body(s, args.size), tags="demo") for s in seqs]
            replies = await client.put_batch(batch)
            for seq, reply in zip(seqs, replies, strict=True):
                if reply.status is PutStatus.PUT_OK:
                    view.acked.add(seq)

    try:
        async with (
            BrokerClient.connect(*parsed, request_timeout=10) as client,
            trio.open_nursery() as nursery,
        ):
            for _ in range(args.concurrency):
                nursery.start_soon(worker, client)
    except* RemotingError as group:
        view.event(f"producer stopped: {group.exceptions[0]}")
    else:
        view.event(f"producer done: {len(view.acked):,} PUT_OK")


async def _wait_registered(names: NameServerClient, members: int, within: float = 20) -> None:
    deadline = time.monotonic() + within
    while True:
        with trio.move_on_after(2):
            cluster = await names.cluster()
            if len(cluster.members()) >= members:
                return
        if time.monotonic() > deadline:
            raise BrokerError(f"the brokers did not register within {within:g} s")
        await trio.sleep(0.1)


def cluster_flags(namesrv: str, workdir: Path) -> list[str]:
    """What makes ``hanet master`` / ``hanet slave`` a member of ``broker-a`` registered with
    ``namesrv`` every second (a new topic shows in its route that soon), serving consumers
    from the slave."""
    conf = workdir / "broker.conf"
    conf.write_text("# hanet demo --consumers\nregisterNameServerPeriod=1000\n", encoding="utf-8")
    return [
        "--config", str(conf), "--namesrv", namesrv, "--broker-name", BROKER_NAME,
        "--slave-read-enable",
    ]  # fmt: skip


async def _run(args: argparse.Namespace, workdir: Path, parts: _Parts) -> bool:
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 110)
    common = ["--mapped-file-size", str(args.mapped_file_size), "--listen", f"{HOST}:0"]
    console.print(
        f"[bold]hanet demo --consumers[/] in {workdir}: a name server, a SYNC_MASTER and its "
        f"slave, {args.messages:,} messages of {args.size} bytes, a consumer group; the "
        "master is killed (SIGKILL) half-way"
    )
    namesrv = await parts.start(
        "namesrv",
        ["namesrv", "--listen", f"{HOST}:0", "--ready-file", str(workdir / "namesrv.ready")],
    )
    ns = (await parts.wait_ready(namesrv, workdir / "namesrv.ready"))["namesrv"]
    console.print(f"namesrv {ns}")
    master = await parts.start(
        "master",
        [
            "master", "--store", str(workdir / "master"), *common, "--ha-listen", f"{HOST}:0",
            "--role", "SYNC_MASTER", "--ready-file", str(workdir / "master.ready"),
            *cluster_flags(ns, workdir),
        ],
    )  # fmt: skip
    master_ready = await parts.wait_ready(master, workdir / "master.ready")
    console.print(f"master  broker {master_ready['broker']}  HA {master_ready['ha']}")
    slave = await parts.start(
        "slave",
        [
            "slave", "--store", str(workdir / "slave"), *common,
            "--master-ha", master_ready["ha"], "--reconnect-interval", "0.2",
            "--ready-file", str(workdir / "slave.ready"), *cluster_flags(ns, workdir),
        ],
    )  # fmt: skip
    slave_ready = await parts.wait_ready(slave, workdir / "slave.ready")
    console.print(f"slave   broker {slave_ready['broker']}  replicating {master_ready['ha']}")
    names = NameServerClient([(HOST, int(ns.rpartition(":")[2]))])
    await _wait_registered(names, 2)

    view = _View(args.messages)
    # A consumer slower than the producer (about CONSUME_SECONDS for all): a backlog is left
    # on the slave when the master is killed.
    rate = max(20, round(args.messages / CONSUME_SECONDS))
    output = _ConsumerOutput(workdir / "consumer.jsonl")
    consumer = await parts.start(
        "consumer",
        [
            "consume", "--namesrv", ns, "--group", GROUP, "--topic", TOPIC, "--from-beginning",
            "--json", "--retry-interval", "1", "--commit-interval", "1", "--timeout", "3",
            "--rate", str(rate),
        ],
        stdout=output.path,
    )  # fmt: skip
    view.event(f"consumer started (group {GROUP}, from the beginning)")
    killed = False
    stop_producing = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_produce, args, master_ready["broker"], view, stop_producing)
        view.phase = "producing and consuming"
        with Live(view.render(), console=console, refresh_per_second=8) as live:
            while True:
                output.read_into(view)
                if consumer.process.returncode is not None:
                    raise BrokerError(f"the consumer exited: {consumer.tail()}")
                if not killed and len(view.consumed) >= args.messages // 2:
                    master.process.send_signal(signal.SIGKILL)
                    await master.process.wait()
                    killed = True
                    stop_producing.set()
                    view.event(f"master killed (SIGKILL) after {len(view.consumed):,} consumed")
                    view.phase = "consuming from the slave"
                produced_all = killed and not nursery.child_tasks
                if produced_all and view.missing == 0:
                    break
                live.update(view.render())
                await trio.sleep(0.1)
            view.event("every PUT_OK message consumed")
            view.phase = "done"
            live.update(view.render())
    view.event("stopping the consumer (SIGTERM: it commits its offsets)")
    code = await parts.stop(consumer)
    output.read_into(view)
    console.print()
    return _summary(console, view, code, _tail(consumer))


def _tail(part: _Part) -> str:
    lines = part.tail(5).split(" | ")
    return next((line for line in reversed(lines) if "consumed" in line), "")


def _summary(console: Console, view: _View, consumer_code: int, consumer_line: str) -> bool:
    table = Table(title="summary", title_justify="left", show_header=False)
    table.add_column(justify="left")
    table.add_column(justify="left")
    table.add_row("produced", f"{len(view.acked):,} PUT_OK of {view.produced:,} sent")
    deliveries = sum(view.consumed.values())
    table.add_row(
        "consumed",
        f"{len(view.consumed):,} distinct messages in {deliveries:,} deliveries: "
        f"{view.from_members[0]:,} from the master, "
        f"{deliveries - view.from_members[0]:,} from the slave",
    )
    table.add_row("duplicates", f"{view.duplicates:,} (delivered more than once: at least once)")
    if consumer_line:
        table.add_row("consumer", consumer_line.removeprefix("hanet: "))
    good = view.missing == 0 and consumer_code == 0 and bool(view.acked)
    if view.missing:
        table.add_row("missing", f"[red]{view.missing:,} PUT_OK messages never consumed[/]")
    if consumer_code != 0:
        table.add_row("consumer exit", str(consumer_code))
    table.add_row("result", "[green]OK[/]" if good else "[red]FAILED[/]")
    console.print(table)
    return good


async def run_consumers_demo(args: argparse.Namespace) -> int:
    """``hanet demo --consumers``."""
    if args.tls or args.dledger:
        print("hanet: --consumers runs without --tls and --dledger", file=sys.stderr)
        return 2
    if args.messages < 2 or args.size < 16 or args.mapped_file_size < 64 * 1024:
        print("hanet: --messages >= 2, --size >= 16; --mapped-file-size >= 65536", file=sys.stderr)
        return 2
    return await run_parts(args, _run, lost="the demo lost a process")
