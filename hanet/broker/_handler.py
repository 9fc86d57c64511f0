"""One broker port connection: decode requests, serve them through the Broker, answer by id.

PUT, PULL, STATUS, COMMIT_OFFSET, QUERY_OFFSET, SYNC_METADATA and the consumer group requests
(CONSUMER_HEARTBEAT, UNREGISTER_CONSUMER, GET_CONSUMER_LIST: :func:`serve_membership`) are
served; any other request (a name server's) is answered ERROR NOT_SUPPORTED and the connection
stays open.

Puts that must wait (SYNC_FLUSH, SYNC_MASTER) queue in arrival order, which is also their order
in the commit log; one task per connection settles them: it waits for the oldest, then answers
every later one already covered by the flushed / replicated offset without waiting again, so
one ack that covers many puts answers them in one pass and one send.
"""

from __future__ import annotations

import logging
import socket
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import attrs
import trio

from handlers import DecoderError
from hanet.channel import ChannelInboundHandler, HandlerContext, StreamChannel, format_address
from hanet.protocol import (
    BrokerMetadata,
    BrokerStatus,
    CommitOffsetRequest,
    CommitOffsetResponse,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResponse,
    ConsumerListRequest,
    ConsumerListResponse,
    ErrorCode,
    ErrorResponse,
    MetadataRequest,
    MetadataResponse,
    PullRequest,
    PullResponse,
    PutMessage,
    PutReply,
    PutRequest,
    PutResponse,
    QueryOffsetRequest,
    QueryOffsetResponse,
    Request,
    StatusRequest,
    StatusResponse,
    UnregisterConsumerRequest,
    UnregisterConsumerResponse,
)
from hanet.store import PutResult, PutStatus, StoreError

from ._consumers import ConsumerRegistry, ConsumerRegistryFull
from ._offsets import ConsumerOffsetsFull

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "LOCALHOST",
    "RequestHandler",
    "RequestService",
    "not_supported",
    "packed_host",
    "replies",
    "serve_commit",
    "serve_membership",
]

log = logging.getLogger("hanet.broker")

DEFAULT_MAX_IN_FLIGHT = 1024
"""Puts of one connection waiting for their answer before the broker stops reading it."""

LOCALHOST = (b"\x7f\x00\x00\x01", 0)


def packed_host(address: object) -> tuple[bytes, int]:
    """A peer address as the store's born host (packed IPv4/IPv6 address, port)."""
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = address[0], address[1]
        for family in (socket.AF_INET, socket.AF_INET6):
            try:
                return socket.inet_pton(family, str(host)), int(port)
            except OSError:
                continue
    return LOCALHOST


def replies(
    results: Sequence[PutResult],
    queue_ids: Sequence[int],
    status: PutStatus = PutStatus.PUT_OK,
) -> tuple[PutReply, ...]:
    """The PUT answer: each stored message gets ``status``, a refused one its own."""
    out = []
    for result, queue_id in zip(results, queue_ids, strict=True):
        if result.status is PutStatus.PUT_OK:
            out.append(
                PutReply(
                    status,
                    queue_id,
                    result.queue_offset,
                    result.wrote_offset,
                    result.wrote_size,
                    result.store_timestamp,
                    result.msg_id,
                    "",
                )
            )
        else:
            out.append(PutReply(result.status, detail=result.detail))
    return tuple(out)


def not_supported(request: Request, port: str = "a broker port") -> ErrorResponse:
    """The ERROR NOT_SUPPORTED answer to a request this port does not serve (a name server's
    request sent to a broker, say)."""
    name = type(request).__name__.removesuffix("Request")
    return ErrorResponse(
        request.request_id, ErrorCode.NOT_SUPPORTED, f"{name} is not served by {port}"
    )


@attrs.define
class _Waiting:
    """A put stored and waiting for its answer (SYNC_FLUSH / SYNC_MASTER)."""

    request_id: int
    results: list[PutResult]
    queue_ids: list[int]
    end_offset: int
    stored_at: float


MEMBERSHIP_REQUESTS = (ConsumerHeartbeatRequest, UnregisterConsumerRequest, ConsumerListRequest)
"""The consumer group requests :func:`serve_membership` answers."""


def serve_commit(
    commit: Callable[[str, str, int, int], None], request: CommitOffsetRequest, peer: str = ""
) -> CommitOffsetResponse | ErrorResponse:
    """Answer a COMMIT_OFFSET with ``commit(group, topic, queue_id, offset)`` (a commit past
    the offsets' bounds is answered SYSTEM_ERROR with the reason)."""
    try:
        commit(request.group, request.topic, request.queue_id, request.offset)
    except ConsumerOffsetsFull as exc:
        log.warning("offset commit of group %s refused (%s): %s", request.group, peer, exc)
        return ErrorResponse(request.request_id, ErrorCode.SYSTEM_ERROR, str(exc))
    return CommitOffsetResponse(request.request_id)


def serve_membership(
    consumers: ConsumerRegistry,
    request: ConsumerHeartbeatRequest | UnregisterConsumerRequest | ConsumerListRequest,
    peer: str = "",
) -> ConsumerHeartbeatResponse | UnregisterConsumerResponse | ConsumerListResponse | ErrorResponse:
    """Answer a consumer group request from ``consumers`` (joins and leaves are logged; a
    heartbeat past the registry's bounds is answered SYSTEM_ERROR with the reason)."""
    if isinstance(request, ConsumerHeartbeatRequest):
        try:
            joined = consumers.heartbeat(request.group, request.client_id)
        except ConsumerRegistryFull as exc:
            log.warning("consumer %s refused (%s): %s", request.client_id, peer, exc)
            return ErrorResponse(request.request_id, ErrorCode.SYSTEM_ERROR, str(exc))
        if joined:
            log.info("consumer %s joined group %s (%s)", request.client_id, request.group, peer)
        return ConsumerHeartbeatResponse(request.request_id)
    if isinstance(request, UnregisterConsumerRequest):
        if consumers.unregister(request.group, request.client_id):
            log.info("consumer %s left group %s (%s)", request.client_id, request.group, peer)
        return UnregisterConsumerResponse(request.request_id)
    return ConsumerListResponse(request.request_id, consumers.members(request.group))


class RequestService(Protocol):
    """What a connection's handler needs of the broker (:class:`~hanet.broker.Broker`)."""

    @property
    def answers_at_once(self) -> bool:
        """True when a put's answer needs no wait (ASYNC_MASTER with ASYNC_FLUSH)."""
        ...

    @property
    def max_in_flight(self) -> int:
        """Puts waiting for answers before the connection stops being read."""
        ...

    def store_messages(
        self, messages: Sequence[PutMessage], born: tuple[bytes, int]
    ) -> tuple[list[PutResult], list[int]]:
        """Validate and append a PUT's messages; results and the queue ids used."""
        ...

    async def settle(self, end_offset: int, stored_at: float | None = None) -> PutStatus:
        """Wait until data up to ``end_offset`` is durable/replicated as the role requires."""
        ...

    def settled_offset(self) -> int:
        """The offset up to which waiting puts can be answered without waiting."""
        ...

    def pull(self, request: PullRequest) -> PullResponse:
        """Serve a PULL from the store (StoreError when a record is corrupt)."""
        ...

    def status(self) -> BrokerStatus:
        """The STATUS document."""
        ...

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record a consumer group's offset of a queue."""
        ...

    @property
    def consumers(self) -> ConsumerRegistry:
        """The live members of each consumer group."""
        ...

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """A consumer group's committed offset of a queue (-1: none)."""
        ...

    def metadata(self) -> BrokerMetadata:
        """The topic config and consumer offsets a slave copies."""
        ...

    def observe_put(self, statuses: Sequence[PutStatus], seconds: float) -> None:
        """A PUT request was answered with these statuses after ``seconds``."""
        ...

    def connection_event(self, event: str) -> None:
        """A connection opened or closed (metrics)."""
        ...


class RequestHandler(ChannelInboundHandler):
    """Serves one broker port connection; answers by request id.

    Puts that must wait (SYNC_FLUSH, SYNC_MASTER) queue in arrival order, which is also their
    order in the commit log; one task per connection settles them: it waits for the oldest,
    then answers every later one already covered by the flushed / replicated offset without
    waiting again, so an ack that covers many puts answers them in one pass and one send.
    """

    def __init__(self, broker: RequestService, channel: StreamChannel) -> None:
        self.broker = broker
        self.channel = channel
        peer = channel.remote_address
        self.peer = format_address(peer) if peer else str(channel)
        self.born = packed_host(peer)
        self.waiting: deque[_Waiting] = deque()
        self._settling = False
        self._paused = False
        self._requests = 0

    def channel_active(self, ctx: HandlerContext) -> None:
        log.info("client %s connected", self.peer)
        self.broker.connection_event("opened")
        ctx.fire_channel_active()

    def channel_inactive(self, ctx: HandlerContext) -> None:
        reason = self.channel.close_reason or "closed"
        log.info("client %s closed (%s)", self.peer, reason)
        self.broker.connection_event(_event_of(reason))
        ctx.fire_channel_inactive()

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        broker = self.broker
        self._requests += 1
        try:
            if isinstance(msg, PutRequest):
                self._put(ctx, msg)
            elif isinstance(msg, PullRequest):
                ctx.write(broker.pull(msg))
            elif isinstance(msg, StatusRequest):
                ctx.write(StatusResponse(msg.request_id, broker.status()))
            elif isinstance(msg, CommitOffsetRequest):
                ctx.write(serve_commit(broker.commit_offset, msg, self.peer))
            elif isinstance(msg, QueryOffsetRequest):
                offset = broker.query_offset(msg.group, msg.topic, msg.queue_id)
                ctx.write(QueryOffsetResponse(msg.request_id, offset))
            elif isinstance(msg, MetadataRequest):
                ctx.write(MetadataResponse(msg.request_id, broker.metadata()))
            elif isinstance(msg, MEMBERSHIP_REQUESTS):
                ctx.write(serve_membership(broker.consumers, msg, self.peer))
            elif isinstance(msg, Request):
                answer = not_supported(msg)
                log.info("client %s: %s", self.peer, answer.message)
                ctx.write(answer)
            else:
                ctx.fire_channel_read(msg)
        except StoreError as exc:
            # A well-formed request the store could not serve: answer it, keep the connection.
            log.warning("client %s: request failed: %s", self.peer, exc)
            ctx.write(ErrorResponse(msg.request_id, ErrorCode.SYSTEM_ERROR, str(exc)))

    def _put(self, ctx: HandlerContext, request: PutRequest) -> None:
        broker = self.broker
        started = time.perf_counter()
        results, queue_ids = broker.store_messages(request.messages, self.born)
        if broker.answers_at_once:
            self._answer(ctx, request.request_id, replies(results, queue_ids), _since(started))
            return
        ends = [r.end_offset for r in results if r.status is PutStatus.PUT_OK]
        if not ends:  # refused: nothing to wait for
            self._answer(ctx, request.request_id, replies(results, queue_ids), _since(started))
            return
        self.waiting.append(
            _Waiting(request.request_id, results, queue_ids, max(ends), trio.current_time())
        )
        self._update_reading()
        if not self._settling:
            self._settling = True
            ctx.spawn(self._settle_all, ctx)

    async def _settle_all(self, ctx: HandlerContext) -> None:
        broker = self.broker
        waiting = self.waiting
        try:
            while waiting:
                head = waiting[0]
                status = await broker.settle(head.end_offset, head.stored_at)
                waiting.popleft()
                answer = replies(head.results, head.queue_ids, status)
                self._answer(ctx, head.request_id, answer, trio.current_time() - head.stored_at)
                settled = broker.settled_offset()
                while waiting and waiting[0].end_offset <= settled:
                    done = waiting.popleft()
                    answer = replies(done.results, done.queue_ids)
                    self._answer(ctx, done.request_id, answer, trio.current_time() - done.stored_at)
                ctx.flush()
                self._update_reading()
        finally:
            self._settling = False

    def _answer(
        self, ctx: HandlerContext, request_id: int, answer: Sequence[PutReply], seconds: float
    ) -> None:
        """Write a PUT answer and count it (``seconds``: from the request to its answer)."""
        ctx.write(PutResponse(request_id, tuple(answer)))
        self.broker.observe_put([r.status for r in answer], seconds)

    def channel_read_complete(self, ctx: HandlerContext) -> None:
        ctx.flush()  # answers given while reading leave together
        ctx.fire_channel_read_complete()

    def channel_writability_changed(self, ctx: HandlerContext) -> None:
        self._update_reading()
        ctx.fire_channel_writability_changed()

    def _update_reading(self) -> None:
        """Pause reading while too many puts wait or the client does not read its answers."""
        channel = self.channel
        if not channel.is_open:
            return
        pause = len(self.waiting) >= self.broker.max_in_flight or not channel.is_writable
        if pause != self._paused:
            self._paused = pause
            channel.auto_read = not pause

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        if isinstance(exc, DecoderError):
            hint = ""
            if self._requests == 0:
                hint = " (not a broker request: an HA slave pointed at the broker port?)"
            log.warning("client %s: closing: %s%s", self.peer, exc, hint)
        else:
            log.error(
                "client %s: closing after an internal error: %r", self.peer, exc, exc_info=exc
            )
        ctx.close(f"{type(exc).__name__}: {exc}")


def _since(started: float) -> float:
    return time.perf_counter() - started


def _event_of(reason: str) -> str:
    """A short, bounded label for why a connection closed (metrics)."""
    lowered = reason.lower()
    for word in ("peer closed", "decoder", "corrupt", "too long", "timeout", "lost", "internal"):
        if word in lowered:
            return "closed: " + word
    return "closed: other"
