"""The JSON bodies of the broker port's requests and answers (RocketMQ's ``protocol/body`` and
``protocol/heartbeat`` beans), sans-IO.

RocketMQ writes its beans with fastjson: compact JSON, bean fields in alphabetical order,
enums by name. Readers here accept what every client sends:

- enums by name (Java, ali-ons) and by ordinal (the C++ client writes ``"consumeType":1``);
- numbers as JSON numbers or as strings (the C++ client writes ``"subVersion":"179..."``);
- missing optional keys (ali-ons leaves out ``producerDataSet`` entries, the C++ client
  ``unitMode`` and the subscription's sets);
- maps keyed by numbers with the keys bare (``{0:12}``, as fastjson writes a
  ``Map<Integer, Long>`` into ``consumerOffset.json``) or quoted.

A body that is not JSON, or whose shape is not the bean's, raises
:class:`~hanet.protocol.RemotingHeaderError` saying what is wrong (answered SYSTEM_ERROR, the
connection stays).
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Self, TypeVar

import attrs

from . import _fastjson
from ._fastjson import FastjsonError
from ._remoting import RemotingHeaderError

__all__ = [
    "ConsumeFromWhere",
    "ConsumeType",
    "ConsumerData",
    "ConsumerListBody",
    "ConsumerOffsetSerializeWrapper",
    "HeartbeatData",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "MessageModel",
    "MessageQueue",
    "OffsetTable",
    "ProducerData",
    "SubscriptionData",
    "SubscriptionGroupConfig",
    "SubscriptionGroupWrapper",
    "UnlockBatchRequestBody",
    "body_json",
    "load_body",
    "offset_table_from_json",
    "offset_table_to_json",
]

E = TypeVar("E", bound=enum.IntEnum)

OffsetTable = Mapping[tuple[str, str], Mapping[int, int]]
"""Committed offsets: ``(topic, group) -> {queue_id: offset}``."""


def load_body(data: bytes | bytearray | memoryview | str, what: str) -> Any:
    """A body's JSON (fastjson's bare keys accepted).

    Raises:
        RemotingHeaderError: not UTF-8 or not JSON, naming ``what``.
    """
    try:
        return _fastjson.loads(data)
    except FastjsonError as exc:
        raise RemotingHeaderError(f"{what} body is {exc}") from None


def body_json(document: Any) -> bytes:
    """``document`` as a body: compact UTF-8 JSON, keys in the order given (build beans with
    their keys in alphabetical order, as fastjson writes them)."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise RemotingHeaderError(f"{what} is not a JSON object")
    return value


def _list(value: Any, what: str) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise RemotingHeaderError(f"{what} is not a JSON array")
    return value


def _str(obj: Mapping[str, Any], key: str, what: str, default: str | None = None) -> str:
    value = obj.get(key)
    if value is None:
        if default is not None:
            return default
        raise RemotingHeaderError(f"{what}: {key} is missing")
    if not isinstance(value, str):
        raise RemotingHeaderError(f"{what}: {key} is not a string")
    return value


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise RemotingHeaderError(f"{what} is a boolean, not a number")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise RemotingHeaderError(f"{what} is {value!r:.40}, not an integer")


def _bool(value: Any, what: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value != 0
    if isinstance(value, str) and value.lower() in ("true", "false", "0", "1"):
        return value.lower() in ("true", "1")
    raise RemotingHeaderError(f"{what} is {value!r:.40}, not a boolean")


def _enum(kind: type[E], value: Any, what: str, default: E) -> E:
    """An enum by Java name or by ordinal (the C++ client's)."""
    if value is None:
        return default
    if isinstance(value, str) and not value.strip().lstrip("-").isdigit():
        try:
            return kind[value]
        except KeyError:
            raise RemotingHeaderError(f"{what} {value!r:.40} is not a {kind.__name__}") from None
    number = _int(value, what)
    try:
        return kind(number)
    except ValueError:
        raise RemotingHeaderError(f"{what} {number} is not a {kind.__name__} ordinal") from None


class ConsumeType(enum.IntEnum):
    """How a consumer pulls (Java ordinals, which the C++ client sends)."""

    CONSUME_ACTIVELY = 0
    CONSUME_PASSIVELY = 1


class MessageModel(enum.IntEnum):
    """Whether each message goes to one member of a group or to all of them."""

    BROADCASTING = 0
    CLUSTERING = 1


class ConsumeFromWhere(enum.IntEnum):
    """Where a group with no committed offset starts."""

    CONSUME_FROM_LAST_OFFSET = 0
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = 1
    CONSUME_FROM_MIN_OFFSET = 2
    CONSUME_FROM_MAX_OFFSET = 3
    CONSUME_FROM_FIRST_OFFSET = 4
    CONSUME_FROM_TIMESTAMP = 5


@attrs.frozen
class SubscriptionData:
    """One topic a consumer subscribes to, with its expression (``*``, ``TagA || TagB``)."""

    topic: str
    sub_string: str = "*"
    tags_set: tuple[str, ...] = ()
    code_set: tuple[int, ...] = ()
    sub_version: int = 0
    expression_type: str = "TAG"
    class_filter_mode: bool = False

    @classmethod
    def from_json(cls, obj: Any) -> Self:
        """From the bean's JSON object.

        Raises:
            RemotingHeaderError: not the bean's shape.
        """
        what = "subscriptionData"
        o = _object(obj, what)
        return cls(
            topic=_str(o, "topic", what),
            sub_string=_str(o, "subString", what, "*"),
            tags_set=tuple(str(t) for t in _list(o.get("tagsSet"), f"{what}.tagsSet")),
            code_set=tuple(
                _int(c, f"{what}.codeSet") for c in _list(o.get("codeSet"), f"{what}.codeSet")
            ),
            sub_version=_int(o.get("subVersion", 0), f"{what}.subVersion"),
            expression_type=_str(o, "expressionType", what, "TAG"),
            class_filter_mode=_bool(o.get("classFilterMode"), f"{what}.classFilterMode"),
        )

    def to_json(self) -> dict[str, Any]:
        """The bean's JSON object (fastjson's key order)."""
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": list(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": list(self.tags_set),
            "topic": self.topic,
        }


@attrs.frozen
class ConsumerData:
    """A consumer group a client is a member of, with its subscriptions."""

    group_name: str
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    subscription_data_set: tuple[SubscriptionData, ...] = ()
    unit_mode: bool = False

    @classmethod
    def from_json(cls, obj: Any) -> Self:
        """From the bean's JSON object (enums by name or ordinal).

        Raises:
            RemotingHeaderError: not the bean's shape.
        """
        what = "consumerData"
        o = _object(obj, what)
        return cls(
            group_name=_str(o, "groupName", what),
            consume_type=_enum(
                ConsumeType,
                o.get("consumeType"),
                f"{what}.consumeType",
                ConsumeType.CONSUME_PASSIVELY,
            ),
            message_model=_enum(
                MessageModel,
                o.get("messageModel"),
                f"{what}.messageModel",
                MessageModel.CLUSTERING,
            ),
            consume_from_where=_enum(
                ConsumeFromWhere,
                o.get("consumeFromWhere"),
                f"{what}.consumeFromWhere",
                ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
            ),
            subscription_data_set=tuple(
                SubscriptionData.from_json(s)
                for s in _list(o.get("subscriptionDataSet"), f"{what}.subscriptionDataSet")
            ),
            unit_mode=_bool(o.get("unitMode"), f"{what}.unitMode"),
        )

    def to_json(self) -> dict[str, Any]:
        """The bean's JSON object (enums by name)."""
        return {
            "consumeFromWhere": self.consume_from_where.name,
            "consumeType": self.consume_type.name,
            "groupName": self.group_name,
            "messageModel": self.message_model.name,
            "subscriptionDataSet": [s.to_json() for s in self.subscription_data_set],
            "unitMode": self.unit_mode,
        }


@attrs.frozen
class ProducerData:
    """A producer group a client is a member of."""

    group_name: str

    def to_json(self) -> dict[str, Any]:
        """The bean's JSON object."""
        return {"groupName": self.group_name}


@attrs.frozen
class HeartbeatData:
    """HEART_BEAT (34)'s body: a client's id and the groups it is a member of."""

    client_id: str
    producer_data_set: tuple[ProducerData, ...] = ()
    consumer_data_set: tuple[ConsumerData, ...] = ()

    @classmethod
    def from_json(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """From a HEART_BEAT body.

        Raises:
            RemotingHeaderError: not JSON or not the bean's shape.
        """
        o = _object(load_body(data, "HEART_BEAT"), "heartbeatData")
        producers = []
        for p in _list(o.get("producerDataSet"), "producerDataSet"):
            producers.append(ProducerData(_str(_object(p, "producerData"), "groupName", "p")))
        return cls(
            client_id=_str(o, "clientID", "heartbeatData"),
            producer_data_set=tuple(producers),
            consumer_data_set=tuple(
                ConsumerData.from_json(c)
                for c in _list(o.get("consumerDataSet"), "consumerDataSet")
            ),
        )

    def to_json(self) -> bytes:
        """The body."""
        return body_json(
            {
                "clientID": self.client_id,
                "consumerDataSet": [c.to_json() for c in self.consumer_data_set],
                "producerDataSet": [p.to_json() for p in self.producer_data_set],
            }
        )


@attrs.frozen
class ConsumerListBody:
    """GET_CONSUMER_LIST_BY_GROUP's answer body (``GetConsumerListByGroupResponseBody``)."""

    consumer_id_list: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """From the body.

        Raises:
            RemotingHeaderError: not JSON or not the bean's shape.
        """
        o = _object(load_body(data, "consumer list"), "consumer list")
        ids = _list(o.get("consumerIdList"), "consumerIdList")
        if not all(isinstance(i, str) for i in ids):
            raise RemotingHeaderError("consumerIdList holds a value that is not a string")
        return cls(tuple(ids))

    def to_json(self) -> bytes:
        """The body."""
        return body_json({"consumerIdList": list(self.consumer_id_list)})


@attrs.frozen(order=True)
class MessageQueue:
    """One queue of a topic on one broker name."""

    topic: str
    broker_name: str
    queue_id: int

    @classmethod
    def from_json(cls, obj: Any) -> Self:
        """From the bean's JSON object.

        Raises:
            RemotingHeaderError: not the bean's shape.
        """
        o = _object(obj, "messageQueue")
        return cls(
            _str(o, "topic", "messageQueue"),
            _str(o, "brokerName", "messageQueue"),
            _int(o.get("queueId"), "messageQueue.queueId"),
        )

    def to_json(self) -> dict[str, Any]:
        """The bean's JSON object."""
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}


def _queues(value: Any, what: str) -> frozenset[MessageQueue]:
    return frozenset(MessageQueue.from_json(q) for q in _list(value, what))


def _queue_list(queues: Iterable[MessageQueue]) -> list[dict[str, Any]]:
    return [q.to_json() for q in sorted(queues)]


@attrs.frozen
class LockBatchRequestBody:
    """LOCK_BATCH_MQ (41)'s body: the queues a member of a group wants to consume alone."""

    consumer_group: str
    client_id: str
    mq_set: frozenset[MessageQueue] = frozenset()

    @classmethod
    def from_json(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """From the body.

        Raises:
            RemotingHeaderError: not JSON or not the bean's shape.
        """
        o = _object(load_body(data, "lock batch"), "lockBatchRequestBody")
        return cls(
            _str(o, "consumerGroup", "lockBatchRequestBody"),
            _str(o, "clientId", "lockBatchRequestBody"),
            _queues(o.get("mqSet"), "mqSet"),
        )

    def to_json(self) -> bytes:
        """The body."""
        return body_json(
            {
                "clientId": self.client_id,
                "consumerGroup": self.consumer_group,
                "mqSet": _queue_list(self.mq_set),
            }
        )


@attrs.frozen
class UnlockBatchRequestBody(LockBatchRequestBody):
    """UNLOCK_BATCH_MQ (42)'s body: the queues a member releases (same shape)."""


@attrs.frozen
class LockBatchResponseBody:
    """LOCK_BATCH_MQ's answer body: the queues now locked by the requester."""

    lock_ok_mq_set: frozenset[MessageQueue] = frozenset()

    @classmethod
    def from_json(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """From the body.

        Raises:
            RemotingHeaderError: not JSON or not the bean's shape.
        """
        o = _object(load_body(data, "lock batch answer"), "lockBatchResponseBody")
        return cls(_queues(o.get("lockOKMQSet"), "lockOKMQSet"))

    def to_json(self) -> bytes:
        """The body."""
        return body_json({"lockOKMQSet": _queue_list(self.lock_ok_mq_set)})


def offset_table_from_json(table: Any) -> dict[tuple[str, str], dict[int, int]]:
    """A ``ConsumerOffsetSerializeWrapper.offsetTable`` (``{"topic@group": {"0": 12}}``,
    queue ids quoted or bare) as ``(topic, group) -> {queue_id: offset}``.

    Raises:
        RemotingHeaderError: a key is not ``topic@group``, a queue id or offset not an integer.
    """
    out: dict[tuple[str, str], dict[int, int]] = {}
    for key, queues in _object(table, "offsetTable").items():
        topic, at, group = str(key).rpartition("@")
        if not at or not topic or not group:
            raise RemotingHeaderError(f"offset key {key!r:.80} is not topic@group")
        parsed: dict[int, int] = {}
        for queue, offset in _object(queues, f"offsets of {key!r:.80}").items():
            queue_id = _int(queue, f"queue id {queue!r:.20} of {key!r:.80}")
            parsed[queue_id] = _int(offset, f"offset of {key!r:.80} queue {queue_id}")
        out[(topic, group)] = parsed
    return out


def offset_table_to_json(table: OffsetTable) -> dict[str, dict[str, int]]:
    """``(topic, group) -> {queue_id: offset}`` in RocketMQ's ``offsetTable`` shape (queue ids
    quoted: standard JSON, which fastjson reads too)."""
    return {
        f"{topic}@{group}": {str(q): o for q, o in sorted(queues.items())}
        for (topic, group), queues in table.items()
    }


@attrs.frozen
class ConsumerOffsetSerializeWrapper:
    """``consumerOffset.json`` and GET_ALL_CONSUMER_OFFSET (43)'s answer body:
    ``{"offsetTable": {"topic@group": {"0": 12}}}``."""

    offset_table: OffsetTable = attrs.field(factory=dict)

    @classmethod
    def from_json(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """From the file or body (an empty document: no offsets).

        Raises:
            RemotingHeaderError: not JSON or not the shape.
        """
        o = _object(load_body(data, "consumer offsets"), "consumer offsets")
        return cls(offset_table_from_json(o.get("offsetTable", {})))

    def to_json(self) -> bytes:
        """The file or body."""
        return body_json({"offsetTable": offset_table_to_json(self.offset_table)})


@attrs.frozen
class SubscriptionGroupConfig:
    """A consumer group's settings (RocketMQ's ``SubscriptionGroupConfig``; defaults as
    RocketMQ's auto-created groups)."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True

    @classmethod
    def from_json(cls, obj: Any) -> Self:
        """From the bean's JSON object (missing keys take the defaults).

        Raises:
            RemotingHeaderError: not the bean's shape.
        """
        what = "subscriptionGroupConfig"
        o = _object(obj, what)
        d = cls("")

        def b(key: str, default: bool) -> bool:
            return default if o.get(key) is None else _bool(o[key], f"{what}.{key}")

        def i(key: str, default: int) -> int:
            return default if o.get(key) is None else _int(o[key], f"{what}.{key}")

        return cls(
            group_name=_str(o, "groupName", what),
            consume_enable=b("consumeEnable", d.consume_enable),
            consume_from_min_enable=b("consumeFromMinEnable", d.consume_from_min_enable),
            consume_broadcast_enable=b("consumeBroadcastEnable", d.consume_broadcast_enable),
            retry_queue_nums=i("retryQueueNums", d.retry_queue_nums),
            retry_max_times=i("retryMaxTimes", d.retry_max_times),
            broker_id=i("brokerId", d.broker_id),
            which_broker_when_consume_slowly=i(
                "whichBrokerWhenConsumeSlowly", d.which_broker_when_consume_slowly
            ),
            notify_consumer_ids_changed_enable=b(
                "notifyConsumerIdsChangedEnable", d.notify_consumer_ids_changed_enable
            ),
        )

    def to_json(self) -> dict[str, Any]:
        """The bean's JSON object."""
        return {
            "brokerId": self.broker_id,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "groupName": self.group_name,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
            "retryMaxTimes": self.retry_max_times,
            "retryQueueNums": self.retry_queue_nums,
            "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
        }


@attrs.frozen
class SubscriptionGroupWrapper:
    """``subscriptionGroup.json`` and GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201)'s answer body.

    Attributes:
        groups: group name -> its settings.
        counter, timestamp: the table's ``dataVersion``.
    """

    groups: Mapping[str, SubscriptionGroupConfig] = attrs.field(factory=dict)
    counter: int = 0
    timestamp: int = attrs.field(factory=lambda: int(time.time() * 1000))

    @classmethod
    def from_json(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """From the file or body.

        Raises:
            RemotingHeaderError: not JSON or not the shape.
        """
        o = _object(load_body(data, "subscription groups"), "subscription groups")
        table = _object(o.get("subscriptionGroupTable", {}), "subscriptionGroupTable")
        version = _object(o.get("dataVersion", {}), "dataVersion")
        return cls(
            {name: SubscriptionGroupConfig.from_json(g) for name, g in table.items()},
            _int(version.get("counter", 0), "dataVersion.counter"),
            _int(version.get("timestamp", 0), "dataVersion.timestamp"),
        )

    def document(self) -> dict[str, Any]:
        """The file's or body's JSON object."""
        return {
            "dataVersion": {"counter": self.counter, "timestamp": self.timestamp},
            "subscriptionGroupTable": {
                name: g.to_json() for name, g in sorted(self.groups.items())
            },
        }

    def to_json(self) -> bytes:
        """The file or body."""
        return body_json(self.document())
