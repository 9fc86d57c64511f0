"""A full disk: files are reserved before they are mapped (never a SIGBUS), a file that cannot be
created answers CREATE_MAPPED_FILE_FAILED and changes nothing, and puts are refused past
``disk_max_used_space_ratio``."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import struct
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import attrs
import pytest
import trio
import trio.testing
from broker_support import config, running

from hanet.broker import apply_properties
from hanet.cli import build_config, build_parser
from hanet.client import BrokerClient
from hanet.errors import ConfigError
from hanet.ha import BrokerConfig, BrokerRole, HASlave
from hanet.protocol import BrokerStatus
from hanet.store import (
    CommitLogStore,
    CreateMappedFileError,
    Message,
    PutStatus,
    StoreConfig,
    StoreRole,
)
from hanet.store.lowlevel import MappedFile, file_name
from hanet.testing import wait_until

FILE = 4096
MASTER = StoreConfig(mapped_file_size=FILE, consume_queue_file_size=6000)
SLAVE = StoreConfig(mapped_file_size=FILE, consume_queue_file_size=6000, role=StoreRole.SLAVE)
ENOSPC = "[Errno 28 ENOSPC]"
HEADER = struct.Struct(">qi")  # an HA transfer frame: offset, body size


@contextmanager
def full_disk(
    monkeypatch: pytest.MonkeyPatch, only: str = "", code: int = errno.ENOSPC
) -> Iterator[list[str]]:
    """``os.posix_fallocate`` fails with ``code`` for files whose path contains ``only``;
    yields the paths it refused."""
    real = os.posix_fallocate
    refused: list[str] = []

    def fallocate(fd: int, offset: int, length: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if only in path:
            refused.append(path)
            raise OSError(code, os.strerror(code))
        real(fd, offset, length)

    with monkeypatch.context() as patch:
        patch.setattr(os, "posix_fallocate", fallocate)
        yield refused


def files_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []


def fill_first_file(store: CommitLogStore, topic: str = "T") -> list[int]:
    """Put messages until the next one needs a second commit log file."""
    starts = []
    while True:
        result = store.put(Message(topic, b"x" * 200))
        assert result.ok
        starts.append(result.wrote_offset)
        if FILE - store.max_offset < 2 * result.wrote_size:
            return starts


# -- MappedFile --------------------------------------------------------------------------------


def test_a_file_the_disk_cannot_hold_is_never_mapped_nor_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mapped_calls: list[int] = []
    real_mmap = MappedFile.create.__globals__["mmap"].mmap

    def mmap_spy(fd: int, size: int, *args: Any, **kwargs: Any) -> Any:
        mapped_calls.append(fd)
        return real_mmap(fd, size, *args, **kwargs)

    monkeypatch.setattr(MappedFile.create.__globals__["mmap"], "mmap", mmap_spy)
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
        with full_disk(monkeypatch, code=code), pytest.raises(CreateMappedFileError) as caught:
            MappedFile.create(tmp_path / file_name(0), 0, FILE)
        error = caught.value
        assert error.errno == code and isinstance(error, OSError)
        assert str(tmp_path / file_name(0)) in str(error)
        assert f"[Errno {code} {errno.errorcode[code]}]" in str(error)
        assert files_in(tmp_path) == []  # neither the file nor its temporary
        assert mapped_calls == []
    mapped = MappedFile.create(tmp_path / file_name(0), 0, FILE)
    assert mapped_calls and files_in(tmp_path) == [file_name(0)]
    mapped.delete()


def test_a_file_that_cannot_be_renamed_is_unmapped_and_not_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mappings: list[Any] = []
    real_mmap = MappedFile.create.__globals__["mmap"].mmap

    def mmap_spy(fd: int, size: int, *args: Any, **kwargs: Any) -> Any:
        mapping = real_mmap(fd, size, *args, **kwargs)
        mappings.append(mapping)
        return mapping

    def rename(source: Any, target: Any) -> None:
        raise OSError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(MappedFile.create.__globals__["mmap"], "mmap", mmap_spy)
    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(CreateMappedFileError) as caught:
        MappedFile.create(tmp_path / file_name(0), 0, FILE)
    assert caught.value.errno == errno.EACCES
    assert len(mappings) == 1 and mappings[0].closed  # the mapping is not leaked
    assert files_in(tmp_path) == []


def test_without_fallocate_zeros_are_written_not_a_sparse_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with full_disk(monkeypatch, code=errno.EOPNOTSUPP) as refused:
        mapped = MappedFile.create(tmp_path / file_name(0), 0, 256 * 1024)
    assert refused
    stat = (tmp_path / file_name(0)).stat()
    assert stat.st_size == 256 * 1024
    assert stat.st_blocks * 512 >= stat.st_size  # every block allocated
    mapped.view[0:5] = b"hello"
    mapped.delete()


# -- puts ----------------------------------------------------------------------------------------


def test_a_put_needing_a_commit_log_file_the_disk_cannot_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with CommitLogStore.open(tmp_path, MASTER) as store:
        starts = fill_first_file(store)
        before = store.max_offset
        with full_disk(monkeypatch, "commitlog") as refused:
            first = store.put(Message("T", b"y" * 300))
            batch = store.put_batch([Message("T", b"z" * 300), Message("T", b"w" * 300)])
        assert len(refused) == 2  # once per batch, not per message
        for result in (first, *batch):
            assert result.status is PutStatus.CREATE_MAPPED_FILE_FAILED
            assert result.wrote_offset == -1
            assert file_name(FILE) in result.detail and ENOSPC in result.detail
        assert files_in(tmp_path / "commitlog") == [file_name(0)]  # nothing left behind
        assert store.statistics().create_error == first.detail
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and file_name(FILE) in errors[0].getMessage()
        # the data held reads back (what pulls and replication read)
        assert store.max_queue_offset("T", 0) == len(starts)
        for q, start in enumerate(starts):
            record = store.get_message("T", 0, q)
            assert record is not None and record.physical_offset == start
        assert len(store.read(0, FILE)) == FILE  # the blank tail was written: the file is full
        assert before <= FILE
        # the disk has room again: the next put goes on in the next file
        result = store.put(Message("T", b"v" * 300))
        assert result.ok and result.wrote_offset == FILE
        assert result.queue_offset == len(starts)
        assert store.statistics().create_error is None
        assert "new files can be created again" in caplog.text
    with CommitLogStore.open(tmp_path, MASTER) as again:
        assert again.max_queue_offset("T", 0) == len(starts) + 1


def test_a_put_needing_a_consume_queue_file_the_disk_cannot_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with CommitLogStore.open(tmp_path, MASTER) as store:
        assert store.put(Message("T", b"a")).ok
        before = store.max_offset
        with full_disk(monkeypatch, "consumequeue"):
            refused = store.put(Message("U", b"b", queue_id=1))
            mixed = store.put_batch([Message("T", b"c"), Message("U", b"d", queue_id=1)])
        assert refused.status is PutStatus.CREATE_MAPPED_FILE_FAILED
        assert "consume queue U/1" in refused.detail and ENOSPC in refused.detail
        assert str(tmp_path / "consumequeue" / "U" / "1" / file_name(0)) in refused.detail
        assert [r.status for r in mixed] == [PutStatus.PUT_OK, PutStatus.CREATE_MAPPED_FILE_FAILED]
        assert mixed[0].wrote_offset == before  # the refused message wrote nothing
        assert store.max_offset == mixed[0].end_offset
        assert files_in(tmp_path / "consumequeue" / "U" / "1") == []
        assert store.dispatch_error is None  # not sticky: puts go on
        assert store.get_messages("T", 0, 0) and len(store.get_messages("T", 0, 0)) == 2
        result = store.put(Message("U", b"e", queue_id=1))
        assert result.ok and result.queue_offset == 0
        assert store.statistics().create_error is None
    with CommitLogStore.open(tmp_path, MASTER) as again:
        assert again.max_queue_offset("U", 1) == 1
        assert again.max_queue_offset("T", 0) == 2


@pytest.mark.parametrize("retryable", [True, False], ids=["file", "other"])
def test_a_write_failing_every_time_is_tried_once_and_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, retryable: bool
) -> None:
    """A consume queue write failing under the writer (its record already in the commit log)
    undoes the batch and refuses it with the reason, without writing it again: a file that
    cannot be created answers CREATE_MAPPED_FILE_FAILED and puts go on once it can; any other
    failure stops puts."""
    with CommitLogStore.open(tmp_path, MASTER) as store:
        assert store.put(Message("T", b"a")).ok
        before = store.max_offset
        real = store._writer.write
        calls = 0
        cause = OSError(errno.ENOSPC if retryable else errno.ENOTDIR, "refused")

        def failing(messages: list[Message], now: int, *, dispatch: bool) -> Any:
            nonlocal calls
            calls += 1
            real(messages[:1], now, dispatch=dispatch)  # written, then its queue fails
            raise CreateMappedFileError("consumequeue/T/0", cause) if retryable else cause

        monkeypatch.setattr(store._writer, "write", failing)
        results = store.put_batch([Message("T", b"b"), Message("T", b"c")])
        assert calls == 1
        assert store.max_offset == before
        monkeypatch.undo()
        if retryable:
            assert {r.status for r in results} == {PutStatus.CREATE_MAPPED_FILE_FAILED}
            assert all(ENOSPC in r.detail and "consumequeue/T/0" in r.detail for r in results)
            assert store.put(Message("T", b"d")).ok
        else:
            assert {r.status for r in results} == {PutStatus.SERVICE_NOT_AVAILABLE}
            assert all(f"dispatch failed at offset {before}" in r.detail for r in results)
            assert store.put(Message("T", b"d")).status is PutStatus.SERVICE_NOT_AVAILABLE
        assert store.get_messages("T", 0, 0) is not None
        assert store.max_queue_offset("T", 0) == 2 if retryable else 1


def test_dispatch_waits_for_a_consume_queue_file_and_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A slave dispatches after appending: a consume queue file it cannot create holds dispatch
    there (a clear, retried error); the replicated bytes are kept."""
    with (
        CommitLogStore.open(tmp_path / "m", MASTER) as master,
        CommitLogStore.open(tmp_path / "s", SLAVE) as slave,
    ):
        for i in range(3):
            assert master.put(Message("T", bytes([i]) * 50, queue_id=i % 2)).ok
        data = master.read(0, FILE)
        with full_disk(monkeypatch, "consumequeue"):
            slave.append_raw(0, data)
            assert slave.max_offset == master.max_offset  # replication goes on
            error = slave.dispatch_error
            assert error is not None and error.offset == 0
            assert ENOSPC in error.reason and "consume queue T/0" in error.reason
            slave.dispatch()  # retried, still failing, logged once
            errors = [r for r in caplog.records if r.levelno == logging.ERROR]
            assert len(errors) == 1
            assert slave.statistics().create_error is not None
        assert slave.dispatch() is None
        assert slave.dispatched_offset == master.max_offset
        assert slave.max_queue_offset("T", 0) == 2 and slave.max_queue_offset("T", 1) == 1


def test_a_slave_cannot_create_its_next_commit_log_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with (
        CommitLogStore.open(tmp_path / "m", MASTER) as master,
        CommitLogStore.open(tmp_path / "s", SLAVE) as slave,
    ):
        cut = fill_first_file(master)[2]
        for _ in range(3):
            assert master.put(Message("T", b"n" * 200)).ok
        slave.append_raw(0, master.read(0, cut))
        rest = master.read(cut, FILE) + master.read(FILE, FILE)
        with full_disk(monkeypatch, "commitlog"), pytest.raises(CreateMappedFileError) as caught:
            slave.append_raw(cut, rest)
        assert file_name(FILE) in str(caught.value)
        assert slave.max_offset == slave.validated_offset == cut  # nothing of it kept
        assert files_in(tmp_path / "s" / "commitlog") == [file_name(0)]
        assert slave.statistics().create_error is not None
        slave.append_raw(cut, rest)  # room again: the same bytes go in
        assert slave.max_offset == master.max_offset
        assert slave.read(0, FILE) == master.read(0, FILE)
        assert slave.max_queue_offset("T", 0) == master.max_queue_offset("T", 0)
        assert slave.statistics().create_error is None


class FakeMaster:
    """Hands the slave memory streams and keeps the master ends."""

    def __init__(self) -> None:
        self.peers: list[trio.abc.Stream] = []

    async def __call__(self) -> trio.abc.Stream:
        slave_end, master_end = trio.testing.memory_stream_pair()
        self.peers.append(master_end)
        return slave_end


async def test_the_ha_slave_closes_with_the_reason_and_retries(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    master = CommitLogStore.open(tmp_path / "m", MASTER)
    slave = CommitLogStore.open(tmp_path / "s", SLAVE)
    try:
        fill_first_file(master)
        assert master.put(Message("T", b"n" * 200)).ok
        end = master.max_offset
        frame = master.read(0, FILE) + master.read(FILE, FILE)
        config = BrokerConfig(mapped_file_size_commit_log=FILE, reconnect_interval=1.0)
        ha_slave = HASlave(slave, config, connector=(fake := FakeMaster()))
        async with trio.open_nursery() as nursery:
            await nursery.start(ha_slave.run)
            await wait_until(lambda: fake.peers, seconds=60)
            with full_disk(monkeypatch, "commitlog"):
                await fake.peers[0].send_all(HEADER.pack(0, len(frame)) + frame)
                await wait_until(lambda: ha_slave.status().last_close_reason, seconds=60)
            reason = ha_slave.status().last_close_reason
            assert reason is not None and "CreateMappedFileError" in reason
            assert "commitlog" in reason and ENOSPC in reason
            assert slave.max_offset == 0
            await wait_until(lambda: len(fake.peers) == 2, seconds=60)  # reconnected
            await fake.peers[1].send_all(HEADER.pack(0, len(frame)) + frame)
            await wait_until(lambda: slave.max_offset == end, seconds=60)
            nursery.cancel_scope.cancel()
    finally:
        slave.close()
        master.close()


# -- the used ratio ------------------------------------------------------------------------------


class DiskUsage(NamedTuple):
    total: int
    used: int
    free: int


class FakeClock:
    """The store's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Usage:
    """A stand-in for ``shutil.disk_usage`` reporting ``used`` percent."""

    def __init__(self, used: int) -> None:
        self.used = used
        self.calls = 0

    def __call__(self, path: object) -> Any:
        self.calls += 1
        return DiskUsage(100, self.used, 100 - self.used)


def test_puts_are_refused_past_the_used_ratio(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    usage = Usage(50)
    monkeypatch.setattr(shutil, "disk_usage", usage)
    clock = FakeClock()  # stands still: only explicit checks after the first put
    with CommitLogStore.open(tmp_path, MASTER, clock=clock) as store:
        assert store.put(Message("T", b"a")).ok
        assert usage.calls == 1  # the first put read it
        stats = store.statistics()
        assert not stats.disk_full and stats.disk_used_ratio == 0.5
        usage.used = 90
        assert store.put(Message("T", b"b")).ok  # cached: not read again per put
        assert usage.calls == 1
        assert store.check_disk() is True
        before = store.max_offset
        refused = store.put_batch([Message("T", b"c"), Message("T", b"d")])
        for result in refused:
            assert result.status is PutStatus.SERVICE_NOT_AVAILABLE
            assert result.detail == "disk full: disk used 90 % > diskMaxUsedSpaceRatio 75 %"
        assert store.max_offset == before
        stats = store.statistics()
        assert stats.disk_full and stats.disk_used_ratio == 0.9
        assert store.check_disk() is True
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "90 % > diskMaxUsedSpaceRatio 75 %" in warnings[0].message
        assert store.get_message("T", 0, 1) is not None  # reads go on
        usage.used = 75  # not past the ratio
        assert store.check_disk() is False
        assert store.put(Message("T", b"e")).ok
        assert not store.statistics().disk_full
        assert "puts are accepted again" in caplog.text
    config = StoreConfig(
        mapped_file_size=FILE, consume_queue_file_size=6000, disk_max_used_space_ratio=95
    )
    with CommitLogStore.open(tmp_path, config) as store:
        usage.used = 90
        assert store.check_disk() is False and store.put(Message("T", b"f")).ok


def test_the_used_ratio_is_read_at_most_once_a_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert MASTER.disk_check_interval == 1.0
    usage = Usage(10)
    monkeypatch.setattr(shutil, "disk_usage", usage)
    clock = FakeClock()
    with CommitLogStore.open(tmp_path, MASTER, clock=clock) as store:
        assert store.put(Message("T", b"a")).ok
        assert usage.calls == 1
        usage.used = 80
        for _ in range(20):
            assert store.put(Message("T", b"a")).ok
        clock.now += 0.999
        assert store.put(Message("T", b"a")).ok and not store.statistics().disk_full
        assert usage.calls == 1
        clock.now += 0.001  # a second after the first reading
        assert store.put(Message("T", b"a")).status is PutStatus.SERVICE_NOT_AVAILABLE
        assert usage.calls == 2
        usage.used = 10
        clock.now += 0.5
        assert store.put(Message("T", b"a")).status is PutStatus.SERVICE_NOT_AVAILABLE
        clock.now += 0.5
        assert store.put(Message("T", b"a")).ok
        assert usage.calls == 3


def test_an_unreadable_disk_usage_refuses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(path: object) -> Any:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(shutil, "disk_usage", broken)
    with CommitLogStore.open(tmp_path, MASTER) as store:
        assert store.put(Message("T", b"a")).ok
        stats = store.statistics()
        assert not stats.disk_full and stats.disk_used_ratio is None


def test_the_ratio_setting() -> None:
    for bad in (0, 101):
        with pytest.raises(ValueError, match=r"1\.\.100"):
            StoreConfig(disk_max_used_space_ratio=bad)
        with pytest.raises(ConfigError, match=r"1\.\.100"):
            BrokerConfig(disk_max_used_space_ratio=bad)
    assert BrokerConfig().disk_max_used_space_ratio == StoreConfig().disk_max_used_space_ratio == 75
    config = apply_properties({"diskMaxUsedSpaceRatio": "90"})
    assert config.disk_max_used_space_ratio == 90
    with pytest.raises(ConfigError):
        apply_properties({"diskMaxUsedSpaceRatio": "0"})


def test_the_cli_flag(tmp_path: Path) -> None:
    parser = build_parser()
    args = parser.parse_args(["master", "--disk-max-used-space-ratio", "85"])
    assert build_config(args).disk_max_used_space_ratio == 85
    conf = tmp_path / "broker.conf"
    conf.write_text("diskMaxUsedSpaceRatio=60\n")
    args = parser.parse_args(["slave", "--config", str(conf), "--master-ha", "127.0.0.1:1"])
    assert build_config(args, BrokerRole.SLAVE).disk_max_used_space_ratio == 60


def test_an_old_status_document_still_parses() -> None:
    old = {
        "role": "ASYNC_MASTER",
        "broker_address": None,
        "ha_address": None,
        "min_offset": 0,
        "max_offset": 0,
        "flushed_offset": 0,
        "dispatched_offset": 0,
        "puts": 0,
        "mapped_files": 0,
        "dispatch_error": None,
        "uptime": 1.0,
    }
    status = BrokerStatus.from_json(old)
    assert not status.disk_full and status.disk_used_ratio is None and status.create_error is None
    new = BrokerStatus.from_json({**old, "disk_full": True, "disk_used_ratio": 0.9})
    assert new.disk_full and new.disk_used_ratio == 0.9
    assert BrokerStatus.from_json(new.to_json()) == new


# -- through the broker port ---------------------------------------------------------------------


def broker_config(root: Path, **changes: Any) -> BrokerConfig:
    return attrs.evolve(config(root), **{"mapped_file_size_commit_log": FILE, **changes})


async def test_the_broker_refuses_puts_on_a_full_disk_and_shows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    usage = Usage(40)
    monkeypatch.setattr(shutil, "disk_usage", usage)
    async with running(broker_config(tmp_path)) as (broker, addresses):
        assert addresses.broker is not None
        async with BrokerClient.connect(*addresses.broker) as client:
            assert (await client.put("T", b"a", queue_id=0)).ok
            usage.used = 91
            broker.store.check_disk()
            reply = await client.put("T", b"b", queue_id=0)
            assert reply.status is PutStatus.SERVICE_NOT_AVAILABLE and not reply.stored
            assert reply.detail == "disk full: disk used 91 % > diskMaxUsedSpaceRatio 75 %"
            status = await client.status()
            assert status.disk_full and status.disk_used_ratio == 0.91
            pulled = await client.pull("T", 0)
            assert len(pulled.messages) == 1  # pulls go on
            usage.used = 20
            broker.store.check_disk()
            assert (await client.put("T", b"c", queue_id=0)).ok
            status = await client.status()
            assert not status.disk_full and status.disk_used_ratio == 0.2


async def test_the_broker_answers_create_mapped_file_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running(broker_config(tmp_path)) as (_, addresses):
        assert addresses.broker is not None
        async with BrokerClient.connect(*addresses.broker) as client:
            with full_disk(monkeypatch, "consumequeue"):
                # RocketMQ answers CREATE_MAPPED_FILE_FAILED with SYSTEM_ERROR; the remark
                # starts with the status, which the client reads back as the put's status.
                reply = await client.put("T", b"a", queue_id=2)
                assert reply.status is PutStatus.CREATE_MAPPED_FILE_FAILED
                assert "consume queue T/2" in reply.detail and ENOSPC in reply.detail
                status = await client.status()
                assert status.create_error is not None and "T/2" in status.create_error
            assert (await client.put("T", b"b", queue_id=2)).ok
            assert (await client.status()).create_error is None


# -- a real full disk ----------------------------------------------------------------------------


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount_point)],
            check=True,
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False, capture_output=True)


async def test_filling_a_real_small_disk_through_the_broker(small_tmpfs: Path) -> None:
    """8 MiB: one 5.72 MiB consume queue file and two 1 MiB commit log files fit, a second
    consume queue file or a third commit log file does not; the broker answers, never dies, and
    serves what it holds."""
    cfg = broker_config(
        small_tmpfs / "store",
        mapped_file_size_commit_log=1024 * 1024,
        disk_max_used_space_ratio=100,
    )
    async with running(cfg) as (broker, _):
        first = await broker.put([Message("T", b"x" * 1000, 0)])
        assert first[0].status is PutStatus.PUT_OK
        second = await broker.put([Message("T", b"y" * 1000, 1)])
        assert second[0].status is PutStatus.CREATE_MAPPED_FILE_FAILED
        assert ENOSPC in second[0].detail
        statuses = []
        for _ in range(3000):  # more than two 1 MiB commit log files hold
            (reply,) = await broker.put([Message("T", b"z" * 1000, 0)])
            statuses.append(reply.status)
            if reply.status is not PutStatus.PUT_OK:
                break
        assert statuses[-1] is PutStatus.CREATE_MAPPED_FILE_FAILED  # the third commit log file
        assert file_name(2 * 1024 * 1024) in broker.status().create_error  # type: ignore[operator]
        assert statuses.count(PutStatus.PUT_OK) > 1500
        assert broker.status().max_offset == 2 * 1024 * 1024  # the second file is full
        held = broker.store.max_queue_offset("T", 0)
        assert held == statuses.count(PutStatus.PUT_OK) + 1
        message = broker.store.get_message("T", 0, held - 1)
        assert message is not None and message.body == b"z" * 1000
        assert not list((small_tmpfs / "store" / "commitlog").glob("*.creating"))
    # the default ratio (75 %) refuses before any file is tried
    cfg75 = broker_config(small_tmpfs / "store", mapped_file_size_commit_log=1024 * 1024)
    async with running(cfg75) as (broker, _):
        (reply,) = await broker.put([Message("T", b"w" * 1000, 0)])
        assert reply.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert "disk full" in reply.detail
        assert broker.status().disk_full
