"""The admin requests' headers and bodies against frames RocketMQ 4.9.8 sent (mqadmin
consumerProgress and brokerStatus through a logging relay), and their round trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hanet.protocol import (
    ClientConnection,
    ConsumeFromWhere,
    ConsumerConnection,
    ConsumeStats,
    ConsumeType,
    CreateTopicRequestHeader,
    GetConsumeStatsRequestHeader,
    MessageModel,
    MessageQueue,
    ObjectKeyed,
    OffsetWrapper,
    ProducerConnection,
    RemotingHeaderError,
    RequestCode,
    ResetOffsetBody,
    ResetOffsetRequestHeader,
    SubscriptionData,
    TopicOffset,
    TopicStatsTable,
    decode_command,
    loads_object_keys,
    properties_to_text,
    text_to_properties,
)

FIXTURES = Path(__file__).parent / "fixtures" / "remoting" / "java"
RUN = "02-broker-produce-consume"


def _frame(name: str) -> tuple[bytes, dict[str, object]]:
    data = (FIXTURES / f"{RUN}__{name}.bin").read_bytes()
    meta = json.loads((FIXTURES / f"{RUN}__{name}.json").read_text())
    return data, meta


def test_consume_stats_request_as_mqadmin_sent_it() -> None:
    data, meta = _frame("GET_CONSUME_STATS__request")
    command = decode_command(data[4:])
    assert command.code == RequestCode.GET_CONSUME_STATS == meta["header"]["code"]  # type: ignore[index]
    header = GetConsumeStatsRequestHeader.from_fields(command.fields)
    assert header == GetConsumeStatsRequestHeader("cap_lite_cg")
    assert header.to_fields() == {"consumerGroup": "cap_lite_cg"}


def test_consume_stats_answer_of_rocketmq_decodes() -> None:
    data, meta = _frame("GET_CONSUME_STATS__response_SUCCESS")
    command = decode_command(data[4:])
    stats = ConsumeStats.decode(command.body)
    assert stats.consume_tps == pytest.approx(0.15)
    assert stats.offset_table[MessageQueue("CapTopic", "broker-a", 1)] == OffsetWrapper(
        1, 1, 1795624856151
    )
    assert stats.offset_table[MessageQueue("CapTopic", "broker-a", 2)] == OffsetWrapper(0, 0, 0)
    assert len(stats.offset_table) == 4 and stats.total_diff == 0
    # written back the way fastjson writes it: same entries, queue objects as keys
    again = stats.encode()
    assert ConsumeStats.decode(again) == stats
    text = meta["body_text"]
    assert isinstance(text, str)
    for queue, wrapper in stats.offset_table.items():
        entry = (
            json.dumps(queue.to_json(), separators=(",", ":"))
            + ":"
            + json.dumps(wrapper.to_json(), separators=(",", ":"))
        )
        assert entry in text and entry.encode() in again
    assert again.startswith(b'{"consumeTps":0.15,"offsetTable":{{"brokerName":"broker-a"')


def test_runtime_info_request_as_mqadmin_sent_it() -> None:
    data, _ = _frame("GET_BROKER_RUNTIME_INFO__request")
    command = decode_command(data[4:])
    assert command.code == RequestCode.GET_BROKER_RUNTIME_INFO
    assert len(command.body) == 0
    assert set(command.fields) == {"AccessKey", "Signature"}  # nothing the broker needs


def test_queue_keyed_bodies_round_trip() -> None:
    a, b = MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-b", 3)
    stats = TopicStatsTable({a: TopicOffset(0, 5, 17), b: TopicOffset(2, 9, 0)})
    assert TopicStatsTable.decode(stats.encode()) == stats
    assert stats.encode().startswith(b'{"offsetTable":{{"brokerName":"broker-a","queueId":0')
    reset = ResetOffsetBody({a: 3, b: 7})
    assert ResetOffsetBody.decode(reset.encode()) == reset
    assert reset.encode() == (
        b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:3,'
        b'{"brokerName":"broker-b","queueId":3,"topic":"T"}:7}}'
    )
    assert ResetOffsetBody.decode(b'{"offsetTable":{}}') == ResetOffsetBody()


def test_connection_bodies_round_trip() -> None:
    member = ClientConnection("10.0.0.1@1", "10.0.0.1:5000", "JAVA", 409)
    body = ConsumerConnection(
        (member,),
        {"T": SubscriptionData("T", "TagA")},
        ConsumeType.CONSUME_PASSIVELY,
        MessageModel.CLUSTERING,
        ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
    )
    assert ConsumerConnection.decode(body.encode()) == body
    document = json.loads(body.encode())
    assert list(document) == [
        "connectionSet",
        "consumeFromWhere",
        "consumeType",
        "messageModel",
        "subscriptionTable",
    ]
    producers = ProducerConnection((member,))
    assert ProducerConnection.decode(producers.encode()) == producers
    # the C++ client's language by ordinal
    decoded = ProducerConnection.decode(b'{"connectionSet":[{"clientId":"c","language":1}]}')
    assert decoded.connection_set[0].language == "CPP"


def test_headers_on_the_wire() -> None:
    assert CreateTopicRequestHeader("T", read_queue_nums=4, write_queue_nums=4).to_fields() == {
        "topic": "T",
        "defaultTopic": "TBW102",
        "readQueueNums": "4",
        "writeQueueNums": "4",
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
        "order": "false",
    }
    reset = ResetOffsetRequestHeader.from_fields(
        {"topic": "T", "group": "G", "timestamp": "-1", "isForce": "true"}
    )
    assert reset == ResetOffsetRequestHeader("T", "G", -1, True)
    with pytest.raises(RemotingHeaderError, match="isForce"):
        ResetOffsetRequestHeader.from_fields({"topic": "T", "group": "G", "timestamp": "1"})


def test_object_keys_and_bad_bodies() -> None:
    value = loads_object_keys(b'{{"a":1}:2,{"a":3}:[true,null,"x"]}', "test")
    assert isinstance(value, ObjectKeyed)
    assert list(value) == [({"a": 1}, 2), ({"a": 3}, [True, None, "x"])]
    assert loads_object_keys('{0:"a",k:1.5}', "test") == {"0": "a", "k": 1.5}
    with pytest.raises(RemotingHeaderError):
        loads_object_keys("[\u0663]", "test")  # a non-ASCII digit is not JSON
    digits = b"9" * 5000  # past int()'s digit limit
    for bad in (b"{", b'{"a":1', b"\xff", b'{"a":1} x', b"[" * 100 + b"]" * 100, digits):
        with pytest.raises(RemotingHeaderError):
            loads_object_keys(bad, "test")
    with pytest.raises(RemotingHeaderError, match="message queues"):
        ConsumeStats.decode(b'{"offsetTable":{"x":1}}')
    with pytest.raises(RemotingHeaderError):
        ConsumeStats.decode(b'{"offsetTable":{{"topic":"T"}:{}}}')  # no brokerName


def test_properties_text() -> None:
    text = properties_to_text([("brokerName", "b"), ("slaveReadEnable", "true")])
    assert text == b"brokerName=b\nslaveReadEnable=true\n"
    assert text_to_properties(text + b"# comment\n\nx: 1\n") == {
        "brokerName": "b",
        "slaveReadEnable": "true",
        "x": "1",
    }
    with pytest.raises(RemotingHeaderError, match="line 1"):
        text_to_properties(b"no separator")
