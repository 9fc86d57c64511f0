"""The audit of a running ``hanet master`` over its broker port (TLS) against its files.

A store is written, a ``hanet master`` process serves it over TLS, then a body byte and a
record's magic code are damaged in a middle file (the broker's mappings see it, as they would
see bit rot). The audit and the statistics read through the broker (HANET_READ_LOG, no access
to the files) must equal the ones read from the files, the damage found both ways.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from hanet.store import CommitLogStore, Message, StoreConfig
from hanet.store.lowlevel import file_name
from hanet.testing import HanetProcess, cli_flags

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql import DataFrame, SparkSession

from hanet.spark import (
    LogReadError,
    TlsFiles,
    audit,
    commit_log_batches,
    find_stores,
    plan_broker,
    plan_commit_log,
    remote_batches,
    spark_session,
    stats,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
FILE = 8192


def make_store(root: Path) -> list[tuple[int, int]]:
    """200 messages in 8 KiB files; returns (offset, size) of each record."""
    found = []
    with CommitLogStore.open(root, StoreConfig(mapped_file_size=FILE)) as store:
        for i in range(200):
            message = Message(
                ("Orders", "Payments", "Audit")[i % 3],
                bytes([i % 256]) * (40 + i * 37 % 300),
                queue_id=i % 2,
                properties={"TAGS": f"t{i % 4}", "KEYS": f"k{i}"},
                born_timestamp=1_700_000_000_000 + i * 1000,
            )
            result = store.put(message)
            assert result.ok
            found.append((result.wrote_offset, result.wrote_size))
    return found


def start_master(base: Path, root: Path, *extra: str) -> HanetProcess:
    """A ``hanet master`` process on ``root`` (started)."""
    store = ("--store", str(root), "--mapped-file-size", str(FILE))
    ports = ("--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0")
    master = HanetProcess(base, "master", "master", *store, *ports, *extra)
    master.start_blocking()
    return master


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("live")
    root = base / "store"
    records = make_store(root)
    ca = trustme.CA()
    ca_file = base / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    leaf = ca.issue_cert("127.0.0.1")
    cert, key = base / "broker.crt", base / "broker.key"
    leaf.private_key_and_cert_chain_pem.write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    process = start_master(base, root, "--tls-cert", str(cert), "--tls-key", str(key))
    address = process.ready["broker"]
    try:
        second = [o for o, _ in records if FILE <= o < 2 * FILE]
        bad_body, bad_header = second[1], second[4]
        path = root / "commitlog" / file_name(FILE)
        with path.open("r+b") as f:  # the running broker's mapping sees this
            f.seek(bad_body - FILE + 100)
            byte = f.read(1)[0]
            f.seek(bad_body - FILE + 100)
            f.write(bytes([byte ^ 1]))
            f.seek(bad_header - FILE + 4)
            f.write(b"\xde\xad\xbe\xef")
        yield {
            "root": root,
            "address": address,
            "ca": ca_file,
            "bad": {("crc", bad_body), ("corrupt", bad_header)},
        }
    finally:
        process.close(signal.SIGTERM)


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = spark_session(
        "local[2]", config={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"}
    )
    yield session
    session.stop()


def rows(df: DataFrame) -> list[dict[str, Any]]:
    """The rows without the ``store`` column (a path on one side, HOST:PORT on the other)."""
    return [{k: v for k, v in r.asDict().items() if k != "store"} for r in df.collect()]


def test_the_audit_through_the_broker_equals_the_files(
    spark: SparkSession, live: dict[str, Any]
) -> None:
    path = f"hanet://{live['address']}?tlsCa={live['ca']}"
    files = audit(spark, str(live["root"]), consume_queues=False)
    broker = audit(spark, path)
    try:
        assert broker.rows == files.rows
        for table in ("stores", "queues", "problems"):
            assert rows(getattr(broker, table)) == rows(getattr(files, table)), table
        found = {(r["kind"], r["physical_offset"]) for r in broker.problems.collect()}
        assert live["bad"] <= found
        assert {r["store"] for r in broker.stores.collect()} == {live["address"]}
    finally:
        files.unpersist()
        broker.unpersist()
    # the statistics too, with the source's option
    by_option = (
        spark.read.format("commitlog")
        .option("brokers", live["address"])
        .option("tlsCa", str(live["ca"]))
        .option("maxPartitionBytes", "3000")  # several ranges per file: cut by the broker
        .load()
    )
    from_files = (
        spark.read.format("commitlog").option("maxPartitionBytes", "3000").load(str(live["root"]))
    )
    assert sorted(rows(by_option), key=str) == sorted(rows(from_files), key=str)
    by_stats, file_stats = stats(spark, path), stats(spark, str(live["root"]))
    try:
        for table in ("per_minute", "latency", "largest"):
            assert rows(getattr(by_stats, table)) == rows(getattr(file_stats, table)), table
    finally:
        by_stats.unpersist()
        file_stats.unpersist()


def test_a_plain_reader_of_a_tls_broker_fails_with_the_reason(
    spark: SparkSession, live: dict[str, Any]
) -> None:
    with pytest.raises(Exception, match=r"broker 127\.0\.0\.1:\d+: read failed|closed"):
        spark.read.format("commitlog").option("brokers", live["address"]).load().count()


def test_hanet_audit_broker_on_the_command_line(live: dict[str, Any]) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYSPARK_GATEWAY_PORT", None)
    audit = ["audit", "--broker", live["address"], "--tls-ca", str(live["ca"]), "--json"]
    command = [sys.executable, "-m", "hanet", *audit, "--spark-master", "local[2]"]
    done = subprocess.run(
        command, check=False, capture_output=True, text=True, env=env, cwd=ROOT, timeout=180
    )
    assert done.returncode == 1, done.stderr  # problems found
    report = json.loads(done.stdout)
    found = {(p["kind"], p["physical_offset"]) for p in report["problems"]}
    assert live["bad"] <= found
    # the records after the damage in its file are not read: their queues show gaps
    assert {kind for kind, _ in found} == {"crc", "corrupt", "queue_gap"}
    assert [s["store"] for s in report["stores"]] == [live["address"]]


def without_store(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "store"}


def test_mutual_tls_reads_with_a_client_certificate_only(tmp_path: Path) -> None:
    root = tmp_path / "store"
    make_store(root)
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    for name, host in (("broker", "127.0.0.1"), ("reader", "reader.example")):
        leaf = ca.issue_cert(host)
        leaf.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / f"{name}.crt"))
        leaf.private_key_pem.write_to_path(str(tmp_path / f"{name}.key"))
    tls_flags = ["--tls-cert", str(tmp_path / "broker.crt"), "--tls-ca", str(tmp_path / "ca.pem")]
    process = start_master(tmp_path, root, *tls_flags, "--tls-key", str(tmp_path / "broker.key"))
    address = process.ready["broker"]
    try:
        tls = TlsFiles.load(
            str(tmp_path / "ca.pem"), str(tmp_path / "reader.crt"), str(tmp_path / "reader.key")
        )
        # the driver reads the files; the tasks get their contents
        assert tls is not None and tls.cert is not None
        assert "PRIVATE KEY" not in repr(tls)  # a partition's repr shows up in logs
        (location,) = find_stores(str(root))
        expected = [
            r
            for part in plan_commit_log(location)
            for b in commit_log_batches(part)
            for r in b.to_pylist()
        ]
        got = [
            r
            for part in plan_broker(address, tls=tls)
            for b in remote_batches(part)
            for r in b.to_pylist()
        ]
        assert len(got) == 200
        assert [without_store(r) for r in got] == [without_store(r) for r in expected]
        without = TlsFiles.load(str(tmp_path / "ca.pem"))
        with pytest.raises(LogReadError, match=f"broker {address}"):
            plan_broker(address, tls=without)
    finally:
        process.close(signal.SIGTERM)


ACL = """
accounts:
  - accessKey: operator
    secretKey: operator-secret
    admin: true
"""


def test_a_broker_under_acl_is_read_with_an_admin_account(
    tmp_path: Path, spark: SparkSession
) -> None:
    root = tmp_path / "store"
    make_store(root)
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    process = start_master(tmp_path, root, "--acl-enable", "--acl-file", str(acl))
    address = process.ready["broker"]
    try:

        def reader() -> Any:  # (option() changes a reader in place)
            return spark.read.format("commitlog").option("brokers", address)

        signed = reader().option("accessKey", "operator").option("secretKey", "operator-secret")
        assert signed.load().count() == 200  # the tasks signed their reads too
        with pytest.raises(Exception, match="No accessKey is configured"):
            reader().load().count()
        # the command line: the secret from the environment, off the process list
        env = dict(os.environ, PYTHONPATH=str(ROOT), HANET_SECRET_KEY="operator-secret")
        env.pop("PYSPARK_GATEWAY_PORT", None)
        flags = cli_flags(broker=address, access_key="operator", json=True, spark_master="local[2]")
        done = subprocess.run(
            [sys.executable, "-m", "hanet", "stats", *flags],
            check=False,
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert sum(row["messages"] for row in report["per_minute"]) == 200
    finally:
        process.close(signal.SIGTERM)
