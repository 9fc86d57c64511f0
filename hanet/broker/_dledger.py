"""The broker port of a DLedger node: PUT through Raft, PULL and STATUS from its view.

A follower or candidate answers a PUT with ERROR NOT_LEADER (with the leader's broker address
when it knows it); WAIT_QUORUM_ACK_TIMEOUT means the outcome is unknown (the entry may still
commit). Messages are checked as the classic broker checks them (:func:`refusal`) and pulls
are served by the same code (:func:`serve_pull`).

Consumer offsets (COMMIT_OFFSET, QUERY_OFFSET) are kept per node in a
:class:`ConsumerOffsets` (memory only unless one with a file is given; they are not
replicated through Raft), and so are the consumer groups' members (a
:class:`ConsumerRegistry`: a consumer heartbeats to each node it reaches). SYNC_METADATA and the
name server's requests answer ERROR NOT_SUPPORTED: a DLedger group has no master/slave metadata
sync.
"""

from __future__ import annotations

from typing import Any

import trio

from hanet.channel import ChannelInboundHandler, HandlerContext, StreamChannel
from hanet.dledger import AppendStatus, DLedgerNode, PutOutcome
from hanet.protocol import (
    DEFAULT_MAX_FRAME_LENGTH,
    BrokerServerCodec,
    BrokerStatus,
    CommitOffsetRequest,
    DLedgerInfo,
    DLedgerPeer,
    ErrorCode,
    ErrorResponse,
    PullRequest,
    PullResponse,
    PullStatus,
    PutReply,
    PutRequest,
    PutResponse,
    QueryOffsetRequest,
    QueryOffsetResponse,
    Request,
    StatusRequest,
    StatusResponse,
    broker_frame_codec,
)
from hanet.store import DEFAULT_MAX_MESSAGE_SIZE, CommitLogStore, PutStatus, StoreError

from ._admission import RoundRobin, admit
from ._consumers import ConsumerRegistry, consumer_groups
from ._handler import (
    DEFAULT_MAX_IN_FLIGHT,
    MEMBERSHIP_REQUESTS,
    not_supported,
    packed_host,
    serve_commit,
    serve_membership,
)
from ._offsets import ConsumerOffsets
from ._pull import serve_pull
from ._status import store_status

__all__ = ["DEFAULT_QUEUES", "DLedgerBrokerService"]

DEFAULT_QUEUES = 4
"""Queues per topic for puts without a queue id (RocketMQ's defaultTopicQueueNums)."""

_WAIT_DETAIL = (
    "WAIT_QUORUM_ACK_TIMEOUT: appended but not acknowledged by a quorum in time: "
    "the outcome is unknown (it may still be committed)"
)


class DLedgerBrokerService:
    """The broker port of a DLedger node: PUT through Raft, PULL and STATUS from the view,
    consumer offsets from ``offsets`` (default: in memory only; run its
    :meth:`ConsumerOffsets.run` to persist one with a file)."""

    def __init__(
        self,
        node: DLedgerNode,
        *,
        queues: int = DEFAULT_QUEUES,
        max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
        offsets: ConsumerOffsets | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:
        self.node = node
        self.max_in_flight = max_in_flight
        """Per connection, puts awaiting their answer before reads pause."""
        self.offsets = offsets if offsets is not None else ConsumerOffsets()
        self.consumers = ConsumerRegistry(clock=trio.current_time)
        """The live members of each consumer group."""
        self.queues = queues
        self.max_frame_length = max_frame_length
        self.broker_address: str | None = None
        self._queue_for = RoundRobin(queues)
        self._started = trio.current_time()
        self.puts = 0

    def initialize(self, channel: StreamChannel) -> None:
        """The pipeline of a broker port connection."""
        pipeline = channel.pipeline
        for name, handler in broker_frame_codec(self.max_frame_length, BrokerServerCodec()):
            pipeline.add_last(handler, name)
        pipeline.add_last(_Requests(self, channel), "requests")

    async def put(
        self, request: PutRequest, born: tuple[bytes, int]
    ) -> PutResponse | ErrorResponse:
        """Serve a PUT (see the module docstring)."""
        store = self.node.store
        admission = admit(
            request.messages,
            born,
            queues=self.queues,
            max_body=store.config.max_message_size
            if store is not None
            else DEFAULT_MAX_MESSAGE_SIZE,
            queue_for=self._queue_for,
        )
        messages = admission.messages
        outcomes = await self.node.put_many(messages) if messages else []
        statuses = {o.status for o in outcomes}
        if outcomes and len(outcomes) == len(request.messages) and len(statuses) == 1:
            (status,) = statuses
            if status is not AppendStatus.SUCCESS:
                return self._error(request.request_id, status, outcomes[0])
        replies = admission.merged(
            map(_reply, outcomes), lambda r: PutReply(r.status, detail=r.detail)
        )
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
        return serve_pull(store, request, self.queues)

    def status(self) -> BrokerStatus:
        """The STATUS document: the view's offsets, ``role``, the ``dledger`` section and the
        ``consumer_offsets`` (no ``cluster`` or ``metadata_sync``: a DLedger group has no name
        server registration nor slaves)."""
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
        return store_status(
            stats,
            role=state.role,
            broker_address=self.broker_address,
            ha_address=None,
            puts=self.puts,
            uptime=round(trio.current_time() - self._started, 3),
            dledger=info,
            consumer_offsets=self.offsets.status(),
            consumer_groups=consumer_groups(self.consumers),
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


class _Requests(ChannelInboundHandler):
    """A DLedger broker port connection. Reading pauses while ``max_in_flight`` puts await
    their answers or the client does not read its answers (as :class:`RequestHandler`)."""

    def __init__(self, service: DLedgerBrokerService, channel: StreamChannel) -> None:
        self.service = service
        self.channel = channel
        self.born = packed_host(channel.remote_address)
        self.in_flight = 0
        self._paused = False

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        try:
            if isinstance(msg, PutRequest):
                self.in_flight += 1
                self._update_reading()
                ctx.spawn(self._put, ctx, msg)
            elif isinstance(msg, PullRequest):
                ctx.write(self.service.pull(msg))
            elif isinstance(msg, StatusRequest):
                ctx.write(StatusResponse(msg.request_id, self.service.status()))
            elif isinstance(msg, CommitOffsetRequest):
                ctx.write(serve_commit(self.service.offsets.commit, msg))
            elif isinstance(msg, QueryOffsetRequest):
                offset = self.service.offsets.query(msg.group, msg.topic, msg.queue_id)
                ctx.write(QueryOffsetResponse(msg.request_id, offset))
            elif isinstance(msg, MEMBERSHIP_REQUESTS):
                ctx.write(serve_membership(self.service.consumers, msg))
            elif isinstance(msg, Request):
                ctx.write(not_supported(msg, "a DLedger broker port"))
            else:
                ctx.fire_channel_read(msg)
        except StoreError as exc:
            ctx.write(ErrorResponse(msg.request_id, ErrorCode.SYSTEM_ERROR, str(exc)))

    async def _put(self, ctx: HandlerContext, request: PutRequest) -> None:
        try:
            answer = await self.service.put(request, self.born)
            ctx.write_and_flush(answer)
        finally:
            self.in_flight -= 1
            self._update_reading()

    def channel_writability_changed(self, ctx: HandlerContext) -> None:
        self._update_reading()
        ctx.fire_channel_writability_changed()

    def _update_reading(self) -> None:
        """Pause reading while too many puts wait or the client does not read its answers."""
        channel = self.channel
        if not channel.is_open:
            return
        pause = self.in_flight >= self.service.max_in_flight or not channel.is_writable
        if pause != self._paused:
            self._paused = pause
            channel.auto_read = not pause

    def channel_read_complete(self, ctx: HandlerContext) -> None:
        ctx.flush()
        ctx.fire_channel_read_complete()

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        ctx.close(f"{type(exc).__name__}: {exc}")
