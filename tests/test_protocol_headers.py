"""The broker port's typed headers, bodies and message helpers against what RocketMQ 4.9.8,
ali-ons and the C++ client really send (tests/fixtures/remoting)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hanet.protocol import (
    BatchMessage,
    ConsumeFromWhere,
    ConsumerListBody,
    ConsumerOffsetSerializeWrapper,
    ConsumeType,
    GetMaxOffsetRequestHeader,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageId,
    MessageModel,
    MessageProperty,
    MessageQueue,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    RemotingCommand,
    RemotingHeaderError,
    RequestCode,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    UniqueIdGenerator,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    decode_batch,
    decode_command,
    encode_batch,
    properties_to_string,
    string_to_properties,
)

FIXTURES = Path(__file__).parent / "fixtures" / "remoting"
JAVA = FIXTURES / "java"


def java_frame(name: str) -> RemotingCommand:
    return decode_command((JAVA / f"02-broker-produce-consume__{name}.bin").read_bytes()[4:])


def client_frames(client: str, code: int) -> list[RemotingCommand]:
    out = []
    for line in (FIXTURES / "clients" / f"{client}.jsonl").read_text().splitlines():
        d: dict[str, Any] = json.loads(line)
        if d["code"] == code:
            body = d["body"] or ""
            out.append(RemotingCommand(code, ext_fields=d["hdr"]["extFields"], body=body.encode()))
    assert out, f"{client} sent no {code}"
    return out


# -- headers --------------------------------------------------------------------------------


def test_java_send_v2_header_reads_with_the_short_keys() -> None:
    cmd = java_frame("SEND_MESSAGE_V2__request")
    header = SendMessageRequestHeader.decode(cmd.code, cmd.fields)
    assert header.producer_group == "rmqtest_pg"
    assert header.topic == "CapTopic"
    assert header.default_topic == "TBW102"
    assert (header.default_topic_queue_nums, header.queue_id, header.sys_flag) == (4, 3, 0)
    assert header.born_timestamp == 1795624856079
    assert header.reconsume_times == 0
    assert header.unit_mode is False and header.batch is False
    assert header.bname == "broker-a"
    assert header.max_reconsume_times is None
    props = string_to_properties(header.properties)
    assert props[MessageProperty.TAGS] == "TagA"
    assert props[MessageProperty.WAIT] == "true"
    assert list(props) == ["KEYS", "rmqtestIndex", "UNIQ_KEY", "WAIT", "TAGS"]
    # Both ways: the V2 keys come back as they were sent.
    assert header.to_v2_fields() == dict(cmd.fields)
    assert SendMessageRequestHeader.from_fields(header.to_fields()) == header


def test_send_answer_shape_is_rocketmq_s() -> None:
    cmd = java_frame("SEND_MESSAGE_V2__response_SUCCESS")
    header = SendMessageResponseHeader.from_fields(cmd.fields)
    assert header == SendMessageResponseHeader("7F00000100002A9F00000000000002CD", 3, 0)
    assert header.to_fields() == {
        "msgId": "7F00000100002A9F00000000000002CD",
        "queueId": "3",
        "queueOffset": "0",
    }
    msg_id = MessageId.parse(header.msg_id)
    assert (msg_id.address, msg_id.offset) == ("127.0.0.1:10911", 0x2CD)
    assert str(msg_id) == header.msg_id


@pytest.mark.parametrize(("client", "code"), [("cpp", 10), ("alions", 10), ("cpp2", 310)])
def test_cpp_and_alions_sends_read(client: str, code: int) -> None:
    for cmd in client_frames(client, code):
        header = SendMessageRequestHeader.decode(cmd.code, cmd.fields)
        assert header.topic == "DemoTopic"
        assert header.unit_mode is False  # the C++ client writes "0"
        assert header.properties is not None and "TAGS\x01" in header.properties


def test_alions_v2_send_without_optional_keys() -> None:
    cmd = client_frames("alions", 310)[0]
    assert "n" not in cmd.fields and cmd.fields["k"] == "false"
    header = SendMessageRequestHeader.from_v2_fields(cmd.fields)
    assert header.bname is None and header.batch is False
    assert header.born_timestamp == 1795624595700


def test_pull_header_and_answer() -> None:
    cmd = java_frame("PULL_MESSAGE__request")
    header = PullMessageRequestHeader.from_fields(cmd.fields)
    assert header.sys_flag == 22 and header.suspend and not header.has_commit_offset
    assert header.suspend_timeout_millis == 20000
    assert header.expression_type == "TAG" and header.subscription == "*"
    fields = header.to_fields()
    assert list(fields)[:3] == ["consumerGroup", "topic", "queueId"]
    assert {k: v for k, v in cmd.fields.items() if k != "ReqT"} == fields
    answer = java_frame("PULL_MESSAGE__response_SUCCESS")
    reply = PullMessageResponseHeader.from_fields(answer.fields)
    assert reply == PullMessageResponseHeader(0, 1, 0, 1)
    assert reply.to_fields() == dict(
        suggestWhichBrokerId="0", nextBeginOffset="1", minOffset="0", maxOffset="1"
    )


@pytest.mark.parametrize("client", ["cpp", "alions"])
def test_client_pulls_and_offsets_read(client: str) -> None:
    pull = PullMessageRequestHeader.from_fields(client_frames(client, 11)[0].fields)
    assert pull.max_msg_nums == 32 and pull.suspend and pull.has_commit_offset is False
    query = QueryConsumerOffsetRequestHeader.from_fields(client_frames(client, 14)[0].fields)
    assert query.queue_id == 0
    update = UpdateConsumerOffsetRequestHeader.from_fields(client_frames(client, 15)[0].fields)
    assert update.commit_offset >= 0
    unregister = UnregisterClientRequestHeader.from_fields(client_frames(client, 35)[0].fields)
    assert unregister.producer_group


def test_query_offset_round_trip() -> None:
    cmd = java_frame("QUERY_CONSUMER_OFFSET__request")
    header = QueryConsumerOffsetRequestHeader.from_fields(cmd.fields)
    assert header == QueryConsumerOffsetRequestHeader("cap_lite_cg", "CapTopic", 1, "broker-a")
    answer = java_frame("QUERY_CONSUMER_OFFSET__response_SUCCESS")
    assert QueryConsumerOffsetResponseHeader.from_fields(answer.fields).offset == 0


def test_missing_and_bad_fields_are_named() -> None:
    with pytest.raises(RemotingHeaderError, match="queueId is missing"):
        GetMaxOffsetRequestHeader.from_fields({"topic": "T"})
    with pytest.raises(RemotingHeaderError, match=r"queueId.*not an Integer"):
        GetMaxOffsetRequestHeader.from_fields({"topic": "T", "queueId": "x1"})
    with pytest.raises(RemotingHeaderError, match="out of range"):
        GetMaxOffsetRequestHeader.from_fields({"topic": "T", "queueId": str(1 << 31)})
    for digits in ("9" * 5000, "-" + "9" * 5000):  # past int()'s digit limit too
        with pytest.raises(RemotingHeaderError, match="out of range"):
            GetMaxOffsetRequestHeader.from_fields({"topic": "T", "queueId": digits})
    assert GetMaxOffsetRequestHeader.from_fields({"topic": "T", "queueId": "0" * 30 + "7"}) == (
        GetMaxOffsetRequestHeader("T", 7)
    )
    with pytest.raises(RemotingHeaderError, match=r"e \(queueId\) is missing"):
        SendMessageRequestHeader.from_v2_fields({"a": "g", "b": "T", "c": "D", "d": "4"})
    with pytest.raises(RemotingHeaderError, match="not a boolean"):
        SendMessageRequestHeader.from_fields(
            dict(
                producerGroup="g",
                topic="T",
                defaultTopic="D",
                defaultTopicQueueNums="4",
                queueId="0",
                sysFlag="0",
                bornTimestamp="1",
                flag="0",
                batch="maybe",
            )
        )


@given(
    st.builds(
        SendMessageRequestHeader,
        producer_group=st.text(),
        topic=st.text(),
        default_topic=st.text(),
        default_topic_queue_nums=st.integers(-(1 << 31), (1 << 31) - 1),
        queue_id=st.integers(-(1 << 31), (1 << 31) - 1),
        sys_flag=st.integers(0, 1 << 20),
        born_timestamp=st.integers(0, 1 << 62),
        flag=st.integers(-5, 5),
        properties=st.none() | st.text(),
        reconsume_times=st.none() | st.integers(0, 100),
        unit_mode=st.booleans(),
        batch=st.booleans(),
        max_reconsume_times=st.none() | st.integers(-1, 100),
        bname=st.none() | st.text(),
    )
)
def test_send_header_round_trips_both_ways(header: SendMessageRequestHeader) -> None:
    assert SendMessageRequestHeader.from_fields(header.to_fields()) == header
    assert SendMessageRequestHeader.from_v2_fields(header.to_v2_fields()) == header
    assert SendMessageRequestHeader.decode(310, header.encode(310)) == header
    assert SendMessageRequestHeader.decode(10, header.encode(RequestCode.SEND_MESSAGE)) == header


@pytest.mark.parametrize("queue_id", ["3", "x3", None])
def test_a_send_header_decodes_the_same_the_first_time_and_after(queue_id: str | None) -> None:
    # decode() takes from_fields's reader once it has run: the same header, the same error
    fields = SendMessageRequestHeader("g", "T", "TBW102", 4, 0, 0, 1, 0).to_fields()
    if queue_id is None:
        del fields["queueId"]
    else:
        fields["queueId"] = queue_id
    outcomes = []
    for _ in range(2):
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
            given = fields if code == RequestCode.SEND_MESSAGE else _v2(fields)
            try:
                outcomes.append(repr(SendMessageRequestHeader.decode(code, given)))
            except RemotingHeaderError as exc:
                outcomes.append(f"error: {exc}")
    assert outcomes[:2] == outcomes[2:]
    assert (queue_id == "3") == ("error" not in outcomes[0])


def _v2(fields: dict[str, str]) -> dict[str, str]:
    return {SendMessageRequestHeader.V2_KEYS[k]: v for k, v in fields.items()}


# -- bodies ---------------------------------------------------------------------------------


def test_java_heartbeat_reads_and_writes_back_the_same_json() -> None:
    cmd = java_frame("HEART_BEAT__request")
    heartbeat = HeartbeatData.from_json(cmd.body)
    assert heartbeat.client_id == "192.0.2.2@25292#697887028297@STREAM"
    (consumer,) = heartbeat.consumer_data_set
    assert consumer.group_name == "cap_lite_cg"
    assert consumer.consume_type is ConsumeType.CONSUME_ACTIVELY
    assert consumer.message_model is MessageModel.CLUSTERING
    (sub,) = consumer.subscription_data_set
    assert (sub.topic, sub.sub_string, sub.sub_version) == ("CapTopic", "*", 1795624856406)
    assert [p.group_name for p in heartbeat.producer_data_set] == ["CLIENT_INNER_PRODUCER"]
    assert heartbeat.to_json() == bytes(cmd.body)


@pytest.mark.parametrize("client", ["cpp", "cpp2"])
def test_cpp_heartbeat_enums_arrive_as_ordinals(client: str) -> None:
    heartbeat = HeartbeatData.from_json(client_frames(client, 34)[0].body)
    (consumer,) = heartbeat.consumer_data_set
    assert consumer.consume_type is ConsumeType.CONSUME_PASSIVELY
    assert consumer.message_model is MessageModel.CLUSTERING
    assert consumer.consume_from_where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    topics = {s.topic for s in consumer.subscription_data_set}
    assert topics == {"DemoTopic", "%RETRY%cpp-demo-consumer"}
    assert all(s.sub_version > 0 for s in consumer.subscription_data_set)  # strings there
    assert heartbeat.producer_data_set == ()


def test_alions_heartbeat() -> None:
    heartbeat = HeartbeatData.from_json(client_frames("alions", 34)[0].body)
    (consumer,) = heartbeat.consumer_data_set
    assert consumer.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{", "not JSON"),
        (b"\xff", "not UTF-8"),
        (b"[]", "not a JSON object"),
        (b'{"consumerDataSet":[]}', "clientID is missing"),
        (b'{"clientID":"c","consumerDataSet":[{"groupName":"g","consumeType":9}]}', "ordinal"),
        (b'{"clientID":"c","consumerDataSet":[{"groupName":"g","messageModel":"X"}]}', "Model"),
    ],
)
def test_bad_heartbeats_are_refused_with_the_reason(body: bytes, reason: str) -> None:
    with pytest.raises(RemotingHeaderError, match=reason):
        HeartbeatData.from_json(body)


def test_consumer_list_body_is_rocketmq_s() -> None:
    cmd = java_frame("GET_CONSUMER_LIST_BY_GROUP__response_SUCCESS")
    body = ConsumerListBody.from_json(cmd.body)
    assert body.consumer_id_list == ("192.0.2.2@25292#697887028297@STREAM",)
    assert body.to_json() == bytes(cmd.body)


def test_lock_bodies_round_trip() -> None:
    mq = MessageQueue("T", "broker-a", 1)
    request = LockBatchRequestBody("g", "c1", frozenset({mq}))
    assert LockBatchRequestBody.from_json(request.to_json()) == request
    assert json.loads(request.to_json()) == {
        "clientId": "c1",
        "consumerGroup": "g",
        "mqSet": [{"brokerName": "broker-a", "queueId": 1, "topic": "T"}],
    }
    answer = LockBatchResponseBody(frozenset({mq}))
    assert LockBatchResponseBody.from_json(answer.to_json()) == answer


def test_offset_tables_read_bare_and_quoted_keys() -> None:
    # What RocketMQ writes into consumerOffset.json: bare queue ids.
    bare = b'{"offsetTable":{"%RETRY%g@g":{0:0},"T@g":{0:12,1:7}}}'
    table = ConsumerOffsetSerializeWrapper.from_json(bare).offset_table
    assert table == {("%RETRY%g", "g"): {0: 0}, ("T", "g"): {0: 12, 1: 7}}
    wrapper = ConsumerOffsetSerializeWrapper(table)
    assert ConsumerOffsetSerializeWrapper.from_json(wrapper.to_json()) == wrapper
    assert json.loads(wrapper.to_json())["offsetTable"]["T@g"] == {"0": 12, "1": 7}
    # A key with '@' in the topic part: the group is after the last '@'.
    for bad in (b'{"offsetTable":{"nogroup":{}}}', b'{"offsetTable":{"T@g":{"x":1}}}'):
        with pytest.raises(RemotingHeaderError):
            ConsumerOffsetSerializeWrapper.from_json(bad)


def test_bare_keys_inside_strings_are_left_alone() -> None:
    text = b'{"offsetTable":{"T@g,1:2":{3:4}}}'
    table = ConsumerOffsetSerializeWrapper.from_json(text).offset_table
    assert table == {("T", "g,1:2"): {3: 4}}


def test_subscription_groups_round_trip() -> None:
    wrapper = SubscriptionGroupWrapper({"g": SubscriptionGroupConfig("g", retry_max_times=3)})
    again = SubscriptionGroupWrapper.from_json(wrapper.to_json())
    assert again == wrapper
    doc = json.loads(wrapper.to_json())
    assert list(doc) == ["dataVersion", "subscriptionGroupTable"]
    assert list(doc["subscriptionGroupTable"]["g"]) == sorted(doc["subscriptionGroupTable"]["g"])


# -- messages -------------------------------------------------------------------------------


def test_properties_as_4_9_8_writes_them() -> None:
    props = {"KEYS": "k1 k2", "TAGS": "TagA"}
    assert properties_to_string(props) == "KEYS\x01k1 k2\x02TAGS\x01TagA"
    assert string_to_properties("KEYS\x01k1 k2\x02TAGS\x01TagA\x02") == props
    assert string_to_properties("junk\x02\x01novalue\x02A\x01") == {"A": ""}
    assert string_to_properties(None) == {}


def test_unique_ids_are_32_hex_and_distinct() -> None:
    new_id = UniqueIdGenerator(b"\xc0\x00\x02\x02")
    ids = {new_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(len(i) == 32 and i == i.upper() and i.startswith("C0000202") for i in ids)
    int(next(iter(ids)), 16)


def test_message_id_parse_refuses_garbage() -> None:
    for bad in ("", "XYZ", "G" * 32):
        with pytest.raises(ValueError):
            MessageId.parse(bad)
    v6 = MessageId(bytes(15) + b"\x01", 10911, 99)
    assert MessageId.parse(str(v6)) == v6 and len(str(v6)) == 56
    assert v6.address == "[::1]:10911"


def test_batch_body_round_trips_and_refuses_bad_sizes() -> None:
    messages = [
        BatchMessage(b"one", {"TAGS": "A", "UNIQ_KEY": "X"}),
        BatchMessage(b"", {}, flag=3),
        BatchMessage(b"x" * 300, {"KEYS": "k"}),
    ]
    body = encode_batch(messages)
    assert decode_batch(body) == messages
    assert decode_batch(b"") == []
    with pytest.raises(RemotingHeaderError, match="message 0"):
        decode_batch(body[:10])
    with pytest.raises(RemotingHeaderError, match="message 2"):
        decode_batch(body[:-1])
    corrupt = bytearray(body)
    corrupt[16:20] = (1000).to_bytes(4, "big")  # message 0's body length
    with pytest.raises(RemotingHeaderError, match="body length 1000"):
        decode_batch(bytes(corrupt))


@given(st.lists(st.binary(max_size=50)))
def test_any_bytes_decode_or_raise_the_header_error(chunks: list[bytes]) -> None:
    try:
        decode_batch(b"".join(chunks))
    except RemotingHeaderError:
        pass


# -- the fast paths read numbers exactly as the checked way does ------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("0042", 42),
        (" 7 ", 7),
        ("+5", 5),
        ("-1", -1),
        (str((1 << 31) - 1), (1 << 31) - 1),
        (str(-(1 << 31)), -(1 << 31)),
        (str(1 << 31), None),
        (str(-(1 << 31) - 1), None),
        ("\u0661\u0662", None),  # Arabic-Indic digits: digits, but not Java's
        ("1_000", None),
        ("", None),
        ("12x", None),
    ],
)
def test_integer_fields_read_plain_digits_and_refuse_the_rest(text: str, value: int | None) -> None:
    fields = {"topic": "T", "queueId": text}
    if value is None:
        with pytest.raises(RemotingHeaderError, match="queueId"):
            GetMaxOffsetRequestHeader.from_fields(fields)
    else:
        assert GetMaxOffsetRequestHeader.from_fields(fields).queue_id == value


@given(st.dictionaries(st.sampled_from("abcdefghijklmn"), st.text(max_size=12)))
def test_v2_keys_read_as_the_full_names_do(short: dict[str, str]) -> None:
    names = {v: k for k, v in SendMessageRequestHeader.V2_KEYS.items()}
    full = {names[k]: v for k, v in short.items()}
    try:
        expected: SendMessageRequestHeader | str = SendMessageRequestHeader.from_fields(full)
    except RemotingHeaderError as exc:
        expected = str(exc)
    try:
        got: SendMessageRequestHeader | str = SendMessageRequestHeader.from_v2_fields(short)
    except RemotingHeaderError as exc:
        got = str(exc)
    if isinstance(expected, str):
        assert isinstance(got, str)  # the same field is named, with its short key
    else:
        assert got == expected
