"""The Raft core never writes its log: each output names the writes (truncate, then append)
and the driver makes them (etcd-io/raft's ``Ready``)."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from hanet.dledger import (
    AppendRequest,
    AppendResponse,
    AppendStatus,
    HardState,
    InMemoryLog,
    LogEntry,
    RaftConfig,
    RaftNode,
    Role,
)


class ReadOnlyLog(InMemoryLog):
    """A log the core may only read: :meth:`write` is the driver's way in."""

    def __init__(self, entries: Sequence[LogEntry] = ()) -> None:
        self.writable = True
        super().__init__(entries)
        self.writable = False

    def append(self, entries: Sequence[LogEntry]) -> None:
        assert self.writable, "the core wrote the log"
        super().append(entries)

    def truncate_from(self, index: int) -> None:
        assert self.writable, "the core wrote the log"
        super().truncate_from(index)


def _driver_writes(log: ReadOnlyLog, output: object) -> None:
    log.writable = True
    try:
        output.write_to(log)  # type: ignore[attr-defined]
    finally:
        log.writable = False


def test_a_lone_leader_names_its_no_op_and_proposals_and_writes_nothing() -> None:
    log = ReadOnlyLog()
    config = RaftConfig(election_timeout=1.0, heartbeat_interval=0.1, pre_vote=False)
    node = RaftNode("a", ["a"], log, HardState(), 0.0, random.Random(1), config)
    elected = node.tick(5.0)
    assert node.role is Role.LEADER
    assert elected.entries == (LogEntry(1, 1, b"", noop=True),)
    assert elected.truncate_from is None
    assert log.last_index == 0  # named, not written
    with pytest.raises(RuntimeError, match="write each Output"):
        node.propose(5.0, 1, b"x")  # the driver skipped the writes
    _driver_writes(log, elected)
    proposed = node.propose(5.0, 1, b"x")
    assert proposed.entries == (LogEntry(2, 1, b"x"),)
    # a lone node's own log is a quorum: committed in the same output, read from the stage
    assert [r.status for r in proposed.results] == [AppendStatus.SUCCESS]
    assert proposed.commit_index == 2
    _driver_writes(log, proposed)
    assert [e.body for e in log.snapshot()] == [b"", b"x"]


def test_a_follower_names_the_conflicting_tail_to_drop_then_the_new_entries() -> None:
    log = ReadOnlyLog([LogEntry(1, 1, b"a"), LogEntry(2, 1, b"stale"), LogEntry(3, 1, b"old")])
    node = RaftNode("b", ["a", "b", "c"], log, HardState(2), 0.0, random.Random(1))
    request = AppendRequest(2, "a", 1, 1, (LogEntry(2, 2, b"new"),), 1)
    output = node.receive(0.0, "a", request)
    assert output.refused is None
    assert output.truncate_from == 2
    assert output.entries == (LogEntry(2, 2, b"new"),)
    (answer,) = output.messages
    assert answer.message == AppendResponse(2, True, 1, match_index=2)
    assert log.last_index == 3  # untouched until the driver writes
    _driver_writes(log, output)
    assert [(e.index, e.term, e.body) for e in log.snapshot()] == [
        (1, 1, b"a"),
        (2, 2, b"new"),
    ]
    again = node.receive(0.1, "a", AppendRequest(2, "a", 2, 2, (), 2))  # a heartbeat
    assert again.entries == () and again.truncate_from is None
    assert again.commit_index == 2
