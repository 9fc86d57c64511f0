"""A lone DLedger leader (a 1-node group) proposes a put in the caller's task when its loop
is idle: under ASYNC_FLUSH the put is appended, committed (its own copy is the majority),
applied and answered before the call returns, as a classic master stores a send in its read;
under SYNC_FLUSH the answer still waits for the log's fsync. Puts submitted while the loop has
work queued go through it, so a later put never overtakes an earlier one; an append that fails
stops the node and its puts end unknown, as in the loop."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing

from hanet.dledger import (
    AppendStatus,
    DLedgerNode,
    FileLog,
    HardState,
    Hello,
    InMemoryLog,
    NodeConfig,
    Persister,
    PutOutcome,
    RaftConfig,
    RaftNode,
    Role,
)
from hanet.store import FlushDiskType, Message
from hanet.testing import EmbeddedChannel

RAFT = RaftConfig(election_timeout=0.3, heartbeat_interval=0.05, append_timeout=2.0)


def _config(tmp_path: Path, flush: FlushDiskType = FlushDiskType.ASYNC_FLUSH) -> NodeConfig:
    return NodeConfig(
        group="g",
        node_id="solo",
        peers={"solo": "x:0"},
        store_dir=tmp_path / "solo",
        raft=RAFT,
        flush=flush,
        data_file_size=256 * 1024,
        index_file_size=32 * 1024,
        mapped_file_size=256 * 1024,
    )


def _messages(tag: str, count: int) -> list[Message]:
    return [Message(topic="T", body=f"{tag}{i}".encode(), queue_id=i % 2) for i in range(count)]


async def _leader(nursery: trio.Nursery, config: NodeConfig) -> DLedgerNode:
    node = DLedgerNode(config, listen=False)
    await nursery.start(node.run)
    if not node.is_leader:
        await node.wait_role_change()
    assert node.is_leader
    await trio.testing.wait_all_tasks_blocked()  # the loop is idle: the no-op applied
    return node


@pytest.fixture
async def nursery() -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as n:
        yield n
        n.cancel_scope.cancel()


async def test_a_lone_leader_answers_within_the_call_in_order_and_applied(
    autojump_clock: trio.testing.MockClock,
    nursery: trio.Nursery,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    node = await _leader(nursery, _config(tmp_path))
    calls: list[list[PutOutcome]] = []
    node.put_many_nowait(_messages("a", 5), calls.append)
    node.put_many_nowait(_messages("b", 3), calls.append)
    # answered before the calls returned: committed and applied, nothing left waiting
    assert [len(c) for c in calls] == [5, 3]
    outcomes = calls[0] + calls[1]
    assert [o.status for o in outcomes] == [AppendStatus.SUCCESS] * 8
    first = outcomes[0].index
    assert [o.index for o in outcomes] == list(range(first, first + 8))
    assert node.raft.commit_index == node.applied_index == first + 7
    offsets = [o.wrote_offset for o in outcomes]
    assert offsets == sorted(offsets) and offsets[0] == 0
    assert [o.queue_offset for o in outcomes] == [0, 0, 1, 1, 2, 3, 2, 4]
    assert not node._puts
    # the view holds them, in order
    store = node.store
    assert store is not None
    sent = _messages("a", 5) + _messages("b", 3)
    for message, outcome in zip(sent, outcomes, strict=True):
        record = store.get_message("T", message.queue_id, outcome.queue_offset)
        assert record is not None and record.body == message.body
    # put_many too; a checkpoint all the same
    (outcome,) = await node.put_many(_messages("c", 1))
    assert outcome.status is AppendStatus.SUCCESS and outcome.index == first + 8

    # a callback that raises is logged; the node goes on
    def broken(_: list[PutOutcome]) -> None:
        raise RuntimeError("the caller's bug")

    node.put_many_nowait(_messages("d", 1), broken)
    assert "a put's callback failed" in caplog.text
    node.put_many_nowait(_messages("e", 1), calls.append)
    assert calls[-1][0].status is AppendStatus.SUCCESS and calls[-1][0].index == first + 10
    node.put_many_nowait([], calls.append)
    assert calls[-1] == []


async def test_under_sync_flush_the_answer_waits_for_the_fsync(
    autojump_clock: trio.testing.MockClock,
    nursery: trio.Nursery,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    durable = [0]
    sync_log = Persister.sync_log

    async def tracked(self: Persister) -> None:
        covered = self.log.last_index  # appended before this flush: on disk once it returns
        await sync_log(self)
        durable[0] = max(durable[0], covered)

    monkeypatch.setattr(Persister, "sync_log", tracked)
    node = await _leader(nursery, _config(tmp_path, FlushDiskType.SYNC_FLUSH))
    answered: list[tuple[list[PutOutcome], int]] = []
    for tag in "abc":
        node.put_many_nowait(_messages(tag, 4), lambda o: answered.append((o, durable[0])))
    assert answered == []  # appended and committed, not answered before the fsync
    while len(answered) < 3:  # noqa: ASYNC110
        await trio.sleep(0.01)
    indexes = [o.index for outcomes, _ in answered for o in outcomes]
    assert indexes == list(range(indexes[0], indexes[0] + 12))
    for outcomes, on_disk in answered:
        assert all(o.status is AppendStatus.SUCCESS for o in outcomes)
        assert max(o.index for o in outcomes) <= on_disk


async def test_puts_behind_queued_work_go_through_the_loop_in_order(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery, tmp_path: Path
) -> None:
    node = await _leader(nursery, _config(tmp_path))
    calls: list[tuple[str, list[PutOutcome]]] = []
    # something in the inbox (a HELLO from a closed connection: read and ignored)
    channel = EmbeddedChannel()
    channel.close_nowait()
    node._deliver_hello(Hello("x", "solo", "127.0.0.1:1"), channel)
    node.put_many_nowait(_messages("a", 2), lambda o: calls.append(("a", o)))
    node.put_many_nowait(_messages("b", 2), lambda o: calls.append(("b", o)))
    assert calls == []  # queued behind the HELLO: the loop proposes them
    await trio.testing.wait_all_tasks_blocked()
    node.put_many_nowait(_messages("c", 2), lambda o: calls.append(("c", o)))
    assert [tag for tag, _ in calls] == ["a", "b", "c"]  # the last at once, after them
    indexes = [o.index for _, outcomes in calls for o in outcomes]
    assert indexes == list(range(indexes[0], indexes[0] + 6))


async def test_a_failed_append_stops_the_node_and_its_puts_end_unknown(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[PutOutcome]] = []
    with pytest.raises(BaseExceptionGroup) as raised:
        async with trio.open_nursery() as nursery:
            node = await _leader(nursery, _config(tmp_path))

            def broken(self: FileLog, entries: object) -> None:
                raise OSError("disk gone")

            monkeypatch.setattr(FileLog, "append", broken)
            node.put_many_nowait(_messages("a", 2), calls.append)
            node.put_many_nowait(_messages("b", 1), calls.append)  # behind it: in the loop
            await trio.sleep(1)
    assert raised.group_contains(OSError, match="disk gone", depth=None)
    # unknown (the first may be in the log), never SUCCESS; the second never reached the log
    assert [[o.status for o in c] for c in calls] == [
        [AppendStatus.WAIT_QUORUM_ACK_TIMEOUT] * 2,
        [AppendStatus.WAIT_QUORUM_ACK_TIMEOUT],
    ]


def test_a_lone_leaders_batch_commits_at_once_in_order_and_past_max_pending_is_refused() -> None:
    log = InMemoryLog()
    raft = RaftNode("solo", [], log, HardState(), 0.0, random.Random(1), RaftConfig(max_pending=4))
    out = raft.tick(10.0)  # the election timeout: a lone node elects itself
    out.write_to(log)
    assert raft.role is Role.LEADER
    noop = log.last_index
    out = raft.propose_many(10.0, [(i, f"m{i}".encode()) for i in range(6)])
    assert [e.index for e in out.entries] == [noop + 1 + i for i in range(4)]
    assert out.commit_index == noop + 4 and out.messages == () and out.hard_state is None
    assert [(r.request_id, r.status, r.index) for r in out.results] == [
        *((i, AppendStatus.SUCCESS, noop + 1 + i) for i in range(4)),
        (4, AppendStatus.LEADER_PENDING_FULL, 0),
        (5, AppendStatus.LEADER_PENDING_FULL, 0),
    ]
    out.write_to(log)
    out = raft.tick(10.1)  # nothing waits for a quorum: no deadline of an append
    assert out.results == () and out.commit_index is None
