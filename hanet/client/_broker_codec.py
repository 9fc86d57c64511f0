"""The broker client's requests and the reading of their answers, without IO.

Each request is built as RocketMQ 4.9.8's ``MQClientAPIImpl`` builds it; each answer is read
into a result or one of :mod:`hanet.client._broker_errors`' errors. :class:`BrokerClient`
only sends what these build and hands the answer back to them, so everything a broker can
answer is testable here with a :class:`~hanet.protocol.RemotingCommand` in hand.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import attrs

from hanet.protocol import (
    BatchMessage,
    BrokerStatus,
    ConsumeFromWhere,
    ConsumerData,
    ConsumerListBody,
    ConsumeType,
    GetMaxOffsetResponseHeader,
    HeartbeatData,
    MessageId,
    MessageModel,
    MessageProperty,
    PullMessageResponseHeader,
    QueryConsumerOffsetResponseHeader,
    RemotingCommand,
    RemotingHeaderError,
    RequestCode,
    ResponseCode,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    SubscriptionData,
    encode_batch,
    properties_to_string,
    pull_message_request,
)
from hanet.store import CorruptRecordError, MessageRecord, PutStatus, decode_records

from ._broker_errors import BrokerProtocolError, BrokerRequestError
from ._messages import PullStatus, PutMessage, PutReply

__all__ = [
    "PullResult",
    "consumer_list_result",
    "heartbeat_body",
    "max_offset_result",
    "message_properties",
    "pull_command",
    "pull_result",
    "put_replies",
    "query_offset_result",
    "send_command",
    "send_request",
    "status_result",
]


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


def message_properties(message: PutMessage, unique_id: Callable[[], str]) -> dict[str, str]:
    """The properties a put carries, as a RocketMQ producer sets them: ``KEYS``, ``UNIQ_KEY``
    (from ``unique_id`` unless the caller's properties have one), ``WAIT`` (``true``: the
    broker answers once stored as its flush and replication modes say), ``TAGS``, then the
    caller's (which may override any of them)."""
    given = dict(message.properties)
    properties: dict[str, str] = {}
    if message.keys:
        properties[MessageProperty.KEYS] = message.keys
    key = given.get(MessageProperty.UNIQ_KEY)
    properties[MessageProperty.UNIQ_KEY] = unique_id() if key is None else key
    properties[MessageProperty.WAIT] = "true"
    if message.tags:
        properties[MessageProperty.TAGS] = message.tags
    properties.update(given)
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
    try:
        messages = decode_records(response.body)  # native when built
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


def send_command(
    messages: Sequence[PutMessage], group: str, unique_id: Callable[[], str]
) -> RemotingCommand:
    """SEND_MESSAGE_V2 for one message, SEND_BATCH_MESSAGE for several (one topic and queue
    id); ``unique_id`` gives each message its ``UNIQ_KEY``.

    Raises:
        ValueError: properties over 32767 bytes in a batch.
    """
    first = messages[0]
    if len(messages) == 1:
        properties = message_properties(first, unique_id)
        return RemotingCommand.request(
            RequestCode.SEND_MESSAGE_V2,
            send_request(first, properties, group, batch=False),
            first.body,
        )
    body = encode_batch(
        BatchMessage(m.body, message_properties(m, unique_id), m.flag) for m in messages
    )
    return RemotingCommand.request(
        RequestCode.SEND_BATCH_MESSAGE, send_request(first, None, group, batch=True), body
    )


def pull_command(
    topic: str,
    queue_id: int,
    offset: int,
    max_messages: int,
    *,
    group: str,
    commit_offset: int | None = None,
    suspend: float | None = None,
) -> RemotingCommand:
    """A ``PULL_MESSAGE`` with subscription ``*`` (see :meth:`BrokerClient.pull`)."""
    suspend_ms = None if suspend is None else int(suspend * 1000)
    return pull_message_request(
        group,
        topic,
        queue_id,
        offset,
        max_messages,
        commit_offset=commit_offset,
        suspend_ms=suspend_ms,
    )


def status_result(response: RemotingCommand) -> BrokerStatus:
    """The :class:`BrokerStatus` of a SUCCESS ``HANET_STATUS`` answer.

    Raises:
        BrokerProtocolError: the body is not a status document.
    """
    try:
        return BrokerStatus.decode(response.body)
    except RemotingHeaderError as exc:
        raise BrokerProtocolError(str(exc)) from exc


def query_offset_result(response: RemotingCommand) -> int | None:
    """The offset of a ``QUERY_CONSUMER_OFFSET`` answer; None when the group never committed
    (QUERY_NOT_FOUND, or a negative offset).

    Raises:
        BrokerRequestError: another error code. BrokerProtocolError: no offset field.
    """
    if response.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    if response.code != ResponseCode.SUCCESS:
        raise BrokerRequestError(response.code, response.remark or "", what="query offset")
    try:
        offset = QueryConsumerOffsetResponseHeader.from_fields(response.fields).offset
    except RemotingHeaderError as exc:
        raise BrokerProtocolError(f"query offset answer: {exc}") from exc
    return None if offset < 0 else offset


def max_offset_result(response: RemotingCommand) -> int:
    """The offset of a SUCCESS ``GET_MAX_OFFSET`` answer.

    Raises:
        BrokerProtocolError: no offset field.
    """
    try:
        return GetMaxOffsetResponseHeader.from_fields(response.fields).offset
    except RemotingHeaderError as exc:
        raise BrokerProtocolError(f"max offset answer: {exc}") from exc


def consumer_list_result(response: RemotingCommand) -> tuple[str, ...]:
    """The sorted client ids of a ``GET_CONSUMER_LIST_BY_GROUP`` answer (RocketMQ's
    SYSTEM_ERROR "no consumer" for a group it does not know: none).

    Raises:
        BrokerRequestError: another error code. BrokerProtocolError: a malformed body.
    """
    if response.code == ResponseCode.SYSTEM_ERROR and "no consumer" in (response.remark or ""):
        return ()  # what RocketMQ answers for a group it does not know
    if response.code != ResponseCode.SUCCESS:
        raise BrokerRequestError(response.code, response.remark or "", what="consumer list")
    try:
        ids = ConsumerListBody.from_json(bytes(response.body) or b"{}").consumer_id_list
    except RemotingHeaderError as exc:
        raise BrokerProtocolError(f"malformed consumer list: {exc}") from exc
    return tuple(sorted(ids))
