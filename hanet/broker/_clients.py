"""Who a broker's clients are, as their heartbeats named them: the members behind the admin
connection lists (GET_CONSUMER_CONNECTION_LIST, GET_PRODUCER_CONNECTION_LIST), a group's
subscriptions, the connections a reset offset is pushed to. Sans-IO: the caller gives the
time and the expiry; a client's connection is only asked whether it is open."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from hanet.protocol import ClientConnection, ConsumerData, HeartbeatData, LanguageCode

__all__ = [
    "MAX_CLIENTS",
    "MAX_PRODUCER_GROUPS",
    "ClientInfo",
    "ClientTable",
    "client_language",
]

MAX_PRODUCER_GROUPS = 10_000
"""Most producer groups with live members one broker keeps."""

MAX_CLIENTS = 100_000
"""Most (group, client) entries kept for the connection lists."""

_MAX_PRODUCERS_PER_GROUP = 1024
_EXPIRY_SCAN = 10.0  # seconds between scans of every client for expired ones


@attrs.frozen
class ClientInfo:
    """A member of a group as its last heartbeat named it.

    Attributes:
        channel: the connection it came on (a :class:`~hanet.broker.BrokerConnection`),
            asked only whether it is open.
        seen: when (the caller's clock, seconds).
    """

    client_id: str
    address: str
    language: str
    version: int
    channel: object
    seen: float

    def connection(self) -> ClientConnection:
        """As a connection list names it."""
        return ClientConnection(self.client_id, self.address, self.language, self.version)

    def is_open(self) -> bool:
        """False once its connection closed."""
        inner = getattr(self.channel, "channel", None)
        return inner is None or bool(getattr(inner, "is_open", True))


def client_language(code: int | str) -> str:
    """A client's language by its name in RocketMQ's ``LanguageCode`` (OTHER for a code it
    does not have: mqadmin could not read another name)."""
    if isinstance(code, str):
        return code if code in LanguageCode.__members__ else "OTHER"
    try:
        return LanguageCode(code).name
    except ValueError:
        return "OTHER"


class ClientTable:
    """The consumers and producers the heartbeats named, with the consumer groups'
    subscriptions; bounded (:data:`MAX_CLIENTS`, :data:`MAX_PRODUCER_GROUPS`, 1024 producers
    a group): a heartbeat past a bound is served but not listed."""

    def __init__(self) -> None:
        self._consumers: dict[tuple[str, str], ClientInfo] = {}
        self._subscriptions: dict[str, ConsumerData] = {}
        self._producers: dict[str, dict[str, ClientInfo]] = {}
        self._next_expiry = 0.0

    def heard(self, heartbeat: HeartbeatData, client: ClientInfo, expiry: float) -> None:
        """Note the groups ``heartbeat`` names ``client`` a member of (at ``client.seen``);
        clients silent for more than ``expiry`` seconds are dropped on the way."""
        self.expire(client.seen, expiry)
        for consumer in heartbeat.consumer_data_set:
            key = (consumer.group_name, heartbeat.client_id)
            if key in self._consumers or len(self._consumers) < MAX_CLIENTS:
                self._consumers[key] = client
                self._subscriptions[consumer.group_name] = consumer
        for producer in heartbeat.producer_data_set:
            members = self._producers.get(producer.group_name)
            if members is None:
                if len(self._producers) >= MAX_PRODUCER_GROUPS:
                    continue
                members = self._producers[producer.group_name] = {}
            if heartbeat.client_id in members or len(members) < _MAX_PRODUCERS_PER_GROUP:
                members[heartbeat.client_id] = client

    def expire(self, now: float, expiry: float) -> None:
        """Drop the clients silent for more than ``expiry`` seconds (and the producers whose
        connection closed); a scan of every client at most every 10 s."""
        if now < self._next_expiry:
            return
        self._next_expiry = now + _EXPIRY_SCAN
        for key, client in list(self._consumers.items()):
            if now - client.seen > expiry:
                del self._consumers[key]
        groups = {group for group, _ in self._consumers}  # a group gone: its subscriptions
        for group in [g for g in self._subscriptions if g not in groups]:
            del self._subscriptions[group]
        for group, members in list(self._producers.items()):
            for client_id, client in list(members.items()):
                if now - client.seen > expiry or not client.is_open():
                    del members[client_id]
            if not members:
                del self._producers[group]

    def consumers(self, group: str, member_ids: Iterable[str]) -> list[ClientInfo]:
        """The clients of ``group`` among ``member_ids`` (the consumer registry's live
        members), as their heartbeats named them."""
        out = []
        for client_id in member_ids:
            client = self._consumers.get((group, client_id))
            if client is not None:
                out.append(client)
        return out

    def subscription(self, group: str) -> ConsumerData | None:
        """What ``group``'s last heartbeat said it subscribes to, or None."""
        return self._subscriptions.get(group)

    def producers(self, group: str, now: float, expiry: float) -> list[ClientInfo]:
        """``group``'s producers heard within ``expiry`` seconds whose connection is open."""
        self.expire(now, expiry)
        return [
            c
            for c in self._producers.get(group, {}).values()
            if c.is_open() and now - c.seen <= expiry
        ]
