"""The DLedger put path's batching and persistence rules, on nodes over a memory network.

- the puts that reach the leader together are appended in one round: an append carries many;
- persistence before send: a follower acknowledges entries (and a leader answers a put) only
  once they are durable per the flush type (SYNC_FLUSH: fsynced);
- the disk work runs in a worker thread: a slow fsync does not stall heartbeats.
"""

from __future__ import annotations

import functools
import os
import random
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from hanet.channel import HandlerContext, WriteFuture
from hanet.dledger import (
    AppendRequest,
    AppendResponse,
    AppendStatus,
    DLedgerNode,
    Envelope,
    FileLog,
    LogEntry,
    NodeConfig,
    PeerCodec,
    Persister,
    RaftConfig,
)
from hanet.store import FlushDiskType, Message
from hanet.testing import MemoryNetwork

RAFT = RaftConfig(
    election_timeout=0.3,
    heartbeat_interval=0.05,
    retransmit_timeout=0.15,
    append_timeout=2.0,
    max_batch=64,
)


class Group:
    def __init__(
        self,
        root: Path,
        nursery: trio.Nursery,
        size: int,
        flush: FlushDiskType,
        raft: RaftConfig = RAFT,
    ) -> None:
        self.root, self.nursery, self.flush, self.raft = root, nursery, flush, raft
        self.ids = [f"n{i}" for i in range(size)]
        self.network = MemoryNetwork()
        self.nodes: dict[str, DLedgerNode] = {}

    async def start_all(self) -> None:
        for k, node_id in enumerate(self.ids):
            config = NodeConfig(
                group="g",
                node_id=node_id,
                peers={i: f"{i}:0" for i in self.ids},
                store_dir=self.root / node_id,
                raft=self.raft,
                data_file_size=256 * 1024,
                index_file_size=32 * 1024,
                mapped_file_size=256 * 1024,
                flush=self.flush,
                flush_interval=0.05,
            )
            node = DLedgerNode(
                config,
                connector=self.network.connector_for(node_id),
                listen=False,
                rng=random.Random(k),
            )

            async def run(node: DLedgerNode, task_status: trio.TaskStatus[None]) -> None:
                async with trio.open_nursery() as inner:
                    self.network.register(node, inner)
                    await inner.start(node.run)
                    task_status.started()

            await self.nursery.start(functools.partial(run, node))
            self.nodes[node_id] = node

    async def leader(self) -> DLedgerNode:
        for _ in range(400):
            leaders = [n for n in self.nodes.values() if n._raft and n.is_leader]
            if len(leaders) == 1:
                return leaders[0]
            await trio.sleep(0.05)
        raise AssertionError("no leader")


@pytest.fixture
async def nursery() -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as n:
        yield n
        n.cancel_scope.cancel()


def spy_on_sends(monkeypatch: pytest.MonkeyPatch, seen: Callable[[Envelope], None]) -> None:
    """Call ``seen`` with every envelope a node writes to a peer, as it is written."""
    write = PeerCodec.write

    def spy(self: PeerCodec, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        if isinstance(msg, Envelope):
            seen(msg)
        write(self, ctx, msg, future)

    monkeypatch.setattr(PeerCodec, "write", spy)


def messages(count: int) -> list[Message]:
    return [Message(topic="T", body=f"m{n}".encode(), queue_id=n % 4) for n in range(count)]


async def test_puts_that_arrive_together_go_in_one_append(
    autojump_clock: trio.testing.MockClock,
    nursery: trio.Nursery,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    group = Group(tmp_path, nursery, 3, FlushDiskType.ASYNC_FLUSH)
    await group.start_all()
    leader = await group.leader()
    sent: list[Envelope] = []
    spy_on_sends(monkeypatch, sent.append)
    outcomes = await leader.put_many(messages(40))
    assert [o.status for o in outcomes] == [AppendStatus.SUCCESS] * 40
    assert [o.index for o in outcomes] == list(range(outcomes[0].index, outcomes[0].index + 40))
    carried = [
        len(e.message.entries)
        for e in sent
        if isinstance(e.message, AppendRequest) and e.message.entries
    ]
    assert carried == [40, 40]  # one append per follower carries the whole batch


async def test_entries_past_the_in_memory_body_budget_are_read_back_from_the_log(
    autojump_clock: trio.testing.MockClock,
    nursery: trio.Nursery,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bodies of appended entries kept in memory until applied are bounded in bytes (a
    leader's appends that never commit cannot fill a follower's memory); what does not fit
    is read back from the log, and every view is the same."""
    monkeypatch.setattr("hanet.dledger._view._MAX_BODY_BYTES", 64)
    group = Group(tmp_path, nursery, 3, FlushDiskType.ASYNC_FLUSH)
    await group.start_all()
    leader = await group.leader()
    outcomes = await leader.put_many(messages(40))
    assert [o.status for o in outcomes] == [AppendStatus.SUCCESS] * 40
    stores = [n.store for n in group.nodes.values() if n.store is not None]
    assert len(stores) == 3
    with trio.fail_after(10):
        while len({store.max_offset for store in stores}) != 1:  # noqa: ASYNC110 - nodes apply
            await trio.sleep(0.05)
    views = {store.read_view(0, store.max_offset).tobytes() for store in stores}
    assert len(views) == 1 and len(next(iter(views))) == stores[0].max_offset > 0


async def test_a_batch_past_max_pending_is_cut_there_and_a_follower_refuses_it_all(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery, tmp_path: Path
) -> None:
    group = Group(
        tmp_path, nursery, 3, FlushDiskType.ASYNC_FLUSH, attrs.evolve(RAFT, max_pending=5)
    )
    await group.start_all()
    leader = await group.leader()
    outcomes = await leader.put_many(messages(8))
    assert [o.status for o in outcomes] == [AppendStatus.SUCCESS] * 5 + [
        AppendStatus.LEADER_PENDING_FULL
    ] * 3
    follower = next(n for n in group.nodes.values() if n is not leader)
    refused = await follower.put_many(messages(3))
    assert {o.status for o in refused} == {AppendStatus.NOT_LEADER}
    assert {o.leader_id for o in refused} == {leader.config.node_id}
    # the refused ones were never appended: the leader's log ends with the five
    assert leader.raft.log.last_index == outcomes[4].index


@pytest.mark.parametrize("size", [1, 3])
async def test_sync_flush_acknowledges_and_answers_only_durable_entries(
    autojump_clock: trio.testing.MockClock,
    nursery: trio.Nursery,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    size: int,
) -> None:
    durable: dict[Path, int] = {}
    sync_log = Persister.sync_log

    async def tracked(self: Persister) -> None:
        covered = self.log.last_index  # appended before this flush: on disk once it returns
        await sync_log(self)
        durable[self.log.directory] = max(durable.get(self.log.directory, 0), covered)

    monkeypatch.setattr(Persister, "sync_log", tracked)
    group = Group(tmp_path, nursery, size, FlushDiskType.SYNC_FLUSH)
    await group.start_all()
    leader = await group.leader()
    violations: list[str] = []
    acks = 0

    def check(envelope: Envelope) -> None:
        nonlocal acks
        message = envelope.message
        if isinstance(message, AppendResponse) and message.success:
            acks += 1
            on_disk = durable.get(tmp_path / envelope.source / "dledger", 0)
            if message.match_index > on_disk:
                violations.append(f"{envelope.source} acked {message.match_index} > {on_disk}")

    spy_on_sends(monkeypatch, check)

    async def put(batch: list[Message]) -> None:
        for outcome in await leader.put_many(batch):
            assert outcome.status is AppendStatus.SUCCESS
            on_disk = durable.get(tmp_path / leader.config.node_id / "dledger", 0)
            if outcome.index > on_disk:
                violations.append(f"answered {outcome.index} > {on_disk} on the leader's disk")

    async with trio.open_nursery() as puts:
        for k in range(8):
            puts.start_soon(put, messages(10 + k))
    assert violations == []
    assert acks > 0 or size == 1


async def test_a_log_sync_cancelled_at_once_still_fsyncs_and_closes_what_it_took(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dirty files are taken (their marks cleared) before the worker thread starts: a
    cancel then must not lose their fsync, nor leak the duplicated descriptors."""
    fsync = os.fsync
    synced: list[int] = []

    def counting(fd: int) -> None:
        synced.append(fd)
        fsync(fd)

    with FileLog.open(tmp_path, flush=FlushDiskType.ASYNC_FLUSH) as log:
        log.append([LogEntry(1, 1, b"entry")])
        persister = Persister(log)
        monkeypatch.setattr(os, "fsync", counting)
        take_dirty = log.take_dirty
        scope = trio.CancelScope()

        def take_then_cancel() -> list[int]:
            fds = take_dirty()
            scope.cancel()  # lands at the hand-off to the worker thread
            return fds

        monkeypatch.setattr(log, "take_dirty", take_then_cancel)
        open_fds = len(os.listdir("/proc/self/fd"))
        with scope:
            await persister.sync_log()
        # the data and index files taken were fsynced all the same, each with its directory
        # (the first append created both files)
        assert len(synced) == 4
        assert len(os.listdir("/proc/self/fd")) == open_fds


@pytest.mark.slow
async def test_a_slow_disk_does_not_stall_heartbeats(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real time: every fsync takes 0.8 s (over two election timeouts), in the worker
    threads that do them; the leader keeps its followers and its term while puts go on."""
    fsync = os.fsync

    def slow(fd: int) -> None:
        time.sleep(0.8)
        fsync(fd)

    group = Group(tmp_path, nursery, 3, FlushDiskType.ASYNC_FLUSH)
    await group.start_all()
    leader = await group.leader()
    term = leader.raft.term
    # the first put makes the views' files (a new file's directory is fsynced at once)
    (outcome,) = await leader.put_many(messages(1))
    assert outcome.status is AppendStatus.SUCCESS
    monkeypatch.setattr(os, "fsync", slow)
    with trio.fail_after(15):
        for n in range(20):
            (outcome,) = await leader.put_many(messages(1))
            assert outcome.status is AppendStatus.SUCCESS, n
            await trio.sleep(0.1)
    assert leader.is_leader and leader.raft.term == term
    assert all(n.raft.term == term for n in group.nodes.values())
