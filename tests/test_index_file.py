"""The index files (``index/``): RocketMQ 4.9.8's layout byte for byte, lookups by key and
unique key, collisions in a tiny slot table, new files when one is full, rollback with the
commit log, a key half-written by a kill undone at the next open, slaves building it."""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path
from typing import Any

import pytest
import trio

from hanet.store import CommitLogStore, Message, StoreConfig, StoreLayoutError, StoreRole
from hanet.store.lowlevel import IndexFile, index_file_size, index_key_hash, record_index_keys

FILE = 64 * 1024
END = 2**63 - 1


def java_hash(text: str) -> int:
    """Java's String.hashCode, written out again for the expected bytes."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (h * 31 + int.from_bytes(data[i : i + 2], "big")) % 2**32
    return h - 2**32 if h >= 2**31 else h


def spec_hash(key: str) -> int:
    h = java_hash(key)
    return 0 if h == -(2**31) else abs(h)


def config(slots: int = 8, entries: int = 32, **changes: Any) -> StoreConfig:
    return StoreConfig(
        mapped_file_size=FILE, max_hash_slot_num=slots, max_index_num=entries, **changes
    )


def message(
    keys: str = "", uniq: str | None = None, topic: str = "T", body: bytes = b"m"
) -> Message:
    properties = {}
    if keys:
        properties["KEYS"] = keys
    if uniq is not None:
        properties["UNIQ_KEY"] = uniq
    return Message(topic, body, properties=properties)


def offsets(store: CommitLogStore, key: str, topic: str = "T") -> list[int]:
    return store.query_index(topic, key, 64, 0, END)[0]


def test_key_hash_is_rocketmqs() -> None:
    assert java_hash("Aa") == java_hash("BB") == 2112
    assert java_hash("polygenelubricants") == -(2**31)
    assert index_key_hash("polygenelubricants") == 0  # abs(MIN_VALUE) stays negative in Java
    for key in ("T#k1", "TopicTest#\u00e9t\u00e9", "x#\U0001f600", "Topic#" + "z" * 40):
        assert index_key_hash(key) == spec_hash(key)
    assert index_file_size(5_000_000, 20_000_000) == 420_000_040
    keys = record_index_keys("T", {"KEYS": " a  b ", "UNIQ_KEY": "U", "TAGS": "t"})
    assert keys == ["T#U", "T#a", "T#b"]  # RocketMQ's order; empty keys skipped


def test_key_hash_of_every_width_of_text() -> None:
    """Java's hash of long keys and of every width of str (ASCII, Latin-1, the BMP, past it as
    surrogate pairs): what the extension computes, or the pure-Python loop without it."""
    texts = [
        "caf\u00e9",
        "\u65e5\u672c\u8a9e",
        "a\U0001f600b",
        "x" * 1030,
        "\u00ff" * 300 + "\U00010000",
        "K" * 5000 + "\u20ac",
    ]
    for text in texts:
        assert index_key_hash(text) == spec_hash(text)


def test_file_layout_byte_for_byte(tmp_path: Path) -> None:
    slots, entries = 4, 8
    with CommitLogStore.open(tmp_path, config(slots, entries)) as store:
        first = store.put(message("a b", "7F0000010A2B18B4AAC2000000000001"))
        second = store.put(message("a", None))
        third = store.put(message("", "U3", topic="Other"))
        store.put(message())  # no key: not indexed
        store.build_index()  # puts leave up to 256 KiB to the next batch
        (index_file,) = store.index.files if store.index else []
        path = index_file.path
    assert len(path.name) == 17 and path.name.isdigit()
    data = path.read_bytes()
    assert len(data) == 40 + 4 * slots + 20 * entries
    # The same file built from the spec: keys in RocketMQ's order (UNIQ_KEY, then KEYS).
    keys = [
        ("T#7F0000010A2B18B4AAC2000000000001", first),
        ("T#a", first),
        ("T#b", first),
        ("T#a", second),
        ("Other#U3", third),
    ]
    begin = first.store_timestamp
    expected_slots = [0] * slots
    body = bytearray(20 * entries)  # entry 0 stays empty
    used = 0
    for number, (key, put) in enumerate(keys, 1):
        h = spec_hash(key)
        previous = expected_slots[h % slots]
        used += previous == 0
        diff = (put.store_timestamp - begin) // 1000 if number > 1 else 0
        body[20 * number : 20 * number + 20] = struct.pack(
            ">iqii", h, put.wrote_offset, diff, previous
        )
        expected_slots[h % slots] = number
    header = struct.pack(
        ">qqqqii", begin, third.store_timestamp, 0, third.wrote_offset, used, len(keys) + 1
    )
    expected = header + struct.pack(f">{slots}i", *expected_slots) + bytes(body)
    assert data == expected
    # sparse: a new file takes its slot table (20 MB) on disk, not its 400 MB of entries
    big = IndexFile.create(tmp_path / "big", 5_000_000, 20_000_000)
    big.close()
    assert os.stat(tmp_path / "big").st_blocks * 512 < 21 * 1024 * 1024


def test_lookups_by_key_and_unique_key(tmp_path: Path) -> None:
    with CommitLogStore.open(tmp_path, config(slots=1, entries=64)) as store:  # one chain
        puts = [store.put(message(f"k{i % 3} all", f"U{i}")) for i in range(9)]
        assert offsets(store, "k1") == [puts[i].wrote_offset for i in (1, 4, 7)]
        assert offsets(store, "all") == [p.wrote_offset for p in puts]
        assert offsets(store, "U5") == [puts[5].wrote_offset]
        assert offsets(store, "k1", topic="Other") == []
        assert offsets(store, "missing") == []
        # maxNum, and the answer's index state
        found, stamp, last = store.query_index("T", "all", 4, 0, END)
        assert len(found) == 4 and found == [p.wrote_offset for p in puts[5:]]
        assert (stamp, last) == (puts[-1].store_timestamp, puts[-1].wrote_offset)
        # time range: nothing stored before the first put
        assert store.query_index("T", "all", 64, 0, puts[0].store_timestamp - 5000)[0] == []


def test_collisions_in_a_tiny_slot_table(tmp_path: Path) -> None:
    with CommitLogStore.open(tmp_path, config(slots=2, entries=64)) as store:
        aa = store.put(message("Aa"))
        bb = store.put(message("BB"))  # T#Aa and T#BB have the same hash: one slot, one chain
        others = [store.put(message(f"key{i}")) for i in range(10)]
        assert index_key_hash("T#Aa") == index_key_hash("T#BB")
        # the index matches by hash, as RocketMQ's: both (callers check the records)
        assert offsets(store, "Aa") == offsets(store, "BB") == [aa.wrote_offset, bb.wrote_offset]
        for i, put in enumerate(others):
            assert offsets(store, f"key{i}") == [put.wrote_offset]


def test_a_full_file_is_followed_by_a_new_one(tmp_path: Path) -> None:
    with CommitLogStore.open(tmp_path, config(slots=3, entries=4)) as store:  # 3 keys a file
        puts = [store.put(message(f"k{i} all")) for i in range(7)]
        store.build_index()
        assert store.index is not None
        files = store.index.files
        assert len(files) == 5 and [f.name for f in files] == sorted(f.name for f in files)
        assert all(f.count == 3 for f in files[:4]) and files[4].count == 2
        assert offsets(store, "all") == [p.wrote_offset for p in puts]
        assert offsets(store, "k3") == [puts[3].wrote_offset]
    with CommitLogStore.open(tmp_path, config(slots=3, entries=4)) as store:  # reopened
        assert offsets(store, "all") == [p.wrote_offset for p in puts]
        later = store.put(message("k3"))
        assert offsets(store, "k3") == [puts[3].wrote_offset, later.wrote_offset]


def test_other_sizes_than_configured_are_refused(tmp_path: Path) -> None:
    with CommitLogStore.open(tmp_path, config(slots=3, entries=4)) as store:
        store.put(message("k"))
    with pytest.raises(StoreLayoutError, match="maxHashSlotNum=8"):
        CommitLogStore.open(tmp_path, config(slots=8, entries=4))


def test_truncation_rolls_the_index_back(tmp_path: Path) -> None:
    with CommitLogStore.open(tmp_path, config(slots=4, entries=5, role=StoreRole.MASTER)) as store:
        puts = [store.put(message(f"k{i} all", f"U{i}")) for i in range(6)]
        cut = puts[3].wrote_offset
        store.truncate_to(cut)
        assert offsets(store, "all") == [p.wrote_offset for p in puts[:3]]
        assert offsets(store, "U4") == []
        again = store.put(message("k9 all"))
        assert again.wrote_offset == cut
        assert offsets(store, "all") == [p.wrote_offset for p in puts[:3]] + [cut]
        assert offsets(store, "k4") == []


def test_a_half_written_key_is_undone_at_open(tmp_path: Path) -> None:
    cfg = config(slots=1, entries=16)
    with CommitLogStore.open(tmp_path, cfg) as store:
        puts = [store.put(message(f"k{i}")) for i in range(3)]
        store.build_index()
        assert store.index is not None
        index_file = store.index.files[0]
        path = index_file.path
        header = path.read_bytes()[:40]
        index_file.put_key("T#ghost", 999_999, puts[-1].store_timestamp)
    # a kill between the slot and the header: the old header with the new entry and slot
    with path.open("r+b") as f:
        f.write(header)
    slot = struct.unpack(">i", path.read_bytes()[40:44])[0]
    assert slot == 4  # points at the uncounted entry
    with CommitLogStore.open(tmp_path, cfg) as store:
        assert struct.unpack(">i", path.read_bytes()[40:44])[0] == 3
        for i, put in enumerate(puts):
            assert offsets(store, f"k{i}") == [put.wrote_offset]
        assert offsets(store, "ghost") == []
        later = store.put(message("k0"))
        assert offsets(store, "k0") == [puts[0].wrote_offset, later.wrote_offset]


def test_keys_are_indexed_once_across_reopens(tmp_path: Path) -> None:
    cfg = config(slots=8, entries=64)
    with CommitLogStore.open(tmp_path, cfg) as store:
        put = store.put(message("a b c", "U"))
    for _ in range(2):
        with CommitLogStore.open(tmp_path, cfg) as store:
            assert store.index is not None
            assert store.index.files[0].count == 4
            assert offsets(store, "c") == [put.wrote_offset]


def test_an_index_is_built_for_a_store_that_had_none(tmp_path: Path) -> None:
    with CommitLogStore.open(tmp_path, config(message_index_enable=False)) as store:
        puts = [store.put(message(f"k{i}")) for i in range(3)]
        assert store.index is None and offsets(store, "k1") == []
    assert not (tmp_path / "index").exists()
    with CommitLogStore.open(tmp_path, config()) as store:
        assert offsets(store, "k1") == [puts[1].wrote_offset]


def test_a_slave_builds_the_index_from_replicated_bytes(tmp_path: Path) -> None:
    with CommitLogStore.open(tmp_path / "m", config()) as master:
        puts = [master.put(message(f"k{i}", f"U{i}")) for i in range(20)]
        data = master.read(0, master.max_offset)
    with CommitLogStore.open(tmp_path / "s", config(role=StoreRole.SLAVE)) as slave:
        slave.append_raw(0, data[:1000], dispatch=False)
        slave.dispatch()
        slave.append_raw(1000, data[1000:])
        assert offsets(slave, "k7") == [puts[7].wrote_offset]
        assert offsets(slave, "U19") == [puts[19].wrote_offset]


def test_keys_of_an_interrupted_batch_are_undone_at_open(tmp_path: Path) -> None:
    cfg = config(slots=2, entries=32)
    with CommitLogStore.open(tmp_path, cfg) as store:
        puts = [store.put(message(f"k{i} all")) for i in range(3)]
        store.build_index()
        assert store.index is not None
        index_file = store.index.files[0]
        path = index_file.path
        header = path.read_bytes()[:40]
        stamp = puts[-1].store_timestamp
        ghosts = [(index_key_hash(f"T#ghost{i}"), 10**6 + i, stamp) for i in range(5)]
        assert index_file.put_keys(ghosts) == 5
    with path.open("r+b") as f:  # killed before the header: the old one, slots moved on
        f.write(header)
    with CommitLogStore.open(tmp_path, cfg) as store:
        assert offsets(store, "all") == [p.wrote_offset for p in puts]
        assert all(offsets(store, f"ghost{i}") == [] for i in range(5))
        later = store.put(message("all"))
        assert offsets(store, "all") == [p.wrote_offset for p in puts] + [later.wrote_offset]


def test_a_torn_last_file_is_built_again(tmp_path: Path) -> None:
    cfg = config(slots=4, entries=4)  # 3 keys a file
    with CommitLogStore.open(tmp_path, cfg) as store:
        puts = [store.put(message(f"k{i}")) for i in range(5)]
        store.build_index()
        assert store.index is not None
        path = store.index.files[-1].path
    data = bytearray(path.read_bytes())
    data[24:32] = (123_456).to_bytes(8, "big")  # endPhyOffset of pages that never hit the disk
    path.write_bytes(bytes(data))
    with CommitLogStore.open(tmp_path, cfg) as store:
        for i, put in enumerate(puts):
            assert offsets(store, f"k{i}") == [put.wrote_offset]


def test_a_file_with_a_damaged_header_is_built_again(tmp_path: Path) -> None:
    cfg = config(slots=4, entries=4)  # 3 keys a file
    with CommitLogStore.open(tmp_path, cfg) as store:
        puts = [store.put(message(f"k{i}")) for i in range(8)]
        store.build_index()
        assert store.index is not None and len(store.index.files) == 3
        path = store.index.files[1].path
    data = bytearray(path.read_bytes())
    data[36:40] = (9_999).to_bytes(4, "big")  # indexCount past what the file holds
    path.write_bytes(bytes(data))
    with CommitLogStore.open(tmp_path, cfg) as store:  # opens; the keys are indexed again
        for i, put in enumerate(puts):
            assert offsets(store, f"k{i}") == [put.wrote_offset]


def test_expired_files_are_deleted_below_a_new_minimum_offset(tmp_path: Path) -> None:
    with CommitLogStore.open(tmp_path, config(slots=3, entries=3)) as store:  # 2 keys a file
        puts = [store.put(message(f"k{i}")) for i in range(6)]
        store.build_index()
        assert store.index is not None and len(store.index.files) == 3
        assert store.index.delete_expired(puts[3].wrote_offset) == 1  # keys of records 0 and 1
        assert [f.header.begin_phy_offset for f in store.index.files] == [
            puts[2].wrote_offset,
            puts[4].wrote_offset,
        ]
        assert offsets(store, "k0") == [] and offsets(store, "k5") == [puts[5].wrote_offset]
        assert store.index.delete_expired(2**62) == 1  # never the newest
        assert offsets(store, "k5") == [puts[5].wrote_offset]


def test_an_empty_file_left_by_a_kill_is_deleted(tmp_path: Path) -> None:
    with CommitLogStore.open(tmp_path, config()) as store:
        put = store.put(message("k"))
    (tmp_path / "index" / "29991231235959999").touch()  # os.open done, ftruncate not yet
    with CommitLogStore.open(tmp_path, config()) as store:
        assert offsets(store, "k") == [put.wrote_offset]
    assert not (tmp_path / "index" / "29991231235959999").exists()


def test_puts_index_in_batches_and_the_flusher_catches_up(tmp_path: Path) -> None:
    cfg = config(slots=64, entries=10_000, flush_interval=0.05)
    with CommitLogStore.open(tmp_path, cfg) as store:
        assert store.index is not None
        first = store.put(message("k0", body=b"x" * 1000))
        assert store.index.indexed_offset == 0  # left for a batch
        puts = [first] + [store.put(message(f"k{i}", body=b"x" * 1000)) for i in range(1, 600)]
        assert 0 < store.index.indexed_offset < store.max_offset  # 256 KiB at a time
        assert store.max_offset - store.index.indexed_offset < 256 * 1024 + 2048

        async def flusher() -> None:
            async with trio.open_nursery() as nursery:
                await nursery.start(store.run)
                with trio.fail_after(10):
                    while store.index is not None and store.index.indexed_offset < store.max_offset:  # noqa: ASYNC110 - polls the flusher
                        await trio.sleep(0.01)
                nursery.cancel_scope.cancel()

        trio.run(flusher)
        for i in (0, 299, 599):
            assert store.index.query("T", f"k{i}", 32, 0, END)[0] == [puts[i].wrote_offset]


def test_an_index_the_disk_cannot_take_catches_up_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    put_keys = IndexFile.put_keys

    def full(self: IndexFile, keys: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    with CommitLogStore.open(tmp_path, config()) as store:
        first = store.put(message("a"))
        monkeypatch.setattr(IndexFile, "put_keys", full)
        later = [store.put(message(f"k{i}")) for i in range(3)]
        assert all(p.ok for p in later)  # puts go on
        assert offsets(store, "k1") == []  # not indexed yet
        assert store.index is not None and "No space left" in (store.index.error or "")
        assert sum("cannot write the index" in r.message for r in caplog.records) == 1
        monkeypatch.setattr(IndexFile, "put_keys", put_keys)
        assert offsets(store, "a") == [first.wrote_offset]
        assert offsets(store, "k1") == [later[1].wrote_offset]
        assert store.index.error is None


def test_only_the_keys_and_unique_key_properties_are_keys(tmp_path: Path) -> None:
    with CommitLogStore.open(tmp_path, config()) as store:
        props = {"XKEYS": "nope", "KEYS": "yes too", "MY_UNIQ_KEY": "no", "UNIQ_KEY": "U1"}
        put = store.put(Message("T", b"m", properties=props))
        rollback = Message("T", b"r", properties={"KEYS": "rolled"}, sys_flag=0xC)
        assert store.put(rollback).ok
        for key in ("yes", "too", "U1"):
            assert offsets(store, key) == [put.wrote_offset]
        for key in ("nope", "no", "rolled"):  # a rolled-back transaction's keys are not indexed
            assert offsets(store, key) == []


def test_a_new_files_slot_table_gets_its_blocks_at_once(tmp_path: Path) -> None:
    """One ``posix_fallocate`` at creation (not a read and write of each page a key reaches
    first): the slot table takes its blocks before any key, the entries stay sparse."""
    slots, entries = 64 * 1024, 1024
    path = tmp_path / "index"
    index_file = IndexFile.create(path, slots, entries)
    try:
        table = 40 + 4 * slots
        assert os.stat(path).st_blocks * 512 >= table
        assert os.stat(path).st_blocks * 512 < index_file_size(slots, entries)
        keys = [(index_key_hash(f"T#k{i}"), 100 * i, 1_000 + i) for i in range(300)]
        assert index_file.put_keys(keys) == 300
        assert index_file.header.index_count == 301
        previous = 0
        for number in range(1, 301):
            key_hash, phy, _, _ = index_file.entry(number)
            assert (key_hash, phy) == keys[number - 1][:2]
            previous = number
        assert previous == 300
    finally:
        index_file.close()


def test_without_posix_fallocate_slot_pages_are_reserved_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file system (or a full disk) that refuses ``posix_fallocate``: the file is made all
    the same and each page of the slot table gets its blocks when a key first reaches it."""

    def refused(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(os, "posix_fallocate", refused)
    slots, entries = 64 * 1024, 1024
    path = tmp_path / "index"
    index_file = IndexFile.create(path, slots, entries)
    try:
        assert os.stat(path).st_blocks * 512 < 40 + 4 * slots  # sparse
        writes: list[int] = []
        pwrite = os.pwrite

        def counted(fd: int, data: Any, at: int) -> int:
            writes.append(at)
            return pwrite(fd, data, at)

        monkeypatch.setattr(os, "pwrite", counted)
        assert index_file.put_keys([(index_key_hash("T#a"), 7, 1_000)]) == 1
        # the entries, the slot's page (read and written back), the header
        assert len(writes) == 3
        key_hash = index_key_hash("T#a")
        slot_at = 40 + (key_hash % slots) * 4
        assert slot_at - slot_at % os.sysconf("SC_PAGE_SIZE") in writes
    finally:
        index_file.close()
    with CommitLogStore.open(tmp_path / "store", config()) as store:
        first = store.put(message("a"))
        assert offsets(store, "a") == [first.wrote_offset]


def test_index_files_are_fsynced_every_index_flush_interval_and_at_every_explicit_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``index_flush_interval``: the periodic flush fsyncs the commit log and queues every
    time, the index files only once that long has passed; ``flush()`` and close always."""
    fsynced: list[str] = []
    flush = IndexFile.flush

    def counted(self: IndexFile) -> None:
        fsynced.append(self.path.name)
        flush(self)

    monkeypatch.setattr(IndexFile, "flush", counted)
    clock = [1000.0]
    monkeypatch.setattr("hanet.store._store.time.monotonic", lambda: clock[0])
    cfg = config(flush_interval=0.05, index_flush_interval=10.0)
    with CommitLogStore.open(tmp_path, cfg) as store:
        put = store.put(message("a"))
        assert offsets(store, "a") == [put.wrote_offset]  # indexed now
        store._flush_if_open()  # the periodic flush, 0 s after the open
        assert fsynced == []
        clock[0] += 9.9
        store._flush_if_open()
        assert fsynced == []
        clock[0] += 0.2
        store._flush_if_open()  # 10.1 s: due
        assert len(fsynced) == 1
        store._flush_if_open()  # due again only 10 s later
        assert len(fsynced) == 1
        store.flush()  # explicit: always
        assert len(fsynced) == 2
    assert len(fsynced) == 3  # at close
    with pytest.raises(ValueError):
        config(index_flush_interval=0)


def test_without_index_flush_interval_every_periodic_flush_fsyncs_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsynced: list[str] = []
    flush = IndexFile.flush

    def counted(self: IndexFile) -> None:
        fsynced.append(self.path.name)
        flush(self)

    monkeypatch.setattr(IndexFile, "flush", counted)
    with CommitLogStore.open(tmp_path, config(flush_interval=0.05)) as store:
        store.put(message("a"))
        offsets(store, "a")  # indexed now
        store._flush_if_open()
        store._flush_if_open()
        assert len(fsynced) == 2
