"""Tests of hanet.store.CommitLogStore: puts, blank records, dispatch, slave replay, flushing."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from hanet.store import (
    CommitLogStore,
    FlushDiskType,
    Message,
    OffsetMismatchError,
    PutStatus,
    StoreClosedError,
    StoreConfig,
    StoreLayoutError,
    StoreLockedError,
    StoreRole,
    encode_record,
)
from hanet.store.lowlevel import (
    BLANK_MAGIC,
    CRC32_RESERVED_LEN,
    file_name,
    java_string_hash,
    parse_host,
    record_size,
)

# docs/protocol.md vector A (also in test_store_codec.py).
VECTOR_A = bytes.fromhex(
    "00000094daa320a769c865ed0000000300000000000000000000000700000000"
    "40001000000000000000018bcfe56800c0a8010a0000cfdb0000018bcfe5687b"
    "c0a8011400002a9f0000000000000000000000000000000e48656c6c6f20526f"
    "636b65744d5109546f706963546573740022544147530154616741024b455953"
    "016f726465722d34320257414954017472756502"
)

SMALL = StoreConfig(mapped_file_size=4096, consume_queue_file_size=200)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CommitLogStore]:
    with CommitLogStore.open(tmp_path / "store", SMALL) as opened:
        yield opened


def msg(body: bytes = b"hello", queue_id: int = 0, **properties: str) -> Message:
    return Message("TopicTest", body, queue_id=queue_id, properties=properties)


def test_put_assigns_offsets_and_dispatches(store: CommitLogStore) -> None:
    first = store.put(msg(b"a", TAGS="TagA", KEYS="k1"))
    second = store.put(msg(b"b", queue_id=1))
    third = store.put(msg(b"c"))
    assert [r.status for r in (first, second, third)] == [PutStatus.PUT_OK] * 3
    assert first.wrote_offset == 0
    assert second.wrote_offset == first.end_offset
    assert (first.queue_offset, second.queue_offset, third.queue_offset) == (0, 0, 1)
    assert first.msg_id == "7F00000100002A9F0000000000000000"
    assert store.max_offset == third.end_offset
    assert store.max_queue_offset("TopicTest", 0) == 2
    assert store.max_queue_offset("nope", 0) == 0
    assert store.queues() == [("TopicTest", 0), ("TopicTest", 1)]
    record = store.get_message("TopicTest", 0, 0)
    assert record is not None
    assert record.body == b"a"
    assert record.properties == {"TAGS": "TagA", "KEYS": "k1"}
    assert record.store_timestamp == first.store_timestamp
    assert store.consume_queue_entry("TopicTest", 0, 0) == (0, first.wrote_size, 2598919)
    assert [r.body for r in store.get_messages("TopicTest", 0, 0, 10)] == [b"a", b"c"]
    assert store.get_message("TopicTest", 0, 2) is None
    assert store.read(0, first.wrote_size) == encode_record(record)


def test_tag_codes_of_repeated_and_new_tags(store: CommitLogStore) -> None:
    """The consume queue's tag code is Java's hash of the tags, for a tag put before (the
    writer remembers codes) as for a new one, and 0 without tags."""
    tags = ["TagA", "TagB", "TagA", "", "TagA", "\u00e9t\u00e9"]
    results = store.put_batch([msg(b"x", TAGS=t) if t else msg(b"x") for t in tags])
    expected = [2598919, 2598920, 2598919, 0, 2598919, java_string_hash("\u00e9t\u00e9")]
    codes = []
    for result in results:
        entry = store.consume_queue_entry("TopicTest", 0, result.queue_offset)
        assert entry is not None
        codes.append(entry[2])
    assert codes == expected
    assert java_string_hash("TagB") == 2598920


def test_put_batch_and_listeners(store: CommitLogStore) -> None:
    seen: list[int] = []
    store.add_listener(seen.append)
    results = store.put_batch([msg(bytes([i]) * 100) for i in range(10)])
    assert all(r.ok for r in results)
    assert seen == [store.max_offset]
    store.put(msg())
    assert seen[-1] == store.max_offset
    store.remove_listener(seen.append)
    store.remove_listener(seen.append)
    store.put(msg())
    assert len(seen) == 2


def test_failing_listener_does_not_break_puts(store: CommitLogStore) -> None:
    def boom(offset: int) -> None:
        raise RuntimeError("bug")

    store.add_listener(boom)
    assert store.put(msg()).ok


@pytest.mark.parametrize(
    ("message", "status"),
    [
        (Message("bad/topic", b"x"), PutStatus.MESSAGE_ILLEGAL),
        (Message("", b"x"), PutStatus.MESSAGE_ILLEGAL),
        (Message("T" * 128, b"x"), PutStatus.MESSAGE_ILLEGAL),  # RocketMQ's limit is 127
        (Message("T" * 300, b"x"), PutStatus.MESSAGE_ILLEGAL),  # a directory name too long
        (Message("T\n", b"x"), PutStatus.MESSAGE_ILLEGAL),
        (Message("T", b"x", queue_id=-1), PutStatus.MESSAGE_ILLEGAL),
        (Message("T", b"x", born_host=b"12345"), PutStatus.MESSAGE_ILLEGAL),
        (Message("T", b"x" * 5000), PutStatus.MESSAGE_ILLEGAL),  # larger than a file
        (Message("T", b"x", properties={"K": "v" * 40000}), PutStatus.PROPERTIES_SIZE_EXCEEDED),
    ],
)
def test_rejected_puts_write_nothing(
    store: CommitLogStore, message: Message, status: PutStatus
) -> None:
    store.put(msg())
    before = store.max_offset
    result = store.put(message)
    assert result.status is status
    assert result.wrote_offset == -1
    assert result.detail
    assert store.max_offset == before


def test_body_over_max_message_size(tmp_path: Path) -> None:
    config = StoreConfig(mapped_file_size=1 << 20, max_message_size=1000)
    with CommitLogStore.open(tmp_path, config) as store:
        assert store.put(Message("T", b"x" * 1000)).ok
        assert store.put(Message("T", b"x" * 1001)).status is PutStatus.MESSAGE_ILLEGAL


def test_slave_and_closed_store_refuse_puts(tmp_path: Path) -> None:
    with CommitLogStore.open(tmp_path / "s", StoreConfig(role=StoreRole.SLAVE)) as slave:
        assert slave.put(msg()).status is PutStatus.SERVICE_NOT_AVAILABLE
    store = CommitLogStore.open(tmp_path / "m", SMALL)
    store.close()
    assert store.closed
    assert store.put(msg()).status is PutStatus.SERVICE_NOT_AVAILABLE
    with pytest.raises(StoreClosedError):
        store.append_raw(0, b"x")
    with pytest.raises(StoreClosedError):
        store.flush()


def _size(body_len: int) -> int:
    # + the whole-record CRC property every put record ends with
    return record_size(0, body_len, len("TopicTest"), CRC32_RESERVED_LEN)


def test_exactly_eight_bytes_left_then_blank(store: CommitLogStore) -> None:
    # A record that leaves exactly 8 bytes fits; the next one gets a blank record of 8.
    body_len = 4096 - 8 - _size(0)
    first = store.put(msg(b"x" * body_len))
    assert (first.wrote_offset, first.end_offset) == (0, 4088)
    second = store.put(msg(b""))
    assert second.wrote_offset == 4096
    assert store.read(4088, 100) == (8).to_bytes(4, "big") + BLANK_MAGIC.to_bytes(4, "big")
    assert store.dispatched_offset == store.max_offset


def test_record_that_would_fill_the_file_exactly_goes_to_the_next(store: CommitLogStore) -> None:
    store.put(msg(b"x"))
    used = store.max_offset
    result = store.put(msg(b"y" * (4096 - used - _size(0))))  # exactly the space left
    assert result.ok
    assert result.wrote_offset == 4096
    assert store.read(used, 8) == (4096 - used).to_bytes(4, "big") + bytes.fromhex("cbd43194")
    assert [r.body[:1] for r in store.get_messages("TopicTest", 0, 0)] == [b"x", b"y"]


def test_largest_record_fits_an_empty_file(store: CommitLogStore) -> None:
    assert store.put(msg(b"z" * (4096 - 8 - _size(0)))).ok
    assert store.put(msg(b"z" * (4096 - 7 - _size(0)))).status is PutStatus.MESSAGE_ILLEGAL


def test_vector_a_consume_queue_entry(tmp_path: Path) -> None:
    config = StoreConfig(mapped_file_size=0x1000, role=StoreRole.SLAVE)
    with CommitLogStore.open(tmp_path, config) as slave:
        slave.append_raw(0x40001000, VECTOR_A)
        assert slave.dispatch_error is None
        assert slave.min_offset == 0x40001000
        assert slave.max_queue_offset("TopicTest", 3) == 8
        assert slave.min_queue_offset("TopicTest", 3) == 7
        record = slave.get_message("TopicTest", 3, 7)
        assert record is not None
        assert record.body == b"Hello RocketMQ"
        assert slave.get_message("TopicTest", 3, 6) is None
    cq = (tmp_path / "consumequeue" / "TopicTest" / "3" / file_name(0)).read_bytes()
    assert len(cq) == 6_000_000
    assert cq[140:160] == bytes.fromhex("0000000040001000 00000094 000000000027a807")
    assert cq[:20] == bytes.fromhex("0000000000000000 7fffffff 0000000000000000")
    assert (tmp_path / "commitlog" / file_name(0x40001000)).stat().st_size == 0x1000
    with CommitLogStore.open(tmp_path, config) as again:  # the data start survives a reopen
        assert again.min_offset == 0x40001000
        assert again.max_offset == 0x40001000 + 148
        assert again.min_queue_offset("TopicTest", 3) == 7


def _fill_master(store: CommitLogStore, count: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    for i in range(count):
        body = rng.randbytes(rng.randrange(0, 700))
        tags = {"TAGS": f"t{i % 3}"} if i % 2 else {}
        assert store.put(Message(f"T{i % 2}", body, queue_id=i % 3, properties=tags)).ok


def test_slave_replay_gives_identical_files(tmp_path: Path) -> None:
    master = CommitLogStore.open(tmp_path / "m", SMALL)
    slave_config = StoreConfig(
        mapped_file_size=4096, consume_queue_file_size=200, role=StoreRole.SLAVE
    )
    slave = CommitLogStore.open(tmp_path / "s", slave_config)
    _fill_master(master, 60)
    rng = random.Random(2)
    offset = 0
    appended: list[int] = []
    slave.add_listener(appended.append)
    while offset < master.max_offset:
        data = master.read(offset, rng.randrange(1, 900))
        assert data
        slave.append_raw(offset, data)
        offset += len(data)
        assert slave.max_offset == offset
        assert slave.dispatched_offset <= offset
    assert appended[-1] == master.max_offset
    assert slave.dispatch_error is None
    assert slave.dispatched_offset == master.max_offset
    assert slave.queues() == master.queues()
    for topic, queue_id in master.queues():
        assert slave.max_queue_offset(topic, queue_id) == master.max_queue_offset(topic, queue_id)
    with pytest.raises(OffsetMismatchError):
        slave.append_raw(offset + 1, b"x")
    stats = slave.statistics()
    assert stats.raw_appended_bytes == master.max_offset
    master.close()
    slave.close()
    for name in ("commitlog", "consumequeue/T0/0", "consumequeue/T1/1"):
        master_files = sorted((tmp_path / "m" / name).iterdir())
        slave_files = sorted((tmp_path / "s" / name).iterdir())
        assert [p.name for p in master_files] == [p.name for p in slave_files]
        for a, b in zip(master_files, slave_files, strict=True):
            assert a.read_bytes() == b.read_bytes()


def test_slave_reports_first_invalid_record_and_stops(tmp_path: Path) -> None:
    master = CommitLogStore.open(tmp_path / "m", SMALL)
    results = [master.put(msg(bytes([i]) * 50)) for i in range(5)]
    data = bytearray(master.read(0, 4096))
    data[results[2].wrote_offset + 100] ^= 0xFF  # inside the third body
    slave = CommitLogStore.open(
        tmp_path / "s", StoreConfig(mapped_file_size=4096, role=StoreRole.SLAVE)
    )
    slave.append_raw(0, data[:10])
    assert slave.dispatched_offset == 0  # a partial record waits
    slave.append_raw(10, data[10:])
    error = slave.dispatch_error
    assert error is not None
    assert error.offset == results[2].wrote_offset
    assert "CRC" in error.reason
    assert slave.dispatched_offset == results[2].wrote_offset
    assert slave.max_queue_offset("TopicTest", 0) == 2
    assert slave.statistics().dispatch_error == (error.offset, error.reason)
    assert slave.dispatch() is error
    master.close()
    slave.close()


def test_second_open_is_refused(tmp_path: Path) -> None:
    with CommitLogStore.open(tmp_path, SMALL):
        with pytest.raises(StoreLockedError, match="in use"):
            CommitLogStore.open(tmp_path, SMALL)
        code = (
            "import sys; from pathlib import Path; from hanet.store import *\n"
            "try:\n"
            f"    CommitLogStore.open(Path({str(tmp_path)!r}))\n"
            "except StoreLockedError as e:\n"
            "    print(e); sys.exit(3)\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
        assert proc.returncode == 3, proc.stderr
        assert "in use by another process" in proc.stdout
    with CommitLogStore.open(tmp_path, SMALL):  # released on close
        pass


def test_wrong_file_size_is_refused(tmp_path: Path) -> None:
    with CommitLogStore.open(tmp_path, SMALL) as store:
        store.put(msg())
    with pytest.raises(StoreLayoutError, match="expected 8192"):
        CommitLogStore.open(tmp_path, StoreConfig(mapped_file_size=8192))
    with CommitLogStore.open(tmp_path, SMALL) as store:  # the failed open left no lock behind
        assert store.max_queue_offset("TopicTest", 0) == 1


def test_files_and_statistics(tmp_path: Path) -> None:
    store = CommitLogStore.open(tmp_path, SMALL)
    assert (tmp_path / "abort").exists()
    assert (tmp_path / "lock").exists()
    store.put(msg())
    stats = store.statistics()
    assert (stats.puts, stats.mapped_files, stats.consume_queues) == (1, 1, 1)
    assert stats.flushed_offset == 0
    assert not stats.recovered_abnormally
    assert store.flush() == store.max_offset
    store.close()
    store.close()
    assert not (tmp_path / "abort").exists()
    assert (tmp_path / "checkpoint").stat().st_size == 4096
    assert store.statistics().closed


async def test_sync_flush_group_commit(tmp_path: Path) -> None:
    config = StoreConfig(mapped_file_size=1 << 20, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    store = CommitLogStore.open(tmp_path, config)
    results: list[PutStatus] = []

    async def putter(i: int) -> None:
        for j in range(5):
            result = await store.put_async(Message("T", f"{i}-{j}".encode(), queue_id=i))
            results.append(result.status)
            assert store.flushed_offset >= result.end_offset

    async with trio.open_nursery() as nursery:
        for i in range(8):
            nursery.start_soon(putter, i)
    assert results == [PutStatus.PUT_OK] * 40
    assert store.statistics().flushes < 40
    batch = await store.put_batch_async([Message("T", b"x"), Message("bad topic", b"y")])
    assert [r.status for r in batch] == [PutStatus.PUT_OK, PutStatus.MESSAGE_ILLEGAL]
    assert store.flushed_offset == store.max_offset
    await store.aclose()
    with pytest.raises(StoreClosedError):
        await store.wait_flushed(store.max_offset + 1)


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
async def test_a_batch_whose_first_message_is_refused(tmp_path: Path, flush: FlushDiskType) -> None:
    """Each message of put_batch_async keeps its own answer, and under SYNC_FLUSH the stored
    ones are fsynced before it returns, whatever the first message's answer."""
    config = StoreConfig(mapped_file_size=1 << 20, flush_disk_type=flush)
    with CommitLogStore.open(tmp_path, config) as store:
        batch = await store.put_batch_async([Message("bad topic", b"y"), Message("T", b"x")])
        assert [r.status for r in batch] == [PutStatus.MESSAGE_ILLEGAL, PutStatus.PUT_OK]
        assert store.get_message("T", 0, 0) is not None
        if flush is FlushDiskType.SYNC_FLUSH:
            assert store.flushed_offset == store.max_offset == batch[1].end_offset


async def test_async_flusher_runs_in_a_nursery(tmp_path: Path) -> None:
    config = StoreConfig(mapped_file_size=1 << 20, flush_interval=0.02)
    store = CommitLogStore.open(tmp_path, config)
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        result = await store.put_async(msg())
        assert result.ok
        assert store.flushed_offset == 0
        for _ in range(500):
            if store.flushed_offset >= result.end_offset:
                break
            await trio.sleep(0.01)
        assert store.flushed_offset >= result.end_offset
        await store.aclose()
    assert store.closed


def test_ipv6_hosts(tmp_path: Path) -> None:
    config = StoreConfig(mapped_file_size=4096, store_host="[::1]:10911")
    with CommitLogStore.open(tmp_path, config) as store:
        born = parse_host("[2001:db8::7]:4321")
        result = store.put(Message("T", b"v6", born_host=born[0], born_port=born[1]))
        assert result.ok
        assert result.msg_id == "0" * 31 + "1" + "00002A9F" + "0" * 16
        record = store.get_message("T", 0, 0)
        assert record is not None
        assert record.sys_flag & 0x30 == 0x30
        assert record.born_address == "[2001:db8::7]:4321"
        assert record.store_address == "[::1]:10911"
        assert (
            result.wrote_size == record_size(0x30, 2, 1, CRC32_RESERVED_LEN) == 91 + 2 + 1 + 24 + 20
        )
