"""The bodies of ``hanet audit``, ``hanet diff`` and ``hanet stats`` (imports pyspark).

``hanet.cli._spark`` parses the arguments, checks the store paths and imports this module only
then, so that the ``hanet`` command line works without pyspark. :func:`run` starts (or joins)
the Spark session, prints which Spark runs, runs the job, prints its tables and how long it
took, and stops the session if it started it. With ``--json`` it prints the one JSON document
the ``hanet.cli._spark`` docstring describes instead, and nothing else.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
from pyspark.sql import SparkSession

from hanet.spark import (
    PROBLEM_KINDS,
    Progress,
    SparkUnavailableError,
    audit,
    connect_session,
    describe,
    diff,
    is_small,
    spark_session,
    stats,
)

from ._spark_report import AnyTable, Collected, json_rows, show, write_json, write_tables
from ._support import EXIT_ERROR, EXIT_FAILED, EXIT_OK

__all__ = ["run"]

Job = Callable[[SparkSession, argparse.Namespace], "tuple[int, dict[str, Any]]"]
PRINTED_ROWS = 20
"""Rows printed per table without ``--limit``."""


def run(verb: str, args: argparse.Namespace, started: float) -> int:
    """Run one verb (``audit``, ``diff``, ``stats``) on a Spark session; its exit status.

    ``started`` is the ``time.monotonic()`` at which the command began.
    """
    jobs: dict[str, Job] = {"audit": _audit, "diff": _diff, "stats": _stats}
    job = jobs[verb]
    owned = args.remote is not None or SparkSession.getActiveSession() is None
    paths = [args.master, args.slave] if verb == "diff" else list(args.stores)
    small = is_small(paths, args.driver_rows)
    try:
        if args.remote is not None:
            spark = connect_session(args.remote, quick=small)
        else:
            spark = spark_session(args.spark_master, quick=small, sources=not small)
    except SparkUnavailableError as exc:
        print(f"hanet: {exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        line = describe(spark)
        how = "read in the driver" if small else "read by the executors"
        _say(args, f"{line} (ready in {time.monotonic() - started:.1f} s; stores {how})")
        with Progress(spark) if not _interactive() else contextlib.nullcontext():
            status, fields = job(spark, args)
        elapsed = time.monotonic() - started
        if args.json:
            head = {"command": verb, "ok": status == EXIT_OK, "spark": line}
            document = {**head, "seconds": round(elapsed, 3), **fields}
            print(json.dumps(document, indent=1), flush=True)
        else:
            print(f"{verb} took {elapsed:.1f} s")
        return status
    finally:
        if owned:
            spark.stop()


def _say(args: argparse.Namespace, *lines: str) -> None:
    """Print progress lines for a person: on stdout, or on stderr with ``--json`` (stdout is
    the document)."""
    out = sys.stderr if args.json else sys.stdout
    for line in lines:
        print(line, file=out, flush=True)


def _interactive() -> bool:
    """Spark draws its own progress bar (stdout and stderr are terminals)."""
    return sys.stdout.isatty() and sys.stderr.isatty()


def _printed(args: argparse.Namespace) -> int:
    return PRINTED_ROWS if args.limit is None else args.limit


def _tables(
    args: argparse.Namespace,
    tables: Mapping[str, AnyTable],
    fields: dict[str, Any],
    printed: Callable[[], None],
) -> dict[str, Any]:
    """Print the tables (``printed``) or collect them for the JSON document; write ``--out``;
    the document's fields (the tables as lists with ``--json``, then ``fields``)."""
    document: dict[str, Any] = {}
    if args.json:
        document = {name: json_rows(df, args.limit) for name, df in tables.items()}
    else:
        printed()
    if args.out is not None:
        started = time.monotonic()
        written = write_tables(tables, args.out, args.out_format)
        if args.out_format == "json":
            target = Path(args.out) / "summary.json"
            write_json(target, fields)
            written.append(str(target))
        elapsed = time.monotonic() - started
        _say(args, f"wrote {', '.join(written)} ({args.out_format}, {elapsed:.1f} s)")
    return {**fields, **document}


def _audit(spark: SparkSession, args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    _say(args, f"auditing {', '.join(args.stores)}")
    started = time.monotonic()
    result = audit(
        spark,
        args.stores,
        consume_queues=not args.no_consume_queues,
        driver_rows=args.driver_rows,
        options=args.source_options,
    )
    _say(args, f"scanned {result.rows} rows in {time.monotonic() - started:.1f} s")
    try:
        store_rows = result.stores.collect()
        total = sum(row["problems"] for row in store_rows)
        verdicts = [store_line(row) for row in store_rows]
        # The stores table (a groupBy, join and pivot over every row, not cached) is computed
        # once: what is printed, put in the JSON document or written is the collected rows.
        schema = result.stores.schema
        stores = Collected(
            columns=list(schema.names),
            rows=store_rows,
            frame=lambda: spark.createDataFrame(store_rows, schema=schema),
        )

        def printed() -> None:
            limit = _printed(args)
            show("stores", stores, limit=max(limit, 1000))
            show("queues", result.queues, limit=limit)
            show("problems", result.problems, limit=limit, total=total)

        fields = {"scanned": result.rows, "problem_count": total, "verdicts": verdicts}
        tables: dict[str, AnyTable] = {"stores": stores, "queues": result.queues}
        tables["problems"] = result.problems
        document = _tables(args, tables, fields, printed)
        _say(args, "", *verdicts)
    finally:
        result.unpersist()
    return (EXIT_FAILED if total else EXIT_OK), document


def store_line(row: Any) -> str:
    """The one-line verdict of an audited store (a row of the ``stores`` table)."""
    files = f"{row['files']} file{'s' * (row['files'] != 1)}"
    head = f"{row['store']}: {row['messages']} messages, {row['bytes']} bytes in {files}"
    if not row["problems"]:
        return f"{head}, no problems"
    kinds = ", ".join(f"{row[k]} {k}" for k in PROBLEM_KINDS if row[k])
    return f"{head}, {row['problems']} problems ({kinds})"


def _diff(spark: SparkSession, args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    _say(args, f"comparing master {args.master} with slave {args.slave}")
    started = time.monotonic()
    result = diff(spark, args.master, args.slave, driver_rows=args.driver_rows)
    summary = result.summary
    _say(args, f"scanned and matched both in {time.monotonic() - started:.1f} s")
    try:
        _say(
            args,
            f"master: {summary.master_records} records, offsets "
            f"{summary.master_start}..{summary.master_end}; slave: {summary.slave_records} "
            f"records, offsets {summary.slave_start}..{summary.slave_end}",
        )
        differing = summary.differing + summary.master_only + summary.slave_only

        def printed() -> None:
            limit = _printed(args)
            title = "records that differ or one side lacks"
            show(title, result.records, limit=limit, total=differing)
            show("one-sided ranges", result.ranges, limit=limit)

        tables = {"records": result.records, "ranges": result.ranges}
        document = _tables(args, tables, attrs.asdict(summary), printed)
        _say(args, "", summary.verdict)
    finally:
        result.unpersist()
    return (EXIT_OK if summary.first_difference is None else EXIT_FAILED), document


def _stats(spark: SparkSession, args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    _say(args, f"statistics of {', '.join(args.stores)}")
    started = time.monotonic()
    result = stats(
        spark,
        args.stores,
        top=args.top,
        driver_rows=args.driver_rows,
        options=args.source_options,
    )
    _say(args, f"scanned {result.rows} records in {time.monotonic() - started:.1f} s")
    try:

        def printed() -> None:
            limit = _printed(args)
            show("messages and bytes per store, topic and minute", result.per_minute, limit=limit)
            show("store - born latency per store and topic (ms)", result.latency, limit=limit)
            show("largest messages", result.largest, limit=args.top)

        tables = {"per_minute": result.per_minute, "latency": result.latency}
        tables["largest"] = result.largest
        document = _tables(args, tables, {"scanned": result.rows}, printed)
    finally:
        result.unpersist()
    return EXIT_OK, document
