"""The Raft state machine of one DLedger node, sans-IO.

:class:`RaftNode` is driven by three calls, each given the current time (a float of seconds
from any monotonic clock) and returning an :class:`Output`:

- :meth:`RaftNode.tick`: timers (election timeout, heartbeats, append deadlines, quorum check);
- :meth:`RaftNode.receive`: a message from a peer;
- :meth:`RaftNode.propose`: a client append (:meth:`RaftNode.propose_many`: several, in one round).

The core never writes: it reads the driver's log (:class:`hanet.dledger.RaftLog`) and each
output names what to write, as etcd-io/raft's ``Ready``. The driver then, **in this order**:
persists ``output.hard_state`` when it is not None (the term and vote the messages depend on: a
vote granted and forgotten by a crash could be granted twice), removes the entries from
``output.truncate_from`` and appends ``output.entries`` (:meth:`Output.write_to`; before its
next call into the core, and durable before it sends), sends ``output.messages``, applies the
log up to ``output.commit_index``, answers ``output.results``, and calls :meth:`RaftNode.tick`
again at ``output.next_deadline``. Within a call the core sees its own writes staged on top of
the driver's log (:class:`StagedLog`).

What this core does beyond DLedger's:

- pre-vote: a node whose election timer fires first asks "would you vote for me in term
  T+1?" without bumping its term; peers that heard from a leader within the minimum election
  timeout say no, so a node rejoining after a partition cannot depose a healthy leader;
- the commit index only moves to an entry of the leader's current term stored on a majority
  (Figure 8 of the Raft paper); a new leader appends a no-op at the start of its term;
- fast back-off: a follower refusing an append answers the conflicting term and its first
  index (or its last index when its log is too short); the leader skips a whole term per round
  trip;
- check quorum: a leader that has not heard from a majority for an election timeout steps
  down (its pending appends end with WAIT_QUORUM_ACK_TIMEOUT);
- with pre-vote on, a vote request is only honoured from a candidate this node granted a
  pre-vote for that term (so only after a pre-vote round), and never while the node hears
  from a live leader (it ignores it for the election timeout after the leader's last append,
  the thesis's leader stickiness): a vote request alone changes nothing;
- the core never asserts on what a peer sends. A message no honest member can send is
  refused before it changes anything: a term more than ``RaftConfig.max_term_gap`` beyond
  this node's, a vote or append whose candidate or leader is not its sender, a second leader
  in a term, an append that contradicts a committed entry, an acknowledgement of entries
  never sent. :attr:`Output.refused` then says why; the driver logs it at ERROR and closes
  that peer's connection.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence

import attrs

from ._errors import IllegalTransitionError
from ._log import LogEntry, RaftLog
from ._messages import (
    TRANSITIONS,
    AppendRequest,
    AppendResponse,
    AppendResult,
    AppendStatus,
    Envelope,
    HardState,
    Message,
    Output,
    PreVoteRequest,
    PreVoteResponse,
    RaftConfig,
    RandomSource,
    Role,
    VoteRequest,
    VoteResponse,
    implausible_term,
)
from ._progress import Progress
from ._staged import StagedLog

logger = logging.getLogger("hanet.dledger")

__all__ = ["RaftNode"]


_ENTRY_OVERHEAD = 21
"""Bytes an entry takes in an append besides its body (index, term, noop flag, length)."""


_Step = VoteResponse | AppendRequest | AppendResponse
"""The messages a role's step function takes (the others are handled alike in every role)."""


# ------------------------------------------------------------------------------------- node


@attrs.define
class _Pending:
    request_id: int
    deadline: float


class RaftNode:
    """One node's Raft state machine (no I/O; see the module docstring for the driver's loop).

    Args:
        node_id: this node's id.
        peers: the ids of the other members of the group.
        log: the node's durable log.
        hard_state: the persisted term and vote (``HardState()`` for a new node).
        now: the current time.
        random: the randomness of election timeouts (inject a seeded one for determinism).
        config: timers and limits.
    """

    def __init__(
        self,
        node_id: str,
        peers: Iterable[str],
        log: RaftLog,
        hard_state: HardState,
        now: float,
        random: RandomSource,
        config: RaftConfig | None = None,
    ) -> None:
        self.node_id = node_id
        self.peers: tuple[str, ...] = tuple(sorted(p for p in set(peers) if p != node_id))
        self._log = StagedLog(log)
        self.config = config or RaftConfig()
        problem = implausible_term(hard_state.term, log.last_term, self.config.max_term_gap)
        if problem is not None:
            raise ValueError(f"the saved term cannot be used: {problem}")
        self._random = random
        self._role = Role.FOLLOWER
        self._tick: Callable[[float], None] = self._tick_elector
        self._step: Callable[[float, str, _Step], None] = self._step_follower
        self._term = hard_state.term
        self._voted_for = hard_state.voted_for
        self._persisted = hard_state
        self._leader_id: str | None = None
        self._commit_index = 0
        self._reported_commit = 0
        self._last_leader_contact = -math.inf
        self._election_deadline = math.inf
        self._heartbeat_deadline = math.inf
        self._quorum_deadline = math.inf
        self._prevote_term: int | None = None
        self._votes: set[str] = set()
        # candidate -> the term of the last pre-vote this node granted it
        self._prevote_granted: dict[str, int] = {}
        self._refused: str | None = None
        self._progress: dict[str, Progress] = {}
        self._pending: dict[int, _Pending] = {}  # by index, in index order
        self._messages: list[Envelope] = []
        self._results: list[AppendResult] = []
        self._listeners: list[Callable[[Role, int], None]] = []
        self._reset_election_timer(now)

    # ------------------------------------------------------------------ public properties

    @property
    def role(self) -> Role:
        """The node's role."""
        return self._role

    @property
    def term(self) -> int:
        """The current term (maybe not yet persisted: see :attr:`Output.hard_state`)."""
        return self._term

    @property
    def voted_for(self) -> str | None:
        """The candidate voted for in the current term."""
        return self._voted_for

    @property
    def hard_state(self) -> HardState:
        """The term and vote as they are now."""
        return HardState(self._term, self._voted_for)

    @property
    def leader_id(self) -> str | None:
        """The leader of the current term this node knows of (itself when leader)."""
        return self._leader_id

    @property
    def commit_index(self) -> int:
        """The highest index known to be committed."""
        return self._commit_index

    @property
    def quorum(self) -> int:
        """Votes or copies that make a majority of the group."""
        return (len(self.peers) + 1) // 2 + 1

    def match_index(self, peer: str) -> int:
        """As leader, the last index known to match ``peer``'s log (0 otherwise)."""
        progress = self._progress.get(peer)
        return progress.match_index if progress else 0

    @property
    def log(self) -> StagedLog:
        """The log as the core sees it: the driver's, with the current call's writes on
        top (:attr:`StagedLog.stable` is the driver's own)."""
        return self._log

    def on_role_change(self, listener: Callable[[Role, int], None]) -> None:
        """Call ``listener(role, term)`` after each role change (tests, metrics)."""
        self._listeners.append(listener)

    # ------------------------------------------------------------------------- the calls

    def tick(self, now: float) -> Output:
        """Run the timers that are due at ``now``."""
        self._log.check_written()
        self._tick(now)
        return self._output()

    def receive(self, now: float, source: str, message: Message) -> Output:
        """Handle ``message`` from ``source`` (a message from a non-member is ignored).

        A message impossible from an honest member changes nothing; :attr:`Output.refused`
        says why.
        """
        self._log.check_written()
        if source in self.peers:
            reason = self._impossible(source, message)
            if reason is None:
                self._dispatch(now, source, message)
            else:
                self._refused = (
                    f"{self.node_id}: refused {type(message).__name__} from {source}: {reason}"
                )
        return self._output()

    def propose(self, now: float, request_id: int, body: bytes) -> Output:
        """Append ``body`` as a client entry; its :class:`AppendResult` comes in some output.

        Refused at once with NOT_LEADER (not the leader) or LEADER_PENDING_FULL.
        """
        return self.propose_many(now, ((request_id, body),))

    def propose_many(self, now: float, requests: Sequence[tuple[int, bytes]]) -> Output:
        """:meth:`propose` for several client entries (``(request_id, body)``, in order):
        appended together and replicated in one round (RocketMQ's batch push); those past
        ``max_pending`` are refused with LEADER_PENDING_FULL."""
        self._log.check_written()
        if self._role is not Role.LEADER:
            for request_id, _ in requests:
                self._results.append(
                    AppendResult(request_id, AppendStatus.NOT_LEADER, leader_id=self._leader_id)
                )
            return self._output()
        room = max(self.config.max_pending - len(self._pending), 0)
        first = self.log.last_index + 1
        entries = [
            LogEntry(first + i, self._term, body) for i, (_, body) in enumerate(requests[:room])
        ]
        if entries and not self.peers and not self._pending:
            # a lone leader: its own copy is the majority, so they commit now (what
            # _advance_commit makes of it, without waiting in _pending)
            self.log.append(entries)
            term = self._term
            self._commit_index = entries[-1].index
            success = AppendStatus.SUCCESS
            self._results.extend(
                AppendResult(request_id, success, entry.index, term)
                for entry, (request_id, _) in zip(entries, requests, strict=False)
            )
            for request_id, _ in requests[room:]:
                self._results.append(
                    AppendResult(
                        request_id, AppendStatus.LEADER_PENDING_FULL, leader_id=self.node_id
                    )
                )
            return self._output()
        if entries:
            self.log.append(entries)
            deadline = now + self.config.append_timeout
            for entry, (request_id, _) in zip(entries, requests, strict=False):
                self._pending[entry.index] = _Pending(request_id, deadline)
        for request_id, _ in requests[room:]:
            self._results.append(
                AppendResult(request_id, AppendStatus.LEADER_PENDING_FULL, leader_id=self.node_id)
            )
        if entries:
            for peer in self.peers:
                self._replicate(now, peer)
            self._advance_commit()
        return self._output()

    # ----------------------------------------------------------------------- role changes

    def _set_role(self, role: Role) -> None:
        if (self._role, role) not in TRANSITIONS:
            raise IllegalTransitionError(f"{self.node_id}: {self._role.name} -> {role.name}")
        self._role = role
        self._tick, self._step = {
            Role.FOLLOWER: (self._tick_elector, self._step_follower),
            Role.CANDIDATE: (self._tick_elector, self._step_candidate),
            Role.LEADER: (self._tick_leader, self._step_leader),
        }[role]
        for listener in self._listeners:
            listener(role, self._term)

    def _become_follower(self, now: float, term: int, leader: str | None) -> None:
        if term > self._term:
            self._term = term
            self._voted_for = None
        if self._role is Role.LEADER:
            self._fail_pending()
        self._set_role(Role.FOLLOWER)
        self._leader_id = leader
        self._prevote_term = None
        self._votes = set()
        self._progress = {}
        self._heartbeat_deadline = self._quorum_deadline = math.inf
        self._reset_election_timer(now)

    # ------------------------------------------------------------------- per-role steps

    def _tick_elector(self, now: float) -> None:
        """A follower's or a candidate's timer: the election timeout."""
        if now >= self._election_deadline:
            self._on_election_timeout(now)

    def _tick_leader(self, now: float) -> None:
        """A leader's timers: check quorum, client append deadlines, heartbeats."""
        if now >= self._quorum_deadline and not self._check_quorum(now):
            return  # stepped down
        self._expire_pending(now)
        if now >= self._heartbeat_deadline:
            self._heartbeat(now)

    def _step_follower(self, now: float, source: str, message: _Step) -> None:
        """A follower takes appends; a vote or append answer is stale for it."""
        if isinstance(message, AppendRequest):
            self._on_append_request(now, source, message)

    def _step_candidate(self, now: float, source: str, message: _Step) -> None:
        """A candidate counts votes; an append of its own term means the leader won."""
        if isinstance(message, VoteResponse):
            self._on_vote_response(now, source, message)
        elif isinstance(message, AppendRequest):
            if message.term == self._term:
                self._become_follower(now, message.term, source)
            self._on_append_request(now, source, message)

    def _step_leader(self, now: float, source: str, message: _Step) -> None:
        """A leader follows its followers' answers; an append can only be a deposed
        leader's (one of its own term is refused as impossible), answered with its term."""
        if isinstance(message, AppendResponse):
            self._on_append_response(now, source, message)
        elif isinstance(message, AppendRequest):
            self._on_append_request(now, source, message)

    def _on_election_timeout(self, now: float) -> None:
        if self.config.pre_vote:
            if self._role is Role.CANDIDATE:
                self._set_role(Role.FOLLOWER)
            self._start_prevote(now)
        else:
            self._start_election(now)

    def _start_prevote(self, now: float) -> None:
        self._leader_id = None
        self._prevote_term = self._term + 1
        self._votes = {self.node_id}
        self._reset_election_timer(now)
        request = PreVoteRequest(
            self._prevote_term, self.node_id, self.log.last_index, self.log.last_term
        )
        self._broadcast(request)
        if len(self._votes) >= self.quorum:
            self._start_election(now)

    def _start_election(self, now: float) -> None:
        self._prevote_term = None
        self._term += 1
        self._set_role(Role.CANDIDATE)
        self._voted_for = self.node_id
        self._leader_id = None
        self._votes = {self.node_id}
        self._reset_election_timer(now)
        self._broadcast(
            VoteRequest(self._term, self.node_id, self.log.last_index, self.log.last_term)
        )
        if len(self._votes) >= self.quorum:
            self._become_leader(now)

    def _become_leader(self, now: float) -> None:
        self._set_role(Role.LEADER)
        self._leader_id = self.node_id
        self._election_deadline = math.inf
        first_new = self.log.last_index + 1
        self._progress = {
            peer: Progress(next_index=first_new, last_progress=now, last_heard=now)
            for peer in self.peers
        }
        # the no-op of this term: commits what earlier terms left (current-term commit rule)
        self.log.append([LogEntry(first_new, self._term, b"", noop=True)])
        self._quorum_deadline = now + self.config.election_timeout
        self._heartbeat(now)
        self._advance_commit()

    # -------------------------------------------------------------------------- messages

    def _dispatch(self, now: float, source: str, message: Message) -> None:
        if isinstance(message, PreVoteRequest):
            self._on_prevote_request(now, source, message)
            return
        if isinstance(message, PreVoteResponse):
            self._on_prevote_response(now, source, message)
            return
        if isinstance(message, VoteRequest) and not self._vote_considered(now, source, message):
            return  # changes nothing: not even the term
        if message.term > self._term:
            leader = source if isinstance(message, AppendRequest) else None
            self._become_follower(now, message.term, leader)
        if isinstance(message, VoteRequest):
            self._on_vote_request(now, source, message)  # the same in every role
        else:
            self._step(now, source, message)

    def _in_lease(self, now: float) -> bool:
        """Whether this node is the leader or heard from a live one within the election
        timeout (leader stickiness: it then ignores elections)."""
        return (
            self._role is Role.LEADER
            or now - self._last_leader_contact < self.config.election_timeout
        )

    def _vote_considered(self, now: float, source: str, request: VoteRequest) -> bool:
        """With pre-vote on, a vote request is considered only from a candidate this node
        granted a pre-vote for that very term, and only while no leader is live."""
        if not self.config.pre_vote or request.term <= self._term:
            return True  # a stale or same-term request is answered as Raft says
        return not self._in_lease(now) and self._prevote_granted.get(source) == request.term

    def _impossible(self, source: str, message: Message) -> str | None:
        """Why ``message`` cannot come from an honest member, or None (it changes nothing)."""
        gap = self.config.max_term_gap
        terms = [message.term]
        if isinstance(message, PreVoteResponse):
            terms.append(message.for_term)
        for term in terms:
            if term < 0:
                return f"negative term {term}"
            if term > self._term + gap:
                return f"term {term} is more than {gap} beyond this node's {self._term}"
        if isinstance(message, PreVoteRequest | VoteRequest):
            if message.candidate != source:
                return f"it names {message.candidate!r} as the candidate"
            if message.last_log_index < 0 or message.last_log_term < 0:
                return "a negative last log index or term"
            return None
        if isinstance(message, AppendRequest):
            return self._impossible_append(source, message)
        if isinstance(message, AppendResponse) and message.success:
            peer = self._progress.get(source)
            mine = self._role is Role.LEADER and message.term == self._term
            if mine and peer is not None and not 0 <= message.match_index <= peer.sent:
                return (
                    f"it acknowledges index {message.match_index}; the most sent to it in "
                    f"term {self._term} is {peer.sent}"
                )
        return None

    def _impossible_append(self, source: str, request: AppendRequest) -> str | None:
        if request.leader != source:
            return f"it names {request.leader!r} as the leader"
        if request.commit_index < 0 or request.prev_index < 0:
            return "a negative index"
        last_term = request.prev_term
        if not 0 <= last_term <= request.term:
            return f"a previous entry of term {last_term} in term {request.term}"
        for position, entry in enumerate(request.entries):
            if entry.index != request.prev_index + 1 + position:
                return f"entry {entry.index} where {request.prev_index + 1 + position} belongs"
            if not last_term <= entry.term <= request.term:
                return f"entry {entry.index} of term {entry.term} after term {last_term}"
            last_term = entry.term
        if request.term < self._term:
            return None  # a deposed leader's: answered with our term
        if request.term == self._term:
            if self._role is Role.LEADER:
                return f"this node is the leader of term {self._term}"
            if self._leader_id is not None and self._leader_id != source:
                return f"{self._leader_id} is the leader of term {self._term}"
        log = self.log
        if request.prev_index <= self._commit_index:
            mine = log.term_at(request.prev_index)
            if mine is not None and mine != request.prev_term:
                return (
                    f"its previous entry {request.prev_index}@{request.prev_term} contradicts "
                    f"the committed {request.prev_index}@{mine}"
                )
        for entry in request.entries:
            if entry.index > self._commit_index:
                break
            mine = log.term_at(entry.index)
            if mine is not None and mine != entry.term:
                return (
                    f"it would overwrite the committed entry {entry.index}@{mine} with one of "
                    f"term {entry.term}"
                )
        return None

    def _log_is_current(self, last_index: int, last_term: int) -> bool:
        """Is a log ending at (last_index, last_term) at least as up to date as ours?"""
        mine = self.log.last_term
        return last_term > mine or (last_term == mine and last_index >= self.log.last_index)

    def _on_prevote_request(self, now: float, source: str, request: PreVoteRequest) -> None:
        granted = (
            request.term > self._term
            and not self._in_lease(now)
            and self._log_is_current(request.last_log_index, request.last_log_term)
        )
        if granted:
            self._prevote_granted[source] = request.term
        self._send(source, PreVoteResponse(self._term, request.term, granted))

    def _on_prevote_response(self, now: float, source: str, response: PreVoteResponse) -> None:
        if response.term > self._term and not response.granted:
            self._become_follower(now, response.term, None)
            return
        if self._prevote_term is None or response.for_term != self._prevote_term:
            return
        if response.granted:
            self._votes.add(source)
            if len(self._votes) >= self.quorum:
                self._start_election(now)

    def _on_vote_request(self, now: float, source: str, request: VoteRequest) -> None:
        granted = (
            request.term == self._term
            and self._voted_for in (None, request.candidate)
            and self._log_is_current(request.last_log_index, request.last_log_term)
        )
        if granted:
            self._voted_for = request.candidate
            self._reset_election_timer(now)
        self._send(source, VoteResponse(self._term, granted))

    def _on_vote_response(self, now: float, source: str, response: VoteResponse) -> None:
        if response.term != self._term:
            return
        if response.granted:
            self._votes.add(source)
            if len(self._votes) >= self.quorum:
                self._become_leader(now)

    def _on_append_request(self, now: float, source: str, request: AppendRequest) -> None:
        if request.term < self._term:
            self._send(source, AppendResponse(self._term, False, request.prev_index))
            return
        self._leader_id = source
        self._last_leader_contact = now
        self._prevote_term = None
        self._reset_election_timer(now)
        log = self.log
        prev_term = log.term_at(request.prev_index)
        if prev_term is None:
            self._send(
                source,
                AppendResponse(
                    self._term, False, request.prev_index, conflict_index=log.last_index + 1
                ),
            )
            return
        if prev_term != request.prev_term:
            first = self._first_index_of_term(prev_term, request.prev_index)
            self._send(
                source,
                AppendResponse(
                    self._term,
                    False,
                    request.prev_index,
                    conflict_term=prev_term,
                    conflict_index=first,
                ),
            )
            return
        entries = request.entries
        for position, entry in enumerate(entries):
            mine = log.term_at(entry.index)
            if mine == entry.term:
                continue
            if mine is not None:  # never a committed one: refused by _impossible_append
                log.truncate_from(entry.index)
            log.append(entries[position:])
            break
        match = request.prev_index + len(entries)
        new_commit = min(request.commit_index, match)
        self._commit_index = max(self._commit_index, new_commit)
        self._send(source, AppendResponse(self._term, True, request.prev_index, match_index=match))

    def _on_append_response(self, now: float, source: str, response: AppendResponse) -> None:
        if response.term != self._term:
            return
        peer = self._progress[source]
        peer.last_heard = now
        if response.success:
            peer.acknowledged(response.match_index, now)
            self._advance_commit()
        elif response.prev_index >= peer.match_index:  # else stale: it matches beyond that
            target = response.conflict_index
            if response.conflict_term is not None:
                last = self._last_index_of_term(response.conflict_term, response.prev_index)
                if last is not None:
                    target = last + 1
            lost = peer.refused(min(target, response.prev_index), now)
            if lost is not None:
                # It no longer holds what it acknowledged (it truncated its log after damage
                # at a restart): step back to what it holds and refill it from there.
                self._note_lost(source, lost, peer.match_index)
            self._send_append(peer, source, now)
        self._replicate(now, source)

    def _note_lost(self, peer: str, acknowledged: int, holds: int) -> None:
        logger.warning(
            "%s: %s acknowledged index %d but now holds only up to %d (its log was cut after "
            "damage?): sending the entries again",
            self.node_id,
            peer,
            acknowledged,
            holds,
        )

    # ------------------------------------------------------------------------ replication

    def _send_append(self, peer: Progress, target: str, now: float) -> None:
        """Send entries from ``peer.next_index`` (none when caught up), advancing next."""
        prev = peer.next_index - 1
        prev_term = self.log.term_at(prev)
        assert prev_term is not None
        entries = self._batch(self.log.entries_from(peer.next_index, self.config.max_batch))
        peer.sent_append(prev, len(entries), now)
        self._send(
            target,
            AppendRequest(self._term, self.node_id, prev, prev_term, entries, self._commit_index),
        )

    def _batch(self, entries: list[LogEntry]) -> tuple[LogEntry, ...]:
        """The first of ``entries`` within ``max_batch_bytes`` (at least one)."""
        budget = self.config.max_batch_bytes
        size = 0
        for count, entry in enumerate(entries):
            size += len(entry.body) + _ENTRY_OVERHEAD
            if size > budget and count > 0:
                return tuple(entries[:count])
        return tuple(entries)

    def _replicate(self, now: float, target: str) -> None:
        """Fill the pipeline to ``target`` with what it lacks."""
        peer = self._progress[target]
        limit = peer.window(self.config.max_inflight)
        while len(peer.inflight) < limit and peer.next_index <= self.log.last_index:
            self._send_append(peer, target, now)

    def _heartbeat(self, now: float) -> None:
        self._heartbeat_deadline = now + self.config.heartbeat_interval
        for target in self.peers:
            peer = self._progress[target]
            if peer.stalled(now, self.config.retransmit_timeout):
                peer.rewind()  # something was lost
            if peer.probing and not peer.inflight:
                self._send_append(peer, target, now)
            else:  # an empty append at the known match: never disturbs the pipeline
                prev_term = self.log.term_at(peer.match_index)
                assert prev_term is not None
                self._send(
                    target,
                    AppendRequest(
                        self._term,
                        self.node_id,
                        peer.match_index,
                        prev_term,
                        (),
                        min(self._commit_index, peer.match_index),
                    ),
                )
            self._replicate(now, target)

    def _advance_commit(self) -> None:
        matches = sorted(
            [self.log.last_index, *(p.match_index for p in self._progress.values())],
            reverse=True,
        )
        candidate = matches[self.quorum - 1]
        # only an entry of the current term commits by counting copies (Raft §5.4.2)
        if candidate > self._commit_index and self.log.term_at(candidate) == self._term:
            self._commit_index = candidate
            # proposed in index order: the committed ones are at the front of the dict
            while self._pending:
                index = next(iter(self._pending))
                if index > candidate:
                    break
                pending = self._pending.pop(index)
                self._results.append(
                    AppendResult(pending.request_id, AppendStatus.SUCCESS, index, self._term)
                )

    def _check_quorum(self, now: float) -> bool:
        """Step down without a majority heard from within an election timeout; False then."""
        self._quorum_deadline = now + self.config.election_timeout
        if not self.config.check_quorum:
            return True
        horizon = now - self.config.election_timeout
        active = 1 + sum(1 for p in self._progress.values() if p.heard_since(horizon))
        if active < self.quorum:
            self._become_follower(now, self._term, None)
            return False
        return True

    def _expire_pending(self, now: float) -> None:
        # appended in index order with the same timeout: deadlines increase along the dict
        expired = []
        for index, pending in self._pending.items():
            if pending.deadline > now:
                break
            expired.append(index)
        for index in expired:
            pending = self._pending.pop(index)
            self._results.append(
                AppendResult(
                    pending.request_id, AppendStatus.WAIT_QUORUM_ACK_TIMEOUT, index, self._term
                )
            )

    def _fail_pending(self) -> None:
        for index, pending in self._pending.items():  # in index order (proposed so)
            self._results.append(
                AppendResult(
                    pending.request_id, AppendStatus.WAIT_QUORUM_ACK_TIMEOUT, index, self._term
                )
            )
        self._pending.clear()

    # ---------------------------------------------------------------------------- helpers

    def _first_index_of_term(self, term: int, known: int) -> int:
        """The first index holding ``term``, given that ``known`` holds it (binary search)."""
        low, high = 1, known
        while low < high:
            middle = (low + high) // 2
            middle_term = self.log.term_at(middle)
            assert middle_term is not None
            if middle_term < term:
                low = middle + 1
            else:
                high = middle
        return low

    def _last_index_of_term(self, term: int, below: int) -> int | None:
        """The last index <= ``below`` holding ``term`` in our log, or None."""
        low, high = 0, min(below, self.log.last_index)
        while low < high:  # the last index whose term is <= term
            middle = (low + high + 1) // 2
            middle_term = self.log.term_at(middle)
            assert middle_term is not None
            if middle_term <= term:
                low = middle
            else:
                high = middle - 1
        return low if low > 0 and self.log.term_at(low) == term else None

    def _reset_election_timer(self, now: float) -> None:
        timeout = self.config.election_timeout
        self._election_deadline = now + timeout * (1.0 + self._random.random())

    def _send(self, target: str, message: Message) -> None:
        self._messages.append(Envelope(self.node_id, target, message))

    def _broadcast(self, message: Message) -> None:
        for peer in self.peers:
            self._send(peer, message)

    def _output(self) -> Output:
        hard = self.hard_state
        changed = hard if hard != self._persisted else None
        self._persisted = hard
        commit: int | None = None
        if self._commit_index != self._reported_commit:
            commit = self._reported_commit = self._commit_index
        if self._role is Role.LEADER:
            deadline = min(self._heartbeat_deadline, self._quorum_deadline)
            if self._pending:
                deadline = min(deadline, next(iter(self._pending.values())).deadline)
        else:
            deadline = self._election_deadline
        cut, entries = self._log.take()
        output = Output(
            changed,
            tuple(self._messages),
            commit,
            tuple(self._results),
            deadline,
            self._refused,
            cut,
            entries,
        )
        self._messages.clear()
        self._results.clear()
        self._refused = None
        return output
