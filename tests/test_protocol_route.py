"""The name server's messages: fastjson text, the route and registration bodies and the
name server's headers, against RocketMQ 4.9.8's captured frames."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hanet.protocol import (
    MASTER_ID,
    BrokerData,
    BrokerRegistration,
    ClusterInfo,
    DataVersion,
    FastjsonError,
    GetKVConfigResponseHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    KVTable,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    QueueData,
    RegisterBrokerBody,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponse,
    RegisterBrokerResponseHeader,
    RemotingCommand,
    RemotingHeaderError,
    RequestCode,
    RouteBroker,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRoute,
    TopicRouteData,
    UnregisterBrokerRequestHeader,
    body_crc32,
    decode_command,
    fastjson_dumps,
    fastjson_loads,
    route_standard_json,
)

JAVA = Path(__file__).parent / "fixtures" / "remoting" / "java"


def frame(name: str) -> RemotingCommand:
    """A captured frame, decoded."""
    return decode_command((JAVA / name).read_bytes()[4:])


def captured(pattern: str) -> list[Path]:
    found = sorted(JAVA.glob(pattern))
    assert found, pattern
    return found


# -- fastjson ---------------------------------------------------------------------------------


def test_loads_reads_bare_integer_and_identifier_keys() -> None:
    assert fastjson_loads(b'{0:"127.0.0.1:10911",1:"x"}') == {"0": "127.0.0.1:10911", "1": "x"}
    assert fastjson_loads('{a:1, "b":{c_d$:[1,{2:3}]}}') == {"a": 1, "b": {"c_d$": [1, {"2": 3}]}}
    assert fastjson_loads(b"{-1:true}") == {"-1": True}


def test_loads_leaves_string_contents_alone() -> None:
    text = '{"k":"{0:\\"x\\", a:1}","m":{0:"{1:2}"}}'
    assert fastjson_loads(text) == {"k": '{0:"x", a:1}', "m": {"0": "{1:2}"}}
    assert fastjson_loads('["a,b:c", {x:"y"}]') == ["a,b:c", {"x": "y"}]


def test_loads_refuses_what_is_not_json() -> None:
    for bad in (b"{0:}", b"\xff", b"{", b"[1,]x", "{a b:1}"):
        with pytest.raises(FastjsonError):
            fastjson_loads(bad)
    assert issubclass(FastjsonError, ValueError)


def test_dumps_is_compact_utf8_with_quoted_or_bare_integer_keys() -> None:
    doc = {"brokerAddrs": {0: "h:1", 1: "h:2"}, "name": "été"}
    assert fastjson_dumps(doc) == '{"brokerAddrs":{"0":"h:1","1":"h:2"},"name":"été"}'.encode()
    assert fastjson_dumps(doc, bare_int_keys=True).startswith(b'{"brokerAddrs":{0:"h:1",1:')
    assert fastjson_dumps(doc, ascii_only=True).endswith(b'"\\u00e9t\\u00e9"}')
    assert fastjson_dumps([1, (2, None), True, 1.5]) == b"[1,[2,null],true,1.5]"
    with pytest.raises(TypeError):
        fastjson_dumps({(1,): 2})
    with pytest.raises(TypeError):
        fastjson_dumps({"x": object()})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text() | st.integers(), inner, max_size=4)
    ),
    max_leaves=20,
)


def _stringify(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _stringify(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_stringify(v) for v in value]
    return value


@given(json_values, st.booleans())
def test_dumps_then_loads_round_trips(value: Any, bare: bool) -> None:
    keys = [str(k) for k in value] if isinstance(value, dict) else []
    if len(keys) != len(set(keys)):
        return  # 1 and "1" collide once read back
    assert fastjson_loads(fastjson_dumps(value, bare_int_keys=bare)) == _stringify(value)


# -- registration -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", captured("*REGISTER_BROKER__*.bin"), ids=lambda p: p.stem)
def test_captured_registrations_decode_and_check_their_crc(path: Path) -> None:
    cmd = decode_command(path.read_bytes()[4:])
    if cmd.is_response:
        answer = RegisterBrokerResponse.from_command(cmd)
        assert answer == RegisterBrokerResponse()
        return
    header = RegisterBrokerRequestHeader.from_fields(cmd.fields)
    assert (header.cluster_name, header.broker_name, header.broker_id) == (
        "DefaultCluster",
        "broker-a",
        MASTER_ID,
    )
    assert header.broker_addr == "127.0.0.1:10911" and not header.compressed
    assert header.body_crc32 == body_crc32(cmd.body)
    body = RegisterBrokerBody.decode_body(cmd.body, header.compressed)
    wrapper = body.topic_config_serialize_wrapper
    assert wrapper.data_version.counter >= 0 and wrapper.data_version.timestamp > 0
    tbw = wrapper.topic_config_table["TBW102"]
    assert tbw == TopicConfig("TBW102", 8, 8, 7, "SINGLE_TAG", 0, False)
    assert body.filter_server_list == ()
    # the same bytes back: bean fields in alphabetical order, the table in its order
    assert body.encode() == bytes(cmd.body)
    assert header.to_fields() == dict(cmd.fields)


def test_compressed_registration_body_round_trips() -> None:
    table = {"T": TopicConfig("T", 4, 2, 6), "U": TopicConfig("U", 1, 1, 7, "MULTI_TAG")}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(5, 3)), ("f:1",))
    packed = body.encode_compressed()
    assert RegisterBrokerBody.decode_body(packed, compressed=True) == body
    assert RegisterBrokerBody.decode_body(body.encode(), compressed=False) == body


@pytest.mark.parametrize(
    "raw",
    [
        b"not zlib",
        zlib.compress(b"\x00\x00"),
        zlib.compress(struct.pack(">i", 100) + b"{}"),
        zlib.compress(struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1) + b"\x00\x00\x00\x03abc"),
        zlib.compress(struct.pack(">i", 2) + b"{}" + struct.pack(">i", -1)),
    ],
)
def test_bad_compressed_bodies_are_refused(raw: bytes) -> None:
    with pytest.raises(RemotingHeaderError):
        RegisterBrokerBody.decode_body(raw, compressed=True)


@pytest.mark.parametrize(
    "raw",
    [
        b"[]",
        b"{",
        b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"readQueueNums":"x"}}}}',
        b'{"topicConfigSerializeWrapper":{"dataVersion":{"counter":true}}}',
        b'{"filterServerList":[1]}',
        b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"perm":4294967296}}}}',
    ],
)
def test_bad_registration_bodies_are_refused(raw: bytes) -> None:
    with pytest.raises(RemotingHeaderError):
        RegisterBrokerBody.decode(raw)


def test_registration_request_carries_its_body_crc() -> None:
    registration = BrokerRegistration(
        "C", "b", 1, "SLAVE", "127.0.0.1:2", "", (("T", 4),), DataVersion(7, 2)
    )
    cmd = registration.request()
    assert cmd.code == RequestCode.REGISTER_BROKER
    header = RegisterBrokerRequestHeader.from_fields(cmd.fields)
    assert header.body_crc32 == body_crc32(cmd.body) and header.broker_id == 1
    body = RegisterBrokerBody.decode(cmd.body)
    assert body.topic_config_serialize_wrapper.data_version == DataVersion(7, 2)
    assert body.topic_config_serialize_wrapper.topic_config_table == {"T": TopicConfig("T", 4, 4)}
    full = attrs.evolve(registration, topic_configs=(TopicConfig("T", 8, 4, 7, order=True),))
    table = RegisterBrokerBody.decode(full.request().body).topic_config_serialize_wrapper
    assert table.topic_config_table == {"T": TopicConfig("T", 8, 4, 7, order=True)}
    gone = UnregisterBrokerRequestHeader.from_fields(registration.unregister_request().fields)
    assert gone == UnregisterBrokerRequestHeader("b", "127.0.0.1:2", "C", 1)


def test_register_answer_names_the_master() -> None:
    request = RemotingCommand.request(RequestCode.REGISTER_BROKER)
    answer = RegisterBrokerResponse("h:1", "h:2", KVTable({"a": "b"}))
    cmd = request.response(fields=answer.header().to_fields(), body=KVTable({"a": "b"}).encode())
    assert cmd.fields == {"masterAddr": "h:1", "haServerAddr": "h:2"}
    assert RegisterBrokerResponse.from_command(cmd) == answer
    empty = request.response(fields={"masterAddr": "", "haServerAddr": ""})
    assert RegisterBrokerResponse.from_command(empty) == RegisterBrokerResponse()


# -- headers ----------------------------------------------------------------------------------


def test_headers_read_their_fields_and_refuse_missing_ones() -> None:
    fields = {"brokerName": "b", "brokerAddr": "h:1", "clusterName": "C", "haServerAddr": "h:2"}
    with pytest.raises(RemotingHeaderError, match="brokerId is missing"):
        RegisterBrokerRequestHeader.from_fields(fields)
    with pytest.raises(RemotingHeaderError, match="not a number"):
        RegisterBrokerRequestHeader.from_fields({**fields, "brokerId": "one"})
    header = RegisterBrokerRequestHeader.from_fields({**fields, "brokerId": "2", "extra": "x"})
    assert header.broker_id == 2 and header.body_crc32 == 0 and header.compressed is False
    with pytest.raises(RemotingHeaderError):
        GetRouteInfoRequestHeader.from_fields({})
    route = GetRouteInfoRequestHeader.from_fields({"topic": "T", "acceptStandardJsonOnly": "TRUE"})
    assert route.accept_standard_json_only is True
    assert route.to_fields() == {"topic": "T", "acceptStandardJsonOnly": "true"}
    assert GetRouteInfoRequestHeader("T").to_fields() == {"topic": "T"}
    with pytest.raises(RemotingHeaderError, match="value is missing"):
        PutKVConfigRequestHeader.from_fields({"namespace": "n", "key": "k"})
    assert GetKVConfigResponseHeader(None).to_fields() == {}
    assert QueryDataVersionResponseHeader(True).to_fields() == {"changed": "true"}
    query = QueryDataVersionRequestHeader("b", "h:1", "C", 0)
    assert QueryDataVersionRequestHeader.from_fields(query.to_fields()) == query
    assert GetTopicsByClusterRequestHeader.from_fields({"cluster": "C"}).cluster == "C"
    assert RegisterBrokerResponseHeader.from_fields({}) == RegisterBrokerResponseHeader()


def test_route_json_standard_from_4_9_4() -> None:
    assert route_standard_json(409) and route_standard_json(401)
    assert not route_standard_json(400) and not route_standard_json(121)
    assert route_standard_json(63, True) and not route_standard_json(63, False)


# -- routes and the cluster -------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", captured("*GET_ROUTEINFO_BY_TOPIC__response_SUCCESS.bin"), ids=lambda p: p.stem
)
def test_captured_routes_decode_and_encode_to_the_same_bytes(path: Path) -> None:
    cmd = decode_command(path.read_bytes()[4:])
    data = TopicRouteData.decode(cmd.body)
    assert data == TopicRouteData(
        (QueueData("broker-a", 8, 8, 7, 0),),
        (BrokerData("DefaultCluster", "broker-a", {0: "127.0.0.1:10911"}),),
    )
    assert data.encode_for(standard_json=True) == bytes(cmd.body)
    assert b'{0:"127.0.0.1:10911"}' in data.encode_for(standard_json=False)
    route = TopicRoute.from_route_data("TBW102", data)
    assert route.brokers[0].addresses == ((0, "127.0.0.1:10911"),)
    assert route.brokers[0].queues == 8 and route.brokers[0].master_address == "127.0.0.1:10911"
    assert route.to_route_data("DefaultCluster") == data


def test_route_with_order_conf_and_filter_servers() -> None:
    data = TopicRouteData(
        (QueueData("b", 2, 1, 6),),
        (BrokerData("C", "b", {1: "h:2", 0: "h:1"}),),
        {"h:1": ("f:1",)},
        "b:2",
    )
    text = data.encode_for(standard_json=False)
    assert text.index(b"brokerDatas") < text.index(b"filterServerTable")
    assert text.index(b"orderTopicConf") < text.index(b"queueDatas")
    assert b'{0:"h:1",1:"h:2"}' in text
    assert TopicRouteData.decode(text) == data
    assert TopicRouteData.decode(data.encode_for(standard_json=True)) == data
    route = TopicRoute.from_route_data("T", data)
    assert route.brokers[0].write_queues == 1 and route.brokers[0].queues == 2


def test_route_members_without_queue_data_are_left_out() -> None:
    data = TopicRouteData((QueueData("a", 1, 1),), (BrokerData("C", "b", {0: "h:1"}),))
    assert TopicRoute.from_route_data("T", data).brokers == ()


@pytest.mark.parametrize(
    "raw",
    [
        b'{"brokerDatas":[{"brokerAddrs":{x:"h"},"brokerName":"b"}]}',
        b'{"brokerDatas":[{"brokerAddrs":{0:1},"brokerName":"b"}]}',
        b'{"queueDatas":[{"brokerName":"b"}]}',
        b'{"queueDatas":{}}',
        b'{"orderTopicConf":1}',
    ],
)
def test_bad_routes_are_refused(raw: bytes) -> None:
    with pytest.raises(RemotingHeaderError):
        TopicRouteData.decode(raw)


@pytest.mark.parametrize(
    "path", captured("*GET_BROKER_CLUSTER_INFO__response_SUCCESS.bin"), ids=lambda p: p.stem
)
def test_captured_cluster_info_decodes_and_encodes_to_the_same_bytes(path: Path) -> None:
    cmd = decode_command(path.read_bytes()[4:])
    info = ClusterInfo.decode(cmd.body)
    broker = BrokerData("DefaultCluster", "broker-a", {0: "127.0.0.1:10911"})
    assert info == ClusterInfo({"broker-a": broker}, {"DefaultCluster": ("broker-a",)})
    assert info.encode() == bytes(cmd.body)
    assert info.master_addresses() == ["127.0.0.1:10911"]
    assert info.members() == [("DefaultCluster", "broker-a", 0, "127.0.0.1:10911")]


def test_topic_list_and_kv_table() -> None:
    topics = TopicList(("A", "B"))
    assert topics.encode() == b'{"topicList":["A","B"]}'
    assert TopicList.decode(topics.encode()) == topics
    addressed = TopicList(("A",), "h:1")
    assert json.loads(addressed.encode()) == {"brokerAddr": "h:1", "topicList": ["A"]}
    assert TopicList.decode(addressed.encode()) == addressed
    table = KVTable({"T": "b:4"})
    assert table.encode() == b'{"table":{"T":"b:4"}}'
    assert KVTable.decode(table.encode()) == table
    with pytest.raises(RemotingHeaderError):
        KVTable.decode(b'{"table":{"a":1}}')


def test_data_version_json_and_next() -> None:
    version = DataVersion(1795624725247, 4)
    assert version.encode() == b'{"counter":4,"timestamp":1795624725247}'
    assert DataVersion.decode(version.encode()) == version
    assert version.next(2000) == DataVersion(2000, 5)
    with pytest.raises(RemotingHeaderError):
        DataVersion.decode(b"[1]")


def test_a_route_broker_names_its_members_addresses() -> None:
    broker = RouteBroker("broker-a", 4, ((0, "a:1"), (1, "a:2")))
    assert broker.master_address == "a:1"
    assert broker.address_of(1) == "a:2"
    assert broker.address_of(2) is None
    assert broker.write_queues == 4
    slaves_only = RouteBroker("broker-b", 2, ((1, "b:2"),))
    assert slaves_only.master_address is None
    assert slaves_only.address_of(1) == "b:2"
