"""The name server's messages in RocketMQ 4.9.8's shapes: headers, route and registration bodies.

Each schema is defined once here, its encode beside its decode, and both the name server and
its clients (a broker registering, a client looking a route up) import it:

- custom headers (the ext fields of a command): :class:`RegisterBrokerRequestHeader`,
  :class:`RegisterBrokerResponseHeader`, :class:`UnregisterBrokerRequestHeader`,
  :class:`GetRouteInfoRequestHeader`, :class:`GetKVConfigRequestHeader`,
  :class:`GetKVConfigResponseHeader`, :class:`GetKVListByNamespaceRequestHeader`,
  :class:`PutKVConfigRequestHeader`,
  :class:`DeleteKVConfigRequestHeader`, :class:`QueryDataVersionRequestHeader`,
  :class:`QueryDataVersionResponseHeader`, :class:`GetTopicsByClusterRequestHeader`; each
  with ``from_fields`` (raises :class:`~hanet.protocol.RemotingHeaderError` on a missing or
  malformed field) and ``to_fields``;
- JSON bodies (fastjson's shapes, bean fields in alphabetical order): :class:`DataVersion`,
  :class:`TopicConfig`, :class:`TopicConfigSerializeWrapper`, :class:`RegisterBrokerBody`
  (also in its ``compressed`` form), :class:`QueueData`, :class:`BrokerData`,
  :class:`TopicRouteData`, :class:`ClusterInfo`, :class:`TopicList`, :class:`KVTable`; each
  with ``to_json``/``from_json`` (a decoded JSON value) and ``encode``/``decode`` (bytes).
  A body that does not decode raises :class:`~hanet.protocol.RemotingHeaderError` too.

hanet's own view of them, what its broker and clients use: :class:`BrokerRegistration` (what a
broker registers), :class:`RegisterBrokerResponse` (what the name server answers it),
:class:`TopicRoute` and :class:`RouteBroker` (a topic's route, per broker name).

Broker address keys (``BrokerData.brokerAddrs``, keyed by broker id) are written bare
(``{0:"host:port"}``) by RocketMQ's name server except in route answers to requesters of
version 4.9.4 and later (:func:`route_standard_json`); both forms decode.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from typing import Any, ClassVar, Self, cast

import attrs

from . import _fastjson
from ._codes import RequestCode
from ._remoting import RemotingCommand, RemotingHeaderError

__all__ = [
    "MASTER_ID",
    "MAX_REGISTER_BODY",
    "PERM_INHERIT",
    "PERM_READ",
    "PERM_WRITE",
    "V4_9_4",
    "BrokerData",
    "BrokerRegistration",
    "ClusterInfo",
    "DataVersion",
    "DeleteKVConfigRequestHeader",
    "GetKVConfigRequestHeader",
    "GetKVConfigResponseHeader",
    "GetKVListByNamespaceRequestHeader",
    "GetRouteInfoRequestHeader",
    "GetTopicsByClusterRequestHeader",
    "KVTable",
    "PutKVConfigRequestHeader",
    "QueryDataVersionRequestHeader",
    "QueryDataVersionResponseHeader",
    "QueueData",
    "RegisterBrokerBody",
    "RegisterBrokerRequestHeader",
    "RegisterBrokerResponse",
    "RegisterBrokerResponseHeader",
    "RouteBroker",
    "TopicConfig",
    "TopicConfigSerializeWrapper",
    "TopicList",
    "TopicRoute",
    "TopicRouteData",
    "UnregisterBrokerRequestHeader",
    "body_crc32",
    "route_standard_json",
]

MASTER_ID = 0
"""The broker id of a master (RocketMQ's ``MixAll.MASTER_ID``); slaves are 1 and up."""

V4_9_4 = 401
"""``MQVersion.Version.V4_9_4.ordinal()``: from this version on, a route answer quotes the
broker address keys (RocketMQ's ``DefaultRequestProcessor.getRouteInfoByTopic``)."""

PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4
"""RocketMQ's ``PermName`` bits (a topic's ``perm``)."""

MAX_REGISTER_BODY = 64 * 1024 * 1024
"""Most bytes a compressed registration body may inflate to (more is refused, not read)."""

_I32 = (-(1 << 31), (1 << 31) - 1)
_I64 = (-(1 << 63), (1 << 63) - 1)
_U32 = struct.Struct(">i")


def body_crc32(body: bytes | bytearray | memoryview) -> int:
    """RocketMQ's ``UtilAll.crc32``: the CRC-32 of ``body`` with its top bit cleared."""
    return zlib.crc32(body) & 0x7FFFFFFF


def route_standard_json(version: int, accept_standard_json_only: bool | None = None) -> bool:
    """Whether a route answer to a requester of ``version`` quotes its broker address keys."""
    return version >= V4_9_4 or bool(accept_standard_json_only)


# -- custom headers -----------------------------------------------------------------------------


def _header_field(
    wire: str, kind: type = str, *, required: bool = True, default: Any = None
) -> Any:
    """An attrs field of a custom header: its ext field name, type and whether it must be there
    (RocketMQ's ``@CFNotNull``)."""
    meta = {"wire": wire, "kind": kind, "required": required}
    if required:
        return attrs.field(metadata=meta)
    return attrs.field(default=default, metadata=meta)


def _parse(cls_name: str, wire: str, kind: type, text: str) -> Any:
    if kind is str:
        return text
    if kind is bool:
        return text.strip().lower() == "true"  # Java's Boolean.parseBoolean
    try:
        value = int(text.strip())
    except ValueError:
        raise RemotingHeaderError(f"{cls_name}: {wire} {text!r} is not a number") from None
    if not _I64[0] <= value <= _I64[1]:
        raise RemotingHeaderError(f"{cls_name}: {wire} {value} does not fit 64 bits")
    return value


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class _Header:
    """``from_fields`` / ``to_fields`` for an attrs class of :func:`_header_field` fields."""

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> Self:
        """The header in a command's ext fields (unknown fields are ignored).

        Raises:
            RemotingHeaderError: a required field is missing, or a number is not one.
        """
        values: dict[str, Any] = {}
        for field in attrs.fields(cast(Any, cls)):
            meta = field.metadata
            text = fields.get(meta["wire"])
            if text is None:
                if meta["required"]:
                    raise RemotingHeaderError(
                        f"{cls.__name__}: the field {meta['wire']} is missing"
                    )
                continue
            values[field.name] = _parse(cls.__name__, meta["wire"], meta["kind"], text)
        return cls(**values)

    def to_fields(self) -> dict[str, str]:
        """The ext fields of this header (fields that are None are left out)."""
        out: dict[str, str] = {}
        for field in attrs.fields(cast(Any, type(self))):
            value = getattr(self, field.name)
            if value is not None:
                out[field.metadata["wire"]] = _format(value)
        return out


@attrs.frozen
class RegisterBrokerRequestHeader(_Header):
    """REGISTER_BROKER's header; the body is a :class:`RegisterBrokerBody`.

    ``body_crc32`` is :func:`body_crc32` of the body as sent (0: not checked);
    ``compressed``: the body is in :meth:`RegisterBrokerBody.encode`'s compressed form.
    """

    broker_name: str = _header_field("brokerName")
    broker_addr: str = _header_field("brokerAddr")
    cluster_name: str = _header_field("clusterName")
    ha_server_addr: str = _header_field("haServerAddr")
    broker_id: int = _header_field("brokerId", int)
    compressed: bool = _header_field("compressed", bool, required=False, default=False)
    body_crc32: int = _header_field("bodyCrc32", int, required=False, default=0)


@attrs.frozen
class RegisterBrokerResponseHeader(_Header):
    """REGISTER_BROKER's answer header: a slave's master broker and HA addresses (None for a
    master, or when its master is not registered)."""

    ha_server_addr: str | None = _header_field("haServerAddr", required=False)
    master_addr: str | None = _header_field("masterAddr", required=False)


@attrs.frozen
class UnregisterBrokerRequestHeader(_Header):
    """UNREGISTER_BROKER's header (RocketMQ's ``UnRegisterBrokerRequestHeader``)."""

    broker_name: str = _header_field("brokerName")
    broker_addr: str = _header_field("brokerAddr")
    cluster_name: str = _header_field("clusterName")
    broker_id: int = _header_field("brokerId", int)


@attrs.frozen
class GetRouteInfoRequestHeader(_Header):
    """GET_ROUTEINFO_BY_TOPIC's header."""

    topic: str = _header_field("topic")
    accept_standard_json_only: bool | None = _header_field(
        "acceptStandardJsonOnly", bool, required=False
    )


@attrs.frozen
class GetKVConfigRequestHeader(_Header):
    """GET_KV_CONFIG's header."""

    namespace: str = _header_field("namespace")
    key: str = _header_field("key")


@attrs.frozen
class GetKVConfigResponseHeader(_Header):
    """GET_KV_CONFIG's answer header."""

    value: str | None = _header_field("value", required=False)


@attrs.frozen
class PutKVConfigRequestHeader(_Header):
    """PUT_KV_CONFIG's header."""

    namespace: str = _header_field("namespace")
    key: str = _header_field("key")
    value: str = _header_field("value")


@attrs.frozen
class DeleteKVConfigRequestHeader(_Header):
    """DELETE_KV_CONFIG's header."""

    namespace: str = _header_field("namespace")
    key: str = _header_field("key")


@attrs.frozen
class GetKVListByNamespaceRequestHeader(_Header):
    """GET_KVLIST_BY_NAMESPACE's header; the answer's body is a :class:`KVTable`."""

    namespace: str = _header_field("namespace")


@attrs.frozen
class QueryDataVersionRequestHeader(_Header):
    """QUERY_DATA_VERSION's header; the body is the broker's :class:`DataVersion`."""

    broker_name: str = _header_field("brokerName")
    broker_addr: str = _header_field("brokerAddr")
    cluster_name: str = _header_field("clusterName")
    broker_id: int = _header_field("brokerId", int)


@attrs.frozen
class QueryDataVersionResponseHeader(_Header):
    """QUERY_DATA_VERSION's answer header: whether the broker's topic config changed since the
    name server last took it (the body is the name server's :class:`DataVersion`, if any)."""

    changed: bool = _header_field("changed", bool)


@attrs.frozen
class GetTopicsByClusterRequestHeader(_Header):
    """GET_TOPICS_BY_CLUSTER's header."""

    cluster: str = _header_field("cluster")


# -- JSON bodies --------------------------------------------------------------------------------


def _obj(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise RemotingHeaderError(f"{what} is not a JSON object")
    return value


def _get(data: Mapping[str, Any], key: str, default: Any) -> Any:
    value = data.get(key)
    return default if value is None else value  # fastjson writes a null as no key at all


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise RemotingHeaderError(f"{what} is not a JSON array")
    return value


def _int(value: Any, what: str, bounds: tuple[int, int] = _I32) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RemotingHeaderError(f"{what} is not an integer: {value!r}")
    if not bounds[0] <= value <= bounds[1]:
        raise RemotingHeaderError(f"{what} {value} is out of range")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise RemotingHeaderError(f"{what} is not a string: {value!r}")
    return value


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise RemotingHeaderError(f"{what} is not a boolean: {value!r}")
    return value


def _strings(value: Any, what: str) -> tuple[str, ...]:
    return tuple(_str(v, f"an item of {what}") for v in _list(value, what))


def _loads(data: bytes | bytearray | memoryview, what: str) -> Any:
    try:
        return _fastjson.loads(data)
    except ValueError as exc:
        raise RemotingHeaderError(f"{what} body: {exc}") from None


class _Body:
    """``encode`` / ``decode`` over ``to_json`` / ``from_json``."""

    _what: ClassVar[str] = "body"

    def to_json(self) -> dict[str, Any]:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    @classmethod
    def from_json(cls, data: Any) -> Self:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def encode(self) -> bytes:
        """The body as fastjson writes it (bare integer keys, UTF-8)."""
        return _fastjson.dumps(self.to_json(), bare_int_keys=True)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> Self:
        """The body from its JSON (bare keys accepted).

        Raises:
            RemotingHeaderError: not JSON, or a field missing or of the wrong type.
        """
        return cls.from_json(_loads(data, cls._what))


@attrs.frozen
class DataVersion(_Body):
    """A broker's topic config version: when and how often it changed (RocketMQ's
    ``DataVersion``); equal versions mean an unchanged config."""

    _what = "DataVersion"

    timestamp: int = 0
    counter: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, "dataVersion")
        return cls(
            timestamp=_int(d.get("timestamp", 0), "dataVersion.timestamp", _I64),
            counter=_int(d.get("counter", 0), "dataVersion.counter", _I64),
        )

    def next(self, now_ms: int) -> DataVersion:
        """The version after a change at ``now_ms`` (RocketMQ's ``nextVersion``)."""
        return DataVersion(now_ms, self.counter + 1)


@attrs.frozen
class TopicConfig(_Body):
    """A topic on a broker (RocketMQ's ``TopicConfig``; defaults as Java's)."""

    _what = "TopicConfig"

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, data: Any, name: str | None = None) -> Self:
        """``name``: the table key, used when the entry has no ``topicName``."""
        d = _obj(data, f"topic config {name!r}")
        topic = d.get("topicName", name)
        what = f"topic {topic!r}"
        return cls(
            topic_name=_str(topic, f"{what}: topicName"),
            read_queue_nums=_int(d.get("readQueueNums", 16), f"{what}: readQueueNums"),
            write_queue_nums=_int(d.get("writeQueueNums", 16), f"{what}: writeQueueNums"),
            perm=_int(d.get("perm", PERM_READ | PERM_WRITE), f"{what}: perm"),
            topic_filter_type=_str(d.get("topicFilterType", "SINGLE_TAG"), f"{what}: filter"),
            topic_sys_flag=_int(d.get("topicSysFlag", 0), f"{what}: topicSysFlag"),
            order=_bool(d.get("order", False), f"{what}: order"),
        )

    def encode_text(self) -> str:
        """RocketMQ's ``TopicConfig.encode``: ``name read write perm filterType`` (the
        compressed registration body's form)."""
        return (
            f"{self.topic_name} {self.read_queue_nums} {self.write_queue_nums} "
            f"{self.perm} {self.topic_filter_type}"
        )

    @classmethod
    def decode_text(cls, text: str) -> Self:
        """The inverse of :meth:`encode_text`.

        Raises:
            RemotingHeaderError: not five space-separated fields, or a number that is not one.
        """
        parts = text.split(" ")
        if len(parts) != 5 or parts[4] not in ("SINGLE_TAG", "MULTI_TAG"):
            raise RemotingHeaderError(f"topic config {text[:200]!r} is not 'name r w perm type'")
        try:
            read, write, perm = (int(p) for p in parts[1:4])
        except ValueError:
            raise RemotingHeaderError(f"topic config {text[:200]!r} has a bad number") from None
        return cls(parts[0], read, write, perm, parts[4])


@attrs.frozen
class TopicConfigSerializeWrapper(_Body):
    """A broker's topic config table and its version."""

    _what = "TopicConfigSerializeWrapper"

    topic_config_table: Mapping[str, TopicConfig] = attrs.field(factory=dict)
    data_version: DataVersion = attrs.field(factory=DataVersion)

    def to_json(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json(),
            "topicConfigTable": {k: v.to_json() for k, v in self.topic_config_table.items()},
        }

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, "topicConfigSerializeWrapper")
        table = _obj(d.get("topicConfigTable", {}), "topicConfigTable")
        return cls(
            {name: TopicConfig.from_json(entry, name) for name, entry in table.items()},
            DataVersion.from_json(d.get("dataVersion", {})),
        )


def _inflate(data: bytes | bytearray | memoryview) -> memoryview:
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(bytes(data), MAX_REGISTER_BODY)
    except zlib.error as exc:
        raise RemotingHeaderError(
            f"compressed RegisterBrokerBody does not inflate: {exc}"
        ) from None
    if inflater.unconsumed_tail:
        raise RemotingHeaderError(
            f"compressed RegisterBrokerBody inflates to more than {MAX_REGISTER_BODY} bytes"
        )
    return memoryview(out)


class _Reader:
    def __init__(self, data: memoryview) -> None:
        self.data = data
        self.pos = 0

    def chunk(self, what: str) -> memoryview:
        if len(self.data) - self.pos < 4:
            raise RemotingHeaderError(f"compressed RegisterBrokerBody ends before {what}")
        (length,) = _U32.unpack_from(self.data, self.pos)
        self.pos += 4
        if not 0 <= length <= len(self.data) - self.pos:
            raise RemotingHeaderError(f"compressed RegisterBrokerBody: {what} runs past its end")
        out = self.data[self.pos : self.pos + length]
        self.pos += length
        return out

    def count(self, what: str) -> int:
        if len(self.data) - self.pos < 4:
            raise RemotingHeaderError(f"compressed RegisterBrokerBody ends before {what}")
        (n,) = _U32.unpack_from(self.data, self.pos)
        self.pos += 4
        if n < 0:
            raise RemotingHeaderError(f"compressed RegisterBrokerBody: {what} is negative")
        return int(n)


@attrs.frozen
class RegisterBrokerBody(_Body):
    """REGISTER_BROKER's body: the broker's topics and the filter servers it runs."""

    _what = "RegisterBrokerBody"

    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = attrs.field(
        factory=TopicConfigSerializeWrapper
    )
    filter_server_list: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "filterServerList": list(self.filter_server_list),
            "topicConfigSerializeWrapper": self.topic_config_serialize_wrapper.to_json(),
        }

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, "RegisterBrokerBody")
        return cls(
            TopicConfigSerializeWrapper.from_json(d.get("topicConfigSerializeWrapper", {})),
            _strings(d.get("filterServerList", []), "filterServerList"),
        )

    def encode_compressed(self) -> bytes:
        """RocketMQ's ``encode(true)``: a zlib stream of length-prefixed parts (the data
        version's JSON, the topic count, each topic's :meth:`TopicConfig.encode_text`, the
        filter server list's JSON). Only the fields of the text form survive."""
        wrapper = self.topic_config_serialize_wrapper
        parts = [wrapper.data_version.encode()]
        out = bytearray()
        out += _U32.pack(len(parts[0])) + parts[0]
        out += _U32.pack(len(wrapper.topic_config_table))
        for config in wrapper.topic_config_table.values():
            text = config.encode_text().encode()
            out += _U32.pack(len(text)) + text
        servers = _fastjson.dumps(list(self.filter_server_list))
        out += _U32.pack(len(servers)) + servers
        return zlib.compress(bytes(out), 9)

    @classmethod
    def decode_body(cls, data: bytes | bytearray | memoryview, compressed: bool) -> Self:
        """The body as the header says it is sent (RocketMQ's ``decode(data, compressed)``).

        Raises:
            RemotingHeaderError: it does not decode.
        """
        if not compressed:
            return cls.decode(data)
        reader = _Reader(_inflate(data))
        version = DataVersion.decode(reader.chunk("the data version"))
        table: dict[str, TopicConfig] = {}
        for i in range(reader.count("the topic count")):
            raw = reader.chunk(f"topic config {i}")
            try:
                text = str(raw, "utf-8")
            except UnicodeDecodeError:
                raise RemotingHeaderError(f"topic config {i} is not UTF-8") from None
            config = TopicConfig.decode_text(text)
            table[config.topic_name] = config
        servers = _strings(_loads(reader.chunk("the filter servers"), cls._what), "filters")
        return cls(TopicConfigSerializeWrapper(table, version), servers)


@attrs.frozen
class QueueData(_Body):
    """A topic's queues on one broker name (in a :class:`TopicRouteData`)."""

    _what = "QueueData"

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ | PERM_WRITE
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, "queueData")
        name = _str(d.get("brokerName"), "queueData.brokerName")
        what = f"queueData of {name!r}"
        return cls(
            broker_name=name,
            read_queue_nums=_int(d.get("readQueueNums"), f"{what}: readQueueNums"),
            write_queue_nums=_int(d.get("writeQueueNums"), f"{what}: writeQueueNums"),
            perm=_int(d.get("perm", PERM_READ | PERM_WRITE), f"{what}: perm"),
            topic_sys_flag=_int(d.get("topicSysFlag", 0), f"{what}: topicSysFlag"),
        )


def _broker_addrs(value: Any, what: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for key, address in _obj(value, what).items():
        try:
            broker_id = int(key)
        except ValueError:
            raise RemotingHeaderError(f"{what}: broker id {key!r} is not a number") from None
        out[_int(broker_id, f"{what}: broker id", _I64)] = _str(address, f"{what}[{key}]")
    return out


@attrs.frozen
class BrokerData(_Body):
    """A broker name's members: broker id (0: the master) -> broker address."""

    _what = "BrokerData"

    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerAddrs": dict(sorted(self.broker_addrs.items())),
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, "brokerData")
        name = _str(d.get("brokerName"), "brokerData.brokerName")
        return cls(
            cluster=_str(d.get("cluster", ""), f"brokerData {name!r}: cluster"),
            broker_name=name,
            broker_addrs=_broker_addrs(d.get("brokerAddrs", {}), f"brokerAddrs of {name!r}"),
        )


@attrs.frozen
class TopicRouteData(_Body):
    """GET_ROUTEINFO_BY_TOPIC's answer: the topic's queues per broker name, and each broker
    name's members."""

    _what = "TopicRouteData"

    queue_datas: tuple[QueueData, ...] = ()
    broker_datas: tuple[BrokerData, ...] = ()
    filter_server_table: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    order_topic_conf: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "brokerDatas": [b.to_json() for b in self.broker_datas],
            "filterServerTable": {k: list(v) for k, v in sorted(self.filter_server_table.items())},
        }
        if self.order_topic_conf is not None:
            out["orderTopicConf"] = self.order_topic_conf
        out["queueDatas"] = [q.to_json() for q in self.queue_datas]
        return out

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, "TopicRouteData")
        order = d.get("orderTopicConf")
        table = _obj(_get(d, "filterServerTable", {}), "filterServerTable")
        return cls(
            queue_datas=tuple(
                QueueData.from_json(q) for q in _list(_get(d, "queueDatas", []), "queueDatas")
            ),
            broker_datas=tuple(
                BrokerData.from_json(b) for b in _list(_get(d, "brokerDatas", []), "brokerDatas")
            ),
            filter_server_table={
                k: _strings(v, f"filter servers of {k}") for k, v in table.items()
            },
            order_topic_conf=None if order is None else _str(order, "orderTopicConf"),
        )

    def encode_for(self, standard_json: bool) -> bytes:
        """The answer's body: with ``standard_json`` (:func:`route_standard_json`) quoted keys
        and ASCII-only text, as 4.9.8 writes for 4.9.4+ requesters; otherwise fastjson's
        default (bare broker id keys)."""
        if standard_json:
            return _fastjson.dumps(self.to_json(), ascii_only=True)
        return self.encode()


@attrs.frozen
class ClusterInfo(_Body):
    """GET_BROKER_CLUSTER_INFO's answer: every broker name's members, and each cluster's
    broker names. Always written with bare broker id keys, as 4.9.8 does."""

    _what = "ClusterInfo"

    broker_addr_table: Mapping[str, BrokerData] = attrs.field(factory=dict)
    cluster_addr_table: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {k: v.to_json() for k, v in self.broker_addr_table.items()},
            "clusterAddrTable": {k: list(v) for k, v in self.cluster_addr_table.items()},
        }

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, "ClusterInfo")
        brokers = _obj(_get(d, "brokerAddrTable", {}), "brokerAddrTable")
        clusters = _obj(_get(d, "clusterAddrTable", {}), "clusterAddrTable")
        return cls(
            {k: BrokerData.from_json(v) for k, v in brokers.items()},
            {k: _strings(v, f"broker names of {k}") for k, v in clusters.items()},
        )

    def members(self) -> list[tuple[str, str, int, str]]:
        """Every registered broker as ``(cluster, broker name, broker id, address)``, sorted."""
        return sorted(
            (data.cluster, name, broker_id, address)
            for name, data in self.broker_addr_table.items()
            for broker_id, address in data.broker_addrs.items()
        )

    def master_addresses(self) -> list[str]:
        """Each broker name's master address (broker names in order; none when no master)."""
        return [
            data.broker_addrs[MASTER_ID]
            for _, data in sorted(self.broker_addr_table.items())
            if MASTER_ID in data.broker_addrs
        ]


@attrs.frozen
class TopicList(_Body):
    """A list of topic names (GET_ALL_TOPIC_LIST_FROM_NAMESERVER, GET_TOPICS_BY_CLUSTER)."""

    _what = "TopicList"

    topic_list: tuple[str, ...] = ()
    broker_addr: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.broker_addr is not None:
            out["brokerAddr"] = self.broker_addr
        out["topicList"] = list(self.topic_list)
        return out

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, "TopicList")
        addr = d.get("brokerAddr")
        return cls(
            _strings(_get(d, "topicList", []), "topicList"),
            None if addr is None else _str(addr, "brokerAddr"),
        )


@attrs.frozen
class KVTable(_Body):
    """A namespace's key/value pairs (a REGISTER_BROKER answer's body: the order topic
    config)."""

    _what = "KVTable"

    table: Mapping[str, str] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"table": dict(self.table)}

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, "KVTable")
        table = _obj(_get(d, "table", {}), "KVTable.table")
        return cls({k: _str(v, f"KVTable[{k}]") for k, v in table.items()})


# -- hanet's view -------------------------------------------------------------------------------


@attrs.frozen
class BrokerRegistration:
    """What a broker registers (sent every 30 s; expires after 120 s without one).

    Attributes:
        cluster: the cluster name (RocketMQ's ``brokerClusterName``).
        broker_name: the master/slave set's name: a master and its slaves share it.
        broker_id: 0 for the master, 1 and up for slaves.
        role: ``ASYNC_MASTER``, ``SYNC_MASTER`` or ``SLAVE`` (not on the wire: RocketMQ
            tells a master by its id).
        broker_address: the broker port (``host:port``) clients connect to.
        ha_address: a master's HA port (``host:port``), "" for none.
        topics: ``(topic, queues)`` the broker holds (read and write queues alike).
        data_version: the topic config's version (None: made from the topics by whoever
            sends it).
        topic_configs: full topic configs (permissions, read and write queues apart, order),
            registered instead of the ``topics`` entry of the same name.
    """

    cluster: str
    broker_name: str
    broker_id: int
    role: str
    broker_address: str
    ha_address: str = ""
    topics: tuple[tuple[str, int], ...] = ()
    data_version: DataVersion | None = None
    topic_configs: tuple[TopicConfig, ...] = ()

    def header(self, body: bytes | bytearray | memoryview) -> RegisterBrokerRequestHeader:
        """REGISTER_BROKER's header for this registration and its encoded ``body``."""
        return RegisterBrokerRequestHeader(
            broker_name=self.broker_name,
            broker_addr=self.broker_address,
            cluster_name=self.cluster,
            ha_server_addr=self.ha_address,
            broker_id=self.broker_id,
            compressed=False,
            body_crc32=body_crc32(body),
        )

    def body(self, data_version: DataVersion | None = None) -> RegisterBrokerBody:
        """REGISTER_BROKER's body: a topic config per topic (read/write, as many read as write
        queues; or its :attr:`topic_configs` entry) and the data version (``data_version`` or
        the registration's)."""
        version = data_version or self.data_version or DataVersion()
        table = {name: TopicConfig(name, queues, queues) for name, queues in self.topics}
        table.update((config.topic_name, config) for config in self.topic_configs)
        return RegisterBrokerBody(TopicConfigSerializeWrapper(table, version))

    def request(self, data_version: DataVersion | None = None) -> RemotingCommand:
        """The REGISTER_BROKER command (uncompressed body, its CRC in the header)."""
        body = self.body(data_version).encode()
        return RemotingCommand.request(
            RequestCode.REGISTER_BROKER, self.header(body).to_fields(), body
        )

    def unregister_request(self) -> RemotingCommand:
        """The UNREGISTER_BROKER command for this broker."""
        header = UnregisterBrokerRequestHeader(
            broker_name=self.broker_name,
            broker_addr=self.broker_address,
            cluster_name=self.cluster,
            broker_id=self.broker_id,
        )
        return RemotingCommand.request(RequestCode.UNREGISTER_BROKER, header.to_fields())


@attrs.frozen
class RegisterBrokerResponse:
    """What a name server answered a registration: for a slave, its master's broker and HA
    addresses when that master is registered (how a slave without ``--master-ha`` finds its
    master); None otherwise. ``kv_table``: the answer's body (the order topic config), if any.
    """

    master_address: str | None = None
    master_ha_address: str | None = None
    kv_table: KVTable | None = None

    @classmethod
    def from_command(cls, response: RemotingCommand) -> Self:
        """The answer of a successful REGISTER_BROKER (empty addresses read as None).

        Raises:
            RemotingHeaderError: a body that is not a :class:`KVTable`.
        """
        header = RegisterBrokerResponseHeader.from_fields(response.fields)
        table = KVTable.decode(response.body) if len(response.body) else None
        return cls(header.master_addr or None, header.ha_server_addr or None, table)

    def header(self) -> RegisterBrokerResponseHeader:
        """The answer's header."""
        return RegisterBrokerResponseHeader(self.master_ha_address, self.master_address)


@attrs.frozen
class RouteBroker:
    """One broker name in a topic's route.

    Attributes:
        broker_name: the master/slave set.
        queues: the topic's (read) queues on it: what consumers divide among them.
        addresses: ``(broker_id, broker_address)`` of each live member, master (0) first.
        write_queues: the queues producers spread puts over (default: ``queues``).
        perm: the topic's permission bits there (:data:`PERM_READ`, :data:`PERM_WRITE`).
    """

    broker_name: str
    queues: int
    addresses: tuple[tuple[int, str], ...]
    write_queues: int = attrs.field(
        default=attrs.Factory(lambda self: self.queues, takes_self=True)
    )
    perm: int = PERM_READ | PERM_WRITE

    @property
    def master_address(self) -> str | None:
        """The master's broker port, or None when no master is registered."""
        return self.address_of(MASTER_ID)

    def address_of(self, broker_id: int) -> str | None:
        """The broker port of member ``broker_id``, or None."""
        for member, address in self.addresses:
            if member == broker_id:
                return address
        return None


@attrs.frozen
class TopicRoute:
    """A topic's route: every broker name holding it, in name order."""

    topic: str
    brokers: tuple[RouteBroker, ...]

    @classmethod
    def from_route_data(cls, topic: str, data: TopicRouteData) -> Self:
        """hanet's view of a :class:`TopicRouteData`: one :class:`RouteBroker` per broker name
        that has both queue data and members, by name; members by id."""
        members = {b.broker_name: b for b in data.broker_datas}
        brokers = []
        for queue in sorted(data.queue_datas, key=lambda q: q.broker_name):
            broker = members.get(queue.broker_name)
            if broker is None:
                continue
            brokers.append(
                RouteBroker(
                    queue.broker_name,
                    queue.read_queue_nums,
                    tuple(sorted(broker.broker_addrs.items())),
                    write_queues=queue.write_queue_nums,
                    perm=queue.perm,
                )
            )
        return cls(topic, tuple(brokers))

    def to_route_data(self, cluster: str = "") -> TopicRouteData:
        """The :class:`TopicRouteData` of this route (``cluster`` for each broker name)."""
        return TopicRouteData(
            tuple(QueueData(b.broker_name, b.queues, b.write_queues, b.perm) for b in self.brokers),
            tuple(BrokerData(cluster, b.broker_name, dict(b.addresses)) for b in self.brokers),
        )
