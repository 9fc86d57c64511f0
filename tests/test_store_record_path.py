"""The record path of the store: the next file is made ahead of need (off the put and raw
append path), and a slave's dispatch does not check body CRCs its validation just checked."""

from __future__ import annotations

import errno
import os
import random
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel

from hanet.store import CommitLogStore, Message, PutStatus, StoreConfig, StoreRole
from hanet.store.lowlevel import MappedFileQueue, file_name, list_mapped_files, scan_index_windows
from hanet.testing import wait_until

FILE = 256 * 1024
BODY = b"x" * 1000
CONFIG = StoreConfig(mapped_file_size=FILE, consume_queue_file_size=6000, flush_interval=0.05)


@contextmanager
def full_disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """``os.posix_fallocate`` fails with ENOSPC; yields the paths it refused."""
    refused: list[str] = []

    def fallocate(fd: int, offset: int, length: int) -> None:
        refused.append(os.readlink(f"/proc/self/fd/{fd}"))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(os, "posix_fallocate", fallocate)
        yield refused


def put_until(store: CommitLogStore, offset: int, queue_id: int = 0) -> None:
    while store.max_offset < offset:
        assert store.put(Message("T", BODY, queue_id=queue_id)).ok


async def wait_ready(files: MappedFileQueue) -> None:
    await wait_until(lambda: files.ready_next is not None, seconds=10)


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# -- preallocation -----------------------------------------------------------------------------


async def test_the_next_file_is_made_before_a_put_needs_it(tmp_path: Path) -> None:
    store = CommitLogStore.open(tmp_path, CONFIG)
    commit_log = store.commit_log
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        await wait_ready(commit_log)  # a master's first file, before any put
        assert names(tmp_path / "commitlog") == [file_name(0) + ".next"]
        put_until(store, FILE // 4)
        await trio.sleep(0.2)
        assert commit_log.ready_next is None  # not yet: the file is a quarter full
        put_until(store, FILE // 2 + 1)
        await wait_ready(commit_log)
        assert names(tmp_path / "commitlog") == [file_name(0), file_name(FILE) + ".next"]
        assert [start for start, _ in list_mapped_files(tmp_path / "commitlog")] == [0]
        assert store.max_offset < FILE  # made ahead of need
        put_until(store, FILE + 1)  # crosses into the second file
        assert commit_log.created == 2 and commit_log.taken_ready == 2  # the first one too
        assert names(tmp_path / "commitlog") == [file_name(0), file_name(FILE)]
        put_until(store, FILE + FILE // 2 + 1)
        await wait_ready(commit_log)  # and the third one, once the second is half full
        put_until(store, 2 * FILE + 1)
        assert commit_log.created == 3 and commit_log.taken_ready == 3
        store.close()
    reopened = CommitLogStore.open(tmp_path, CONFIG)
    assert reopened.max_offset == store.max_offset
    reopened.close()


async def test_a_slave_append_crossing_into_a_file_takes_the_ready_one(tmp_path: Path) -> None:
    master = CommitLogStore.open(tmp_path / "master", CONFIG)
    put_until(master, 2 * FILE + 1)
    slave = CommitLogStore.open(
        tmp_path / "slave",
        StoreConfig(mapped_file_size=FILE, flush_interval=0.05, role=StoreRole.SLAVE),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(slave.run)
        offset = 0
        while offset < master.max_offset:
            data = master.read(offset, 32 * 1024)
            slave.append_raw(offset, data, dispatch=False)
            slave.dispatch()
            offset += len(data)
            await trio.lowlevel.checkpoint()
            if offset % FILE > FILE // 2:
                await wait_ready(slave.commit_log)
        assert slave.commit_log.created == 3 and slave.commit_log.taken_ready == 2
        assert slave.max_queue_offset("T", 0) == master.max_queue_offset("T", 0)
        slave.close()
    master.close()


async def test_consume_queue_files_are_made_ahead_too(tmp_path: Path) -> None:
    store = CommitLogStore.open(tmp_path, CONFIG)
    queue_dir = tmp_path / "consumequeue" / "T" / "0"
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        for _ in range(275):  # 300 entries a file: past 90 %
            assert store.put(Message("T", b"m", queue_id=0)).ok
        await wait_until(lambda: file_name(6000) + ".next" in names(queue_dir), seconds=10)
        for _ in range(30):
            assert store.put(Message("T", b"m", queue_id=0)).ok
        assert names(queue_dir) == [file_name(0), file_name(6000)]
        store.close()
    assert store.max_queue_offset("T", 0) == 305


async def test_close_deletes_a_ready_file_and_recovery_is_unchanged(tmp_path: Path) -> None:
    store = CommitLogStore.open(tmp_path, CONFIG)
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        put_until(store, FILE // 2 + 1)
        await wait_ready(store.commit_log)
        end = store.max_offset
        store.close()
    assert names(tmp_path / "commitlog") == [file_name(0)]
    reopened = CommitLogStore.open(tmp_path, CONFIG)
    assert reopened.max_offset == end and reopened.max_queue_offset("T", 0) > 0
    assert reopened.recovery.end_offset == end
    reopened.close()


async def test_a_crash_with_a_ready_file_recovers(tmp_path: Path) -> None:
    """A process killed with a preallocated file: its ``.next`` file is left and removed at the
    next open (it never was part of the log)."""
    store = CommitLogStore.open(tmp_path / "live", CONFIG)
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        put_until(store, FILE + FILE // 2 + 1)
        await wait_ready(store.commit_log)
        end = store.max_offset
        queued = store.max_queue_offset("T", 0)
        store.commit_log.flush()
        # What a kill leaves: the files as they are, abort present, no clean checkpoint.
        shutil.copytree(tmp_path / "live", tmp_path / "crashed")
        nursery.cancel_scope.cancel()
    store.close()
    crashed = tmp_path / "crashed"
    assert (crashed / "abort").exists()
    assert file_name(2 * FILE) + ".next" in names(crashed / "commitlog")
    recovered = CommitLogStore.open(crashed, CONFIG)
    assert recovered.recovery.end_offset == end and recovered.max_offset == end
    assert recovered.max_queue_offset("T", 0) == queued
    assert names(crashed / "commitlog") == [file_name(0), file_name(FILE)]
    put_until(recovered, 2 * FILE + 1)
    recovered.close()


@pytest.mark.parametrize("abnormal", [False, True])
def test_recovery_accepts_a_trailing_all_zero_file(tmp_path: Path, abnormal: bool) -> None:
    """RocketMQ leaves an empty next file; such a file (all zeros, real name) is no data."""
    store = CommitLogStore.open(tmp_path, CONFIG)
    put_until(store, FILE + 100)
    end = store.max_offset
    store.close()
    (tmp_path / "commitlog" / file_name(2 * FILE)).write_bytes(bytes(FILE))
    if abnormal:
        (tmp_path / "abort").touch()
    reopened = CommitLogStore.open(tmp_path, CONFIG)
    assert reopened.max_offset == end
    assert reopened.recovery.data_after is None
    assert [s for s, _ in list_mapped_files(tmp_path / "commitlog")] == [0, FILE]
    put_until(reopened, 2 * FILE + 1)  # the next file is made again where it belongs
    reopened.close()


def test_truncating_or_clearing_drops_a_ready_file_that_no_longer_follows(tmp_path: Path) -> None:
    files = MappedFileQueue(tmp_path, 4096)
    files.append_raw(0, b"a" * 5000)  # files 0 and 4096
    start = files.begin_next(0.0)
    assert start == 8192 and files.begin_next(0.0) is None  # one at a time
    assert files.allocate_next(start)
    assert files.end_next()
    assert names(tmp_path) == [file_name(0), file_name(4096), file_name(8192) + ".next"]
    files.truncate(4500)  # the last file stays: the ready one still follows it
    assert names(tmp_path) == [file_name(0), file_name(4096), file_name(8192) + ".next"]
    files.truncate(100)  # now it does not
    assert names(tmp_path) == [file_name(0)]
    assert files.ready_next is None
    assert files.allocate_next(files.begin_next(0.0) or -1) and files.end_next()
    files.delete_all()  # (a resync)
    assert names(tmp_path) == []
    files.append_raw(8192, b"b")  # an empty queue starts anywhere
    assert files.begin_next(0.0) == 12288
    files.close()


def test_a_write_waits_for_the_file_a_worker_is_making(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk never holds the same file reserved twice (a small disk would refuse the
    second reservation): a write that needs the file being made waits for it."""
    files = MappedFileQueue(tmp_path, 4096)
    files.append_raw(0, b"a" * 4000)
    real = os.posix_fallocate
    entered, release = threading.Event(), threading.Event()
    reserved: list[str] = []

    def fallocate(fd: int, offset: int, length: int) -> None:
        reserved.append(os.readlink(f"/proc/self/fd/{fd}"))
        entered.set()
        release.wait(10)
        real(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", fallocate)
    start = files.begin_next(0.5)
    assert start == 4096
    worker = threading.Thread(target=files.allocate_next, args=(start,))
    worker.start()
    assert entered.wait(10)
    threading.Timer(0.1, release.set).start()
    files.append_raw(4000, b"b" * 200)  # needs file 4096: waits for the worker's
    worker.join()
    assert len(reserved) == 1 and files.taken_ready == 1 and files.created == 2
    assert not files.end_next()  # taken already: nothing left to keep
    assert names(tmp_path) == [file_name(0), file_name(4096)]
    files.close()


def test_a_worker_not_started_yet_makes_nothing(tmp_path: Path) -> None:
    files = MappedFileQueue(tmp_path, 4096)
    files.append_raw(0, b"a" * 4000)
    start = files.begin_next(0.5)
    assert start is not None
    files.append_raw(4000, b"b" * 200)  # made by the write itself
    assert not files.allocate_next(start)  # no longer wanted
    assert not files.end_next()
    assert files.created == 2 and files.taken_ready == 0
    assert names(tmp_path) == [file_name(0), file_name(4096)]
    files.close()


async def test_a_failed_preallocation_leaves_the_put_to_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CommitLogStore.open(tmp_path, CONFIG)
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        put_until(store, 1)  # the first file exists (and the first consume queue file)
        with full_disk(monkeypatch) as refused:
            put_until(store, FILE - 2000)
            await wait_until(lambda: any(p.endswith(".next.creating") for p in refused), seconds=10)
            await trio.sleep(0.1)  # the store goes on
            assert store.commit_log.ready_next is None
            assert not [n for n in names(tmp_path / "commitlog") if n != file_name(0)]
            results = [store.put(Message("T", BODY)) for _ in range(3)]
            assert results[-1].status is PutStatus.CREATE_MAPPED_FILE_FAILED
            assert file_name(FILE) in results[-1].detail
            assert store.statistics().create_error is not None
        await trio.sleep(0.2)
        result = store.put(Message("T", BODY))
        assert result.ok
        assert store.statistics().create_error is None
        store.close()


def test_a_store_without_run_creates_files_itself(tmp_path: Path) -> None:
    store = CommitLogStore.open(tmp_path, CONFIG)
    put_until(store, 2 * FILE + 1)
    assert store.commit_log.created == 3 and store.commit_log.taken_ready == 0
    store.close()


def test_the_preallocate_at_setting() -> None:
    assert StoreConfig().preallocate_at == 0.5
    assert StoreConfig(preallocate_at=None).preallocate_at is None
    with pytest.raises(ValueError, match="preallocate_at"):
        StoreConfig(preallocate_at=1.5)


async def test_without_preallocation_run_makes_no_file(tmp_path: Path) -> None:
    store = CommitLogStore.open(tmp_path, StoreConfig(mapped_file_size=FILE, preallocate_at=None))
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        put_until(store, FILE - 2000)
        await trio.sleep(0.2)
        assert store.commit_log.ready_next is None
        store.close()


# -- a slave's dispatch does not check CRCs again --------------------------------------------------


def master_log(root: Path, count: int = 600) -> CommitLogStore:
    master = CommitLogStore.open(root, StoreConfig(mapped_file_size=64 * 1024))
    for i in range(count):
        body = bytes([i % 251]) * (50 + (i * 37) % 700)
        assert master.put(Message(f"T{i % 3}", body, queue_id=i % 4)).ok
    return master


def replay(master: CommitLogStore, slave: CommitLogStore, sizes: Iterator[int]) -> None:
    offset = 0
    while offset < master.max_offset:
        data = master.read(offset, next(sizes))
        slave.append_raw(offset, data, dispatch=False)
        assert slave.max_offset == offset + len(data)
        offset += len(data)
        if next(sizes) % 3 == 0:
            slave.dispatch()
    assert slave.dispatch() is None


def copy_raw(master: CommitLogStore, slave: CommitLogStore, until: int, step: int) -> None:
    """Append the master's bytes from the slave's end to ``until``, ``step`` bytes a time,
    undispatched."""
    offset = slave.max_offset
    while offset < until:
        data = master.read(offset, step)
        slave.append_raw(offset, data, dispatch=False)
        offset += len(data)


def catch_up(master: CommitLogStore, slave: CommitLogStore, step: int) -> None:
    """The rest of the master's log, then one dispatch: the slave's queues are the master's."""
    copy_raw(master, slave, master.max_offset, step)
    assert slave.dispatch() is None
    same_queues(master, slave)


def same_queues(master: CommitLogStore, slave: CommitLogStore) -> None:
    assert slave.queues() == master.queues()
    for topic, queue_id in master.queues():
        high = master.max_queue_offset(topic, queue_id)
        assert slave.max_queue_offset(topic, queue_id) == high
        for q in range(high):
            assert slave.consume_queue_entry(topic, queue_id, q) == master.consume_queue_entry(
                topic, queue_id, q
            )
    assert slave.dispatched_offset == master.max_offset


def counting_scans(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """``(bytes, check_crc)`` of each scan the store's dispatch makes (``scan_windows``)."""
    scanned: list[tuple[int, bool]] = []

    def scan_windows(buf: memoryview, start: int, end: int, *args: Any, **flags: Any) -> object:
        scanned.append((end - start, bool(flags.get("check_crc", True))))
        return scan_index_windows(buf, start, end, *args, **flags)

    monkeypatch.setattr("hanet.store._dispatch.scan_windows", scan_windows)
    return scanned


@pytest.mark.parametrize("step", [997, 4096, 20000, 64 * 1024])
def test_dispatch_does_not_check_crcs_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: int
) -> None:
    master = master_log(tmp_path / "master")
    scanned = counting_scans(monkeypatch)
    slave = CommitLogStore.open(
        tmp_path / "slave", StoreConfig(mapped_file_size=64 * 1024, role=StoreRole.SLAVE)
    )
    sizes = iter(lambda: step, None)
    replay(master, slave, sizes)
    same_queues(master, slave)
    assert scanned and not [crc for _, crc in scanned if crc]
    assert sum(size for size, _ in scanned) <= master.max_offset  # each byte read once
    slave.close()
    master.close()


def test_dispatch_after_a_restart(tmp_path: Path) -> None:
    """A reopened store dispatches what recovery walked (and checked) as before."""
    master = master_log(tmp_path / "master")
    config = StoreConfig(mapped_file_size=64 * 1024, role=StoreRole.SLAVE)
    slave = CommitLogStore.open(tmp_path / "slave", config)
    copy_raw(master, slave, master.max_offset // 2, 3000)
    slave.close()  # dispatches what it holds first
    slave = CommitLogStore.open(tmp_path / "slave", config)
    catch_up(master, slave, 5000)  # from its max offset (a partial record was dropped at close)
    slave.close()
    master.close()


def test_dispatch_after_a_truncation(tmp_path: Path) -> None:
    master = master_log(tmp_path / "master")
    slave = CommitLogStore.open(
        tmp_path / "slave", StoreConfig(mapped_file_size=64 * 1024, role=StoreRole.SLAVE)
    )
    data = master.read(0, 30000)
    slave.append_raw(0, data, dispatch=False)
    assert slave.validated_offset < slave.max_offset  # a partial record at the end
    slave.truncate_to(slave.validated_offset)  # (what a slave does on a new connection)
    entry = master.consume_queue_entry("T1", 1, 2)
    assert entry is not None and entry[0] < slave.validated_offset
    slave.truncate_to(entry[0])  # and at an earlier record (a slave dropping what it held)
    catch_up(master, slave, 7000)
    slave.close()
    master.close()


def test_random_transfers_dispatch_as_the_master(tmp_path: Path) -> None:
    master = master_log(tmp_path / "master", 900)
    rng = random.Random(7)
    for run in range(3):
        slave = CommitLogStore.open(
            tmp_path / f"slave{run}",
            StoreConfig(mapped_file_size=64 * 1024, role=StoreRole.SLAVE),
        )
        replay(master, slave, iter(lambda: rng.randint(1, 9000), None))
        same_queues(master, slave)
        slave.close()
    master.close()
