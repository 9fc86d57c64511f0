"""A Python client of the broker port: put, pull and status, pipelined over one connection.

Usage::

    from hanet.client import BrokerClient

    async with BrokerClient.connect("127.0.0.1", 10911) as client:
        reply = await client.put("TopicTest", b"hello", tags="TagA")
        print(reply.status, reply.msg_id)
        batch = await client.put_batch([PutMessage("TopicTest", b"x%d" % i) for i in range(100)])
        pulled = await client.pull("TopicTest", queue_id=reply.queue_id, offset=0)
        status = await client.status()

Any number of tasks may call the same client at once: each request gets an id and its own
answer, and requests written together leave in one send (the channel coalesces them). At most
``max_in_flight`` requests wait for answers; more callers wait for a slot (back-pressure).

:class:`FailoverClient` takes several broker addresses (a DLedger group): it connects to the
first that answers, follows NOT_LEADER answers to the leader, and tries the next address when
one is down.

A put is answered with RocketMQ's status; a status other than PUT_OK is not an exception
(FLUSH_SLAVE_TIMEOUT, for one, means stored on the master but not yet on a slave). Errors are
typed: :class:`BrokerConnectionError` (cannot connect, or the connection was lost: every
request in flight fails with it), :class:`BrokerTimeoutError`, :class:`BrokerRequestError` (the
broker answered ERROR), :class:`BrokerProtocolError` (the broker sent something malformed; the
connection is closed).

The wire format is described in :mod:`hanet.protocol`.
"""

from __future__ import annotations

import itertools
import logging
import math
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import trio

from handlers import DecoderError, EncoderError
from hanet.boot import open_tls_stream, run_channel
from hanet.channel import ChannelInboundHandler, HandlerContext, StreamChannel
from hanet.errors import HanetError
from hanet.protocol import (
    AUTO_QUEUE,
    DEFAULT_MAX_FRAME_LENGTH,
    BrokerClientCodec,
    BrokerStatus,
    ErrorCode,
    ErrorResponse,
    MasterLink,
    PullRequest,
    PullResponse,
    PullStatus,
    PutMessage,
    PutReply,
    PutRequest,
    PutResponse,
    Request,
    Response,
    SlaveInfo,
    StatusRequest,
    StatusResponse,
    broker_frame_codec,
    message_problem,
)
from hanet.store import CorruptRecordError, MessageRecord, PutStatus, decode_record

__all__ = [
    "AUTO_QUEUE",
    "BrokerClient",
    "BrokerConnectionError",
    "BrokerError",
    "BrokerProtocolError",
    "BrokerRequestError",
    "BrokerStatus",
    "BrokerTimeoutError",
    "ErrorCode",
    "FailoverClient",
    "InvalidMessageError",
    "MasterLink",
    "MessageRecord",
    "PullResult",
    "PullStatus",
    "PutMessage",
    "PutReply",
    "PutStatus",
    "SlaveInfo",
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
    """

    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    messages: tuple[MessageRecord, ...] = ()


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
            reason = self.explain(ctx.channel.close_reason or "closed", waiting=bool(self.pending))
            error = self.closed_error = BrokerConnectionError(f"connection closed: {reason}")
        for pending in self.pending.values():
            pending.error = error
            pending.event.set()
        self.pending.clear()
        ctx.fire_channel_inactive()


class BrokerClient:
    """A connection to a broker's port. Open it with :meth:`connect`.

    Safe to share between tasks of one trio run; requests are pipelined.
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

    @staticmethod
    @asynccontextmanager
    async def connect(
        host: str,
        port: int,
        *,
        connect_timeout: float = 10.0,
        request_timeout: float | None = 30.0,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> AsyncIterator[BrokerClient]:
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
                if tls is not None:
                    stream: trio.abc.Stream = await open_tls_stream(
                        host, port, tls, server_hostname
                    )
                else:
                    stream = await trio.open_tcp_stream(host, port)
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
            client = BrokerClient(
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
        return PullResult(pull.status, pull.next_offset, pull.min_offset, pull.max_offset, messages)

    async def status(self) -> BrokerStatus:
        """The broker's role, offsets and (masters) its slaves or (slaves) its master link."""
        response = await self._call(StatusRequest)
        answer: StatusResponse = self._expect(response, StatusResponse)
        return answer.status


class FailoverClient:
    """A client of several broker ports (a DLedger group, or one broker): open it with
    :meth:`connect`; it has :class:`BrokerClient`'s ``put``, ``put_batch``, ``pull`` and
    ``status``.

    - It connects to the first address that accepts, in the order given.
    - A put answered NOT_LEADER is sent again to the leader the answer names (nothing was
      appended), or, while no leader is known (an election), to the next address after a short
      pause, until ``retry_for`` seconds have passed. LEADER_PENDING_FULL is retried the same
      way.
    - With more than one address, a lost or refused connection moves on to the next address and
      the request is sent again: a put whose connection was lost may then be stored twice (at
      least once), never silently lost. WAIT_QUORUM_ACK_TIMEOUT is raised as it is
      (:class:`BrokerRequestError`): the outcome is unknown.

    Safe to share between tasks of one trio run.
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        addresses: Sequence[tuple[str, int]],
        options: dict[str, Any],
        retry_for: float,
    ) -> None:
        if not addresses:
            raise ValueError("no broker address")
        self._nursery = nursery
        self.addresses = list(addresses)
        self._options = options
        self.retry_for = retry_for
        self._next = 0
        self._current: BrokerClient | None = None
        self._stops: dict[int, trio.Event] = {}
        self._lock = trio.Lock()
        self.redirects = 0
        """NOT_LEADER answers followed (for tests and tools)."""

    @staticmethod
    @asynccontextmanager
    async def connect(
        addresses: Sequence[tuple[str, int]],
        *,
        retry_for: float = 30.0,
        **options: Any,
    ) -> AsyncIterator[FailoverClient]:
        """Connect to the first of ``addresses`` that accepts (``options``: those of
        :meth:`BrokerClient.connect`); everything closes when the block exits.

        Raises:
            BrokerConnectionError: no address accepts (the last failure's message).
        """
        error: BaseException | None = None
        async with trio.open_nursery() as nursery:
            client = FailoverClient(nursery, addresses, dict(options), retry_for)
            try:
                await client._client()
                yield client
            except BaseException as exc:
                error = exc
            finally:
                nursery.cancel_scope.cancel()
        if error is not None:
            raise error

    @property
    def address(self) -> tuple[str, int] | None:
        """The address connected to now, if any."""
        return self._current.address if self._current is not None else None

    async def _hold(
        self, address: tuple[str, int], task_status: trio.TaskStatus[BrokerClient]
    ) -> None:
        stop = trio.Event()
        async with BrokerClient.connect(address[0], address[1], **self._options) as client:
            self._stops[id(client)] = stop
            task_status.started(client)
            try:
                await stop.wait()
            finally:
                self._stops.pop(id(client), None)

    def _drop(self, client: BrokerClient) -> None:
        if self._current is client:
            self._current = None
        stop = self._stops.get(id(client))
        if stop is not None:
            stop.set()

    async def _client(self, prefer: tuple[str, int] | None = None) -> BrokerClient:
        """The current connection, or a new one (to ``prefer`` first, then in order)."""
        current = self._current
        if current is not None and current.is_connected and prefer in (None, current.address):
            return current  # no checkpoint: the request leaves as BrokerClient's would
        async with self._lock:
            current = self._current
            if current is not None and current.is_connected and prefer in (None, current.address):
                return current
            if current is not None:
                self._drop(current)
            order = [
                self.addresses[(self._next + i) % len(self.addresses)]
                for i in range(len(self.addresses))
            ]
            if prefer is not None:
                order = [prefer, *(a for a in order if a != prefer)]
            last: BrokerError | None = None
            for address in order:
                try:
                    client: BrokerClient = await self._nursery.start(self._hold, address)
                except BrokerError as exc:
                    last = exc
                    continue
                self._current = client
                if address in self.addresses:
                    self._next = self.addresses.index(address)
                return client
            assert last is not None
            raise last

    def _advance(self, client: BrokerClient) -> None:
        self._drop(client)
        if client.address in self.addresses:
            self._next = (self.addresses.index(client.address) + 1) % len(self.addresses)

    async def _retrying(self, call: Any) -> Any:
        deadline = trio.current_time() + self.retry_for
        prefer: tuple[str, int] | None = None
        while True:
            try:
                client = await self._client(prefer)
            except BrokerConnectionError:
                if len(self.addresses) == 1 or trio.current_time() >= deadline:
                    raise
                await trio.sleep(0.1)
                continue
            prefer = None
            try:
                return await call(client)
            except BrokerRequestError as exc:
                if trio.current_time() >= deadline:
                    raise
                if exc.code is ErrorCode.NOT_LEADER:
                    self.redirects += 1
                    target = _parse(exc.leader_address) if exc.leader_address else None
                    if target is not None and target != client.address:
                        prefer = target
                        continue
                    self._advance(client)
                    await trio.sleep(0.1)
                    continue
                if exc.code is ErrorCode.LEADER_PENDING_FULL:
                    await trio.sleep(0.05)
                    continue
                raise
            except BrokerConnectionError:
                if len(self.addresses) == 1 or trio.current_time() >= deadline:
                    raise
                self._advance(client)
                await trio.sleep(0.05)

    async def put(self, topic: str, body: bytes, **kwargs: Any) -> PutReply:
        """:meth:`BrokerClient.put` on the leader (see the class docstring)."""
        reply: PutReply = await self._retrying(lambda c: c.put(topic, body, **kwargs))
        return reply

    async def put_batch(self, messages: Sequence[PutMessage]) -> list[PutReply]:
        """:meth:`BrokerClient.put_batch` on the leader (see the class docstring)."""
        replies: list[PutReply] = await self._retrying(lambda c: c.put_batch(messages))
        return replies

    async def pull(
        self, topic: str, queue_id: int, offset: int = 0, max_messages: int = 32
    ) -> PullResult:
        """:meth:`BrokerClient.pull` on the current broker."""
        result: PullResult = await self._retrying(
            lambda c: c.pull(topic, queue_id, offset, max_messages)
        )
        return result

    async def status(self) -> BrokerStatus:
        """:meth:`BrokerClient.status` of the current broker."""
        status: BrokerStatus = await self._retrying(lambda c: c.status())
        return status


def _parse(address: str) -> tuple[str, int] | None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)
