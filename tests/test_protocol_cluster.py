"""The cluster requests of the broker port protocol: consumer offsets, metadata sync and the
name server's requests, their layouts, round trips and malformed frames."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from handlers import CorruptedFrameError, EncoderError
from hanet.protocol import (
    BrokerLiveInfo,
    BrokerMetadata,
    BrokerRegistration,
    ClusterInfo,
    ClusterRequest,
    ClusterResponse,
    CommitOffsetRequest,
    CommitOffsetResponse,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResponse,
    ConsumerListRequest,
    ConsumerListResponse,
    ErrorCode,
    ErrorResponse,
    MetadataRequest,
    MetadataResponse,
    QueryOffsetRequest,
    QueryOffsetResponse,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
    RouteBroker,
    RouteRequest,
    RouteResponse,
    TopicRoute,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
    UnregisterConsumerRequest,
    UnregisterConsumerResponse,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    offsets_from_json,
    offsets_to_json,
)

REGISTRATION = BrokerRegistration(
    "DefaultCluster", "broker-a", 0, "SYNC_MASTER", "10.0.0.1:10911", "10.0.0.1:10912",
    (("TopicTest", 4), ("Orders", 8)),
)  # fmt: skip


def test_commit_offset_layout() -> None:
    frame = bytes(encode_request(CommitOffsetRequest(7, "G", "T", 3, 42)))
    assert frame == b"\x04\x00\x00\x00\x07\x00\x01G\x00\x01T" + struct.pack(">iq", 3, 42)
    assert bytes(encode_response(CommitOffsetResponse(7))) == b"\x84\x00\x00\x00\x07"


def test_query_offset_layout() -> None:
    frame = bytes(encode_request(QueryOffsetRequest(1, "G", "T", 2)))
    assert frame == b"\x05\x00\x00\x00\x01\x00\x01G\x00\x01T\x00\x00\x00\x02"
    answer = bytes(encode_response(QueryOffsetResponse(1, -1)))
    assert answer == b"\x85\x00\x00\x00\x01" + struct.pack(">q", -1)


def test_metadata_uses_rocketmq_json_shapes() -> None:
    metadata = BrokerMetadata({"T": 4}, {("T", "G"): {0: 5, 3: 9}})
    document = metadata.to_json()
    assert document["offsetTable"] == {"T@G": {"0": 5, "3": 9}}
    assert document["topicConfigTable"]["T"]["writeQueueNums"] == 4
    decoded = decode_response(encode_response(MetadataResponse(3, metadata)))
    assert decoded == MetadataResponse(3, metadata)


def test_consumer_membership_layouts() -> None:
    beat = bytes(encode_request(ConsumerHeartbeatRequest(3, "G", "h@1")))
    assert beat == b"\x07\x00\x00\x00\x03\x00\x01G\x00\x03h@1"
    bye = bytes(encode_request(UnregisterConsumerRequest(4, "G", "h@1")))
    assert bye == b"\x08\x00\x00\x00\x04\x00\x01G\x00\x03h@1"
    assert bytes(encode_request(ConsumerListRequest(5, "G"))) == b"\x09\x00\x00\x00\x05\x00\x01G"
    assert bytes(encode_response(ConsumerHeartbeatResponse(3))) == b"\x87\x00\x00\x00\x03"
    assert bytes(encode_response(UnregisterConsumerResponse(4))) == b"\x88\x00\x00\x00\x04"
    answer = bytes(encode_response(ConsumerListResponse(5, ("a", "bc"))))
    assert answer == b"\x89\x00\x00\x00\x05\x00\x02\x00\x01a\x00\x02bc"


def test_consumer_list_with_too_many_ids_does_not_encode() -> None:
    with pytest.raises(EncoderError, match="client ids"):
        encode_response(ConsumerListResponse(1, ("x",) * 0x10000))


@pytest.mark.parametrize(
    "frame",
    [
        b"\x89\x00\x00\x00\x01\x00\x02\x00\x01a",  # two ids announced, one sent
        b"\x89\x00\x00\x00\x01\x00",  # a short count
        b"\x89\x00\x00\x00\x01\x00\x01\x00\x01\xff",  # an id that is not UTF-8
        b"\x87\x00\x00\x00\x01x",  # a heartbeat answer is empty
        b"\x88\x00\x00\x00\x01x",
    ],
)
def test_malformed_membership_answers_are_corrupt_frames(frame: bytes) -> None:
    with pytest.raises(CorruptedFrameError):
        decode_response(frame)


def test_register_answer_without_a_master_is_none() -> None:
    frame = encode_response(RegisterBrokerResponse(1))
    assert bytes(frame) == b"\x90\x00\x00\x00\x01\x00\x00\x00\x00"
    assert decode_response(frame) == RegisterBrokerResponse(1, None, None)


REQUESTS = [
    CommitOffsetRequest(1, "group", "Topic", 0, 0),
    QueryOffsetRequest(2, "group", "Topic", 7),
    MetadataRequest(3),
    RegisterBrokerRequest(4, REGISTRATION),
    RegisterBrokerRequest(5, BrokerRegistration("c", "b", 1, "SLAVE", "h:1")),
    UnregisterBrokerRequest(6, "c", "b", 1, "h:1"),
    RouteRequest(7, "TopicTest"),
    ClusterRequest(8),
    ConsumerHeartbeatRequest(9, "group", "10.0.0.5@1234@abcd"),
    UnregisterConsumerRequest(10, "group", "10.0.0.5@1234@abcd"),
    ConsumerListRequest(11, "group"),
    ConsumerHeartbeatRequest(12, "", ""),
]

RESPONSES = [
    CommitOffsetResponse(1),
    QueryOffsetResponse(2, 2**40),
    MetadataResponse(3, BrokerMetadata()),
    RegisterBrokerResponse(4, "10.0.0.1:10911", "10.0.0.1:10912"),
    UnregisterBrokerResponse(5),
    RouteResponse(
        6,
        TopicRoute(
            "T",
            (
                RouteBroker("broker-a", 4, ((0, "a:1"), (1, "a:2"))),
                RouteBroker("broker-b", 2, ((1, "b:2"),)),
            ),
        ),
    ),
    ClusterResponse(7, ClusterInfo((BrokerLiveInfo(REGISTRATION, 1_700_000_000_000),))),
    ErrorResponse(8, ErrorCode.TOPIC_NOT_EXIST, "no route for topic T"),
    ErrorResponse(9, ErrorCode.NOT_SUPPORTED, "not a name server"),
    ConsumerHeartbeatResponse(10),
    UnregisterConsumerResponse(11),
    ConsumerListResponse(12, ("a@1@x", "b@2@y")),
    ConsumerListResponse(13, ()),
]


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: type(r).__name__)
def test_requests_round_trip(request_: object) -> None:
    assert decode_request(encode_request(request_)) == request_  # type: ignore[arg-type]


@pytest.mark.parametrize("response", RESPONSES, ids=lambda r: type(r).__name__)
def test_responses_round_trip(response: object) -> None:
    assert decode_response(encode_response(response)) == response  # type: ignore[arg-type]


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: type(r).__name__)
def test_truncated_requests_are_corrupt_frames(request_: object) -> None:
    frame = bytes(encode_request(request_))  # type: ignore[arg-type]
    for cut in range(len(frame) - 1, 4, -1):
        with pytest.raises(CorruptedFrameError):
            decode_request(frame[:cut])
    with pytest.raises(CorruptedFrameError, match="trailing"):
        decode_request(frame + b"x")


@pytest.mark.parametrize(
    ("frame", "complaint"),
    [
        (b"\x04\x00\x00\x00\x01\x00\x01G\x00\x01T" + struct.pack(">iq", -1, 0), "queue -1"),
        (b"\x04\x00\x00\x00\x01\x00\x01G\x00\x01T" + struct.pack(">iq", 0, -5), "offset -5"),
        (b"\x05\x00\x00\x00\x01\x00\x01G\x00\x01T" + struct.pack(">i", -2), "queue -2"),
        (
            b"\x10\x00\x00\x00\x01" + b"\x00\x01c\x00\x01b" + struct.pack(">q", 0)
            + b"\x00\x01r\x00\x01a\x00\x00" + struct.pack(">I", 0xFFFFFFFF),
            "topics in",
        ),
        (
            b"\x10\x00\x00\x00\x01" + b"\x00\x01c\x00\x01b" + struct.pack(">q", -1)
            + b"\x00\x01r\x00\x01a\x00\x00" + struct.pack(">I", 0),
            "broker id -1",
        ),
    ],
)  # fmt: skip
def test_out_of_range_fields_are_refused(frame: bytes, complaint: str) -> None:
    with pytest.raises(CorruptedFrameError, match=complaint):
        decode_request(frame)


@pytest.mark.parametrize(
    "payload",
    [
        b"[]",
        b'{"offsetTable": {"no-at-sign": {"0": 1}}}',
        b'{"offsetTable": {"T@G": {"zero": 1}}}',
        b'{"offsetTable": {"T@G": {"0": "1"}}}',
        b'{"topicConfigTable": {"T": {"readQueueNums": true}}}',
        b"\xff",
    ],
)
def test_malformed_metadata_is_a_corrupt_frame(payload: bytes) -> None:
    with pytest.raises(CorruptedFrameError, match="SYNC_METADATA_OK"):
        decode_response(b"\x86\x00\x00\x00\x01" + payload)


def test_malformed_cluster_document_is_a_corrupt_frame() -> None:
    with pytest.raises(CorruptedFrameError, match="GET_CLUSTER_OK"):
        decode_response(b"\x93\x00\x00\x00\x01" + b'{"brokers": [{"cluster": 1}]}')


group_names = st.text("abcXYZ019_-%|", min_size=1, max_size=8)


@given(
    st.dictionaries(
        st.tuples(group_names, group_names),
        st.dictionaries(st.integers(0, 1023), st.integers(0, 2**62), max_size=4),
        max_size=5,
    )
)
def test_offset_tables_round_trip(table: dict[tuple[str, str], dict[int, int]]) -> None:
    assert offsets_from_json(offsets_to_json(table)) == table


@given(st.binary(max_size=64))
def test_random_frames_never_escape_as_other_errors(tail: bytes) -> None:
    for opcode in (0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x10, 0x11, 0x12, 0x13):
        try:
            decode_request(bytes([opcode]) + b"\x00\x00\x00\x01" + tail)
        except CorruptedFrameError:
            pass
    for opcode in (0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x90, 0x91, 0x92, 0x93):
        try:
            decode_response(bytes([opcode]) + b"\x00\x00\x00\x01" + tail)
        except CorruptedFrameError:
            pass


def test_a_route_broker_names_its_members_addresses() -> None:
    broker = RouteBroker("broker-a", 4, ((0, "a:1"), (1, "a:2")))
    assert broker.master_address == "a:1"
    assert broker.address_of(1) == "a:2"
    assert broker.address_of(2) is None
    slaves_only = RouteBroker("broker-b", 2, ((1, "b:2"),))
    assert slaves_only.master_address is None
    assert slaves_only.address_of(1) == "b:2"
