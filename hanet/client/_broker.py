"""A client of a broker's port over RocketMQ's remoting protocol.

:class:`RequestConnection` is a thin layer over :class:`~hanet.client.RemotingConnection`
that turns its errors into the broker client's (:class:`BrokerConnectionError`, ...);
:class:`BrokerClient` adds the requests a producer and a consumer send, built as RocketMQ
4.9.8's ``MQClientAPIImpl`` builds them, so the same calls work against a RocketMQ broker:

- put: ``SEND_MESSAGE_V2`` (310) with the short header keys and the ``TAGS``, ``KEYS``,
  ``UNIQ_KEY`` and ``WAIT`` properties; a batch of one topic and queue is one
  ``SEND_BATCH_MESSAGE`` (320).
- pull: ``PULL_MESSAGE`` (11) with a ``*`` subscription; the answer's body is the stored
  records, decoded with :func:`hanet.store.decode_record`.
- offsets: ``QUERY_CONSUMER_OFFSET`` (14) / ``UPDATE_CONSUMER_OFFSET`` (15).
- membership: ``HEART_BEAT`` (34, a ``HeartbeatData`` body), ``UNREGISTER_CLIENT`` (35),
  ``GET_CONSUMER_LIST_BY_GROUP`` (38).
- status: hanet's ``HANET_STATUS`` (30001), answered with the :class:`BrokerStatus` JSON.

This module is the IO: the requests are built and their answers read, without IO, in
:mod:`hanet.client._broker_codec`; the errors are :mod:`hanet.client._broker_errors`' (both
re-exported here).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Self

import trio

from hanet.protocol import (
    MAX_FRAME_LENGTH,
    BrokerStatus,
    GetConsumerListByGroupRequestHeader,
    GetMaxOffsetRequestHeader,
    HanetRequestCode,
    QueryConsumerOffsetRequestHeader,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    UniqueIdGenerator,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)

from ._broker_codec import (
    PullResult,
    consumer_list_result,
    heartbeat_body,
    max_offset_result,
    pull_command,
    pull_result,
    put_replies,
    query_offset_result,
    send_command,
    status_result,
)
from ._broker_errors import (
    BrokerConnectionError,
    BrokerError,
    BrokerProtocolError,
    BrokerRequestError,
    BrokerTimeoutError,
    InvalidMessageError,
    broker_error,
)
from ._messages import AUTO_QUEUE, PutMessage, PutReply, message_problem
from ._remoting import (
    DEFAULT_MAX_IN_FLIGHT,
    RemotingConnection,
    RemotingError,
    ServerRequestHandler,
)

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_PRODUCER_GROUP",
    "DEFAULT_PULL_GROUP",
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

DEFAULT_PRODUCER_GROUP = "hanet_producer"
"""The producer group a put names (RocketMQ's brokers only log it)."""

DEFAULT_PULL_GROUP = "hanet_pull"
"""The consumer group a pull names when the caller names none (``hanet pull``)."""

_unique_ids = UniqueIdGenerator()


class RequestConnection:
    """A remoting connection to a broker port (or a name server) raising the broker client's
    errors. Open one with :meth:`connect`.

    :class:`BrokerClient` adds the broker's requests. Safe to share between tasks of one trio
    run: requests are pipelined, each matched to its answer by ``opaque``.
    """

    def __init__(self, remoting: RemotingConnection, *, tls: bool = False) -> None:
        self.remoting = remoting
        """The underlying connection (send any command with its ``invoke``)."""
        self._tls = tls
        self._answered = False

    def _error(self, exc: RemotingError) -> BrokerError:
        """``exc`` as the broker client's error; a connection closed before any answer gets
        a hint at the usual reasons."""
        error = broker_error(exc)
        if isinstance(error, BrokerConnectionError) and not self._answered:
            if self._tls:
                # TLS 1.3: a broker refusing our certificate (or its lack) says so after our
                # side of the handshake completed; we learn it at the first request.
                hint = (
                    "did the broker refuse our certificate? a broker with mutual TLS needs "
                    "--tls-cert and --tls-key signed by its CA"
                )
            else:
                # What an HA port does with a remoting frame: it closes without a word.
                hint = "is this a broker port, not an HA port?"
            error = BrokerConnectionError(f"{error} before any answer ({hint})")
        return error

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
        max_frame_length: int = MAX_FRAME_LENGTH,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        on_request: ServerRequestHandler | None = None,
    ) -> AsyncIterator[Self]:
        """Connect to ``host:port``; the connection closes when the block exits.

        An exception raised in the block propagates as it is (not in an exception group).

        Args:
            connect_timeout: seconds to connect before :class:`BrokerConnectionError`.
            request_timeout: seconds each request may wait for its answer (None: forever).
            max_in_flight: requests awaiting an answer at once (more callers wait).
            max_frame_length: largest answer frame accepted.
            tls: talk TLS (see :meth:`hanet.boot.TlsConfig.client_context`).
            server_hostname: the name to check in the broker's certificate (default ``host``).
            on_request: serves the requests the broker sends on this connection (RocketMQ's
                oneway ``NOTIFY_CONSUMER_IDS_CHANGED``); called in the connection's reader,
                it must not block.

        Raises:
            BrokerConnectionError: the connection could not be made.
        """
        entered = False
        try:
            async with RemotingConnection.connect(
                host,
                port,
                connect_timeout=connect_timeout,
                request_timeout=request_timeout,
                max_in_flight=max_in_flight,
                max_frame_length=max_frame_length,
                tls=tls,
                server_hostname=server_hostname,
                on_request=on_request,
            ) as remoting:
                entered = True
                yield cls(remoting, tls=tls is not None)
        except RemotingError as exc:
            if entered:
                raise  # raised by the caller's block: as it is
            raise broker_error(exc) from exc

    @property
    def address(self) -> tuple[str, int]:
        """The ``(host, port)`` connected to."""
        return self.remoting.address

    @property
    def request_timeout(self) -> float | None:
        """Seconds a request waits for its answer (None: forever)."""
        return self.remoting.request_timeout

    @property
    def is_connected(self) -> bool:
        """False once the connection closed."""
        return self.remoting.is_connected

    async def aclose(self) -> None:
        """Close the connection (requests in flight fail with BrokerConnectionError)."""
        await self.remoting.aclose()

    async def invoke(
        self, request: RemotingCommand, *, within: float | None = None
    ) -> RemotingCommand:
        """Send ``request``; its answer, whatever its code.

        Raises:
            BrokerConnectionError, BrokerTimeoutError, BrokerProtocolError.
            ValueError: the request does not encode (nothing was sent).
        """
        try:
            response = await self.remoting.invoke(request, within=within)
        except RemotingError as exc:
            raise self._error(exc) from exc
        self._answered = True
        return response

    async def invoke_checked(
        self, request: RemotingCommand, *, within: float | None = None, what: str = ""
    ) -> RemotingCommand:
        """:meth:`invoke`, raising :class:`BrokerRequestError` unless the answer is SUCCESS."""
        response = await self.invoke(request, within=within)
        if response.code != ResponseCode.SUCCESS:
            raise BrokerRequestError(response.code, response.remark or "", what=what)
        return response

    async def invoke_oneway(self, request: RemotingCommand) -> None:
        """Send ``request`` oneway (no answer awaited).

        Raises:
            BrokerConnectionError: the connection is closed.
        """
        try:
            await self.remoting.invoke_oneway(request)
        except RemotingError as exc:
            raise broker_error(exc) from exc


class BrokerClient(RequestConnection):
    """A connection to a broker's port (hanet's or RocketMQ's). Open it with :meth:`connect`.

    Safe to share between tasks of one trio run; requests are pipelined.
    """

    producer_group: str = DEFAULT_PRODUCER_GROUP

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
        """Put one message (``SEND_MESSAGE_V2``); ``queue_id`` None lets the broker pick one.

        Returns RocketMQ's status with offsets and message id; a status other than PUT_OK
        is an answer, not an exception (SERVICE_NOT_AVAILABLE: a slave, MESSAGE_ILLEGAL, the
        timeouts after the message was stored).

        Raises:
            InvalidMessageError: (a ValueError) no broker accepts this message: an empty
                topic or one over :data:`~hanet.store.lowlevel.MAX_TOPIC_LENGTH` characters, a queue
                id below -1, ``\\x01`` / ``\\x02`` in tags, keys or properties, an empty
                property name. Nothing is sent.
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
        await self._check([message])
        request = self._send_command([message])
        (reply,) = put_replies(await self.invoke(request), 1)
        return reply

    async def _check(self, messages: Sequence[PutMessage]) -> None:
        for index, message in enumerate(messages):
            problem = message_problem(message, topic_characters=False)
            if problem is not None:
                await trio.lowlevel.checkpoint()
                where = f"message {index} of the batch" if len(messages) > 1 else "the message"
                raise InvalidMessageError(f"cannot encode {where}: {problem}")

    async def put_batch(self, messages: Sequence[PutMessage]) -> list[PutReply]:
        """Put several messages; one reply each, in order.

        The messages of each (topic, queue) go in one ``SEND_BATCH_MESSAGE`` in their order
        (one store batch; one message alone: ``SEND_MESSAGE_V2``); the messages for the
        broker's pick of queue are one batch too, so they land in one queue. Requests for
        different queues leave together (pipelined).

        Raises:
            InvalidMessageError: a message no broker accepts (see :meth:`put`); nothing of
                the batch is sent.
            BrokerRequestError: a request of the batch was refused with an error code (the
                other requests may have been stored).
        """
        batch = list(messages)
        if not batch:
            await trio.lowlevel.checkpoint()
            return []
        await self._check(batch)
        groups: dict[tuple[str, int], list[int]] = {}
        for index, message in enumerate(batch):
            groups.setdefault((message.topic, message.queue_id), []).append(index)
        try:
            requests = [
                (indexes, self._send_command([batch[i] for i in indexes]))
                for indexes in groups.values()
            ]
        except ValueError as exc:
            await trio.lowlevel.checkpoint()
            raise InvalidMessageError(f"cannot encode the batch: {exc}") from exc
        replies: list[PutReply | None] = [None] * len(batch)
        errors: list[BaseException] = []

        async def send(indexes: list[int], request: RemotingCommand) -> None:
            try:
                answer = await self.invoke(request)
                for index, reply in zip(indexes, put_replies(answer, len(indexes)), strict=True):
                    replies[index] = reply
            except BrokerError as exc:
                errors.append(exc)

        if len(requests) == 1:
            await send(*requests[0])
        else:
            async with trio.open_nursery() as nursery:
                for indexes, request in requests:
                    # Each request is written when its task first runs; their order does
                    # not matter (different queues), the order within each does.
                    nursery.start_soon(send, indexes, request)
        if errors:
            raise errors[0]
        return [reply for reply in replies if reply is not None]

    def _send_command(self, messages: Sequence[PutMessage]) -> RemotingCommand:
        """SEND_MESSAGE_V2 for one message, SEND_BATCH_MESSAGE for several (one topic and
        queue id).

        Raises:
            ValueError: properties over 32767 bytes in a batch.
        """
        return send_command(messages, self.producer_group, _unique_ids)

    async def pull(
        self,
        topic: str,
        queue_id: int,
        offset: int = 0,
        max_messages: int = 32,
        *,
        group: str = DEFAULT_PULL_GROUP,
        commit_offset: int | None = None,
        suspend: float | None = None,
    ) -> PullResult:
        """Up to ``max_messages`` messages of a queue from ``offset`` on, and the next offset
        (``PULL_MESSAGE`` with subscription ``*``).

        Args:
            group: the consumer group the pull names.
            commit_offset: also commit this offset for ``group`` (RocketMQ's commit carried
                in a pull; only a master takes it).
            suspend: seconds the broker may hold the pull until a message arrives (long
                polling); None answers at once.

        Raises:
            BrokerProtocolError: a record in the answer does not decode (or fails its CRC).
            BrokerRequestError: the broker refused the pull.
        """
        request = pull_command(
            topic,
            queue_id,
            offset,
            max_messages,
            group=group,
            commit_offset=commit_offset,
            suspend=suspend,
        )
        within = None
        if suspend is not None and self.request_timeout is not None:
            within = self.request_timeout + suspend
        return pull_result(await self.invoke(request, within=within))

    async def status(self) -> BrokerStatus:
        """The broker's role, offsets and (masters) its slaves or (slaves) its master link
        (hanet's ``HANET_STATUS``; a RocketMQ broker answers REQUEST_CODE_NOT_SUPPORTED)."""
        response = await self.invoke_checked(
            RemotingCommand.request(HanetRequestCode.HANET_STATUS), what="status"
        )
        return status_result(response)

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record that ``group`` consumed ``topic``'s queue up to ``offset`` (the next offset
        to read; ``UPDATE_CONSUMER_OFFSET``, answered)."""
        await self.invoke_checked(
            RemotingCommand.request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                UpdateConsumerOffsetRequestHeader(group, topic, queue_id, offset).to_fields(),
            ),
            what="commit offset",
        )

    async def query_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The offset ``group`` committed for the queue, or None when it never committed
        (``QUERY_CONSUMER_OFFSET``; QUERY_NOT_FOUND is None)."""
        response = await self.invoke(
            RemotingCommand.request(
                RequestCode.QUERY_CONSUMER_OFFSET,
                QueryConsumerOffsetRequestHeader(group, topic, queue_id).to_fields(),
            )
        )
        return query_offset_result(response)

    async def max_offset(self, topic: str, queue_id: int) -> int:
        """The queue's end: the offset the next message gets (``GET_MAX_OFFSET``)."""
        response = await self.invoke_checked(
            RemotingCommand.request(
                RequestCode.GET_MAX_OFFSET, GetMaxOffsetRequestHeader(topic, queue_id).to_fields()
            ),
            what="max offset",
        )
        return max_offset_result(response)

    async def consumer_heartbeat(
        self,
        group: str,
        client_id: str,
        topics: Sequence[str] = (),
        *,
        from_beginning: bool = False,
        sub_version: int | None = None,
    ) -> None:
        """Say that consumer ``client_id`` of ``group`` (subscribed to ``topics`` with ``*``)
        is alive (``HEART_BEAT`` with a ``HeartbeatData`` body): the broker counts it a
        member for 120 s. Keep ``sub_version`` (ms, when the subscription was made; None:
        now) the same from one heartbeat to the next, as RocketMQ's clients do: a RocketMQ
        broker logs a newer one as a subscription change."""
        body = heartbeat_body(
            client_id, group, topics, from_beginning=from_beginning, sub_version=sub_version
        )
        await self.invoke_checked(
            RemotingCommand.request(RequestCode.HEART_BEAT, None, body), what="heartbeat"
        )

    async def unregister_consumer(self, group: str, client_id: str) -> None:
        """Take consumer ``client_id`` out of ``group`` at once (``UNREGISTER_CLIENT``: a
        clean shutdown)."""
        await self.invoke_checked(
            RemotingCommand.request(
                RequestCode.UNREGISTER_CLIENT,
                UnregisterClientRequestHeader(client_id, consumer_group=group).to_fields(),
            ),
            what="unregister",
        )

    async def consumer_list(self, group: str) -> tuple[str, ...]:
        """The client ids of ``group``'s live members, sorted
        (``GET_CONSUMER_LIST_BY_GROUP``; a group with no member is empty)."""
        response = await self.invoke(
            RemotingCommand.request(
                RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                GetConsumerListByGroupRequestHeader(group).to_fields(),
            )
        )
        return consumer_list_result(response)
