"""Making mapped files: reserved on the disk but not faulted in (RocketMQ's default,
``warmMapedFileEnable=false``), a master's first commit log file made ahead of the first put,
and the full-disk guarantee kept (a file the disk cannot hold is refused, never mapped)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import trio

from hanet.store import CommitLogStore, Message, PutStatus, StoreConfig, StoreRole
from hanet.store.lowlevel import MappedFile, MappedFileQueue, file_name
from hanet.testing import wait_until

FILE = 4 * 1024 * 1024
CONFIG = StoreConfig(mapped_file_size=FILE, consume_queue_file_size=6000, flush_interval=0.05)


def resident_kib(path: Path) -> int:
    """Kilobytes of this process's mappings of ``path`` that are in memory (smaps ``Rss``)."""
    total = 0
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            first = line.split(maxsplit=1)[0]
            if "-" in first and not first.endswith(":"):  # a mapping's header line
                inside = line.rstrip("\n").endswith(" " + str(path))
            elif inside and first == "Rss:":
                total += int(line.split()[1])
    return total


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_a_new_file_is_reserved_but_not_faulted_in(tmp_path: Path) -> None:
    path = tmp_path / file_name(0)
    mapped = MappedFile.create(path, 0, FILE, warm=False)
    try:
        assert os.stat(path).st_blocks * 512 >= FILE  # every block reserved
        assert resident_kib(path) == 0
        mapped.view[:5] = b"hello"
        assert 0 < resident_kib(path) < 64  # the page written, not the file
    finally:
        mapped.delete()


def test_a_warm_file_is_faulted_in_whole(tmp_path: Path) -> None:
    path = tmp_path / file_name(0)
    mapped = MappedFile.create(path, 0, FILE)
    try:
        assert resident_kib(path) == FILE // 1024
    finally:
        mapped.delete()


def test_files_are_not_pre_faulted_by_default(tmp_path: Path) -> None:
    assert StoreConfig().warm_mapped_files is False
    store = CommitLogStore.open(tmp_path, CONFIG)
    assert store.put(Message("T", b"x" * 1000)).ok
    path = tmp_path / "commitlog" / file_name(0)
    assert resident_kib(path) < 64
    assert resident_kib(tmp_path / "consumequeue" / "T" / "0" / file_name(0)) < 64
    store.close()


async def test_a_master_makes_its_first_file_before_the_first_put(tmp_path: Path) -> None:
    store = CommitLogStore.open(tmp_path, CONFIG)
    commit_log = store.commit_log
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        await wait_until(lambda: commit_log.ready_next is not None, seconds=10)
        assert names(tmp_path / "commitlog") == [file_name(0) + ".next"]
        assert resident_kib(tmp_path / "commitlog" / (file_name(0) + ".next")) == 0
        assert store.max_offset == 0 and not commit_log.files  # still no data
        assert store.put(Message("T", b"x" * 1000)).ok
        assert commit_log.created == 1 and commit_log.taken_ready == 1
        assert names(tmp_path / "commitlog") == [file_name(0)]
        assert resident_kib(tmp_path / "commitlog" / file_name(0)) < 64
        store.close()
    reopened = CommitLogStore.open(tmp_path, CONFIG)
    assert reopened.max_queue_offset("T", 0) == 1
    reopened.close()


async def test_closing_an_empty_store_removes_its_ready_first_file(tmp_path: Path) -> None:
    store = CommitLogStore.open(tmp_path, CONFIG)
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        await wait_until(lambda: store.commit_log.ready_next is not None, seconds=10)
        await store.aclose()
    assert names(tmp_path / "commitlog") == []
    reopened = CommitLogStore.open(tmp_path, CONFIG)
    assert reopened.max_offset == 0 and not reopened.commit_log.files
    reopened.close()


async def test_a_slave_makes_no_first_file_ahead(tmp_path: Path) -> None:
    """A slave's first file starts where the master's data does: unknown until it comes."""
    store = CommitLogStore.open(
        tmp_path, StoreConfig(mapped_file_size=FILE, flush_interval=0.05, role=StoreRole.SLAVE)
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        await trio.sleep(0.2)
        assert store.commit_log.ready_next is None
        assert not (tmp_path / "commitlog").exists() or names(tmp_path / "commitlog") == []
        store.close()


def test_a_ready_first_file_at_another_start_is_not_used(tmp_path: Path) -> None:
    files = MappedFileQueue(tmp_path / "q", 4096, warm=False)
    start = files.begin_next(0.5, first=0)
    assert start == 0 and files.begin_next(0.5, first=0) is None  # one at a time
    assert files.allocate_next(start) and files.end_next()
    assert names(tmp_path / "q") == [file_name(0) + ".next"]
    files.append_raw(8192 + 10, b"a" * 100)  # an empty queue starts where its data does
    assert names(tmp_path / "q") == [file_name(8192)]
    assert files.created == 1 and files.taken_ready == 0
    assert files.read(8192 + 10, 100) == b"a" * 100
    files.close()


async def test_a_full_disk_refuses_the_first_put_and_maps_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first file cannot be reserved: neither the worker nor the put maps a sparse file;
    the put answers CREATE_MAPPED_FILE_FAILED and the store takes puts once there is room."""
    refused: list[str] = []
    real = os.posix_fallocate

    def fallocate(fd: int, offset: int, length: int) -> None:
        refused.append(os.readlink(f"/proc/self/fd/{fd}"))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", fallocate)
    store = CommitLogStore.open(tmp_path, CONFIG)
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        await wait_until(lambda: any(p.endswith(".next.creating") for p in refused), seconds=10)
        assert store.commit_log.ready_next is None
        result = store.put(Message("T", b"x" * 1000))
        assert result.status is PutStatus.CREATE_MAPPED_FILE_FAILED
        assert file_name(0) in result.detail
        assert names(tmp_path / "commitlog") == []  # nothing left behind
        assert store.statistics().create_error is not None
        monkeypatch.setattr(os, "posix_fallocate", real)
        await wait_until(
            lambda: store.commit_log.ready_next is not None, seconds=10
        )  # the timer retries
        assert store.put(Message("T", b"x" * 1000)).ok
        assert store.commit_log.taken_ready == 1
        assert store.statistics().create_error is None
        store.close()


# -- checking and zeroing the unwritten rest of a file ------------------------------------------


@pytest.mark.parametrize("seek_data", [True, False], ids=["seek-data", "no-seek-data"])
def test_first_nonzero_and_zero_from_see_every_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seek_data: bool
) -> None:
    """Bytes written through the mapping (dirty, not written back) or the file count, wherever
    they are; without SEEK_DATA everything is read."""
    if not seek_data:
        real = os.lseek

        def lseek(fd: int, position: int, how: int) -> int:
            if how in (os.SEEK_DATA, os.SEEK_HOLE):
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
            return real(fd, position, how)

        monkeypatch.setattr(os, "lseek", lseek)
    path = tmp_path / file_name(0)
    mapped = MappedFile.create(path, 0, FILE, warm=False)
    try:
        assert mapped.first_nonzero() is None
        mapped.view[FILE - 1] = 7  # through the mapping, the last byte
        mapped.write(3 * FILE // 4 + 5, b"\x01\x02")  # through the file
        mapped.view[1000:1004] = b"data"
        assert mapped.first_nonzero() == 1000
        assert mapped.first_nonzero(1004) == 3 * FILE // 4 + 5
        assert mapped.first_nonzero(1004, 3 * FILE // 4) is None
        assert mapped.first_nonzero(3 * FILE // 4 + 7) == FILE - 1
        mapped.zero_from(1002)
        assert bytes(mapped.view[1000:1004]) == b"da\0\0"
        assert mapped.first_nonzero(1002) is None
        assert bytes(mapped.view[FILE - 16 :]) == bytes(16)
    finally:
        mapped.delete()


def test_reopening_a_store_does_not_fault_in_the_rest_of_its_file(tmp_path: Path) -> None:
    """Recovery checks that the unwritten rest of the last file is zeros (and truncation
    zeroes what is not) without reading it through the mapping."""
    store = CommitLogStore.open(tmp_path, CONFIG)
    for _ in range(100):
        assert store.put(Message("T", b"x" * 1000)).ok
    end = store.max_offset
    store.close()
    (tmp_path / "abort").touch()  # the walk from the first file, then the check of the rest
    reopened = CommitLogStore.open(tmp_path, CONFIG)
    assert reopened.max_offset == end and reopened.recovery.data_after is None
    assert resident_kib(tmp_path / "commitlog" / file_name(0)) < 1024
    reopened.close()


def test_recovery_still_finds_data_after_a_zeroed_hole(tmp_path: Path) -> None:
    store = CommitLogStore.open(tmp_path, CONFIG)
    for _ in range(10):
        assert store.put(Message("T", b"x" * 1000)).ok
    end = store.max_offset
    store.close()
    with open(tmp_path / "commitlog" / file_name(0), "r+b") as f:
        f.seek(FILE - 100)
        f.write(b"stale")
    reopened = CommitLogStore.open(tmp_path, CONFIG)
    assert reopened.max_offset == end
    assert reopened.recovery.data_after == FILE - 100
    reopened.close()
    with open(tmp_path / "commitlog" / file_name(0), "rb") as f:
        f.seek(FILE - 100)
        assert f.read(5) == bytes(5)  # truncation zeroed it
