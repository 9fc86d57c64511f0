"""A connection to a broker's port (or a name server's): requests pipelined by id."""

from __future__ import annotations

import itertools
import logging
import math
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Self

import attrs
import trio

from handlers import DecoderError, EncoderError
from hanet.boot import run_channel, tcp_connector
from hanet.channel import ChannelInboundHandler, HandlerContext, StreamChannel
from hanet.errors import HanetError
from hanet.protocol import (
    AUTO_QUEUE,
    DEFAULT_MAX_FRAME_LENGTH,
    BrokerClientCodec,
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
    PullStatus,
    PutMessage,
    PutReply,
    PutRequest,
    PutResponse,
    QueryOffsetRequest,
    QueryOffsetResponse,
    Request,
    Response,
    StatusRequest,
    StatusResponse,
    UnregisterConsumerRequest,
    UnregisterConsumerResponse,
    broker_frame_codec,
    message_problem,
)
from hanet.store import CorruptRecordError, MessageRecord, decode_record

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "BrokerClient",
    "BrokerConnectionError",
    "BrokerError",
    "BrokerProtocolError",
    "BrokerRequestError",
    "BrokerTimeoutError",
    "InvalidMessageError",
    "PullResult",
    "RequestConnection",
]

log = logging.getLogger("hanet.client")

DEFAULT_MAX_IN_FLIGHT = 4096


class BrokerError(HanetError):
    """Base of the errors :class:`BrokerClient` raises."""


class BrokerConnectionError(BrokerError, ConnectionError):
    """Could not connect, or the connection closed before the answer came."""


class BrokerTimeoutError(BrokerError, TimeoutError):
    """No answer within the request timeout (the request may still take effect)."""


class BrokerProtocolError(BrokerError):
    """The broker sent something that is not a valid answer; the connection is closed."""


class InvalidMessageError(BrokerError, ValueError):
    """A message that no broker accepts (bad topic, queue id, tags, keys or properties);
    raised before anything is sent."""


class BrokerRequestError(BrokerError):
    """The broker answered ERROR: it could not serve this request.

    Attributes:
        code: why (NOT_LEADER: a DLedger follower; ``leader_address`` names the leader's broker
            port when it knows it).
        leader_address: with NOT_LEADER, the leader's ``host:port``, or None.
    """

    def __init__(self, code: ErrorCode, message: str, leader_address: str | None = None) -> None:
        text = f"{code.name}: {message}"
        if leader_address:
            text += f" (leader {leader_address})"
        super().__init__(text)
        self.code = code
        self.message = message
        self.leader_address = leader_address


@attrs.frozen
class PullResult:
    """The answer to a pull.

    Attributes:
        status: FOUND, or why nothing was found (see :class:`PullStatus`).
        next_offset: the queue offset to pull from next.
        min_offset, max_offset: the queue's bounds (``max_offset``: the next message's offset).
        messages: the messages found, decoded (their body CRC checked).
        suggested_broker_id: the member of the broker name to pull from next (0: the master,
            1 and up: a slave), as the broker suggests (RocketMQ's ``suggestWhichBrokerId``).
    """

    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    messages: tuple[MessageRecord, ...] = ()
    suggested_broker_id: int = 0


class _Pending:
    __slots__ = ("error", "event", "response")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.response: Response | None = None
        self.error: BrokerError | None = None


class _ResponseRouter(ChannelInboundHandler):
    """Hands each answer to the request waiting for its id; fails them all on close."""

    def __init__(self, tls: bool = False) -> None:
        self.pending: dict[int, _Pending] = {}
        self.closed_error: BrokerError | None = None
        self.answers = 0
        self.tls = tls

    def explain(self, reason: str, *, waiting: bool) -> str:
        """``reason`` with a hint when the connection closed before its first answer while a
        request was ``waiting`` for it."""
        if self.answers or not waiting:
            return reason
        if self.tls:
            # TLS 1.3: a broker that refuses our certificate (or the lack of one) does so
            # after our side of the handshake completed; we learn it here.
            return reason + (
                " before any answer (did the broker refuse our certificate? a broker with "
                "mutual TLS needs --tls-cert and --tls-key signed by its CA)"
            )
        # Closed at the first request without a word: what an HA port does with a broker
        # request (it reads it as an offset report out of range).
        return reason + " before any answer (is this the broker port, not an HA port?)"

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        self.answers += 1
        pending = self.pending.pop(msg.request_id, None)
        if pending is None:
            log.debug("answer to request %d that no one waits for (timed out)", msg.request_id)
            return
        pending.response = msg
        pending.event.set()

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        if isinstance(exc, DecoderError):
            self.closed_error = BrokerProtocolError(f"malformed answer from the broker: {exc}")
        ctx.close(f"{type(exc).__name__}: {exc}")

    def channel_inactive(self, ctx: HandlerContext) -> None:
        error = self.closed_error
        if error is None:
            # A TLS connection closed before its first request left counts as waiting too: a
            # broker that refuses our certificate may close it that early (TLS 1.3).
            waiting = bool(self.pending) or (self.tls and not self.answers)
            reason = self.explain(ctx.channel.close_reason or "closed", waiting=waiting)
            error = self.closed_error = BrokerConnectionError(f"connection closed: {reason}")
        for pending in self.pending.values():
            pending.error = error
            pending.event.set()
        self.pending.clear()
        ctx.fire_channel_inactive()


class RequestConnection:
    """A connection speaking the broker port protocol (:mod:`hanet.protocol`): requests
    pipelined by id, answers matched to them. Open one with :meth:`connect`.

    :class:`BrokerClient` (a broker port) and
    :class:`~hanet.client.NameServerConnection` (a name server) add their requests.
    Safe to share between tasks of one trio run.
    """

    def __init__(
        self,
        channel: StreamChannel,
        router: _ResponseRouter,
        address: tuple[str, int],
        *,
        request_timeout: float | None,
        max_in_flight: int,
    ) -> None:
        self._channel = channel
        self._router = router
        self.address = address
        self.request_timeout = request_timeout
        self._slots = trio.Semaphore(max_in_flight)
        self._ids = itertools.count(1)

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        connect_timeout: float = 10.0,
        request_timeout: float | None = 30.0,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> AsyncIterator[Self]:
        """Connect to ``host:port``; the connection closes when the block exits.

        An exception raised in the block propagates as it is (not in an exception group).

        Args:
            connect_timeout: seconds to connect before :class:`BrokerConnectionError`.
            request_timeout: seconds each request may wait for its answer (None: forever).
            max_in_flight: requests awaiting an answer at once (more callers wait).
            max_frame_length: largest answer frame accepted.
            tls: talk TLS (see :meth:`hanet.boot.TlsConfig.client_context`): the broker's
                certificate is checked, and this side's presented when the context has one.
            server_hostname: the name to check in the broker's certificate (default ``host``).

        Raises:
            BrokerConnectionError: the connection could not be made (a refused TLS handshake
                included, with its reason).
        """
        try:
            with trio.fail_after(connect_timeout):
                connector = tcp_connector(host, port, tls=tls, server_hostname=server_hostname)
                stream = await connector()
        except (OSError, trio.TooSlowError) as exc:
            detail = "timed out" if isinstance(exc, trio.TooSlowError) else str(exc)
            raise BrokerConnectionError(f"cannot connect to {host}:{port}: {detail}") from exc
        router = _ResponseRouter(tls=tls is not None)

        def initialize(channel: StreamChannel) -> None:
            pipeline = channel.pipeline
            for name, handler in broker_frame_codec(max_frame_length, BrokerClientCodec()):
                pipeline.add_last(handler, name)
            pipeline.add_last(router)

        error: BaseException | None = None
        async with trio.open_nursery() as nursery:
            channel: StreamChannel = await nursery.start(partial(run_channel, stream, initialize))
            client = cls(
                channel,
                router,
                (host, port),
                request_timeout=request_timeout,
                max_in_flight=max_in_flight,
            )
            try:
                yield client
            except BaseException as exc:
                # Raised by the caller's block: re-raised as it is once the connection is
                # closed, not wrapped in the nursery's exception group.
                error = exc
            finally:
                channel.close_nowait("client closed")
        if error is not None:
            raise error

    @property
    def is_connected(self) -> bool:
        """False once the connection closed."""
        return self._channel.is_open

    async def aclose(self) -> None:
        """Close the connection (requests in flight fail with BrokerConnectionError)."""
        await self._channel.close("client closed")

    async def _call(self, make: Any) -> Response:
        # The wait for the answer is this call's checkpoint: a free slot and a writable
        # channel are taken without another trip through the scheduler.
        try:
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            await self._slots.acquire()
        try:
            return await self._request(make)
        finally:
            self._slots.release()

    async def _request(self, make: Any) -> Response:
        router = self._router
        if router.closed_error is not None:
            await trio.lowlevel.checkpoint()
            raise router.closed_error
        request_id = next(self._ids) & 0xFFFFFFFF
        request: Request = make(request_id)
        pending = _Pending()
        router.pending[request_id] = pending
        if not self._channel.is_writable:
            try:
                await self._channel.wait_writable()
            except HanetError:
                router.pending.pop(request_id, None)
                error = router.closed_error or BrokerConnectionError("connection closed")
                raise error from None
        future = self._channel.write_and_flush_nowait(request)
        if future.done() and future.exception() is not None:
            router.pending.pop(request_id, None)
            await trio.lowlevel.checkpoint()
            failure = future.exception()
            if isinstance(failure, EncoderError):
                raise ValueError(f"cannot encode the request: {failure}")
            # Closed and not yet torn down: the channel's close reason says why (a TLS alert,
            # the peer closing), the write's failure only that it is closed.
            reason = router.explain(self._channel.close_reason or str(failure), waiting=True)
            error = router.closed_error or BrokerConnectionError(f"connection closed: {reason}")
            raise error from failure
        timeout = math.inf if self.request_timeout is None else self.request_timeout
        with trio.move_on_after(timeout):
            await pending.event.wait()
        if not pending.event.is_set():
            router.pending.pop(request_id, None)
            raise BrokerTimeoutError(f"no answer within {self.request_timeout:g} s")
        if pending.error is not None:
            raise pending.error
        response = pending.response
        assert response is not None
        if isinstance(response, ErrorResponse):
            raise BrokerRequestError(response.code, response.message, response.leader_address)
        return response

    def _expect(self, response: Response, kind: type[Any]) -> Any:
        if not isinstance(response, kind):
            raise BrokerProtocolError(
                f"expected {kind.__name__}, got {type(response).__name__} for the same request id"
            )
        return response


class BrokerClient(RequestConnection):
    """A connection to a broker's port. Open it with :meth:`connect`.

    Safe to share between tasks of one trio run; requests are pipelined.
    """

    async def put(
        self,
        topic: str,
        body: bytes,
        *,
        queue_id: int | None = None,
        tags: str = "",
        keys: str = "",
        properties: Mapping[str, str] | None = None,
        flag: int = 0,
    ) -> PutReply:
        """Put one message; ``queue_id`` None lets the broker pick one (round robin).

        Returns RocketMQ's status with offsets and message id; a non-PUT_OK status is an
        answer, not an exception.

        Raises:
            InvalidMessageError: (a ValueError) no broker accepts this message: an empty
                topic or one over :data:`~hanet.store.MAX_TOPIC_LENGTH` characters, a queue
                id below -1, ``\\x01`` / ``\\x02`` in tags, keys or properties, an
                empty property name. Nothing is sent. (A topic with characters outside
                ``[%|a-zA-Z0-9_-]`` is sent: the broker answers MESSAGE_ILLEGAL.)
            BrokerConnectionError, BrokerTimeoutError, BrokerRequestError.
        """
        message = PutMessage(
            topic,
            body,
            AUTO_QUEUE if queue_id is None else queue_id,
            tags,
            keys,
            tuple((properties or {}).items()),
            flag,
        )
        (reply,) = await self.put_batch([message])
        return reply

    async def put_batch(self, messages: Sequence[PutMessage]) -> list[PutReply]:
        """Put up to 1024 messages in one request (one store batch); one reply each.

        Raises:
            InvalidMessageError: a message no broker accepts (see :meth:`put`); nothing of
                the batch is sent.
        """
        batch = tuple(messages)
        for index, message in enumerate(batch):
            problem = message_problem(message, topic_characters=False)
            if problem is not None:
                await trio.lowlevel.checkpoint()
                raise InvalidMessageError(f"cannot encode message {index} of the batch: {problem}")
        response = await self._call(lambda rid: PutRequest(rid, batch))
        put: PutResponse = self._expect(response, PutResponse)
        if len(put.replies) != len(batch):
            raise BrokerProtocolError(
                f"{len(put.replies)} replies for a batch of {len(batch)} messages"
            )
        return list(put.replies)

    async def pull(
        self, topic: str, queue_id: int, offset: int = 0, max_messages: int = 32
    ) -> PullResult:
        """Up to ``max_messages`` messages of a queue from ``offset`` on, and the next offset.

        Raises:
            BrokerProtocolError: a record in the answer does not decode (or fails its CRC).
        """
        response = await self._call(
            lambda rid: PullRequest(rid, topic, queue_id, offset, max_messages)
        )
        pull: PullResponse = self._expect(response, PullResponse)
        try:
            messages = tuple(decode_record(raw) for raw in pull.records)
        except CorruptRecordError as exc:
            raise BrokerProtocolError(f"a pulled record is corrupt: {exc}") from exc
        return PullResult(
            pull.status,
            pull.next_offset,
            pull.min_offset,
            pull.max_offset,
            messages,
            pull.suggested_broker_id,
        )

    async def status(self) -> BrokerStatus:
        """The broker's role, offsets and (masters) its slaves or (slaves) its master link."""
        response = await self._call(StatusRequest)
        answer: StatusResponse = self._expect(response, StatusResponse)
        return answer.status

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record that ``group`` consumed ``topic``'s queue up to ``offset`` (the next offset
        to read). The broker persists it within its flush interval (5 s) and at shutdown."""
        response = await self._call(
            lambda rid: CommitOffsetRequest(rid, group, topic, queue_id, offset)
        )
        self._expect(response, CommitOffsetResponse)

    async def query_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The offset ``group`` committed for the queue, or None when it never committed."""
        response = await self._call(lambda rid: QueryOffsetRequest(rid, group, topic, queue_id))
        answer: QueryOffsetResponse = self._expect(response, QueryOffsetResponse)
        return None if answer.offset < 0 else answer.offset

    async def consumer_heartbeat(self, group: str, client_id: str) -> None:
        """Say that consumer ``client_id`` of ``group`` is alive (RocketMQ's ``HEART_BEAT``):
        the broker counts it a member for 120 s."""
        response = await self._call(lambda rid: ConsumerHeartbeatRequest(rid, group, client_id))
        self._expect(response, ConsumerHeartbeatResponse)

    async def unregister_consumer(self, group: str, client_id: str) -> None:
        """Take consumer ``client_id`` out of ``group`` at once (a clean shutdown)."""
        response = await self._call(lambda rid: UnregisterConsumerRequest(rid, group, client_id))
        self._expect(response, UnregisterConsumerResponse)

    async def consumer_list(self, group: str) -> tuple[str, ...]:
        """The client ids of ``group``'s live members, sorted (RocketMQ's
        ``GET_CONSUMER_LIST_BY_GROUP``)."""
        response = await self._call(lambda rid: ConsumerListRequest(rid, group))
        answer: ConsumerListResponse = self._expect(response, ConsumerListResponse)
        return answer.client_ids

    async def metadata(self) -> BrokerMetadata:
        """The broker's topic config and consumer offsets (what a slave copies)."""
        response = await self._call(MetadataRequest)
        answer: MetadataResponse = self._expect(response, MetadataResponse)
        return answer.metadata
