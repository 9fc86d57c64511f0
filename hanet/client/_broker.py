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
"""

from __future__ import annotations

import json
import logging
import ssl
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Self

import attrs
import trio

from hanet.errors import HanetError
from hanet.protocol import (
    MAX_FRAME_LENGTH,
    BatchMessage,
    BrokerStatus,
    ConsumeFromWhere,
    ConsumerData,
    ConsumerListBody,
    ConsumeType,
    GetConsumerListByGroupRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    HanetRequestCode,
    HeartbeatData,
    MessageId,
    MessageModel,
    MessageProperty,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    RemotingCommand,
    RemotingHeaderError,
    RequestCode,
    ResponseCode,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    SubscriptionData,
    UniqueIdGenerator,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    encode_batch,
    properties_to_string,
    pull_message_request,
)
from hanet.store import CorruptRecordError, MessageRecord, PutStatus, decode_record

from ._messages import AUTO_QUEUE, PullStatus, PutMessage, PutReply, message_problem
from ._remoting import (
    DEFAULT_MAX_IN_FLIGHT,
    RemotingConnection,
    RemotingConnectionError,
    RemotingError,
    RemotingProtocolError,
    RemotingTimeoutError,
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


class BrokerError(RemotingError):
    """Base of the errors :class:`BrokerClient` raises (a :class:`RemotingError`: one
    ``except RemotingError`` catches the broker client's and the name server client's)."""


class BrokerConnectionError(BrokerError, RemotingConnectionError):
    """Could not connect, or the connection closed before the answer came."""


class BrokerTimeoutError(BrokerError, RemotingTimeoutError):
    """No answer within the request timeout (the request may still take effect)."""


class BrokerProtocolError(BrokerError, RemotingProtocolError):
    """The broker sent something that is not a valid answer (a malformed frame closes the
    connection)."""


class InvalidMessageError(BrokerError, ValueError):
    """A message that no broker accepts (bad topic, queue id, tags, keys or properties);
    raised before anything is sent."""


class BrokerRequestError(BrokerError):
    """The broker answered a code that says it could not serve this request.

    Attributes:
        code: the answer's code: a :class:`~hanet.protocol.ResponseCode` when RocketMQ knows
            it (SERVICE_NOT_AVAILABLE: a slave or a DLedger follower refusing a put;
            TOPIC_NOT_EXIST; REQUEST_CODE_NOT_SUPPORTED: a port that does not serve it), else
            the int.
        message: the answer's remark.
        leader_address: with a DLedger follower's refusal, the leader's broker port
            (``host:port``) when it is known, else None.
    """

    def __init__(
        self, code: int, message: str, leader_address: str | None = None, *, what: str = ""
    ) -> None:
        self.code: ResponseCode | int = _response_code(code)
        name = self.code.name if isinstance(self.code, ResponseCode) else str(code)
        text = f"{what + ': ' if what else ''}{name}: {message.strip() or 'no reason given'}"
        if leader_address:
            text += f" (leader {leader_address})"
        super().__init__(text)
        self.message = message
        self.leader_address = leader_address


def _response_code(code: int) -> ResponseCode | int:
    try:
        return ResponseCode(code)
    except ValueError:
        return code


@attrs.frozen
class PullResult:
    """The answer to a pull.

    Attributes:
        status: FOUND, or why nothing was found (RocketMQ's ``GetMessageStatus``, from the
            answer's remark; from its code when the remark names none).
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


_REMOTING_ERRORS: tuple[tuple[type[RemotingError], type[BrokerError]], ...] = (
    (RemotingConnectionError, BrokerConnectionError),
    (RemotingTimeoutError, BrokerTimeoutError),
    (RemotingProtocolError, BrokerProtocolError),
)


def _broker_error(exc: RemotingError) -> BrokerError:
    for remoting, broker in _REMOTING_ERRORS:
        if isinstance(exc, remoting):
            return broker(str(exc))
    return BrokerError(str(exc))


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
        error = _broker_error(exc)
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
            raise _broker_error(exc) from exc

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
            raise _broker_error(exc) from exc


# -- requests and answers ------------------------------------------------------------------

_unique_ids = UniqueIdGenerator()


def message_properties(message: PutMessage, unique_id: str) -> dict[str, str]:
    """The properties a put carries, as a RocketMQ producer sets them: ``KEYS``, ``UNIQ_KEY``,
    ``WAIT`` (``true``: the broker answers once stored as its flush and replication modes
    say), ``TAGS``, then the caller's (which may override any of them)."""
    properties: dict[str, str] = {}
    if message.keys:
        properties[MessageProperty.KEYS] = message.keys
    properties[MessageProperty.UNIQ_KEY] = unique_id
    properties[MessageProperty.WAIT] = "true"
    if message.tags:
        properties[MessageProperty.TAGS] = message.tags
    properties.update(message.properties)
    return properties


def send_request(
    message: PutMessage, properties: Mapping[str, str] | None, group: str, *, batch: bool
) -> dict[str, str]:
    """A SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE header (the V2 short keys) for ``message``
    (``properties`` None for a batch: each message carries its own)."""
    header = SendMessageRequestHeader(
        producer_group=group,
        topic=message.topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=message.queue_id,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=message.flag,
        properties=None if properties is None else properties_to_string(properties),
        reconsume_times=0,
        unit_mode=False,
        batch=batch,
    )
    return header.to_v2_fields()


_STORED_CODES: dict[int, PutStatus] = {
    ResponseCode.SUCCESS: PutStatus.PUT_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: PutStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: PutStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: PutStatus.SLAVE_NOT_AVAILABLE,
}
"""Answers to a send that mean the message is stored (on the master at least)."""

_REFUSED_CODES: dict[int, PutStatus] = {
    ResponseCode.MESSAGE_ILLEGAL: PutStatus.MESSAGE_ILLEGAL,
    ResponseCode.SERVICE_NOT_AVAILABLE: PutStatus.SERVICE_NOT_AVAILABLE,
    ResponseCode.SYSTEM_BUSY: PutStatus.OS_PAGE_CACHE_BUSY,
}
"""Answers to a send that refuse it and are a status, not an error (nothing stored)."""


_SYSTEM_ERROR_REMARKS = (
    ("create mapped file failed", PutStatus.CREATE_MAPPED_FILE_FAILED),
    ("[PC_SYNCHRONIZED]", PutStatus.OS_PAGE_CACHE_BUSY),
)
"""The remarks RocketMQ 4.9.8 gives the put statuses it answers SYSTEM_ERROR for."""


def _system_error_status(remark: str) -> tuple[PutStatus, str] | None:
    """The put status a SYSTEM_ERROR answer to a send names, with the detail: hanet's broker
    starts the remark with the status (``CREATE_MAPPED_FILE_FAILED: why``), RocketMQ's says
    it in words; None for any other SYSTEM_ERROR (a bad topic name, ...)."""
    name, _, detail = remark.partition(":")
    try:
        status = PutStatus(name.strip())
    except ValueError:
        pass
    else:
        if status is not PutStatus.PUT_OK:
            return status, detail.strip() or remark
    for text, status in _SYSTEM_ERROR_REMARKS:
        if remark.startswith(text):
            return status, remark
    return None


def _wrote_offset(msg_id: str) -> int:
    """The commit log offset in an offset message id, or -1 when it is not one."""
    try:
        return MessageId.parse(msg_id).offset
    except ValueError:
        return -1


def put_replies(response: RemotingCommand, count: int) -> list[PutReply]:
    """One :class:`PutReply` per message of a send's answer (``count`` messages: a batch
    answers the first offset and the ids comma-separated).

    Raises:
        BrokerRequestError: the answer is an error, not a put status (SYSTEM_ERROR,
            TOPIC_NOT_EXIST, NO_PERMISSION, ...).
        BrokerProtocolError: a SUCCESS answer without its fields.
    """
    code = response.code
    fields = response.fields
    if code in _REFUSED_CODES:
        status = _REFUSED_CODES[code]
        return [PutReply(status, detail=response.remark or "") for _ in range(count)]
    if code == ResponseCode.SYSTEM_ERROR:
        refused = _system_error_status(response.remark or "")
        if refused is not None:
            return [PutReply(refused[0], detail=refused[1]) for _ in range(count)]
    if code not in _STORED_CODES:
        raise BrokerRequestError(code, response.remark or "", what="put")
    status = _STORED_CODES[code]
    try:
        header = SendMessageResponseHeader.from_fields(fields)
    except RemotingHeaderError as exc:
        raise BrokerProtocolError(f"put answered {status.name}: {exc}") from exc
    queue_id, first = header.queue_id, header.queue_offset
    ids = header.msg_id.split(",")
    if len(ids) != count:
        ids = (ids + [""] * count)[:count]
    return [
        PutReply(
            status,
            queue_id=queue_id,
            queue_offset=first + index,
            wrote_offset=_wrote_offset(ids[index]),
            msg_id=ids[index],
            detail="" if status is PutStatus.PUT_OK else response.remark or "",
        )
        for index in range(count)
    ]


def _pull_status(response: RemotingCommand) -> PullStatus:
    remark = (response.remark or "").strip()
    try:
        return PullStatus[remark]
    except KeyError:
        pass
    code = response.code
    if code == ResponseCode.SUCCESS:
        return PullStatus.FOUND
    if code == ResponseCode.PULL_NOT_FOUND:
        return PullStatus.OFFSET_OVERFLOW_ONE
    if code == ResponseCode.PULL_OFFSET_MOVED:
        return PullStatus.OFFSET_OVERFLOW_BADLY
    if code == ResponseCode.PULL_RETRY_IMMEDIATELY:
        return PullStatus.NO_MATCHED_MESSAGE
    raise BrokerRequestError(code, response.remark or "", what="pull")


_PULL_CODES = (
    ResponseCode.SUCCESS,
    ResponseCode.PULL_NOT_FOUND,
    ResponseCode.PULL_RETRY_IMMEDIATELY,
    ResponseCode.PULL_OFFSET_MOVED,
)


def pull_result(response: RemotingCommand) -> PullResult:
    """The :class:`PullResult` of a ``PULL_MESSAGE`` answer.

    Raises:
        BrokerRequestError: an error answer (TOPIC_NOT_EXIST is a status: nothing stored).
        BrokerProtocolError: a record of the body does not decode.
    """
    code = response.code
    fields = response.fields
    if code == ResponseCode.TOPIC_NOT_EXIST:
        return PullResult(PullStatus.TOPIC_NOT_EXIST, 0, 0, 0)
    if code not in _PULL_CODES:
        raise BrokerRequestError(code, response.remark or "", what="pull")
    status = _pull_status(response)
    try:
        header = PullMessageResponseHeader.from_fields(fields)
    except RemotingHeaderError as exc:
        raise BrokerProtocolError(f"pull answered {status.name}: {exc}") from exc
    messages: list[MessageRecord] = []
    body = memoryview(response.body)
    pos = 0
    try:
        while pos < len(body):
            record = decode_record(body, pos)
            messages.append(record)
            pos += record.size
    except CorruptRecordError as exc:
        raise BrokerProtocolError(f"a pulled record is corrupt: {exc}") from exc
    return PullResult(
        status,
        header.next_begin_offset,
        header.min_offset,
        header.max_offset,
        tuple(messages),
        header.suggest_which_broker_id,
    )


def heartbeat_body(
    client_id: str,
    group: str,
    topics: Sequence[str] = (),
    *,
    from_beginning: bool = False,
    sub_version: int | None = None,
) -> bytes:
    """A ``HeartbeatData`` body: ``client_id``, a clustering consumer of ``group`` subscribed
    to each of ``topics`` with ``*`` (``sub_version``: when the subscription was made, ms;
    None: now)."""
    version = int(time.time() * 1000) if sub_version is None else sub_version
    consumer = ConsumerData(
        group_name=group,
        consume_type=ConsumeType.CONSUME_PASSIVELY,
        message_model=MessageModel.CLUSTERING,
        consume_from_where=(
            ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
            if from_beginning
            else ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
        ),
        subscription_data_set=tuple(
            SubscriptionData(topic, sub_version=version) for topic in topics
        ),
    )
    return HeartbeatData(client_id, consumer_data_set=(consumer,)).to_json()


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
                topic or one over :data:`~hanet.store.MAX_TOPIC_LENGTH` characters, a queue
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
        first = messages[0]
        if len(messages) == 1:
            properties = message_properties(first, _unique_ids())
            return RemotingCommand.request(
                RequestCode.SEND_MESSAGE_V2,
                send_request(first, properties, self.producer_group, batch=False),
                first.body,
            )
        body = encode_batch(
            BatchMessage(m.body, message_properties(m, _unique_ids()), m.flag) for m in messages
        )
        return RemotingCommand.request(
            RequestCode.SEND_BATCH_MESSAGE,
            send_request(first, None, self.producer_group, batch=True),
            body,
        )

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
        suspend_ms = None if suspend is None else int(suspend * 1000)
        request = pull_message_request(
            group,
            topic,
            queue_id,
            offset,
            max_messages,
            commit_offset=commit_offset,
            suspend_ms=suspend_ms,
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
        try:
            return BrokerStatus.from_json(json.loads(bytes(response.body)))
        except (ValueError, HanetError) as exc:
            raise BrokerProtocolError(f"malformed status document: {exc}") from exc

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
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        if response.code != ResponseCode.SUCCESS:
            raise BrokerRequestError(response.code, response.remark or "", what="query offset")
        try:
            offset = QueryConsumerOffsetResponseHeader.from_fields(response.fields).offset
        except RemotingHeaderError as exc:
            raise BrokerProtocolError(f"query offset answer: {exc}") from exc
        return None if offset < 0 else offset

    async def max_offset(self, topic: str, queue_id: int) -> int:
        """The queue's end: the offset the next message gets (``GET_MAX_OFFSET``)."""
        response = await self.invoke_checked(
            RemotingCommand.request(
                RequestCode.GET_MAX_OFFSET, GetMaxOffsetRequestHeader(topic, queue_id).to_fields()
            ),
            what="max offset",
        )
        try:
            return GetMaxOffsetResponseHeader.from_fields(response.fields).offset
        except RemotingHeaderError as exc:
            raise BrokerProtocolError(f"max offset answer: {exc}") from exc

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
        if response.code == ResponseCode.SYSTEM_ERROR and "no consumer" in (response.remark or ""):
            return ()  # what RocketMQ answers for a group it does not know
        if response.code != ResponseCode.SUCCESS:
            raise BrokerRequestError(response.code, response.remark or "", what="consumer list")
        try:
            ids = ConsumerListBody.from_json(bytes(response.body) or b"{}").consumer_id_list
        except RemotingHeaderError as exc:
            raise BrokerProtocolError(f"malformed consumer list: {exc}") from exc
        return tuple(sorted(ids))
