"""Benchmark the ``commitlog`` Spark data source against Spark's floor (a source that reads
nothing) at the same rows and partitions, in interleaved rounds.

Run: ``.venv/bin/python bench/spark_scan.py [--rounds 7] [--ab BASE_TREE] [--scale 8]
[--size-mib 256] [--message-bytes 1024] [--master local[2]] [--full] [--dir bench/out/spark-scan]``

Two stores: ``--size-mib`` of records (1x) and ``--scale`` times that, with
``--message-bytes`` bodies (RocketMQ's 1 GiB commit log files, blank records at their ends),
written straight into the files as pre-encoded records and reused by later runs with the same
parameters. Every figure is **marginal**: the larger store's minus the 1x store's, so fixed
costs (Spark's job start-up and planning, the first batch) are not counted. All on the same
files, warm in the page cache:

- one process, no Spark (best of ``--repeat``): the native scan
  (``hanet.store.lowlevel.scan_index_windows``, CRCs and offsets checked) and the partition
  reader (``hanet.spark.commit_log_batches``) with the 12 columns ``hanet audit`` asks for
  (``AUDIT_COLUMNS``), wall-clock; and the reader's CPU time alone, measured in a process of
  this tree's Python (and of the ``--ab`` tree's).
- Spark (``count(*), sum(size)``), ``--rounds`` rounds; in each, every store's queries run
  interleaved, their order turning each round, so each sees the same load:
  ``source`` (format ``commitlog``, the audit's columns), ``base`` (with ``--ab DIR``: the
  same over the source of the tree at DIR, run by DIR's ``.venv/bin/python`` in Python workers
  of its own, each checking that it imported DIR's ``hanet``), ``floor`` (a Python data source
  that reads nothing: each of its partitions, as many as the source plans with as many rows,
  yields one Arrow batch of the audit's 12 columns, built once per Python worker from the
  store and sliced: what Spark does with those rows, the Python worker's Arrow stream, the
  JVM's ingestion and the aggregate), ``floor_frozen`` (the same floor, its workers settled
  as the commitlog source settles its own: ``gc.freeze`` once, so the ``gc.collect()``
  PySpark's daemon runs after every task skips the imported modules), and with ``--full``
  every column of the source. Each of them has its own Python workers (Spark keeps a daemon
  per Python and environment): what one query leaves in a worker does not change another's.
- Per query, besides wall-clock time, the CPU time of the JVM and of Spark's Python processes
  (daemons, workers, planners, and the ended ones their parents reaped: every process under
  this one, from ``/proc``, process by process; one gone meanwhile adds nothing): on a shared
  2-core machine wall-clock figures move 2x with the load, CPU time much less (the Python
  workers' steadily, the JVM's less so: compare medians). The larger store is 8x by default
  so that the marginal work (~1.6 M records) outweighs the noise of the queries' fixed costs.

Per round: each query's marginal wall and CPU seconds and its ratio to each floor (floor's
marginal / query's marginal: 100 % is as fast as reading nothing); a round where a marginal
(wall, JVM or Python) is <= 0 (a busy machine) is marked invalid and left out. Then the
median (lowest-highest) over the valid rounds and the goal: the source >= 80 % of the floor,
the medians of both its wall and its CPU ratio. A table for humans, then the last line is one
JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hanet.spark import AUDIT_COLUMNS, commit_log_batches, find_stores, plan_commit_log
from hanet.store import MessageRecord, encode_record
from hanet.store.lowlevel import (
    NATIVE_SCANNER,
    body_crc,
    encode_blank,
    file_name,
    scan_index_windows,
)

FILE_SIZE = 1024 * 1024 * 1024
DEFAULT_DIR = Path(__file__).resolve().parent / "out" / "spark-scan"
GOAL = 0.8
DEFAULT_BATCH_ROWS = 8192
"""The ``commitlog`` source's rows per Arrow batch (its ``batchRows`` option's default)."""


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


def native_scan(root: Path) -> tuple[int, float]:
    """(records, seconds) for the record index scanning every file in this process."""
    started = time.perf_counter()
    count = 0
    for path in sorted((root / "commitlog").iterdir()):
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapping:
            view = memoryview(mapping)
            for result in scan_index_windows(
                view, 0, None, int(path.name), check_physical_offset=True
            ):
                count += result.records
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


def canned_source(name: str = "hanet_bench_canned", freeze: bool = False) -> Any:
    """The floor's data source class (format ``name``): ``rows`` rows in ``parts`` partitions
    of the audit's columns, from one batch of the store at ``path`` (``batchRows`` rows, the
    source's default) built once per
    Python worker and sliced. ``freeze``: the reader also settles its worker as the commitlog
    source does (``hanet.spark.settle_worker``: ``gc.freeze`` once per process, so the
    collection after each task skips what is there)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from hanet.spark import commit_log_struct

    class CannedReader(DataSourceReader):
        def __init__(self, path: str, rows: int, parts: int, batch_rows: int) -> None:
            self.path, self.rows, self.parts, self.batch_rows = path, rows, parts, batch_rows

        def partitions(self) -> list[InputPartition]:
            share, extra = divmod(self.rows, self.parts)
            return [InputPartition(share + (i < extra)) for i in range(self.parts)]

        def read(self, partition: InputPartition) -> Any:
            import builtins

            from hanet.spark import settle_worker

            if freeze:
                settle_worker()
            # this class travels by value: a cache kept in it would be new in every task
            cache = builtins.__dict__.setdefault("_hanet_bench_canned", {})
            key = (self.path, self.batch_rows)
            if key not in cache:
                first = plan_commit_log(find_stores(self.path)[0], 1 << 30)[0]
                batches = commit_log_batches(
                    first, columns=AUDIT_COLUMNS, batch_rows=self.batch_rows
                )
                cache[key] = next(iter(batches))
            batch = cache[key]
            left = int(partition.value)
            while left > 0:
                n = min(left, batch.num_rows)
                yield batch if n == batch.num_rows else batch.slice(0, n)
                left -= n

    class CannedSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return name

        def schema(self) -> Any:
            return commit_log_struct(columns=AUDIT_COLUMNS)

        def reader(self, schema: Any) -> DataSourceReader:
            options = self.options
            return CannedReader(
                str(options["path"]),
                int(options["rows"]),
                int(options["parts"]),
                int(options.get("batchRows", DEFAULT_BATCH_ROWS)),
            )

    return CannedSource


def _proc_stats() -> dict[int, tuple[int, str, float, float]]:
    """Every process: pid -> (ppid, name, own CPU seconds, reaped children's CPU seconds)."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, str, float, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                data = f.read()
        except OSError:  # gone meanwhile
            continue
        name = data[data.index("(") + 1 : data.rindex(")")]
        fields = data[data.rindex(")") + 2 :].split()
        own = (int(fields[11]) + int(fields[12])) / tick
        reaped = (int(fields[13]) + int(fields[14])) / tick
        stats[int(entry)] = (int(fields[1]), name, own, reaped)
    return stats


def tree_cpu(root: int) -> dict[tuple[int, str], float]:
    """CPU seconds so far of each process under ``root`` (this process), by (pid, kind):
    ``jvm`` (a Java process's own), ``python`` (any other process under them: Spark's Python
    daemons, workers and planners; and every process's children that ended and were
    reaped), ``driver`` (``root`` itself). See :func:`cpu_spent`."""
    stats = _proc_stats()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    totals: dict[tuple[int, str], float] = {}
    if root in stats:
        totals[(root, "driver")] = stats[root][2]
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        _, name, own, reaped = stats[pid]
        totals[(pid, "jvm" if name == "java" else "python")] = own
        totals[(pid, "reaped")] = reaped
        todo.extend(children.get(pid, []))
    return totals


def cpu_spent(
    before: dict[tuple[int, str], float], after: dict[tuple[int, str], float]
) -> dict[str, float]:
    """CPU seconds spent between two :func:`tree_cpu` readings, by kind (reaped children count
    as ``python``). A process gone meanwhile adds nothing (a worker whose daemon ended is
    reparented out of the tree: subtracting its seconds would make the figure negative); one
    that came adds all of its seconds."""
    spent = {"jvm": 0.0, "python": 0.0, "driver": 0.0}
    for (pid, kind), seconds in after.items():
        spent["python" if kind == "reaped" else kind] += max(
            0.0, seconds - before.get((pid, kind), 0.0)
        )
    return spent


def base_source(base: Path) -> Any:
    """The ``commitlog`` source of the tree at ``base`` (``--ab``) as format
    ``commitlog_ab_base``: registered with that tree's Python (``spark_scan`` sets it), its
    planner and workers import that tree's ``hanet``, which each checks."""
    from pyspark.sql.datasource import DataSourceReader, InputPartition

    from hanet.spark import CommitLogDataSource

    expected = str(base.resolve())

    def check() -> None:
        import hanet

        where = str(Path(hanet.__file__).resolve())
        if not where.startswith(expected + os.sep):
            raise RuntimeError(f"--ab: a worker imported {where}, not the tree {expected}")

    class BaseReader(DataSourceReader):
        def __init__(self, inner: DataSourceReader) -> None:
            self.inner = inner

        def partitions(self) -> Any:
            check()
            return self.inner.partitions()

        def read(self, partition: InputPartition) -> Any:
            check()
            return self.inner.read(partition)

    class BaseCommitLog(CommitLogDataSource):
        @classmethod
        def name(cls) -> str:
            return "commitlog_ab_base"

        def reader(self, schema: Any) -> DataSourceReader:
            check()
            return BaseReader(super().reader(schema))

    return BaseCommitLog


_READER_CPU = """
import json, sys, time
from hanet.spark import AUDIT_COLUMNS, commit_log_batches, find_stores, plan_commit_log
seconds = {}
for key, root in json.loads(sys.argv[1]).items():
    best = None
    for _ in range(int(sys.argv[3])):
        started = time.process_time()
        for part in plan_commit_log(find_stores(root)[0], int(sys.argv[2])):
            for batch in commit_log_batches(part, columns=AUDIT_COLUMNS):
                pass
        spent = time.process_time() - started
        best = spent if best is None else min(best, spent)
    seconds[key] = best
print(json.dumps(seconds))
"""


def reader_cpu(
    python: str, roots: dict[str, Path], max_range: int, repeat: int
) -> dict[str, float]:
    """The reader's CPU seconds (best of ``repeat``) over each store, the audit's columns, in a
    process of ``python`` (its tree's ``hanet``; not the working directory's)."""
    arg = json.dumps({key: str(root) for key, root in roots.items()})
    out = subprocess.run(
        [python, "-P", "-c", _READER_CPU, arg, str(max_range), str(repeat)],
        check=True,
        capture_output=True,
        text=True,
        cwd="/",
    ).stdout
    return {key: float(value) for key, value in json.loads(out.splitlines()[-1]).items()}


def spark_rounds(
    roots: dict[str, Path],
    warm_root: Path,
    master: str,
    max_range: int,
    rounds: int,
    records: dict[str, int],
    base: Path | None,
    full: bool,
    batch_rows: int,
) -> dict[str, Any]:
    """``rounds`` rounds of the Spark queries; in each, every store's queries run interleaved
    (their order turns each round). Per query: wall-clock seconds and the CPU seconds of the
    JVM and of Spark's Python processes (``tree_cpu``)."""
    from pyspark.sql import functions as F

    from hanet.spark import describe, spark_session

    started = time.perf_counter()
    spark = spark_session(master, config={"spark.ui.enabled": "false"})
    start_up = time.perf_counter() - started
    banner = describe(spark)
    me = os.getpid()

    def load(fmt: str, columns: tuple[str, ...] | None, path: Path) -> Any:
        reader = spark.read.format(fmt).option("maxPartitionBytes", str(max_range))
        reader = reader.option("batchRows", str(batch_rows))
        if columns:
            reader = reader.option("columns", ",".join(columns))
        return reader.load(str(path))

    def timed(df: Any) -> dict[str, float]:
        before = tree_cpu(me)
        started = time.perf_counter()
        row = df.agg(F.count("*").alias("rows"), F.sum("size").alias("bytes")).first()
        wall = time.perf_counter() - started
        after = tree_cpu(me)
        figures = cpu_spent(before, after)
        figures.update(rows=row["rows"], wall=wall)
        return figures

    def canned(fmt: str, root: Path, rows: int, parts: int) -> Any:
        reader = spark.read.format(fmt).option("rows", str(rows))
        reader = reader.option("batchRows", str(batch_rows))
        return reader.option("parts", str(parts)).load(str(root))

    def register(source: Any, pool: str, python: str | None = None) -> None:
        """Register ``source`` with Python workers of its own (Spark keeps one daemon and
        its workers per Python and environment): one query's workers are not another's."""
        sc = spark.sparkContext
        saved = sc.pythonExec, dict(sc.environment)
        sc.environment["HANET_BENCH_POOL"] = pool
        if python is not None:
            # the base tree's workers: its Python, and not the working directory's hanet
            sc.pythonExec = python
            sc.environment["PYTHONSAFEPATH"] = "1"
        try:
            spark.dataSource.register(source)
        finally:
            sc.pythonExec = saved[0]
            sc.environment.clear()
            sc.environment.update(saved[1])

    figures: dict[str, Any] = {"banner": banner, "start_up_s": start_up}
    try:
        floors = {"floor": "hanet_bench_floor", "floor_frozen": "hanet_bench_floor_frozen"}
        for key, fmt in floors.items():
            register(canned_source(fmt, freeze=key == "floor_frozen"), key)
        formats: dict[str, tuple[str, tuple[str, ...] | None]] = {
            "source": ("commitlog", AUDIT_COLUMNS)
        }
        if base is not None:
            register(base_source(base), "base", str(base / ".venv" / "bin" / "python"))
            formats["base"] = ("commitlog_ab_base", AUDIT_COLUMNS)
        if full:
            formats["full"] = ("commitlog", None)
        started = time.perf_counter()
        for fmt, columns in formats.values():
            timed(load(fmt, columns, warm_root))
        for fmt in floors.values():
            timed(canned(fmt, roots["1x"], 10_000, 4))
        figures["warm_up_s"] = time.perf_counter() - started
        frames: dict[str, dict[str, Any]] = {}
        for size, root in roots.items():
            frames[size] = {key: load(fmt, cols, root) for key, (fmt, cols) in formats.items()}
            parts = frames[size]["source"].rdd.getNumPartitions()
            figures[f"partitions_{size}"] = parts
            for key, fmt in floors.items():
                frames[size][key] = canned(fmt, root, records[size], parts)
        keys = list(frames["1x"])
        runs: list[dict[str, dict[str, dict[str, float]]]] = []
        for number in range(rounds):
            order = keys[number % len(keys) :] + keys[: number % len(keys)]
            this: dict[str, dict[str, dict[str, float]]] = {}
            for size in roots:
                this[size] = {}
                for key in order:
                    this[size][key] = timed(frames[size][key])
                    assert this[size][key]["rows"] == records[size], (key, size, this[size])
            this["load"] = {"avg1": os.getloadavg()[0]}  # type: ignore[dict-item]
            runs.append(this)
            print(f"round {number + 1}/{rounds} done, load {os.getloadavg()[0]:.1f}", flush=True)
        figures["runs"] = runs
        figures["keys"] = keys
    finally:
        spark.stop()
    return figures


def spread(values: list[float]) -> dict[str, float]:
    """Median, lowest and highest of ``values``."""
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), 3) if ordered else float("nan"),
        "min": round(ordered[0], 3) if ordered else float("nan"),
        "max": round(ordered[-1], 3) if ordered else float("nan"),
    }


def _fmt(figures: dict[str, float], percent: bool = False) -> str:
    if percent:
        return f"{figures['median']:.0%} ({figures['min']:.0%}-{figures['max']:.0%})"
    return f"{figures['median']:.3f} ({figures['min']:.3f}-{figures['max']:.3f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=256, help="1x data size (256)")
    parser.add_argument("--scale", type=int, default=8, help="the larger store's size (8: 8x)")
    parser.add_argument("--message-bytes", type=int, default=1024, help="body size (1024)")
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    parser.add_argument("--max-partition-mib", type=int, default=128, help="range size (128)")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="store directory")
    parser.add_argument("--repeat", type=int, default=2, help="one-process scans, best kept (2)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of Spark queries (7)")
    parser.add_argument("--full", action="store_true", help="also every column (23)")
    parser.add_argument(
        "--batch-rows",
        type=int,
        default=DEFAULT_BATCH_ROWS,
        help=f"rows per Arrow batch, the sources' and the floors' ({DEFAULT_BATCH_ROWS})",
    )
    parser.add_argument(
        "--ab", type=Path, help="a tree (its own .venv, extensions built) whose source runs beside"
    )
    args = parser.parse_args(argv)
    max_range = args.max_partition_mib * 1024 * 1024
    if args.ab is not None and not (args.ab / ".venv" / "bin" / "python").exists():
        parser.error(f"--ab {args.ab}: no .venv/bin/python there (make install)")

    started = time.perf_counter()
    big = f"{args.scale}x"
    roots = {"1x": args.dir / "1x", big: args.dir / big}
    stores = {
        key: generate(root, scale * args.size_mib * 1024 * 1024, args.message_bytes, FILE_SIZE)
        for (key, root), scale in zip(roots.items(), (1, args.scale), strict=True)
    }
    generated_s = time.perf_counter() - started
    warm_root = args.dir / "warm-up"
    generate(warm_root, 1 << 20, args.message_bytes, 1 << 18)  # 4 files: both workers start

    seconds: dict[str, float] = {}
    for key, root in roots.items():
        records, seconds[f"native_{key}"] = best(args.repeat, lambda root=root: native_scan(root))
        assert records == stores[key]["records"], (records, stores[key])
        rows, _, seconds[f"reader_{key}"] = best(
            args.repeat, lambda root=root: reader_scan(root, max_range, AUDIT_COLUMNS)
        )
        assert rows == records
    cpu = {"source": reader_cpu(sys.executable, roots, max_range, args.repeat)}
    if args.ab is not None:
        cpu["base"] = reader_cpu(str(args.ab / ".venv" / "bin" / "python"), roots, max_range, 2)
    records_of = {key: int(store["records"]) for key, store in stores.items()}
    spark = spark_rounds(
        roots,
        warm_root,
        args.master,
        max_range,
        args.rounds,
        records_of,
        args.ab,
        args.full,
        args.batch_rows,
    )
    data = stores[big]["data_bytes"] - stores["1x"]["data_bytes"]
    records = stores[big]["records"] - stores["1x"]["records"]
    baseline = max(seconds[f"native_{big}"] - seconds["native_1x"], 1e-9)
    reader = max(seconds[f"reader_{big}"] - seconds["reader_1x"], 1e-9)

    print(spark["banner"])
    print(
        f"stores: {args.dir} (1x {stores['1x']['data_bytes'] / 2**20:.0f} MiB, {big} "
        f"{stores[big]['data_bytes'] / 2**20:.0f} MiB; records of {stores['1x']['record_size']} "
        f"bytes; ready in {generated_s:.1f} s); native scanner: {NATIVE_SCANNER}; "
        f"{spark['partitions_1x']} and {spark[f'partitions_{big}']} partitions"
    )
    print(
        f"one process, marginal ({big} - 1x, {records:,} records, best of {args.repeat}): native "
        f"scan {baseline:.3f} s, reader (audit's columns) {reader:.3f} s"
    )
    for key, figures in cpu.items():
        m = figures[big] - figures["1x"]
        print(f"  reader CPU ({key}): {m:.3f} s marginal, {m / records * 1e9:.0f} ns a record")
    print(
        f"Spark session start-up {spark['start_up_s']:.1f} s, warm-up {spark['warm_up_s']:.1f} s "
        "(not counted)"
    )
    keys: list[str] = spark["keys"]
    floors = [key for key in keys if key.startswith("floor")]
    print(
        "per round, marginal seconds: wall | CPU jvm + python; (floor / query: wall, CPU; "
        "then floor_frozen / query)"
    )
    metrics = ["wall", "jvm", "python", "cpu"]
    for floor in floors:
        metrics += [f"vs_{floor}", f"vs_{floor}_cpu"]
    per_key: dict[str, dict[str, list[float]]] = {key: {m: [] for m in metrics} for key in keys}
    valid_rounds = 0
    for number, run in enumerate(spark["runs"], 1):
        marg = {
            key: {m: run[big][key][m] - run["1x"][key][m] for m in ("wall", "jvm", "python")}
            for key in keys
        }
        for margins in marg.values():
            margins["cpu"] = margins["jvm"] + margins["python"]
        valid = all(v[m] > 0 for v in marg.values() for m in ("wall", "jvm", "python"))
        parts = []
        for key in keys:
            q = marg[key]
            line = f"{key} {q['wall']:.2f} | {q['jvm']:.2f}+{q['python']:.2f}"
            if key not in floors and valid:
                ratios = []
                for floor in floors:
                    q[f"vs_{floor}"] = marg[floor]["wall"] / q["wall"]
                    q[f"vs_{floor}_cpu"] = marg[floor]["cpu"] / q["cpu"]
                    ratios.append(f"{q[f'vs_{floor}']:.0%}, {q[f'vs_{floor}_cpu']:.0%}")
                line += " (" + "; ".join(ratios) + ")"
            parts.append(line)
        flag = "" if valid else "  INVALID (a marginal <= 0: too busy)"
        print(f"round {number} load {run['load']['avg1']:.1f}: " + "; ".join(parts) + flag)
        if valid:
            valid_rounds += 1
            for key in keys:
                for metric, value in marg[key].items():
                    per_key[key][metric].append(value)
    summary = {key: {m: spread(v) for m, v in ms.items() if v} for key, ms in per_key.items()}
    print(f"median (lowest-highest) over {valid_rounds} valid rounds of {len(spark['runs'])}:")
    for key in keys:
        s = summary[key]
        if not s:
            continue
        print(
            f"  {key:12} wall {_fmt(s['wall'])} s; CPU jvm {_fmt(s['jvm'])} s + python "
            f"{_fmt(s['python'])} s"
        )
        for floor in floors:
            if f"vs_{floor}" in s:
                # also the ratio of the medians: each round's ratio divides two noisy figures
                of_medians = {
                    m: summary[floor][m]["median"] / s[m]["median"] for m in ("wall", "cpu")
                }
                s[f"vs_{floor}"]["of_medians"] = round(of_medians["wall"], 3)
                s[f"vs_{floor}_cpu"]["of_medians"] = round(of_medians["cpu"], 3)
                print(
                    f"  {'':12} vs {floor}: wall {_fmt(s[f'vs_{floor}'], True)}, CPU "
                    f"{_fmt(s[f'vs_{floor}_cpu'], True)}; ratio of the medians: wall "
                    f"{of_medians['wall']:.0%}, CPU {of_medians['cpu']:.0%}"
                )
    goal_met = False
    if summary["source"].get("vs_floor"):
        ratio = summary["source"]["vs_floor"]
        cpu_ratio = summary["source"]["vs_floor_cpu"]
        goal_met = ratio["median"] >= GOAL and cpu_ratio["median"] >= GOAL
        print(
            f"goal: the source >= {GOAL:.0%} of the floor (medians of the rounds, wall and CPU): "
            f"wall {ratio['median']:.0%}, CPU {cpu_ratio['median']:.0%} "
            f"({'met' if goal_met else 'not met'})"
        )
        for floor in floors:
            gap = summary["source"]["python"]["median"] - summary[floor]["python"]["median"]
            jvm_gap = summary["source"]["jvm"]["median"] - summary[floor]["jvm"]["median"]
            print(
                f"  the source's CPU over {floor} (medians): python {gap:+.3f} s, jvm "
                f"{jvm_gap:+.3f} s for {records:,} marginal records"
            )
    result: dict[str, Any] = {
        "bench": "spark_scan",
        "master": args.master,
        "cores": os.cpu_count(),
        "native_scanner": NATIVE_SCANNER,
        "record_bytes": stores["1x"]["record_size"],
        "scale": args.scale,
        "marginal_bytes": data,
        "marginal_records": records,
        "partitions": [spark["partitions_1x"], spark[f"partitions_{big}"]],
        "native_marginal_s": round(baseline, 4),
        "reader_marginal_s": round(reader, 4),
        "reader_cpu_marginal_s": {
            key: round(figures[big] - figures["1x"], 4) for key, figures in cpu.items()
        },
        "spark_start_up_s": round(spark["start_up_s"], 2),
        "rounds": len(spark["runs"]),
        "valid_rounds": valid_rounds,
        "load_avg1": [round(run["load"]["avg1"], 2) for run in spark["runs"]],
        "per_round": {
            key: {m: [round(v, 3) for v in values] for m, values in ms.items()}
            for key, ms in per_key.items()
        },
        "summary": summary,
        "goal_source_vs_floor": GOAL,
        "goal_met": goal_met,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
