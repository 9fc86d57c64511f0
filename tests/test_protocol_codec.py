"""The broker port codec: byte layouts, round trips, malformed frames, the pipeline handlers."""

from __future__ import annotations

import json
import struct
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from handlers import (
    CorruptedFrameError,
    EncoderError,
    LengthFieldBasedFrameDecoder,
    LengthFieldPrepender,
    TooLongFrameError,
)
from hanet.protocol import (
    AUTO_QUEUE,
    MAX_PUT_BATCH,
    BrokerClientCodec,
    BrokerServerCodec,
    BrokerStatus,
    DispatchError,
    DLedgerInfo,
    DLedgerPeer,
    ErrorCode,
    ErrorResponse,
    MasterLink,
    Opcode,
    PullRequest,
    PullResponse,
    PullStatus,
    PutMessage,
    PutReply,
    PutRequest,
    PutResponse,
    Request,
    Response,
    SlaveInfo,
    StatusRequest,
    StatusResponse,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    message_problem,
)
from hanet.store import MAX_TOPIC_LENGTH, PutStatus
from hanet.testing import EmbeddedChannel

# -- byte layouts (the README table) ---------------------------------------------------------


def _status(**changes: Any) -> BrokerStatus:
    base = BrokerStatus(
        role="SYNC_MASTER",
        broker_address=None,
        ha_address="127.0.0.1:10912",
        min_offset=0,
        max_offset=12,
        flushed_offset=12,
        dispatched_offset=12,
        puts=1,
        mapped_files=1,
        dispatch_error=None,
        uptime=1.0,
    )
    return attrs.evolve(base, **changes)


def test_put_request_layout() -> None:
    message = PutMessage("T", b"hi", 3, "A", "k", (("p", "v"),), 7)
    frame = bytes(encode_request(PutRequest(0x01020304, (message,))))
    assert frame == (
        b"\x01" + b"\x01\x02\x03\x04"  # opcode PUT, request id
        + b"\x00\x01"  # one message
        + b"\x00\x01T"  # topic
        + b"\x00\x00\x00\x03" + b"\x00\x00\x00\x07"  # queue id, flag
        + b"\x00\x01A" + b"\x00\x01k"  # tags, keys
        + b"\x00\x01" + b"\x00\x01p" + b"\x00\x01v"  # one property
        + b"\x00\x00\x00\x02hi"  # body
    )  # fmt: skip


def test_put_response_layout() -> None:
    reply = PutReply(PutStatus.FLUSH_SLAVE_TIMEOUT, 1, 2, 3, 4, 5, "ID", "")
    frame = bytes(encode_response(PutResponse(9, (reply,))))
    assert frame == (
        b"\x81" + b"\x00\x00\x00\x09" + b"\x00\x01"
        + struct.pack(">Biqqiq", 2, 1, 2, 3, 4, 5)  # FLUSH_SLAVE_TIMEOUT is status 2
        + b"\x00\x02ID" + b"\x00\x00"
    )  # fmt: skip


def test_pull_layouts() -> None:
    assert bytes(encode_request(PullRequest(1, "T", 2, 3, 4))) == (
        b"\x02\x00\x00\x00\x01" + b"\x00\x01T" + struct.pack(">iqi", 2, 3, 4)
    )
    response = PullResponse(1, PullStatus.FOUND, 5, 0, 9, (b"rec",), suggested_broker_id=1)
    assert bytes(encode_response(response)) == (
        b"\x82\x00\x00\x00\x01" + struct.pack(">BqqqqI", 0, 5, 0, 9, 1, 1) + b"\x00\x00\x00\x03rec"
    )
    assert decode_response(encode_response(response)) == response


def test_status_and_error_layouts() -> None:
    assert bytes(encode_request(StatusRequest(2))) == b"\x03\x00\x00\x00\x02"
    frame = bytes(encode_response(StatusResponse(2, _status(role="SLAVE"))))
    assert frame.startswith(b'\x83\x00\x00\x00\x02{"role":"SLAVE","broker_address":null,')
    assert json.loads(frame[5:]) == _status(role="SLAVE").to_json()
    frame = bytes(encode_response(ErrorResponse(2, ErrorCode.NOT_AVAILABLE, "x")))
    assert frame == b"\xff\x00\x00\x00\x02\x00\x02\x00\x01x"


def test_put_status_codes_follow_rocketmq_order() -> None:
    for code, status in enumerate(PutStatus):
        frame = encode_response(PutResponse(1, (PutReply(status),)))
        assert frame[7] == code
        decoded = decode_response(frame)
        assert isinstance(decoded, PutResponse)
        assert decoded.replies[0].status is status


# -- round trips -----------------------------------------------------------------------------

texts = st.text(max_size=20)
messages = st.builds(
    PutMessage,
    topic=st.text(min_size=1, max_size=10),
    body=st.binary(max_size=64),
    queue_id=st.integers(AUTO_QUEUE, 2**31 - 1),
    tags=texts,
    keys=texts,
    properties=st.lists(st.tuples(texts, texts), max_size=3).map(tuple),
    flag=st.integers(-(2**31), 2**31 - 1),
)
request_ids = st.integers(0, 2**32 - 1)


@given(request_ids, st.lists(messages, min_size=1, max_size=4))
def test_put_round_trip(request_id: int, batch: list[PutMessage]) -> None:
    request = PutRequest(request_id, tuple(batch))
    assert decode_request(encode_request(request)) == request


@given(
    request_ids,
    st.text(max_size=10),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**63 - 1),
    st.integers(1, 2**31 - 1),
)
def test_pull_round_trip(request_id: int, topic: str, queue: int, offset: int, most: int) -> None:
    request = PullRequest(request_id, topic, queue, offset, most)
    assert decode_request(encode_request(request)) == request


@pytest.mark.parametrize(
    "response",
    [
        PutResponse(
            1,
            (
                PutReply(PutStatus.PUT_OK, 0, 1, 2, 3, 4, "m", ""),
                PutReply(PutStatus.MESSAGE_ILLEGAL, detail="bad"),
            ),
        ),
        PullResponse(2, PullStatus.OFFSET_TOO_SMALL, 4, 4, 10),
        PullResponse(3, PullStatus.FOUND, 2, 0, 2, (b"a", b"bc")),
        StatusResponse(
            4,
            _status(
                slaves=(SlaveInfo("x", "transferring", 0, 10, 12, 2, 12, 1.5),),
                master=MasterLink("m:1", True, 1, 2, None),
                dispatch_error=DispatchError(7, "body CRC mismatch"),
                replicated_offset=10,
            ),
        ),
        ErrorResponse(5, ErrorCode.SYSTEM_ERROR, "boom"),
    ],
)  # fmt: skip
def test_response_round_trip(response: Response) -> None:
    assert decode_response(encode_response(response)) == response


def test_status_request_round_trip() -> None:
    assert decode_request(encode_request(StatusRequest(77))) == StatusRequest(77)


# -- bad input -------------------------------------------------------------------------------

GOOD_PUT = bytes(encode_request(PutRequest(1, (PutMessage("T", b"body"),))))


@pytest.mark.parametrize(
    ("frame", "match"),
    [
        (b"", "no opcode"),
        (b"\x01\x00\x00", "no opcode"),
        (b"\x7e\x00\x00\x00\x01", "unknown request opcode 0x7E"),
        (GOOD_PUT[:-1], "truncated|more needed"),
        (GOOD_PUT + b"\x00", "1 trailing bytes"),
        (b"\x01\x00\x00\x00\x01\x00\x00", "0 messages"),
        (b"\x01\x00\x00\x00\x01" + struct.pack(">H", MAX_PUT_BATCH + 1), "1025 messages"),
        (b"\x01\x00\x00\x00\x01\x00\x01\x00\x02\xff\xfe", "not UTF-8"),
        (
            b"\x01\x00\x00\x00\x01\x00\x01\x00\x01T" + struct.pack(">ii", -2, 0),
            "queue id -2",
        ),
        (b"\x02\x00\x00\x00\x01\x00\x01T" + struct.pack(">iqi", 0, -1, 1), "offset -1"),
        (b"\x02\x00\x00\x00\x01\x00\x01T" + struct.pack(">iqi", 0, 0, 0), "max 0"),
        (b"\x03\x00\x00\x00\x01x", "trailing"),
    ],
)
def test_malformed_requests(frame: bytes, match: str) -> None:
    with pytest.raises(CorruptedFrameError, match=match):
        decode_request(frame)


@pytest.mark.parametrize(
    ("frame", "match"),
    [
        (b"\x01\x00\x00\x00\x01", "unknown response opcode"),
        (b"\x81\x00\x00\x00\x01\x00\x01" + struct.pack(">Biqqiq", 99, 0, 0, 0, 0, 0), "status 99"),
        (b"\x82\x00\x00\x00\x01" + struct.pack(">BqqqqI", 42, 0, 0, 0, 0, 0), "pull status 42"),
        (b"\x83\x00\x00\x00\x01[1]", "not a JSON object"),
        (b"\x83\x00\x00\x00\x01{", "not a JSON object"),
    ],
)
def test_malformed_responses(frame: bytes, match: str) -> None:
    with pytest.raises(CorruptedFrameError, match=match):
        decode_response(frame)


def test_unknown_error_code_reads_as_system_error() -> None:
    decoded = decode_response(b"\xff\x00\x00\x00\x01\x00\x63\x00\x00")
    assert decoded == ErrorResponse(1, ErrorCode.SYSTEM_ERROR, "")


@pytest.mark.parametrize(
    "request_",
    [
        PutRequest(1, ()),
        PutRequest(1, (PutMessage("T", b""),) * (MAX_PUT_BATCH + 1)),
        PutRequest(1, (PutMessage("x" * 70_000, b""),)),
        PutRequest(1, (PutMessage("T", b"", queue_id=2**31),)),
        PullRequest(2**32, "T", 0, 0),
        PullRequest(1, "T", 0, 2**63),
    ],
)
def test_unencodable_requests(request_: Request) -> None:
    with pytest.raises(EncoderError):
        encode_request(request_)


@pytest.mark.parametrize(
    "response",
    [
        PutResponse(1, (PutReply(PutStatus.MESSAGE_ILLEGAL, detail="d" * 70_000),)),
        PutResponse(1, (PutReply(PutStatus.PUT_OK, queue_offset=2**63),)),
        PullResponse(1, PullStatus.FOUND, 2**63, 0, 0),
        ErrorResponse(2**32, ErrorCode.SYSTEM_ERROR, ""),
    ],
)
def test_unencodable_responses_raise_encoder_errors(response: Response) -> None:
    with pytest.raises(EncoderError):
        encode_response(response)


@pytest.mark.parametrize(
    ("message", "words"),
    [
        (PutMessage("T" * (MAX_TOPIC_LENGTH + 1), b""), "over 127"),
        (PutMessage("", b""), "empty"),
        (PutMessage("a b", b""), "characters"),
        (PutMessage("T", b"", queue_id=-2), "queue id -2"),
        (PutMessage("T", b"", tags="a\x02b"), "TAGS"),
        (PutMessage("T", b"", keys="a\x01b"), "KEYS"),
        (PutMessage("T", b"", properties=(("n", "a\x02b"),)), "value"),
        (PutMessage("T", b"", properties=(("", "v"),)), "empty"),
    ],
)
def test_message_problems(message: PutMessage, words: str) -> None:
    problem = message_problem(message)
    assert problem is not None and words in problem


def test_message_problem_accepts_good_messages_and_names_topics_briefly() -> None:
    good = PutMessage("%|aZ09_-" + "t" * 119, b"x", 3, "TagA", "k1 k2", (("p", "v=w"),))
    assert message_problem(good) is None
    assert message_problem(PutMessage("a b", b""), topic_characters=False) is None
    problem = message_problem(PutMessage("\u00e9" * 100, b""))
    assert problem is not None and len(problem) < 200


# -- the pipeline handlers -------------------------------------------------------------------


def server_pipeline(max_frame: int = 1024) -> EmbeddedChannel:
    return EmbeddedChannel(
        LengthFieldBasedFrameDecoder(max_frame, 0, 4, 0, 4),
        LengthFieldPrepender(4),
        BrokerServerCodec(),
    )


def framed(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def test_server_codec_decodes_split_frames_and_encodes_answers() -> None:
    channel = server_pipeline()
    data = framed(GOOD_PUT) + framed(bytes(encode_request(StatusRequest(2))))
    for i in range(len(data)):  # one byte at a time
        channel.write_inbound(data[i : i + 1])
    first, second = channel.read_inbound(), channel.read_inbound()
    assert isinstance(first, PutRequest)
    assert first.messages[0].body == b"body"
    assert second == StatusRequest(2)
    channel.write_outbound(ErrorResponse(2, ErrorCode.NOT_AVAILABLE, "later"))
    out = b"".join(bytes(m) for m in channel.outbound_messages)
    assert out == framed(bytes(encode_response(ErrorResponse(2, ErrorCode.NOT_AVAILABLE, "later"))))


def test_server_codec_raises_on_garbage_and_too_long_frames() -> None:
    channel = server_pipeline(max_frame=64)
    with pytest.raises(CorruptedFrameError):
        channel.write_inbound(framed(b"\x55\x00\x00\x00\x01"))
    with pytest.raises(TooLongFrameError):
        channel.write_inbound(struct.pack(">I", 1000))


def test_client_codec_round_trip_through_a_server_codec() -> None:
    client = EmbeddedChannel(
        LengthFieldBasedFrameDecoder(1024, 0, 4, 0, 4), LengthFieldPrepender(4), BrokerClientCodec()
    )
    server = server_pipeline()
    request = PullRequest(5, "T", 1, 2, 3)
    client.write_outbound(request)
    for part in client.outbound_messages:
        server.write_inbound(part)
    assert server.read_inbound() == request
    response = PullResponse(5, PullStatus.OFFSET_OVERFLOW_ONE, 2, 0, 2)
    server.write_outbound(response)
    for part in server.outbound_messages:
        client.write_inbound(part)
    assert client.read_inbound() == response


def test_codecs_pass_other_messages_through() -> None:
    channel = EmbeddedChannel(BrokerServerCodec())
    channel.write_inbound("not bytes")
    assert channel.read_inbound() == "not bytes"
    channel.write_outbound(b"raw")
    assert channel.read_outbound() == b"raw"


def test_opcodes() -> None:
    requests = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x10, 0x11, 0x12, 0x13]
    assert [int(o) for o in Opcode] == [*requests, *(r | 0x80 for r in requests), 0xFF]


def test_status_document_round_trips_through_json() -> None:
    status = _status(slaves=(SlaveInfo("a:1", "transferring", 0, 5, 6, 7, 6, 2.0),))
    assert BrokerStatus.from_json(json.loads(json.dumps(status.to_json()))) == status


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"max_offset": "12"}, "max_offset must be int"),
        ({"max_offset": True}, "max_offset must be int"),
        ({"role": None}, "role must not be null"),
        ({"surprise": 1}, "unknown field"),
        ({"slaves": [{"address": "a"}]}, "SlaveInfo.state"),
        ({"master": []}, "MasterLink must be an object"),
    ],
)
def test_malformed_status_documents_are_corrupted_frames(
    change: dict[str, Any], complaint: str
) -> None:
    raw = {**_status().to_json(), **change}
    with pytest.raises(CorruptedFrameError, match=complaint):
        BrokerStatus.from_json(raw)
    frame = b"\x83\x00\x00\x00\x01" + json.dumps(raw).encode()
    with pytest.raises(CorruptedFrameError):
        decode_response(frame)


# -- DLedger additions ------------------------------------------------------------------------


def test_not_leader_errors_carry_the_leader_address() -> None:
    answer = ErrorResponse(9, ErrorCode.NOT_LEADER, "not the leader", "127.0.0.1:10921")
    frame = bytes(encode_response(answer))
    assert decode_response(frame) == answer
    # the address follows the message; without it the frame is the old layout
    old = bytes(encode_response(ErrorResponse(9, ErrorCode.NOT_LEADER, "not the leader")))
    assert frame == old + b"\x00\x0f127.0.0.1:10921"
    assert decode_response(old) == ErrorResponse(9, ErrorCode.NOT_LEADER, "not the leader")
    with pytest.raises(CorruptedFrameError):
        decode_response(old + b"\x00")
    codes = [(c.name, int(c)) for c in ErrorCode]
    assert codes[2:] == [
        ("NOT_LEADER", 3),
        ("LEADER_PENDING_FULL", 4),
        ("WAIT_QUORUM_ACK_TIMEOUT", 5),
        ("TOPIC_NOT_EXIST", 6),
        ("NOT_SUPPORTED", 7),
    ]


def test_status_document_with_a_dledger_section() -> None:
    info = DLedgerInfo(
        group="g",
        id="n0",
        role="LEADER",
        term=3,
        leader="n0",
        commit_index=12,
        applied_index=12,
        last_index=13,
        leader_address="127.0.0.1:10911",
        peers=(DLedgerPeer("n1", "127.0.0.1:40912", True, 13, 0),),
    )
    status = attrs.evolve(_status(), role="LEADER", dledger=info)
    raw = json.loads(json.dumps(status.to_json()))
    assert raw["dledger"]["role"] == "LEADER" and raw["dledger"]["peers"][0]["lag"] == 0
    assert BrokerStatus.from_json(raw) == status
    frame = bytes(encode_response(StatusResponse(1, status)))
    assert decode_response(frame) == StatusResponse(1, status)
    # documents of older brokers have no "dledger" key
    old = _status().to_json()
    del old["dledger"]
    assert BrokerStatus.from_json(old).dledger is None
    with pytest.raises(CorruptedFrameError, match="DLedgerPeer"):
        BrokerStatus.from_json({**raw, "dledger": {**raw["dledger"], "peers": [{"id": "x"}]}})
