"""Batched dispatch: ``group_entries`` (native and pure Python give the same groups),
``ConsumeQueue.append_entries`` (one write per queue and batch, across file ends, with blank
fill and the re-dispatch no-op), and the store's deferred dispatch (``append_raw(...,
dispatch=False)`` then :meth:`CommitLogStore.dispatch`)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hanet.store import (
    CommitLogStore,
    Message,
    MessageRecord,
    OffsetMismatchError,
    StoreConfig,
    StoreRole,
    encode_record,
)
from hanet.store.lowlevel import (
    CQ_BLANK_SIZE,
    CQ_ENTRY_SIZE,
    INDEX_ROW,
    ConsumeQueue,
    IndexEntryGroup,
    IndexGroupFunction,
    index_group_entries_py,
    native_index_group_entries,
    scan_index_py,
)

ROW = INDEX_ROW
ENTRY = struct.Struct(">qiq")

IMPLEMENTATIONS = ["python", "native"]
needs_native = pytest.mark.skipif(
    native_index_group_entries is None, reason="hanet.store._speedups not built"
)


@pytest.fixture(params=IMPLEMENTATIONS)
def group(request: pytest.FixtureRequest) -> IndexGroupFunction:
    if request.param == "python":
        return index_group_entries_py
    if native_index_group_entries is None:  # pragma: no cover
        pytest.skip("hanet.store._speedups is not built")
    return native_index_group_entries


def row(physical: int, queue_id: int, queue_offset: int, tid: int = 0, stored: int = 0) -> bytes:
    return ROW.pack(physical, 100, queue_id, queue_offset, -5, stored, 10 + tid, 1, tid)


# -- group_entries ---------------------------------------------------------------------------


def test_groups_per_queue_in_order_of_first_row(group: IndexGroupFunction) -> None:
    rows = row(0, 0, 5) + row(100, 1, 0) + row(200, 0, 6, stored=9) + row(300, 0, 0, tid=1)
    groups = group(rows)
    assert [(g[0], g[3], g[4], g[5], g[7]) for g in groups] == [
        (0, 0, 5, 2, 9),
        (0, 1, 0, 1, 0),
        (1, 0, 0, 1, 0),
    ]
    assert groups[0][6] == ENTRY.pack(0, 100, -5) + ENTRY.pack(200, 100, -5)
    assert groups[2][1:3] == (11, 1)


def test_gaps_and_repeats_start_a_new_group(group: IndexGroupFunction) -> None:
    rows = row(0, 0, 5) + row(100, 0, 7) + row(200, 0, 7) + row(300, 0, 3) + row(400, 0, 4)
    assert [(g[4], g[5]) for g in group(rows)] == [(5, 1), (7, 1), (7, 1), (3, 2)]


def test_empty_and_bad_rows(group: IndexGroupFunction) -> None:
    assert group(b"") == []
    with pytest.raises(ValueError, match="whole number"):
        group(b"\0" * (ROW.size + 1))


def test_the_largest_queue_offset_ends_a_group(group: IndexGroupFunction) -> None:
    top = 2**63 - 1
    rows = row(0, 0, top - 1) + row(100, 0, top) + row(200, 0, -(2**63))
    assert [(g[4], g[5]) for g in group(rows)] == [(top - 1, 2), (-(2**63), 1)]


ROWS = st.lists(
    st.tuples(
        st.integers(-(2**63), 2**63 - 1),
        st.integers(-(2**31), 2**31 - 1),
        st.sampled_from([0, 1, 2, -1, 2**31 - 1]),
        st.one_of(st.integers(0, 6), st.sampled_from([2**63 - 1, 2**63 - 2, -(2**63)])),
        st.integers(-(2**31), 2**31 - 1),
        st.integers(-(2**63), 2**63 - 1),
        st.integers(-(2**63), 2**63 - 1),
        st.integers(-(2**31), 2**31 - 1),
        st.sampled_from([0, 1, 2, 3, -1]),
    ),
    max_size=60,
)


@needs_native
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=ROWS)
def test_arbitrary_rows_group_the_same(rows: list[tuple[int, ...]]) -> None:
    assert native_index_group_entries is not None
    data = b"".join(ROW.pack(*r) for r in rows)
    assert native_index_group_entries(data) == index_group_entries_py(data)
    assert native_index_group_entries(bytearray(data)) == index_group_entries_py(memoryview(data))


@needs_native
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(
        st.tuples(st.sampled_from(["A", "B", "é"]), st.integers(0, 3), st.integers(0, 4)),
        max_size=40,
    )
)
def test_rows_of_a_scan_group_the_same(records: list[tuple[str, int, int]]) -> None:
    assert native_index_group_entries is not None
    data = bytearray()
    for topic, queue_id, step in records:
        record = MessageRecord.create(
            topic=topic,
            body=b"x" * step,
            queue_id=queue_id,
            queue_offset=step // 2,
            physical_offset=len(data),
            properties={"TAGS": topic * step} if step else {},
        )
        data += encode_record(record)
    rows = scan_index_py(bytes(data))[5]
    assert native_index_group_entries(rows) == index_group_entries_py(rows)
    total = sum(g[5] for g in index_group_entries_py(rows))
    assert total == len(records)


def test_group_entry_types() -> None:
    group: IndexEntryGroup = index_group_entries_py(row(0, 0, 0))[0]
    assert group == (0, 10, 1, 0, 0, 1, ENTRY.pack(0, 100, -5), 0)


# -- ConsumeQueue.append_entries ---------------------------------------------------------------


def entries(first_physical: int, count: int) -> bytes:
    return b"".join(ENTRY.pack(first_physical + 100 * i, 100, i) for i in range(count))


def held(queue: ConsumeQueue) -> list[tuple[int, int, int] | None]:
    return [queue.get(q) for q in range(queue.min_queue_offset, queue.max_queue_offset)]


def test_append_entries_matches_append_one_by_one(tmp_path: Path) -> None:
    size = 5 * CQ_ENTRY_SIZE
    one = ConsumeQueue(tmp_path / "one", "T", 0, size, warm=False)
    bulk = ConsumeQueue(tmp_path / "bulk", "T", 0, size, warm=False)
    for first, count in ((3, 4), (7, 9), (20, 1), (21, 12)):  # a late start, gaps, file ends
        for i in range(count):
            one.append(first + i, 1000 * first + 100 * i, 100, i)
        bulk.append_entries(first, entries(1000 * first, count))
    assert bulk.min_queue_offset == one.min_queue_offset == 3
    assert bulk.max_queue_offset == one.max_queue_offset == 33
    assert held(bulk) == held(one)
    assert bulk.get(8 + 2) is not None and bulk.get(17) == (0, CQ_BLANK_SIZE, 0)
    assert [m.start_offset for m in bulk.files.files] == [m.start_offset for m in one.files.files]
    for queue in (one, bulk):
        queue.close()


def test_append_entries_refuses_offsets_below_the_end(tmp_path: Path) -> None:
    queue = ConsumeQueue(tmp_path / "q", "T", 0, 100 * CQ_ENTRY_SIZE, warm=False)
    queue.append_entries(0, entries(0, 3))
    with pytest.raises(OffsetMismatchError):
        queue.append_entries(2, entries(0, 2))
    queue.append_entries(3, b"")
    assert queue.max_queue_offset == 3
    with pytest.raises(ValueError, match="20-byte"):
        queue.append_entries(3, b"x" * 7)
    queue.close()


def test_truncate_physical_drops_the_blanks_before_a_dropped_entry_and_stops_at_floor(
    tmp_path: Path,
) -> None:
    queue = ConsumeQueue(tmp_path / "q", "T", 0, 8 * CQ_ENTRY_SIZE, warm=False)
    far = 3 << 30  # past 2 GiB: a blank entry (offset 0, size 0x7FFFFFFF) "ends" below it
    queue.append_entries(0, entries(far, 3))
    queue.append_entries(6, entries(far + 1000, 2))  # blanks at 3..5
    assert queue.truncate_physical(far + 1000, floor=7) == 1  # the floor stops the walk
    assert queue.max_queue_offset == 7
    assert queue.truncate_physical(far + 1000) == 4  # the entry at 6 and the blanks before it
    assert queue.max_queue_offset == 3 and held(queue) == [
        (far + 100 * i, 100, i) for i in range(3)
    ]
    assert queue.truncate_physical(0) == 3 and queue.files.files == []
    queue.close()


# -- the store's deferred dispatch -----------------------------------------------------------


def master_bytes(tmp_path: Path, count: int, file_size: int = 1 << 16) -> bytes:
    config = StoreConfig(mapped_file_size=file_size, warm_mapped_files=False)
    with CommitLogStore.open(tmp_path / "master", config) as master:
        master.put_batch(
            [Message(topic=f"T{i % 3}", body=b"b" * (i % 50), queue_id=i % 2) for i in range(count)]
        )
        data = bytearray()
        while len(data) < master.max_offset:
            data += master.read(len(data), master.max_offset - len(data))
        return bytes(data)


def slave_config(file_size: int = 1 << 16) -> StoreConfig:
    return StoreConfig(mapped_file_size=file_size, warm_mapped_files=False, role=StoreRole.SLAVE)


def test_deferred_dispatch_builds_the_same_queues(tmp_path: Path) -> None:
    data = master_bytes(tmp_path, 400)
    inline = CommitLogStore.open(tmp_path / "inline", slave_config())
    deferred = CommitLogStore.open(tmp_path / "deferred", slave_config())
    calls: list[int] = []
    deferred.add_listener(calls.append)
    for pos in range(0, len(data), 3001):  # partial records at most chunk ends
        chunk = data[pos : pos + 3001]
        inline.append_raw(pos, chunk)
        deferred.append_raw(pos, chunk, dispatch=False)
    assert deferred.max_offset == inline.max_offset == len(data)
    assert deferred.validated_offset == len(data)
    assert deferred.dispatched_offset == 0 and calls == []  # listeners wait for the dispatch
    assert deferred.max_queue_offset("T0", 0) == 0
    assert deferred.dispatch() is None
    assert calls == [len(data)]
    assert deferred.dispatched_offset == inline.dispatched_offset
    assert deferred.queues() == inline.queues()
    for topic, queue_id in inline.queues():
        low = inline.min_queue_offset(topic, queue_id)
        high = inline.max_queue_offset(topic, queue_id)
        assert deferred.max_queue_offset(topic, queue_id) == high
        for q in range(low, high):
            assert deferred.consume_queue_entry(topic, queue_id, q) == (
                inline.consume_queue_entry(topic, queue_id, q)
            )
    assert deferred.dispatch() is None and calls == [len(data)]  # nothing new: no call
    inline.close()
    deferred.close()


def test_redispatch_is_a_no_op_and_resumes_mid_queue(tmp_path: Path) -> None:
    data = master_bytes(tmp_path, 60)
    with CommitLogStore.open(tmp_path / "slave", slave_config()) as store:
        half = len(data) // 2
        store.append_raw(0, data[:half])
        before = {key: store.max_queue_offset(*key) for key in store.queues()}
        store._dispatched = 0  # as recovery: from a safe point before the end
        store.append_raw(half, data[half:], dispatch=False)
        assert store.dispatch() is None
        assert store.dispatched_offset == len(data)
        total = sum(store.max_queue_offset(*key) for key in store.queues())
        assert total == 60
        for key, high in before.items():
            assert store.max_queue_offset(*key) >= high


def test_a_failed_batch_leaves_the_queues_of_a_record_by_record_dispatch(tmp_path: Path) -> None:
    """Queue B cannot be created (a file in the way): the batch stops at B's first record and
    queue A keeps only the records before it, as a record-by-record dispatch leaves it."""
    config = StoreConfig(mapped_file_size=1 << 16, warm_mapped_files=False)
    with CommitLogStore.open(tmp_path / "master", config) as master:
        topics = ["A", "A", "B", "A", "B", "A"]
        results = master.put_batch([Message(topic=t, body=b"x" * 30) for t in topics])
        data = master.read(0, master.max_offset)
    with CommitLogStore.open(tmp_path / "slave", slave_config(1 << 16)) as store:
        (tmp_path / "slave" / "consumequeue").mkdir()
        (tmp_path / "slave" / "consumequeue" / "B").write_bytes(b"in the way")
        store.append_raw(0, data)
        error = store.dispatch_error
        assert error is not None and error.offset == results[2].wrote_offset
        assert store.dispatched_offset == results[2].wrote_offset
        assert store.max_queue_offset("A", 0) == 2
        assert store.consume_queue_entry("A", 0, 1) == (
            results[1].wrote_offset,
            results[1].wrote_size,
            0,
        )


def test_close_dispatches_what_was_left(tmp_path: Path) -> None:
    data = master_bytes(tmp_path, 30)
    store = CommitLogStore.open(tmp_path / "slave", slave_config())
    store.append_raw(0, data, dispatch=False)
    assert store.dispatched_offset == 0
    store.close()
    queues = tmp_path / "slave" / "consumequeue"
    assert sorted(p.name for p in queues.iterdir()) == ["T0", "T1", "T2"]  # written at close
    with CommitLogStore.open(tmp_path / "slave", slave_config()) as reopened:
        assert sum(reopened.max_queue_offset(*key) for key in reopened.queues()) == 30


# -- validating a transfer that completes a partial record -----------------------------------


@pytest.fixture(scope="module")
def small_log(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return master_bytes(tmp_path_factory.mktemp("log"), 40, file_size=4096)


def outcome(result: tuple[int, Exception | None]) -> tuple[int, str | None]:
    return result[0], None if result[1] is None else str(result[1])


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    cut=st.integers(1, 4000),
    length=st.integers(0, 3000),
    flips=st.lists(st.tuples(st.integers(0, 2999), st.integers(1, 255)), max_size=2),
)
def test_a_continued_record_validates_as_the_whole_bytes(
    tmp_path_factory: pytest.TempPathFactory,
    small_log: bytes,
    cut: int,
    length: int,
    flips: list[tuple[int, int]],
) -> None:
    """The head of a partial record in the log + the next transfer: validating the record
    alone, then the rest in place, gives what validating all of it together gives."""
    data = small_log[: len(small_log) - len(small_log) % 4096 or None]
    cut = min(cut, len(data) - 1)
    root = tmp_path_factory.mktemp("slave")
    with CommitLogStore.open(root, slave_config(4096)) as store:
        store.append_raw(0, data[:cut], dispatch=False)
        start = store.validated_offset
        if start == cut:  # the cut is a record boundary: nothing partial
            return
        chunk = bytearray(data[cut : cut + length])
        for at, bits in flips:
            if at < len(chunk):
                chunk[at] ^= bits
        whole = memoryview(bytes(data[start:cut]) + bytes(chunk))
        expected = outcome(store._validate_raw(start, whole))
        assert outcome(store._validate_continued(start, cut, memoryview(bytes(chunk)))) == (
            expected
        )


@pytest.mark.parametrize("second_topic", ["T", "U"])
def test_records_already_dispatched_do_not_count_for_the_store_timestamp(
    tmp_path: Path, second_topic: str
) -> None:
    data = bytearray()
    for i in range(10):
        topic = "T" if i < 5 else second_topic
        data += encode_record(
            MessageRecord.create(
                topic=topic,
                body=b"x",
                queue_offset=i if topic == "T" else i - 5,
                physical_offset=len(data),
                store_timestamp=100 - i,
            )
        )
    half = len(data) // 2
    with CommitLogStore.open(tmp_path / "slave", slave_config()) as store:
        store.append_raw(0, data[:half])
        assert store._last_store_timestamp == 100
        store._last_store_timestamp = 0
        store._dispatched = 0  # as recovery: re-dispatch from a safe point
        store.append_raw(half, data[half:])
        assert store._last_store_timestamp == 95  # only the records dispatched now count
        assert store.max_queue_offset(second_topic, 0) == 5 if second_topic == "U" else 10
