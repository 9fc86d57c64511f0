"""The name server: the registry sans-IO, the server's answers on an EmbeddedChannel (RocketMQ
4.9.8's captured frames in, its answers compared), the server over loopback TCP with
:class:`NameServerClient` and the broker's registrar, and ``hanet namesrv`` as a real process."""

from __future__ import annotations

import logging
import signal
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from hanet.boot import AllowList, serve
from hanet.broker import NameServerRegistrar
from hanet.channel import StreamChannel
from hanet.cli import main
from hanet.client import (
    NameServerClient,
    NameServerConnection,
    RemotingConnectionError,
    RemotingError,
    RemotingProtocolError,
    RemotingResponseError,
)
from hanet.namesrv import (
    DEFAULT_EXPIRE_AFTER,
    MAX_QUEUES,
    MAX_TOPICS,
    NAMESPACE_ORDER_TOPIC_CONFIG,
    NameServer,
    RegistrationError,
    RegistrationRefused,
    Registry,
    registration_problem,
)
from hanet.protocol import (
    BrokerData,
    BrokerRegistration,
    ClusterInfo,
    DataVersion,
    KVTable,
    QueueData,
    RegisterBrokerBody,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponse,
    RemotingCommand,
    RemotingDispatcher,
    RequestCode,
    RequestProcessor,
    ResponseCode,
    RouteBroker,
    SerializeType,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
    decode_command,
    encode_command,
    remoting_pipeline,
)
from hanet.testing import EmbeddedChannel, HanetProcesses

JAVA = Path(__file__).parent / "fixtures" / "remoting" / "java"
T0 = 1_700_000_000.0  # a virtual "now", seconds since the epoch

MASTER_A = BrokerRegistration(
    "DefaultCluster",
    "broker-a",
    0,
    "SYNC_MASTER",
    "10.0.0.1:10911",
    "10.0.0.1:10912",
    (("TopicTest", 4), ("Orders", 8)),
)
SLAVE_A = BrokerRegistration(
    "DefaultCluster", "broker-a", 1, "SLAVE", "10.0.0.2:10911", "", (("TopicTest", 4),)
)
MASTER_B = BrokerRegistration(
    "DefaultCluster",
    "broker-b",
    0,
    "ASYNC_MASTER",
    "10.0.0.3:10911",
    "10.0.0.3:10912",
    (("TopicTest", 2),),
)


def parts(
    registration: BrokerRegistration,
) -> tuple[RegisterBrokerRequestHeader, RegisterBrokerBody]:
    """A registration's header and body, as the name server decodes them."""
    body = registration.body()
    return registration.header(body.encode()), body


def register(
    registry: Registry, registration: BrokerRegistration, now: float, connection: object = None
) -> RegisterBrokerResponse:
    return registry.register(*parts(registration), now, connection)


def keys(registry: Registry) -> list[tuple[str, str, int]]:
    return [b.key for b in registry.brokers()]


# -- the registry, sans-IO ------------------------------------------------------------------


def test_a_registration_is_held_with_its_topics_and_time() -> None:
    registry = Registry()
    assert register(registry, MASTER_A, T0) == RegisterBrokerResponse()
    (entry,) = registry.brokers()
    assert entry.key == ("DefaultCluster", "broker-a", 0)
    assert entry.broker_address == "10.0.0.1:10911" and entry.ha_address == "10.0.0.1:10912"
    assert entry.topics == {
        "TopicTest": TopicConfig("TopicTest", 4, 4),
        "Orders": TopicConfig("Orders", 8, 8),
    }
    assert entry.last_update == T0


def test_renewal_moves_the_last_update_and_logs_nothing_new(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = Registry()
    with caplog.at_level(logging.INFO, logger="hanet.namesrv"):
        register(registry, MASTER_A, T0)
        register(registry, MASTER_A, T0 + 30)
    assert [r.getMessage() for r in caplog.records] == [
        "new broker DefaultCluster/broker-a/0 at 10.0.0.1:10911 (HA 10.0.0.1:10912), 2 topics"
    ]
    assert registry.brokers()[0].last_update == T0 + 30


def test_expiry_at_120_s_exactly(caplog: pytest.LogCaptureFixture) -> None:
    registry = Registry()
    register(registry, MASTER_A, T0)
    register(registry, SLAVE_A, T0 + 60)
    assert registry.expire(T0 + DEFAULT_EXPIRE_AFTER - 0.001) == []
    assert len(registry) == 2
    with caplog.at_level(logging.INFO, logger="hanet.namesrv"):
        assert [e.broker_id for e in registry.expire(T0 + 120)] == [0]
    assert [r.getMessage() for r in caplog.records] == [
        "broker DefaultCluster/broker-a/0 at 10.0.0.1:10911 expired: no registration for 120 s"
    ]
    assert keys(registry) == [("DefaultCluster", "broker-a", 1)]
    assert [e.broker_id for e in registry.expire(T0 + 180)] == [1]
    assert len(registry) == 0


def test_renewal_postpones_expiry_and_expiry_is_configurable() -> None:
    registry = Registry()
    register(registry, MASTER_A, T0)
    register(registry, MASTER_A, T0 + 100)
    assert registry.expire(T0 + 200) == []
    short = Registry(expire_after=5)
    register(short, MASTER_A, T0)
    assert len(short.expire(T0 + 5)) == 1
    with pytest.raises(ValueError):
        Registry(expire_after=0)


def test_a_slave_learns_its_master() -> None:
    registry = Registry()
    assert register(registry, SLAVE_A, T0) == RegisterBrokerResponse()  # no master yet
    register(registry, MASTER_A, T0)
    assert register(registry, SLAVE_A, T0 + 1) == RegisterBrokerResponse(
        "10.0.0.1:10911", "10.0.0.1:10912"
    )
    # a slave of another cluster does not learn it; a master never gets one
    other = attrs.evolve(SLAVE_A, cluster="Other")
    assert register(registry, other, T0) == RegisterBrokerResponse()
    assert register(registry, MASTER_A, T0 + 2) == RegisterBrokerResponse()
    # a master not renewed is not named, even before the scan drops it
    assert register(registry, SLAVE_A, T0 + 130) == RegisterBrokerResponse()


def test_a_master_without_an_ha_address_is_named_without_one() -> None:
    registry = Registry()
    register(registry, attrs.evolve(MASTER_A, ha_address=""), T0)
    assert register(registry, SLAVE_A, T0) == RegisterBrokerResponse("10.0.0.1:10911", None)


def test_a_live_registration_is_not_taken_over_from_another_address() -> None:
    registry = Registry()
    holder, other = object(), object()
    register(registry, MASTER_A, T0, holder)
    moved = attrs.evolve(MASTER_A, broker_address="10.0.0.9:1", ha_address="10.0.0.9:2")
    with pytest.raises(RegistrationRefused, match=r"held by 10\.0\.0\.1:10911"):
        register(registry, moved, T0 + 10, other)
    assert registry.brokers()[0].broker_address == "10.0.0.1:10911"
    # the holder renews from another connection (it reconnected): still its own
    register(registry, MASTER_A, T0 + 20, other)
    assert registry.brokers()[0].connection is other
    # once it expires, or its connection closes, or it unregisters: the key is free
    register(registry, moved, T0 + 20 + 120, other)
    assert registry.brokers()[0].broker_address == "10.0.0.9:1"
    assert registry.connection_closed(other)[0].broker_address == "10.0.0.9:1"
    register(registry, MASTER_A, T0 + 200, holder)
    assert registry.unregister("DefaultCluster", "broker-a", 0, "10.0.0.1:10911")
    register(registry, moved, T0 + 201, other)
    assert registry.brokers()[0].broker_address == "10.0.0.9:1"


def test_a_slave_follows_its_master_to_a_new_address() -> None:
    registry = Registry()
    register(registry, MASTER_A, T0, "first")
    register(registry, SLAVE_A, T0, "slave")
    registry.connection_closed("first")  # the master died
    assert register(registry, SLAVE_A, T0 + 1).master_address is None
    moved = attrs.evolve(MASTER_A, broker_address="10.0.0.9:1", ha_address="10.0.0.9:2")
    register(registry, moved, T0 + 5, "second")
    assert register(registry, SLAVE_A, T0 + 6) == RegisterBrokerResponse("10.0.0.9:1", "10.0.0.9:2")


def test_a_member_changing_id_on_the_same_address_replaces_its_old_entry() -> None:
    registry = Registry()
    register(registry, MASTER_A, T0 - 200)
    register(registry, SLAVE_A, T0)
    promoted = attrs.evolve(SLAVE_A, broker_id=0, role="SYNC_MASTER")
    register(registry, promoted, T0)  # the old master expired: the slave takes id 0
    assert [(b.broker_id, b.broker_address) for b in registry.brokers()] == [(0, "10.0.0.2:10911")]


def test_unregister_removes_only_the_address_registered() -> None:
    registry = Registry()
    register(registry, MASTER_A, T0)
    assert not registry.unregister("DefaultCluster", "broker-a", 0, "10.0.0.9:1")
    assert not registry.unregister("DefaultCluster", "broker-x", 0, "10.0.0.1:10911")
    assert len(registry) == 1
    assert registry.unregister("DefaultCluster", "broker-a", 0, "10.0.0.1:10911")
    assert len(registry) == 0


def test_a_closed_connection_takes_its_brokers_only() -> None:
    registry = Registry()
    register(registry, MASTER_A, T0, "a")
    register(registry, SLAVE_A, T0, "a")
    register(registry, MASTER_B, T0, "b")
    assert [e.broker_name for e in registry.connection_closed("a")] == ["broker-a", "broker-a"]
    assert keys(registry) == [("DefaultCluster", "broker-b", 0)]
    assert registry.connection_closed("a") == []


def test_route_groups_members_by_broker_name_master_first() -> None:
    registry = Registry()
    for registration in (SLAVE_A, MASTER_B, MASTER_A):
        register(registry, registration, T0)
    data = registry.route("TopicTest")
    assert data == TopicRouteData(
        (QueueData("broker-a", 4, 4, 6), QueueData("broker-b", 2, 2, 6)),
        (
            BrokerData("DefaultCluster", "broker-a", {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}),
            BrokerData("DefaultCluster", "broker-b", {0: "10.0.0.3:10911"}),
        ),
    )
    orders = registry.route("Orders")
    assert orders is not None and [q.broker_name for q in orders.queue_datas] == ["broker-a"]
    assert registry.route("Nowhere") is None


def test_route_without_a_master_takes_the_slaves_queues() -> None:
    registry = Registry()
    register(registry, attrs.evolve(SLAVE_A, topics=(("TopicTest", 3),)), T0)
    data = registry.route("TopicTest")
    assert data is not None
    assert data.queue_datas == (QueueData("broker-a", 3, 3, 6),)
    assert data.broker_datas[0].broker_addrs == {1: "10.0.0.2:10911"}


def test_cluster_info_and_topic_lists() -> None:
    registry = Registry()
    other = attrs.evolve(MASTER_B, cluster="Other", topics=(("Solo", 1),))
    for registration in (MASTER_A, SLAVE_A, other):
        register(registry, registration, T0)
    assert registry.cluster_info() == ClusterInfo(
        {
            "broker-a": BrokerData(
                "DefaultCluster", "broker-a", {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
            ),
            "broker-b": BrokerData("Other", "broker-b", {0: "10.0.0.3:10911"}),
        },
        {"DefaultCluster": ("broker-a",), "Other": ("broker-b",)},
    )
    assert registry.topics() == TopicList(("Orders", "Solo", "TopicTest"))
    assert registry.topics("Other") == TopicList(("Solo",))
    assert registry.topics("None") == TopicList(())


def test_query_data_version_renews_an_unchanged_registration() -> None:
    registry = Registry()
    registration = attrs.evolve(MASTER_A, data_version=DataVersion(5, 2))
    register(registry, registration, T0)
    key = ("DefaultCluster", "broker-a", 0)
    assert registry.query_data_version(key, "10.0.0.1:10911", DataVersion(5, 3), T0 + 50) == (
        True,
        DataVersion(5, 2),
    )
    entry = registry.get(key)
    assert entry is not None and entry.last_update == T0
    assert registry.query_data_version(key, "10.0.0.1:10911", DataVersion(5, 2), T0 + 60) == (
        False,
        DataVersion(5, 2),
    )
    entry = registry.get(key)
    assert entry is not None and entry.last_update == T0 + 60
    assert registry.query_data_version(key, "10.0.0.9:1", DataVersion(5, 2), T0) == (True, None)


@pytest.mark.parametrize(
    ("registration", "complaint"),
    [
        (attrs.evolve(MASTER_A, cluster=""), "the cluster name is empty"),
        (attrs.evolve(MASTER_A, broker_name=""), "the broker name is empty"),
        (attrs.evolve(MASTER_A, broker_id=-1), "broker id -1 is negative"),
        (attrs.evolve(MASTER_A, broker_address="nowhere"), "broker address 'nowhere'"),
        (attrs.evolve(MASTER_A, broker_address="h:0"), "broker address 'h:0'"),
        (attrs.evolve(MASTER_A, ha_address=":1"), "HA address ':1'"),
        (attrs.evolve(MASTER_A, topics=(("", 1),)), "topic ''"),
        (
            attrs.evolve(MASTER_A, topics=(("T", MAX_QUEUES + 1),)),
            f"topic 'T' has {MAX_QUEUES + 1} read queues",
        ),
        (
            attrs.evolve(MASTER_A, topics=tuple((f"T{i}", 1) for i in range(MAX_TOPICS + 1))),
            f"{MAX_TOPICS + 1} topics",
        ),
    ],
)
def test_bad_registrations_are_refused(registration: BrokerRegistration, complaint: str) -> None:
    problem = registration_problem(*parts(registration))
    assert problem is not None and complaint in problem
    registry = Registry()
    with pytest.raises(RegistrationError):
        register(registry, registration, T0)
    assert len(registry) == 0


def test_good_registrations_have_no_problem() -> None:
    for registration in (MASTER_A, SLAVE_A, attrs.evolve(MASTER_A, topics=(("T", 0),))):
        assert registration_problem(*parts(registration)) is None


def test_the_registry_holds_at_most_max_brokers() -> None:
    registry = Registry(max_brokers=2)
    register(registry, MASTER_A, 1000.0)
    register(registry, SLAVE_A, 1000.0)
    with pytest.raises(RegistrationError, match="holds 2 brokers, its most"):
        register(registry, MASTER_B, 1000.0)
    register(registry, MASTER_A, 1010.0)  # a renewal always goes through
    assert len(registry) == 2
    register(registry, MASTER_B, 1125.0)  # SLAVE_A expired meanwhile: room again
    assert {b.broker_name for b in registry.brokers()} == {"broker-a", "broker-b"}


# -- the server on an EmbeddedChannel: RocketMQ's own frames -------------------------------------


def captured(name: str) -> bytes:
    return (JAVA / name).read_bytes()


def connect(server: NameServer) -> EmbeddedChannel:
    channel = EmbeddedChannel()
    server.initialize(channel)
    return channel


def exchange(channel: EmbeddedChannel, request: RemotingCommand | bytes) -> bytes:
    """Feed one request frame; the answer's frame ("" when none)."""
    frame = request if isinstance(request, bytes) else encode_command(request)
    channel.write_inbound(frame)
    out = bytearray()
    while (chunk := channel.read_outbound()) is not None:
        out += chunk
    return bytes(out)


def ask(channel: EmbeddedChannel, request: RemotingCommand | bytes) -> RemotingCommand:
    answer = exchange(channel, request)
    assert answer, "no answer"
    return decode_command(answer[4:])


def with_topic(name: str, topic: str, **changes: Any) -> bytes:
    """A captured request frame with another topic (and other header values)."""
    cmd = decode_command(captured(name)[4:])
    return encode_command(attrs.evolve(cmd, ext_fields={**cmd.fields, "topic": topic}, **changes))


@pytest.mark.parametrize(
    "run",
    [
        "02-broker-produce-consume",
        "verify-20261125-164539",
        "verify-ROCKETMQ-serialize-20261125-164623",
    ],
)
def test_a_captured_registration_then_route_answer_as_rocketmq_4_9_8(run: str) -> None:
    server = NameServer(("127.0.0.1", 0), clock=lambda: T0)
    channel = connect(server)
    # RocketMQ's broker registers: the answer is byte for byte RocketMQ's
    answer = exchange(channel, captured(f"{run}__REGISTER_BROKER__request.bin"))
    assert answer == captured(f"{run}__REGISTER_BROKER__response_SUCCESS.bin")
    (entry,) = server.registry.brokers()
    assert entry.broker_address == "127.0.0.1:10911" and entry.topics["TBW102"].perm == 7
    # RocketMQ's client asks for a topic no broker holds: RocketMQ's answer, remark included
    missing = f"{run}__GET_ROUTEINFO_BY_TOPIC__request.bin"
    expected = captured(f"{run}__GET_ROUTEINFO_BY_TOPIC__response_TOPIC_NOT_EXIST.bin")
    assert exchange(channel, captured(missing)) == expected
    # ... and for TBW102 (the default topic a producer falls back on): the same route
    route = ask(channel, with_topic(missing, "TBW102"))
    success = decode_command(captured(f"{run}__GET_ROUTEINFO_BY_TOPIC__response_SUCCESS.bin")[4:])
    assert route.code == ResponseCode.SUCCESS and route.ext_fields is None
    assert bytes(route.body) == bytes(success.body)
    assert route.serialize_type == success.serialize_type
    # the cluster, as RocketMQ writes it (bare broker id keys)
    cluster = ask(channel, captured(f"{run}__GET_BROKER_CLUSTER_INFO__request.bin"))
    info = decode_command(captured(f"{run}__GET_BROKER_CLUSTER_INFO__response_SUCCESS.bin")[4:])
    assert bytes(cluster.body) == bytes(info.body)


def test_a_captured_oneway_registration_is_taken_and_not_answered() -> None:
    server = NameServer(("127.0.0.1", 0), clock=lambda: T0)
    channel = connect(server)
    assert (
        exchange(channel, captured("02-broker-produce-consume__REGISTER_BROKER__oneway.bin")) == b""
    )
    (entry,) = server.registry.brokers()
    assert "CapTopic" in entry.topics


@pytest.mark.parametrize(
    ("version", "quoted"), [(121, False), (63, False), (400, False), (401, True)]
)
def test_route_keys_are_quoted_for_requesters_of_4_9_4_and_later(
    version: int, quoted: bool
) -> None:
    server = NameServer(("127.0.0.1", 0), clock=lambda: T0)
    channel = connect(server)
    exchange(channel, captured("02-broker-produce-consume__REGISTER_BROKER__request.bin"))
    request = with_topic(
        "02-broker-produce-consume__GET_ROUTEINFO_BY_TOPIC__request.bin", "TBW102", version=version
    )
    body = bytes(ask(channel, request).body)
    assert (b'{"0":"127.0.0.1:10911"}' in body) is quoted
    assert (b'{0:"127.0.0.1:10911"}' in body) is not quoted
    standard = RemotingCommand.request(
        RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102", "acceptStandardJsonOnly": "true"}
    )
    assert b'{"0":' in bytes(ask(channel, attrs.evolve(standard, version=63)).body)


def test_a_body_that_does_not_match_its_crc_registers_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = NameServer(("127.0.0.1", 0), clock=lambda: T0)
    channel = connect(server)
    request = MASTER_A.request()
    bad = attrs.evolve(request, ext_fields={**request.fields, "bodyCrc32": "12345"})
    answer = ask(channel, bad)
    assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
    assert len(server.registry) == 0 and "crc32 not match" in caplog.text
    unchecked = attrs.evolve(request, ext_fields={**request.fields, "bodyCrc32": "0"})
    assert ask(channel, unchecked).code == ResponseCode.SUCCESS  # 0: not checked, as RocketMQ


@pytest.mark.parametrize(
    "body",
    [b"{", b"[]", b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"perm":"x"}}}}'],
)
def test_a_body_that_does_not_decode_is_answered_and_registers_nothing(body: bytes) -> None:
    server = NameServer(("127.0.0.1", 0), clock=lambda: T0)
    channel = connect(server)
    fields = {**MASTER_A.request().fields, "bodyCrc32": "0"}
    answer = ask(channel, RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, body))
    assert answer.code == ResponseCode.SYSTEM_ERROR and answer.remark
    assert len(server.registry) == 0
    assert channel.is_active


def test_a_compressed_registration_body_is_taken() -> None:
    server = NameServer(("127.0.0.1", 0), clock=lambda: T0)
    body = RegisterBrokerBody(
        TopicConfigSerializeWrapper({"T": TopicConfig("T", 2, 2)}, DataVersion(1, 1))
    ).encode_compressed()
    header = attrs.evolve(MASTER_A.header(body), compressed=True)
    request = RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_fields(), body)
    assert ask(connect(server), request).code == ResponseCode.SUCCESS
    assert server.registry.brokers()[0].topics == {"T": TopicConfig("T", 2, 2)}


def test_an_empty_body_registers_a_broker_without_topics() -> None:
    server = NameServer(("127.0.0.1", 0), clock=lambda: T0)
    fields = {**MASTER_A.request().fields, "bodyCrc32": "0"}
    request = RemotingCommand.request(RequestCode.REGISTER_BROKER, fields)
    assert ask(connect(server), request).code == ResponseCode.SUCCESS
    (entry,) = server.registry.brokers()
    assert entry.topics == {} and entry.data_version == DataVersion()


def test_a_broker_leaves_when_its_connection_closes() -> None:
    server = NameServer(("127.0.0.1", 0), clock=lambda: T0)
    broker, client = connect(server), connect(server)
    assert ask(broker, MASTER_A.request()).code == ResponseCode.SUCCESS
    route = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"})
    assert ask(client, route).code == ResponseCode.SUCCESS
    broker.finish()
    assert len(server.registry) == 0
    assert ask(client, route).code == ResponseCode.TOPIC_NOT_EXIST


def active(channel: EmbeddedChannel) -> bool:
    return channel.is_active  # a call: mypy does not keep a property narrowed across it


def test_an_idle_connection_is_closed_and_its_broker_leaves() -> None:
    server = NameServer(("127.0.0.1", 0), clock=lambda: T0, idle_timeout=120)
    broker, quiet = connect(server), connect(server)
    assert ask(broker, MASTER_A.request()).code == ResponseCode.SUCCESS
    broker.advance_time(100)
    ask(broker, MASTER_A.request())  # a renewal is activity
    broker.advance_time(100)
    quiet.advance_time(119)
    assert active(broker) and active(quiet) and len(server.registry) == 1
    quiet.advance_time(1)
    assert not active(quiet)
    broker.advance_time(20)
    assert not active(broker) and len(server.registry) == 0
    never = connect(NameServer(("127.0.0.1", 0), idle_timeout=0))
    never.advance_time(10_000)
    assert never.is_active


def test_a_takeover_is_refused_until_the_holder_leaves(caplog: pytest.LogCaptureFixture) -> None:
    server = NameServer(("127.0.0.1", 0), clock=lambda: T0)
    holder, intruder = connect(server), connect(server)
    assert ask(holder, MASTER_A.request()).code == ResponseCode.SUCCESS
    moved = attrs.evolve(MASTER_A, broker_address="10.0.0.9:1")
    with caplog.at_level(logging.WARNING, logger="hanet.namesrv"):
        refused = ask(intruder, moved.request())
    assert refused.code == ResponseCode.NO_PERMISSION
    assert refused.remark is not None and "held by 10.0.0.1:10911" in refused.remark
    assert any(r.levelno == logging.WARNING and "refused" in r.getMessage() for r in caplog.records)
    assert server.registry.brokers()[0].broker_address == "10.0.0.1:10911"
    holder.finish()
    assert ask(intruder, moved.request()).code == ResponseCode.SUCCESS
    assert server.registry.brokers()[0].broker_address == "10.0.0.9:1"


def test_a_slave_answer_names_its_master_in_the_header() -> None:
    server = NameServer(("127.0.0.1", 0), clock=lambda: T0)
    channel = connect(server)
    ask(channel, MASTER_A.request())
    answer = ask(channel, SLAVE_A.request())
    assert answer.fields == {"masterAddr": "10.0.0.1:10911", "haServerAddr": "10.0.0.1:10912"}
    assert RegisterBrokerResponse.from_command(answer) == RegisterBrokerResponse(
        "10.0.0.1:10911", "10.0.0.1:10912"
    )


def test_kv_config_and_the_order_topic_config_in_registration_answers() -> None:
    server = NameServer(("127.0.0.1", 0), clock=lambda: T0)
    channel = connect(server)

    def kv(code: int, **fields: str) -> RemotingCommand:
        return ask(channel, RemotingCommand.request(code, fields))

    get = kv(RequestCode.GET_KV_CONFIG, namespace=NAMESPACE_ORDER_TOPIC_CONFIG, key="Orders")
    assert get.code == ResponseCode.QUERY_NOT_FOUND
    assert get.remark == "No config item, Namespace: ORDER_TOPIC_CONFIG Key: Orders"
    put = kv(
        RequestCode.PUT_KV_CONFIG,
        namespace=NAMESPACE_ORDER_TOPIC_CONFIG,
        key="Orders",
        value="broker-a:8",
    )
    assert put.code == ResponseCode.SUCCESS
    get = kv(RequestCode.GET_KV_CONFIG, namespace=NAMESPACE_ORDER_TOPIC_CONFIG, key="Orders")
    assert (get.code, get.fields) == (ResponseCode.SUCCESS, {"value": "broker-a:8"})
    listed = kv(RequestCode.GET_KVLIST_BY_NAMESPACE, namespace=NAMESPACE_ORDER_TOPIC_CONFIG)
    assert KVTable.decode(listed.body) == KVTable({"Orders": "broker-a:8"})
    answer = RegisterBrokerResponse.from_command(ask(channel, MASTER_A.request()))
    assert answer.kv_table == KVTable({"Orders": "broker-a:8"})
    assert kv(RequestCode.PUT_KV_CONFIG, namespace="n", key="k").code == ResponseCode.SYSTEM_ERROR
    deleted = kv(RequestCode.DELETE_KV_CONFIG, namespace=NAMESPACE_ORDER_TOPIC_CONFIG, key="Orders")
    assert deleted.code == ResponseCode.SUCCESS and len(server.kv_config) == 0
    empty = kv(RequestCode.GET_KVLIST_BY_NAMESPACE, namespace=NAMESPACE_ORDER_TOPIC_CONFIG)
    assert empty.code == ResponseCode.QUERY_NOT_FOUND


def test_topic_lists_and_data_version_queries() -> None:
    server = NameServer(("127.0.0.1", 0), clock=lambda: T0)
    channel = connect(server)
    ask(channel, attrs.evolve(MASTER_A, data_version=DataVersion(9, 4)).request())
    ask(channel, attrs.evolve(MASTER_B, cluster="Other").request())
    every = ask(channel, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
    assert TopicList.decode(every.body) == TopicList(("Orders", "TopicTest"))
    other = ask(
        channel, RemotingCommand.request(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "Other"})
    )
    assert TopicList.decode(other.body) == TopicList(("TopicTest",))
    fields = {
        "brokerName": "broker-a",
        "brokerAddr": "10.0.0.1:10911",
        "clusterName": "DefaultCluster",
        "brokerId": "0",
    }
    same = ask(
        channel,
        RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, fields, DataVersion(9, 4).encode()),
    )
    assert same.fields == {"changed": "false"} and DataVersion.decode(same.body) == DataVersion(
        9, 4
    )
    changed = ask(
        channel,
        RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, fields, DataVersion(9, 5).encode()),
    )
    assert changed.fields == {"changed": "true"}
    bad = ask(channel, RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, fields, b"nope"))
    assert bad.code == ResponseCode.SYSTEM_ERROR


def test_other_requests_and_bad_headers_are_answered_and_the_connection_stays() -> None:
    server = NameServer(("127.0.0.1", 0), clock=lambda: T0)
    channel = connect(server)
    send = ask(channel, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, opaque=7))
    assert (send.code, send.opaque) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, 7)
    route = ask(channel, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC))
    assert route.code == ResponseCode.SYSTEM_ERROR and "topic is missing" in (route.remark or "")
    fields = {**MASTER_A.request().fields, "brokerId": "first"}
    register_ = ask(channel, RemotingCommand.request(RequestCode.REGISTER_BROKER, fields))
    assert register_.code == ResponseCode.SYSTEM_ERROR and "not a number" in (
        register_.remark or ""
    )
    assert channel.is_active
    # in-process, the same answers
    assert server.handle(RemotingCommand.request(RequestCode.PULL_MESSAGE)) is not None
    assert server.handle(MASTER_A.request()) == RemotingCommand(0, flag=1, ext_fields={})
    assert server.handle(attrs.evolve(SLAVE_A.request(), flag=2)) is None  # oneway


# -- over loopback TCP -------------------------------------------------------------------------


async def _start(
    nursery: trio.Nursery, server: NameServer | None = None
) -> tuple[NameServer, NameServerClient]:
    """Run ``server`` (default: one on a free loopback port); a client of it."""
    server = server or NameServer(("127.0.0.1", 0))
    address = await nursery.start(server.run)
    return server, NameServerClient([address], timeout=5.0)


@asynccontextmanager
async def held(client: NameServerClient) -> AsyncIterator[NameServerConnection]:
    """A connection to the client's first name server, open for the block (registrations
    made over it last that long)."""
    async with client.connection(client.addresses[0]) as connection:
        yield connection


async def test_registration_route_and_cluster_over_tcp() -> None:
    async with trio.open_nursery() as nursery:
        server, client = await _start(nursery)
        async with held(client) as broker:
            answer = await broker.register_broker(SLAVE_A)  # no master yet
            assert answer == RegisterBrokerResponse()
            await broker.register_broker(MASTER_A)
            answer = await broker.register_broker(SLAVE_A)
            assert (answer.master_address, answer.master_ha_address) == (
                "10.0.0.1:10911",
                "10.0.0.1:10912",
            )
            route = await client.route("TopicTest")
            assert route.brokers == (
                RouteBroker("broker-a", 4, ((0, "10.0.0.1:10911"), (1, "10.0.0.2:10911"))),
            )
            with pytest.raises(RemotingResponseError) as raised:
                await client.route("Nowhere")
            assert raised.value.code == ResponseCode.TOPIC_NOT_EXIST
            assert "the topic: Nowhere" in str(raised.value)
            cluster = await client.cluster()
            assert cluster == server.registry.cluster_info()
            assert cluster.members() == [
                ("DefaultCluster", "broker-a", 0, "10.0.0.1:10911"),
                ("DefaultCluster", "broker-a", 1, "10.0.0.2:10911"),
            ]
            assert (await client.topics()).topic_list == ("Orders", "TopicTest")
            await client.unregister_broker(SLAVE_A)
            assert [m[2] for m in (await client.cluster()).members()] == [0]
            await broker.put_kv_config("ns", "k", "v")
            assert await broker.get_kv_config("ns", "k") == "v"
            assert await broker.get_kv_config("ns", "other") is None
        # the connection that registered closed: the master left every route
        with trio.fail_after(5):
            while len(server.registry):  # noqa: ASYNC110 - the server notices the close
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()


async def test_a_short_registration_lasts_as_long_as_its_connection() -> None:
    async with trio.open_nursery() as nursery:
        server, client = await _start(nursery)
        await client.register_broker(MASTER_A)
        with trio.fail_after(5):
            while len(server.registry):  # noqa: ASYNC110 - the server notices the close
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()


async def test_the_registrar_registers_renews_follows_the_master_and_unregisters(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with trio.open_nursery() as nursery:
        server, client = await _start(nursery)
        topics = [("TopicTest", 4)]
        answers: list[RegisterBrokerResponse] = []

        def master() -> BrokerRegistration:
            return attrs.evolve(MASTER_A, topics=tuple(topics))

        master_side = NameServerRegistrar(client, master, interval=0.2)
        slave_side = NameServerRegistrar(
            client, lambda: SLAVE_A, interval=0.2, on_answer=answers.append
        )
        master_scope = trio.CancelScope()
        nursery.start_soon(partial(_run_in, master_scope, master_side.run))
        with trio.fail_after(5):
            while master_side.registrations == 0:  # noqa: ASYNC110
                await trio.sleep(0.01)
        nursery.start_soon(slave_side.run)
        with trio.fail_after(5):
            while not answers or answers[-1].master_ha_address is None:  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert answers[-1] == RegisterBrokerResponse("10.0.0.1:10911", "10.0.0.1:10912")
        version = master_side.data_version
        assert version is not None
        topics.append(("New", 1))  # a new topic: a new data version, routable
        master_side.wake()
        with trio.fail_after(5):
            while server.registry.route("New") is None:  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert master_side.data_version is not None
        assert master_side.data_version.counter == version.counter + 1
        entry = server.registry.get(("DefaultCluster", "broker-a", 0))
        assert entry is not None and entry.data_version == master_side.data_version
        # the master's connection breaks: it leaves, and comes back at the next round
        held_connections = list(master_side._connections.values())
        await held_connections[0].aclose()
        with trio.fail_after(5):
            while server.registry.get(("DefaultCluster", "broker-a", 0)) is None:  # noqa: ASYNC110
                await trio.sleep(0.01)
        master_scope.cancel()
        # a clean stop unregisters: only the slave is left
        with trio.fail_after(5):
            while len(server.registry) != 1:  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert "unregistered from the name servers" in caplog.text
        nursery.cancel_scope.cancel()


async def _run_in(scope: trio.CancelScope, run: Callable[[], Any]) -> None:
    with scope:
        await run()


async def test_a_refused_takeover_is_logged_on_both_sides(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with trio.open_nursery() as nursery:
        _, client = await _start(nursery)
        async with held(client) as holder:
            await holder.register_broker(MASTER_A)
            moved = attrs.evolve(MASTER_A, broker_address="10.0.0.9:1")
            intruder = NameServerRegistrar(client, lambda: moved, interval=60)
            with caplog.at_level(logging.WARNING):
                assert not await intruder.register()
            assert intruder.last_error is not None and "NO_PERMISSION" in intruder.last_error
            warnings = [
                (r.name, r.getMessage()) for r in caplog.records if r.levelno == logging.WARNING
            ]
            assert any(n == "hanet.namesrv" and "refused" in m for n, m in warnings), warnings
            assert any(n == "hanet.broker" and "refused" in m for n, m in warnings), warnings
        nursery.cancel_scope.cancel()


async def test_expiry_by_the_scan_while_the_connection_stays() -> None:
    async with trio.open_nursery() as nursery:
        server = NameServer(("127.0.0.1", 0), expire_after=0.3, scan_interval=0.05)
        server, client = await _start(nursery, server)
        async with held(client) as broker:
            await broker.register_broker(MASTER_A)
            assert len(server.registry) == 1
            with trio.fail_after(5):
                while len(server.registry):  # noqa: ASYNC110
                    await trio.sleep(0.02)
            assert broker.is_connected
            await broker.register_broker(MASTER_A)  # it may come back
            assert len(server.registry) == 1
        nursery.cancel_scope.cancel()


async def test_where_a_client_puts_and_pulls_a_topic() -> None:
    async with trio.open_nursery() as nursery:
        _, client = await _start(nursery)
        async with held(client) as broker:
            for registration in (MASTER_A, SLAVE_A, MASTER_B):
                await broker.register_broker(registration)
            # puts: the masters holding the topic; a new topic: every master
            assert await client.put_addresses("Orders") == [("10.0.0.1", 10911)]
            both = [("10.0.0.1", 10911), ("10.0.0.3", 10911)]
            assert await client.put_addresses("TopicTest") == both
            assert await client.put_addresses("NewTopic") == both
            # pulls: one broker name's members, the master first
            assert await client.pull_addresses("TopicTest") == [
                ("10.0.0.1", 10911),
                ("10.0.0.2", 10911),
            ]
            assert await client.pull_addresses("TopicTest", "broker-b") == [("10.0.0.3", 10911)]
            with pytest.raises(RemotingConnectionError, match="no broker name 'broker-c'"):
                await client.pull_addresses("TopicTest", "broker-c")
            with pytest.raises(RemotingResponseError) as raised:
                await client.pull_addresses("NewTopic")
            assert raised.value.code == ResponseCode.TOPIC_NOT_EXIST
            await broker.unregister_broker(MASTER_A)
            await broker.unregister_broker(MASTER_B)
            with pytest.raises(RemotingConnectionError, match="no master"):
                await client.put_addresses("NewTopic")
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (b"\x00\x00\x00\x05\x07\x00\x00\x01{", "serialize type"),  # unknown serialize type 7
        (b"\x00\x00\x00\x06\x00\x00\x00\x02{x", "JSON header"),  # not JSON
        (b"\x00\x10\x00\x00\x00", "exceeds"),  # 1 MiB > the 4 KiB maximum
    ],
)
async def test_a_malformed_frame_closes_only_its_connection(
    frame: bytes, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with trio.open_nursery() as nursery:
        server, client = await _start(nursery, NameServer(("127.0.0.1", 0), max_frame_length=4096))
        async with held(client) as good:
            await good.register_broker(MASTER_A)
            assert server.address is not None
            bad = await trio.open_tcp_stream(*server.address)
            await bad.send_all(frame)
            with trio.fail_after(5):
                while await bad.receive_some(1024):
                    pass  # the server closes it
            await bad.aclose()
            assert len((await good.cluster()).members()) == 1
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("closing" in w and reason in w for w in warnings), warnings
        nursery.cancel_scope.cancel()


async def test_the_allow_list_refuses_other_networks() -> None:
    async with trio.open_nursery() as nursery:
        server = NameServer(("127.0.0.1", 0), allow=AllowList.parse("10.0.0.0/8"))
        _, client = await _start(nursery, server)
        with pytest.raises(RemotingConnectionError):
            await client.cluster()
        nursery.cancel_scope.cancel()


async def test_no_name_server_reachable() -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()
    client = NameServerClient([("127.0.0.1", port)], timeout=2)
    with pytest.raises(RemotingConnectionError):
        await client.cluster()
    registrar = NameServerRegistrar(client, lambda: MASTER_A)
    assert not await registrar.register()
    assert registrar.failures == 1 and registrar.last_error is not None


async def _fake_name_server(
    nursery: trio.Nursery, answer: Callable[[RemotingCommand], RemotingCommand]
) -> tuple[str, int]:
    """A server answering every request with ``answer(request)``."""
    processors: dict[int, RequestProcessor] = {
        code: (lambda ctx, request: answer(request)) for code in RequestCode
    }

    def init(channel: StreamChannel) -> None:
        for name, handler in remoting_pipeline():
            channel.pipeline.add_last(handler, name)
        channel.pipeline.add_last(RemotingDispatcher(processors, port="fake"))

    server = await nursery.start(partial(serve, init, 0, host="127.0.0.1"))
    address: tuple[str, int] = server.addresses[0]
    return address


@pytest.mark.parametrize(
    "answer",
    [
        lambda r: r.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "not a name server"),
        lambda r: r.response(ResponseCode.SYSTEM_BUSY, "busy"),
        lambda r: r.response(body=b"{not json"),  # malformed
    ],
)
async def test_a_bad_name_server_makes_the_client_ask_the_next(
    answer: Callable[[RemotingCommand], RemotingCommand],
) -> None:
    async with trio.open_nursery() as nursery:
        bad = await _fake_name_server(nursery, answer)
        good_server, _ = await _start(nursery)
        assert good_server.address is not None
        client = NameServerClient([bad, good_server.address], timeout=2.0)
        register(good_server.registry, MASTER_A, good_server.now())
        route = await client.route("TopicTest")
        assert route.brokers[0].broker_name == "broker-a"
        assert len((await client.cluster()).members()) == 1
        with pytest.raises(RemotingResponseError) as raised:
            await client.route("Nowhere")  # an answer: not asked again
        assert raised.value.code == ResponseCode.TOPIC_NOT_EXIST
        await client.unregister_broker(MASTER_A)  # the bad one is logged, the good one done
        assert len(good_server.registry) == 0
        with pytest.raises(RemotingError):
            await NameServerClient([bad], timeout=2.0).route("TopicTest")
        nursery.cancel_scope.cancel()


async def test_the_client_reads_rocketmq_answers_with_bare_keys() -> None:
    old_route = TopicRouteData(
        (QueueData("broker-a", 8, 8, 7),),
        (BrokerData("DefaultCluster", "broker-a", {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}),),
    ).encode_for(standard_json=False)
    assert b"{0:" in old_route
    cluster = captured("02-broker-produce-consume__GET_BROKER_CLUSTER_INFO__response_SUCCESS.bin")

    def answer(request: RemotingCommand) -> RemotingCommand:
        if request.code == RequestCode.GET_BROKER_CLUSTER_INFO:
            return request.response(body=decode_command(cluster[4:]).body)
        return request.response(body=old_route)

    async with trio.open_nursery() as nursery:
        client = NameServerClient([await _fake_name_server(nursery, answer)])
        route = await client.route("TBW102")
        assert route.brokers[0].addresses == ((0, "10.0.0.1:10911"), (1, "10.0.0.2:10911"))
        assert await client.pull_addresses("TBW102") == [("10.0.0.1", 10911), ("10.0.0.2", 10911)]
        assert (await client.cluster()).master_addresses() == ["127.0.0.1:10911"]
        nursery.cancel_scope.cancel()


async def test_a_malformed_route_is_a_protocol_error() -> None:
    async with trio.open_nursery() as nursery:
        address = await _fake_name_server(nursery, lambda r: r.response(body=b'{"queueDatas":1}'))
        async with NameServerClient([address]).connection(address) as connection:
            with pytest.raises(RemotingProtocolError, match="malformed route"):
                await connection.route("T")
        nursery.cancel_scope.cancel()


class _CountingNameServer(NameServer):
    """Counts the requests it answered."""

    answered = 0

    def initialize(self, channel: Any) -> None:
        super().initialize(channel)
        processors = dict(self.dispatcher.processors)
        inner = processors[RequestCode.GET_BROKER_CLUSTER_INFO]

        def counting(ctx: Any, request: RemotingCommand) -> RemotingCommand | None:
            self.answered += 1
            return inner(ctx, request)

        processors[RequestCode.GET_BROKER_CLUSTER_INFO] = counting
        channel.pipeline.replace("dispatch", RemotingDispatcher(processors), "dispatch")


async def test_a_client_not_reading_its_answers_is_not_read_either() -> None:
    server = _CountingNameServer(("127.0.0.1", 0))
    for i in range(20):  # answers of some size: the server's outbound fills sooner
        registration = attrs.evolve(MASTER_A, broker_name=f"broker-{i}", broker_address=f"h{i}:1")
        register(server.registry, registration, T0 + 10**6)
    answer_size = len(server.registry.cluster_info().encode())
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(server.run)
        sock = trio.socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        await sock.connect((host, port))
        stream = trio.SocketStream(sock)
        frame = encode_command(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
        sent = 0
        with trio.move_on_after(3):
            while True:  # never reads: the server stops reading once its buffers are full
                await stream.send_all(frame * 100)
                sent += 100
        answered = server.answered
        await trio.sleep(0.5)
        assert server.answered == answered  # reading paused
        assert answered < sent
        assert answered * answer_size < 64 << 20  # not every answer is held
        await stream.aclose()
        nursery.cancel_scope.cancel()


def test_captured_frames_of_both_serialize_types_are_answered_in_kind() -> None:
    server = NameServer(("127.0.0.1", 0), clock=lambda: T0)
    channel = connect(server)
    run = "verify-ROCKETMQ-serialize-20261125-164623"
    answer = ask(channel, captured(f"{run}__GET_BROKER_CLUSTER_INFO__request.bin"))
    assert answer.serialize_type == SerializeType.ROCKETMQ


# -- hanet namesrv, a real process -------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("stop", "status"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
async def test_hanet_namesrv_process(
    processes: HanetProcesses, stop: signal.Signals, status: int
) -> None:
    argv = ["namesrv", "--listen", "127.0.0.1:0", "--expire-after", "60"]
    namesrv = await processes.start("namesrv", *argv)
    assert namesrv.ready["expire_after"] == 60
    client = NameServerClient([namesrv.address("namesrv")])
    async with held(client) as broker:
        await broker.register_broker(MASTER_A)
        answer = await broker.register_broker(SLAVE_A)
        assert answer.master_ha_address == "10.0.0.1:10912"
        assert len((await client.cluster()).members()) == 2
    assert await namesrv.stop(stop, 10) == status
    text = namesrv.text()
    assert "new broker DefaultCluster/broker-a/0" in text
    assert f"{stop.name}: stopping" in text
    assert "Traceback" not in text


def test_namesrv_port_in_use(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["namesrv", "--listen", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hanet: cannot listen: ")
    assert f"(127.0.0.1:{port})" in err


@pytest.mark.parametrize("value", ["0", "-5", "soon"])
def test_namesrv_refuses_a_bad_expiry(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["namesrv", "--expire-after", value])
    assert raised.value.code == 2
    assert "--expire-after" in capsys.readouterr().err


def test_namesrv_refuses_half_a_tls_setup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    assert main(["namesrv", "--tls-cert", str(cert)]) == 2
    assert "--tls-cert and --tls-key go together" in capsys.readouterr().err
