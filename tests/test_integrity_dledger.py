"""DLedger integrity: a follower that cut its log after damage (at a restart) is refilled by
the leader, and a saved term beyond any plausible value is refused at start with a clear
error instead of a node that runs silently stuck."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import pytest

from hanet.dledger import (
    DLedgerError,
    FileLog,
    HardState,
    InMemoryLog,
    LogEntry,
    RaftNode,
    Role,
)
from hanet.store import FlushDiskType, MessageRecord, encode_record
from hanet.testing import SIM_RAFT_CONFIG, Cluster


def open_log(path: Path) -> FileLog:
    return FileLog.open(
        path, data_file_size=4096, index_file_size=512, flush=FlushDiskType.SYNC_FLUSH
    )


def record(n: int) -> bytes:
    return encode_record(MessageRecord.create(topic="T", body=b"m%d" % n, queue_offset=n))


def _elect(cluster: Cluster, node_id: str) -> None:
    cluster.timeout(node_id)
    cluster.run()
    assert cluster.nodes[node_id].role is Role.LEADER


def _heartbeat(cluster: Cluster, rounds: int = 5) -> None:
    for _ in range(rounds):
        cluster.advance(SIM_RAFT_CONFIG.heartbeat_interval)
        cluster.tick_all()
        cluster.run()


def test_a_follower_that_cut_its_log_is_refilled(caplog: pytest.LogCaptureFixture) -> None:
    """c acknowledged 21 entries, then restarted with only 8 (its log was cut at a damaged
    entry): the leader's next index for it steps back below what it had acknowledged and
    sends the rest again, so a group that then loses b still commits."""
    cluster = Cluster(["a", "b", "c"])
    _elect(cluster, "a")
    for i in range(20):
        cluster.propose("a", i, b"entry %d" % i)
        cluster.run()
    leader_log = cluster.logs["a"]
    assert cluster.logs["c"].last_index == leader_log.last_index == 21
    assert cluster.nodes["a"].match_index("c") == 21
    cluster.logs["c"].truncate_from(9)  # what FileLog's recovery keeps before the damage
    cluster.restart("c")
    caplog.set_level(logging.WARNING, "hanet.dledger")
    _heartbeat(cluster)
    assert cluster.logs["c"].last_index == 21
    assert cluster.nodes["a"].match_index("c") == 21
    assert [e.body for e in cluster.logs["c"].entries_from(1, 100)] == [
        e.body for e in leader_log.entries_from(1, 100)
    ]
    assert "c acknowledged index 21 but now holds only up to 8" in caplog.text
    # b down: a and c are a majority and commit a new entry
    cluster.propose("a", 99, b"after")
    cluster.run(allow=lambda e: "b" not in (e.source, e.target))
    assert cluster.commits["a"] == 22


def test_a_follower_that_lost_everything_is_refilled() -> None:
    cluster = Cluster(["a", "b", "c"])
    _elect(cluster, "a")
    for i in range(5):
        cluster.propose("a", i, b"x")
    cluster.run()
    cluster.logs["c"].truncate_from(1)
    cluster.restart("c")
    _heartbeat(cluster)
    assert cluster.logs["c"].last_index == cluster.logs["a"].last_index == 6


@pytest.mark.parametrize(
    ("term", "why"),
    [
        (10**30, "does not fit the wire's 64 bits"),
        (-3, "is negative"),
        (5_000_000, "more than 1000000 beyond the term 2 of the last log entry"),
    ],
)
def test_an_implausible_saved_term_is_refused_at_start(tmp_path: Path, term: int, why: str) -> None:
    with open_log(tmp_path) as log:
        log.append([LogEntry(1, 1, record(0)), LogEntry(2, 2, record(1))])
    (tmp_path / "hardstate").write_text(json.dumps({"term": term, "voted_for": None}))
    with open_log(tmp_path) as log, pytest.raises(DLedgerError) as info:
        log.load_hard_state()
    message = str(info.value)
    assert why in message and "hardstate" in message and "backup" in message
    # the core refuses it too, whoever loads the state
    with pytest.raises(ValueError, match="saved term cannot be used"):
        RaftNode("a", ["a", "b"], InMemoryLog(), HardState(term), 0.0, random.Random(1))


def test_a_plausible_saved_term_loads(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        log.append([LogEntry(1, 3, record(0))])
        log.save_hard_state(HardState(40, "b"))
    with open_log(tmp_path) as log:
        assert log.load_hard_state() == HardState(40, "b")
