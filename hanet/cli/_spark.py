"""``hanet audit``, ``hanet diff`` and ``hanet stats``: the Spark jobs on the command line
(and ``hanet spark-connect``, a Spark Connect server for their ``--remote``:
:mod:`hanet.cli._spark_server`).

- ``hanet audit STORE... [--no-consume-queues]``: per store and queue counts, then every
  problem (corrupt data, CRC failures, queue offset gaps and repeats, consume queue entries
  that do not match the commit log). Exit status 1 when there is a problem.
- ``hanet diff MASTER SLAVE``: records that differ or that one side lacks, one-sided ranges,
  and a verdict line. Exit status 1 when the slave diverges.
- ``hanet stats STORE... [--top N]``: messages and bytes per topic per minute, store latency
  percentiles per topic, the largest messages.

``audit`` and ``stats`` also read running brokers with ``--broker HOST:PORT`` (repeatable;
``--tls-ca/--tls-cert/--tls-key`` as the clients'; ``--access-key`` with ``--secret-key`` or
``$HANET_SECRET_KEY`` for a broker under RocketMQ's ACL, whose account must be an admin): each
Spark task reads its range of the broker's commit log over the broker port (HANET_READ_LOG),
so executors need no access to the broker's files; a broker's ``store`` column is its
``HOST:PORT`` and its consume queues are not compared.

Common options: ``--spark-master`` (default ``local[*]``, or spark-submit's ``--master`` when
run as ``spark-submit path/to/hanet/__main__.py audit ...``; any Spark master URL; a
``spark://`` master that does not accept a connection within 5 s is an error at once),
``--json`` (see below), ``--out DIR`` with ``--format parquet|csv|json`` (each table to
``DIR/<table>``, a Spark output directory, for Parquet and CSV; to one file
``DIR/<table>.json`` holding a JSON array of row objects, plus ``DIR/summary.json`` with the
other fields of the JSON document, for JSON), ``--limit N`` (rows printed per table, default
20; with ``--json``, rows per list, default all). The first line printed names the Spark
version, master and cores; each table says how long it took and the last line how long the
whole job did. Spark's stage progress bar runs on stderr when stdout and stderr are terminals;
otherwise Spark is quiet (errors only) and hanet prints the running stages on stderr every 5 s
(with ``--remote`` too, from the progress the Connect server reports).
A STORE is a store root, a ``commitlog/`` directory or a quoted glob of stores.

Small jobs stay small: stores of at most ``--driver-rows`` records in all (200,000) are read
by the driver and handed to Spark as Arrow tables (no Python workers), and Spark starts for a
short job (C1 JIT only, no UI, one shuffle partition, expressions interpreted rather than
compiled, Spark's classes mapped from a class data sharing archive that the first such run
leaves in ``~/.cache/hanet``, one per pyspark installation; ``HANET_SPARK_CDS=0`` turns that
off).
``--driver-rows 0`` reads every store through the executors. ``--remote sc://HOST:PORT`` runs
the job on a running Spark Connect server instead (``pip install 'hanet[connect]'`` here,
``hanet`` importable by the server's Python; ``hanet spark-connect`` starts one), so repeated
runs reuse one warm Spark (for stores read in the driver, its session has the quick local
session's settings: one shuffle partition, interpreted expressions).

With ``--json`` stdout is one JSON document and nothing else (the progress lines go to
stderr): an object with ``command`` (the verb), ``ok`` (false exactly when the exit status
is 1), ``spark`` (the Spark line), ``seconds`` (how long the job took), one key per table
holding a list of row objects (keys are the column names; timestamps are ISO 8601 strings in
UTC), and the verdict fields:

- audit: tables ``stores``, ``queues``, ``problems``; ``scanned`` (commit log rows read),
  ``problem_count`` (all problems, also those past ``--limit``), ``verdicts`` (each store's
  one-line verdict);
- diff: tables ``records`` (with ``first_diff_offset``, ``first_diff_field`` and
  ``differing_fields`` for records that differ), ``ranges``; the summary's fields
  ``first_difference``, ``first_diff_offset``, ``first_diff_field``, ``master_records``,
  ``slave_records``, ``master_start``, ``master_end``, ``slave_start``, ``slave_end``,
  ``differing``, ``master_only``, ``slave_only``, ``master_corrupt``, ``slave_corrupt``,
  ``verdict``;
- stats: tables ``per_minute``, ``latency``, ``largest`` (each with the ``store`` column);
  ``scanned`` (good records read).

Errors stay one ``hanet: ...`` line on stderr with exit status 2.

pyspark is imported inside the handlers, so ``hanet --help`` works without it; a missing
pyspark or Java gives a one-line message saying what to install (exit status 2). Spark's calls
block: the handlers run them synchronously inside the trio run that ``hanet.cli`` starts
(nothing else runs in it), and Ctrl-C interrupts the driver as a KeyboardInterrupt.
"""

from __future__ import annotations

import argparse
import importlib
import socket
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from hanet.errors import ConfigError
from hanet.spark import DEFAULT_DRIVER_ROWS, find_stores
from hanet.store import CommitLogReader, StoreError

from ._credentials import add_credentials, credentials_of
from ._support import fail, parse_address

__all__ = ["audit_command", "diff_command", "register", "spark_connect_command", "stats_command"]

SPARK_HINT = "this command needs the spark extra: pip install 'hanet[spark]' (pyspark, pyarrow)"


def register(subparsers: Any) -> None:
    """Add the ``audit``, ``diff`` and ``stats`` verbs to the ``hanet`` parser."""
    parser = subparsers.add_parser(
        "audit",
        description="Audit one or more stores on Spark. Exit status 1 when a problem is found.",
    )
    parser.add_argument("stores", nargs="*", metavar="STORE", help="store, commitlog/ or glob")
    _broker_options(parser)
    parser.add_argument(
        "--no-consume-queues", action="store_true",
        help="skip rebuilding the consume queues and comparing them",
    )  # fmt: skip
    _common(parser)
    parser.set_defaults(func=audit_command)

    parser = subparsers.add_parser(
        "diff",
        description="Find where a slave's commit log differs from its master's. Exit status 1 "
        "when the slave diverges.",
    )
    parser.add_argument("master", metavar="MASTER_STORE")
    parser.add_argument("slave", metavar="SLAVE_STORE")
    _common(parser)
    parser.set_defaults(func=diff_command)

    parser = subparsers.add_parser(
        "stats",
        description="Messages and bytes per topic per minute, store-minus-born latency "
        "percentiles per topic, largest messages.",
    )
    parser.add_argument("stores", nargs="*", metavar="STORE", help="store, commitlog/ or glob")
    _broker_options(parser)
    parser.add_argument("--top", type=int, default=10, metavar="N", help="largest messages shown")
    _common(parser)
    parser.set_defaults(func=stats_command)

    parser = subparsers.add_parser(
        "spark-connect",
        description="Run a Spark Connect server (the one the installed pyspark ships) until "
        "Ctrl-C or SIGTERM, for hanet audit|diff|stats --remote sc://HOST:PORT: repeated jobs "
        "reuse its warm Spark. It runs what its clients send: keep it on loopback or a "
        "trusted network.",
    )
    parser.add_argument(
        "--listen", type=parse_address, default=("127.0.0.1", 15002), metavar="HOST:PORT",
        help="its gRPC address (default 127.0.0.1:15002; port 0: a free one)",
    )  # fmt: skip
    parser.add_argument(
        "--spark-master", default=None, metavar="URL", help="its Spark master (default local[*])"
    )
    parser.set_defaults(func=spark_connect_command)


def _broker_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--broker", action="append", default=[], type=parse_address, metavar="HOST:PORT",
        help="also read this running broker's commit log over its broker port (repeatable; "
        "no shared files: consume queues are not compared)",
    )  # fmt: skip
    for flag, what in (
        ("--tls-ca", "talk TLS to --broker, trusting this CA (plain TCP without it)"),
        ("--tls-cert", "present this certificate (PEM) to a --broker that requires one"),
        ("--tls-key", "the key of --tls-cert"),
    ):
        parser.add_argument(flag, default=None, metavar="FILE", help=what)
    add_credentials(parser, what="the reads of --broker")


def _broker_paths(args: argparse.Namespace) -> list[str]:
    """``--broker`` as ``hanet://HOST:PORT`` paths (with the TLS files in the query)."""
    tls = {
        key: str(Path(value).resolve())
        for key, value in (
            ("tlsCa", args.tls_ca), ("tlsCert", args.tls_cert), ("tlsKey", args.tls_key)
        )
        if value
    }  # fmt: skip
    query = f"?{urlencode(tls)}" if tls else ""
    return [f"hanet://{host}:{port}{query}" for host, port in args.broker]


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--spark-master", default=None, metavar="URL",
        help="Spark master (default local[*], or spark-submit's --master under spark-submit)",
    )  # fmt: skip
    parser.add_argument(
        "--remote", default=None, metavar="sc://HOST:PORT",
        help="run on a running Spark Connect server instead of starting Spark here "
        "(hanet spark-connect starts one; needs pip install 'hanet[connect]')",
    )  # fmt: skip
    parser.add_argument(
        "--json", action="store_true",
        help="print the report as one JSON document on stdout instead of tables",
    )  # fmt: skip
    parser.add_argument(
        "--out", default=None, metavar="DIR", help="also write every table to DIR/<table>"
    )
    parser.add_argument(
        "--format", dest="out_format", choices=("parquet", "csv", "json"), default="parquet",
        help="format of --out (default parquet)",
    )  # fmt: skip
    parser.add_argument(
        "--limit", type=int, default=None, metavar="N",
        help="rows printed per table (default 20; with --json, default all)",
    )  # fmt: skip
    parser.add_argument(
        "--driver-rows", type=int, default=DEFAULT_DRIVER_ROWS, metavar="N",
        help="stores of at most N records in all are read by the driver and Spark starts "
        f"for a short job (default {DEFAULT_DRIVER_ROWS}; 0: always read by the executors)",
    )  # fmt: skip


def _source_options(args: argparse.Namespace) -> dict[str, str]:
    """The ``commitlog`` source's ACL options of ``--access-key``/``--secret-key``.

    Raises:
        ConfigError: one without the other.
    """
    credentials = credentials_of(args)
    if credentials is None:
        return {}
    return {"accessKey": credentials.access_key, "secretKey": credentials.secret_key}


async def audit_command(args: argparse.Namespace) -> int:
    """``hanet audit``: see the module docstring."""
    args.stores = [*args.stores, *_broker_paths(args)]
    return _run("audit", args, list(args.stores))


async def diff_command(args: argparse.Namespace) -> int:
    """``hanet diff``: see the module docstring."""
    return _run("diff", args, [args.master, args.slave])


async def stats_command(args: argparse.Namespace) -> int:
    """``hanet stats``: see the module docstring."""
    args.stores = [*args.stores, *_broker_paths(args)]
    return _run("stats", args, list(args.stores))


async def spark_connect_command(args: argparse.Namespace) -> int:
    """``hanet spark-connect``: see :mod:`hanet.cli._spark_server`."""
    try:
        server = importlib.import_module("hanet.cli._spark_server")  # imports pyspark
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("pyspark", "pyarrow", "py4j"):
            return fail(SPARK_HINT)
        raise
    status: int = await server.serve(args)
    return status


def _check_stores(verb: str, paths: list[str]) -> None:
    """Fail early, in one line, on paths that are not stores (rather than deep in Spark)."""
    if not paths:
        raise StoreError(f"{verb}: give a STORE or --broker HOST:PORT")
    for path in paths:
        if path.startswith("hanet://"):  # --broker: the broker is asked when Spark plans
            if verb == "diff":
                raise StoreError(f"{path}: diff reads store files, not brokers")
            _check_broker(urlsplit(path).netloc)
            continue
        stores = find_stores(path)
        if verb == "diff" and len(stores) != 1:
            raise StoreError(f"{path}: diff compares one store with one store, not {len(stores)}")
        for store in stores:
            CommitLogReader(store.commit_log_dir)  # file sizes, gaps


def _check_broker(address: str) -> None:
    """A broker that does not accept a connection is one line now, not a Spark traceback."""
    host, port = parse_address(address)
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as exc:
        raise StoreError(f"broker {address}: cannot connect: {exc}") from None


def _check_out(out: str) -> None:
    """An ``--out`` directory that cannot be written is one line now, before the Spark job, not
    a traceback after it. A local directory (a plain path or ``file:``) is created and a file
    tried in it; another file system's URI (``hdfs://``, ``s3a://``) is left to Spark."""
    parts = urlsplit(out)
    if parts.scheme not in ("", "file"):
        return
    path = Path(parts.path if parts.scheme else out)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise StoreError(f"--out {out}: {exc.strerror or exc}") from None


def _run(verb: str, args: argparse.Namespace, paths: list[str]) -> int:
    started = time.monotonic()
    try:
        args.source_options = _source_options(args)  # diff has no --access-key: {}
        _check_stores(verb, paths)
        if args.out is not None and args.remote is None:  # Spark Connect: the server writes
            _check_out(args.out)
    except (StoreError, ConfigError) as exc:
        return fail(str(exc))
    try:
        commands = importlib.import_module("hanet.cli._spark_jobs")  # imports pyspark
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("pyspark", "pyarrow", "py4j"):
            return fail(SPARK_HINT)
        if exc.name and exc.name.split(".")[0] == "rich":  # its tables: the command line's extra
            return fail(f"hanet {verb} needs rich: pip install 'hanet[cli]'")
        raise
    status: int = commands.run(verb, args, started)
    return status
