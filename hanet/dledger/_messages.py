"""The Raft core's vocabulary, sans-IO: roles and their allowed changes, the timers and limits
(:class:`RaftConfig`), the hard state, the messages nodes exchange, how a client append ends,
and what each call into the core returns (:class:`Output`, etcd-io/raft's ``Ready``)."""

from __future__ import annotations

import enum
from typing import Protocol

import attrs

from ._log import LogEntry, RaftLog

__all__ = [
    "MAX_TERM",
    "TRANSITIONS",
    "AppendRequest",
    "AppendResponse",
    "AppendResult",
    "AppendStatus",
    "Envelope",
    "HardState",
    "Message",
    "Output",
    "PreVoteRequest",
    "PreVoteResponse",
    "RaftConfig",
    "RandomSource",
    "Role",
    "VoteRequest",
    "VoteResponse",
    "implausible_term",
]


class Role(enum.Enum):
    """The role of a node in its current term."""

    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    LEADER = "leader"


TRANSITIONS: frozenset[tuple[Role, Role]] = frozenset(
    {
        # a newer term seen, or a pre-vote round restarted: still a follower
        (Role.FOLLOWER, Role.FOLLOWER),
        # the pre-vote won (or pre-vote is off): an election in term + 1
        (Role.FOLLOWER, Role.CANDIDATE),
        # pre-vote off: the election timed out, another one in term + 1
        (Role.CANDIDATE, Role.CANDIDATE),
        # a majority of votes
        (Role.CANDIDATE, Role.LEADER),
        # a leader of this term, a newer term, or (pre-vote on) the election timed out
        (Role.CANDIDATE, Role.FOLLOWER),
        # a newer term, or check quorum failed
        (Role.LEADER, Role.FOLLOWER),
    }
)
"""The allowed role changes, ``(from, to)``; :class:`RaftNode` checks every change."""


class RandomSource(Protocol):
    """Where election timeouts get their randomness (``random.Random`` fits)."""

    def random(self) -> float:
        """A float in [0, 1)."""
        ...


@attrs.frozen
class RaftConfig:
    """Timers and limits of a node (seconds and counts).

    Attributes:
        election_timeout: the minimum election timeout; each one is drawn from
            ``[election_timeout, 2 * election_timeout)``. Also the pre-vote lease and the
            check-quorum period.
        heartbeat_interval: how often a leader sends each follower an append (empty or not).
        retransmit_timeout: a follower with appends in flight and no progress for this long is
            sent everything again from its match index.
        max_inflight: pipelined appends carrying entries in flight per follower.
        max_batch: entries per append.
        max_batch_bytes: entry bytes per append (bodies plus 21 bytes of framing each); an
            append carries at least one entry however large. Keep it at most half the peers'
            ``max_frame_length`` (a node caps it there) so an append always fits in a frame.
        max_pending: client appends the leader holds waiting for a quorum; more are refused
            with LEADER_PENDING_FULL.
        append_timeout: a client append not committed within this ends with
            WAIT_QUORUM_ACK_TIMEOUT (outcome unknown).
        pre_vote: run a pre-vote before each election (and honour a vote request only
            from a candidate granted a pre-vote for its term, never while a leader is live).
        check_quorum: a leader steps down after an election timeout without a majority.
        max_term_gap: a message whose term is more than this beyond this node's is refused as
            impossible from an honest member (a term only grows by elections, each of which
            takes a pre-vote majority and an election timeout: a million of them is years of
            churn). A node that really slept through more elections than this stays out
            (ERROR in its log) until its ``hardstate`` is moved forward.
    """

    election_timeout: float = 1.0
    heartbeat_interval: float = 0.1
    retransmit_timeout: float = 0.3
    max_inflight: int = 4
    max_batch: int = 64
    max_batch_bytes: int = 128 * 1024 * 1024
    max_pending: int = 10_000
    append_timeout: float = 3.0
    pre_vote: bool = True
    check_quorum: bool = True
    max_term_gap: int = 1_000_000

    def __attrs_post_init__(self) -> None:
        if not 0 < self.heartbeat_interval < self.election_timeout:
            raise ValueError("need 0 < heartbeat_interval < election_timeout")
        if self.retransmit_timeout <= 0 or self.append_timeout <= 0:
            raise ValueError("timeouts must be positive")
        if self.max_inflight < 1 or self.max_batch < 1 or self.max_pending < 1:
            raise ValueError("max_inflight, max_batch and max_pending must be >= 1")
        if self.max_batch_bytes < 1:
            raise ValueError("max_batch_bytes must be >= 1")
        if self.max_term_gap < 1:
            raise ValueError("max_term_gap must be >= 1")


@attrs.frozen
class HardState:
    """What a node must persist before sending the messages that depend on it.

    Attributes:
        term: the current term.
        voted_for: the candidate this node voted for in ``term``, if any.
    """

    term: int = 0
    voted_for: str | None = None


MAX_TERM = 2**63 - 1
"""The largest term: terms are ``i64`` on the wire (a Java ``long`` in DLedger)."""


def implausible_term(term: int, last_log_term: int, max_term_gap: int) -> str | None:
    """Why a saved ``term`` cannot be this node's, or None.

    Negative, beyond an ``i64``, or more than ``max_term_gap`` beyond the term of the node's
    last log entry: every peer would refuse each of its messages as impossible (their terms
    follow the log's, a new leader's no-op starts each term), so the node would run silently
    stuck.
    """
    if term < 0:
        return f"term {term} is negative"
    if term > MAX_TERM:
        return f"term {term} does not fit the wire's 64 bits"
    if term > last_log_term + max_term_gap:
        return (
            f"term {term} is more than {max_term_gap} beyond the term {last_log_term} of the "
            "last log entry (peers refuse messages that far ahead: the node could never "
            "take part)"
        )
    return None


# ---------------------------------------------------------------------------------- messages


@attrs.frozen
class PreVoteRequest:
    """Would you vote for me in ``term`` (the sender's term + 1, not adopted by anyone)?"""

    term: int
    candidate: str
    last_log_index: int
    last_log_term: int


@attrs.frozen
class PreVoteResponse:
    """The answer to a pre-vote for ``for_term``; ``term`` is the responder's current term."""

    term: int
    for_term: int
    granted: bool


@attrs.frozen
class VoteRequest:
    """RequestVote: the candidate's term and the position of its last entry."""

    term: int
    candidate: str
    last_log_index: int
    last_log_term: int


@attrs.frozen
class VoteResponse:
    """The answer to a vote request; ``term`` is the responder's (possibly new) term."""

    term: int
    granted: bool


@attrs.frozen
class AppendRequest:
    """AppendEntries: entries following ``prev_index`` / ``prev_term`` (none: a heartbeat)."""

    term: int
    leader: str
    prev_index: int
    prev_term: int
    entries: tuple[LogEntry, ...]
    commit_index: int


@attrs.frozen
class AppendResponse:
    """The answer to an append.

    Attributes:
        term: the responder's current term.
        success: the responder's log matched at ``prev_index`` and now holds the entries.
        prev_index: the request's ``prev_index`` (echoed).
        match_index: on success, the last index known to match the leader's log.
        conflict_term: on refusal, the responder's term at ``prev_index`` (None: its log is
            shorter than ``prev_index``).
        conflict_index: on refusal, the first index of ``conflict_term`` in the responder's
            log, or its last index + 1 when the log is too short.
    """

    term: int
    success: bool
    prev_index: int
    match_index: int = 0
    conflict_term: int | None = None
    conflict_index: int = 0


Message = (
    PreVoteRequest | PreVoteResponse | VoteRequest | VoteResponse | AppendRequest | AppendResponse
)
"""Any message nodes exchange."""


@attrs.frozen
class Envelope:
    """A message with its sender and its addressee."""

    source: str
    target: str
    message: Message


class AppendStatus(enum.Enum):
    """How a client append ended.

    NOT_LEADER and LEADER_PENDING_FULL: the entry was not appended, retrying is safe.
    WAIT_QUORUM_ACK_TIMEOUT: the entry was appended, then the deadline passed or the leader
    stepped down first: it may or may not be committed (outcome unknown).
    """

    SUCCESS = "success"
    NOT_LEADER = "not_leader"
    LEADER_PENDING_FULL = "leader_pending_full"
    WAIT_QUORUM_ACK_TIMEOUT = "wait_quorum_ack_timeout"


@attrs.frozen
class AppendResult:
    """The answer to one client append.

    Attributes:
        request_id: the caller's id of the append.
        status: how it ended.
        index: where the entry was appended (0 when it was not).
        term: the term it was appended in (0 when it was not).
        leader_id: with NOT_LEADER, the leader this node knows of (None: unknown).
    """

    request_id: int
    status: AppendStatus
    index: int = 0
    term: int = 0
    leader_id: str | None = None


@attrs.frozen
class Output:
    """What the driver does after a call, in this order (etcd-io/raft's ``Ready``).

    Attributes:
        hard_state: persist this first (None: unchanged since the previous call).
        truncate_from: remove the log's entries at this index and after (None: keep them),
            durably, before anything is sent (the core never writes its log).
        entries: then append these to the log: written before the next call into the core,
            durable before the messages are sent (under SYNC_FLUSH; a leader counts its own
            log towards a commit).
        messages: then send these.
        commit_index: the new commit index, to apply the log up to (None: unchanged).
        results: client appends that ended.
        next_deadline: call :meth:`RaftNode.tick` at this time (or earlier).
        refused: why the message given to :meth:`RaftNode.receive` was refused as impossible
            from an honest member (it changed nothing): log it, close that peer's connection.
    """

    hard_state: HardState | None
    messages: tuple[Envelope, ...]
    commit_index: int | None
    results: tuple[AppendResult, ...]
    next_deadline: float
    refused: str | None = None
    truncate_from: int | None = None
    entries: tuple[LogEntry, ...] = ()

    def write_to(self, log: RaftLog) -> None:
        """Make the log writes this output names (truncate, then append) on ``log``."""
        if self.truncate_from is not None:
            log.truncate_from(self.truncate_from)
        if self.entries:
            log.append(self.entries)
