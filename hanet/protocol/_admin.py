"""The admin requests' headers and bodies (what RocketMQ 4.9.8's ``mqadmin`` sends to a
broker port and to the name servers), sans-IO.

Headers are RocketMQ's ``*RequestHeader`` classes with their field names on the wire (read
and written as :class:`~hanet.protocol.RemotingHeader` does). Bodies are RocketMQ's beans as
fastjson writes them: keys in alphabetical order, enums by name. Several are maps keyed by a
``MessageQueue`` (``TopicStatsTable``, ``ConsumeStats``, ``ResetOffsetBody``), which fastjson
writes with the queue *object* as the key, not standard JSON::

    {"consumeTps":0.0,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}}

:func:`loads_object_keys` reads that (and standard JSON). The broker's settings travel as Java
properties text (``key=value`` lines: :func:`properties_to_text`, :func:`text_to_properties`).

A body that does not decode raises :class:`~hanet.protocol.RemotingHeaderError` saying what
is wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Self

import attrs

from ._bodies import (
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    MessageQueue,
    SubscriptionData,
    body_json,
)
from ._codes import LanguageCode
from ._headers import RemotingHeader, _Kind, _wire
from ._remoting import RemotingHeaderError

__all__ = [
    "ClientConnection",
    "ConsumeStats",
    "ConsumerConnection",
    "CreateTopicRequestHeader",
    "DeleteSubscriptionGroupRequestHeader",
    "DeleteTopicFromNamesrvRequestHeader",
    "DeleteTopicRequestHeader",
    "GetBrokerConfigResponseHeader",
    "GetConsumeStatsRequestHeader",
    "GetConsumerConnectionListRequestHeader",
    "GetProducerConnectionListRequestHeader",
    "GetTopicStatsInfoRequestHeader",
    "ObjectKeyed",
    "OffsetWrapper",
    "ProducerConnection",
    "ResetOffsetBody",
    "ResetOffsetRequestHeader",
    "TopicOffset",
    "TopicStatsTable",
    "WritePermOfBrokerRequestHeader",
    "WritePermOfBrokerResponseHeader",
    "loads_object_keys",
    "properties_to_text",
    "reset_offset_body_for_c",
    "text_to_properties",
]


# -- headers --------------------------------------------------------------------------------


@attrs.frozen
class CreateTopicRequestHeader(RemotingHeader):
    """UPDATE_AND_CREATE_TOPIC (17): create a topic on a broker, or change its queues and
    permission (``perm``: 2 write, 4 read, 6 both)."""

    topic: str = _wire("topic", _Kind.STR)
    default_topic: str = _wire("defaultTopic", _Kind.STR, default="TBW102")
    read_queue_nums: int = _wire("readQueueNums", _Kind.INT, default=8)
    write_queue_nums: int = _wire("writeQueueNums", _Kind.INT, default=8)
    perm: int = _wire("perm", _Kind.INT, default=6)
    topic_filter_type: str = _wire("topicFilterType", _Kind.STR, default="SINGLE_TAG")
    topic_sys_flag: int | None = _wire("topicSysFlag", _Kind.INT, required=False)
    order: bool = _wire("order", _Kind.BOOL, default=False)


@attrs.frozen
class DeleteTopicRequestHeader(RemotingHeader):
    """DELETE_TOPIC_IN_BROKER (215): forget a topic on a broker."""

    topic: str = _wire("topic", _Kind.STR)


@attrs.frozen
class DeleteTopicFromNamesrvRequestHeader(RemotingHeader):
    """DELETE_TOPIC_IN_NAMESRV (216): drop a topic from the name server's routes (only the
    brokers of ``cluster_name`` when given)."""

    topic: str = _wire("topic", _Kind.STR)
    cluster_name: str | None = _wire("clusterName", _Kind.STR, required=False)


@attrs.frozen
class GetTopicStatsInfoRequestHeader(RemotingHeader):
    """GET_TOPIC_STATS_INFO (202): each queue's min and max offsets (a
    :class:`TopicStatsTable`)."""

    topic: str = _wire("topic", _Kind.STR)


@attrs.frozen
class GetConsumeStatsRequestHeader(RemotingHeader):
    """GET_CONSUME_STATS (208): a group's progress per queue (a :class:`ConsumeStats`), of
    ``topic`` or of every topic the group committed offsets of."""

    consumer_group: str = _wire("consumerGroup", _Kind.STR)
    topic: str | None = _wire("topic", _Kind.STR, required=False)


@attrs.frozen
class GetConsumerConnectionListRequestHeader(RemotingHeader):
    """GET_CONSUMER_CONNECTION_LIST (203): a group's live members (a
    :class:`ConsumerConnection`)."""

    consumer_group: str = _wire("consumerGroup", _Kind.STR)


@attrs.frozen
class GetProducerConnectionListRequestHeader(RemotingHeader):
    """GET_PRODUCER_CONNECTION_LIST (204): a producer group's live members (a
    :class:`ProducerConnection`)."""

    producer_group: str = _wire("producerGroup", _Kind.STR)


@attrs.frozen
class DeleteSubscriptionGroupRequestHeader(RemotingHeader):
    """DELETE_SUBSCRIPTIONGROUP (207): forget a consumer group's settings (and its offsets
    with ``removeOffset``)."""

    group_name: str = _wire("groupName", _Kind.STR)
    remove_offset: bool = _wire("removeOffset", _Kind.BOOL, required=False)


@attrs.frozen
class ResetOffsetRequestHeader(RemotingHeader):
    """INVOKE_BROKER_TO_RESET_OFFSET (222, admin to broker) and RESET_CONSUMER_CLIENT_OFFSET
    (220, broker to each consumer): move a group's offsets of a topic to the first message
    stored at or after ``timestamp`` (ms; -1: the end). Without ``isForce`` an offset only
    moves back."""

    topic: str = _wire("topic", _Kind.STR)
    group: str = _wire("group", _Kind.STR)
    timestamp: int = _wire("timestamp", _Kind.LONG)
    is_force: bool = _wire("isForce", _Kind.BOOL, default=False)


@attrs.frozen
class GetBrokerConfigResponseHeader(RemotingHeader):
    """GET_BROKER_CONFIG (26)'s answer header: the settings' data version (JSON)."""

    version: str = _wire("version", _Kind.STR)


@attrs.frozen
class WritePermOfBrokerRequestHeader(RemotingHeader):
    """WIPE_WRITE_PERM_OF_BROKER (205) / ADD_WRITE_PERM_OF_BROKER (327), to a name server: take
    away (give back) the write permission of every topic of a broker name."""

    broker_name: str = _wire("brokerName", _Kind.STR)


@attrs.frozen
class WritePermOfBrokerResponseHeader(RemotingHeader):
    """The answer: how many topics changed (``wipeTopicCount``; ADD_WRITE_PERM_OF_BROKER's
    is ``addTopicCount``: :meth:`for_add`)."""

    wipe_topic_count: int = _wire("wipeTopicCount", _Kind.INT)

    @classmethod
    def for_add(cls, fields: Mapping[str, str]) -> Self:
        """ADD_WRITE_PERM_OF_BROKER's answer (``addTopicCount``)."""
        return cls.from_fields({"wipeTopicCount": fields.get("addTopicCount", "0")})


# -- fastjson with object keys ----------------------------------------------------------------


class ObjectKeyed(list[tuple[Any, Any]]):
    """A JSON object read by :func:`loads_object_keys` whose keys are not all strings: its
    ``(key, value)`` pairs in order."""


_scanstring: Callable[[str, int], tuple[str, int]] = getattr(json.decoder, "scanstring")  # noqa: B009

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", re.ASCII)
_BARE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_LITERALS = {"true": True, "false": False, "null": None}


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def fail(self, what: str) -> RemotingHeaderError:
        return RemotingHeaderError(f"not JSON at character {self.at}: {what}")

    def skip(self) -> str:
        text, at = self.text, self.at
        while at < len(text) and text[at] in " \t\r\n":
            at += 1
        self.at = at
        return text[at] if at < len(text) else ""

    def value(self, depth: int = 0) -> Any:
        if depth > 64:
            raise self.fail("nested too deep")
        c = self.skip()
        if c == "{":
            return self.object(depth)
        if c == "[":
            self.at += 1
            items: list[Any] = []
            if self.skip() == "]":
                self.at += 1
                return items
            while True:
                items.append(self.value(depth + 1))
                c = self.skip()
                self.at += 1
                if c == "]":
                    return items
                if c != ",":
                    raise self.fail("expected , or ]")
        if c == '"':
            try:
                text, end = _scanstring(self.text, self.at + 1)
            except json.JSONDecodeError as exc:
                raise self.fail(exc.msg) from None
            self.at = end
            return text
        match = _NUMBER.match(self.text, self.at)
        if match:
            self.at = match.end()
            token = match.group()
            try:
                return float(token) if any(ch in token for ch in ".eE") else int(token)
            except ValueError:  # past int()'s digit limit
                raise self.fail(f"a number of {len(token)} characters") from None
        match = _BARE.match(self.text, self.at)
        if match and match.group() in _LITERALS:
            self.at = match.end()
            return _LITERALS[match.group()]
        raise self.fail("expected a value")

    def key(self, depth: int) -> Any:
        c = self.skip()
        if c in ('"', "{", "["):
            return self.value(depth + 1)
        match = _NUMBER.match(self.text, self.at) or _BARE.match(self.text, self.at)
        if not match:
            raise self.fail("expected a key")
        self.at = match.end()
        return match.group()  # a bare key reads as a string, as in fastjson

    def object(self, depth: int) -> Any:
        self.at += 1
        pairs: list[tuple[Any, Any]] = []
        if self.skip() == "}":
            self.at += 1
            return {}
        while True:
            key = self.key(depth)
            if self.skip() != ":":
                raise self.fail("expected :")
            self.at += 1
            pairs.append((key, self.value(depth + 1)))
            c = self.skip()
            self.at += 1
            if c == "}":
                break
            if c != ",":
                raise self.fail("expected , or }")
        if all(isinstance(k, str) for k, _ in pairs):
            return dict(pairs)
        return ObjectKeyed(pairs)


def loads_object_keys(data: bytes | bytearray | memoryview | str, what: str) -> Any:
    """JSON as fastjson writes it, object keys included: an object whose keys are all strings
    (bare keys read as strings) is a dict, any other an :class:`ObjectKeyed` list of pairs.

    Raises:
        RemotingHeaderError: not UTF-8 or not JSON, naming ``what``.
    """
    if isinstance(data, str):
        text = data
    else:
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RemotingHeaderError(f"{what} body is not UTF-8: {exc}") from None
    parser = _Parser(text)
    try:
        value = parser.value()
        if parser.skip():
            raise parser.fail("text after the value")
    except RemotingHeaderError as exc:
        raise RemotingHeaderError(f"{what} body is {exc}") from None
    return value


def _pairs(value: Any, what: str) -> list[tuple[Any, Any]]:
    if isinstance(value, ObjectKeyed):
        return list(value)
    if isinstance(value, dict):
        if value:
            raise RemotingHeaderError(f"{what} is not keyed by message queues")
        return []
    if value is None:
        return []
    raise RemotingHeaderError(f"{what} is not a JSON object")


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise RemotingHeaderError(f"{what} is not a JSON object")
    return value


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RemotingHeaderError(f"{what} is {value!r:.40}, not an integer")
    return value


def _queue_keyed(table: Mapping[MessageQueue, Any], value: Any) -> bytes:
    """``{queue-object: value(...)}`` as fastjson writes a ``Map<MessageQueue, V>``."""
    parts = [
        body_json(queue.to_json()).decode() + ":" + body_json(value(item)).decode()
        for queue, item in sorted(table.items())
    ]
    return ("{" + ",".join(parts) + "}").encode()


def _read_queue_keyed(value: Any, what: str) -> list[tuple[MessageQueue, Any]]:
    return [(MessageQueue.from_json(key), item) for key, item in _pairs(value, what)]


# -- bodies ---------------------------------------------------------------------------------


@attrs.frozen
class TopicOffset:
    """One queue's bounds in a :class:`TopicStatsTable`."""

    min_offset: int = 0
    max_offset: int = 0
    last_update_timestamp: int = 0

    def to_json(self) -> dict[str, Any]:
        """The bean's JSON object."""
        return {
            "lastUpdateTimestamp": self.last_update_timestamp,
            "maxOffset": self.max_offset,
            "minOffset": self.min_offset,
        }

    @classmethod
    def from_json(cls, value: Any) -> Self:
        """From the bean's JSON object.

        Raises:
            RemotingHeaderError: not the bean's shape.
        """
        o = _object(value, "topicOffset")
        return cls(
            _int(o.get("minOffset", 0), "minOffset"),
            _int(o.get("maxOffset", 0), "maxOffset"),
            _int(o.get("lastUpdateTimestamp", 0), "lastUpdateTimestamp"),
        )


@attrs.frozen
class TopicStatsTable:
    """GET_TOPIC_STATS_INFO's answer body: each queue of the topic on the broker."""

    offset_table: Mapping[MessageQueue, TopicOffset] = attrs.field(factory=dict)

    def encode(self) -> bytes:
        """The body (queue objects as keys, as fastjson writes them)."""
        table = _queue_keyed(self.offset_table, TopicOffset.to_json)
        return b'{"offsetTable":' + table + b"}"

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """From the body.

        Raises:
            RemotingHeaderError: not the bean's shape.
        """
        o = _object(loads_object_keys(data, "topic stats"), "topicStatsTable")
        pairs = _read_queue_keyed(o.get("offsetTable"), "topicStatsTable.offsetTable")
        return cls({q: TopicOffset.from_json(v) for q, v in pairs})


@attrs.frozen
class OffsetWrapper:
    """One queue's progress in a :class:`ConsumeStats`: the queue's max offset, the group's
    committed offset, when the last consumed message was stored (ms; 0: none)."""

    broker_offset: int = 0
    consumer_offset: int = 0
    last_timestamp: int = 0

    @property
    def lag(self) -> int:
        """Messages not consumed yet (``brokerOffset - consumerOffset``, at least 0)."""
        return max(self.broker_offset - self.consumer_offset, 0)

    def to_json(self) -> dict[str, Any]:
        """The bean's JSON object."""
        return {
            "brokerOffset": self.broker_offset,
            "consumerOffset": self.consumer_offset,
            "lastTimestamp": self.last_timestamp,
        }

    @classmethod
    def from_json(cls, value: Any) -> Self:
        """From the bean's JSON object.

        Raises:
            RemotingHeaderError: not the bean's shape.
        """
        o = _object(value, "offsetWrapper")
        return cls(
            _int(o.get("brokerOffset", 0), "brokerOffset"),
            _int(o.get("consumerOffset", 0), "consumerOffset"),
            _int(o.get("lastTimestamp", 0), "lastTimestamp"),
        )


@attrs.frozen
class ConsumeStats:
    """GET_CONSUME_STATS's answer body: a group's progress per queue, and its consume rate."""

    offset_table: Mapping[MessageQueue, OffsetWrapper] = attrs.field(factory=dict)
    consume_tps: float = 0.0

    @property
    def total_diff(self) -> int:
        """Messages not consumed yet over every queue (RocketMQ's ``computeTotalDiff``)."""
        return sum(w.broker_offset - w.consumer_offset for w in self.offset_table.values())

    def encode(self) -> bytes:
        """The body (queue objects as keys, as fastjson writes them)."""
        tps = json.dumps(float(self.consume_tps))
        table = _queue_keyed(self.offset_table, OffsetWrapper.to_json)
        return b'{"consumeTps":' + tps.encode() + b',"offsetTable":' + table + b"}"

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """From the body.

        Raises:
            RemotingHeaderError: not the bean's shape.
        """
        o = _object(loads_object_keys(data, "consume stats"), "consumeStats")
        pairs = _read_queue_keyed(o.get("offsetTable"), "consumeStats.offsetTable")
        tps = o.get("consumeTps", 0)
        if isinstance(tps, bool) or not isinstance(tps, int | float):
            raise RemotingHeaderError(f"consumeTps is {tps!r:.40}, not a number")
        return cls({q: OffsetWrapper.from_json(v) for q, v in pairs}, float(tps))


@attrs.frozen(order=True)
class ClientConnection:
    """A client's connection in a :class:`ConsumerConnection` / :class:`ProducerConnection`
    (RocketMQ's ``Connection``): its id, address, language and version."""

    client_id: str
    client_addr: str
    language: str = "JAVA"
    version: int = 0

    def to_json(self) -> dict[str, Any]:
        """The bean's JSON object."""
        return {
            "clientAddr": self.client_addr,
            "clientId": self.client_id,
            "language": self.language,
            "version": self.version,
        }

    @classmethod
    def from_json(cls, value: Any) -> Self:
        """From the bean's JSON object (the language by name or ordinal).

        Raises:
            RemotingHeaderError: not the bean's shape.
        """
        o = _object(value, "connection")
        language = o.get("language", "JAVA")
        if isinstance(language, int) and not isinstance(language, bool):
            try:
                language = LanguageCode(language).name
            except ValueError:
                language = str(language)
        return cls(
            str(o.get("clientId", "")),
            str(o.get("clientAddr", "")),
            str(language),
            _int(o.get("version", 0), "version"),
        )


def _connections(value: Any) -> tuple[ClientConnection, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise RemotingHeaderError("connectionSet is not a JSON array")
    return tuple(sorted(ClientConnection.from_json(c) for c in value))


def _enum_name(kind: Any, value: Any, default: Any) -> Any:
    if value is None:
        return default
    try:
        return kind[value] if isinstance(value, str) else kind(value)
    except (KeyError, ValueError):
        raise RemotingHeaderError(f"{value!r:.40} is not a {kind.__name__}") from None


@attrs.frozen
class ConsumerConnection:
    """GET_CONSUMER_CONNECTION_LIST's answer body: a group's live members and what the group
    subscribes to."""

    connection_set: tuple[ClientConnection, ...] = ()
    subscription_table: Mapping[str, SubscriptionData] = attrs.field(factory=dict)
    consume_type: ConsumeType | None = None
    message_model: MessageModel | None = None
    consume_from_where: ConsumeFromWhere | None = None

    def encode(self) -> bytes:
        """The body."""
        document: dict[str, Any] = {"connectionSet": [c.to_json() for c in self.connection_set]}
        if self.consume_from_where is not None:
            document["consumeFromWhere"] = self.consume_from_where.name
        if self.consume_type is not None:
            document["consumeType"] = self.consume_type.name
        if self.message_model is not None:
            document["messageModel"] = self.message_model.name
        document["subscriptionTable"] = {
            topic: s.to_json() for topic, s in sorted(self.subscription_table.items())
        }
        return body_json(document)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """From the body.

        Raises:
            RemotingHeaderError: not the bean's shape.
        """
        o = _object(loads_object_keys(data, "consumer connection"), "consumerConnection")
        table = _object(o.get("subscriptionTable") or {}, "subscriptionTable")
        return cls(
            _connections(o.get("connectionSet")),
            {topic: SubscriptionData.from_json(s) for topic, s in table.items()},
            _enum_name(ConsumeType, o.get("consumeType"), None),
            _enum_name(MessageModel, o.get("messageModel"), None),
            _enum_name(ConsumeFromWhere, o.get("consumeFromWhere"), None),
        )


@attrs.frozen
class ProducerConnection:
    """GET_PRODUCER_CONNECTION_LIST's answer body: a producer group's live members."""

    connection_set: tuple[ClientConnection, ...] = ()

    def encode(self) -> bytes:
        """The body."""
        return body_json({"connectionSet": [c.to_json() for c in self.connection_set]})

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """From the body.

        Raises:
            RemotingHeaderError: not the bean's shape.
        """
        o = _object(loads_object_keys(data, "producer connection"), "producerConnection")
        return cls(_connections(o.get("connectionSet")))


@attrs.frozen
class ResetOffsetBody:
    """RESET_CONSUMER_CLIENT_OFFSET's body and INVOKE_BROKER_TO_RESET_OFFSET's answer body:
    the offset each queue is reset to."""

    offset_table: Mapping[MessageQueue, int] = attrs.field(factory=dict)

    def encode(self) -> bytes:
        """The body (queue objects as keys, as fastjson writes them)."""
        return b'{"offsetTable":' + _queue_keyed(self.offset_table, lambda o: o) + b"}"

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """From the body.

        Raises:
            RemotingHeaderError: not the bean's shape.
        """
        o = _object(loads_object_keys(data, "reset offset"), "resetOffsetBody")
        pairs = _read_queue_keyed(o.get("offsetTable"), "resetOffsetBody.offsetTable")
        return cls({q: _int(v, f"offset of {q}") for q, v in pairs})


def reset_offset_body_for_c(offsets: Mapping[MessageQueue, int]) -> bytes:
    """RESET_CONSUMER_CLIENT_OFFSET's body when the reset was asked in C++'s language
    (RocketMQ's ``ResetOffsetBodyForC``): ``{"offsetTable":[{"brokerName":..,"offset":..,
    "queueId":..,"topic":..}]}``."""
    table = [
        {"brokerName": q.broker_name, "offset": o, "queueId": q.queue_id, "topic": q.topic}
        for q, o in sorted(offsets.items())
    ]
    return body_json({"offsetTable": table})


# -- Java properties text ---------------------------------------------------------------------


def properties_to_text(properties: Iterable[tuple[str, str]]) -> bytes:
    """``key=value`` lines (RocketMQ's ``MixAll.properties2String``: GET_BROKER_CONFIG's answer
    body, UPDATE_BROKER_CONFIG's request body)."""
    return "".join(f"{key}={value}\n" for key, value in properties).encode()


def text_to_properties(data: bytes | bytearray | memoryview | str) -> dict[str, str]:
    """The ``key=value`` (or ``key:value``) lines of a properties body; blank lines and ``#`` /
    ``!`` comments skipped.

    Raises:
        RemotingHeaderError: not UTF-8, or a line that is neither.
    """
    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RemotingHeaderError(f"properties body is not UTF-8: {exc}") from None
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((line.find(sep) for sep in "=:" if sep in line), default=-1)
        if cut <= 0:
            raise RemotingHeaderError(f"properties line {number} is not key=value: {line!r:.80}")
        out[line[:cut].strip()] = line[cut + 1 :].strip()
    return out
