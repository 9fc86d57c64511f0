"""The store's fsyncs run in worker threads while the event loop goes on: closing, truncating
and flushing from both sides must never lose a sync, sync the wrong file or move the flushed
offset backwards."""

from __future__ import annotations

import errno
import os
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import trio
import trio.testing

from hanet.store import (
    CommitLogStore,
    FlushDiskType,
    Message,
    PutStatus,
    StoreConfig,
    StoreError,
    StoreRole,
)
from hanet.store.lowlevel import MappedFile, file_name

TraceFunction = Callable[[FrameType, str, Any], Any]
CHECKPOINT = struct.Struct(">qqqq")  # RocketMQ's: physic, logics, index timestamps; flushed

FILE = 4096
MASTER = StoreConfig(mapped_file_size=FILE, consume_queue_file_size=6000)
SLAVE = StoreConfig(mapped_file_size=FILE, consume_queue_file_size=6000, role=StoreRole.SLAVE)


class SyncGate:
    """A stand-in for ``os.fdatasync``: the first sync of a file whose path contains ``only``
    waits in its worker thread until :meth:`release`; every sync records the synced file's
    path (through the descriptor, at the moment of the sync)."""

    def __init__(self, only: str) -> None:
        self.only = only
        self.entered = threading.Event()
        self.released = threading.Event()
        self.synced: list[str] = []
        self._real = os.fdatasync
        self._held = False

    def __call__(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")  # FileNotFoundError if fd is not open
        if self.only in path and not self._held:
            self._held = True
            self.entered.set()
            assert self.released.wait(10)
            path = os.readlink(f"/proc/self/fd/{fd}")  # what the number names now
        self.synced.append(path)
        self._real(fd)

    def release(self) -> None:
        self.released.set()


@contextmanager
def gated_sync(monkeypatch: pytest.MonkeyPatch, only: str) -> Iterator[SyncGate]:
    gate = SyncGate(only)
    with monkeypatch.context() as patch:
        patch.setattr(os, "fdatasync", gate)
        try:
            yield gate
        finally:
            gate.release()


def in_thread(function: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            function()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


# -- a file closed while a worker syncs it ---------------------------------------------------


def test_a_file_closed_while_it_syncs_is_synced_not_the_reused_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mapped = MappedFile.create(tmp_path / file_name(0), 0, FILE)
    mapped.view[0:3] = b"abc"
    mapped.wrote = 3
    with gated_sync(monkeypatch, file_name(0)) as gate:
        thread, errors = in_thread(mapped.flush)
        assert gate.entered.wait(10)
        mapped.delete()  # the event loop drops the file meanwhile (a truncation)
        other = os.open(tmp_path / "other", os.O_RDWR | os.O_CREAT, 0o644)  # the lowest free
        try:
            gate.release()
            thread.join(10)
        finally:
            os.close(other)
    assert errors == []
    assert [Path(p).name for p in gate.synced] == [file_name(0) + " (deleted)"]


async def test_truncate_to_during_a_group_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slave truncating into its first file while a group commit syncs it: the second file,
    closed meanwhile, raises nothing; the flushed offset never passes the data end; and the
    bytes appended again after the truncation are synced by the next flush."""
    with (
        CommitLogStore.open(tmp_path / "m", MASTER) as master,
        CommitLogStore.open(tmp_path / "s", SLAVE) as slave,
    ):
        while master.max_offset < FILE + 500:
            assert master.put(Message("T", b"x" * 300)).ok
        data = master.read(0, FILE) + master.read(FILE, FILE)
        cut = master.read_record(0).size
        slave.append_raw(0, data)
        with gated_sync(monkeypatch, "commitlog/" + file_name(0)) as gate:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(slave.wait_flushed, cut)  # a put's wait: data kept
                assert await trio.to_thread.run_sync(gate.entered.wait, 10)
                slave.truncate_to(cut)  # closes the second file, zeroes the first from cut
                gate.release()
            assert slave.flushed_offset <= slave.max_offset == cut
            slave.append_raw(cut, data[cut:FILE])
            gate.synced.clear()
            assert slave.flush() == FILE
            assert any(p.endswith("commitlog/" + file_name(0)) for p in gate.synced)


# -- the periodic flush and a group commit at once ------------------------------------------


class Stepper:
    """Runs ``first`` in a thread that stops at its ``stop_at``-th line in ``hanet/store`` after
    its commit log fsync returned, so another flush can run right there. The commit log fsync
    itself waits until :attr:`go` is set (its target is taken by then)."""

    def __init__(self, store: CommitLogStore, stop_at: int) -> None:
        self.stop_at = stop_at
        self.lines = 0
        self.synced = False
        self.in_flush = threading.Event()
        self.go = threading.Event()
        self.paused = threading.Event()
        self.resume = threading.Event()
        self.thread: threading.Thread | None = None
        self.ident: int | None = None
        real = store.commit_log.flush

        def flush() -> int:
            if threading.get_ident() != self.ident:
                return real()
            self.in_flush.set()
            assert self.go.wait(10)
            try:
                return real()
            finally:
                self.synced = True

        store.commit_log.flush = flush  # type: ignore[method-assign]

    def _trace(self, frame: FrameType, event: str, arg: object) -> TraceFunction | None:
        if "hanet/store" not in frame.f_code.co_filename.replace(os.sep, "/"):
            return None
        if event == "line" and self.synced:
            self.lines += 1
            if self.lines == self.stop_at:
                self.paused.set()
                assert self.resume.wait(10)
        return self._trace

    def start(self, first: Callable[[], object]) -> list[BaseException]:
        def traced() -> None:
            self.ident = threading.get_ident()
            sys.settrace(self._trace)
            try:
                first()
            finally:
                sys.settrace(None)

        self.thread, errors = in_thread(traced)
        return errors


def test_the_periodic_flush_and_a_group_commit_interleaved_anywhere(tmp_path: Path) -> None:
    """The periodic flush (A) took its target, then more records were put and a group commit
    (B) flushes them while A finishes, B running between any two of A's lines: the flushed
    offset ends at B's target with B's timestamp (never back at A's), and the checkpoint
    holds an offset with its own timestamp."""
    stop_at = 0
    while True:
        stop_at += 1
        assert stop_at < 500
        with CommitLogStore.open(tmp_path / str(stop_at), MASTER) as store:
            first = store.put(Message("T", b"a"))
            stepper = Stepper(store, stop_at)
            errors = stepper.start(store._flush_all)  # what run() does every flush_interval
            assert stepper.in_flush.wait(10)
            time.sleep(0.002)  # a later store timestamp
            second = store.put(Message("T", b"b"))
            assert second.store_timestamp > first.store_timestamp
            pairs = {
                (first.end_offset, first.store_timestamp),
                (second.end_offset, second.store_timestamp),
            }
            stepper.go.set()
            assert stepper.thread is not None
            while stepper.thread.is_alive() and not stepper.paused.wait(0.01):
                pass
            paused = stepper.paused.is_set()
            if paused:  # B, what wait_flushed runs in its worker thread
                group, group_errors = in_thread(store._flush_commit_log)
                group.join(0.3)  # or blocked by A: then it finishes after A goes on
            stepper.resume.set()
            stepper.thread.join(10)
            if paused:
                group.join(10)
                assert group_errors == []
            assert errors == []
            flushed = (store.flushed_offset, store._flushed_store_timestamp)
        stamp, _, _, offset = CHECKPOINT.unpack_from(
            (tmp_path / str(stop_at) / "checkpoint").read_bytes()
        )
        written = (offset, stamp)
        if not paused:
            break  # A finished before its stop_at-th line: every point was tried
        assert flushed == (second.end_offset, second.store_timestamp), stop_at
        assert written in pairs, stop_at
    assert stop_at > 10


# -- a stuck disk under SYNC_FLUSH -----------------------------------------------------------


async def test_a_sync_flush_put_on_a_stuck_disk_answers_flush_disk_timeout(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fsync a put started takes longer than ``sync_flush_timeout``: the put answers
    FLUSH_DISK_TIMEOUT on time (the message stays stored); the fsync goes on in its thread and
    counts once it returns, and a later wait joins it instead of starting another."""
    config = StoreConfig(
        mapped_file_size=FILE, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=2.0
    )
    with CommitLogStore.open(tmp_path, config) as store:
        with gated_sync(monkeypatch, "commitlog") as gate:

            async def release_later() -> None:
                await trio.sleep(60)
                gate.release()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(release_later)
                start = trio.current_time()
                result = await store.put_async(Message("T", b"a"))
                assert result.status is PutStatus.FLUSH_DISK_TIMEOUT
                assert trio.current_time() - start == pytest.approx(2.0)
                assert store.get_message("T", 0, 0) is not None
                assert store.flushed_offset == 0
                await store.wait_flushed(result.end_offset)  # the same fsync
                assert trio.current_time() - start == pytest.approx(60.0)
            assert store.flushed_offset == result.end_offset
        assert [p for p in gate.synced if "commitlog" in p] == [
            str(tmp_path / "commitlog" / file_name(0))
        ]


async def test_a_failed_group_commit_fsync_fails_its_waiters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with CommitLogStore.open(tmp_path, MASTER) as store:
        end = store.put(Message("T", b"a")).end_offset

        def broken(fd: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        with monkeypatch.context() as patch:
            patch.setattr(os, "fdatasync", broken)
            with pytest.raises(StoreError, match=r"fsync failed.*Input/output") as caught:
                await store.wait_flushed(end)
        assert isinstance(caught.value.__cause__, OSError)
        assert store.flushed_offset == 0
        await store.wait_flushed(end)  # the next wait tries again
        assert store.flushed_offset == end


async def test_waiting_for_data_a_truncation_dropped(tmp_path: Path) -> None:
    """A wait for an offset past the data end (truncated away) fails at once, instead of
    fsyncing again and again for bytes that are not there."""
    with (
        CommitLogStore.open(tmp_path / "m", MASTER) as master,
        CommitLogStore.open(tmp_path / "s", SLAVE) as slave,
    ):
        for _ in range(3):
            assert master.put(Message("T", b"x" * 300)).ok
        slave.append_raw(0, master.read(0, FILE))
        end = slave.max_offset
        cut = master.read_record(0).size
        slave.truncate_to(cut)
        with trio.fail_after(5), pytest.raises(StoreError, match=f"past the data end {cut}"):
            await slave.wait_flushed(end)
        await slave.wait_flushed(cut)
        assert slave.flushed_offset == cut
