"""Tools on a store whose log no longer starts at 0 (retention deleted its first files):
``hanet verify``, ``hanet dump``, the Spark sources and audit; and the file size a store keeps
(``store.properties``), so a restart need not repeat ``--mapped-file-size``."""

from __future__ import annotations

from pathlib import Path

import pytest

from hanet.cli import build_config, build_parser, main
from hanet.store import (
    STORE_PROPERTIES,
    CommitLogStore,
    Message,
    StoreConfig,
    StoreLayoutError,
    recorded_file_size,
)

FILE = 8192
CONFIG = StoreConfig(mapped_file_size=FILE, consume_queue_file_size=400)
TOPICS = ("Orders", "Payments")


def trimmed_store(root: Path, deleted_files: int = 2) -> int:
    """A store with an early topic whose messages all go, and two busy ones; its first
    ``deleted_files`` commit log files deleted and its consume queues cleaned. Returns the
    messages left."""
    with CommitLogStore.open(root, CONFIG) as store:
        for i in range(3):
            assert store.put(Message("Early", b"e%d" % i)).ok
        for i in range(300):
            assert store.put(Message(TOPICS[i % 2], b"m" * (100 + i % 50), queue_id=i % 3)).ok
        store.flush()
        for _ in range(deleted_files):
            assert store.delete_first_commit_log_file()
        for topic, queue_id in store.queues():
            store.clean_consume_queue(topic, queue_id)
        assert store.min_offset == deleted_files * FILE
        return sum(
            store.max_queue_offset(t, q) - store.min_queue_offset(t, q) for t, q in store.queues()
        )


def test_verify_and_dump_read_a_trimmed_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    left = trimmed_store(tmp_path / "s")
    assert main(["verify", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"OK: {left} messages, offsets {2 * FILE}..")
    assert "below the first offset" in out
    assert main(["dump", str(tmp_path / "s"), "--limit", "1"]) == 0
    assert capsys.readouterr().out.startswith(f"{2 * FILE:>12} size=")
    assert main(["dump", str(tmp_path / "s"), "--from", "0"]) == 1
    err = capsys.readouterr().err
    assert "offset outside the commit log [16384, " in err and "older files were deleted" in err


def test_a_store_keeps_its_file_size_and_refuses_another(tmp_path: Path) -> None:
    root = tmp_path / "s"
    assert recorded_file_size(root) is None
    with CommitLogStore.open(root, CONFIG) as store:
        store.put(Message("T", b"x"))
    assert (root / STORE_PROPERTIES).read_text().splitlines()[1:] == [
        f"mappedFileSizeCommitLog={FILE}",
        "mappedFileSizeConsumeQueue=400",
    ]
    assert recorded_file_size(root) == FILE
    with pytest.raises(StoreLayoutError) as info:
        CommitLogStore.open(
            root, StoreConfig(mapped_file_size=2 * FILE, consume_queue_file_size=400)
        )
    message = str(info.value)
    assert f"was created with mappedFileSizeCommitLog={FILE} (its store.properties)" in message
    assert f"--mapped-file-size {FILE}" in message
    # an older store without the file: the size of its files, then recorded at the next open
    (root / STORE_PROPERTIES).unlink()
    assert recorded_file_size(root) == FILE
    with CommitLogStore.open(root, CONFIG):
        pass
    assert (root / STORE_PROPERTIES).exists()
    (root / STORE_PROPERTIES).write_text("mappedFileSizeCommitLog=lots\n")
    with pytest.raises(StoreLayoutError, match=r"store\.properties:1: expected"):
        recorded_file_size(root)


def test_a_restart_takes_the_file_size_from_the_store(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with CommitLogStore.open(root, StoreConfig(mapped_file_size=64 * 1024)):
        pass
    args = build_parser().parse_args(["master", "--store", str(root)])
    assert build_config(args).mapped_file_size_commit_log == 64 * 1024
    args = build_parser().parse_args(["master", "--store", str(root), "--mapped-file-size", "1M"])
    assert build_config(args).mapped_file_size_commit_log == 1024 * 1024  # then refused at open
    args = build_parser().parse_args(["master", "--store", str(tmp_path / "new")])
    assert build_config(args).mapped_file_size_commit_log == 1024 * 1024 * 1024  # the default


@pytest.mark.spark
@pytest.mark.slow
def test_spark_sources_and_audit_read_a_trimmed_store(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from hanet.spark import audit, spark_session

    left = trimmed_store(tmp_path / "s")
    spark = spark_session(
        "local[2]", config={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"}
    )
    try:
        log = spark.read.format("commitlog").load(str(tmp_path / "s"))
        assert log.where("status = 'ok'").count() == left
        assert log.agg({"physical_offset": "min"}).collect()[0][0] == 2 * FILE
        queues = spark.read.format("consumequeue").load(str(tmp_path / "s"))
        assert queues.count() == left  # entries of deleted records are not read
        result = audit(spark, [str(tmp_path / "s")])
        try:
            assert result.problems.count() == 0
            (row,) = result.stores.collect()
            assert row["messages"] == left
        finally:
            result.unpersist()
    finally:
        spark.stop()


def test_retention_keys_are_read_and_unused_keys_are_warned_about_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "deleteWhen=04;16\nfileReservedTime=48\ndiskSpaceCleanForciblyRatio=0.9\n"
        "cleanResourceInterval=5000\ndestroyMapedFileIntervalForcibly=60000\n"
        "autoCreateTopicEnable=false\nstorePathCommitLog=/data/commitlog\n"
        "mappedFileSizeConsumeQueue=6000000\n",
        encoding="utf-8",
    )
    config = build_config(build_parser().parse_args(["master", "--config", str(conf)]))
    retention = config.retention
    assert retention.hours == {4, 16}
    assert retention.file_reserved_time == 48
    assert retention.disk_space_clean_forcibly_ratio == 0.9
    assert retention.clean_resource_interval == 5.0
    assert retention.destroy_mapped_file_interval_forcibly == 60.0
    assert config.auto_create_topic_enable is False
    warnings = [r.getMessage() for r in caplog.records if "does not use" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].endswith("storePathCommitLog, mappedFileSizeConsumeQueue")
    conf.write_text("deleteWhen=4am\n", encoding="utf-8")
    assert main(["master", "--config", str(conf), "--store", str(tmp_path / "s")]) == 2
    args = [
        "master",
        "--store",
        str(tmp_path / "s"),
        "--delete-when",
        "03",
        "--file-reserved-time",
        "1",
    ]
    config = build_config(build_parser().parse_args(args))
    assert (config.delete_when, config.file_reserved_time) == ("03", 1.0)
