"""A pull's read path (``serve_pull``): consume queue entries read in one go per consume queue
file, records as views of the mapped commit log or as copies, across the ends of consume
queue and commit log files, with tags filtered and a byte flipped on disk refused."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from hanet.broker import GetMessageStatus, serve_pull, subscription_filter
from hanet.store import CommitLogStore, CorruptRecordError, Message, StoreConfig, scan_records
from hanet.store.lowlevel import java_string_hash

COMMIT_LOG_FILE = 16 * 1024
CONSUME_QUEUE_FILE = 20 * 7  # 7 entries a consume queue file


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CommitLogStore]:
    config = StoreConfig(
        mapped_file_size=COMMIT_LOG_FILE, consume_queue_file_size=CONSUME_QUEUE_FILE
    )
    opened = CommitLogStore.open(tmp_path / "store", config)
    try:
        for i in range(60):  # two queues interleaved; every third message tagged "odd"
            tags = "odd" if i % 3 == 0 else "even"
            body = b"%03d" % i + b"x" * 700
            result = opened.put(Message("T", body, queue_id=i % 2, properties={"TAGS": tags}))
            assert result.ok
        yield opened
    finally:
        opened.close()


def _bodies(records: tuple[bytes | memoryview, ...]) -> list[bytes]:
    data = b"".join(records)
    return [bytes(r.body[:3]) for r in scan_records(data)]


@pytest.mark.parametrize("views", [True, False])
def test_a_pull_reads_across_consume_queue_and_commit_log_files(
    store: CommitLogStore, views: bool
) -> None:
    assert store.min_queue_offset("T", 0) == 0 and store.max_queue_offset("T", 0) == 30
    result = serve_pull(store, "T", 0, 3, 100, views=views)
    assert result.status is GetMessageStatus.FOUND
    assert result.next_offset == 30
    assert _bodies(result.records) == [b"%03d" % i for i in range(6, 60, 2)]
    kinds = {type(r) for r in result.records}
    assert kinds == ({memoryview} if views else {bytes})


def test_a_pull_with_tags_skips_the_others_and_stops_at_max_messages(
    store: CommitLogStore,
) -> None:
    tags = subscription_filter("odd")
    assert tags == frozenset({java_string_hash("odd")})
    result = serve_pull(store, "T", 1, 0, 4, tags=tags, views=True)
    # queue 1 holds 1, 3, 5, ...; "odd" every third message overall: 3, 9, 15, 21, ...
    assert _bodies(result.records) == [b"003"]
    assert result.next_offset == 4  # four entries looked at, one matched
    result = serve_pull(store, "T", 1, 0, 30, tags=tags, views=True)
    assert _bodies(result.records) == [b"%03d" % i for i in range(3, 60, 6)]
    nothing = serve_pull(store, "T", 1, 0, 1, tags=tags)
    assert nothing.status is GetMessageStatus.NO_MATCHED_MESSAGE and nothing.next_offset == 1


def test_long_subscription_expressions_are_not_kept() -> None:
    """A peer chooses its expressions: long ones are parsed each time, not cached (1,024 cached
    expressions of a frame's size would hold gigabytes); short ones still filter the same."""
    assert subscription_filter("a || b") == subscription_filter("b||a")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(20):
            long = "||".join(f"tag{i}-{n}" for n in range(100_000))  # ~1.3 MB each
            assert len(subscription_filter(long) or ()) == 100_000
            del long
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 2_000_000


def test_a_record_flipped_on_disk_is_never_served(store: CommitLogStore) -> None:
    entry = store.consume_queue_entry("T", 0, 5)
    assert entry is not None
    physical, size, _ = entry
    view = store.read_view(physical, size)
    assert len(view) == size
    # flip a body byte under the live mapping (the body CRC no longer matches)
    start = physical - physical % COMMIT_LOG_FILE
    path = store.root / "commitlog" / f"{start:020d}"
    with path.open("r+b") as f:
        f.seek(physical - start + 200)
        byte = f.read(1)
        f.seek(physical - start + 200)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptRecordError) as caught:
        serve_pull(store, "T", 0, 0, 32, views=True)
    assert caught.value.offset == physical
    ok = serve_pull(store, "T", 0, 0, 5)
    assert ok.status is GetMessageStatus.FOUND and len(ok.records) == 5


def test_consume_queue_entries_stop_at_a_file_end(store: CommitLogStore) -> None:
    entries = store.consume_queue_entries("T", 0, 5, 100)
    assert len(entries) == 2  # entries 5 and 6 end the first 7-entry file
    assert entries[0] == store.consume_queue_entry("T", 0, 5)
    assert len(store.consume_queue_entries("T", 0, 7, 100)) == 7
    assert store.consume_queue_entries("T", 0, 30, 5) == []
    assert store.consume_queue_entries("T", 9, 0, 5) == []


def test_an_entry_pointing_at_another_topics_record_is_never_served(
    store: CommitLogStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a record of "U" at queue 0 offset 0 with T's tag and size: only its topic differs
    assert store.put(Message("U", b"000" + b"x" * 700, queue_id=0, properties={"TAGS": "odd"})).ok
    wrong = store.consume_queue_entries("U", 0, 0, 1)
    entries = store.consume_queue_entries
    monkeypatch.setattr(
        store,
        "consume_queue_entries",
        lambda topic, queue_id, offset, count: (
            wrong if (topic, offset) == ("T", 0) else entries(topic, queue_id, offset, count)
        ),
    )
    for views in (True, False):
        with pytest.raises(CorruptRecordError, match=r"T/0 0 .* points at a record of U/0 0"):
            serve_pull(store, "T", 0, 0, 1, views=views)
    assert serve_pull(store, "T", 0, 1, 1).status is GetMessageStatus.FOUND
