"""Tests of the Spark data sources and jobs on one local[2] session for the whole module.

Stores are written with the store's put API (and, for slaves, its raw appends); corruption is
made by editing the closed files.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import struct
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

import attrs
import pytest

from hanet.store import (
    CommitLogStore,
    Message,
    MessageRecord,
    StoreConfig,
    StoreRole,
    encode_record,
)
from hanet.store.lowlevel import CQ_ENTRY_SIZE, file_name, java_string_hash

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from hanet.cli import main
from hanet.spark import (
    QUICK_SQL_SETTINGS,
    audit,
    diff,
    java_string_hash_column,
    spark_session,
    stats,
)

pytestmark = pytest.mark.spark

FIXTURE = Path(__file__).parent / "fixtures" / "rocketmq-store-8k"  # a real RocketMQ broker's
FILE = 8192
# a small index: the tests copy stores, and a copy writes out every byte of an index file
CONFIG = StoreConfig(
    mapped_file_size=FILE, consume_queue_file_size=400, max_hash_slot_num=1024, max_index_num=4096
)
SLAVE = attrs.evolve(CONFIG, role=StoreRole.SLAVE)
TOPICS = ("Orders", "Payments", "Audit")


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = spark_session(
        "local[2]",
        config={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
    )
    yield session
    session.stop()


@contextlib.contextmanager
def session_settings(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """``settings`` set on the session for the block (the earlier values back after it)."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, earlier in before.items():
            if earlier is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, earlier)


def put_messages(root: Path, count: int, *, seed: int = 0) -> Counter[tuple[str, int]]:
    """Put ``count`` messages over three topics and up to three queues each; returns how many
    went to each (topic, queue)."""
    put: Counter[tuple[str, int]] = Counter()
    with CommitLogStore.open(root, CONFIG) as store:
        for i in range(count):
            topic = TOPICS[(i + seed) % 3]
            queue_id = i * 7 % (3 if topic == "Orders" else 2)
            body = bytes([i % 256]) * (40 + i * 37 % 300)
            properties = {"TAGS": f"tag{i % 4}", "KEYS": f"k{i}"} if i % 5 else {}
            message = Message(
                topic,
                body,
                queue_id=queue_id,
                properties=properties,
                born_timestamp=1_700_000_000_000 + i,
            )
            assert store.put(message).ok
            put[topic, queue_id] += 1
    return put


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Counter[tuple[str, int]]]:
    root = tmp_path_factory.mktemp("generated") / "store"
    return root, put_messages(root, 200)


def replicate(master: Path, slave: Path, end: int) -> None:
    """A slave store holding the master's commit log bytes up to ``end``."""
    with CommitLogStore.open(master, CONFIG) as source, CommitLogStore.open(slave, SLAVE) as dst:
        offset = 0
        while offset < end:
            data = source.read(offset, min(1000, end - offset))
            dst.append_raw(offset, data)
            offset += len(data)
        assert dst.dispatch_error is None


def record_offsets(root: Path) -> list[tuple[int, int]]:
    """(physical offset, size) of every record of a store, from the store's own reader."""
    from hanet.store import CommitLogReader

    return [(o, r.size) for o, r in CommitLogReader(root / "commitlog").records()]


def test_fixture_is_47_good_records_of_one_store(spark: SparkSession) -> None:
    df = spark.read.format("commitlog").load(str(FIXTURE))
    rows = df.orderBy("physical_offset").collect()
    assert len(rows) == 47
    assert {r["store"] for r in rows} == {str(FIXTURE)}
    assert all(r["status"] == "ok" and r["crc_ok"] for r in rows)
    assert [r["physical_offset"] for r in rows] == [172 * i for i in range(47)]
    assert [r["queue_offset"] for r in rows] == list(range(47))
    assert rows[2]["msg_id"] == "C0A8470100001FBB0000000000000158"
    assert rows[2]["properties"]["TAGS"] == rows[2]["tags"] == "TAG1"
    assert "body" not in df.columns
    bodies = spark.read.format("commitlog").option("includeBody", "true").load(str(FIXTURE))
    body = bodies.where(F.col("physical_offset") == 344).select("body").first()
    assert body is not None
    assert bytes(body["body"]) == b"Once, there was a chance for me!"


_PURE_PYTHON_READ = """
import json, sys
from hanet.spark import spark_session
from hanet.store.lowlevel import NATIVE_SCANNER
spark = spark_session("local[1]", config={"spark.ui.enabled": "false"})
try:
    workers = spark.sparkContext.parallelize([0], 1).map(
        lambda _: __import__("hanet.store.lowlevel").store.lowlevel.NATIVE_SCANNER
    ).collect()
    df = spark.read.format("commitlog").option("includeBody", "true").load(sys.argv[1])
    rows = [r.asDict() for r in df.orderBy("physical_offset").collect()]
    for r in rows:
        r["body"] = bytes(r["body"]).hex()
    print(json.dumps({"native": [NATIVE_SCANNER, *workers], "rows": rows}, sort_keys=True))
finally:
    spark.stop()
"""


def test_the_source_gives_the_same_rows_with_the_pure_python_scanner(
    spark: SparkSession,
) -> None:
    """``HANET_NO_EXTENSIONS=1`` (inherited by Spark's Python workers) reads the same rows."""
    import os
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _PURE_PYTHON_READ, str(FIXTURE)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HANET_NO_EXTENSIONS": "1"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["native"] == [False, False]
    df = spark.read.format("commitlog").option("includeBody", "true").load(str(FIXTURE))
    rows = [r.asDict() for r in df.orderBy("physical_offset").collect()]
    for r in rows:
        r["body"] = bytes(r["body"]).hex()
    assert len(rows) == 47
    assert json.loads(json.dumps(rows, sort_keys=True)) == found["rows"]


def test_generated_store_counts_per_queue(
    spark: SparkSession, generated: tuple[Path, Counter[tuple[str, int]]]
) -> None:
    root, put = generated
    files = sorted((root / "commitlog").iterdir())
    assert len(files) >= 4
    df = spark.read.format("commitlog").load(str(root))
    assert df.rdd.getNumPartitions() == len(files)  # one partition per file
    counts = {
        (r["topic"], r["queue_id"]): r["count"]
        for r in df.where("status = 'ok'").groupBy("topic", "queue_id").count().collect()
    }
    assert counts == dict(put)
    assert df.where("status != 'ok'").count() == 0
    split = spark.read.format("commitlog").option("maxPartitionBytes", "1000").load(str(root))
    assert split.rdd.getNumPartitions() > len(files)
    assert sorted(split.select("physical_offset").collect()) == sorted(
        df.select("physical_offset").collect()
    )
    cq = spark.read.format("consumequeue").load(str(root / "commitlog"))
    assert cq.count() == sum(put.values())
    joined = cq.join(df, ["topic", "queue_id", "queue_offset", "physical_offset", "size"])
    assert joined.count() == sum(put.values())


def test_audit_of_a_good_store(
    spark: SparkSession, generated: tuple[Path, Counter[tuple[str, int]]]
) -> None:
    root, put = generated
    result = audit(spark, [str(root), str(FIXTURE)])
    try:
        assert result.problems.count() == 0
        stores = {r["store"]: r for r in result.stores.collect()}
        assert stores[str(root)]["messages"] == sum(put.values())
        assert stores[str(root)]["files"] == len(list((root / "commitlog").iterdir()))
        assert stores[str(FIXTURE)]["messages"] == 47
        assert stores[str(FIXTURE)]["end_offset"] == 8084
        queues = {
            (r["topic"], r["queue_id"]): (r["messages"], r["first_queue_offset"])
            for r in result.queues.where(F.col("store") == str(root)).collect()
        }
        assert queues == {key: (n, 0) for key, n in put.items()}
    finally:
        result.unpersist()


def test_flipped_bytes_give_a_corrupt_row_and_a_crc_failure(
    spark: SparkSession, generated: tuple[Path, Counter[tuple[str, int]]], tmp_path: Path
) -> None:
    root = tmp_path / "store"
    shutil.copytree(generated[0], root)
    records = record_offsets(root)
    in_second_file = [o for o, _ in records if FILE <= o < 2 * FILE]
    bad_header, bad_body = in_second_file[3], in_second_file[1]
    path = root / "commitlog" / file_name(FILE)
    data = bytearray(path.read_bytes())
    data[bad_header - FILE + 4] ^= 0xFF  # magic code
    data[bad_body - FILE + 100] ^= 0x01  # inside the body
    path.write_bytes(bytes(data))
    df = spark.read.format("commitlog").load(str(root))
    second = df.where(F.col("file") == file_name(FILE)).orderBy("physical_offset").collect()
    assert [r["physical_offset"] for r in second] == in_second_file[:4]
    assert [r["status"] for r in second] == ["ok", "ok", "ok", "corrupt"]
    assert [r["crc_ok"] for r in second[:3]] == [True, False, True]
    assert "magic" in second[3]["error"]
    # the other files are read in full
    assert df.where("status = 'ok'").count() == len(records) - (len(in_second_file) - 3)
    result = audit(spark, str(root))
    try:
        problems = {(r["kind"], r["physical_offset"]) for r in result.problems.collect()}
        assert ("corrupt", bad_header) in problems
        assert ("crc", bad_body) in problems
        # the records after the corrupt one are missing from the scan, not from the queues
        assert any(kind == "cq_extra" for kind, _ in problems)
    finally:
        result.unpersist()


def test_consume_queue_mismatch_is_found(
    spark: SparkSession, generated: tuple[Path, Counter[tuple[str, int]]], tmp_path: Path
) -> None:
    root = tmp_path / "store"
    shutil.copytree(generated[0], root)
    queue_file = root / "consumequeue" / "Orders" / "0" / file_name(0)
    data = bytearray(queue_file.read_bytes())
    offset_of_5, size_of_5, _ = struct.unpack_from(">qiq", data, 5 * CQ_ENTRY_SIZE)
    struct.pack_into(">i", data, 5 * CQ_ENTRY_SIZE + 8, size_of_5 + 1)
    struct.pack_into(">q", data, 7 * CQ_ENTRY_SIZE + 12, 12345)  # tag hash of entry 7
    queue_file.write_bytes(bytes(data))
    result = audit(spark, str(root))
    try:
        problems = result.problems.collect()
        found = {(r["kind"], r["topic"], r["queue_id"], r["queue_offset"]) for r in problems}
        assert found == {
            ("cq_mismatch", "Orders", 0, 5),
            ("cq_mismatch", "Orders", 0, 7),
        }
        assert problems[0]["physical_offset"] == offset_of_5
        assert f"size {size_of_5 + 1}" in problems[0]["detail"]
        (store,) = result.stores.collect()
        assert (store["cq_mismatch"], store["problems"]) == (2, 2)
    finally:
        result.unpersist()


def test_slave_prefix_verdict(
    spark: SparkSession, generated: tuple[Path, Counter[tuple[str, int]]], tmp_path: Path
) -> None:
    master = generated[0]
    records = record_offsets(master)
    end = sum(records[120])  # a record boundary in the middle of a file
    replicate(master, tmp_path / "slave", end)
    result = diff(spark, str(master), str(tmp_path / "slave"))
    try:
        summary = result.summary
        assert summary.first_difference is None
        assert summary.slave_end == end
        assert summary.verdict.startswith(
            f"slave is a byte-identical prefix of the master up to {end} "
            f"({len(records) - 121} records"
        )
        ranges = [(r["side"], r["start"], r["end"]) for r in result.ranges.collect()]
        assert ranges == [("master", end, sum(records[-1]))]
    finally:
        result.unpersist()
    same = diff(spark, str(master), str(master))
    assert same.summary.verdict.startswith("slave is byte-identical to the master")
    same.unpersist()


def test_slave_divergence_is_found(
    spark: SparkSession,
    generated: tuple[Path, Counter[tuple[str, int]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    master = generated[0]
    records = record_offsets(master)
    at, size = records[77]
    replicate(master, tmp_path / "slave", at)
    with CommitLogStore.open(master, CONFIG) as source:
        original = source.read_record(at)
    other = MessageRecord.create(
        topic=original.topic,
        body=b"something else entirely"[: len(original.body)].ljust(len(original.body), b"!"),
        queue_id=original.queue_id,
        queue_offset=original.queue_offset,
        physical_offset=at,
        born_timestamp=original.born_timestamp,
        store_timestamp=original.store_timestamp,
        store_host=original.store_host,
        store_port=original.store_port,
        properties=original.properties,  # the whole-record CRC property made again, sealed
        crc32=True,
    )
    assert other.size == size
    with CommitLogStore.open(tmp_path / "slave", SLAVE) as slave:
        slave.append_raw(at, encode_record(other, seal=True))
    result = diff(spark, str(master), str(tmp_path / "slave"))
    try:
        assert result.summary.first_difference == at
        # another body: its CRC (at +8, before the body) is the first byte that differs
        byte = result.summary.first_diff_offset
        assert byte is not None and at + 8 <= byte < at + 12
        assert result.summary.first_diff_field == "body_crc"
        assert result.summary.verdict == (
            f"slave diverges from the master at {at}: the records there differ, "
            f"first at byte {byte} (body_crc)"
        )
        (row,) = result.records.where("kind = 'differs'").collect()
        assert (row["physical_offset"], row["master_size"], row["slave_size"]) == (at, size, size)
        assert row["master_body_crc"] != row["slave_body_crc"]
        assert (row["first_diff_offset"], row["first_diff_field"]) == (byte, "body_crc")
        # the whole-record CRC property (in the properties) differs with the body
        assert row["differing_fields"] == "body_crc,body,properties"
        one_sided = result.records.where("kind != 'differs'").collect()
        assert one_sided and all(r["first_diff_offset"] is None for r in one_sided)
    finally:
        result.unpersist()
    out = tmp_path / "out"
    argv = ["diff", str(master), str(tmp_path / "slave"), "--json", "--out", str(out)]
    status, lines = run_cli(capsys, *argv, "--format", "json")
    assert status == 1
    report = json.loads("\n".join(lines))
    assert (report["command"], report["ok"], report["first_difference"]) == ("diff", False, at)
    assert (report["first_diff_offset"], report["first_diff_field"]) == (byte, "body_crc")
    assert report["verdict"] == result.summary.verdict
    (differs,) = [r for r in report["records"] if r["kind"] == "differs"]
    assert differs["first_diff_field"] == "body_crc"
    assert differs["differing_fields"] == "body_crc,body,properties"
    assert report["ranges"] == [  # the record at `at` is on both sides (it differs)
        {
            "side": "master",
            "start": at + size,
            "end": sum(records[-1]),
            "records": len(records) - 78,
        }
    ]
    assert json.loads((out / "records.json").read_text()) == report["records"]
    assert json.loads((out / "summary.json").read_text())["verdict"] == report["verdict"]


def test_stats_counts_each_store_on_its_own(
    spark: SparkSession, generated: tuple[Path, Counter[tuple[str, int]]], tmp_path: Path
) -> None:
    root, put = generated
    copy = tmp_path / "slave"
    shutil.copytree(root, copy)  # a slave holding the same records: counted for itself
    result = stats(spark, [str(root), str(copy)], top=3)
    try:
        per_minute = result.per_minute.collect()
        for store in (str(root), str(copy)):
            mine = [r for r in per_minute if r["store"] == store]
            assert sum(r["messages"] for r in mine) == sum(put.values())
            assert {r["topic"] for r in mine} == set(TOPICS)
        latency = {(r["store"], r["topic"]): r for r in result.latency.collect()}
        assert len(latency) == 2 * len(TOPICS)
        assert sum(r["messages"] for r in latency.values()) == 2 * sum(put.values())
        assert all(0 < r["p50_ms"] <= r["p99_ms"] <= r["max_ms"] for r in latency.values())
        largest = result.largest.collect()
        assert len(largest) == 3
        assert largest[0]["size"] == max(s for _, s in record_offsets(root))
    finally:
        result.unpersist()


def test_java_string_hash_in_spark(spark: SparkSession) -> None:
    texts = ["TagA", "", "tag with spaces", "ü-ñ", "日本語", "emoji 🎉", "x" * 40]
    df = spark.createDataFrame([(t,) for t in texts] + [(None,)], "t string")
    got = [r["h"] for r in df.select(java_string_hash_column(F.col("t")).alias("h")).collect()]
    assert got == [java_string_hash(t) if t else 0 for t in texts] + [0]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    status = main(list(argv))
    return status, capsys.readouterr().out.splitlines()


def test_cli_audit_writes_tables(
    spark: SparkSession,
    generated: tuple[Path, Counter[tuple[str, int]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, put = generated
    out = tmp_path / "out"
    status, lines = run_cli(capsys, "audit", str(root), "--out", str(out), "--format", "csv")
    assert status == 0
    assert lines[0].startswith("Spark 4.") and "with 2 cores" in lines[0]
    assert lines[-2] == (
        f"{root}: {sum(put.values())} messages, "
        f"{sum(s for _, s in record_offsets(root))} bytes in "
        f"{len(list((root / 'commitlog').iterdir()))} files, no problems"
    )
    assert lines[-1].startswith("audit took ")
    queues = list((out / "queues").glob("*.csv"))
    assert queues
    assert sum(len(p.read_text().splitlines()) - 1 for p in queues) == len(put)
    assert SparkSession.getActiveSession() is spark


def test_cli_diff_and_stats(
    spark: SparkSession,
    generated: tuple[Path, Counter[tuple[str, int]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    master = generated[0]
    end = sum(record_offsets(master)[50])
    replicate(master, tmp_path / "slave", end)
    status, lines = run_cli(capsys, "diff", str(master), str(tmp_path / "slave"))
    assert status == 0
    assert lines[-2].startswith(f"slave is a byte-identical prefix of the master up to {end}")
    status, lines = run_cli(capsys, "stats", str(master), "--top", "2", "--limit", "5")
    assert status == 0
    text = "\n".join(lines)
    assert "largest messages (2 rows" in text
    assert "p99_ms" in text
    status, lines = run_cli(capsys, "audit", str(FIXTURE / "commitlog"), "--no-consume-queues")
    assert status == 0
    assert f"{FIXTURE / 'commitlog'}: 47 messages, 8084 bytes in 1 file, no problems" in lines
    status, lines = run_cli(capsys, "audit", str(FIXTURE), "--json", "--limit", "1")
    assert status == 0
    report = json.loads("\n".join(lines))
    assert (report["command"], report["ok"], report["problem_count"]) == ("audit", True, 0)
    assert report["verdicts"] == [f"{FIXTURE}: 47 messages, 8084 bytes in 1 file, no problems"]
    (store,) = report["stores"]
    assert (store["store"], store["messages"], store["crc"]) == (str(FIXTURE), 47, 0)
    assert len(report["queues"]) == 1 and report["problems"] == []


def test_jobs_give_the_same_tables_read_in_the_driver_or_by_the_executors(
    spark: SparkSession, generated: tuple[Path, Counter[tuple[str, int]]], tmp_path: Path
) -> None:
    root = tmp_path / "store"
    shutil.copytree(generated[0], root)
    path = root / "commitlog" / file_name(FILE)
    data = bytearray(path.read_bytes())
    data[500] ^= 0xFF  # somewhere in the second file: a corrupt row or a CRC failure
    path.write_bytes(bytes(data))
    stores = [str(root), str(FIXTURE)]
    tables = []
    for driver_rows in (0, 100_000):
        # read in the driver, the jobs run as hanet's quick sessions run them (interpreted)
        settings = QUICK_SQL_SETTINGS if driver_rows else {}
        with session_settings(spark, settings):
            result = audit(spark, stores, driver_rows=driver_rows)
            counted = stats(spark, stores, driver_rows=driver_rows)
            try:
                tables.append(
                    (
                        result.rows,
                        result.stores.collect(),
                        result.queues.collect(),
                        result.problems.collect(),
                        counted.per_minute.collect(),
                        counted.latency.collect(),
                        counted.largest.collect(),
                    )
                )
            finally:
                result.unpersist()
                counted.unpersist()
    by_executors, in_driver = tables
    assert in_driver == by_executors
    assert {row["kind"] for row in in_driver[3]} & {"corrupt", "crc"}
    first = diff(spark, str(generated[0]), str(root), driver_rows=0)
    with session_settings(spark, QUICK_SQL_SETTINGS):
        second = diff(spark, str(generated[0]), str(root))
        second_records = second.records.collect()
    try:
        assert first.summary == second.summary
        assert first.records.collect() == second_records
    finally:
        first.unpersist()
        second.unpersist()


def test_reused_python_workers_are_settled_from_their_second_task(
    spark: SparkSession, generated: tuple[Path, Counter[tuple[str, int]]]
) -> None:
    """Spark reuses its Python workers and collects garbage after each of their tasks; the
    commitlog reader freezes a worker's objects at its second task (hanet.spark.settle_worker),
    so those collections skip them: a probe source run next in the same workers sees it."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class ProbeReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(4)]

        def read(self, partition: InputPartition) -> Iterator[tuple[int, int, int]]:
            import gc
            import os

            from hanet.spark import worker_tasks

            yield os.getpid(), worker_tasks(), gc.get_freeze_count()

    class Probe(DataSource):
        @classmethod
        def name(cls) -> str:
            return "hanet_test_gc_probe"

        def schema(self) -> str:
            return "pid int, tasks int, frozen int"

        def reader(self, schema: object) -> DataSourceReader:
            return ProbeReader()

    root, put = generated
    frame = spark.read.format("commitlog").option("columns", "size").load(str(root))
    assert frame.rdd.getNumPartitions() >= 8
    assert frame.count() == sum(put.values())
    spark.dataSource.register(Probe)
    workers = {row.pid: row for row in spark.read.format("hanet_test_gc_probe").load().collect()}
    settled = [row for row in workers.values() if row.tasks >= 2]
    assert settled, workers  # a worker that read two partitions or more
    assert all(row.frozen > 1000 for row in settled), workers
    assert all(row.frozen == 0 for row in workers.values() if row.tasks < 2), workers
