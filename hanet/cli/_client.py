"""The broker port verbs: ``hanet put``, ``hanet pull``, ``hanet status``.

- ``hanet put --broker HOST:PORT --topic T (--body TEXT | --size BYTES --count N)`` puts with
  ``--concurrency`` requests in flight (``--batch`` messages each) over one connection, shows a
  progress bar on a terminal and prints a summary of statuses, rate and request latency
  (``--json``: one object); a put refused with a code that is not a put status (SYSTEM_ERROR
  for a bad topic name, NO_PERMISSION) counts under that code. Exit 1 when any is not PUT_OK.
- ``hanet pull --broker HOST:PORT --topic T --queue Q [--offset N] [--max M]`` prints messages
  and the next offset.
- ``hanet status --broker HOST:PORT [--json] [--watch]`` shows role, offsets, slaves (ack
  offset, lag, speed, state) or a slave's master link, the consumer offsets held and the
  cluster: the registration with the name servers and a slave's metadata sync.

With ``--namesrv HOST:PORT[,HOST:PORT...]`` instead of ``--broker``, the topic's route is looked
up on the name servers: puts go to a master (a topic no broker holds yet: any registered
master, which creates it), a pull to the master of the queue's broker name (``--broker-name``,
default the route's first) or to a slave while the master is down; ``hanet status --namesrv``
lists the cluster (GET_BROKER_CLUSTER_INFO: broker names, ids, addresses) as a table or
``--json`` (RocketMQ's ClusterInfo document).

Connection errors print one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import ssl
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, NoReturn

import attrs
import trio
from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from hanet.boot import TlsConfig
from hanet.client import (
    BrokerConnectionError,
    BrokerRequestError,
    BrokerStatus,
    ClusterInfo,
    FailoverClient,
    NameServerClient,
    PullResult,
    PullStatus,
    PutMessage,
    PutReply,
    RemotingConnectionError,
    RemotingError,
)
from hanet.errors import ConfigError
from hanet.ha import BrokerRole
from hanet.protocol import MASTER_ID, ResponseCode
from hanet.store import record_to_json

from ._credentials import add_credentials, signed_verb
from ._support import (
    EXIT_FAILED,
    EXIT_OK,
    fail,
    first_message,
    parse_address,
    parse_size,
)

__all__ = [
    "broker_client",
    "client_tls",
    "cluster_renderable",
    "name_server_client",
    "register",
    "run_pull",
    "run_put",
    "run_status",
]


def register(subparsers: Any) -> None:
    """Add ``put``, ``pull`` and ``status`` to the ``hanet`` parser."""
    parser = subparsers.add_parser(
        "put",
        help="put messages through a broker port",
        description="Put one message (--body) or --count messages (of --size bytes or --body) "
        "with --concurrency requests in flight; print a summary of statuses and rate.",
    )
    _add_broker(parser)
    parser.add_argument("--topic", required=True, help="the topic")
    parser.add_argument("--tags", default="", help="the TAGS property")
    parser.add_argument("--keys", default="", help="the KEYS property (space separated)")
    parser.add_argument(
        "--property", action="append", default=[], metavar="NAME=VALUE",
        help="a user property (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--queue", type=int, default=None, metavar="Q", help="queue id (default: round robin)"
    )
    body = parser.add_mutually_exclusive_group(required=True)
    body.add_argument("--body", default=None, metavar="TEXT", help="the message body")
    body.add_argument(
        "--size", type=parse_size, default=None, metavar="BYTES",
        help="generated bodies of this size (numbered)",
    )  # fmt: skip
    parser.add_argument("--count", type=int, default=1, metavar="N", help="messages (1)")
    parser.add_argument(
        "--concurrency", type=int, default=16, metavar="C", help="requests in flight (16)"
    )
    parser.add_argument(
        "--batch", type=int, default=1, metavar="B", help="messages per request (1, max 1024)"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=signed_verb(run_put))

    parser = subparsers.add_parser(
        "pull",
        help="pull messages of a queue through a broker port",
        description="Print up to --max messages of a queue from --offset, then the next offset.",
    )
    _add_broker(parser)
    parser.add_argument("--topic", required=True, help="the topic")
    parser.add_argument(
        "--broker-name", default=None, metavar="NAME",
        help="with --namesrv: the broker name whose queue to pull (default: the route's first)",
    )  # fmt: skip
    parser.add_argument("--queue", type=int, required=True, metavar="Q", help="queue id")
    parser.add_argument("--offset", type=int, default=0, metavar="N", help="queue offset (0)")
    parser.add_argument("--max", type=int, default=32, metavar="M", help="most messages (32)")
    parser.add_argument("--json", action="store_true", help="one JSON object per message")
    parser.set_defaults(func=signed_verb(run_pull))

    parser = subparsers.add_parser(
        "status",
        help="show a broker's role, offsets and replication state (--namesrv: the cluster)",
        description="Show role, offsets and, for a master, each slave's ack offset, lag, "
        "transfer speed and state; for a slave, its link to the master and its metadata sync; "
        "the consumer offsets held and the registration with the name servers. With --namesrv: the "
        "cluster's broker names, ids and addresses.",
    )
    _add_broker(parser)
    parser.add_argument("--json", action="store_true", help="print the JSON status object")
    parser.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    parser.add_argument(
        "--interval", type=float, default=1.0, metavar="S", help="--watch refresh seconds (1)"
    )
    parser.set_defaults(func=signed_verb(run_status))


def _add_broker(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--broker", type=_parse_addresses, default=[("127.0.0.1", 10911)],
        metavar="HOST:PORT[,HOST:PORT...]",
        help="the broker port (127.0.0.1:10911); several, comma-separated (a DLedger group): "
        "the next is tried when one is down, and a follower's SERVICE_NOT_AVAILABLE is followed "
        "to the leader",
    )  # fmt: skip
    add_namesrv(parser, required=False)
    parser.add_argument(
        "--timeout", type=float, default=30.0, metavar="S",
        help="seconds to connect and per request (30)",
    )  # fmt: skip
    parser.add_argument(
        "--tls-ca", type=Path, default=None, metavar="FILE",
        help="talk TLS, trusting this CA for the broker's certificate (plain TCP without it)",
    )  # fmt: skip
    parser.add_argument(
        "--tls-cert", type=Path, default=None, metavar="FILE",
        help="present this certificate (PEM) to a broker that requires one (mutual TLS)",
    )  # fmt: skip
    parser.add_argument(
        "--tls-key", type=Path, default=None, metavar="FILE", help="the key of --tls-cert",
    )  # fmt: skip
    add_credentials(parser)


def _parse_addresses(text: str) -> list[tuple[str, int]]:
    """``HOST:PORT[,HOST:PORT...]`` as an argparse type."""
    addresses = [parse_address(part.strip()) for part in text.split(",") if part.strip()]
    if not addresses:
        raise argparse.ArgumentTypeError("no address")
    return addresses


def add_namesrv(parser: argparse.ArgumentParser, *, required: bool) -> None:
    """The ``--namesrv`` flag (a comma-separated list of name server addresses)."""
    parser.add_argument(
        "--namesrv", type=_parse_addresses, default=None, required=required,
        metavar="HOST:PORT[,HOST:PORT...]",
        help="the name servers: look the topic's route up there"
        + ("" if required else " instead of using --broker"),
    )  # fmt: skip


def client_tls(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The client TLS context of ``--tls-ca/--tls-cert/--tls-key`` (None: plain TCP).

    Raises:
        BrokerConnectionError: a TLS file that does not load (as any failure to connect).
    """
    if args.tls_ca is None and args.tls_cert is None:
        return None
    try:
        return TlsConfig(cert=args.tls_cert, key=args.tls_key, ca=args.tls_ca).client_context()
    except ConfigError as exc:
        raise BrokerConnectionError(str(exc)) from exc


def name_server_client(args: argparse.Namespace, tls: ssl.SSLContext | None) -> NameServerClient:
    """A client of ``--namesrv`` over ``tls`` (:func:`client_tls`, loaded once by the caller);
    ``--timeout``, at most 5 s, applies."""
    return NameServerClient(args.namesrv, tls=tls, timeout=min(args.timeout, 5.0))


async def _routed(
    args: argparse.Namespace, tls: ssl.SSLContext | None, *, put: bool
) -> list[tuple[str, int]]:
    """The broker ports ``--namesrv`` names for the verb: masters for a put; the master,
    then the slaves, of ``--broker-name`` for a pull."""
    names = name_server_client(args, tls)
    if put:
        return await names.put_addresses(args.topic)
    return await names.pull_addresses(args.topic, getattr(args, "broker_name", None))


@contextlib.asynccontextmanager
async def broker_client(
    args: argparse.Namespace, *, tls: ssl.SSLContext | None, put: bool = False
) -> AsyncIterator[FailoverClient]:
    """``FailoverClient.connect`` with the verb's ``--broker`` list (or the brokers
    ``--namesrv`` routes the topic to: see :func:`_routed`), ``--timeout`` and ``tls`` (the
    TLS flags' context, :func:`client_tls`, loaded once by the caller before any retry; one
    address: a :class:`BrokerClient` that follows a follower's refusal to the leader it
    names)."""
    addresses = args.broker
    if getattr(args, "namesrv", None) is not None:
        addresses = await _routed(args, tls, put=put)
    async with FailoverClient.connect(
        addresses,
        retry_for=args.timeout,
        connect_timeout=args.timeout,
        request_timeout=args.timeout,
        tls=tls,
    ) as client:
        yield client


# -- put ------------------------------------------------------------------------------------


def _numbered_body(i: int, size: int) -> bytes:
    head = b"%010d " % i
    if size <= len(head):
        return head[:size]
    return head + b"x" * (size - len(head))


@attrs.define
class PutRun:
    """What a put run did (the summary)."""

    total: int
    sent: int = 0
    statuses: Counter[str] = attrs.field(factory=Counter)
    bytes: int = 0
    latencies: list[float] = attrs.field(factory=list)
    elapsed: float = 0.0
    first_error: str | None = None
    last_reply: PutReply | None = None

    def summary(self) -> dict[str, Any]:
        latencies = sorted(self.latencies)

        def pct(p: float) -> float | None:
            if not latencies:
                return None
            return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1e3, 3)

        rate = self.sent / self.elapsed if self.elapsed else 0.0
        return {
            "messages": self.sent,
            "requested": self.total,
            "statuses": dict(sorted(self.statuses.items())),
            "bytes": self.bytes,
            "seconds": round(self.elapsed, 3),
            "messages_per_second": round(rate, 1),
            "mib_per_second": round(self.bytes / self.elapsed / (1 << 20), 2)
            if self.elapsed
            else 0,
            "latency_ms_p50": pct(0.50),
            "latency_ms_p99": pct(0.99),
            "error": self.first_error,
            **(
                {"reply": _reply_json(self.last_reply)}
                if self.total == 1 and self.last_reply
                else {}
            ),
        }


def _reply_json(reply: PutReply) -> dict[str, Any]:
    return {
        "status": reply.status.value,
        "msg_id": reply.msg_id,
        "queue_id": reply.queue_id,
        "queue_offset": reply.queue_offset,
        "wrote_offset": reply.wrote_offset,
        "wrote_size": reply.wrote_size,
        "detail": reply.detail,
    }


async def run_put(args: argparse.Namespace) -> int:
    """``hanet put``."""
    if args.count < 1 or args.concurrency < 1 or not 1 <= args.batch <= 1024:
        return fail("--count and --concurrency must be >= 1, --batch 1 to 1024")
    properties: list[tuple[str, str]] = []
    for item in args.property:
        name, sep, value = item.partition("=")
        if not sep or not name:
            return fail(f"--property expects NAME=VALUE, got {item!r}")
        properties.append((name, value))
    queue = -1 if args.queue is None else args.queue
    fixed = None if args.body is None else args.body.encode("utf-8")

    def message(i: int) -> PutMessage:
        body = fixed if fixed is not None else _numbered_body(i, args.size)
        return PutMessage(args.topic, body, queue, args.tags, args.keys, tuple(properties))

    try:
        tls = client_tls(args)
    except RemotingConnectionError as exc:
        return fail(str(exc))
    run = PutRun(args.count)
    progress = _Progress(args.count, enabled=args.count > 1 and not args.quiet and not args.json)
    next_index = 0

    async def worker(client: FailoverClient) -> None:
        nonlocal next_index
        while next_index < args.count:
            start = next_index
            next_index = min(start + args.batch, args.count)
            batch = [message(i) for i in range(start, next_index)]
            t0 = time.perf_counter()
            try:
                replies: list[PutReply] = await client.put_batch(batch)
            except BrokerRequestError as exc:
                # Refused by a code that is not a put status (SYSTEM_ERROR for a bad topic
                # name, NO_PERMISSION, ...): counted under the code's name, the run goes on.
                run.latencies.append(time.perf_counter() - t0)
                name = exc.code.name if isinstance(exc.code, ResponseCode) else str(exc.code)
                run.statuses[name] += len(batch)
                if run.first_error is None:
                    run.first_error = exc.message or name
                run.sent += len(batch)
                progress.advance(len(batch))
                continue
            run.latencies.append(time.perf_counter() - t0)
            for m, reply in zip(batch, replies, strict=True):
                run.last_reply = reply
                run.statuses[reply.status.value] += 1
                run.bytes += len(m.body)
                if not reply.ok and run.first_error is None and reply.detail:
                    run.first_error = reply.detail
            run.sent += len(batch)
            progress.advance(len(batch))

    started = time.perf_counter()
    failure: str | None = None
    try:
        async with broker_client(args, tls=tls, put=True) as client:
            with progress:
                async with trio.open_nursery() as nursery:
                    for _ in range(min(args.concurrency, math.ceil(args.count / args.batch))):
                        nursery.start_soon(worker, client)
    except* RemotingError as group:
        failure = first_message(group)
    run.elapsed = time.perf_counter() - started
    if failure is not None:
        # What was acknowledged before the connection went is still worth knowing.
        run.first_error = failure
        if args.json:
            print(json.dumps(run.summary()), flush=True)
        elif run.sent:
            _print_put_summary(run.summary())
        return fail(failure)
    summary = run.summary()
    if args.json:
        print(json.dumps(summary), flush=True)
    elif args.count == 1:
        print(f"{reply_line(run)}", flush=True)
    else:
        _print_put_summary(summary)
    return EXIT_OK if set(run.statuses) == {"PUT_OK"} else EXIT_FAILED


def reply_line(run: PutRun) -> str:
    """The one-line answer of a single put: its status, and where it went, or why not."""
    (status,) = run.statuses
    reply = run.last_reply
    if run.first_error is not None:
        return f"{status}: {run.first_error}"
    if reply is None or not reply.stored:
        return status
    return (
        f"{status} msg_id={reply.msg_id} queue={reply.queue_id} "
        f"queue_offset={reply.queue_offset} offset={reply.wrote_offset}"
    )


class _Progress:
    """A rich progress bar on stderr when it is a terminal (and rich is installed)."""

    def __init__(self, total: int, *, enabled: bool) -> None:
        self._bar: Any = None
        self._task: Any = None
        if not enabled or not sys.stderr.isatty():
            return
        self._bar = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            "[progress.percentage]{task.percentage:>3.0f}%",
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self._task = self._bar.add_task("put", total=total)

    def __enter__(self) -> _Progress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def advance(self, n: int) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, n)


def _print_put_summary(summary: dict[str, Any]) -> None:
    statuses = ", ".join(f"{k} {v}" for k, v in summary["statuses"].items())
    print(
        f"put {summary['messages']} messages ({summary['bytes']} body bytes) in "
        f"{summary['seconds']:.2f} s: {summary['messages_per_second']:,.0f} msg/s, "
        f"{summary['mib_per_second']:.1f} MiB/s; request latency p50 "
        f"{summary['latency_ms_p50']} ms, p99 {summary['latency_ms_p99']} ms",
        flush=True,
    )
    print(f"statuses: {statuses}", flush=True)
    if summary["error"]:
        print(f"first refusal: {summary['error']}", flush=True)


# -- pull -----------------------------------------------------------------------------------


async def run_pull(args: argparse.Namespace) -> int:
    """``hanet pull``."""
    if args.queue < 0 or args.offset < 0 or args.max < 1:
        return fail("--queue and --offset must be >= 0, --max >= 1")
    try:
        tls = client_tls(args)
    except RemotingConnectionError as exc:
        return fail(str(exc))
    result: PullResult | None = None
    failure: str | None = None
    try:
        async with broker_client(args, tls=tls) as client:
            result = await client.pull(args.topic, args.queue, args.offset, args.max)
    except* RemotingError as group:
        failure = first_message(group)
    if result is None:
        return fail(failure or "no answer")
    for record in result.messages:
        if args.json:
            print(json.dumps(record_to_json(record)))
            continue
        body = record.body.decode("utf-8", "replace")
        if len(body) > 60:
            body = body[:57] + "..."
        props = " ".join(f"{k}={v}" for k, v in record.properties.items())
        print(
            f"{record.queue_offset:>8} @{record.physical_offset:<12} {record.msg_id} "
            f"{props} {body!r}"
        )
    trailer = {
        "status": result.status.name,
        "next_offset": result.next_offset,
        "min_offset": result.min_offset,
        "max_offset": result.max_offset,
        "messages": len(result.messages),
    }
    if args.json:
        print(json.dumps(trailer), flush=True)
    else:
        print(
            f"{result.status.name}: {len(result.messages)} messages, next offset "
            f"{result.next_offset} (queue holds {result.min_offset}..{result.max_offset})",
            flush=True,
        )
    ok = result.status in (PullStatus.FOUND, PullStatus.OFFSET_OVERFLOW_ONE)
    return EXIT_OK if ok or result.status is PullStatus.NO_MESSAGE_IN_QUEUE else EXIT_FAILED


# -- status ---------------------------------------------------------------------------------


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def _dledger_table(status: BrokerStatus) -> Any:
    """The DLedger section: group, id, term, leader, commit index, peers' match index and lag."""
    info = status.dledger
    assert info is not None
    head = Table(show_header=False, box=None, pad_edge=False, title="dledger")
    head.add_row("group", info.group)
    head.add_row("id", info.id)
    head.add_row("term", str(info.term))
    leader = info.leader or "(unknown)"
    if info.leader_address:
        leader += f" (broker port {info.leader_address})"
    head.add_row("leader", leader)
    head.add_row("commit index", str(info.commit_index))
    head.add_row("applied / last", f"{info.applied_index} / {info.last_index}")
    table = Table(title="peers", title_justify="left")
    for column in ("id", "address", "connected", "match index", "lag"):
        table.add_column(column, justify="left" if column in ("id", "address") else "right")
    for p in info.peers:
        table.add_row(
            p.id, p.address, "yes" if p.connected else "no", str(p.match_index), str(p.lag)
        )
    return Group(head, table)


def _ago(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.1f} s ago"


def _count(n: int, what: str) -> str:
    if n == 1:
        return f"{n} {what}"
    return f"{n} {what[:-1]}ies" if what.endswith("y") else f"{n} {what}s"


def _rounds(done: int, failed: int, what: str) -> str:
    return _count(done, what) + (f", {failed} failed" if failed else "")


def _offsets_row(head: Any, status: BrokerStatus) -> None:
    """The consumer offsets: groups, entries, when written, a failing write."""
    info = status.consumer_offsets
    if info is None:
        return
    written = (
        "not written since start"
        if info.last_persisted_ago is None
        else f"written {_ago(info.last_persisted_ago)}"
    )
    unsaved = ", unsaved commits" if info.dirty else ""
    head.add_row(
        "consumer offsets",
        f"{_count(info.groups, 'group')}, {_count(info.entries, 'topic@group entry')}, "
        f"{written}{unsaved}",
    )
    if info.last_error:
        head.add_row("offsets not written", info.last_error)
    for group in status.consumer_groups:
        members = group.members
        head.add_row(
            f"consumer group {group.group}",
            f"{_count(len(members), 'member')}: {', '.join(members)}",
        )


def _cluster_table(status: BrokerStatus) -> Any | None:
    """The cluster section: the registration with the name servers and a slave's metadata
    sync (None when the status has neither)."""
    cluster, sync = status.cluster, status.metadata_sync
    if cluster is None and sync is None:
        return None
    table = Table(
        show_header=False, box=None, pad_edge=False, title="cluster", title_justify="left"
    )
    if cluster is not None:
        table.add_row("name", cluster.name)
        table.add_row("broker", f"{cluster.broker_name} id {cluster.broker_id}")
        table.add_row("name servers", ", ".join(cluster.name_servers))
        rounds = _rounds(cluster.registrations, cluster.failures, "round")
        table.add_row("registered", f"{_ago(cluster.last_registered_ago)} ({rounds})")
        if cluster.last_error:
            table.add_row("registration failing", cluster.last_error)
        if status.role == BrokerRole.SLAVE.value:
            named = cluster.master_address or "(no master registered)"
            if cluster.master_ha_address:
                named += f", HA port {cluster.master_ha_address}"
            table.add_row("master (name server)", named)
    if sync is not None:
        rounds = _rounds(sync.syncs, sync.failures, "sync")
        table.add_row(
            "metadata sync",
            f"from {sync.master_address or '(master unknown)'}: "
            f"{_ago(sync.last_synced_ago)} ({rounds}); "
            f"{_count(sync.topics, 'topic')}, {_count(sync.offset_entries, 'offset entry')}",
        )
        if sync.last_error:
            table.add_row("sync failing", sync.last_error)
    return table


def status_renderable(status: BrokerStatus) -> Any:
    """A rich renderable of a status (a table per section)."""
    head = Table(show_header=False, box=None, pad_edge=False)
    head.add_row("role", status.role)
    if status.broker_address:
        head.add_row("broker port", status.broker_address)
    if status.ha_address:
        head.add_row("HA port", status.ha_address)
    head.add_row("offsets", f"{status.min_offset} .. {status.max_offset}")
    head.add_row("flushed", str(status.flushed_offset))
    head.add_row("dispatched", str(status.dispatched_offset))
    if status.epoch is not None:
        head.add_row("epoch", str(status.epoch))
    if status.dispatch_error is not None:
        error = status.dispatch_error
        head.add_row("dispatch stopped", f"at {error.offset}: {error.reason}")
    for damaged in status.damaged_ranges:  # refused until repaired (--repair-from)
        head.add_row("damaged", f"[{damaged.start}, {damaged.end}): {damaged.reason}")
    for slave in status.diverged_slaves:  # its epoch check found its log diverged
        head.add_row(
            "slave diverged",
            f"{slave.address}: its log goes on to {slave.slave_end} past the consistent point "
            f"{slave.diverged_at} (this master's log ends at {slave.master_end}; its epochs "
            f"{slave.slave_epochs}); {_count(slave.checks, 'check')}, the last "
            f"{_ago(slave.last_seen_ago)}",
        )
    if status.role != BrokerRole.SLAVE.value:
        head.add_row("puts", str(status.puts))
        if status.replicated_offset is not None and status.replicated_offset >= 0:
            head.add_row("replicated", str(status.replicated_offset))
    if status.master is not None:
        link = status.master
        state = "connected" if link.connected else "disconnected"
        reason = f" (last close: {link.last_close_reason})" if link.last_close_reason else ""
        head.add_row("master", f"{link.address} {state}, {link.connects} connects{reason}")
        if link.diverged:
            head.add_row(
                "diverged",
                f"the master refuses offset {link.refused_offset}: "
                "hanet slave --truncate-to OFFSET or --resync",
            )
        if link.epoch_check:  # a divergence's names the offset
            diverged = link.epoch_diverged_at is not None
            head.add_row("epochs diverged" if diverged else "epochs", link.epoch_check)
        if link.error:
            head.add_row("stopped", link.error)
    _offsets_row(head, status)
    parts: list[Any] = [head]
    cluster = _cluster_table(status)
    if cluster is not None:
        parts.append(cluster)
    if status.dledger is not None:
        return Group(*parts, _dledger_table(status))
    if status.role != BrokerRole.SLAVE.value:
        table = Table(title="slaves", title_justify="left")
        for column in ("address", "state", "ack offset", "lag", "speed"):
            if column == "state":  # a close reason is shown whole, folded over lines
                table.add_column(column, justify="left", overflow="fold", ratio=1)
            else:
                table.add_column(column, justify="right", no_wrap=True)
        for s in status.slaves:
            table.add_row(
                s.address,
                s.state,
                str(s.ack_offset),
                _human_bytes(s.lag_bytes),
                f"{_human_bytes(s.bytes_per_second)}/s",
            )
        for s in status.closed_slaves:
            table.add_row(s.address, f"[dim]{s.state}[/dim]", str(s.ack_offset), "", "")
        if not status.slaves and not status.closed_slaves:
            table.add_row("(none connected)", "", "", "", "")
        parts.append(table)
    return Group(*parts)


async def run_status(args: argparse.Namespace) -> int:
    """``hanet status``: once, or with ``--watch`` every interval until Ctrl-C.

    Watching keeps going across a broker restart: a lost connection is reported and retried
    every interval. On a terminal the table is redrawn in place; otherwise (a pipe, a log
    file) one table, or one JSON line with ``--json``, is printed per interval.

    With ``--namesrv``: the cluster as the name servers list it (:func:`cluster_renderable`).
    """
    try:
        tls = client_tls(args)
    except RemotingConnectionError as exc:
        return fail(str(exc))  # a TLS file that does not load: not worth retrying
    if args.namesrv is not None:
        return await _run_cluster_status(args, tls)
    if not args.watch:
        failure: str | None = None
        try:
            async with broker_client(args, tls=tls) as client:
                _show(await client.status(), args, live=None)
        except* RemotingError as group:
            failure = first_message(group)
        return EXIT_OK if failure is None else fail(failure)

    async def poll(live: Live | None) -> None:
        async with broker_client(args, tls=tls) as client:
            while True:
                _show(await client.status(), args, live)
                await trio.sleep(args.interval)

    await _watch(args, poll)


async def _watch(
    args: argparse.Namespace, poll: Callable[[Live | None], Awaitable[None]]
) -> NoReturn:
    """``--watch``: ``poll(live)`` (which shows what it got), again every ``--interval`` until
    cancelled; a :class:`RemotingError` is reported (in place on a terminal, else one line on
    stderr) and retried. ``live`` is the in-place display on a terminal without ``--json``."""
    live = Live(refresh_per_second=4) if sys.stdout.isatty() and not args.json else None
    with live if live is not None else contextlib.nullcontext():
        while True:
            try:
                await poll(live)
            except* RemotingError as group:
                message = f"hanet: {first_message(group)}; retrying every {args.interval:g} s"
                if live is not None:
                    live.update(message)
                else:
                    print(message, file=sys.stderr, flush=True)
            await trio.sleep(args.interval)


def _show(status: BrokerStatus, args: argparse.Namespace, live: Live | None) -> None:
    if args.json:
        print(json.dumps(status.to_json(), indent=None if args.watch else 2), flush=True)
    elif live is not None:
        live.update(status_renderable(status))
    else:
        Console().print(status_renderable(status))


# -- the cluster (status --namesrv) --------------------------------------------------------


def cluster_renderable(cluster: ClusterInfo) -> Any:
    """A table per cluster of its registered brokers (GET_BROKER_CLUSTER_INFO): broker name,
    id, role (id 0: the master) and broker port."""
    by_cluster: dict[str, list[tuple[str, int, str]]] = {}
    for cluster_name, broker_name, broker_id, address in cluster.members():
        by_cluster.setdefault(cluster_name, []).append((broker_name, broker_id, address))
    if not by_cluster:
        return "no broker is registered with the name server"
    tables = []
    for name, members in sorted(by_cluster.items()):
        table = Table(title=f"cluster {name}", title_justify="left")
        for column in ("broker name", "id", "role", "address"):
            table.add_column(column, justify="right" if column == "id" else "left")
        for broker_name, broker_id, address in members:
            role = "master" if broker_id == MASTER_ID else "slave"
            table.add_row(broker_name, str(broker_id), role, address)
        tables.append(table)
    return Group(*tables)


async def _run_cluster_status(args: argparse.Namespace, tls: ssl.SSLContext | None) -> int:
    """``hanet status --namesrv``: the cluster once, or every interval with ``--watch``."""
    if not args.watch:
        try:
            cluster = await name_server_client(args, tls).cluster()
        except RemotingError as exc:
            return fail(str(exc))
        _show_cluster(cluster, args, live=None)
        return EXIT_OK

    async def poll(live: Live | None) -> None:
        _show_cluster(await name_server_client(args, tls).cluster(), args, live)

    await _watch(args, poll)


def _show_cluster(cluster: ClusterInfo, args: argparse.Namespace, live: Live | None) -> None:
    if args.json:
        print(json.dumps(cluster.to_json(), indent=None if args.watch else 2), flush=True)
    elif live is not None:
        live.update(cluster_renderable(cluster))
    else:
        width = None if sys.stdout.isatty() else 120
        Console(width=width).print(cluster_renderable(cluster))
