"""Small jobs feel small, without a Spark session: the driver-side read of small stores, the
class data sharing archive's life cycle, the progress lines printed when Spark's bar is off."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hanet.store import CommitLogStore, Message, StoreConfig

pa = pytest.importorskip("pyarrow")

from hanet.spark import (  # noqa: E402  (after the importorskip)
    Progress,
    cds_plan,
    commit_log_batches,
    commit_log_table,
    connect_stage_lines,
    consume_queue_batches,
    consume_queue_table,
    find_stores,
    is_small,
    plan_commit_log,
    plan_consume_queues,
    stage_lines,
)

CONFIG = StoreConfig(mapped_file_size=4096, consume_queue_file_size=400)
COLUMNS = ("store", "file", "physical_offset", "size", "topic", "queue_id", "status")


def make_store(root: Path, count: int) -> None:
    with CommitLogStore.open(root, CONFIG) as store:
        for i in range(count):
            message = Message(("A", "B")[i % 2], b"x" * (20 + i), queue_id=i % 3)
            assert store.put(message).ok


def test_small_stores_are_read_in_the_driver_as_the_source_reads_them(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    make_store(one, 40)
    make_store(two, 25)
    table = commit_log_table([str(one), str(two)], columns=COLUMNS)
    assert table is not None
    expected = [
        row
        for path in (one, two)
        for part in plan_commit_log(find_stores(str(path))[0])
        for batch in commit_log_batches(part, columns=COLUMNS)
        for row in batch.to_pylist()
    ]
    assert table.to_pylist() == expected
    assert table.num_rows == 65
    assert table.schema.names == list(COLUMNS)
    queues = consume_queue_table([str(one), str(two)])
    assert queues is not None
    assert queues.num_rows == 65
    assert queues.to_pylist() == [
        row
        for path in (one, two)
        for queue_file in plan_consume_queues(find_stores(str(path))[0])
        for batch in consume_queue_batches(queue_file)
        for row in batch.to_pylist()
    ]


def test_a_store_past_the_row_limit_is_left_to_the_executors(tmp_path: Path) -> None:
    make_store(tmp_path / "s", 30)
    paths = [str(tmp_path / "s")]
    assert commit_log_table(paths, max_rows=29) is None
    assert consume_queue_table(paths, max_rows=29) is None
    assert is_small(paths, 30)
    assert not is_small(paths, 29)
    assert not is_small(paths, 0)  # 0: never read in the driver


def test_a_long_consume_queue_is_read_in_growing_chunks(tmp_path: Path) -> None:
    config = StoreConfig(mapped_file_size=1 << 20, consume_queue_file_size=20 * 6000)
    with CommitLogStore.open(tmp_path, config) as store:
        for i in range(5000):
            assert store.put(Message("T", b"y", properties={"TAGS": f"t{i % 3}"})).ok
    (queue_file,) = plan_consume_queues(find_stores(str(tmp_path))[0])
    batches = list(consume_queue_batches(queue_file))
    assert [b.num_rows for b in batches] == [1024, 3976]  # then 4096 rows: 120 written
    offsets = [q for b in batches for q in b.column("queue_offset").to_pylist()]
    assert offsets == list(range(5000))


def test_the_first_quick_jvm_writes_the_archive_and_a_later_session_adopts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HANET_SPARK_CDS", raising=False)
    first = cds_plan("9.9.9", tmp_path)
    assert first.writing is not None
    assert first.options[0] == f"-XX:ArchiveClassesAtExit={first.writing}"
    assert "-Xlog:disable" in first.options  # the JVM's CDS warnings would go to stdout
    first.writing.write_bytes(b"archive")  # what the JVM writes when it exits
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        first.launched(alive.pid)
        still = cds_plan("9.9.9", tmp_path)  # its JVM still runs: not adopted
        assert still.writing is not None
        assert first.writing.exists()
    finally:
        alive.kill()
        alive.wait()
    adopted = cds_plan("9.9.9", tmp_path)
    assert adopted.writing is None
    archive = next(tmp_path.glob("*.jsa"))
    assert archive.read_bytes() == b"archive"
    assert adopted.options[:2] == (f"-XX:SharedArchiveFile={archive}", "-XX:+VerifySharedSpaces")
    assert not first.writing.exists()
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".jsa"]
    # the second writer (started before the adoption) finds the archive there: its file goes
    assert still.writing is not None
    still.writing.write_bytes(b"second")
    still.launched(alive.pid)
    cds_plan("9.9.9", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [archive.name]
    assert archive.read_bytes() == b"archive"


def test_each_pyspark_installation_has_its_own_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Java maps an archive only for the jars' paths it was written with: another virtual
    # environment's archive would be refused, silently, on every start
    monkeypatch.delenv("HANET_SPARK_CDS", raising=False)
    cache = tmp_path / "cache"
    one = cds_plan("9.9.9", cache, spark_home=str(tmp_path / "venv-a"))
    assert one.writing is not None
    one.writing.write_bytes(b"archive of a")
    one.launched(2**22 + 1)  # no such process: its JVM is done
    assert cds_plan("9.9.9", cache, spark_home=str(tmp_path / "venv-a")).writing is None
    other = cds_plan("9.9.9", cache, spark_home=str(tmp_path / "venv-b"))
    assert other.writing is not None  # not venv-a's archive: its own, written at exit
    assert len(list(cache.glob("*.jsa"))) == 1


def test_cds_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANET_SPARK_CDS", "0")
    plan = cds_plan("9.9.9", tmp_path)
    assert plan.options == ()
    assert plan.writing is None
    plan.launched(os.getpid())  # nothing to record
    assert list(tmp_path.iterdir()) == []


def test_progress_lines_name_each_active_stage() -> None:
    stage = SimpleNamespace(
        stageId=3,
        name="count at NativeMethodAccessorImpl.java:0",
        numTasks=12,
        numActiveTasks=2,
        numCompletedTasks=5,
    )
    assert stage_lines([stage], 31.4) == ["hanet: stage 3 (count): 5/12 tasks, 2 running, 31 s"]
    assert stage_lines([], 5.0) == []


def test_connect_progress_lines_name_each_stage_not_done() -> None:
    def stage(stage_id: int, done: bool) -> SimpleNamespace:
        return SimpleNamespace(stage_id=stage_id, num_tasks=12, num_completed_tasks=5, done=done)

    lines = connect_stage_lines([stage(3, False), stage(2, True)], 2, 31.4)
    assert lines == ["hanet: stage 3: 5/12 tasks, 2 running, 31 s"]
    assert connect_stage_lines([], 0, 5.0) == []


def test_progress_over_spark_connect_prints_what_the_server_reports() -> None:
    class ConnectSession:  # what Progress sees of a Spark Connect session
        def __init__(self) -> None:
            self.handlers: list[Any] = []

        @property
        def sparkContext(self) -> Any:
            raise RuntimeError("no SparkContext over Spark Connect")

        def registerProgressHandler(self, handler: Any) -> None:
            self.handlers.append(handler)

        def removeProgressHandler(self, handler: Any) -> None:
            self.handlers.remove(handler)

    session = ConnectSession()
    out = io.StringIO()
    stage = SimpleNamespace(stage_id=4, num_tasks=8, num_completed_tasks=3, done=False)
    with Progress(session, interval=0.05, out=out):
        (handler,) = session.handlers
        handler(stages=[stage], inflight_tasks=2, operation_id="op", done=False)
        deadline = time.monotonic() + 10
        while "hanet: stage 4: 3/8 tasks, 2 running" not in out.getvalue():
            assert time.monotonic() < deadline, out.getvalue()
            time.sleep(0.01)
        handler(stages=[stage], inflight_tasks=0, operation_id="op", done=True)
        time.sleep(0.2)  # the query is done: nothing more is printed
        printed = out.getvalue()
        time.sleep(0.2)
        assert out.getvalue() == printed
    assert session.handlers == []  # removed on the way out
