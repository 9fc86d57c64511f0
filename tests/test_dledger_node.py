"""Networked DLedger nodes over memory streams, in virtual time; and the peer codec."""

from __future__ import annotations

import functools
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from hanet.dledger import (
    AppendRequest,
    AppendResponse,
    AppendStatus,
    DLedgerNode,
    Envelope,
    FileLog,
    Hello,
    LogEntry,
    NodeConfig,
    PreVoteRequest,
    PreVoteResponse,
    PutOutcome,
    RaftConfig,
    Role,
    VoteRequest,
    VoteResponse,
    decode_envelope,
    encode_envelope,
)
from hanet.dledger import (
    Message as RaftMessage,
)
from hanet.handlers import CorruptedFrameError
from hanet.store import (
    CommitLogReader,
    FlushDiskType,
    Message,
    MessageRecord,
    compare_commit_logs,
    decode_record,
    encode_record,
)
from hanet.testing import MemoryNetwork

RAFT = RaftConfig(
    election_timeout=0.3,
    heartbeat_interval=0.05,
    retransmit_timeout=0.15,
    append_timeout=2.0,
    max_batch=16,
)
IDS = ("n0", "n1", "n2")
BROKERS = {i: f"127.0.0.{k + 1}:1091{k}" for k, i in enumerate(IDS)}

# -- codec ------------------------------------------------------------------------------------

RECORD = encode_record(MessageRecord.create(topic="T", body=b"abc"))

MESSAGES: list[RaftMessage] = [
    PreVoteRequest(3, "n1", 10, 2),
    PreVoteResponse(3, 4, True),
    VoteRequest(4, "n2", 0, 0),
    VoteResponse(4, False),
    AppendRequest(5, "n0", 7, 4, (LogEntry(8, 5, b"", noop=True), LogEntry(9, 5, RECORD)), 6),
    AppendRequest(5, "n0", 7, 4, (), 6),
    AppendResponse(5, True, 7, match_index=9),
    AppendResponse(5, False, 7, conflict_term=3, conflict_index=5),
    AppendResponse(5, False, 7, conflict_term=None, conflict_index=2),
]


def test_hello_round_trips() -> None:
    hello = Hello("n0", "n1", "127.0.0.1:10911")
    assert decode_envelope(encode_envelope(hello)) == hello


@pytest.mark.parametrize("message", MESSAGES)
def test_peer_codec_round_trips(message: RaftMessage) -> None:
    envelope = Envelope("n0", "n1", message)
    assert decode_envelope(encode_envelope(envelope)) == envelope


@given(st.binary(max_size=80))
def test_peer_codec_rejects_garbage_with_a_typed_error(raw: bytes) -> None:
    try:
        decode_envelope(raw)
    except CorruptedFrameError:
        pass


def test_peer_codec_rejects_truncation_and_trailing_bytes() -> None:
    frame = bytes(encode_envelope(Envelope("n0", "n1", MESSAGES[4])))
    for cut in range(len(frame)):
        with pytest.raises(CorruptedFrameError):
            decode_envelope(frame[:cut])
    with pytest.raises(CorruptedFrameError, match="trailing"):
        decode_envelope(frame + b"x")


@pytest.mark.parametrize(
    ("prev_index", "prev_term", "entries"),
    [
        (-1, 0, ()),  # prev_index below 0
        (7, 6, ()),  # prev_term above the append's term
        (7, 4, (LogEntry(9, 5, RECORD),)),  # not following prev_index
        (7, 4, (LogEntry(8, 5, RECORD), LogEntry(8, 5, RECORD))),  # repeated index
        (7, 4, (LogEntry(8, 3, RECORD),)),  # below prev_term
        (7, 4, (LogEntry(8, 5, RECORD), LogEntry(9, 4, RECORD))),  # falling terms
        (7, 4, (LogEntry(8, 6, RECORD),)),  # above the append's term
        (7, 4, (LogEntry(8, 5, RECORD, noop=True),)),  # a no-op with a body
        (7, 4, (LogEntry(8, 5, b""),)),  # a client entry without one
        (7, 4, (LogEntry(8, 5, b"abc"),)),  # a body that is not a record
        (7, 4, (LogEntry(8, 5, RECORD + b"x"),)),  # a record and more
        (7, 4, (LogEntry(8, 5, RECORD[:-1]),)),  # part of a record
    ],
)
def test_peer_codec_refuses_an_append_no_log_can_take(
    prev_index: int, prev_term: int, entries: tuple[LogEntry, ...]
) -> None:
    """Decodable, but the follower's log would raise ValueError in the node loop (and end
    DLedgerNode.run): refused as a corrupted frame, which closes only that connection."""
    request = AppendRequest(5, "n0", prev_index, prev_term, entries, 6)
    frame = encode_envelope(Envelope("n0", "n1", request))
    with pytest.raises(CorruptedFrameError, match="append"):
        decode_envelope(frame)


# -- nodes ------------------------------------------------------------------------------------


class Group:
    """Three nodes on a memory network, each startable and killable."""

    def __init__(self, root: Path, nursery: trio.Nursery) -> None:
        self.root = root
        self.nursery = nursery
        self.network = MemoryNetwork()
        self.nodes: dict[str, DLedgerNode] = {}
        self.scopes: dict[str, trio.CancelScope] = {}
        self.stopped: dict[str, trio.Event] = {}
        self.seed = 0
        self.flush = FlushDiskType.ASYNC_FLUSH

    def config(self, node_id: str) -> NodeConfig:
        return NodeConfig(
            group="g",
            node_id=node_id,
            peers={i: f"{i}:0" for i in IDS},
            store_dir=self.root / node_id,
            # only its own: the others' come in their HELLO frames
            broker_addresses={node_id: BROKERS[node_id]},
            raft=RAFT,
            data_file_size=64 * 1024,
            index_file_size=32 * 256,
            mapped_file_size=64 * 1024,
            flush=self.flush,
        )

    async def start(self, node_id: str) -> DLedgerNode:
        self.seed += 1
        node = DLedgerNode(
            self.config(node_id),
            connector=self.network.connector_for(node_id),
            listen=False,
            rng=random.Random(self.seed * 7919 + IDS.index(node_id)),  # (hash() varies by run)
        )
        scope = trio.CancelScope()
        stopped = trio.Event()

        async def run(task_status: trio.TaskStatus[None]) -> None:
            try:
                with scope:
                    async with trio.open_nursery() as inner:
                        self.network.register(node, inner)
                        await inner.start(node.run)
                        task_status.started()
            finally:
                stopped.set()

        await self.nursery.start(run)
        self.nodes[node_id] = node
        self.scopes[node_id] = scope
        self.stopped[node_id] = stopped
        return node

    def crash(self, node_id: str) -> trio.Event:
        """Cut ``node_id`` off and cancel it; the event is set once it has stopped."""
        self.network.unregister(node_id)
        self.scopes[node_id].cancel()
        del self.nodes[node_id]
        return self.stopped[node_id]

    async def kill(self, node_id: str) -> None:
        await self.crash(node_id).wait()

    async def leader(self, *, not_: str | None = None) -> DLedgerNode:
        for _ in range(400):
            leaders = [n for i, n in self.nodes.items() if i != not_ and n._raft and n.is_leader]
            if len(leaders) == 1:
                return leaders[0]
            await trio.sleep(0.05)
        raise AssertionError("no leader")

    async def put(self, n: int) -> int:
        """Put message ``n`` through whoever leads; returns its commit log offset."""
        for _ in range(100):
            leader = await self.leader()
            outcome = await leader.put(Message(topic="T", body=f"m{n}".encode(), queue_id=n % 2))
            if outcome.status is AppendStatus.SUCCESS:
                return outcome.wrote_offset
            await trio.sleep(0.1)
        raise AssertionError(f"put {n} never succeeded")

    async def converged(self) -> None:
        for _ in range(400):
            nodes = list(self.nodes.values())
            if all(n._raft for n in nodes):
                applied = {n.applied_index for n in nodes}
                last = {n.raft.log.last_index for n in nodes}
                if len(applied) == 1 and applied == last:
                    return
            await trio.sleep(0.05)
        raise AssertionError("the nodes did not converge")


@pytest.fixture
async def group(tmp_path: Path) -> AsyncIterator[Group]:
    async with trio.open_nursery() as nursery:
        g = Group(tmp_path, nursery)
        yield g
        nursery.cancel_scope.cancel()


def file_log(node: DLedgerNode) -> FileLog:
    assert node.log is not None
    return node.log


def view_records(path: Path) -> list[bytes]:
    reader = CommitLogReader(path / "commitlog")
    return [record.body for _, record in reader.records()]


async def test_election_replication_and_identical_views(
    autojump_clock: trio.testing.MockClock, group: Group, tmp_path: Path
) -> None:
    for node_id in IDS:
        await group.start(node_id)
    leader = await group.leader()
    offsets = [await group.put(n) for n in range(30)]
    assert offsets == sorted(offsets) and len(set(offsets)) == 30
    await group.converged()
    statuses = [n.status() for n in group.nodes.values()]
    assert {s.role for s in statuses} == {"LEADER", "FOLLOWER"}
    assert len({s.term for s in statuses}) == 1
    lead = leader.status()
    assert all(p.lag == 0 and p.match_index == lead.last_index for p in lead.peers)
    # every node's commit log view holds the messages, byte-identical
    for node_id in IDS:
        assert view_records(tmp_path / node_id) == [f"m{n}".encode() for n in range(30)]
    for other in ("n1", "n2"):
        result = compare_commit_logs(tmp_path / "n0", tmp_path / other)
        assert result.identical, result
    # a follower refuses puts with the leader's broker address
    follower = next(n for n in group.nodes.values() if not n.is_leader)
    refused = await follower.put(Message(topic="T", body=b"x"))
    assert refused.status is AppendStatus.NOT_LEADER
    assert refused.leader_id == leader.config.node_id
    assert refused.leader_address == BROKERS[leader.config.node_id]
    # the entry's record says offset = pos + 48, as DLedger
    assert leader.log is not None
    entry = leader.log.read_entry(2)
    assert decode_record(entry.body).physical_offset == entry.pos + 48


async def test_leader_killed_a_new_one_is_elected_and_the_old_one_catches_up(
    autojump_clock: trio.testing.MockClock, group: Group, tmp_path: Path
) -> None:
    for node_id in IDS:
        await group.start(node_id)
    for n in range(20):
        await group.put(n)
    old = (await group.leader()).config.node_id
    killed_at = trio.current_time()
    # not waiting for the store to close (a worker thread: the virtual clock runs meanwhile)
    stopped = group.crash(old)
    new = await group.leader(not_=old)
    assert new.config.node_id != old
    assert trio.current_time() - killed_at < 4 * RAFT.election_timeout
    await stopped.wait()
    for n in range(20, 40):
        await group.put(n)
    await group.start(old)
    await group.converged()
    bodies = [f"m{n}".encode() for n in range(40)]
    for node_id in IDS:
        assert view_records(tmp_path / node_id) == bodies
    data = {i: b"".join(e.body for e in file_log(group.nodes[i]).iter_entries()) for i in IDS}
    assert data["n0"] == data["n1"] == data["n2"]
    for other in IDS[1:]:
        assert (tmp_path / "n0" / "dledger" / "data" / "00000000000000000000").read_bytes() == (
            tmp_path / other / "dledger" / "data" / "00000000000000000000"
        ).read_bytes()


async def test_a_node_restarts_with_its_log_and_view(
    autojump_clock: trio.testing.MockClock, group: Group, tmp_path: Path
) -> None:
    for node_id in IDS:
        await group.start(node_id)
    for n in range(10):
        await group.put(n)
    await group.converged()
    follower = next(i for i, n in group.nodes.items() if not n.is_leader)
    term = group.nodes[follower].raft.term
    await group.kill(follower)
    node = await group.start(follower)
    assert node.raft.term == term and node.raft.log.last_index >= 11
    await group.put(10)
    await group.converged()
    assert view_records(tmp_path / follower) == [f"m{n}".encode() for n in range(11)]


async def test_only_a_member_names_its_broker_port_in_a_hello(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """A HELLO on a connection of member b that claims another sender (a stranger, or this
    node) closes the connection: otherwise it could grow the table and redirect NOT_LEADER
    answers. b's own HELLO names b's broker port."""
    config = NodeConfig(
        group="g",
        node_id="a",
        peers={"a": "a:0", "b": "b:0"},
        store_dir=tmp_path,
        broker_addresses={"a": "127.0.0.1:1"},
        raft=RAFT,
        data_file_size=1 << 20,
        index_file_size=64 * 1024,
        mapped_file_size=1 << 20,
    )
    node = DLedgerNode(config, connector=MemoryNetwork().connector_for("a"), listen=False)

    async def send(stream: trio.abc.Stream, hello: Hello) -> None:
        frame = bytes(encode_envelope(hello))
        await stream.send_all(len(frame).to_bytes(4, "big") + frame)

    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        for forged in (Hello("x", "a", "10.0.0.9:1"), Hello("a", "a", "10.0.0.9:2")):
            left, right = trio.testing.memory_stream_pair()
            nursery.start_soon(functools.partial(node.accept, right, peer="b"))
            await send(left, forged)
            await send(left, Hello("b", "a", "10.0.0.9:3"))  # too late: closed
            with trio.fail_after(1):
                assert await left.receive_some(1) == b""
        assert node.broker_addresses == {"a": "127.0.0.1:1"}
        left, right = trio.testing.memory_stream_pair()
        nursery.start_soon(functools.partial(node.accept, right, peer="b"))
        await send(left, Hello("b", "a", "127.0.0.2:3"))
        await trio.sleep(0.01)
        assert node.broker_addresses == {"a": "127.0.0.1:1", "b": "127.0.0.2:3"}
        nursery.cancel_scope.cancel()


async def test_a_lone_node_elects_itself_and_commits(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    network = MemoryNetwork()
    config = NodeConfig(
        group="g",
        node_id="solo",
        peers={"solo": "x:0"},
        store_dir=tmp_path,
        raft=RAFT,
        data_file_size=1 << 20,
        index_file_size=64 * 1024,
        mapped_file_size=1 << 20,
    )
    node = DLedgerNode(config, connector=network.connector_for("solo"), listen=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        await node.wait_role_change()
        assert node.is_leader
        outcome = await node.put(Message(topic="T", body=b"hello"))
        assert outcome.status is AppendStatus.SUCCESS and outcome.wrote_offset == 0
        assert node.status().role == Role.LEADER.name
        nursery.cancel_scope.cancel()


async def test_without_a_quorum_a_put_has_an_unknown_outcome(
    autojump_clock: trio.testing.MockClock, group: Group
) -> None:
    for node_id in IDS:
        await group.start(node_id)
    await group.put(0)
    leader = await group.leader()
    for node_id in [i for i in IDS if i != leader.config.node_id]:
        group.crash(node_id)
    outcome = await leader.put(Message(topic="T", body=b"lonely"))
    assert outcome.status is AppendStatus.WAIT_QUORUM_ACK_TIMEOUT
    assert outcome.index > 0  # appended: it may still commit later
    refused = await leader.put(Message(topic="T", body=b"later"))
    assert refused.status is AppendStatus.NOT_LEADER  # check quorum: it stepped down


async def test_put_many_answers_each_and_a_cancelled_wait_leaves_its_entries(
    autojump_clock: trio.testing.MockClock, group: Group
) -> None:
    for node_id in IDS:
        await group.start(node_id)
    await group.put(0)
    leader = await group.leader()
    batch = [Message(topic="T", body=f"b{i}".encode()) for i in range(3)]
    outcomes = await leader.put_many(batch)
    assert [o.status for o in outcomes] == [AppendStatus.SUCCESS] * 3
    assert [o.index for o in outcomes] == list(range(outcomes[0].index, outcomes[0].index + 3))
    assert await leader.put_many([]) == []
    # no quorum: the caller gives up waiting; the entries stay appended
    followers = [i for i in IDS if i != leader.config.node_id]
    stopped = [group.crash(node_id) for node_id in followers]
    with trio.move_on_after(0.05) as waited:
        await leader.put_many([Message(topic="T", body=b"gave-up")] * 2)
    assert waited.cancelled_caught
    appended = leader.raft.log.last_index
    assert not leader._puts  # nothing left waiting for the abandoned call
    for node_id, event in zip(followers, stopped, strict=True):
        await event.wait()
        await group.start(node_id)
    await group.converged()
    # Their fate is the next election's: they commit when a node holding them leads again; when
    # the restarted followers elect one of themselves first (their logs end before them), the
    # new leader's log replaces them everywhere. Either way every node holds the same entries.
    held = {
        tuple(b"gave-up" in e.body for e in file_log(n).iter_entries(appended - 1, appended))
        for n in group.nodes.values()
    }
    assert len(held) == 1


async def test_put_many_nowait_calls_back_once_with_each_outcome_in_order(
    autojump_clock: trio.testing.MockClock, group: Group, caplog: pytest.LogCaptureFixture
) -> None:
    for node_id in IDS:
        await group.start(node_id)
    await group.put(0)
    leader = await group.leader()
    calls: list[list[PutOutcome]] = []
    batch = [Message(topic="T", body=f"n{i}".encode()) for i in range(4)]
    leader.put_many_nowait(batch, calls.append)
    assert calls == []  # answered once committed, not at once
    while not calls:  # noqa: ASYNC110
        await trio.sleep(0.01)
    (outcomes,) = calls
    assert [o.status for o in outcomes] == [AppendStatus.SUCCESS] * 4
    assert [o.index for o in outcomes] == list(range(outcomes[0].index, outcomes[0].index + 4))
    assert not leader._puts
    leader.put_many_nowait([], calls.append)
    assert calls[-1] == []

    # a callback that raises is logged; the node goes on
    def broken(_: list[PutOutcome]) -> None:
        raise RuntimeError("the caller's bug")

    leader.put_many_nowait(batch[:1], broken)
    outcome = await leader.put(Message(topic="T", body=b"after"))
    assert outcome.status is AppendStatus.SUCCESS
    assert "a put's callback failed" in caplog.text
    # a follower answers NOT_LEADER through the callback too
    follower = next(n for n in group.nodes.values() if not n.is_leader)
    follower.put_many_nowait(batch[:2], calls.append)
    while len(calls) < 3:  # noqa: ASYNC110
        await trio.sleep(0.01)
    assert [o.status for o in calls[-1]] == [AppendStatus.NOT_LEADER] * 2


@pytest.mark.parametrize("applied", ['{"index": 0, "offset": 0}', "garbage"])
async def test_a_view_past_its_checkpoint_is_applied_again(
    autojump_clock: trio.testing.MockClock, group: Group, tmp_path: Path, applied: str
) -> None:
    for node_id in IDS:
        await group.start(node_id)
    for n in range(12):
        await group.put(n)
    await group.converged()
    follower = next(i for i, n in group.nodes.items() if not n.is_leader)
    await group.kill(follower)
    # as after a crash right after applying, before the checkpoint
    (tmp_path / follower / "dledger" / "applied").write_text(applied)
    await group.start(follower)
    await group.put(12)
    await group.converged()
    assert view_records(tmp_path / follower) == [f"m{n}".encode() for n in range(13)]
    leader = next(i for i, n in group.nodes.items() if n.is_leader)
    assert compare_commit_logs(tmp_path / leader, tmp_path / follower).identical


async def test_sync_flush_group_commit(
    autojump_clock: trio.testing.MockClock, group: Group, tmp_path: Path
) -> None:
    group.flush = FlushDiskType.SYNC_FLUSH
    for node_id in IDS:
        await group.start(node_id)
    leader = await group.leader()
    async with trio.open_nursery() as nursery:  # concurrent puts share fsyncs
        for n in range(40):
            nursery.start_soon(group.put, n)
    await group.converged()
    assert file_log(leader).sync_on_append is False
    assert sorted(view_records(tmp_path / "n0")) == sorted(f"m{n}".encode() for n in range(40))
