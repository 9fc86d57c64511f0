"""Who a broker's clients are, without a connection (:class:`hanet.broker.ClientTable`): what
the admin connection lists show, kept while heartbeats come, dropped after the expiry (a
producer also once its connection closed), bounded."""

from __future__ import annotations

import attrs

from hanet.broker import ClientInfo, ClientTable, client_language
from hanet.protocol import (
    ClientConnection,
    ConsumerData,
    HeartbeatData,
    ProducerData,
    SubscriptionData,
)

EXPIRY = 120.0


@attrs.define
class Connection:
    """Stands in for a broker connection: only asked whether it is open."""

    is_open: bool = True


@attrs.frozen
class Wrapped:
    channel: Connection


def client(client_id: str, seen: float, connection: Connection | None = None) -> ClientInfo:
    return ClientInfo(
        client_id, "10.0.0.1:5000", "JAVA", 399, Wrapped(connection or Connection()), seen
    )


def consumer(client_id: str, group: str, topic: str) -> HeartbeatData:
    data = ConsumerData(group, subscription_data_set=(SubscriptionData(topic),))
    return HeartbeatData(client_id, consumer_data_set=(data,))


def test_consumers_are_listed_with_their_subscription_until_they_expire() -> None:
    table = ClientTable()
    table.heard(consumer("c1", "G", "T"), client("c1", 0.0), EXPIRY)
    table.heard(consumer("c2", "G", "T"), client("c2", 5.0), EXPIRY)
    members = table.consumers("G", ["c2", "c1", "gone"])  # the registry's live members
    assert [c.client_id for c in members] == ["c2", "c1"]
    assert members[0].connection() == ClientConnection("c2", "10.0.0.1:5000", "JAVA", 399)
    subscription = table.subscription("G")
    assert subscription is not None and subscription.subscription_data_set[0].topic == "T"
    table.heard(consumer("c2", "G", "T"), client("c2", 121.0), EXPIRY)  # c1 silent 121 s
    assert [c.client_id for c in table.consumers("G", ["c1", "c2"])] == ["c2"]
    table.expire(250.0, EXPIRY)  # c2 silent too: the group and its subscription go
    assert table.consumers("G", ["c2"]) == [] and table.subscription("G") is None


def test_expired_clients_are_looked_for_at_most_every_10_s() -> None:
    table = ClientTable()
    table.heard(consumer("c1", "G", "T"), client("c1", 0.0), EXPIRY)
    table.expire(200.0, EXPIRY)
    table.heard(consumer("c1", "G", "T"), client("c1", 205.0), EXPIRY)
    table.heard(consumer("c2", "G", "T"), client("c2", 205.0), EXPIRY)
    table.expire(209.0, 1.0)  # within 10 s of the last scan: nothing dropped yet
    assert len(table.consumers("G", ["c1", "c2"])) == 2


def test_producers_with_a_closed_connection_or_silent_are_not_listed() -> None:
    table = ClientTable()
    closing = Connection()
    for client_id, connection in (("p1", closing), ("p2", None)):
        heartbeat = HeartbeatData(client_id, producer_data_set=(ProducerData("PG"),))
        table.heard(heartbeat, client(client_id, 0.0, connection), EXPIRY)
    assert sorted(c.client_id for c in table.producers("PG", 1.0, EXPIRY)) == ["p1", "p2"]
    closing.is_open = False
    assert [c.client_id for c in table.producers("PG", 2.0, EXPIRY)] == ["p2"]
    assert table.producers("PG", 500.0, EXPIRY) == []
    assert table.producers("unknown", 500.0, EXPIRY) == []


def test_a_group_keeps_at_most_1024_producers() -> None:
    table = ClientTable()
    for n in range(1100):
        heartbeat = HeartbeatData(f"p{n}", producer_data_set=(ProducerData("PG"),))
        table.heard(heartbeat, client(f"p{n}", 0.0), EXPIRY)
    assert len(table.producers("PG", 1.0, EXPIRY)) == 1024


def test_languages_are_named_as_rocketmq_names_them() -> None:
    assert client_language(0) == "JAVA" and client_language("CPP") == "CPP"
    assert client_language(99) == "OTHER" and client_language("COBOL") == "OTHER"
