"""The Raft core against forged peer input: what no honest member can send is refused before
it changes anything (and said why, for the driver to close that connection); a vote request
alone changes nothing (pre-vote gating, leader stickiness); the simulation with a Byzantine
sender keeps every safety property."""

from __future__ import annotations

import pytest

from hanet.dledger import (
    AppendRequest,
    AppendResponse,
    HardState,
    LogEntry,
    Output,
    PreVoteRequest,
    PreVoteResponse,
    RaftConfig,
    Role,
    VoteRequest,
    VoteResponse,
)
from hanet.testing import SIM_RAFT_CONFIG, Cluster, SimConfig, simulate

HUGE = 2**63 - 1


def elected() -> Cluster:
    """a leads term 1 of a, b, c; one client entry committed everywhere."""
    cluster = Cluster(["a", "b", "c"])
    cluster.timeout("a")
    cluster.run()
    assert cluster.nodes["a"].role is Role.LEADER
    cluster.propose("a", 1, b"one")
    cluster.run()
    cluster.advance(SIM_RAFT_CONFIG.heartbeat_interval)
    cluster.tick("a")
    cluster.run()
    assert cluster.commits == {"a": 2, "b": 2, "c": 2}
    return cluster


def seen(cluster: Cluster) -> list[tuple[object, ...]]:
    """What an honest member sees: term, vote, role, leader, commit index, log."""
    return [
        (n.hard_state, n.role, n.leader_id, n.commit_index, cluster.logs[i].snapshot())
        for i, n in sorted(cluster.nodes.items())
    ]


def receive(cluster: Cluster, target: str, source: str, message: object) -> Output:
    return cluster.handle(
        target,
        cluster.nodes[target].receive(cluster.now, source, message),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("source", "message", "why"),
    [
        ("c", VoteRequest(HUGE, "c", HUGE, HUGE), "more than 1000000 beyond"),
        ("c", PreVoteRequest(HUGE, "c", 0, 0), "more than 1000000 beyond"),
        ("a", AppendRequest(HUGE, "a", 2, 1, (), HUGE), "more than 1000000 beyond"),
        ("c", VoteResponse(HUGE, False), "more than 1000000 beyond"),
        ("c", PreVoteResponse(HUGE, HUGE, False), "more than 1000000 beyond"),
        ("c", AppendResponse(-1, False, 0), "negative term"),
        ("c", VoteRequest(2, "a", 9, 9), "names 'a' as the candidate"),
        ("c", AppendRequest(1, "a", 2, 1, (), 2), "names 'a' as the leader"),
        ("c", AppendRequest(1, "c", 2, 1, (), 2), "a is the leader of term 1"),
        (
            "a",
            AppendRequest(2, "a", 1, 1, (LogEntry(2, 2, b"forged"),), 2),
            "overwrite the committed entry 2@1",
        ),
        ("a", AppendRequest(2, "a", 2, 2, (), 2), "contradicts the committed 2@1"),
        ("a", AppendRequest(1, "a", 2, 1, (LogEntry(4, 1, b"x"),), 2), "entry 4 where 3"),
        ("a", AppendRequest(1, "a", 2, 1, (LogEntry(3, 5, b"x"),), 2), "of term 5 after"),
    ],
)
def test_impossible_messages_to_a_follower_change_nothing(
    source: str, message: object, why: str
) -> None:
    cluster = elected()
    before = seen(cluster)
    output = receive(cluster, "b", source, message)
    assert output.refused is not None and why in output.refused, output.refused
    assert output.messages == () and output.hard_state is None
    assert seen(cluster) == before
    # and the group goes on: the next entry commits everywhere
    cluster.propose("a", 2, b"two")
    cluster.run()
    cluster.advance(SIM_RAFT_CONFIG.heartbeat_interval)
    cluster.tick("a")
    cluster.run()
    assert cluster.commits == {"a": 3, "b": 3, "c": 3}


def test_a_forged_acknowledgement_cannot_commit_at_the_leader() -> None:
    cluster = elected()
    cluster.propose("a", 2, b"two")
    cluster.outbox.clear()  # nobody stored it
    before = seen(cluster)
    output = receive(cluster, "a", "b", AppendResponse(1, True, 2, 99))
    assert output.refused is not None and "acknowledges index 99" in output.refused
    assert seen(cluster) == before
    assert cluster.nodes["a"].commit_index == 2
    output = receive(cluster, "a", "b", AppendResponse(1, True, 2, 3))
    assert output.refused is None  # 3 was sent to b: an honest b may say so
    # a second leader of its own term
    output = receive(cluster, "a", "c", AppendRequest(1, "c", 0, 0, (), 0))
    assert output.refused is not None and "this node is the leader of term 1" in output.refused


def test_a_vote_request_without_a_pre_vote_changes_nothing() -> None:
    cluster = elected()
    cluster.advance(1.0)  # no leader heard from for long: only the pre-vote gate is left
    before = seen(cluster)
    output = receive(cluster, "b", "c", VoteRequest(2, "c", 9, 9))
    assert output.refused is None and output.messages == () and output.hard_state is None
    assert seen(cluster) == before
    # after b granted c a pre-vote for term 2, c's vote request for term 2 is honoured
    granted = receive(cluster, "b", "c", PreVoteRequest(2, "c", 9, 9))
    assert [e.message for e in granted.messages] == [PreVoteResponse(1, 2, True)]
    assert receive(cluster, "b", "c", VoteRequest(3, "c", 9, 9)).messages == ()  # another term
    voted = receive(cluster, "b", "c", VoteRequest(2, "c", 9, 9))
    assert [e.message for e in voted.messages] == [VoteResponse(2, True)]
    assert voted.hard_state == HardState(2, "c")


def test_a_member_hearing_from_a_live_leader_ignores_elections() -> None:
    cluster = elected()
    before = seen(cluster)
    # b heard from a just now: neither a pre-vote nor a vote moves it
    denied = receive(cluster, "b", "c", PreVoteRequest(2, "c", 9, 9))
    assert [e.message for e in denied.messages] == [PreVoteResponse(1, 2, False)]
    assert receive(cluster, "b", "c", VoteRequest(2, "c", 9, 9)).messages == ()
    # the leader itself ignores them too
    assert receive(cluster, "a", "c", VoteRequest(2, "c", 9, 9)).messages == ()
    assert seen(cluster) == before


def test_a_vote_every_few_hundred_ms_does_not_depose_the_leader() -> None:
    cluster = elected()
    for round_ in range(30):
        cluster.advance(SIM_RAFT_CONFIG.heartbeat_interval)
        cluster.tick_all()
        cluster.run()
        for target in ("a", "b"):
            receive(cluster, target, "c", VoteRequest(2 + round_, "c", 99, 99))
        cluster.outbox = [e for e in cluster.outbox if e.source != "c" and e.target != "c"]
    assert cluster.nodes["a"].role is Role.LEADER
    assert cluster.nodes["a"].term == cluster.nodes["b"].term == 1


def test_pre_vote_off_keeps_raft_s_plain_vote() -> None:
    config = RaftConfig(pre_vote=False)
    cluster = Cluster(["a", "b", "c"], config)
    output = receive(cluster, "b", "a", VoteRequest(1, "a", 0, 0))
    assert output.hard_state == HardState(1, "a")


def test_the_term_gap_is_configurable() -> None:
    with pytest.raises(ValueError, match="max_term_gap"):
        RaftConfig(max_term_gap=0)
    cluster = Cluster(["a", "b", "c"], RaftConfig(max_term_gap=5))
    assert receive(cluster, "b", "a", AppendRequest(5, "a", 0, 0, (), 0)).refused is None
    refused = receive(cluster, "b", "a", AppendRequest(11, "a", 0, 0, (), 0)).refused
    assert refused is not None and "term 11 is more than 5 beyond this node's 5" in refused


@pytest.mark.parametrize("nodes", [3, 5])
def test_the_simulation_refuses_a_byzantine_sender_and_stays_safe(nodes: int) -> None:
    results = [simulate(seed, SimConfig(nodes=nodes, forgery_rate=20.0)) for seed in range(40)]
    failed = [(r.seed, r.settled, r.violations) for r in results if not r.ok]
    assert not failed
    assert sum(r.forged for r in results) > 40 * 30
    # every forgery under a member's name refused (the rest came from a non-member, ignored)
    assert sum(r.refused for r in results) > sum(r.forged for r in results) // 2
