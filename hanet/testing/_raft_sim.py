"""Deterministic simulation of a DLedger group: virtual clock, seeded faults, safety checks.

:func:`simulate` runs :class:`hanet.dledger.RaftNode` instances over a simulated network
driven by one seeded ``random.Random``: message delays (hence reordering), loss and
duplication, partitions, crashes and restarts, client appends at random. A crash loses what a
node did not persist: its in-memory state always, and half the time also the output of the step
it was in (the hard state and the log writes not yet persisted, the messages not yet sent).
The log writes an output names are durable once the driver made them (before it sends).

Checked during and after each run (any failure is a string in :attr:`SimResult.violations`):

- election safety: at most one leader per term;
- leader completeness: a new leader's log holds every entry committed before its election;
- acknowledged appends: every append answered SUCCESS is in every later leader's log;
- state machine safety: no two nodes commit different entries at an index;
- log matching: two logs with an entry of the same index and term hold the same prefix;
- after the settle phase (everything healed and up): one leader, and every node holds the
  committed prefix (:attr:`SimResult.settled`);
- no message of an honest member is refused (:attr:`Output.refused`), and every forged one is.

With ``forgery_rate``, a Byzantine sender forges messages no honest member can send, under
members' names (the peer connection's authentication is the node layer's: here the sender
can claim any id): votes and pre-votes of term 2^63-1, appends that would overwrite a
committed entry or come from a second leader of a term, acknowledgements of entries never
sent; and messages from a non-member, which the core ignores. They must all be refused, and
the checks above must hold as without them.

:class:`Cluster` is the manual counterpart for scenario tests: the caller decides which node
times out and which messages are delivered.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from hanet.dledger import (
    AppendRequest,
    AppendResponse,
    AppendResult,
    AppendStatus,
    Envelope,
    HardState,
    InMemoryLog,
    LogEntry,
    Output,
    PreVoteRequest,
    RaftConfig,
    RaftNode,
    Role,
    VoteRequest,
)

__all__ = ["SIM_RAFT_CONFIG", "Cluster", "SimConfig", "SimResult", "simulate"]

SIM_RAFT_CONFIG = RaftConfig(
    election_timeout=0.15,
    heartbeat_interval=0.03,
    retransmit_timeout=0.09,
    max_inflight=3,
    max_batch=8,
    max_pending=64,
    append_timeout=0.6,
)
"""Node settings of the simulation (virtual seconds): short timers, small batches."""


@attrs.frozen
class SimConfig:
    """One simulated run.

    Attributes:
        nodes: the group's size.
        duration: virtual seconds of faults and client load.
        settle: virtual seconds afterwards with every node up and the network whole.
        raft: the nodes' settings.
        min_delay: the shortest message delay.
        max_delay: the longest message delay (different delays reorder messages).
        loss: the probability a message is lost.
        duplicate: the probability a message is delivered twice.
        client_rate: client appends per virtual second.
        crash_rate: crashes per virtual second (of a random up node).
        max_downtime: a crashed node restarts after up to this long.
        partition_rate: partitions per virtual second; each lasts up to ``max_partition``.
        max_partition: the longest partition.
        forgery_rate: forged messages per virtual second (a Byzantine sender; see above).
    """

    nodes: int = 3
    duration: float = 3.0
    settle: float = 2.0
    raft: RaftConfig = SIM_RAFT_CONFIG
    min_delay: float = 0.001
    max_delay: float = 0.02
    loss: float = 0.03
    duplicate: float = 0.01
    client_rate: float = 40.0
    crash_rate: float = 0.7
    max_downtime: float = 0.5
    partition_rate: float = 0.7
    max_partition: float = 0.8
    forgery_rate: float = 0.0


@attrs.frozen
class SimResult:
    """What one run did and whether every check held.

    Attributes:
        seed: the run's seed (replay it with the same seed and config).
        nodes: the group's size.
        violations: the safety checks that failed (empty: all held).
        settled: after the settle phase, one leader and every node holding the committed log.
        leaders: elections won (one per term at most).
        max_term: the highest term reached.
        committed: entries committed (no-ops included).
        proposed: client appends.
        acknowledged: client appends answered SUCCESS.
        statuses: client answers by status.
        messages: messages sent.
        dropped: messages lost, or cut by a partition or a crash.
        crashes: node crashes (``mid_step_crashes`` of them lost a step's output).
        mid_step_crashes: crashes that lost the output of the step they interrupted.
        partitions: partitions made.
        events: simulation events processed.
        forged: messages the Byzantine sender forged (``forgery_rate``).
        refused: messages the nodes refused as impossible (every forged one under a member's
            name; an honest message refused is a violation).
    """

    seed: int
    nodes: int
    violations: tuple[str, ...]
    settled: bool
    leaders: int
    max_term: int
    committed: int
    proposed: int
    acknowledged: int
    statuses: Mapping[str, int]
    messages: int
    dropped: int
    crashes: int
    mid_step_crashes: int
    partitions: int
    events: int
    forged: int = 0
    refused: int = 0

    @property
    def ok(self) -> bool:
        """Every safety check held and the group settled."""
        return not self.violations and self.settled

    def to_json(self) -> dict[str, Any]:
        """The result as a JSON-ready dict."""
        data = attrs.asdict(self)
        data["statuses"] = dict(self.statuses)
        data["violations"] = list(self.violations)
        return data


@attrs.define
class _SimNode:
    node_id: str
    log: InMemoryLog
    hard: HardState = attrs.field(factory=HardState)
    raft: RaftNode | None = None
    incarnation: int = 0
    tick_at: float = math.inf
    applied: int = 0
    crash_in_next_step: bool = False


class _Checker:
    """The safety checks, fed by the simulation as things happen."""

    def __init__(self) -> None:
        self.violations: list[str] = []
        self.leaders: dict[int, str] = {}
        self.committed: dict[int, LogEntry] = {}
        self.acked: dict[int, LogEntry] = {}
        # the lowest term a node reported the index committed in: leaders of later terms
        # must hold the entry (a leader of an earlier term may win its election late)
        self.commit_term: dict[int, int] = {}
        self.ack_term: dict[int, int] = {}

    def fail(self, text: str) -> None:
        if len(self.violations) < 20:
            self.violations.append(text)

    def on_leader(self, node_id: str, term: int, log: InMemoryLog) -> None:
        other = self.leaders.setdefault(term, node_id)
        if other != node_id:
            self.fail(f"election safety: {other} and {node_id} both leaders of term {term}")
        checks = (
            ("committed", self.committed, self.commit_term),
            ("acknowledged", self.acked, self.ack_term),
        )
        for what, entries, terms in checks:
            for index, entry in entries.items():
                if terms[index] >= term:
                    continue
                if index > log.last_index or log.entry(index) != entry:
                    self.fail(
                        f"leader completeness: {node_id}, leader of term {term}, lacks the "
                        f"{what} entry {index}@{entry.term}"
                    )
                    break

    def on_commit(self, node: _SimNode, commit: int, term: int) -> None:
        for index in range(node.applied + 1, commit + 1):
            if index > node.log.last_index:
                self.fail(f"{node.node_id} commits {index} past its last index")
                break
            entry = node.log.entry(index)
            known = self.committed.setdefault(index, entry)
            self.commit_term[index] = min(self.commit_term.get(index, term), term)
            if known != entry:
                self.fail(
                    f"state machine safety: index {index} committed as {known.term} "
                    f"and as {entry.term} on {node.node_id}"
                )
        node.applied = max(node.applied, commit)

    def on_ack(self, index: int, entry: LogEntry) -> None:
        self.acked[index] = entry
        self.ack_term[index] = entry.term
        known = self.committed.get(index)
        if known is not None and known != entry:
            self.fail(f"acknowledged entry {index}@{entry.term} differs from the committed one")

    def check_logs(self, logs: Mapping[str, InMemoryLog]) -> None:
        """Log matching over every pair of logs."""
        names = sorted(logs)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                left, right = logs[a].snapshot(), logs[b].snapshot()
                for index in range(min(len(left), len(right)), 0, -1):
                    if left[index - 1].term == right[index - 1].term:
                        if left[:index] != right[:index]:
                            self.fail(f"log matching: {a} and {b} agree at {index}, not before")
                        break


class _Simulation:
    def __init__(self, seed: int, config: SimConfig) -> None:
        self.seed = seed
        self.config = config
        self.random = random.Random(seed)
        self.now = 0.0
        self.ids = [f"n{i}" for i in range(config.nodes)]
        self.nodes = {i: _SimNode(i, InMemoryLog()) for i in self.ids}
        self.queue: list[tuple[float, int, str, Any]] = []
        self.sequence = 0
        self.check = _Checker()
        self.group: dict[str, int] = dict.fromkeys(self.ids, 0)
        self.leader_hint: str | None = None
        self.next_request = 0
        self.requests: dict[int, bytes] = {}
        self.statuses: dict[str, int] = {}
        self.counts = dict.fromkeys(
            (
                "messages",
                "dropped",
                "crashes",
                "mid_step",
                "partitions",
                "events",
                "proposed",
                "forged",
                "refused",
            ),
            0,
        )
        for node_id in self.ids:
            self.start(self.nodes[node_id])

    # ------------------------------------------------------------------------ scheduling

    def push(self, at: float, kind: str, payload: Any = None) -> None:
        self.sequence += 1
        heapq.heappush(self.queue, (at, self.sequence, kind, payload))

    def schedule_poisson(self, kind: str, rate: float) -> None:
        if rate <= 0:
            return
        at = self.random.expovariate(rate)
        while at < self.config.duration:
            self.push(at, kind)
            at += self.random.expovariate(rate)

    # ----------------------------------------------------------------------------- nodes

    def start(self, node: _SimNode) -> None:
        node.incarnation += 1
        node.applied = 0
        node.tick_at = math.inf
        node.crash_in_next_step = False
        rng = random.Random(f"{self.seed}/{node.node_id}/{node.incarnation}")
        raft = RaftNode(
            node.node_id, self.ids, node.log, node.hard, self.now, rng, self.config.raft
        )
        raft.on_role_change(
            lambda role, term: (
                self.check.on_leader(node.node_id, term, node.log) if role is Role.LEADER else None
            )
        )
        node.raft = raft
        self.schedule_tick(node, raft.tick(self.now).next_deadline)

    def crash(self, node: _SimNode) -> None:
        self.counts["crashes"] += 1
        node.raft = None
        node.incarnation += 1
        self.push(self.now + self.random.uniform(0.01, self.config.max_downtime), "restart", node)

    def schedule_tick(self, node: _SimNode, deadline: float) -> None:
        if deadline < node.tick_at:
            node.tick_at = deadline
            self.push(max(deadline, self.now), "tick", (node, node.incarnation))

    def handle(self, node: _SimNode, output: Output) -> None:
        """The driver's duties, in order: persist, send, apply, answer, re-arm the timer."""
        if node.crash_in_next_step:
            self.counts["mid_step"] += 1
            self.crash(node)
            return
        if output.refused is not None:
            self.check.fail(f"an honest message refused: {output.refused}")
        if output.hard_state is not None:
            node.hard = output.hard_state
        output.write_to(node.log)  # durable at once, as the node's persister makes it
        for envelope in output.messages:
            self.send(envelope)
        if output.commit_index is not None:
            assert node.raft is not None
            self.check.on_commit(node, output.commit_index, node.raft.term)
        for result in output.results:
            name = result.status.value
            self.statuses[name] = self.statuses.get(name, 0) + 1
            if result.status is AppendStatus.NOT_LEADER:
                self.leader_hint = result.leader_id
            elif result.status is AppendStatus.SUCCESS:
                body = self.requests[result.request_id]
                self.check.on_ack(result.index, LogEntry(result.index, result.term, body))
        self.schedule_tick(node, output.next_deadline)

    # --------------------------------------------------------------------------- network

    def send(self, envelope: Envelope) -> None:
        self.counts["messages"] += 1
        if self.random.random() < self.config.loss:
            self.counts["dropped"] += 1
            return
        copies = 2 if self.random.random() < self.config.duplicate else 1
        for _ in range(copies):
            delay = self.random.uniform(self.config.min_delay, self.config.max_delay)
            self.push(self.now + delay, "deliver", envelope)

    def deliver(self, envelope: Envelope) -> None:
        node = self.nodes[envelope.target]
        if node.raft is None or self.group[envelope.source] != self.group[envelope.target]:
            self.counts["dropped"] += 1
            return
        self.handle(node, node.raft.receive(self.now, envelope.source, envelope.message))

    # ---------------------------------------------------------------------------- faults

    def partition(self) -> None:
        self.counts["partitions"] += 1
        shuffled = self.ids[:]
        self.random.shuffle(shuffled)
        cut = self.random.randint(1, len(shuffled) - 1)
        # sometimes isolate one node, sometimes split in two sides
        self.group = {node_id: (0 if k < cut else 1) for k, node_id in enumerate(shuffled)}
        heal_at = self.now + self.random.uniform(0.05, self.config.max_partition)
        self.push(min(heal_at, self.config.duration), "heal")

    def forge(self) -> None:
        """One forged message to a random up node, delivered at once; it must be refused (or,
        from a non-member, ignored) and change nothing."""
        up = [i for i in self.ids if self.nodes[i].raft is not None]
        if not up:
            return
        target = self.nodes[self.random.choice(up)]
        raft = target.raft
        assert raft is not None
        others = [i for i in self.ids if i != target.node_id]
        source = self.random.choice(others)
        huge = 2**63 - 1
        kind = self.random.randrange(6)
        message: Any
        if kind == 0:
            message = VoteRequest(huge, source, huge, huge)
        elif kind == 1:
            message = PreVoteRequest(huge, source, 0, 0)
        elif kind == 2:
            message = AppendRequest(huge, source, 0, 0, (), huge)
        elif kind == 3 and raft.commit_index >= 1:
            # overwrite the last committed entry, in the name of the leader it knows
            index = raft.commit_index
            leader = raft.leader_id if raft.leader_id in others else source
            assert leader is not None
            mine = target.log.term_at(index)
            assert mine is not None
            prev_term = target.log.term_at(index - 1) or 0
            forged_entry = LogEntry(index, mine + 1, b"forged")
            message = AppendRequest(
                max(raft.term, mine + 1), leader, index - 1, prev_term, (forged_entry,), index
            )
            source = leader
        elif kind == 4 and raft.role is Role.LEADER:
            message = AppendResponse(raft.term, True, 0, target.log.last_index + 5)
        else:
            message = VoteRequest(raft.term + 1, "intruder", huge, huge)
            source = "intruder"  # not a member: ignored
        self.counts["forged"] += 1
        before = (raft.hard_state, raft.commit_index, raft.role, target.log.snapshot())
        output = raft.receive(self.now, source, message)
        after = (raft.hard_state, raft.commit_index, raft.role, target.log.snapshot())
        if source in self.ids and output.refused is None:
            self.check.fail(f"a forged {type(message).__name__} from {source} was accepted")
        if output.refused is not None:
            self.counts["refused"] += 1
        wrote = output.entries or output.truncate_from is not None
        if before != after or output.messages or output.hard_state is not None or wrote:
            self.check.fail(f"a forged {type(message).__name__} changed {target.node_id}")
        self.schedule_tick(target, output.next_deadline)

    def propose(self) -> None:
        up = [i for i in self.ids if self.nodes[i].raft is not None]
        if not up:
            return
        target = self.leader_hint
        if target not in up or self.random.random() < 0.2:
            target = self.random.choice(up)
        node = self.nodes[target]
        assert node.raft is not None
        self.next_request += 1
        body = f"{self.seed}:{self.next_request}".encode()
        self.requests[self.next_request] = body
        self.counts["proposed"] += 1
        self.handle(node, node.raft.propose(self.now, self.next_request, body))

    # ------------------------------------------------------------------------------- run

    def run(self) -> SimResult:
        config = self.config
        self.schedule_poisson("propose", config.client_rate)
        self.schedule_poisson("crash", config.crash_rate)
        self.schedule_poisson("partition", config.partition_rate)
        self.schedule_poisson("forge", config.forgery_rate)
        self.push(config.duration, "settle")
        self.push(config.duration + config.settle / 2, "check_logs")
        end = config.duration + config.settle
        while self.queue and self.queue[0][0] <= end:
            self.now, _, kind, payload = heapq.heappop(self.queue)
            self.counts["events"] += 1
            try:
                self.step(kind, payload)
            except Exception as exc:  # a core invariant broke: report it with the seed
                self.check.fail(f"at {self.now:.4f} ({kind}): {type(exc).__name__}: {exc}")
                return self.result(settled=False)
        self.check.check_logs({i: n.log for i, n in self.nodes.items()})
        return self.result()

    def step(self, kind: str, payload: Any) -> None:
        if kind == "deliver":
            self.deliver(payload)
        elif kind == "tick":
            node, incarnation = payload
            alive = node.raft is not None and node.incarnation == incarnation
            if alive and self.now >= node.tick_at:
                node.tick_at = math.inf
                self.handle(node, node.raft.tick(self.now))
        elif kind == "propose":
            self.propose()
        elif kind == "forge":
            self.forge()
        elif kind == "crash":
            up = [i for i in self.ids if self.nodes[i].raft is not None]
            if up:
                node = self.nodes[self.random.choice(up)]
                if self.random.random() < 0.5:
                    node.crash_in_next_step = True
                else:
                    self.crash(node)
        elif kind == "restart":
            if payload.raft is None:
                self.start(payload)
        elif kind == "partition":
            self.partition()
        elif kind == "heal":
            self.group = dict.fromkeys(self.ids, 0)
        elif kind == "settle":
            self.group = dict.fromkeys(self.ids, 0)
            for node in self.nodes.values():
                node.crash_in_next_step = False
                if node.raft is None:
                    self.start(node)
        elif kind == "check_logs":
            self.check.check_logs({i: n.log for i, n in self.nodes.items()})

    def settled(self) -> bool:
        leaders = [
            n.raft for n in self.nodes.values() if n.raft is not None and n.raft.role is Role.LEADER
        ]
        if len(leaders) != 1:
            return False
        leader = leaders[0]
        if leader.commit_index != leader.log.last_index:
            return False
        prefix = self.nodes[leader.node_id].log.snapshot()[: leader.commit_index]
        return all(n.log.snapshot()[: len(prefix)] == prefix for n in self.nodes.values())

    def result(self, settled: bool | None = None) -> SimResult:
        counts = self.counts
        return SimResult(
            seed=self.seed,
            nodes=len(self.ids),
            violations=tuple(self.check.violations),
            settled=self.settled() if settled is None else settled,
            leaders=len(self.check.leaders),
            max_term=max((n.hard.term for n in self.nodes.values()), default=0),
            committed=len(self.check.committed),
            proposed=counts["proposed"],
            acknowledged=len(self.check.acked),
            statuses=dict(sorted(self.statuses.items())),
            messages=counts["messages"],
            dropped=counts["dropped"],
            crashes=counts["crashes"],
            mid_step_crashes=counts["mid_step"],
            partitions=counts["partitions"],
            events=counts["events"],
            forged=counts["forged"],
            refused=counts["refused"],
        )


def simulate(seed: int, config: SimConfig | None = None) -> SimResult:
    """Run one simulated group with ``seed`` (same seed and config: same run) and check it."""
    return _Simulation(seed, config or SimConfig()).run()


class Cluster:
    """A group of :class:`RaftNode` on a manual network, for scenario tests.

    Messages the nodes send wait in :attr:`outbox` until :meth:`deliver` hands them over;
    nothing happens unless the caller says so. Hard states are persisted on every output.

    Args:
        ids: the members.
        config: the nodes' settings.
        logs: starting logs (default: empty), by member.
        hard_states: starting terms and votes, by member.
        seed: the seed of the nodes' election timeouts.
    """

    def __init__(
        self,
        ids: Iterable[str],
        config: RaftConfig = SIM_RAFT_CONFIG,
        logs: Mapping[str, Iterable[tuple[int, bytes]]] | None = None,
        hard_states: Mapping[str, HardState] | None = None,
        seed: int = 0,
    ) -> None:
        self.ids = list(ids)
        self.config = config
        self.now = 0.0
        self.seed = seed
        self.outbox: list[Envelope] = []
        self.hard_states: dict[str, HardState] = dict(hard_states or {})
        self.logs: dict[str, InMemoryLog] = {}
        self.commits: dict[str, int] = {}
        self.nodes: dict[str, RaftNode] = {}
        self.results: list[AppendResult] = []
        for node_id in self.ids:
            entries = [
                LogEntry(k + 1, term, body)
                for k, (term, body) in enumerate((logs or {}).get(node_id, ()))
            ]
            self.logs[node_id] = InMemoryLog(entries)
            self.restart(node_id)

    def restart(self, node_id: str) -> RaftNode:
        """(Re)create ``node_id`` from its persisted hard state and log; unsent mail is lost."""
        self.outbox = [e for e in self.outbox if node_id not in (e.source, e.target)]
        hard = self.hard_states.get(node_id, HardState())
        rng = random.Random(f"{self.seed}/{node_id}/{self.now}")
        node = RaftNode(node_id, self.ids, self.logs[node_id], hard, self.now, rng, self.config)
        self.nodes[node_id] = node
        self.commits[node_id] = 0
        return node

    def handle(self, node_id: str, output: Output) -> Output:
        """Persist, queue the messages, note the commit index and results of ``output``."""
        if output.hard_state is not None:
            self.hard_states[node_id] = output.hard_state
        output.write_to(self.logs[node_id])
        self.outbox.extend(output.messages)
        if output.commit_index is not None:
            self.commits[node_id] = output.commit_index
        self.results.extend(output.results)
        return output

    def advance(self, seconds: float) -> None:
        """Move the clock (no node is ticked)."""
        self.now += seconds

    def tick(self, node_id: str) -> Output:
        """Tick ``node_id`` at the current time."""
        return self.handle(node_id, self.nodes[node_id].tick(self.now))

    def tick_all(self) -> None:
        """Tick every node at the current time."""
        for node_id in self.ids:
            self.tick(node_id)

    def timeout(self, node_id: str) -> Output:
        """Let ``node_id``'s election timer fire (the clock moves past any timeout)."""
        self.advance(2 * self.config.election_timeout + 0.001)
        return self.tick(node_id)

    def propose(self, node_id: str, request_id: int, body: bytes) -> Output:
        """A client append at ``node_id``."""
        return self.handle(node_id, self.nodes[node_id].propose(self.now, request_id, body))

    def deliver(self, allow: Callable[[Envelope], bool] = lambda _: True) -> int:
        """Deliver, in order, the queued messages ``allow`` accepts (the others are dropped);
        returns how many were delivered. Replies are queued, not delivered."""
        batch, self.outbox = self.outbox, []
        delivered = 0
        for envelope in batch:
            if allow(envelope):
                delivered += 1
                target = envelope.target
                node = self.nodes[target]
                self.handle(target, node.receive(self.now, envelope.source, envelope.message))
        return delivered

    def run(self, allow: Callable[[Envelope], bool] = lambda _: True, rounds: int = 100) -> int:
        """Deliver until nothing ``allow`` accepts is left (at most ``rounds`` times); returns
        the number of rounds that delivered something."""
        done = 0
        for _ in range(rounds):
            if not self.deliver(allow):
                break
            done += 1
        return done

    def leader(self) -> str | None:
        """The node that is leader in the highest term, if any."""
        leaders = [n for n in self.nodes.values() if n.role is Role.LEADER]
        if not leaders:
            return None
        return max(leaders, key=lambda n: n.term).node_id
