"""The name server's admin requests: DELETE_TOPIC_IN_NAMESRV, WIPE_WRITE_PERM_OF_BROKER and
ADD_WRITE_PERM_OF_BROKER, through :meth:`NameServer.handle` (as a connection gets them)."""

from __future__ import annotations

import attrs

from hanet.namesrv import NameServer
from hanet.protocol import (
    PERM_READ,
    PERM_WRITE,
    BrokerRegistration,
    DataVersion,
    DeleteTopicFromNamesrvRequestHeader,
    GetRouteInfoRequestHeader,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    TopicRouteData,
    WritePermOfBrokerRequestHeader,
    WritePermOfBrokerResponseHeader,
)


def master(cluster: str, name: str, address: str, *topics: tuple[str, int]) -> BrokerRegistration:
    version = DataVersion(1, 1)
    return BrokerRegistration(cluster, name, 0, "ASYNC_MASTER", address, "", topics, version)


MASTER_A = master("C1", "broker-a", "10.0.0.1:10911", ("T", 4), ("U", 2))
MASTER_B = master("C2", "broker-b", "10.0.0.3:10911", ("T", 2))


def _server(*registrations: BrokerRegistration) -> NameServer:
    server = NameServer(clock=lambda: 1000.0)
    for registration in registrations:
        answer = server.handle(registration.request())
        assert answer is not None and answer.code == ResponseCode.SUCCESS, answer
    return server


def _route(server: NameServer, topic: str) -> TopicRouteData | None:
    request = RemotingCommand.request(
        RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic).to_fields()
    )
    answer = server.handle(request)
    assert answer is not None
    if answer.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    return TopicRouteData.decode(answer.body)


def _perms(server: NameServer, topic: str) -> dict[str, int]:
    route = _route(server, topic)
    assert route is not None
    return {q.broker_name: q.perm for q in route.queue_datas}


def _write_perm(server: NameServer, code: int, broker_name: str) -> RemotingCommand:
    fields = WritePermOfBrokerRequestHeader(broker_name).to_fields()
    answer = server.handle(RemotingCommand.request(code, fields))
    assert answer is not None and answer.code == ResponseCode.SUCCESS
    return answer


def test_delete_topic_everywhere_or_in_one_cluster() -> None:
    server = _server(MASTER_A, MASTER_B)
    request = RemotingCommand.request(
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        DeleteTopicFromNamesrvRequestHeader("T", "C2").to_fields(),
    )
    assert server.handle(request).code == ResponseCode.SUCCESS  # type: ignore[union-attr]
    route = _route(server, "T")
    assert route is not None and [q.broker_name for q in route.queue_datas] == ["broker-a"]
    request = RemotingCommand.request(
        RequestCode.DELETE_TOPIC_IN_NAMESRV, DeleteTopicFromNamesrvRequestHeader("T").to_fields()
    )
    assert server.handle(request).code == ResponseCode.SUCCESS  # type: ignore[union-attr]
    assert _route(server, "T") is None
    assert _route(server, "U") is not None
    # a broker that still holds it brings it back when it registers again
    server.handle(MASTER_A.request())
    assert _route(server, "T") is not None


def test_wipe_and_add_write_perm() -> None:
    server = _server(MASTER_A, MASTER_B)
    rw = PERM_READ | PERM_WRITE
    assert _perms(server, "T") == {"broker-a": rw, "broker-b": rw}
    answer = _write_perm(server, RequestCode.WIPE_WRITE_PERM_OF_BROKER, "broker-a")
    assert WritePermOfBrokerResponseHeader.from_fields(answer.fields).wipe_topic_count == 2
    assert _perms(server, "T") == {"broker-a": PERM_READ, "broker-b": rw}
    assert _perms(server, "U") == {"broker-a": PERM_READ}
    # a renewal with the same topics keeps the wipe (RocketMQ rewrites queue data only when
    # the data version changes)
    server.handle(MASTER_A.request())
    assert _perms(server, "T")["broker-a"] == PERM_READ
    answer = _write_perm(server, RequestCode.ADD_WRITE_PERM_OF_BROKER, "broker-a")
    assert answer.fields == {"addTopicCount": "2"}
    assert _perms(server, "T")["broker-a"] == rw
    # wiped again, then the broker's topics change: its registration's permissions count
    _write_perm(server, RequestCode.WIPE_WRITE_PERM_OF_BROKER, "broker-a")
    changed = attrs.evolve(MASTER_A, data_version=DataVersion(2, 2))
    server.handle(changed.request())
    assert _perms(server, "T")["broker-a"] == rw
    # an unknown broker name: nothing to wipe
    answer = _write_perm(server, RequestCode.WIPE_WRITE_PERM_OF_BROKER, "nobody")
    assert answer.fields == {"wipeTopicCount": "0"}


def test_a_missing_header_field_is_a_system_error() -> None:
    server = _server(MASTER_A)
    answer = server.handle(RemotingCommand.request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {}))
    assert answer is not None and answer.code == ResponseCode.SYSTEM_ERROR
    assert "brokerName" in (answer.remark or "")
    assert _perms(server, "T")["broker-a"] == PERM_READ | PERM_WRITE
