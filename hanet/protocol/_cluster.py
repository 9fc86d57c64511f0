"""The cluster's requests: consumer offsets, a slave's metadata sync, and the name server.

They share the broker port's framing and codec (:mod:`hanet.protocol._messages`); a port that
does not serve a request answers ERROR ``NOT_SUPPORTED``. Layouts (big-endian, ``str`` = u16
length + UTF-8)::

    COMMIT_OFFSET      0x04  str group | str topic | i32 queue_id | i64 offset
    COMMIT_OFFSET_OK   0x84  (empty)
    QUERY_OFFSET       0x05  str group | str topic | i32 queue_id
    QUERY_OFFSET_OK    0x85  i64 offset (-1: the group never committed one for this queue)
    SYNC_METADATA      0x06  (empty): what a slave copies from its master
    SYNC_METADATA_OK   0x86  a UTF-8 JSON object (:class:`BrokerMetadata`)
    CONSUMER_HEARTBEAT 0x07  str group | str client_id
    CONSUMER_HEARTBEAT_OK 0x87  (empty)
    UNREGISTER_CONSUMER 0x08  str group | str client_id
    UNREGISTER_CONSUMER_OK 0x88  (empty)
    GET_CONSUMER_LIST  0x09  str group
    GET_CONSUMER_LIST_OK 0x89  u16 n | n x str client_id (sorted)

    REGISTER_BROKER    0x10  str cluster | str broker_name | i64 broker_id | str role
                             | str broker_address | str ha_address ("": none)
                             | u32 n | n x (str topic | i32 queues)
    REGISTER_BROKER_OK 0x90  str master_address | str master_ha_address ("": not known)
    UNREGISTER_BROKER  0x11  str cluster | str broker_name | i64 broker_id | str broker_address
    UNREGISTER_OK      0x91  (empty)
    GET_ROUTE          0x12  str topic
    GET_ROUTE_OK       0x92  str topic | u16 n | n x (str broker_name | i32 queues
                             | u16 m | m x (i64 broker_id | str broker_address))
    GET_CLUSTER        0x13  (empty)
    GET_CLUSTER_OK     0x93  a UTF-8 JSON object (:class:`ClusterInfo`)

Broker ids are RocketMQ's: 0 is the master of a broker name, 1 and up its slaves. A topic the
name server knows no broker for answers ERROR ``TOPIC_NOT_EXIST``.

A consumer heartbeats its group and client id to the brokers (RocketMQ's ``HEART_BEAT``); the
members of a group are the ids heard from within the expiry (120 s) and not unregistered
(``UNREGISTER_CLIENT``); GET_CONSUMER_LIST is RocketMQ's ``GET_CONSUMER_LIST_BY_GROUP``, which
each member uses to take its share of a topic's queues.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

__all__ = [
    "MASTER_ID",
    "BrokerLiveInfo",
    "BrokerMetadata",
    "BrokerRegistration",
    "ClusterInfo",
    "ClusterRequest",
    "ClusterResponse",
    "CommitOffsetRequest",
    "CommitOffsetResponse",
    "ConsumerHeartbeatRequest",
    "ConsumerHeartbeatResponse",
    "ConsumerListRequest",
    "ConsumerListResponse",
    "MetadataError",
    "MetadataRequest",
    "MetadataResponse",
    "QueryOffsetRequest",
    "QueryOffsetResponse",
    "RegisterBrokerRequest",
    "RegisterBrokerResponse",
    "RouteBroker",
    "RouteRequest",
    "RouteResponse",
    "TopicRoute",
    "UnregisterBrokerRequest",
    "UnregisterBrokerResponse",
    "UnregisterConsumerRequest",
    "UnregisterConsumerResponse",
    "offsets_from_json",
    "offsets_to_json",
]

MASTER_ID = 0
"""The broker id of a master (RocketMQ's ``MixAll.MASTER_ID``)."""


class MetadataError(ValueError):
    """A metadata or cluster JSON document that is not well-formed (the codec turns it into
    a CorruptedFrameError)."""


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise MetadataError(f"{what} is not a JSON object")
    return value


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MetadataError(f"{what} is not an integer: {value!r}")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise MetadataError(f"{what} is not a string: {value!r}")
    return value


# -- consumer offsets (broker port) ----------------------------------------------------------


@attrs.frozen
class CommitOffsetRequest:
    """COMMIT_OFFSET: the group consumed the queue up to ``offset`` (the next to read)."""

    request_id: int
    group: str
    topic: str
    queue_id: int
    offset: int


@attrs.frozen
class CommitOffsetResponse:
    """COMMIT_OFFSET_OK: the offset is recorded (persisted within the flush interval)."""

    request_id: int


@attrs.frozen
class QueryOffsetRequest:
    """QUERY_OFFSET: the group's committed offset of a queue."""

    request_id: int
    group: str
    topic: str
    queue_id: int


@attrs.frozen
class QueryOffsetResponse:
    """QUERY_OFFSET_OK: the committed offset, or -1 when the group has none for the queue."""

    request_id: int
    offset: int


# -- consumer group membership (broker port) ------------------------------------------------


@attrs.frozen
class ConsumerHeartbeatRequest:
    """CONSUMER_HEARTBEAT: ``client_id`` is a live member of ``group`` (RocketMQ's
    ``HEART_BEAT``)."""

    request_id: int
    group: str
    client_id: str


@attrs.frozen
class ConsumerHeartbeatResponse:
    """CONSUMER_HEARTBEAT_OK."""

    request_id: int


@attrs.frozen
class UnregisterConsumerRequest:
    """UNREGISTER_CONSUMER: ``client_id`` leaves ``group`` at once (a clean shutdown)."""

    request_id: int
    group: str
    client_id: str


@attrs.frozen
class UnregisterConsumerResponse:
    """UNREGISTER_CONSUMER_OK."""

    request_id: int


@attrs.frozen
class ConsumerListRequest:
    """GET_CONSUMER_LIST: the group's live members (RocketMQ's
    ``GET_CONSUMER_LIST_BY_GROUP``)."""

    request_id: int
    group: str


@attrs.frozen
class ConsumerListResponse:
    """GET_CONSUMER_LIST_OK: the client ids of the group's live members, sorted."""

    request_id: int
    client_ids: tuple[str, ...]


# -- a slave's metadata sync (broker port) ---------------------------------------------------


@attrs.frozen
class MetadataRequest:
    """SYNC_METADATA: the broker's topic config and consumer offsets."""

    request_id: int


OffsetTable = Mapping[tuple[str, str], Mapping[int, int]]
"""Committed offsets: ``(topic, group) -> {queue_id: offset}``."""


@attrs.frozen
class BrokerMetadata:
    """What a slave copies from its master (RocketMQ's ``slaveSynchronize.syncAll``).

    Attributes:
        topics: topic name -> its number of queues (RocketMQ's ``topics.json``).
        offsets: ``(topic, group) -> {queue_id: offset}`` (RocketMQ's
            ``consumerOffset.json``).
    """

    topics: Mapping[str, int] = attrs.field(factory=dict)
    offsets: OffsetTable = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's shapes: ``topicConfigTable`` and ``offsetTable`` (``topic@group``)."""
        return {
            "topicConfigTable": {
                name: {"topicName": name, "readQueueNums": queues, "writeQueueNums": queues}
                for name, queues in sorted(self.topics.items())
            },
            "offsetTable": offsets_to_json(self.offsets),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BrokerMetadata:
        """The inverse of :meth:`to_json`.

        Raises:
            MetadataError: (a ValueError) a field is missing or of the wrong type.
        """
        topics: dict[str, int] = {}
        table = _mapping(data.get("topicConfigTable", {}), "topicConfigTable")
        for name, config in table.items():
            entry = _mapping(config, f"topic {name!r}")
            topics[name] = _int(entry.get("readQueueNums"), f"readQueueNums of {name!r}")
        offsets = offsets_from_json(_mapping(data.get("offsetTable", {}), "offsetTable"))
        return cls(topics, offsets)


def offsets_to_json(offsets: OffsetTable) -> dict[str, dict[str, int]]:
    """``offsetTable`` as RocketMQ writes it: ``{"topic@group": {"0": 12, ...}}``."""
    return {
        f"{topic}@{group}": {str(q): offset for q, offset in sorted(queues.items())}
        for (topic, group), queues in sorted(offsets.items())
    }


def offsets_from_json(table: Mapping[str, Any]) -> dict[tuple[str, str], dict[int, int]]:
    """The inverse of :func:`offsets_to_json`.

    Raises:
        MetadataError: a key is not ``topic@group``, a queue id or offset not an integer.
    """
    out: dict[tuple[str, str], dict[int, int]] = {}
    for key, queues in table.items():
        topic, at, group = key.partition("@")
        if not at or not topic or not group:
            raise MetadataError(f"offset key {key!r} is not topic@group")
        entries = _mapping(queues, f"offsets of {key!r}")
        parsed: dict[int, int] = {}
        for queue, offset in entries.items():
            try:
                queue_id = int(queue)
            except ValueError:
                raise MetadataError(f"queue id {queue!r} of {key!r} is not a number") from None
            parsed[queue_id] = _int(offset, f"offset of {key!r} queue {queue}")
        out[(topic, group)] = parsed
    return out


@attrs.frozen
class MetadataResponse:
    """SYNC_METADATA_OK."""

    request_id: int
    metadata: BrokerMetadata


# -- the name server ------------------------------------------------------------------------


@attrs.frozen
class BrokerRegistration:
    """A broker's registration (sent every 30 s; expires after 120 s without one).

    Attributes:
        cluster: the cluster name (RocketMQ's ``brokerClusterName``).
        broker_name: the master/slave set's name (``brokerName``): a master and its slaves
            share it.
        broker_id: 0 for the master, 1 and up for slaves.
        role: ``ASYNC_MASTER``, ``SYNC_MASTER`` or ``SLAVE``.
        broker_address: the broker port (``host:port``) clients connect to.
        ha_address: a master's HA port (``host:port``), "" for a slave.
        topics: ``(topic, queues)`` the broker holds.
    """

    cluster: str
    broker_name: str
    broker_id: int
    role: str
    broker_address: str
    ha_address: str = ""
    topics: tuple[tuple[str, int], ...] = ()


@attrs.frozen
class RegisterBrokerRequest:
    """REGISTER_BROKER."""

    request_id: int
    registration: BrokerRegistration


@attrs.frozen
class RegisterBrokerResponse:
    """REGISTER_BROKER_OK: for a slave, its master's addresses when the master is registered
    (how a slave without ``--master-ha`` finds its master); None otherwise."""

    request_id: int
    master_address: str | None = None
    master_ha_address: str | None = None


@attrs.frozen
class UnregisterBrokerRequest:
    """UNREGISTER_BROKER: a broker shutting down cleanly leaves the cluster at once."""

    request_id: int
    cluster: str
    broker_name: str
    broker_id: int
    broker_address: str


@attrs.frozen
class UnregisterBrokerResponse:
    """UNREGISTER_OK."""

    request_id: int


@attrs.frozen
class RouteRequest:
    """GET_ROUTE: which brokers hold a topic."""

    request_id: int
    topic: str


@attrs.frozen
class RouteBroker:
    """One broker name in a topic's route.

    Attributes:
        broker_name: the master/slave set.
        queues: the topic's queues on it.
        addresses: ``(broker_id, broker_address)`` of each live member, master (0) first.
    """

    broker_name: str
    queues: int
    addresses: tuple[tuple[int, str], ...]

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
    """A topic's route: every broker name holding it."""

    topic: str
    brokers: tuple[RouteBroker, ...]


@attrs.frozen
class RouteResponse:
    """GET_ROUTE_OK."""

    request_id: int
    route: TopicRoute


@attrs.frozen
class ClusterRequest:
    """GET_CLUSTER: every live broker."""

    request_id: int


@attrs.frozen
class BrokerLiveInfo:
    """A registered broker as the name server sees it.

    Attributes:
        registration: its last registration.
        last_update: when it last registered (ms since the epoch).
    """

    registration: BrokerRegistration
    last_update: int

    def to_json(self) -> dict[str, Any]:
        r = self.registration
        return {
            "cluster": r.cluster,
            "broker_name": r.broker_name,
            "broker_id": r.broker_id,
            "role": r.role,
            "broker_address": r.broker_address,
            "ha_address": r.ha_address,
            "topics": {topic: queues for topic, queues in r.topics},
            "last_update": self.last_update,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BrokerLiveInfo:
        topics = _mapping(data.get("topics", {}), "topics")
        registration = BrokerRegistration(
            cluster=_str(data.get("cluster"), "cluster"),
            broker_name=_str(data.get("broker_name"), "broker_name"),
            broker_id=_int(data.get("broker_id"), "broker_id"),
            role=_str(data.get("role"), "role"),
            broker_address=_str(data.get("broker_address"), "broker_address"),
            ha_address=_str(data.get("ha_address", ""), "ha_address"),
            topics=tuple((t, _int(q, f"queues of {t!r}")) for t, q in topics.items()),
        )
        return cls(registration, _int(data.get("last_update"), "last_update"))


@attrs.frozen
class ClusterInfo:
    """GET_CLUSTER's document: the live brokers, by cluster, broker name and id."""

    brokers: tuple[BrokerLiveInfo, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"brokers": [b.to_json() for b in self.brokers]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClusterInfo:
        """Raises MetadataError (a ValueError) when a field is missing or mistyped."""
        brokers = data.get("brokers", [])
        if not isinstance(brokers, list):
            raise MetadataError("brokers is not a list")
        return cls(tuple(BrokerLiveInfo.from_json(_mapping(b, "a broker")) for b in brokers))


@attrs.frozen
class ClusterResponse:
    """GET_CLUSTER_OK."""

    request_id: int
    cluster: ClusterInfo
