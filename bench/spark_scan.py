"""Benchmark the ``commitlog`` Spark data source against one Python process with the same codec.

Run: ``.venv/bin/python bench/spark_scan.py [--size-mib 1024] [--message-bytes 1024]
[--master local[2]] [--repeat 2] [--dir bench/out/spark-scan]``

The store: ``--size-mib`` of records with ``--message-bytes`` bodies (RocketMQ's 1 GiB commit
log files, blank records at their ends), written straight into the files as pre-encoded
records (a few seconds), and reused by later runs with the same parameters. Figures, all
measured in the same run on the same files (warm in the page cache):

- codec scan: ``hanet.store.scan_records`` over every file in this process (CRC and physical
  offsets checked): the single-process baseline the goal is set against.
- reader, one process: the data source's partition reader (``hanet.spark.commit_log_batches``:
  the same scan, then Arrow batches) over every range, in this process, without Spark.
- Spark: session start-up (reported, not counted), warm-up queries on a 1 MiB store of 4
  files (both Python workers start), then ``count(*), sum(size)`` over the whole store with
  every column, then only the 12 columns ``hanet audit`` asks for, then only 3 (the
  ``columns`` option): the marginal scan rates. Goal: >= 1.5x the codec scan on a 2-core
  machine.

Every scan runs ``--repeat`` times (2) and the best is kept: the machine may be shared.

A table for humans, then the last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import time
from pathlib import Path
from typing import Any

from hanet.spark import commit_log_batches, find_stores, plan_commit_log
from hanet.store import (
    MessageRecord,
    body_crc,
    encode_blank,
    encode_record,
    file_name,
    scan_records,
)

FILE_SIZE = 1024 * 1024 * 1024
DEFAULT_DIR = Path(__file__).resolve().parent / "out" / "spark-scan"
GOAL = 1.5
AUDIT_COLUMNS = (
    "store",
    "file",
    "physical_offset",
    "size",
    "topic",
    "queue_id",
    "queue_offset",
    "body_crc",
    "crc_ok",
    "tags",
    "status",
    "error",
)
"""What ``hanet audit`` reads (``columns`` option): the projected scan."""
MIN_COLUMNS = ("physical_offset", "size", "status")
"""The fewest columns a useful scan reads: what is left is the codec's scan."""


def generate(root: Path, size: int, body_bytes: int, file_size: int) -> dict[str, Any]:
    """Write a commit log of at least ``size`` bytes of records, unless one with the same
    parameters is there; returns its description."""
    spec = {"size": size, "body_bytes": body_bytes, "file_size": file_size, "version": 1}
    marker = root / "spark-scan.json"
    if marker.exists():
        found = json.loads(marker.read_text())
        if found.get("spec") == spec:
            return dict(found["store"])
    directory = root / "commitlog"
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.iterdir():
        old.unlink()
    bodies = [bytes([65 + i]) * body_bytes for i in range(16)]
    crcs = [body_crc(b) for b in bodies]
    template = MessageRecord.create(
        topic="BenchTopic",
        body=bodies[0],
        born_timestamp=1_700_000_000_000,
        store_timestamp=1_700_000_000_005,
        store_host=b"\xc0\xa8\x01\x14",
        properties={"TAGS": "bench", "KEYS": "k0000000", "UNIQ_KEY": "0" * 32},
    )
    record_size = template.size
    records = 0
    queue_offsets = [0] * 8
    offset = 0
    while offset < size:
        buf = bytearray(file_size)
        position = 0
        while position + record_size + 8 <= file_size and offset + position < size:
            queue_id = records % 8
            record = template._replace(
                body=bodies[records % 16],
                body_crc=crcs[records % 16],
                queue_id=queue_id,
                queue_offset=queue_offsets[queue_id],
                physical_offset=offset + position,
                born_timestamp=template.born_timestamp + records,
                store_timestamp=template.store_timestamp + records,
                properties_raw=template.properties_raw.replace(
                    b"k0000000", b"k%07d" % (records % 10_000_000)
                ),
            )
            buf[position : position + record_size] = encode_record(record)
            queue_offsets[queue_id] += 1
            records += 1
            position += record_size
        if offset + position < size:  # full: the rest of the file is a blank record
            buf[position : position + 8] = encode_blank(file_size - position)
        (directory / file_name(offset)).write_bytes(buf)
        offset += file_size
    store = {"records": records, "data_bytes": records * record_size, "record_size": record_size}
    marker.write_text(json.dumps({"spec": spec, "store": store}))
    return store


def best(repeat: int, run: Any) -> Any:
    """The run (a tuple ending with seconds) with the fewest seconds out of ``repeat``."""
    return min((run() for _ in range(repeat)), key=lambda result: result[-1])


def codec_scan(root: Path) -> tuple[int, float]:
    """(records, seconds) for the codec scanning every file in this process."""
    started = time.perf_counter()
    count = 0
    for path in sorted((root / "commitlog").iterdir()):
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapping:
            view = memoryview(mapping)
            scanner = scan_records(view, base_offset=int(path.name), check_physical_offset=True)
            for _ in scanner:
                count += 1
            del scanner
            view.release()
    return count, time.perf_counter() - started


def reader_scan(
    root: Path, max_range: int, columns: tuple[str, ...] | None = None
) -> tuple[int, int, float]:
    """(rows, ranges, seconds) for the data source's partition reader in this process."""
    started = time.perf_counter()
    rows = 0
    ranges = plan_commit_log(find_stores(str(root))[0], max_range)
    for part in ranges:
        for batch in commit_log_batches(part, columns=columns):
            rows += batch.num_rows
    return rows, len(ranges), time.perf_counter() - started


def spark_scan(
    root: Path, warm_root: Path, master: str, max_range: int, repeat: int
) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from hanet.spark import describe, spark_session

    started = time.perf_counter()
    spark = spark_session(master, config={"spark.ui.enabled": "false"})
    start_up = time.perf_counter() - started
    banner = describe(spark)

    def load(columns: tuple[str, ...] | None = None, path: Path = root) -> Any:
        reader = spark.read.format("commitlog").option("maxPartitionBytes", str(max_range))
        if columns:
            reader = reader.option("columns", ",".join(columns))
        return reader.load(str(path))

    def timed(df: Any) -> tuple[int, float]:
        started = time.perf_counter()
        row = df.agg(F.count("*").alias("rows"), F.sum("size").alias("bytes")).first()
        return row["rows"], time.perf_counter() - started

    figures: dict[str, Any] = {"banner": banner, "start_up_s": start_up}
    try:
        started = time.perf_counter()
        for columns in (None, AUDIT_COLUMNS, MIN_COLUMNS):
            timed(load(columns, path=warm_root))
        figures["warm_up_s"] = time.perf_counter() - started
        figures["partitions"] = load().rdd.getNumPartitions()
        for key, columns in (("full", None), ("audit", AUDIT_COLUMNS), ("min", MIN_COLUMNS)):
            df = load(columns)
            runs = [timed(df) for _ in range(repeat)]
            assert len({rows for rows, _ in runs}) == 1
            figures["rows"] = runs[0][0]
            figures[f"{key}_s"] = min(seconds for _, seconds in runs)
    finally:
        spark.stop()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="data size (1024)")
    parser.add_argument("--message-bytes", type=int, default=1024, help="body size (1024)")
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    parser.add_argument("--max-partition-mib", type=int, default=128, help="range size (128)")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="store directory")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each scan, best kept (2)")
    args = parser.parse_args(argv)
    max_range = args.max_partition_mib * 1024 * 1024

    started = time.perf_counter()
    store = generate(args.dir, args.size_mib * 1024 * 1024, args.message_bytes, FILE_SIZE)
    generated_s = time.perf_counter() - started
    data: int = store["data_bytes"]

    warm_root = args.dir / "warm-up"
    generate(warm_root, 1 << 20, args.message_bytes, 1 << 18)  # 4 files: both workers start

    records, codec_s = best(args.repeat, lambda: codec_scan(args.dir))
    assert records == store["records"], (records, store)
    rows, ranges, reader_s = best(args.repeat, lambda: reader_scan(args.dir, max_range))
    assert rows == records
    rows, _, reader_projected_s = best(
        args.repeat, lambda: reader_scan(args.dir, max_range, AUDIT_COLUMNS)
    )
    assert rows == records
    spark = spark_scan(args.dir, warm_root, args.master, max_range, args.repeat)
    assert spark["rows"] == records
    spark_s = spark["full_s"]
    projected_s = spark["audit_s"]
    min_s = spark["min_s"]

    def rate(seconds: float) -> float:
        return data / seconds / 1e6

    print(spark["banner"])
    print(
        f"store: {args.dir} ({records} records of {store['record_size']} bytes, "
        f"{data / 2**20:.0f} MiB, {ranges} ranges; ready in {generated_s:.1f} s)"
    )
    print(f"{'scan (best of ' + str(args.repeat) + ')':50} {'seconds':>8} {'MB/s':>8} "
          f"{'records/s':>11} {'vs codec':>9}")  # fmt: skip
    lines = [
        ("codec scan, one Python process", codec_s),
        ("reader, all 23 columns, one process, no Spark", reader_s),
        ("reader, the audit's 12 columns, one process", reader_projected_s),
        (f"Spark {args.master}, all 23 columns", spark_s),
        (f"Spark {args.master}, the audit's 12 columns", projected_s),
        (f"Spark {args.master}, 3 columns", min_s),
    ]
    for name, seconds in lines:
        print(
            f"{name:50} {seconds:8.2f} {rate(seconds):8.1f} {records / seconds:11,.0f} "
            f"{codec_s / seconds:8.2f}x"
        )
    print(
        f"Spark session start-up {spark['start_up_s']:.1f} s, warm-up queries "
        f"{spark['warm_up_s']:.1f} s (not counted); {spark['partitions']} partitions"
    )
    ratio = codec_s / spark_s
    projected_ratio = codec_s / projected_s
    verdict = "met" if ratio >= GOAL else "not met"
    print(
        f"goal: Spark >= {GOAL}x the codec scan: {ratio:.2f}x with every column ({verdict}), "
        f"{projected_ratio:.2f}x with the audit's columns, {codec_s / min_s:.2f}x with 3"
    )
    figures = {
        "bench": "spark_scan",
        "master": args.master,
        "cores": os.cpu_count(),
        "records": records,
        "record_bytes": store["record_size"],
        "data_bytes": data,
        "ranges": ranges,
        "codec_scan_s": round(codec_s, 3),
        "codec_scan_mb_s": round(rate(codec_s), 1),
        "reader_one_process_s": round(reader_s, 3),
        "reader_one_process_mb_s": round(rate(reader_s), 1),
        "reader_audit_columns_s": round(reader_projected_s, 3),
        "spark_start_up_s": round(spark["start_up_s"], 2),
        "spark_warm_up_s": round(spark["warm_up_s"], 2),
        "spark_partitions": spark["partitions"],
        "spark_scan_s": round(spark_s, 3),
        "spark_scan_mb_s": round(rate(spark_s), 1),
        "spark_audit_columns_s": round(projected_s, 3),
        "spark_audit_columns_mb_s": round(rate(projected_s), 1),
        "spark_3_columns_s": round(min_s, 3),
        "ratio_3_columns_vs_codec_scan": round(codec_s / min_s, 3),
        "ratio_vs_codec_scan": round(ratio, 3),
        "ratio_audit_columns_vs_codec_scan": round(projected_ratio, 3),
        "ratio_vs_reader_one_process": round(reader_s / spark_s, 3),
        "goal_ratio": GOAL,
        "goal_met": ratio >= GOAL,
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
