"""The bodies of ``hanet audit``, ``hanet diff`` and ``hanet stats`` (imports pyspark).

``hanet.cli._spark`` parses the arguments, checks the store paths and imports this module only
then, so that the ``hanet`` command line works without pyspark. :func:`run` starts (or joins)
the Spark session, prints which Spark runs, runs the job, prints its tables and how long it
took, and stops the session if it started it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from hanet.spark import (
    PROBLEM_KINDS,
    SparkUnavailableError,
    audit,
    describe,
    diff,
    spark_session,
    stats,
)

from ._spark_report import show, write_tables
from ._support import EXIT_ERROR, EXIT_FAILED, EXIT_OK

__all__ = ["run"]

Job = Callable[[SparkSession, argparse.Namespace], int]


def run(verb: str, args: argparse.Namespace, started: float) -> int:
    """Run one verb (``audit``, ``diff``, ``stats``) on a Spark session; its exit status.

    ``started`` is the ``time.monotonic()`` at which the command began.
    """
    jobs: dict[str, Job] = {"audit": _audit, "diff": _diff, "stats": _stats}
    job = jobs[verb]
    owned = SparkSession.getActiveSession() is None
    try:
        spark = spark_session(args.spark_master)
    except SparkUnavailableError as exc:
        print(f"hanet: {exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        print(f"{describe(spark)} (ready in {time.monotonic() - started:.1f} s)", flush=True)
        status = job(spark, args)
        print(f"{verb} took {time.monotonic() - started:.1f} s")
        return status
    finally:
        if owned:
            spark.stop()


def _write(args: argparse.Namespace, tables: dict[str, Any]) -> None:
    if args.out is None:
        return
    started = time.monotonic()
    written = write_tables(tables, args.out, args.out_format)
    elapsed = time.monotonic() - started
    print(f"wrote {', '.join(written)} ({args.out_format}, {elapsed:.1f} s)")


def _audit(spark: SparkSession, args: argparse.Namespace) -> int:
    print(f"auditing {', '.join(args.stores)}", flush=True)
    started = time.monotonic()
    result = audit(spark, args.stores, consume_queues=not args.no_consume_queues)
    print(f"scanned {result.rows} rows in {time.monotonic() - started:.1f} s", flush=True)
    try:
        store_rows = show("stores", result.stores, limit=max(args.limit, 1000))
        show("queues", result.queues, limit=args.limit)
        total = sum(row["problems"] for row in store_rows)
        show("problems", result.problems, limit=args.limit, total=total)
        _write(
            args, {"stores": result.stores, "queues": result.queues, "problems": result.problems}
        )
        print()
        for row in store_rows:
            print(store_line(row))
    finally:
        result.unpersist()
    return EXIT_FAILED if total else EXIT_OK


def store_line(row: Any) -> str:
    """The one-line verdict of an audited store (a row of the ``stores`` table)."""
    files = f"{row['files']} file{'s' * (row['files'] != 1)}"
    head = f"{row['store']}: {row['messages']} messages, {row['bytes']} bytes in {files}"
    if not row["problems"]:
        return f"{head}, no problems"
    kinds = ", ".join(f"{row[k]} {k}" for k in PROBLEM_KINDS if row[k])
    return f"{head}, {row['problems']} problems ({kinds})"


def _diff(spark: SparkSession, args: argparse.Namespace) -> int:
    print(f"comparing master {args.master} with slave {args.slave}", flush=True)
    started = time.monotonic()
    result = diff(spark, args.master, args.slave)
    summary = result.summary
    print(f"scanned and matched both in {time.monotonic() - started:.1f} s", flush=True)
    try:
        print(
            f"master: {summary.master_records} records, offsets "
            f"{summary.master_start}..{summary.master_end}; slave: {summary.slave_records} "
            f"records, offsets {summary.slave_start}..{summary.slave_end}"
        )
        differing = summary.differing + summary.master_only + summary.slave_only
        show(
            "records that differ or one side lacks",
            result.records,
            limit=args.limit,
            total=differing,
        )
        show("one-sided ranges", result.ranges, limit=args.limit)
        _write(args, {"records": result.records, "ranges": result.ranges})
        print()
        print(summary.verdict)
    finally:
        result.unpersist()
    return EXIT_OK if summary.first_difference is None else EXIT_FAILED


def _stats(spark: SparkSession, args: argparse.Namespace) -> int:
    print(f"statistics of {', '.join(args.stores)}", flush=True)
    started = time.monotonic()
    result = stats(spark, args.stores, top=args.top)
    print(f"scanned {result.rows} records in {time.monotonic() - started:.1f} s", flush=True)
    try:
        show("messages and bytes per topic per minute", result.per_minute, limit=args.limit)
        show("store - born latency per topic (ms)", result.latency, limit=args.limit)
        show("largest messages", result.largest, limit=args.top)
        _write(
            args,
            {"per_minute": result.per_minute, "latency": result.latency, "largest": result.largest},
        )
    finally:
        result.unpersist()
    return EXIT_OK
