"""The Raft core of DLedger mode, driven by hand through a manual :class:`Cluster`.

Besides the basics (elections, appends, results, persist-then-send), one test per point where
the core does better than DLedger: the current-term commit rule (Figure 8 of the Raft paper),
pre-vote, and fast back-off by term.
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Callable

import attrs
import pytest

from hanet.dledger import (
    TRANSITIONS,
    AppendRequest,
    AppendResponse,
    AppendStatus,
    Envelope,
    HardState,
    InMemoryLog,
    PreVoteRequest,
    PreVoteResponse,
    RaftNode,
    Role,
    VoteRequest,
    VoteResponse,
)
from hanet.testing import SIM_RAFT_CONFIG, Cluster

ONE_AT_A_TIME = attrs.evolve(SIM_RAFT_CONFIG, max_batch=1)


def _between(*ids: str) -> Callable[[Envelope], bool]:
    members = set(ids)
    return lambda e: e.source in members and e.target in members


def _elect(cluster: Cluster, node_id: str) -> None:
    cluster.timeout(node_id)
    cluster.run()
    assert cluster.nodes[node_id].role is Role.LEADER


def test_the_transition_table() -> None:
    assert (Role.FOLLOWER, Role.LEADER) not in TRANSITIONS
    assert (Role.LEADER, Role.CANDIDATE) not in TRANSITIONS
    assert (Role.LEADER, Role.LEADER) not in TRANSITIONS
    assert (Role.CANDIDATE, Role.LEADER) in TRANSITIONS


def test_a_one_node_group_elects_itself_and_commits_at_once() -> None:
    cluster = Cluster(["a"])
    cluster.timeout("a")
    node = cluster.nodes["a"]
    assert node.role is Role.LEADER and node.term == 1
    assert cluster.commits["a"] == 1  # the no-op of term 1
    output = cluster.propose("a", 7, b"x")
    assert [(r.request_id, r.status, r.index, r.term) for r in output.results] == [
        (7, AppendStatus.SUCCESS, 2, 1)
    ]
    assert output.commit_index == 2


def test_three_nodes_elect_replicate_and_commit() -> None:
    cluster = Cluster(["a", "b", "c"])
    changes: list[tuple[Role, int]] = []
    cluster.nodes["a"].on_role_change(lambda role, term: changes.append((role, term)))
    _elect(cluster, "a")
    assert changes == [(Role.CANDIDATE, 1), (Role.LEADER, 1)]
    cluster.propose("a", 1, b"one")
    cluster.run()
    assert [r.status for r in cluster.results] == [AppendStatus.SUCCESS]
    assert cluster.commits["a"] == 2
    cluster.advance(SIM_RAFT_CONFIG.heartbeat_interval)
    cluster.tick("a")
    cluster.run()  # the heartbeat carries the commit index
    assert cluster.commits == {"a": 2, "b": 2, "c": 2}
    assert cluster.logs["b"].snapshot() == cluster.logs["a"].snapshot()
    assert cluster.nodes["b"].leader_id == "a"


def test_appends_to_a_follower_are_refused_with_the_leader() -> None:
    cluster = Cluster(["a", "b", "c"])
    _elect(cluster, "a")
    output = cluster.propose("b", 5, b"x")
    assert [(r.status, r.leader_id) for r in output.results] == [(AppendStatus.NOT_LEADER, "a")]
    assert cluster.logs["b"].last_index == 1  # nothing appended


def test_too_many_pending_appends_are_refused() -> None:
    cluster = Cluster(["a", "b", "c"], attrs.evolve(SIM_RAFT_CONFIG, max_pending=2))
    _elect(cluster, "a")
    statuses = [cluster.propose("a", i, b"x").results for i in range(3)]
    assert statuses[:2] == [(), ()]
    assert [r.status for r in statuses[2]] == [AppendStatus.LEADER_PENDING_FULL]


def test_an_append_without_a_quorum_times_out_with_an_unknown_outcome() -> None:
    config = attrs.evolve(SIM_RAFT_CONFIG, check_quorum=False)
    cluster = Cluster(["a", "b", "c"], config)
    _elect(cluster, "a")
    cluster.propose("a", 9, b"lost?")
    cluster.outbox.clear()  # the appends are lost
    cluster.advance(config.append_timeout)
    output = cluster.tick("a")
    assert [(r.request_id, r.status, r.index) for r in output.results] == [
        (9, AppendStatus.WAIT_QUORUM_ACK_TIMEOUT, 2)
    ]


def test_a_leader_cut_off_from_the_majority_steps_down_and_ends_its_appends() -> None:
    cluster = Cluster(["a", "b", "c"])
    _elect(cluster, "a")
    cluster.propose("a", 1, b"x")
    cluster.outbox.clear()
    for _ in range(10):
        cluster.advance(SIM_RAFT_CONFIG.heartbeat_interval)
        cluster.tick("a")
        cluster.outbox.clear()
    assert cluster.nodes["a"].role is Role.FOLLOWER
    assert cluster.nodes["a"].term == 1  # check quorum does not bump the term
    assert [r.status for r in cluster.results] == [AppendStatus.WAIT_QUORUM_ACK_TIMEOUT]


def test_persist_then_send_a_vote() -> None:
    log = InMemoryLog()
    node = RaftNode("b", ["a", "b", "c"], log, HardState(), 0.0, random.Random(1))
    # a vote is honoured after a pre-vote this node granted (see test_dledger_byzantine.py)
    prevote = node.receive(0.0, "a", PreVoteRequest(1, "a", 0, 0))
    assert [e.message for e in prevote.messages] == [PreVoteResponse(0, 1, True)]
    assert prevote.hard_state is None
    output = node.receive(0.0, "a", VoteRequest(1, "a", 0, 0))
    # the vote leaves in the same output as the hard state that remembers it
    assert output.hard_state == HardState(1, "a")
    assert [e.message for e in output.messages] == [VoteResponse(1, True)]
    # a crash after persisting: the restarted node refuses a second candidate in term 1
    again = RaftNode("b", ["a", "b", "c"], log, output.hard_state, 0.0, random.Random(1))
    refused = again.receive(0.0, "c", VoteRequest(1, "c", 5, 1))
    assert [e.message for e in refused.messages] == [VoteResponse(1, False)]
    assert refused.hard_state is None


def test_a_candidate_with_an_older_log_gets_no_vote() -> None:
    cluster = Cluster(["a", "b", "c"], logs={"b": [(1, b"x")], "c": [(1, b"x")]})
    cluster.timeout("a")  # a's pre-vote: b and c have newer logs
    cluster.run()
    assert cluster.nodes["a"].role is Role.FOLLOWER and cluster.nodes["a"].term == 0


def test_heartbeats_keep_followers_quiet() -> None:
    cluster = Cluster(["a", "b", "c"])
    _elect(cluster, "a")
    for _ in range(50):
        cluster.advance(SIM_RAFT_CONFIG.heartbeat_interval)
        cluster.tick_all()
        cluster.run()
    assert [cluster.nodes[i].role for i in "abc"] == [Role.LEADER, Role.FOLLOWER, Role.FOLLOWER]
    assert cluster.nodes["a"].term == 1


def test_appends_are_pipelined_and_bounded() -> None:
    config = attrs.evolve(SIM_RAFT_CONFIG, max_batch=2, max_inflight=3)
    cluster = Cluster(["a", "b", "c"], config)
    _elect(cluster, "a")
    for i in range(20):
        cluster.propose("a", i, b"x")
    to_b = [
        e.message
        for e in cluster.outbox
        if e.target == "b" and isinstance(e.message, AppendRequest) and e.message.entries
    ]
    # three in flight without waiting for answers (one entry each: sent as they came)
    assert [m.prev_index for m in to_b] == [1, 2, 3]
    rounds = cluster.run()
    assert cluster.commits["a"] == 21 and rounds <= 2 * (20 // 6 + 2)


def test_figure_8_an_old_term_entry_on_a_majority_is_not_committed() -> None:
    """Raft paper, Figure 8 (c)-(d): S1, leader of term 4, copies its entry 2@2 to a majority
    (S1, S2, S3) before any entry of term 4 is there. Counting copies would commit it, yet S5
    (last entry 2@3) can still be elected and overwrite it. The core does not commit it."""
    ids = ["s1", "s2", "s3", "s4", "s5"]
    logs = {
        "s1": [(1, b"a"), (2, b"b")],
        "s2": [(1, b"a"), (2, b"b")],
        "s3": [(1, b"a")],
        "s4": [(1, b"a")],
        "s5": [(1, b"a"), (3, b"z")],
    }
    hard = dict.fromkeys(ids, HardState(3))
    cluster = Cluster(ids, ONE_AT_A_TIME, logs=logs, hard_states=hard)

    def without_term_4(e: Envelope) -> Envelope:
        """The append as if the leader had sent only the entries before its no-op."""
        message = e.message
        if isinstance(message, AppendRequest):
            entries = tuple(x for x in message.entries if x.term != 4)
            return attrs.evolve(e, message=attrs.evolve(message, entries=entries))
        return e

    def exchange(allow: Callable[[Envelope], bool]) -> None:
        for _ in range(20):
            cluster.outbox = [without_term_4(e) for e in cluster.outbox]
            if not cluster.deliver(allow):
                break

    def votes_or_appends_to_s2_s3(e: Envelope) -> bool:
        if isinstance(e.message, (AppendRequest, AppendResponse)):
            return {e.source, e.target} <= {"s1", "s2", "s3"}
        return {e.source, e.target} <= {"s1", "s2", "s3", "s4"}

    cluster.timeout("s1")
    exchange(votes_or_appends_to_s2_s3)
    s1 = cluster.nodes["s1"]
    assert s1.role is Role.LEADER and s1.term == 4

    for _ in range(20):
        cluster.advance(ONE_AT_A_TIME.heartbeat_interval)
        cluster.tick("s1")
        exchange(_between("s1", "s2", "s3"))
    assert s1.match_index("s2") == 2 and s1.match_index("s3") == 2
    assert [cluster.logs[i].term_at(2) for i in ids] == [2, 2, 2, None, 3]
    assert s1.commit_index == 0  # three of five hold 2@2: not committed, not of term 4
    assert max(cluster.commits.values()) == 0

    # S1 crashes; S5 is elected with S2, S3, S4 and overwrites 2@2 everywhere
    cluster.outbox.clear()
    others = ("s2", "s3", "s4", "s5")
    for _ in range(3):
        cluster.timeout("s5")
        cluster.run(_between(*others))
        if cluster.nodes["s5"].role is Role.LEADER:
            break
    s5 = cluster.nodes["s5"]
    assert s5.role is Role.LEADER and s5.term == 5
    for _ in range(10):
        cluster.advance(ONE_AT_A_TIME.heartbeat_interval)
        cluster.tick("s5")
        cluster.run(_between(*others))
    assert [cluster.logs[i].term_at(2) for i in others] == [3, 3, 3, 3]
    assert all(cluster.commits[i] == 3 for i in others)  # 1@1, 2@3, no-op 3@5


@pytest.mark.parametrize("pre_vote", [True, False])
def test_pre_vote_a_partitioned_node_rejoining_does_not_depose_the_leader(
    pre_vote: bool,
) -> None:
    config = attrs.evolve(SIM_RAFT_CONFIG, pre_vote=pre_vote)
    cluster = Cluster(["a", "b", "c"], config)
    _elect(cluster, "a")
    for _ in range(100):  # c is cut off for 100 heartbeats (about 10 election timeouts)
        cluster.advance(config.heartbeat_interval)
        cluster.tick_all()
        cluster.run(_between("a", "b"))
    cut_off_term = cluster.nodes["c"].term
    for _ in range(10):  # the partition heals
        cluster.advance(config.heartbeat_interval)
        cluster.tick_all()
        cluster.run()
    if pre_vote:
        assert cut_off_term == 1  # its pre-votes failed, its term stayed
        assert cluster.nodes["a"].role is Role.LEADER and cluster.nodes["a"].term == 1
        assert cluster.nodes["c"].leader_id == "a"
    else:  # what pre-vote prevents: c's term ran ahead, the rejoin deposed a
        assert cut_off_term > 5
        assert cluster.nodes["a"].term >= cut_off_term


def _diverged(terms: int, run: int) -> Cluster:
    """s0 and s2: a prefix of 5, then terms 2, 4, ... 2*terms (``run`` entries each) and one
    entry of term 2*terms + 2. s1: the prefix, then terms 3, 5, ... 2*terms + 1."""
    prefix = [(1, b"p")] * 5
    leader = prefix + [(t, b"l") for t in range(2, 2 * terms + 1, 2) for _ in range(run)]
    leader.append((2 * terms + 2, b"l"))
    follower = prefix + [(t, b"f") for t in range(3, 2 * terms + 2, 2) for _ in range(run)]
    hard = {
        "s0": HardState(2 * terms + 2),
        "s1": HardState(2 * terms + 1),
        "s2": HardState(2 * terms + 2),
    }
    logs = {"s0": leader, "s1": follower, "s2": leader}
    return Cluster(["s0", "s1", "s2"], SIM_RAFT_CONFIG, logs=logs, hard_states=hard)


def _refusals_until_match(terms: int, run: int) -> int:
    cluster = _diverged(terms, run)
    cluster.timeout("s0")
    cluster.run(_between("s0", "s2"))
    s0 = cluster.nodes["s0"]
    assert s0.role is Role.LEADER
    cluster.advance(SIM_RAFT_CONFIG.retransmit_timeout)
    cluster.tick("s0")  # the first append to s1 was lost: again
    cluster.outbox = [e for e in cluster.outbox if e.target == "s1"]
    refusals = 0
    for _ in range(10 * terms + 10):
        if s0.match_index("s1") > 0:
            break
        cluster.deliver(lambda e: e.target == "s1")  # the leader's appends to s1
        refusals += sum(
            1
            for e in cluster.outbox
            if isinstance(e.message, AppendResponse) and not e.message.success
        )
        cluster.deliver(lambda e: e.source == "s1")  # s1's answers
    assert s0.match_index("s1") >= 5  # the common prefix (and the entries sent with it)
    cluster.run(_between("s0", "s1"), rounds=10_000)
    assert cluster.logs["s1"].snapshot() == cluster.logs["s0"].snapshot()
    return refusals


@pytest.mark.parametrize("terms", [1, 4, 10])
def test_fast_back_off_skips_a_term_per_round_trip(terms: int) -> None:
    short = _refusals_until_match(terms, run=3)
    long = _refusals_until_match(terms, run=200)
    assert short == long  # proportional to the divergent terms, not to the entries
    assert long <= terms + 2


def test_the_core_is_sans_io() -> None:
    code = (
        "import sys, hanet.dledger; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('trio', 'socket', 'hanet')"
        " and not m.startswith(('hanet.dledger', 'hanet.errors', 'hanet.lazy')) and m != 'hanet'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_appends_are_bounded_in_bytes_and_carry_one_large_entry_alone() -> None:
    """A follower catching up on large entries gets appends that fit ``max_batch_bytes``
    (bodies + 21 bytes each), or a single entry when one alone is larger: an append never
    outgrows the peer frame limit however many entries ``max_batch`` allows."""
    config = attrs.evolve(SIM_RAFT_CONFIG, max_batch=64, max_batch_bytes=1000)
    bodies = [b"x" * 300] * 10 + [b"y" * 5000] + [b"z" * 10] * 3
    logs = {"a": [(1, body) for body in bodies], "b": [], "c": []}
    hard = dict.fromkeys("abc", HardState(1))
    cluster = Cluster(["a", "b", "c"], config, logs=logs, hard_states=hard)
    sizes: list[list[int]] = []

    def record(e: Envelope) -> bool:
        if isinstance(e.message, AppendRequest) and e.message.entries:
            sizes.append([len(x.body) for x in e.message.entries])
        return True

    cluster.timeout("a")
    cluster.run(record)
    assert cluster.nodes["a"].role is Role.LEADER
    assert cluster.commits["a"] == len(bodies) + 1  # the entries and the no-op of term 2
    assert [5000] in sizes
    for batch in sizes:
        assert len(batch) == 1 or sum(batch) + 21 * len(batch) <= 1000
    assert max(len(batch) for batch in sizes if 300 in batch) == 3  # 3 x 321 bytes fit
    assert [10, 10, 10, 0] in sizes  # small entries (and the no-op) still go together
