"""``hanet demo``: a master, two slaves and a producer on loopback, then a byte-for-byte check.

Every part is a real process (``hanet master|slave|put`` run by this interpreter) on free
loopback ports, in a temporary directory (or ``--dir``), with small commit log files (1 MiB) so
the run crosses many files. While the producer runs, a live display shows the puts and each
slave's ack offset, lag and speed (from the brokers' STATUS). Then the brokers are stopped
cleanly and both slaves' commit log files are compared byte for byte with the master's. Exit 0
when every put was PUT_OK, every slave replayed (and CRC-checked) everything and the files are
identical; 1 otherwise; 2 when a process could not start. The subprocesses are stopped
(SIGTERM, then SIGKILL) however the demo ends, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio
import trustme
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table

from hanet.boot import TlsConfig, run_until_stopped
from hanet.client import BrokerClient, BrokerStatus, RemotingError
from hanet.errors import HanetError
from hanet.store import compare_commit_logs

from ._support import stop_status

__all__ = ["register"]

HOST = "127.0.0.1"
HANET = (sys.executable, "-m", "hanet")
"""The ``hanet`` command as a subprocess of this interpreter (no console script needed)."""


class DemoError(HanetError):
    """A part of the demo could not start or stopped unexpectedly."""


def register(subparsers: Any) -> None:
    """Add the ``demo`` verb."""
    parser = subparsers.add_parser(
        "demo",
        description="Start a master, two slaves and a producer as processes on loopback, show "
        "the puts and each slave's lag live, then check that both slaves' commit logs are "
        "byte-identical to the master's.",
    )
    parser.add_argument(
        "--dir", type=Path, default=None, metavar="DIR",
        help="work directory (kept); default: a temporary one, removed after a success",
    )  # fmt: skip
    parser.add_argument(
        "--messages", type=int, default=None, metavar="N",
        help="(50000; 10000 with --dledger, 5000 with --consumers)",
    )  # fmt: skip
    parser.add_argument("--size", type=int, default=1024, metavar="BYTES", help="body (1024)")
    parser.add_argument(
        "--mapped-file-size", type=int, default=1 << 20, metavar="BYTES",
        help="commit log file size (1 MiB)",
    )  # fmt: skip
    parser.add_argument(
        "--role", choices=("SYNC_MASTER", "ASYNC_MASTER"), default="SYNC_MASTER",
        help="the master's role (SYNC_MASTER)",
    )  # fmt: skip
    parser.add_argument("--concurrency", type=int, default=16, metavar="C", help="(16)")
    parser.add_argument("--batch", type=int, default=8, metavar="B", help="per request (8)")
    parser.add_argument(
        "--timeout", type=float, default=50.0, metavar="S", help="give up after S seconds (50)"
    )
    parser.add_argument(
        "--tls", action="store_true",
        help="mutual TLS between all three brokers and the producer (a throw-away CA)",
    )  # fmt: skip
    parser.add_argument(
        "--dledger", action="store_true",
        help="three DLedger (Raft) nodes instead; the leader is killed half-way",
    )  # fmt: skip
    parser.add_argument(
        "--consumers", action="store_true",
        help="a name server, a master, its slave, a producer and a consumer group instead; the "
        "master is killed half-way and the consumer goes on from the slave",
    )  # fmt: skip
    parser.set_defaults(func=run_demo)


class _Certificates:
    """A throw-away CA and a certificate per process, as PEM files in ``root``."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self._ca = trustme.CA(organization_name="hanet demo")
        self.ca = root / "ca.pem"
        self._ca.cert_pem.write_to_path(str(self.ca))

    def flags(self, name: str) -> list[str]:
        """``--tls-cert/--tls-key/--tls-ca`` for a new certificate named ``name``."""
        leaf = self._ca.issue_cert(HOST, f"{name}.hanet.demo", common_name=name)
        cert, key = self.root / f"{name}.crt", self.root / f"{name}.key"
        leaf.private_key_and_cert_chain_pem.write_to_path(str(cert))
        leaf.private_key_pem.write_to_path(str(key))
        return ["--tls-cert", str(cert), "--tls-key", str(key), "--tls-ca", str(self.ca)]

    def client_context(self, name: str) -> ssl.SSLContext:
        flags = self.flags(name)
        return TlsConfig(cert=Path(flags[1]), key=Path(flags[3]), ca=self.ca).client_context()


# -- processes ------------------------------------------------------------------------------


@attrs.define(eq=False)
class _Part:
    """One subprocess of the demo and its log."""

    name: str
    process: trio.Process
    log: Path

    def tail(self, lines: int = 3) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])


class _Parts:
    """The running subprocesses; :meth:`stop_all` ends them whatever happens."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.parts: list[_Part] = []

    async def start(self, name: str, argv: Sequence[str], stdout: Path | None = None) -> _Part:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as err, (stdout or log).open("ab") as out:
            process = await trio.lowlevel.open_process(
                [*HANET, "--log-level", "INFO", *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        part = _Part(name, process, log)
        self.parts.append(part)
        return part

    async def wait_ready(self, part: _Part, ready: Path, within: float = 20.0) -> dict[str, Any]:
        deadline = time.monotonic() + within
        path = trio.Path(ready)
        while not await path.exists():
            if part.process.returncode is not None:
                raise DemoError(
                    f"{part.name} exited with status {part.process.returncode}: {part.tail()}"
                )
            if time.monotonic() > deadline:
                raise DemoError(f"{part.name} not ready after {within:g} s: {part.tail()}")
            await trio.sleep(0.05)
        data: dict[str, Any] = json.loads(await path.read_text(encoding="utf-8"))
        return data

    async def stop(self, part: _Part, grace: float = 10.0) -> int:
        """SIGTERM (a clean shutdown), then SIGKILL after ``grace`` seconds."""
        process = part.process
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            with trio.move_on_after(grace):
                await process.wait()
            if process.returncode is None:
                process.kill()
        return await process.wait()

    async def stop_all(self) -> None:
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for part in self.parts:
                    nursery.start_soon(self.stop, part)


@contextlib.asynccontextmanager
async def _clients(
    *addresses: str, tls: ssl.SSLContext | None = None
) -> AsyncIterator[list[BrokerClient]]:
    async with contextlib.AsyncExitStack() as stack:
        clients = []
        for address in addresses:
            host, _, port = address.rpartition(":")
            client = BrokerClient.connect(host, int(port), tls=tls)
            clients.append(await stack.enter_async_context(client))
        yield clients


# -- the display ----------------------------------------------------------------------------


@attrs.define
class _View:
    total: int
    master: BrokerStatus | None = None
    slaves: list[BrokerStatus] = attrs.field(factory=list)
    started: float = attrs.field(factory=time.monotonic)
    phase: str = "starting"

    def render(self) -> Any:
        elapsed = time.monotonic() - self.started
        puts = self.master.puts if self.master else 0
        rate = puts / elapsed if elapsed > 0 else 0.0
        head = Table.grid(padding=(0, 1))
        head.add_row(
            "puts",
            ProgressBar(total=self.total, completed=puts, width=40),
            f"{puts:,}/{self.total:,}",
            f"{rate:,.0f} msg/s",
        )
        if self.master is not None:
            head.add_row(
                "master",
                f"max offset {self.master.max_offset:,}",
                f"{self.master.mapped_files} files",
                self.phase,
            )
        table = Table(title="slaves (as the master sees them)", title_justify="left")
        for column in ("slave", "ack offset", "lag", "speed", "replica max", "state"):
            table.add_column(
                column,
                justify="left" if column in ("slave", "state") else "right",
                no_wrap=True,
                min_width=15 if column == "slave" else None,
            )
        seen = self.master.slaves if self.master else ()
        for i, link in enumerate(sorted(seen, key=lambda s: s.address)):
            own = self.slaves[i] if i < len(self.slaves) else None
            table.add_row(
                f"{link.identity} ({link.address})" if link.identity else link.address,
                f"{link.ack_offset:,}",
                f"{link.lag_bytes / 1024:,.1f} KiB",
                f"{link.bytes_per_second / (1 << 20):,.1f} MiB/s",
                f"{own.max_offset:,}" if own else "?",
                link.state,
            )
        return Group(head, table)


async def _poll(clients: list[BrokerClient], view: _View) -> None:
    statuses = [await client.status() for client in clients]
    view.master = statuses[0]
    view.slaves = sorted(statuses[1:], key=lambda s: s.max_offset, reverse=True)


# -- the demo -------------------------------------------------------------------------------


async def run_demo(args: argparse.Namespace) -> int:
    """``hanet demo`` (``--dledger``: :mod:`hanet.cli._demo_dledger`; ``--consumers``:
    :mod:`hanet.cli._demo_consumers`)."""
    if args.messages is None:
        args.messages = 10_000 if args.dledger else 5_000 if args.consumers else 50_000
    if args.consumers:
        from ._demo_consumers import run_consumers_demo  # noqa: PLC0415 - it imports this module

        return await run_consumers_demo(args)
    if args.dledger:
        from ._demo_dledger import run_dledger_demo  # noqa: PLC0415 - it imports this module

        return await run_dledger_demo(args)
    if args.messages < 1 or args.size < 1 or args.mapped_file_size < 64 * 1024:
        print("hanet: --messages, --size >= 1; --mapped-file-size >= 65536", file=sys.stderr)
        return 2
    return await run_parts(args, _run, lost="a broker went away")


Runner = Callable[[argparse.Namespace, Path, "_Parts"], Awaitable[bool]]


async def run_parts(args: argparse.Namespace, run: Runner, *, lost: str) -> int:
    """Run a demo's processes in a work directory, whatever happens stop them all, keep the
    directory when the demo failed: 0 when ``run`` says OK, 1 when not (or too slow), 2 when
    a process could not start (``lost``: how a vanished process is reported), 130 after Ctrl-C
    (SIGINT; SIGTERM: 0). The signals are taken as the services take them
    (:func:`hanet.boot.run_until_stopped`), so a demo started with SIGINT ignored (as a
    background job of a script is) still stops on one sent to it."""
    workdir = args.dir if args.dir is not None else Path(tempfile.mkdtemp(prefix="hanet-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    parts = _Parts(workdir)
    ok = False
    status = 1

    async def run_in_time() -> None:
        nonlocal ok
        with trio.fail_after(args.timeout):
            ok = await run(args, workdir, parts)

    try:
        received = await run_until_stopped(run_in_time)
        if received is not None:
            print("interrupted, shut down cleanly", file=sys.stderr)
            status = stop_status(received)
        else:
            status = 0 if ok else 1
    except* trio.TooSlowError:
        print(f"hanet: the demo did not finish in {args.timeout:g} s", file=sys.stderr)
    except* DemoError as group:
        print(f"hanet: {_first(group)}", file=sys.stderr)
        status = 2
    except* RemotingError as group:
        print(f"hanet: {lost}: {_first(group)}", file=sys.stderr)
    finally:
        await parts.stop_all()
        if ok and args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        elif not ok:
            print(f"logs and stores kept in {workdir}", file=sys.stderr)
    return status


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    first: BaseException = group
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


async def _run(args: argparse.Namespace, workdir: Path, parts: _Parts) -> bool:
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 110)
    common = ["--mapped-file-size", str(args.mapped_file_size), "--listen", f"{HOST}:0"]
    certificates = _Certificates(workdir / "tls") if args.tls else None

    def tls(name: str) -> list[str]:
        return certificates.flags(name) if certificates is not None else []

    console.print(
        f"[bold]hanet demo[/] in {workdir}: {args.role}, two slaves, {args.messages:,} "
        f"messages of {args.size} bytes, {args.mapped_file_size:,}-byte files"
        + (", mutual TLS everywhere (throw-away CA)" if certificates is not None else "")
    )
    master = await parts.start(
        "master",
        [
            "master", "--store", str(workdir / "master"), *common,
            "--ha-listen", f"{HOST}:0", "--role", args.role, "--full-sync",
            "--ready-file", str(workdir / "master.ready"), *tls("master"),
            *(["--tls-replica-pattern", "replica-[0-9]+"] if certificates else []),
        ],
    )  # fmt: skip
    master_ready = await parts.wait_ready(master, workdir / "master.ready")
    console.print(f"master  broker {master_ready['broker']}  HA {master_ready['ha']}")
    slaves = []
    for n in (1, 2):
        slave = await parts.start(
            f"slave{n}",
            [
                "slave", "--store", str(workdir / f"slave{n}"), *common,
                "--master-ha", master_ready["ha"], "--reconnect-interval", "0.2",
                "--ready-file", str(workdir / f"slave{n}.ready"), *tls(f"replica-{n}"),
            ],
        )  # fmt: skip
        slaves.append(await parts.wait_ready(slave, workdir / f"slave{n}.ready"))
        console.print(f"slave{n}  broker {slaves[-1]['broker']}  replicating {master_ready['ha']}")

    view = _View(args.messages)
    console_tls = certificates.client_context("console") if certificates is not None else None
    brokers = (master_ready["broker"], *(s["broker"] for s in slaves))
    async with _clients(*brokers, tls=console_tls) as clients:
        # Both slaves connected before the first put.
        while True:
            await _poll(clients, view)
            assert view.master is not None
            if sum(1 for s in view.master.slaves if s.ack_offset >= 0) >= 2:
                break
            await trio.sleep(0.05)
        producer_out = workdir / "producer.json"
        producer = await parts.start(
            "producer",
            [
                "put", "--broker", master_ready["broker"], "--topic", "DemoTopic",
                "--tags", "demo", "--size", str(args.size), "--count", str(args.messages),
                "--concurrency", str(args.concurrency), "--batch", str(args.batch),
                "--json", "--quiet", *tls("producer"),
            ],
            stdout=producer_out,
        )  # fmt: skip
        view.phase = "producing"
        view.started = time.monotonic()
        with Live(view.render(), console=console, refresh_per_second=8) as live:
            while producer.process.returncode is None:
                await _poll(clients, view)
                live.update(view.render())
                await trio.sleep(0.1)
            produce_seconds = time.monotonic() - view.started
            view.phase = "catching up"
            while True:
                await _poll(clients, view)
                live.update(view.render())
                assert view.master is not None
                if all(s.max_offset == view.master.max_offset for s in view.slaves):
                    break
                await trio.sleep(0.05)
            view.phase = "in sync"
            live.update(view.render())
        console.print()
        final = [await c.status() for c in clients]

    summary = _read_summary(producer_out)
    console.print("stopping the brokers (SIGTERM: clean shutdown) ...")
    codes = [await parts.stop(p) for p in parts.parts if p.name != "producer"]
    comparisons = [compare_commit_logs(workdir / "master", workdir / f"slave{n}") for n in (1, 2)]

    table = Table(title="summary", title_justify="left", show_header=False)
    table.add_column(justify="left")
    table.add_column(justify="left")
    statuses = summary.get("statuses", {}) if summary else {}
    table.add_row("producer", ", ".join(f"{k} {v:,}" for k, v in statuses.items()) or "no summary")
    if summary:
        table.add_row(
            "rate",
            f"{summary['messages_per_second']:,.0f} msg/s, {summary['mib_per_second']} MiB/s, "
            f"request p50 {summary['latency_ms_p50']} ms, p99 {summary['latency_ms_p99']} ms",
        )
    table.add_row("master", f"max offset {final[0].max_offset:,} in {produce_seconds:.1f} s")
    good = (
        summary is not None and set(statuses) == {"PUT_OK"} and summary["messages"] == args.messages
    )
    for n, (status, comparison) in enumerate(zip(final[1:], comparisons, strict=True), 1):
        replayed = status.dispatch_error is None and (status.dispatched_offset == status.max_offset)
        verdict = (
            f"{comparison.files} files, {comparison.bytes:,} bytes identical to the master's"
            if comparison.identical
            else f"NOT identical: {comparison.mismatch}"
        )
        if not replayed:
            verdict += f"; dispatch stopped: {status.dispatch_error}"
        table.add_row(f"slave{n}", verdict)
        good = good and comparison.identical and replayed
    if any(code != 0 for code in codes):
        table.add_row("shutdown", f"exit statuses {codes}")
        good = False
    table.add_row("result", "[green]OK[/]" if good else "[red]FAILED[/]")
    console.print(table)
    return good


def _read_summary(path: Path) -> dict[str, Any] | None:
    try:
        lines = path.read_text(encoding="utf-8").strip().splitlines()
        summary: dict[str, Any] = json.loads(lines[-1])
    except (OSError, IndexError, ValueError):
        return None
    return summary
