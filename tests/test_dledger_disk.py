"""A DLedger group whose disks block: no fsync runs on the event loop, so a leader whose every
fsync hangs goes on heartbeating (no election) and committing under ASYNC_FLUSH (three nodes
on a memory network, real time: worker threads really block)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from hanet.dledger import (
    AppendStatus,
    DLedgerNode,
    FileLog,
    LogEntry,
    NodeConfig,
    Persister,
    RaftConfig,
)
from hanet.store import FlushDiskType, Message
from hanet.testing import MemoryNetwork

RAFT = RaftConfig(election_timeout=1.0, heartbeat_interval=0.1, retransmit_timeout=0.3)
IDS = ("n0", "n1", "n2")
BLOCK = 2.5
"""Seconds each fsync blocks for: longer than any election timeout (drawn from [1.0, 2.0)),
so one fsync on the event loop would depose the leader."""


class BlockedDisk:
    """``os.fsync`` / ``os.fdatasync`` that block for ``seconds``, noting the calls made on
    the event loop's thread."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, seconds: float = BLOCK) -> None:
        self.seconds = seconds
        self.loop_thread = threading.get_ident()
        self.on_loop: list[str] = []
        self.calls = 0
        self._monkeypatch = monkeypatch

    def _fake(self, name: str, real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            self.calls += 1
            if threading.get_ident() == self.loop_thread:
                self.on_loop.append(name)
            time.sleep(self.seconds)
            real(fd)

        return sync

    def block(self) -> None:
        self._monkeypatch.setattr(os, "fsync", self._fake("fsync", os.fsync))
        self._monkeypatch.setattr(os, "fdatasync", self._fake("fdatasync", os.fdatasync))

    def unblock(self) -> None:
        self._monkeypatch.undo()


async def test_a_blocked_disk_stops_neither_heartbeats_nor_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    network = MemoryNetwork()
    nodes: dict[str, DLedgerNode] = {}
    async with trio.open_nursery() as nursery:
        for node_id in IDS:
            config = NodeConfig(
                group="g",
                node_id=node_id,
                peers={i: f"{i}:0" for i in IDS},
                store_dir=tmp_path / node_id,
                raft=RAFT,
                data_file_size=16 * 1024,  # new files while blocked: created off the loop
                index_file_size=32 * 64,
                mapped_file_size=16 * 1024,
                flush=FlushDiskType.ASYNC_FLUSH,
                flush_interval=0.05,
            )
            node = DLedgerNode(config, connector=network.connector_for(node_id), listen=False)
            network.register(node, nursery)
            await nursery.start(node.run)
            nodes[node_id] = node
        with trio.fail_after(10):
            while not any(n.is_leader for n in nodes.values()):  # noqa: ASYNC110
                await trio.sleep(0.02)
        (leader,) = [n for n in nodes.values() if n.is_leader]
        term = leader.raft.term
        disk = BlockedDisk(monkeypatch)
        disk.block()
        try:
            started = trio.current_time()
            count = 0
            with trio.fail_after(30):
                while trio.current_time() - started < 2 * BLOCK:
                    message = Message(topic="T", body=b"x" * 300, queue_id=count % 4)
                    outcomes = await leader.put_many([message] * 8)
                    assert {o.status for o in outcomes} == {AppendStatus.SUCCESS}
                    count += 8
                    await trio.sleep(0.01)
        finally:
            disk.unblock()
        assert disk.calls > 0  # the flushers did run, and blocked
        assert disk.on_loop == []
        assert leader.is_leader and leader.raft.term == term  # no election meanwhile
        assert all(n.raft.term == term for n in nodes.values())
        assert count > 100
        nursery.cancel_scope.cancel()


async def test_a_followers_truncation_fsyncs_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tail a follower drops is zeroed and fsynced in a worker thread, durably before
    the driver goes on (the Raft core only names it)."""
    with FileLog.open(tmp_path, flush=FlushDiskType.ASYNC_FLUSH) as log:
        log.append([LogEntry(1, 1, b"\0" * 8), LogEntry(2, 1, b"\1" * 8)])
        persister = Persister(log)
        disk = BlockedDisk(monkeypatch, seconds=0.2)
        disk.block()
        try:
            await persister.truncate_log(2)
        finally:
            disk.unblock()
        assert disk.calls > 0 and disk.on_loop == []
        assert log.last_index == 1
