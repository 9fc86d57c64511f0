"""A DLedger node hands a peer's append or acknowledgement to the Raft core in the task that
read it when its loop is idle (no wake-up of the loop a round): a follower answers the appends
of one read once, with the highest index, on the connection they came on; an append whose
entries conflict with the follower's tail still goes through the loop, which drops that tail
before appending; under SYNC_FLUSH the answer waits for the fsync of what it acknowledges."""

from __future__ import annotations

import random
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

from hanet.boot import Connector
from hanet.channel import Channel
from hanet.dledger import (
    AppendRequest,
    AppendResponse,
    DLedgerNode,
    Envelope,
    LogEntry,
    NodeConfig,
    Persister,
    RaftConfig,
    decode_envelope,
    encode_envelope,
    put_records,
)
from hanet.store import FlushDiskType, Message

PEERS = {"a": "127.0.0.1:1", "b": "127.0.0.1:2", "c": "127.0.0.1:3"}
RAFT = RaftConfig(
    election_timeout=5.0, heartbeat_interval=0.05, retransmit_timeout=0.15, append_timeout=0.3
)


def _unreachable(peer: str) -> Connector:
    async def connect() -> trio.abc.Stream:
        await trio.sleep(0.01)
        raise OSError(f"{peer} is unreachable")

    return connect


def _frame(message: AppendRequest) -> bytes:
    body = bytes(encode_envelope(Envelope("a", "b", message)))
    return struct.pack(">I", len(body)) + body


def _record(body: bytes) -> bytes:
    """A commit log record holding ``body`` (what an entry carries)."""
    (record,) = put_records(
        [Message("T", body)], 0, lambda _size, end: end, (b"\x7f\0\0\1", 1), lambda: 0
    )
    return record


def _append(term: int, prev: int, prev_term: int, *entries: tuple[int, int]) -> bytes:
    """An append from leader a to b: entries as (index, term), commit index 0."""
    return _frame(
        AppendRequest(
            term,
            "a",
            prev,
            prev_term,
            tuple(LogEntry(i, t, _record(b"m%d-%d" % (i, t))) for i, t in entries),
            0,
        )
    )


class _Leader:
    """The leader's end of a connection to follower b: writes frames, reads answers."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buffer = b""

    async def answers(self, seconds: float = 0.5) -> list[AppendResponse]:
        """Every answer that arrives within ``seconds``."""
        got: list[AppendResponse] = []
        with trio.move_on_after(seconds):
            while True:
                while len(self.buffer) >= 4:
                    (length,) = struct.unpack_from(">I", self.buffer)
                    if len(self.buffer) < 4 + length:
                        break
                    envelope = decode_envelope(self.buffer[4 : 4 + length])
                    self.buffer = self.buffer[4 + length :]
                    assert isinstance(envelope, Envelope)
                    assert (envelope.source, envelope.target) == ("b", "a")
                    assert isinstance(envelope.message, AppendResponse)
                    got.append(envelope.message)
                chunk = await self.stream.receive_some()
                assert chunk, "b closed the connection"
                self.buffer += chunk
        return got


@asynccontextmanager
async def _follower(
    tmp_path: Path, flush: FlushDiskType = FlushDiskType.ASYNC_FLUSH
) -> AsyncIterator[tuple[DLedgerNode, _Leader]]:
    """Node b of a, b, c, whose own connections to a and c never connect: what b says to a
    can only come back on the connection a opened (``_Leader``)."""
    config = NodeConfig(
        group="g",
        node_id="b",
        peers=PEERS,
        store_dir=tmp_path / "b",
        raft=RAFT,
        flush=flush,
        data_file_size=1 << 20,
        index_file_size=64 * 1024,
        mapped_file_size=1 << 20,
    )
    connector: Callable[[str], Connector] = _unreachable
    node = DLedgerNode(config, connector=connector, listen=False, rng=random.Random(1))
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        mine, theirs = trio.testing.memory_stream_pair()
        nursery.start_soon(lambda: node.accept(theirs, peer="a"))
        yield node, _Leader(mine)
        nursery.cancel_scope.cancel()


def _check_next_tick(node: DLedgerNode) -> None:
    """The loop's next tick is no later than the election timeout the core reset last (an
    append handled in its reading task brings it forward when it moved it earlier)."""
    wait = node._wait_scope
    assert wait is not None
    assert wait.deadline <= node.raft._election_deadline


def _count_handled_in_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The match index each append handled in its reading task ended at, in order."""
    handled: list[int] = []
    receive_now = DLedgerNode._receive_now

    def counted(self: DLedgerNode, envelope: Envelope, channel: Channel) -> None:
        receive_now(self, envelope, channel)
        message = envelope.message
        if isinstance(message, AppendRequest):
            handled.append(message.prev_index + len(message.entries))

    monkeypatch.setattr(DLedgerNode, "_receive_now", counted)
    return handled


async def test_a_follower_answers_the_appends_of_a_read_once_on_their_connection(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handled = _count_handled_in_reads(monkeypatch)
    async with _follower(tmp_path) as (node, leader):
        await leader.stream.send_all(_append(1, 0, 0, (1, 1)))
        (first,) = await leader.answers()
        assert (first.term, first.success, first.match_index) == (1, True, 1)
        _check_next_tick(node)
        # three appends in one read: one answer, for the last, on this connection
        await leader.stream.send_all(
            _append(1, 1, 1, (2, 1)) + _append(1, 2, 1, (3, 1), (4, 1)) + _append(1, 4, 1)
        )
        assert [(a.success, a.match_index) for a in await leader.answers()] == [(True, 4)]
        _check_next_tick(node)
        assert node.log is not None and node.log.last_index == 4
        assert node.raft.leader_id == "a"
        # a repeated append (entries b holds, same terms) is answered the same way
        await leader.stream.send_all(_append(1, 2, 1, (3, 1), (4, 1)))
        assert [(a.success, a.match_index) for a in await leader.answers()] == [(True, 4)]
        _check_next_tick(node)
    # all in the reading task: the loop was idle each time
    assert handled == [1, 2, 4, 4, 4]


async def test_an_append_that_conflicts_goes_through_the_loop_which_truncates_first(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handled = _count_handled_in_reads(monkeypatch)
    async with _follower(tmp_path) as (node, leader):
        await leader.stream.send_all(_append(1, 0, 0, (1, 1), (2, 1), (3, 1)))
        assert [a.match_index for a in await leader.answers()] == [3]
        cuts: list[tuple[int, int]] = []
        truncate = Persister.truncate_log

        async def truncate_log(self: Persister, index: int) -> None:
            await truncate(self, index)
            assert node.log is not None
            cuts.append((index, node.log.last_index))

        monkeypatch.setattr(Persister, "truncate_log", truncate_log)
        # a new leader of term 2 whose log differs from index 2 on
        await leader.stream.send_all(_append(2, 1, 1, (2, 2)))
        answers = await leader.answers()
        assert [(a.term, a.success, a.match_index) for a in answers] == [(2, True, 2)]
        assert cuts == [(2, 1)]  # the tail dropped (durably) before the entry was appended
        log_ = node.log
        assert log_ is not None
        assert (log_.last_index, log_.term_at(1), log_.term_at(2)) == (2, 1, 2)
    assert handled == [3]  # the conflicting one went through the loop


async def test_under_sync_flush_the_answer_waits_for_the_fsync(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _follower(tmp_path, FlushDiskType.SYNC_FLUSH) as (node, leader):
        events: list[str] = []
        sync = Persister.sync_log

        async def sync_log(self: Persister) -> None:
            await sync(self)
            assert node.log is not None
            events.append(f"synced to {node.log.last_index}")

        monkeypatch.setattr(Persister, "sync_log", sync_log)
        await leader.stream.send_all(_append(1, 0, 0, (1, 1)))
        for answer in await leader.answers():
            events.append(f"answer {answer.match_index}")
        await leader.stream.send_all(_append(1, 1, 1, (2, 1)) + _append(1, 2, 1, (3, 1)))
        for answer in await leader.answers():
            events.append(f"answer {answer.match_index}")
        answered = [e for e in events if e.startswith("answer")]
        assert answered == ["answer 1", "answer 3"]
        for said in answered:
            index = int(said.split()[1])
            # some fsync covering it came before it
            assert any(
                e.startswith("synced") and int(e.split()[2]) >= index
                for e in events[: events.index(said)]
            )
