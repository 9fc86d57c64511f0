"""The broker verbs: ``hanet master``, ``slave``, ``put``, ``pull``, ``status`` (and ``demo``).

- ``hanet master --store DIR --listen HOST:PORT --ha-listen HOST:PORT [--role ...]`` and
  ``hanet slave --store DIR --master-ha HOST:PORT [--listen HOST:PORT]`` run a broker until
  Ctrl-C (exit 130) or SIGTERM (exit 0), both shutting down cleanly (store closed, ``abort``
  removed). Settings come from the defaults, then ``--config FILE`` (``broker.conf`` keys), then
  the flags. ``--ready-file FILE`` writes the bound addresses as JSON once serving (port 0
  picks free ports).
- ``hanet put``, ``hanet pull``, ``hanet status`` are clients of the broker port.

Errors (bad flags or config, a store locked by another process, a refused connection) print one
line on stderr and exit 2; a put run with statuses other than PUT_OK exits 1.
"""

from __future__ import annotations

import argparse
import base64
import errno
import json
import math
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import trio

try:
    from rich.console import Console, Group
    from rich.live import Live
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
    from rich.table import Table

    HAVE_RICH = True
except ImportError:  # pragma: no cover - rich is the "progress" extra
    HAVE_RICH = False

from hanet.client import (
    BrokerClient,
    BrokerError,
    BrokerStatus,
    PullResult,
    PullStatus,
    PutMessage,
    PutReply,
)
from hanet.store import MessageRecord, StoreError

from . import _demo
from ._broker import Broker, BrokerAddresses
from ._config import (
    BrokerConfig,
    BrokerRole,
    ConfigError,
    FlushDiskType,
    _parse_lines,
    load_properties,
    parse_host_port,
)

__all__ = ["build_config", "register"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_ERROR = 2


def fail(message: str, status: int = EXIT_ERROR) -> int:
    """Print ``hanet: message`` on stderr; return ``status``."""
    print(f"hanet: {message}", file=sys.stderr, flush=True)
    return status


def _size(text: str) -> int:
    """An integer byte count, with an optional K/M/G suffix (binary)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower().removesuffix("ib").removesuffix("b")
    scale = units.get(text[-1:], 1)
    if scale != 1:
        text = text[:-1]
    try:
        value = int(text) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a byte count: {text!r}") from None
    return value


def _address(text: str) -> tuple[str, int]:
    try:
        return parse_host_port(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# -- broker settings ----------------------------------------------------------------------


@attrs.frozen
class _Flag:
    flags: tuple[str, ...]
    field: str
    type: Callable[[str], Any]
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None


_COMMON_FLAGS = (
    _Flag(("--store",), "store_path_root_dir", Path, "store directory", "DIR"),
    _Flag(
        ("--mapped-file-size",), "mapped_file_size_commit_log", _size,
        "commit log file size (1G; K/M/G suffixes)", "BYTES",
    ),
    _Flag(
        ("--flush",), "flush_disk_type", FlushDiskType, "ASYNC_FLUSH (default) or SYNC_FLUSH",
        choices=tuple(t.value for t in FlushDiskType),
    ),
    _Flag(
        ("--heartbeat-interval", "--ha-send-heartbeat-interval"), "ha_send_heartbeat_interval",
        float, "seconds of silence before an HA heartbeat (5)", "S",
    ),
    _Flag(
        ("--housekeeping-interval", "--ha-housekeeping-interval"), "ha_housekeeping_interval",
        float, "seconds without input before an HA connection is closed (20)", "S",
    ),
    _Flag(
        ("--transfer-batch-size", "--ha-transfer-batch-size"), "ha_transfer_batch_size", _size,
        "most bytes per HA transfer frame (32K)", "BYTES",
    ),
)  # fmt: skip

_MASTER_FLAGS = (
    _Flag(
        ("--role",), "broker_role", BrokerRole, "ASYNC_MASTER (default) or SYNC_MASTER",
        choices=(BrokerRole.ASYNC_MASTER.value, BrokerRole.SYNC_MASTER.value),
    ),
    _Flag(
        ("--slave-timeout",), "slave_timeout", float,
        "seconds a SYNC put waits for slaves before FLUSH_SLAVE_TIMEOUT (3)", "S",
    ),
    _Flag(
        ("--in-sync-replicas",), "in_sync_replicas", int,
        "copies a SYNC put needs, the master included (2)", "N",
    ),
    _Flag(
        ("--fallbehind-max", "--ha-slave-fallbehind-max"), "ha_slave_fallbehind_max", _size,
        "a slave further behind is not counted for SYNC puts (256M)", "BYTES",
    ),
    _Flag(
        ("--max-bytes-per-second", "--ha-max-bytes-per-second"), "ha_max_bytes_per_second",
        _size, "cap on bytes pushed per second to each slave (none)", "BYTES",
    ),
    _Flag(
        ("--queues", "--default-topic-queue-nums"), "default_topic_queue_nums", int,
        "queues a put without --queue is spread over (4)", "N",
    ),
)  # fmt: skip

_SLAVE_FLAGS = (
    _Flag(
        ("--reconnect-interval",), "reconnect_interval", float,
        "seconds between connection attempts to the master (5)", "S",
    ),
)  # fmt: skip


def _add_flags(parser: argparse.ArgumentParser, flags: tuple[_Flag, ...]) -> None:
    for flag in flags:
        parser.add_argument(
            *flag.flags,
            dest=flag.field,
            type=str if flag.choices else flag.type,
            choices=flag.choices,
            default=None,
            metavar=flag.metavar,
            help=flag.help,
        )


def _add_service_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", type=Path, default=None, metavar="FILE",
        help="broker.conf-style properties (RocketMQ names); flags override it",
    )  # fmt: skip
    parser.add_argument(
        "--ready-file", type=Path, default=None, metavar="FILE",
        help="write the bound addresses here as JSON once serving",
    )  # fmt: skip


def build_config(args: argparse.Namespace, role: BrokerRole | None = None) -> BrokerConfig:
    """Defaults, then ``--config FILE``, then the flags given.

    Raises:
        ConfigError: a bad file, key or value.
    """
    config = BrokerConfig()
    if getattr(args, "config", None) is not None:
        config = load_properties(args.config, config)
    changes: dict[str, Any] = {}
    for flag in (*_COMMON_FLAGS, *_MASTER_FLAGS, *_SLAVE_FLAGS):
        value = getattr(args, flag.field, None)
        if value is not None:
            changes[flag.field] = flag.type(value) if flag.choices else value
    listen = getattr(args, "listen", None)
    if listen is not None:
        changes["listen_host"], changes["listen_port"] = listen
    ha_listen = getattr(args, "ha_listen", None)
    if ha_listen is not None:
        changes["ha_listen_host"], changes["ha_listen_port"] = ha_listen
    master_ha = getattr(args, "master_ha", None)
    if master_ha is not None:
        changes["ha_master_address"] = master_ha
    if getattr(args, "full_sync", False):
        changes["full_sync"] = True
    if role is not None:
        changes["broker_role"] = role
    elif config.broker_role is BrokerRole.SLAVE and "broker_role" not in changes:
        changes["broker_role"] = BrokerRole.ASYNC_MASTER  # a master verb with a slave's conf
    try:
        return attrs.evolve(config, **changes)
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc)) from exc


def register(subparsers: Any) -> None:
    """Add the broker verbs (and ``demo``) to the ``hanet`` parser."""
    parser = subparsers.add_parser(
        "master",
        help="run a master broker: store, HA port for slaves, broker port for clients",
        description="Run a master broker until Ctrl-C or SIGTERM.",
    )
    parser.add_argument(
        "--listen", type=_address, default=None, metavar="HOST:PORT",
        help="broker port for producers and consumers (127.0.0.1:10911; port 0: any)",
    )  # fmt: skip
    parser.add_argument(
        "--ha-listen", type=_address, default=None, metavar="HOST:PORT",
        help="HA port slaves connect to (127.0.0.1:10912; port 0: any)",
    )  # fmt: skip
    parser.add_argument(
        "--full-sync", action="store_true",
        help="a new slave starts from the first file, not the last",
    )  # fmt: skip
    _add_flags(parser, _COMMON_FLAGS + _MASTER_FLAGS)
    _add_service_flags(parser)
    parser.set_defaults(func=run_master)

    parser = subparsers.add_parser(
        "slave",
        help="run a slave broker replicating a master",
        description="Replicate a master into a store (reconnecting forever) until Ctrl-C or "
        "SIGTERM; with --listen, serve PULL and STATUS (puts answer SERVICE_NOT_AVAILABLE).",
    )
    parser.add_argument(
        "--master-ha", type=str, default=None, metavar="HOST:PORT",
        help="the master's HA port",
    )  # fmt: skip
    parser.add_argument(
        "--listen", type=_address, default=None, metavar="HOST:PORT",
        help="serve the broker port here (none unless this or listenPort in --config)",
    )  # fmt: skip
    _add_flags(parser, _COMMON_FLAGS + _SLAVE_FLAGS)
    _add_service_flags(parser)
    parser.set_defaults(func=run_slave)

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
        "--size", type=_size, default=None, metavar="BYTES",
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
    parser.set_defaults(func=run_put)

    parser = subparsers.add_parser(
        "pull",
        help="pull messages of a queue through a broker port",
        description="Print up to --max messages of a queue from --offset, then the next offset.",
    )
    _add_broker(parser)
    parser.add_argument("--topic", required=True, help="the topic")
    parser.add_argument("--queue", type=int, required=True, metavar="Q", help="queue id")
    parser.add_argument("--offset", type=int, default=0, metavar="N", help="queue offset (0)")
    parser.add_argument("--max", type=int, default=32, metavar="M", help="most messages (32)")
    parser.add_argument("--json", action="store_true", help="one JSON object per message")
    parser.set_defaults(func=run_pull)

    parser = subparsers.add_parser(
        "status",
        help="show a broker's role, offsets and replication state",
        description="Show role, offsets and, for a master, each slave's ack offset, lag, "
        "transfer speed and state; for a slave, its link to the master.",
    )
    _add_broker(parser)
    parser.add_argument("--json", action="store_true", help="print the JSON status object")
    parser.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    parser.add_argument(
        "--interval", type=float, default=1.0, metavar="S", help="--watch refresh seconds (1)"
    )
    parser.set_defaults(func=run_status)

    _demo.register(subparsers)


def _add_broker(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--broker", type=_address, default=("127.0.0.1", 10911), metavar="HOST:PORT",
        help="the broker port (127.0.0.1:10911)",
    )  # fmt: skip
    parser.add_argument(
        "--timeout", type=float, default=30.0, metavar="S",
        help="seconds to connect and per request (30)",
    )  # fmt: skip


# -- master and slave -----------------------------------------------------------------------


def _write_ready(path: Path, broker: Broker, addresses: BrokerAddresses) -> None:
    def fmt(address: tuple[str, int] | None) -> str | None:
        return None if address is None else f"{address[0]}:{address[1]}"

    data = {
        "role": broker.role.value,
        "broker": fmt(addresses.broker),
        "ha": fmt(addresses.ha),
        "store": str(broker.config.store_path_root_dir),
        "pid": os.getpid(),
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data) + "\n", encoding="utf-8")
    tmp.replace(path)


async def _serve(broker: Broker, ready_file: Path | None) -> int:
    """Run the broker until SIGTERM (0) or Ctrl-C (KeyboardInterrupt, 130 in main)."""
    config = broker.config
    error: str | None = None
    try:
        async with trio.open_nursery() as nursery:
            addresses: BrokerAddresses = await nursery.start(broker.run)
            parts = [f"store {config.store_path_root_dir}"]
            if addresses.broker:
                parts.append(f"broker port {addresses.broker[0]}:{addresses.broker[1]}")
            if addresses.ha:
                parts.append(f"HA port {addresses.ha[0]}:{addresses.ha[1]}")
            if broker.slave is not None:
                parts.append(f"master {broker.slave.master_address}")
            print(f"{broker.role.value} ready: {', '.join(parts)}", flush=True)
            if ready_file is not None:
                _write_ready(ready_file, broker, addresses)
            with trio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    print("SIGTERM: shutting down", file=sys.stderr, flush=True)
                    nursery.cancel_scope.cancel()
                    break
    except* (StoreError, ConfigError, OSError) as group:
        error = _first_message(group)
        first = _first(group)
        if isinstance(first, OSError) and first.errno == errno.EADDRINUSE:
            ports = [f"broker port {config.listen_host}:{config.listen_port}"]
            if broker.role is not BrokerRole.SLAVE:
                ports.append(f"HA port {config.ha_listen_host}:{config.ha_listen_port}")
            error = f"cannot listen: {error} ({', '.join(ports)})"
    return EXIT_OK if error is None else fail(error)


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def _first_message(group: BaseExceptionGroup[Any]) -> str:
    exc = _first(group)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror + (f": {exc.filename}" if exc.filename else "")
    return str(exc)


def _config_keys(path: Path | None) -> set[str]:
    """The keys a ``--config`` file sets (already validated by :func:`build_config`)."""
    if path is None:
        return set()
    return set(_parse_lines(path.read_text(encoding="utf-8").splitlines(), str(path)))


async def run_master(args: argparse.Namespace) -> int:
    """``hanet master``."""
    try:
        config = build_config(args)
        if config.broker_role is BrokerRole.SLAVE:
            raise ConfigError("hanet master cannot run the SLAVE role (use hanet slave)")
        broker = Broker(config)
    except (ConfigError, ValueError) as exc:
        return fail(str(exc))
    return await _serve(broker, args.ready_file)


async def run_slave(args: argparse.Namespace) -> int:
    """``hanet slave``."""
    try:
        config = build_config(args, BrokerRole.SLAVE)
        config.ha_master_host_port  # noqa: B018 - validates the address
        listen = args.listen is not None or "listenPort" in _config_keys(args.config)
        broker = Broker(config, serve_broker_port=listen)
    except (ConfigError, ValueError) as exc:
        return fail(str(exc))
    return await _serve(broker, args.ready_file)


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

    run = PutRun(args.count)
    progress = _Progress(args.count, enabled=args.count > 1 and not args.quiet and not args.json)
    next_index = 0
    host, port = args.broker

    async def worker(client: BrokerClient) -> None:
        nonlocal next_index
        while next_index < args.count:
            start = next_index
            next_index = min(start + args.batch, args.count)
            batch = [message(i) for i in range(start, next_index)]
            t0 = time.perf_counter()
            replies: list[PutReply] = await client.put_batch(batch)
            run.latencies.append(time.perf_counter() - t0)
            for m, reply in zip(batch, replies, strict=True):
                run.statuses[reply.status.value] += 1
                run.bytes += len(m.body)
                if not reply.ok and run.first_error is None and reply.detail:
                    run.first_error = reply.detail
            run.sent += len(batch)
            progress.advance(len(batch))

    started = time.perf_counter()
    failure: str | None = None
    try:
        async with BrokerClient.connect(
            host, port, connect_timeout=args.timeout, request_timeout=args.timeout
        ) as client:
            with progress:
                async with trio.open_nursery() as nursery:
                    for _ in range(min(args.concurrency, math.ceil(args.count / args.batch))):
                        nursery.start_soon(worker, client)
    except* BrokerError as group:
        failure = _first_message(group)
    run.elapsed = time.perf_counter() - started
    if failure is not None:
        run.first_error = failure
        if args.json:
            print(json.dumps(run.summary()), flush=True)
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
    """The one-line answer of a single put."""
    (status,) = run.statuses
    return status if run.first_error is None else f"{status}: {run.first_error}"


class _Progress:
    """A rich progress bar on stderr when it is a terminal (and rich is installed)."""

    def __init__(self, total: int, *, enabled: bool) -> None:
        self._bar: Any = None
        self._task: Any = None
        if not enabled or not sys.stderr.isatty():
            return
        if not HAVE_RICH:  # pragma: no cover - rich is the "progress" extra
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


def message_to_json(record: MessageRecord) -> dict[str, Any]:
    """A pulled message as a JSON object (the body as text, or base64 when not UTF-8)."""
    out: dict[str, Any] = {
        "queue_id": record.queue_id,
        "queue_offset": record.queue_offset,
        "physical_offset": record.physical_offset,
        "size": record.size,
        "msg_id": record.msg_id,
        "store_timestamp": record.store_timestamp,
        "born_host": record.born_address,
        "properties": record.properties,
    }
    try:
        out["body"] = record.body.decode("utf-8")
    except UnicodeDecodeError:
        out["body_base64"] = base64.b64encode(record.body).decode("ascii")
    return out


async def run_pull(args: argparse.Namespace) -> int:
    """``hanet pull``."""
    if args.queue < 0 or args.offset < 0 or args.max < 1:
        return fail("--queue and --offset must be >= 0, --max >= 1")
    host, port = args.broker
    result: PullResult | None = None
    failure: str | None = None
    try:
        async with BrokerClient.connect(
            host, port, connect_timeout=args.timeout, request_timeout=args.timeout
        ) as client:
            result = await client.pull(args.topic, args.queue, args.offset, args.max)
    except* BrokerError as group:
        failure = _first_message(group)
    if result is None:
        return fail(failure or "no answer")
    for record in result.messages:
        if args.json:
            print(json.dumps(message_to_json(record)))
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
    if status.role != BrokerRole.SLAVE.value:
        head.add_row("puts", str(status.puts))
        if status.replicated_offset is not None and status.replicated_offset >= 0:
            head.add_row("replicated", str(status.replicated_offset))
    parts: list[Any] = [head]
    if status.master is not None:
        link = status.master
        state = "connected" if link.connected else "disconnected"
        reason = f" (last close: {link.last_close_reason})" if link.last_close_reason else ""
        head.add_row("master", f"{link.address} {state}, {link.connects} connects{reason}")
    if status.role != BrokerRole.SLAVE.value:
        table = Table(title="slaves", title_justify="left")
        for column in ("address", "state", "ack offset", "lag", "speed"):
            table.add_column(column, justify="right" if column != "state" else "left")
        for s in status.slaves:
            table.add_row(
                s.address,
                s.state,
                str(s.ack_offset),
                _human_bytes(s.lag_bytes),
                f"{_human_bytes(s.bytes_per_second)}/s",
            )
        if not status.slaves:
            table.add_row("(none connected)", "", "", "", "")
        parts.append(table)
    return Group(*parts)


def status_lines(status: BrokerStatus) -> list[str]:
    """The status as plain text lines (no rich)."""
    lines = [
        f"role {status.role}, offsets {status.min_offset}..{status.max_offset}, "
        f"flushed {status.flushed_offset}, puts {status.puts}"
    ]
    if status.master is not None:
        link = status.master
        lines.append(
            f"master {link.address}: {'connected' if link.connected else 'disconnected'}, "
            f"{link.connects} connects, last close {link.last_close_reason}"
        )
    for s in status.slaves:
        lines.append(
            f"slave {s.address}: {s.state}, ack {s.ack_offset}, lag {s.lag_bytes} B, "
            f"{s.bytes_per_second:.0f} B/s"
        )
    return lines


async def run_status(args: argparse.Namespace) -> int:
    """``hanet status``."""
    host, port = args.broker
    failure: str | None = None
    try:
        async with BrokerClient.connect(
            host, port, connect_timeout=args.timeout, request_timeout=args.timeout
        ) as client:
            if not args.watch:
                status = await client.status()
                if args.json:
                    print(json.dumps(status.raw, indent=2), flush=True)
                else:
                    _print_status(status)
                return EXIT_OK
            if args.json:
                while True:
                    status = await client.status()
                    print(json.dumps(status.raw), flush=True)
                    await trio.sleep(args.interval)
            await _watch(client, args.interval)
    except* BrokerError as group:
        failure = _first_message(group)
    return EXIT_OK if failure is None else fail(failure)


def _print_status(status: BrokerStatus) -> None:
    if not HAVE_RICH:  # pragma: no cover - rich is the "progress" extra
        print("\n".join(status_lines(status)), flush=True)
        return
    Console().print(status_renderable(status))


async def _watch(client: BrokerClient, interval: float) -> None:
    if not HAVE_RICH:  # pragma: no cover - rich is the "progress" extra
        while True:
            print("\n".join(status_lines(await client.status())), flush=True)
            await trio.sleep(interval)
    status = await client.status()
    with Live(status_renderable(status), refresh_per_second=4) as live:
        while True:
            await trio.sleep(interval)
            live.update(status_renderable(await client.status()))
