"""A networked DLedger node: one trio task drives a :class:`~hanet.dledger.RaftNode` over
peer connections, a :class:`~hanet.dledger.FileLog` and a commit log view.

**The loop.** Every input (a peer message, a client put, a timer) goes through one task, in
order, in batches of what arrived together; the puts of a batch are encoded and appended in one
round (:meth:`RaftNode.propose_many`: one append per follower carries them, as RocketMQ's
batch push; appends stay pipelined, ``RaftConfig.max_inflight`` per follower). For each
:class:`~hanet.dledger.Output` it applies the newly committed entries and notes what to
persist, send and answer; at the end of the batch it **persists, then sends and answers**: the
hard state (:meth:`FileLog.save_hard_state`: fsynced, atomic) and, under SYNC_FLUSH, the
entries appended so far (one fsync per batch: a group commit) are written by a
:class:`~hanet.dledger.Persister` in a worker thread, and only then are the batch's messages
written to the peers (a follower's acknowledgement names only fsynced entries) and its puts
woken to answer, batch after batch in order. While a thread fsyncs, the loop goes on with
the next batches (one fsync then covers them all); their messages wait behind it, so under
SYNC_FLUSH a slow fsync delays heartbeats by its length. Under ASYNC_FLUSH the log is
fsynced every ``flush_interval`` in a worker thread, never in the way of heartbeats. The Raft
core never writes: its outputs name the entries to append (written into the files at once,
fsynced as above) and, on a follower whose log conflicts with the leader's, the tail to drop
(zeroed and fsynced by the :class:`~hanet.dledger.Persister` in a worker thread before the
loop goes on). No fsync runs on the event loop.
Entries appended and not yet applied are kept in memory: appends to followers and the view
are made from them, not read back. Of the acknowledgements a follower's batch sends the leader,
only the highest goes (:func:`coalesce_acks`), and a put's caller is woken once for all of its
messages. Timers come from trio's clock, so tests run in virtual
time (``MockClock``).

**A peer's append or acknowledgement** is handed to the core in the task that read it when
the loop is idle (waiting between batches, nothing in its inbox), as the loop would with a
batch of that one message: no wake-up of the loop per append round. What a read's messages
produce is released together once its frames are all handled (one acknowledgement per read,
the highest, and one write per peer); messages for a member go back on the connection its
message came on (a follower's acknowledgement is written from the task that read the append,
no writer task woken). An append whose entries conflict with the follower's tail goes through
the loop (dropping the tail waits on the disk), and so does anything read while the inbox
holds something, so nothing overtakes what came before it. A timer the core moves earlier
brings the loop's next tick forward. Release follows the same rules as the loop's (under
SYNC_FLUSH, after the fsync).

**A lone leader** (a 1-node group: its own copy is the majority) does not send a put through
the inbox when its loop is idle (waiting between batches, nothing in its inbox): the put is
proposed in the caller's task, as the loop would with a batch of one item (appended, committed
and applied at once; released as above: at once under ASYNC_FLUSH, so a broker port answers a
read's sends before it reads again, as a classic master does; after the fsync under
SYNC_FLUSH). A put submitted while anything is queued goes through the loop, so none overtakes
another; an error stops the node as it would in the loop.

**Peers.** Each node listens on its peer address; towards each peer it keeps one outgoing
connection (:class:`hanet.boot.ReconnectingClient`, short retry delays) and sends every message
for that peer on it, but what it sends a member in answer to that member's message goes back
on the connection that message came on (the peer's outgoing connection). The pipeline is the
framework's: ``LengthFieldBasedFrameDecoder`` / ``LengthFieldPrepender`` and
:class:`~hanet.dledger.PeerCodec`. A message for a peer that is not connected, or whose
connection does not drain (not writable), is dropped: Raft retransmits.

**Who a peer is.** Every connection speaks for one member, bound when it is accepted: with
TLS (``NodeConfig.tls``: certificate, key and CA, always mutual) the member whose id the
client certificate names (subject CN or a SAN; outgoing connections check the same of the
server, whose certificate must name the peer id it is dialled as); on plain TCP a member whose
``--peers`` host is the connection's source address (when several members share a host, the
first id the connection claims among them; a member listed at a wildcard address may connect
from anywhere; outgoing connections leave from this node's own ``--peers`` address when it is
an IP address). A connection that authenticates as no member is
closed at once (WARNING); a frame claiming another sender, or addressed to another node,
closes its connection (ERROR), and so does a HELLO from anyone but the member the connection
is bound to. A message the Raft core refuses as impossible from an honest member
(:attr:`~hanet.dledger.Output.refused`) is logged at ERROR and closes the connection it came
on; the node goes on. ``peer_allow`` closes other source networks at accept, before TLS.
Every ``keepalive_interval`` each outgoing connection carries a HELLO again, so the peer port
can close connections idle for ``idle_timeout`` (RocketMQ's 120 s) without ever closing a
live member's.

**Entries and the commit log view** (``_view.py``). A put's message is encoded as a RocketMQ
commit log record by the leader (store timestamp, store host = the leader's broker address) with
``PHYSICALOFFSET`` = the entry's position + 48, as DLedger's commit log does (the queue offset
field is left 0 in the entry). Committed entries are *applied* to a
:class:`hanet.store.CommitLogStore` in the node's store directory (role SLAVE, so only these
raw appends write to it): each record is re-stamped with its offset in that store and its
consume queue offset, and appended with :meth:`~hanet.store.CommitLogStore.append_raw` (a
blank record ends a file as the store itself does). Every node applies the same committed
entries in the same order, so every node's view is byte-identical, and consume queues,
``hanet pull`` / ``dump`` / ``verify`` and the Spark sources work on it unchanged. A PUT's
answer (offset, queue offset, message id) is the message's place in that view. The view is
derived: the store's own flusher fsyncs it every ``flush_interval`` in a worker thread, and
``applied`` (JSON: the last applied index and the view's end) is replaced once the store's
flushed offset covers that end (at shutdown: after a last fsync); at start a view that goes past
it is cut back there and re-applied, and one that does not reach it (or a log that lost the
entries it names) is rebuilt from the log.

Layout of a node's ``--store`` directory: ``dledger/`` (the :class:`FileLog`), and the store's
``commitlog/``, ``consumequeue/``, ``checkpoint``, ... at the top.
"""

from __future__ import annotations

import functools
import logging
import math
import random
import time
from collections.abc import Callable, Sequence

import attrs
import trio

from hanet.boot import (
    ChannelInitializer,
    Connector,
    ReconnectingClient,
    run_channel,
    serve_on,
    tcp_connector,
)
from hanet.channel import (
    Channel,
    StreamChannel,
)
from hanet.store import (
    BROKER_INDEX_FLUSH_INTERVAL,
    CommitLogStore,
    FlushDiskType,
    Message,
    StoreConfig,
    StoreRole,
)
from hanet.store.lowlevel import (
    parse_host,
)

from ._codec import Hello, peer_frame_handlers
from ._config import (
    PEER_IDLE_TIMEOUT,
    PEER_KEEPALIVE,
    NodeConfig,
    NodeStatus,
    PeerStatus,
    PutOutcome,
    parse_peers,
)
from ._errors import NodeNotRunningError
from ._filelog import FileLog
from ._messages import (
    AppendRequest,
    AppendResponse,
    AppendStatus,
    Envelope,
    HardState,
    Output,
    Role,
)
from ._peers import Members, PeerHandler, split_address
from ._persist import Persister, off_loop
from ._raft import RaftNode
from ._records import put_records
from ._view import Bodies, CachedLog, CommitLogView, Placement

__all__ = [
    "PEER_IDLE_TIMEOUT",
    "PEER_KEEPALIVE",
    "DLedgerNode",
    "NodeConfig",
    "NodeStatus",
    "PeerStatus",
    "PutOutcome",
    "parse_peers",
]

log = logging.getLogger("hanet.dledger")

_INBOX = 10_000
_BATCH = 1024
"""Inputs the loop takes together: the puts among them are appended in one round."""
_FOLLOWER_LAG = 16_384
"""Applied entries a leader keeps in memory for a follower behind the quorum; one further
behind is sent entries read back from the log."""


@attrs.define
class _Held:
    """What a batch of inputs produced, released once what it depends on is durable."""

    hard_state: HardState | None = None
    messages: list[Envelope] = attrs.field(factory=list)
    done: list[_Put] = attrs.field(factory=list)
    replies: dict[str, Channel] = attrs.field(factory=dict)
    """Member -> the connection its last message handled here came on: the messages for that
    member go back on it (from a reading task: written there, no writer task woken)."""


@attrs.frozen
class _PutArrived:
    """Inbox: the client puts of one :meth:`DLedgerNode.put_many` call (ids ``first`` to
    ``first + count - 1`` in :attr:`DLedgerNode._puts`)."""

    first: int
    count: int


@attrs.frozen
class _PeerMessage:
    """Inbox: a Raft message from a peer, and the connection it came on."""

    envelope: Envelope
    channel: Channel


@attrs.frozen
class _PeerHello:
    """Inbox: a peer's HELLO (its broker address), and the connection it came on."""

    hello: Hello
    channel: Channel


def _placed_outcome(index: int, placed: Placement) -> PutOutcome:
    """A committed entry's outcome: where the view placed its message."""
    return PutOutcome(
        AppendStatus.SUCCESS,
        index=index,
        wrote_offset=placed.wrote_offset,
        wrote_size=placed.wrote_size,
        queue_id=placed.queue_id,
        queue_offset=placed.queue_offset,
        store_timestamp=placed.store_timestamp,
        msg_id=placed.msg_id,
    )


def _usable(channel: Channel | None) -> Channel | None:
    """``channel`` when a message can be written on it (open, draining), else None: a
    message for a peer that is not connected or whose connection does not drain is dropped
    (Raft retransmits)."""
    if channel is None or not (channel.is_open and channel.is_writable):
        return None
    return channel


@attrs.frozen
class _Stop:
    """Inbox: a put proposed or a message handled outside the loop failed
    (:attr:`DLedgerNode._failure`)."""


_InboxItem = _PutArrived | _PeerMessage | _PeerHello | _Stop


class _Waiter:
    """The task of one :meth:`DLedgerNode.put_many` call, woken once each of its puts is
    done (one wake-up for the call, not an event per put)."""

    __slots__ = ("callback", "left", "task")

    def __init__(self, count: int, callback: Callable[[], None] | None = None) -> None:
        self.left = count
        self.task: trio.lowlevel.Task | None = None
        self.callback = callback
        """Called instead of waking a task (:meth:`DLedgerNode.put_many_nowait`)."""

    async def wait(self) -> None:
        """Until every put is done (a checkpoint when they all are already)."""
        if not self.left:
            await trio.lowlevel.checkpoint()
            return
        self.task = trio.lowlevel.current_task()

        def abort(_: object) -> trio.lowlevel.Abort:
            self.task = None  # cancelled: nobody wakes it any more
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def one_done(self) -> None:
        self.left -= 1
        if self.left:
            return
        if self.callback is not None:
            callback, self.callback = self.callback, None
            callback()
        elif self.task is not None:
            task, self.task = self.task, None
            trio.lowlevel.reschedule(task)


@attrs.define
class _Put:
    message: Message
    waiter: _Waiter
    outcome: PutOutcome | None = None
    applied: PutOutcome | None = None
    done: bool = False

    def finish(self) -> None:
        """Its outcome is final: wake its caller once all of the call's are."""
        if not self.done:
            self.done = True
            self.waiter.one_done()


class DLedgerNode:
    """A DLedger node; run it with :meth:`run` in a nursery (see the module docstring).

    Args:
        config: the node's settings.
        connector: how to reach a peer, given its id (default: TCP to its peer address).
        listen: serve the peer port (False: peers arrive through :meth:`accept`).
        rng: the randomness of election timeouts.
    """

    def __init__(
        self,
        config: NodeConfig,
        *,
        connector: Callable[[str], Connector] | None = None,
        listen: bool = True,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self._connector = connector or self._tcp_connector
        self._listen = listen
        self._rng = rng or random.Random()
        self._send_inbox, self._inbox = trio.open_memory_channel[_InboxItem](_INBOX)
        self._raft: RaftNode | None = None
        self.log: FileLog | None = None
        self.store: CommitLogStore | None = None
        self._clients: dict[str, ReconnectingClient] = {}
        self._next_id = 1
        """The id of the next client put."""
        self._puts: dict[int, _Put] = {}
        self._by_index: dict[int, _Put] = {}
        self._bodies = Bodies()
        """Index -> (term, body) of entries appended and not yet applied: applied and sent
        from here instead of read back from the log."""
        self._view: CommitLogView | None = None
        self._view_mark: tuple[int, int] | None = None
        self._persist: Persister | None = None
        self._send_release, self._releases = trio.open_memory_channel[_Held](math.inf)
        self._queued = 0
        """Batches handed to the releaser and not yet released."""
        self._inbox_items = 0
        """Items in the inbox (sent and not yet taken by the loop)."""
        self._in_batch = False
        """The loop is acting on a batch (it may wait in the middle: a follower's truncation)."""
        self._failure: Exception | None = None
        """What a put proposed or a message handled outside the loop raised: the loop raises
        it."""
        self._between = False
        """The loop is waiting between batches (for its inbox or its next tick)."""
        self._wait_scope: trio.CancelScope | None = None
        """The loop's wait for its inbox: its deadline is the loop's next tick."""
        self._read_held: _Held | None = None
        """What the messages of the current read handled in its task produced, released once
        the read's frames were all handled (:meth:`_read_done`)."""
        self._ready = trio.Event()
        self._role_changed = trio.Event()
        self.peer_address: tuple[str, int] | None = None
        self.broker_addresses: dict[str, str] = dict(config.broker_addresses)
        """Member id -> broker port: from the config, then from each peer's HELLO."""
        self._members = Members(config.node_id, config.peers)
        self._server_tls = config.tls.server_context() if config.tls is not None else None
        self._client_tls = config.tls.client_context() if config.tls is not None else None

    # -- public ---------------------------------------------------------------------------

    @property
    def raft(self) -> RaftNode:
        """The Raft core (only while running)."""
        if self._raft is None:
            raise NodeNotRunningError(
                f"the DLedger node {self.config.node_id} is not running (starting or stopped)"
            )
        return self._raft

    @property
    def role(self) -> Role:
        return self.raft.role

    @property
    def is_leader(self) -> bool:
        return self._raft is not None and self._raft.role is Role.LEADER

    @property
    def queue_version(self) -> int:
        """Changes when the commit log view gets a queue it had not applied to since it was
        opened (0 while not running): the store's queue list needs no reading otherwise."""
        return self._view.queue_version if self._view is not None else 0

    @property
    def applied_index(self) -> int:
        return self._view.applied if self._view is not None else 0

    async def wait_role_change(self) -> None:
        """Wait until the node's role or leader changes."""
        await self._role_changed.wait()

    async def put(self, message: Message) -> PutOutcome:
        """Append ``message`` through Raft; answers once committed and applied (SUCCESS), or
        at once when refused (NOT_LEADER, LEADER_PENDING_FULL), or WAIT_QUORUM_ACK_TIMEOUT.

        Cancellation abandons the wait, not the entry.
        """
        (outcome,) = await self.put_many([message])
        return outcome

    async def put_many(self, messages: Sequence[Message]) -> list[PutOutcome]:
        """:meth:`put` for several messages, appended in this order (one entry each)."""
        waiter = _Waiter(len(messages))
        requests = [_Put(message, waiter) for message in messages]
        if not requests:
            await trio.lowlevel.checkpoint()
            return []
        ids = self._submit(requests)
        try:
            await waiter.wait()
        finally:
            puts = self._puts
            for request_id in ids:
                puts.pop(request_id, None)
        outcomes = [request.outcome for request in requests]
        assert all(o is not None for o in outcomes)
        return outcomes  # type: ignore[return-value]

    def put_many_nowait(
        self, messages: Sequence[Message], done: Callable[[list[PutOutcome]], None]
    ) -> None:
        """:meth:`put_many` without a task waiting: ``done`` gets the outcomes (in order) once
        they are all final, called from the node's own task (at once when the inbox is full;
        with the LEADER_PENDING_FULL or WAIT_QUORUM_ACK_TIMEOUT of the others when the node
        stops). ``done`` must not block; an exception it raises is logged, not raised.

        On a lone leader with an idle loop under ASYNC_FLUSH, ``done`` is called before this
        returns (:meth:`_put_alone`)."""
        if (
            messages
            and not self._queued
            and self.config.flush is FlushDiskType.ASYNC_FLUSH
            and self._alone_and_idle()
        ):
            outcomes = self._put_alone(messages)
            try:
                done(outcomes)
            except Exception:
                log.exception("dledger %s: a put's callback failed", self.config.node_id)
            return
        requests: list[_Put] = []
        ids = range(self._next_id, self._next_id + len(messages))

        def finished() -> None:
            puts = self._puts
            for request_id in ids:
                puts.pop(request_id, None)
            outcomes = [request.outcome for request in requests]
            assert all(o is not None for o in outcomes)
            try:
                done(outcomes)  # type: ignore[arg-type]
            except Exception:
                log.exception("dledger %s: a put's callback failed", self.config.node_id)

        waiter = _Waiter(len(messages), finished)
        requests.extend(_Put(message, waiter) for message in messages)
        if not requests:
            finished()
            return
        self._submit(requests)

    def _alone_and_idle(self) -> bool:
        """A lone leader (a 1-node group: its own copy is the majority) whose loop is
        waiting between batches with nothing in its inbox: a put proposed from the caller's
        task now comes after every put submitted before it, as through the loop."""
        raft = self._raft
        return (
            raft is not None
            and not raft.peers
            and raft.role is Role.LEADER
            and not self._in_batch
            and self._failure is None
            and not self._inbox_items
        )

    def _propose_now(self, ids: range, requests: list[_Put]) -> None:
        """Append, commit and apply ``requests`` (of one call) on a lone leader in the
        caller's task, as the loop does with one batch (a 1-node group commits at once, so
        no timer of the core moves): released at once under ASYNC_FLUSH (answered before
        this returns), after the log's fsync under SYNC_FLUSH (:meth:`_releaser`). An error
        stops the node as it would in the loop (its puts end unknown, as at any stop)."""
        self._puts.update(zip(ids, requests, strict=True))
        held = _Held()
        self._in_batch = True
        try:
            self._propose(trio.current_time(), list(zip(ids, requests, strict=True)), held)
            self._hand_over(held)
        except Exception as exc:
            # the loop raises it (the inbox was empty: room for this)
            self._stop_from_outside(exc)
        finally:
            self._in_batch = False

    def _put_alone(self, messages: Sequence[Message]) -> list[PutOutcome]:
        """:meth:`_propose_now` without a put's bookkeeping, for a lone leader under
        ASYNC_FLUSH with nothing held before it: the messages appended, committed and applied
        now; their outcomes, in order (all WAIT_QUORUM_ACK_TIMEOUT when that failed: the node
        stops)."""
        raft, log_, view = self.raft, self.log, self._view
        assert log_ is not None and view is not None
        self._in_batch = True
        try:
            bodies = self._encode_many(messages)
            output = raft.propose_many(trio.current_time(), list(enumerate(bodies)))
            if output.hard_state is not None or output.messages or output.truncate_from:
                # never from a lone leader's proposal: its term and vote were saved when it
                # was elected, and it has nobody to send to
                raise RuntimeError(f"a lone leader's proposal asked for more: {output}")
            entries = output.entries
            placements = {}
            if entries:
                log_.append(entries)
                keep = self._bodies.keep
                for entry in entries:
                    keep(entry.index, entry.term, entry.body)
                if output.commit_index is not None:
                    wanted = range(entries[0].index, entries[-1].index + 1)
                    placements = view.apply(output.commit_index, wanted)
                    self._release_bodies(view.applied)
        except Exception as exc:
            # the loop raises it (the inbox was empty: room for this); what was appended
            # may be in the log: the outcome is unknown, as for a put pending at a stop
            self._stop_from_outside(exc)
            return [PutOutcome(AppendStatus.WAIT_QUORUM_ACK_TIMEOUT)] * len(messages)
        finally:
            self._in_batch = False
        outcomes: list[PutOutcome] = []
        success = AppendStatus.SUCCESS
        for result in output.results:  # (in request order: the appended, then the refused)
            placed = placements.get(result.index) if result.status is success else None
            if placed is None:
                outcomes.append(PutOutcome(result.status, index=result.index))
                continue
            outcomes.append(_placed_outcome(result.index, placed))
        return outcomes

    def _stop_from_outside(self, exc: Exception) -> None:
        """A put proposed or a message handled outside the loop raised ``exc``: the loop raises
        it (the callers checked the inbox was empty: there is room for this)."""
        self._failure = exc
        self._send_inbox.send_nowait(_Stop())
        self._inbox_items += 1

    def _submit(self, requests: list[_Put]) -> range:
        """Hand ``requests`` (of one call) to the loop as one inbox item (they are proposed
        together); all LEADER_PENDING_FULL at once when the inbox is full. On a lone leader
        with an idle loop they are proposed at once instead (:meth:`_propose_now`). Their
        ids."""
        first = self._next_id
        self._next_id += len(requests)
        ids = range(first, first + len(requests))
        if self._alone_and_idle():
            self._propose_now(ids, requests)
            return ids
        try:
            self._send_inbox.send_nowait(_PutArrived(first, len(requests)))
        except trio.WouldBlock:
            for request in requests:
                request.outcome = PutOutcome(AppendStatus.LEADER_PENDING_FULL)
                request.finish()
        else:
            self._inbox_items += 1
            self._puts.update(zip(ids, requests, strict=True))
        return ids

    def status(self) -> NodeStatus:
        """The node's Raft state (role, term, leader, indexes, peers)."""
        raft = self.raft
        cfg = self.config
        leader = raft.leader_id
        peers = []
        for peer in raft.peers:
            match = raft.match_index(peer) if raft.role is Role.LEADER else 0
            client = self._clients.get(peer)
            peers.append(
                PeerStatus(
                    id=peer,
                    address=cfg.peers[peer],
                    connected=client is not None and client.channel is not None,
                    match_index=match,
                    lag=raft.log.last_index - match if raft.role is Role.LEADER else 0,
                )
            )
        return NodeStatus(
            group=cfg.group,
            id=cfg.node_id,
            role=raft.role.name,
            term=raft.term,
            leader=leader,
            leader_address=self.broker_addresses.get(leader) if leader else None,
            commit_index=raft.commit_index,
            applied_index=self.applied_index,
            last_index=raft.log.last_index,
            peers=tuple(peers),
        )

    async def accept(self, stream: trio.abc.Stream, *, peer: str | None = None) -> None:
        """Serve an incoming peer stream until it closes (memory networks).

        ``peer`` is the member the transport authenticated it as; None: any member (bound to
        the first it claims).
        """
        others = self._members.others
        members = others if peer is None else frozenset({peer}) & others
        await run_channel(stream, self._peer_initializer(members, f"{peer!r} is not a member"))

    # -- running --------------------------------------------------------------------------

    async def run(
        self, *, task_status: trio.TaskStatus[DLedgerNode] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Open the log and the view, connect to peers and serve until cancelled."""
        cfg = self.config
        listeners: list[trio.SocketListener] = []
        if self._listen:
            host, port = split_address(cfg.peers[cfg.node_id])
            listeners = await trio.open_tcp_listeners(port, host=host)
            name = listeners[0].socket.getsockname()
            self.peer_address = (name[0], name[1])
        try:
            self.log = FileLog.open(
                cfg.store_dir / "dledger",
                data_file_size=cfg.data_file_size,
                index_file_size=cfg.index_file_size,
                flush=cfg.flush,
            )
        except BaseException:
            for listener in listeners:
                await listener.aclose()
            raise
        try:
            host_text = self.broker_addresses.get(cfg.node_id, "127.0.0.1:0")
            self.store = CommitLogStore.open(
                cfg.store_dir,
                StoreConfig(
                    mapped_file_size=cfg.mapped_file_size,
                    role=StoreRole.SLAVE,
                    store_host=host_text,
                    flush_interval=cfg.flush_interval,
                    index_flush_interval=BROKER_INDEX_FLUSH_INTERVAL,  # as a broker's
                ),
            )
        except BaseException:
            self.log.close()
            for listener in listeners:
                await listener.aclose()
            raise
        self._store_host = parse_host(host_text)
        self._persist = Persister(self.log)
        # SYNC_FLUSH as a group commit: one fsync per batch of inputs, before it is acted on
        self.log.sync_on_append = False
        raft_started = False
        try:
            if self._listen and self._server_tls is None:
                await self._members.resolve()
            self._view = CommitLogView(cfg.node_id, self.log, self.store, self._bodies)
            self._view.load()
            hard = self.log.load_hard_state()
            self._raft = RaftNode(
                cfg.node_id,
                cfg.peers,
                CachedLog(self.log, self._bodies),
                hard,
                trio.current_time(),
                self._rng,
                attrs.evolve(cfg.raft, max_batch_bytes=cfg.append_budget),
            )
            self._raft.on_role_change(self._on_role_change)
            raft_started = True
            async with trio.open_nursery() as nursery:
                await nursery.start(self.store.run)
                if listeners:
                    await nursery.start(
                        functools.partial(
                            serve_on,
                            self._accepted_initializer,
                            listeners,
                            name="dledger peer port",
                            tls=self._server_tls,
                            allow=cfg.peer_allow,
                            max_connections=cfg.max_connections,
                            idle_timeout=cfg.idle_timeout,
                            max_partial_bytes=cfg.max_partial_bytes,
                        )
                    )
                for peer in self._raft.peers:
                    client = ReconnectingClient(
                        connector=self._connector(peer),
                        initializer=self._peer_initializer(frozenset({peer}), ""),
                        policy=cfg.retry,
                        rng=self._rng,
                        name=f"{cfg.node_id}->{peer}",
                        on_connect=functools.partial(self._hello, peer),
                        connect_timeout=max(cfg.raft.election_timeout, 1.0),
                    )
                    self._clients[peer] = client
                    await nursery.start(client.run)
                nursery.start_soon(self._flusher)
                nursery.start_soon(self._releaser)
                nursery.start_soon(self._keepalive)
                log.info(
                    "dledger %s/%s: term %d, %d entries, applied %d",
                    cfg.group,
                    cfg.node_id,
                    self._raft.term,
                    self.log.last_index,
                    self.applied_index,
                )
                task_status.started(self)
                await self._loop()
        finally:
            with trio.CancelScope(shield=True):
                self._fail_all()
                self._raft = None  # a STATUS meanwhile: not running
                if raft_started and not self.store.closed:
                    await off_loop(self._checkpoint_view)
                await self.store.aclose()
                await off_loop(self.log.close)

    def _hello(self, peer: str, channel: StreamChannel) -> None:
        mine = self.broker_addresses.get(self.config.node_id, "")
        channel.pipeline.write_and_flush(Hello(self.config.node_id, peer, mine))

    def _fail_all(self) -> None:
        # an outcome not yet released may wait for an fsync that did not happen: unknown
        for request in list(self._puts.values()):
            if not request.done:
                request.outcome = PutOutcome(AppendStatus.WAIT_QUORUM_ACK_TIMEOUT)
                request.finish()

    async def _keepalive(self) -> None:
        """Repeat the HELLO on each outgoing connection: the peer port closes idle ones."""
        while True:
            await trio.sleep(self.config.keepalive_interval)
            for peer, client in self._clients.items():
                channel = client.channel
                if channel is not None and channel.is_open and channel.is_writable:
                    self._hello(peer, channel)

    def _tcp_connector(self, peer: str) -> Connector:
        host, port = split_address(self.config.peers[peer])
        # with TLS the peer's certificate must name the member id it is dialled as; from this
        # node's own --peers address, the identity plain TCP is checked by
        return tcp_connector(
            host,
            port,
            tls=self._client_tls,
            server_hostname=peer,
            local_address=self._members.local_address,
        )

    def _accepted_initializer(self, channel: StreamChannel) -> None:
        """A connection accepted on the peer port: the members it may speak for."""
        members, why = self._members.of_accepted(channel, tls=self._server_tls is not None)
        self._peer_initializer(members, why)(channel)

    def _peer_initializer(self, members: frozenset[str], why: str) -> ChannelInitializer:
        def init(channel: StreamChannel) -> None:
            for name, handler in peer_frame_handlers(self.config.max_frame_length):
                channel.pipeline.add_last(handler, name)
            handler = PeerHandler(
                self.config.node_id,
                members,
                why,
                self._deliver,
                self._deliver_hello,
                self._read_done,
            )
            channel.pipeline.add_last(handler, "raft")

        return init

    def _deliver_hello(self, hello: Hello, channel: Channel) -> None:
        try:
            self._send_inbox.send_nowait(_PeerHello(hello, channel))
        except trio.WouldBlock:
            pass  # overloaded: the member repeats it every keepalive_interval
        else:
            self._inbox_items += 1

    def _deliver(self, envelope: Envelope, channel: Channel) -> None:
        if self._handles_now(envelope):
            self._receive_now(envelope, channel)
            return
        try:
            self._send_inbox.send_nowait(_PeerMessage(envelope, channel))
        except trio.WouldBlock:
            pass  # overloaded: Raft retransmits
        else:
            self._inbox_items += 1

    def _handles_now(self, envelope: Envelope) -> bool:
        """Whether ``envelope`` is handled in its reading task (:meth:`_receive_now`): the
        loop is waiting between batches with nothing in its inbox (so nothing received or
        submitted before it is still to be acted on), and it is an append's acknowledgement or
        an append that cannot drop a conflicting tail (its entries extend the log, or repeat
        entries it holds): a truncation waits on the disk, so it is left to the loop."""
        raft = self._raft
        if (
            raft is None
            or self._in_batch
            or self._inbox_items
            or self._failure is not None
            or not self._between
        ):
            return False
        message = envelope.message
        if isinstance(message, AppendResponse):
            return True
        if not isinstance(message, AppendRequest):
            return False  # votes, pre-votes: rare, through the loop
        entries = message.entries
        log_ = raft.log
        if not entries or entries[0].index > log_.last_index:
            return True
        term_at = log_.term_at
        return all(term_at(entry.index) in (None, entry.term) for entry in entries)

    def _receive_now(self, envelope: Envelope, channel: Channel) -> None:
        """Hand ``envelope`` to the core in its reading task, as the loop would in a batch of
        its own: what it produces is kept with the rest of the read's and released at the
        read's end (:meth:`_read_done`: one write per peer and one wake-up for the read, the
        messages for the sender on the connection it came on). An error stops the node as it
        would in the loop; a timer the core moved earlier than the loop waits for brings its
        next tick forward."""
        raft = self.raft
        held = self._read_held
        if held is None:
            held = self._read_held = _Held()
        held.replies[envelope.source] = channel
        self._in_batch = True
        try:
            output = raft.receive(trio.current_time(), envelope.source, envelope.message)
            if output.truncate_from is not None:  # _handles_now lets none through
                raise RuntimeError(f"a message handled in its reading task truncates: {output}")
            if output.refused is not None:
                log.error("%s: closing the connection of %s", output.refused, channel)
                channel.close_nowait(output.refused)
            self._act(output, held)
            wait = self._wait_scope
            if wait is not None and output.next_deadline < wait.deadline:
                wait.deadline = output.next_deadline  # the loop ticks then
        except Exception as exc:
            # the loop raises it (the inbox was empty: room for this); the node stops
            self._stop_from_outside(exc)
        finally:
            self._in_batch = False

    def _read_done(self) -> None:
        """Release what the messages of a read handled in its task produced (at once, or
        after what is held before it: :meth:`_hand_over`)."""
        held = self._read_held
        if held is not None:
            self._read_held = None
            self._hand_over(held)

    async def _flusher(self) -> None:
        """Every ``flush_interval``: fsync the log (ASYNC_FLUSH) and checkpoint the view, off
        the event loop."""
        assert self._persist is not None
        while True:
            await trio.sleep(self.config.flush_interval)
            if self.config.flush is FlushDiskType.ASYNC_FLUSH:
                await self._persist.sync_log()
            await self._record_view()

    async def _record_view(self) -> None:
        """Record how far the view goes, once the store's own flusher (a worker thread) has
        made that part durable: the last end noted that the store's flushed offset covers, so
        the record never runs ahead of the disk. The end reached now is noted for next time."""
        view = self._view
        assert view is not None
        ready = self._view_mark
        if ready is not None and ready != view.saved and view.store.flushed_offset >= ready[1]:
            await off_loop(view.save, *ready)
        self._view_mark = (view.applied, view.store.max_offset)

    def _checkpoint_view(self) -> None:
        """fsync the view, then record how far it goes (so the record never runs ahead)."""
        view = self._view
        assert view is not None
        state = (view.applied, view.store.max_offset)
        if view.saved == state:
            return
        view.store.flush()
        view.save(*state)

    async def _loop(self) -> None:
        raft = self.raft
        held = _Held()
        ticked = raft.tick(trio.current_time())
        self._act(ticked, held)
        self._hand_over(held)
        while True:
            item: _InboxItem | None = None
            deadline = ticked.next_deadline
            self._between = True
            if deadline > trio.current_time():
                with trio.move_on_at(deadline if math.isfinite(deadline) else math.inf) as wait:
                    self._wait_scope = wait
                    item = await self._inbox.receive()
                self._wait_scope = None
            else:
                await trio.lowlevel.checkpoint()
            self._between = False
            self._read_done()  # (a read that ended without saying so)
            batch: list[_InboxItem] = [item] if item is not None else []
            while len(batch) < _BATCH:
                try:
                    batch.append(self._inbox.receive_nowait())
                except trio.WouldBlock:
                    break
            self._inbox_items -= len(batch)
            held = _Held()
            puts: list[tuple[int, _Put]] = []
            self._in_batch = True
            for each in batch:
                if isinstance(each, _PutArrived):
                    known = self._puts
                    for request_id in range(each.first, each.first + each.count):
                        request = known.get(request_id)
                        if request is not None:  # else abandoned before it was read
                            puts.append((request_id, request))
                    continue
                if puts:  # the puts that came together: one append round
                    self._propose(trio.current_time(), puts, held)
                    puts = []
                if isinstance(each, _Stop):
                    assert self._failure is not None
                    raise self._failure
                if isinstance(each, _PeerMessage):
                    envelope, channel = each.envelope, each.channel
                    message = envelope.message
                    output = raft.receive(trio.current_time(), envelope.source, message)
                    held.replies[envelope.source] = channel
                    if output.truncate_from is not None:  # a follower's conflicting tail
                        assert self._persist is not None
                        await self._persist.truncate_log(output.truncate_from)
                    if output.refused is not None:
                        # impossible from an honest member: that connection goes, we stay
                        log.error("%s: closing the connection of %s", output.refused, channel)
                        channel.close_nowait(output.refused)
                    self._act(output, held)
                elif each.channel.is_open:  # a HELLO
                    self.broker_addresses[each.hello.source] = each.hello.broker_address
            if puts:
                self._propose(trio.current_time(), puts, held)
            ticked = raft.tick(trio.current_time())
            self._act(ticked, held)
            self._hand_over(held)
            self._in_batch = False

    def _hand_over(self, held: _Held) -> None:
        """Release ``held`` at once when it has nothing to persist and nothing is queued
        before it (ASYNC_FLUSH, no new term or vote); else queue it for :meth:`_releaser`."""
        if not (held.messages or held.done or held.hard_state is not None):
            return
        wait = held.hard_state is not None or self.config.flush is FlushDiskType.SYNC_FLUSH
        if not wait and self._queued == 0:
            self._send_held(held)
            return
        self._queued += 1
        self._send_release.send_nowait(held)

    async def _releaser(self) -> None:
        """Persist, then send and answer, in the order the batches were processed.

        The hard state is saved first (fsynced, in a worker thread); under SYNC_FLUSH the
        entries appended so far are fsynced too, one fsync for every batch queued meanwhile
        (a group commit). Only then do the batches' messages leave (a follower's
        acknowledgement, a vote) and their puts' tasks wake to answer. The loop goes on with
        the next batches while a thread fsyncs: a leader holds back the appends carrying its
        entries until they are durable on its own disk, so an entry counts towards a commit
        only once durable on the leader and on the followers that acknowledged it.
        """
        persist = self._persist
        assert persist is not None
        async for held in self._releases:
            group = [held]
            while True:
                try:
                    group.append(self._releases.receive_nowait())
                except trio.WouldBlock:
                    break
            # a later hard state covers an earlier one: its term is not lower, and within a
            # term a vote is never withdrawn
            hard = next((h.hard_state for h in reversed(group) if h.hard_state), None)
            if hard is not None:
                await persist.save_hard_state(hard)
            if self.config.flush is FlushDiskType.SYNC_FLUSH:
                await persist.sync_log()
            for each in group:
                self._send_held(each)
            self._queued -= len(group)

    def _send_held(self, held: _Held) -> None:
        touched: dict[int, Channel] = {}
        replies = held.replies
        for envelope in coalesce_acks(held.messages):
            # the connection its message came on, else the one towards it
            channel = _usable(replies.get(envelope.target))
            if channel is None:
                client = self._clients.get(envelope.target)
                channel = _usable(client.channel if client is not None else None)
                if channel is None:
                    continue
            channel.pipeline.write(envelope)
            touched[id(channel)] = channel
        for channel in touched.values():
            if channel.is_open:
                channel.pipeline.flush()
        for request in held.done:
            request.finish()

    def _propose(self, now: float, puts: list[tuple[int, _Put]], held: _Held) -> None:
        """Append the puts that came together in one round (a leader), else answer them
        NOT_LEADER at once, naming the leader this node knows of."""
        raft = self.raft
        if raft.role is not Role.LEADER:
            leader = raft.leader_id
            for _, request in puts:
                if request.outcome is None:
                    request.outcome = self._outcome(request, AppendStatus.NOT_LEADER, 0, leader)
                    held.done.append(request)
            return
        bodies = self._encode_many([request.message for _, request in puts])
        output = raft.propose_many(
            now, [(request_id, body) for (request_id, _), body in zip(puts, bodies, strict=True)]
        )
        # the entries it appended, in order (those past max_pending: LEADER_PENDING_FULL)
        for entry, (_, request) in zip(output.entries, puts, strict=False):
            self._by_index[entry.index] = request
        self._act(output, held)

    def _encode_many(self, messages: Sequence[Message]) -> list[bytes]:
        """Each message as the record its entry carries, placed where the log appends it."""
        log_ = self.log
        assert log_ is not None
        return put_records(messages, log_.end_pos, log_.next_entry_pos, self._store_host, _now_ms)

    def _act(self, output: Output, held: _Held) -> None:
        """Write the entries ``output`` appends (into the files, fsynced later off the event
        loop; a truncation it names was made before), apply what it committed and note what
        it says to persist, send and answer: :meth:`_hand_over` releases that once the batch
        is processed (after the fsync it depends on)."""
        if output.entries:
            log_ = self.log
            assert log_ is not None
            log_.append(output.entries)
            # kept until applied: later appends to the followers and the view use them
            for entry in output.entries:
                if not entry.noop:
                    self._bodies.keep(entry.index, entry.term, entry.body)
        if output.hard_state is not None:
            # a later hard state covers an earlier one of the batch: its term is not lower,
            # and within a term a vote is never withdrawn
            held.hard_state = output.hard_state
        held.messages.extend(output.messages)
        if output.commit_index is not None:
            self._apply(output.commit_index)
        for result in output.results:
            request = self._puts.get(result.request_id)
            self._by_index.pop(result.index, None)
            if request is None:
                continue
            if request.outcome is None:
                request.outcome = self._outcome(
                    request, result.status, result.index, result.leader_id
                )
                held.done.append(request)

    def _outcome(
        self, request: _Put, status: AppendStatus, index: int, leader: str | None
    ) -> PutOutcome:
        if status is AppendStatus.SUCCESS:
            applied = request.applied
            if applied is not None:
                # made by _apply with the same index: the entry's place in the view
                return applied if applied.index == index else attrs.evolve(applied, index=index)
            return PutOutcome(status, index=index)
        if status is AppendStatus.NOT_LEADER:
            return PutOutcome(
                status,
                leader_id=leader,
                leader_address=self.broker_addresses.get(leader) if leader else None,
            )
        return PutOutcome(status, index=index)

    def _on_role_change(self, role: Role, term: int) -> None:
        log.info("dledger %s: %s in term %d", self.config.node_id, role.name, term)
        self._role_changed.set()
        self._role_changed = trio.Event()

    def _apply(self, commit_index: int) -> None:
        """Apply up to ``commit_index`` to the view; the puts appended here learn where their
        messages went."""
        view = self._view
        assert view is not None
        placements = view.apply(commit_index, self._by_index)
        self._release_bodies(view.applied)
        for index, placed in placements.items():
            self._by_index[index].applied = _placed_outcome(index, placed)

    def _release_bodies(self, applied: int) -> None:
        """Forget the kept bodies of applied entries that every follower keeping up (within
        :data:`_FOLLOWER_LAG`, and while they take at most half the byte budget) acknowledged:
        a leader's appends to the follower one ack behind the quorum are made from memory, not
        read back from the log entry by entry."""
        raft = self._raft
        upto = applied
        if (
            raft is not None
            and raft.role is Role.LEADER
            and raft.peers
            and not self._bodies.crowded
        ):
            slowest = min(raft.match_index(peer) for peer in raft.peers)
            upto = min(applied, max(slowest, applied - _FOLLOWER_LAG))
        self._bodies.release_through(upto)


def coalesce_acks(messages: list[Envelope]) -> list[Envelope]:
    """``messages`` with a follower's acknowledgements batched: when everything a batch says
    to one member is successful APPEND_OKs of one term, only the one with the highest match
    index goes (it covers every index up to it: the leader drops the appends in flight it
    covers and hears from the follower all the same). Anything else is left as it is."""
    kept: dict[str, int] = {}  # target -> position of its best acknowledgement so far
    mixed: set[str] = set()
    for i, envelope in enumerate(messages):
        target, message = envelope.target, envelope.message
        if target in mixed:
            continue
        if not (isinstance(message, AppendResponse) and message.success):
            mixed.add(target)
            continue
        j = kept.get(target)
        if j is None:
            kept[target] = i
            continue
        best = messages[j].message
        assert isinstance(best, AppendResponse)
        if best.term != message.term:
            mixed.add(target)
        elif message.match_index >= best.match_index:
            kept[target] = i
    if not kept or len(messages) == 1:
        return messages
    return [e for i, e in enumerate(messages) if e.target in mixed or kept[e.target] == i]


def _now_ms() -> int:
    """The wall clock in ms since the epoch: a record's store timestamp."""
    return time.time_ns() // 1_000_000
