"""``hanet dledger``: a DLedger node (Raft-replicated commit log) with a broker port.

``hanet dledger --group G --id n0 --peers n0=127.0.0.1:40911,n1=...,n2=... --store DIR
--listen HOST:PORT [--flush ASYNC_FLUSH|SYNC_FLUSH] [--ready-file FILE]``

- ``--peers`` gives every member's peer address (this node's included: it listens there);
  ``--listen`` is this node's broker port. Nodes tell each other their broker ports when they
  connect, so a follower answers a PUT with NOT_LEADER and the leader's broker address.
- The broker port speaks :mod:`hanet.protocol`: PUT on the leader waits for the quorum commit
  (one Raft entry per message) and answers PUT_OK with the message's place in the node's commit
  log view; a follower or candidate answers ERROR NOT_LEADER (with the leader's address when it
  knows it); WAIT_QUORUM_ACK_TIMEOUT (an ERROR, or a per-message FLUSH_SLAVE_TIMEOUT with that
  detail in a mixed batch) means the outcome is unknown. PULL and STATUS are served by every
  node from its commit log view; STATUS has ``role`` LEADER / FOLLOWER / CANDIDATE and a
  ``dledger`` section (group, id, term, leader, commit index, peers' match index and lag).
- ``--store DIR`` holds ``dledger/`` (DLedger's data and index files) and the commit log view
  (``commitlog/``, ``consumequeue/``): ``hanet dump --store DIR`` and ``hanet verify`` work on it.

This module is the DLedger broker service: the broker layer (``hanet.broker``) serves the
classic roles, and ``hanet.dledger`` may not import ``hanet.protocol``; the command line may.
"""

from __future__ import annotations

import argparse
import errno
import itertools
import json
import os
import signal
import socket
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import trio

from hanet.boot import serve_listeners
from hanet.broker import MAX_PULL_BYTES
from hanet.channel import (
    ChannelInboundHandler,
    HandlerContext,
    StreamChannel,
    format_address,
)
from hanet.dledger import (
    DEFAULT_DATA_FILE_SIZE,
    DEFAULT_INDEX_FILE_SIZE,
    AppendStatus,
    DLedgerError,
    DLedgerNode,
    NodeConfig,
    PutOutcome,
    RaftConfig,
    parse_peers,
)
from hanet.protocol import (
    AUTO_QUEUE,
    DEFAULT_MAX_FRAME_LENGTH,
    MAX_PULL_MESSAGES,
    BrokerServerCodec,
    BrokerStatus,
    DispatchError,
    DLedgerInfo,
    DLedgerPeer,
    ErrorCode,
    ErrorResponse,
    PullRequest,
    PullResponse,
    PullStatus,
    PutMessage,
    PutReply,
    PutRequest,
    PutResponse,
    StatusRequest,
    StatusResponse,
    broker_frame_codec,
    message_problem,
)
from hanet.store import (
    CQ_BLANK_SIZE,
    MAX_PROPERTIES_SIZE,
    CommitLogStore,
    FlushDiskType,
    Message,
    PutStatus,
    StoreError,
    encode_properties,
)

from ._support import EXIT_OK, fail, first_error, first_message, parse_address, parse_size

__all__ = ["DLedgerBrokerService", "register", "run_dledger"]

DEFAULT_QUEUES = 4
_WAIT_DETAIL = (
    "WAIT_QUORUM_ACK_TIMEOUT: appended but not acknowledged by a quorum in time: "
    "the outcome is unknown (it may still be committed)"
)


def register(subparsers: Any) -> None:
    """Add ``dledger`` to the ``hanet`` parser."""
    parser = subparsers.add_parser(
        "dledger",
        help="run a DLedger node: a Raft-replicated commit log with automatic failover",
        description="Run one node of a DLedger group (Raft): the leader answers puts once a "
        "majority stored them, followers answer NOT_LEADER with the leader's broker port, "
        "and a new leader is elected when the leader dies.",
    )
    parser.add_argument("--group", required=True, help="the DLedger group's name")
    parser.add_argument("--id", required=True, dest="node_id", help="this node's id")
    parser.add_argument(
        "--peers", required=True, metavar="ID=HOST:PORT,...",
        help="every member's peer address, this node's included",
    )  # fmt: skip
    parser.add_argument("--store", type=Path, required=True, metavar="DIR", help="store dir")
    parser.add_argument(
        "--listen", type=parse_address, required=True, metavar="HOST:PORT",
        help="this node's broker port",
    )  # fmt: skip
    parser.add_argument(
        "--flush", choices=[t.value for t in FlushDiskType], default="ASYNC_FLUSH",
        help="SYNC_FLUSH: fsync entries before they count toward a quorum (ASYNC_FLUSH)",
    )  # fmt: skip
    parser.add_argument(
        "--ready-file", type=Path, default=None, metavar="FILE",
        help="write the addresses as JSON once serving",
    )  # fmt: skip
    parser.add_argument(
        "--election-timeout", type=float, default=1.0, metavar="S",
        help="minimum election timeout, seconds (1.0; heartbeats every tenth of it)",
    )  # fmt: skip
    parser.add_argument(
        "--append-timeout", type=float, default=3.0, metavar="S",
        help="a put not committed within this answers WAIT_QUORUM_ACK_TIMEOUT (3.0)",
    )  # fmt: skip
    parser.add_argument(
        "--data-file-size", type=parse_size, default=DEFAULT_DATA_FILE_SIZE, metavar="BYTES",
        help="DLedger data file size (1G)",
    )  # fmt: skip
    parser.add_argument(
        "--index-file-size", type=parse_size, default=DEFAULT_INDEX_FILE_SIZE,
        metavar="BYTES", help="DLedger index file size, a multiple of 32 (160M)",
    )  # fmt: skip
    parser.add_argument(
        "--mapped-file-size", type=parse_size, default=1 << 30, metavar="BYTES",
        help="commit log view file size (1G)",
    )  # fmt: skip
    parser.add_argument(
        "--queues", type=int, default=DEFAULT_QUEUES, metavar="N",
        help=f"queues per topic for puts without a queue id ({DEFAULT_QUEUES})",
    )  # fmt: skip
    parser.set_defaults(func=run_dledger)


class DLedgerBrokerService:
    """The broker port of a DLedger node: PUT through Raft, PULL and STATUS from the view."""

    def __init__(
        self,
        node: DLedgerNode,
        *,
        queues: int = DEFAULT_QUEUES,
        max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
    ) -> None:
        self.node = node
        self.queues = queues
        self.max_frame_length = max_frame_length
        self.broker_address: str | None = None
        self._counters: dict[str, itertools.count[int]] = {}
        self._started = trio.current_time()
        self.puts = 0

    def initialize(self, channel: StreamChannel) -> None:
        """The pipeline of a broker port connection."""
        pipeline = channel.pipeline
        for name, handler in broker_frame_codec(self.max_frame_length, BrokerServerCodec()):
            pipeline.add_last(handler, name)
        pipeline.add_last(_Requests(self, channel), "requests")

    def _refusal(self, message: PutMessage, properties: dict[str, str]) -> str | None:
        problem = message_problem(message)
        if problem is None and message.queue_id != AUTO_QUEUE and message.queue_id >= self.queues:
            problem = f"queue id {message.queue_id} is out of range: this broker has {self.queues}"
        store = self.node.store
        if problem is None and store is not None:
            limit = store.config.max_message_size
            if len(message.body) > limit:
                problem = f"body of {len(message.body)} bytes is over the maximum {limit}"
        if problem is None and len(encode_properties(properties)) > MAX_PROPERTIES_SIZE:
            problem = f"properties are over {MAX_PROPERTIES_SIZE} bytes"
        return problem

    async def put(
        self, request: PutRequest, born: tuple[bytes, int]
    ) -> PutResponse | ErrorResponse:
        """Serve a PUT (see the module docstring)."""
        refused: list[str | None] = []
        messages: list[Message] = []
        for m in request.messages:
            properties: dict[str, str] = {}
            if m.tags:
                properties["TAGS"] = m.tags
            if m.keys:
                properties["KEYS"] = m.keys
            properties.update(m.properties)
            problem = self._refusal(m, properties)
            refused.append(problem)
            if problem is not None:
                continue
            queue_id = m.queue_id
            if queue_id == AUTO_QUEUE:
                counter = self._counters.setdefault(m.topic, itertools.count())
                queue_id = next(counter) % self.queues
            messages.append(
                Message(
                    topic=m.topic,
                    body=m.body,
                    queue_id=queue_id,
                    flag=m.flag,
                    properties=properties,
                    born_host=born[0],
                    born_port=born[1],
                )
            )
        outcomes = await self.node.put_many(messages) if messages else []
        statuses = {o.status for o in outcomes}
        if outcomes and len(outcomes) == len(refused) and len(statuses) == 1:
            (status,) = statuses
            if status is not AppendStatus.SUCCESS:
                return self._error(request.request_id, status, outcomes[0])
        answers = iter(outcomes)
        replies = []
        for problem in refused:
            if problem is not None:
                replies.append(PutReply(PutStatus.MESSAGE_ILLEGAL, detail=problem))
            else:
                replies.append(_reply(next(answers)))
        self.puts += sum(1 for o in outcomes if o.status is AppendStatus.SUCCESS)
        return PutResponse(request.request_id, tuple(replies))

    def _error(self, request_id: int, status: AppendStatus, outcome: PutOutcome) -> ErrorResponse:
        if status is AppendStatus.NOT_LEADER:
            leader = outcome.leader_id
            text = f"not the leader; the leader is {leader}" if leader else "no leader known"
            return ErrorResponse(request_id, ErrorCode.NOT_LEADER, text, outcome.leader_address)
        if status is AppendStatus.LEADER_PENDING_FULL:
            return ErrorResponse(
                request_id, ErrorCode.LEADER_PENDING_FULL, "too many puts waiting for a quorum"
            )
        return ErrorResponse(request_id, ErrorCode.WAIT_QUORUM_ACK_TIMEOUT, _WAIT_DETAIL)

    def pull(self, request: PullRequest) -> PullResponse:
        """Serve a PULL from the commit log view (as the classic broker does)."""
        store = self.node.store
        if store is None:
            return PullResponse(request.request_id, PullStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
        topic, queue_id, offset = request.topic, request.queue_id, request.queue_offset
        low = store.min_queue_offset(topic, queue_id)
        high = store.max_queue_offset(topic, queue_id)

        def answer(
            status: PullStatus, next_offset: int, records: Sequence[bytes] = ()
        ) -> PullResponse:
            return PullResponse(request.request_id, status, next_offset, low, high, tuple(records))

        if high <= low:
            return answer(PullStatus.NO_MESSAGE_IN_QUEUE, 0 if high == 0 else high)
        if offset < low:
            return answer(PullStatus.OFFSET_TOO_SMALL, low)
        if offset == high:
            return answer(PullStatus.OFFSET_OVERFLOW_ONE, offset)
        if offset > high:
            return answer(PullStatus.OFFSET_OVERFLOW_BADLY, high)
        records: list[bytes] = []
        budget = MAX_PULL_BYTES
        end = min(offset + min(request.max_messages, MAX_PULL_MESSAGES), high)
        next_offset = offset
        while next_offset < end:
            entry = store.consume_queue_entry(topic, queue_id, next_offset)
            if entry is None:
                break
            physical, size, _ = entry
            if size == CQ_BLANK_SIZE:
                next_offset += 1
                continue
            if records and size > budget:
                break
            records.append(store.read(physical, size))
            budget -= size
            next_offset += 1
        return answer(PullStatus.FOUND, next_offset, records)

    def status(self) -> BrokerStatus:
        """The STATUS document: the view's offsets, ``role`` and the ``dledger`` section."""
        node = self.node
        store: CommitLogStore | None = node.store
        state = node.status()
        info = DLedgerInfo(
            group=state.group,
            id=state.id,
            role=state.role,
            term=state.term,
            leader=state.leader,
            commit_index=state.commit_index,
            applied_index=state.applied_index,
            last_index=state.last_index,
            leader_address=state.leader_address,
            peers=tuple(
                DLedgerPeer(p.id, p.address, p.connected, p.match_index, p.lag) for p in state.peers
            ),
        )
        assert store is not None
        stats = store.statistics()
        return BrokerStatus(
            role=state.role,
            broker_address=self.broker_address,
            ha_address=None,
            min_offset=stats.min_offset,
            max_offset=stats.max_offset,
            flushed_offset=stats.flushed_offset,
            dispatched_offset=stats.dispatched_offset,
            puts=self.puts,
            mapped_files=stats.mapped_files,
            dispatch_error=DispatchError(*stats.dispatch_error) if stats.dispatch_error else None,
            uptime=round(trio.current_time() - self._started, 3),
            disk_full=stats.disk_full,
            disk_used_ratio=(
                None if stats.disk_used_ratio is None else round(stats.disk_used_ratio, 4)
            ),
            create_error=stats.create_error,
            dledger=info,
        )


def _reply(outcome: PutOutcome) -> PutReply:
    if outcome.status is AppendStatus.SUCCESS:
        return PutReply(
            PutStatus.PUT_OK,
            outcome.queue_id,
            outcome.queue_offset,
            outcome.wrote_offset,
            outcome.wrote_size,
            outcome.store_timestamp,
            outcome.msg_id,
        )
    if outcome.status is AppendStatus.WAIT_QUORUM_ACK_TIMEOUT:
        return PutReply(PutStatus.FLUSH_SLAVE_TIMEOUT, detail=_WAIT_DETAIL)
    return PutReply(PutStatus.SERVICE_NOT_AVAILABLE, detail=f"{outcome.status.name}: not appended")


def _born(address: object) -> tuple[bytes, int]:
    if isinstance(address, tuple) and len(address) >= 2:
        for family in (socket.AF_INET, socket.AF_INET6):
            try:
                return socket.inet_pton(family, str(address[0])), int(address[1])
            except OSError:
                continue
    return b"\x7f\x00\x00\x01", 0


class _Requests(ChannelInboundHandler):
    def __init__(self, service: DLedgerBrokerService, channel: StreamChannel) -> None:
        self.service = service
        self.born = _born(channel.remote_address)

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        try:
            if isinstance(msg, PutRequest):
                ctx.spawn(self._put, ctx, msg)
            elif isinstance(msg, PullRequest):
                ctx.write(self.service.pull(msg))
            elif isinstance(msg, StatusRequest):
                ctx.write(StatusResponse(msg.request_id, self.service.status()))
            else:
                ctx.fire_channel_read(msg)
        except StoreError as exc:
            ctx.write(ErrorResponse(msg.request_id, ErrorCode.SYSTEM_ERROR, str(exc)))

    async def _put(self, ctx: HandlerContext, request: PutRequest) -> None:
        answer = await self.service.put(request, self.born)
        ctx.write_and_flush(answer)

    def channel_read_complete(self, ctx: HandlerContext) -> None:
        ctx.flush()
        ctx.fire_channel_read_complete()

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        ctx.close(f"{type(exc).__name__}: {exc}")


def _write_ready(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data) + "\n", encoding="utf-8")
    tmp.replace(path)


async def run_dledger(args: argparse.Namespace) -> int:
    """``hanet dledger``: run until SIGTERM (0) or Ctrl-C."""
    try:
        peers = parse_peers(args.peers)
    except ValueError as exc:
        return fail(f"--peers: {exc}")
    if args.node_id not in peers:
        return fail(f"--id {args.node_id} is not one of --peers ({', '.join(peers)})")
    if args.election_timeout <= 0:
        return fail("--election-timeout must be > 0")
    host, port = args.listen
    error: str | None = None
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        return fail(f"cannot listen on the broker port {host}:{port}: {exc.strerror or exc}")
    bound = listeners[0].socket.getsockname()
    broker_address = format_address((bound[0], bound[1]))
    if bound[0] in ("0.0.0.0", "::"):
        broker_address = f"127.0.0.1:{bound[1]}"
    timeout = args.election_timeout
    try:
        config = NodeConfig(
            group=args.group,
            node_id=args.node_id,
            peers=peers,
            store_dir=args.store,
            broker_addresses={args.node_id: broker_address},
            flush=FlushDiskType(args.flush),
            raft=RaftConfig(
                election_timeout=timeout,
                heartbeat_interval=timeout / 10,
                retransmit_timeout=timeout * 0.3,
                append_timeout=args.append_timeout,
            ),
            data_file_size=args.data_file_size,
            index_file_size=args.index_file_size,
            mapped_file_size=args.mapped_file_size,
        )
    except ValueError as exc:
        for listener in listeners:
            await listener.aclose()
        return fail(str(exc))
    node = DLedgerNode(config)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(node.run)
            service = DLedgerBrokerService(node, queues=args.queues)
            service.broker_address = broker_address
            await nursery.start(
                partial(serve_listeners, service.initialize, listeners, name="broker port")
            )
            peer = node.peer_address
            peer_text = format_address(peer) if peer else peers[args.node_id]
            print(
                f"dledger {args.group}/{args.node_id} ready: store {args.store}, "
                f"broker port {broker_address}, peer port {peer_text}",
                flush=True,
            )
            if args.ready_file is not None:
                _write_ready(
                    args.ready_file,
                    {
                        "role": "DLEDGER",
                        "group": args.group,
                        "id": args.node_id,
                        "broker": broker_address,
                        "peer": peer_text,
                        "store": str(args.store),
                        "pid": os.getpid(),
                    },
                )
            with trio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    print("SIGTERM: shutting down", file=sys.stderr, flush=True)
                    nursery.cancel_scope.cancel()
                    break
    except* (StoreError, DLedgerError, OSError, ValueError) as group:
        error = first_message(group)
        first = first_error(group)
        if isinstance(first, OSError) and first.errno == errno.EADDRINUSE:
            error = f"cannot listen on the peer port {peers[args.node_id]}: {error}"
    return EXIT_OK if error is None else fail(error)
