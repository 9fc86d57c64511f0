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
from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

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
from hanet.protocol import ResponseCode
from hanet.store import record_to_json

from ._credentials import add_credentials, signed_verb
from ._status_view import cluster_renderable, status_renderable
from ._support import (
    EXIT_FAILED,
    EXIT_OK,
    fail,
    first_message,
    parse_addresses,
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
        "--broker", type=parse_addresses, default=[("127.0.0.1", 10911)],
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


def add_namesrv(parser: argparse.ArgumentParser, *, required: bool) -> None:
    """The ``--namesrv`` flag (a comma-separated list of name server addresses)."""
    parser.add_argument(
        "--namesrv", type=parse_addresses, default=None, required=required,
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
