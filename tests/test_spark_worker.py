"""The data sources settle each reused Spark Python worker once (``hanet.spark._worker``).

PySpark's daemon runs a full ``gc.collect()`` after every task of a reused worker; the readers
freeze the worker's objects once, at its second task (``gc.freeze``), so that those collections
skip them. Checked here without a Spark session: when it acts, that it acts once per process,
that the first task's lazy imports are frozen too, and that the readers' rows are the same.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hanet.store import CommitLogStore, Message, StoreConfig

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from hanet.spark import (  # noqa: E402  (after the importorskip)
    AUDIT_COLUMNS,
    CommitLogDataSource,
    ConsumeQueueDataSource,
    commit_log_batches,
    consume_queue_batches,
    find_stores,
    plan_commit_log,
    plan_consume_queues,
    settle_worker,
    worker_tasks,
)

FIXTURE = Path(__file__).parent / "fixtures" / "rocketmq-store-8k"  # a real RocketMQ broker's
TASKS = "hanet.spark._worker._tasks"


@pytest.fixture
def reused_worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process as a reused Spark worker not settled yet; unfrozen afterwards."""
    monkeypatch.setenv("SPARK_REUSE_WORKER", "1")
    monkeypatch.setattr(TASKS, None)
    gc.unfreeze()
    yield
    gc.unfreeze()


def settle() -> bool:
    return settle_worker()


def test_outside_a_reused_worker_nothing_is_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_REUSE_WORKER", raising=False)
    monkeypatch.setattr(TASKS, None)
    gc.unfreeze()
    assert [settle() for _ in range(3)] == [False, False, False]
    assert gc.get_freeze_count() == 0


@pytest.mark.usefixtures("reused_worker")
def test_a_reused_worker_is_frozen_once_at_its_second_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert worker_tasks() == 0
    assert settle() is False  # its first task: what it imports lazily is not there yet
    assert gc.get_freeze_count() == 0 and worker_tasks() == 1
    assert settle() is True
    assert worker_tasks() == 2
    assert gc.get_freeze_count() > 1000  # the modules' objects, at least
    # its next tasks freeze nothing more (the count itself may fall: a frozen object can
    # still be freed, e.g. one of the suite's earlier tests' when its last reference goes)
    freezes = 0
    freeze = gc.freeze

    def counted_freeze() -> None:
        nonlocal freezes
        freezes += 1
        freeze()

    monkeypatch.setattr(gc, "freeze", counted_freeze)
    assert [settle() for _ in range(3)] == [False, False, False]
    assert freezes == 0
    # a worker forked from a settled process (another pid) counts its own tasks
    monkeypatch.setattr(TASKS, (os.getpid() + 1, 5))
    assert worker_tasks() == 0
    assert [settle(), settle()] == [False, True]


def table(batches: Iterator[Any]) -> list[dict[str, Any]]:
    return [row for batch in batches for row in batch.to_pylist()]


@pytest.mark.usefixtures("reused_worker")
def test_the_commit_log_reader_settles_and_reads_the_same_rows() -> None:
    source = CommitLogDataSource({"path": str(FIXTURE), "columns": ",".join(AUDIT_COLUMNS)})
    reader = source.reader(source.schema())
    parts = list(reader.partitions())
    assert len(parts) == 1
    rows = table(reader.read(parts[0]))  # the worker's first task
    assert gc.get_freeze_count() == 0
    # its second task: what the first imported lazily (pyarrow imports pandas) is frozen too
    assert table(reader.read(parts[0])) == rows
    assert gc.get_freeze_count() > 0
    assert len(gc.get_objects()) < 5000
    expected = [
        row
        for store in find_stores(str(FIXTURE))
        for part in plan_commit_log(store)
        for row in table(commit_log_batches(part, columns=AUDIT_COLUMNS))
    ]
    assert rows == expected
    assert len(rows) == 47 and {row["status"] for row in rows} == {"ok"}


@pytest.mark.usefixtures("reused_worker")
def test_the_consume_queue_reader_settles_and_reads_the_same_rows(tmp_path: Path) -> None:
    with CommitLogStore.open(tmp_path, StoreConfig(mapped_file_size=4096)) as store:
        for i in range(7):
            store.put(Message("T", b"x" * i, queue_id=i % 2, properties={"TAGS": "TagA"}))
    source = ConsumeQueueDataSource({"path": str(tmp_path)})
    reader = source.reader(source.schema())
    parts = list(reader.partitions())
    assert len(parts) == 2
    rows = [row for part in parts for row in table(reader.read(part))]
    assert gc.get_freeze_count() > 0
    expected = [
        row
        for location in find_stores(str(tmp_path))
        for part in plan_consume_queues(location)
        for row in table(consume_queue_batches(part))
    ]
    assert rows == expected and len(rows) == 7
