"""The broker client's requests and answers without a connection (``hanet.client``'s
sans-IO request builders and answer readers): every answer a broker can give, read into a
result or the error a caller catches; RocketMQ 4.9.8's captured answers read as its client
reads them."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping

import pytest
from test_client_frames import captured

from hanet.client import (
    BrokerProtocolError,
    BrokerRequestError,
    PullStatus,
    PutMessage,
    consumer_list_result,
    max_offset_result,
    pull_command,
    pull_result,
    put_replies,
    query_offset_result,
    send_command,
    status_result,
)
from hanet.protocol import RemotingCommand, RequestCode, ResponseCode
from hanet.store import PutStatus


def answer(
    code: int = ResponseCode.SUCCESS,
    remark: str | None = None,
    fields: Mapping[str, object] | None = None,
    body: bytes = b"",
) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2).response(code, remark, fields, body)


def numbered() -> Callable[[], str]:
    """Unique ids ID0, ID1, ..."""
    counter = itertools.count()
    return lambda: f"ID{next(counter)}"


def test_one_message_is_a_send_message_v2_and_several_a_batch() -> None:
    one = send_command([PutMessage("T", b"a", 2, "tag", "k")], "G", numbered())
    assert one.code == RequestCode.SEND_MESSAGE_V2 and bytes(one.body) == b"a"
    properties = dict(item.split("\x01") for item in one.fields["i"].split("\x02"))
    assert properties == {"KEYS": "k", "UNIQ_KEY": "ID0", "WAIT": "true", "TAGS": "tag"}
    assert (one.fields["a"], one.fields["b"], one.fields["e"]) == ("G", "T", "2")
    batch = send_command(
        [PutMessage("T", b"a", 1), PutMessage("T", b"b", 1)],
        "G",
        numbered(),
    )
    assert batch.code == RequestCode.SEND_BATCH_MESSAGE and "i" not in batch.fields
    assert batch.fields["m"] == "true" and b"ID1" in bytes(batch.body)


def test_a_pull_sets_the_flags_of_what_it_asks() -> None:
    plain = pull_command("T", 1, 5, 32, group="G")
    assert int(plain.fields["sysFlag"]) == 0x4 and plain.fields["suspendTimeoutMillis"] == "0"
    both = pull_command("T", 1, 5, 32, group="G", commit_offset=3, suspend=1.5)
    assert int(both.fields["sysFlag"]) == 0x4 | 0x2 | 0x1
    assert both.fields["commitOffset"] == "3" and both.fields["suspendTimeoutMillis"] == "1500"


def test_a_batch_answer_is_one_reply_per_message() -> None:
    ids = ["7F00000100002A9F0000000000000010", "7F00000100002A9F0000000000000020", "x"]
    fields = {"msgId": ",".join(ids), "queueId": 1, "queueOffset": 7}
    replies = put_replies(answer(fields=fields), 3)
    assert [r.queue_offset for r in replies] == [7, 8, 9]
    assert [r.wrote_offset for r in replies] == [0x10, 0x20, -1]
    assert all(r.status is PutStatus.PUT_OK and r.queue_id == 1 for r in replies)
    short = put_replies(answer(fields={**fields, "msgId": ids[0]}), 2)
    assert [r.msg_id for r in short] == [ids[0], ""]


def test_a_captured_send_answer_reads_as_javas_client_reads_it() -> None:
    (reply,) = put_replies(captured("SEND_MESSAGE_V2__response_SUCCESS"), 1)
    assert (reply.status, reply.queue_id, reply.queue_offset) == (PutStatus.PUT_OK, 3, 0)
    assert reply.wrote_offset == 0x2CD


@pytest.mark.parametrize(
    ("code", "remark", "status"),
    [
        (ResponseCode.SERVICE_NOT_AVAILABLE, "slave", PutStatus.SERVICE_NOT_AVAILABLE),
        (ResponseCode.SYSTEM_BUSY, "busy", PutStatus.OS_PAGE_CACHE_BUSY),
        (ResponseCode.MESSAGE_ILLEGAL, "too big", PutStatus.MESSAGE_ILLEGAL),
        (
            ResponseCode.SYSTEM_ERROR,
            "CREATE_MAPPED_FILE_FAILED: disk full",
            PutStatus.CREATE_MAPPED_FILE_FAILED,
        ),
        (ResponseCode.SYSTEM_ERROR, "[PC_SYNCHRONIZED]broker busy", PutStatus.OS_PAGE_CACHE_BUSY),
    ],
)
def test_a_refused_send_is_a_status_for_each_message(
    code: ResponseCode, remark: str, status: PutStatus
) -> None:
    replies = put_replies(answer(code, remark), 2)
    assert [r.status for r in replies] == [status, status]
    assert all(r.detail and r.detail in remark for r in replies)


def test_a_send_error_or_a_success_without_fields_raises() -> None:
    with pytest.raises(BrokerRequestError, match="put: TOPIC_NOT_EXIST: no such topic") as raised:
        put_replies(answer(ResponseCode.TOPIC_NOT_EXIST, "no such topic"), 1)
    assert raised.value.code is ResponseCode.TOPIC_NOT_EXIST
    with pytest.raises(BrokerRequestError, match="SYSTEM_ERROR"):
        put_replies(answer(ResponseCode.SYSTEM_ERROR, "bad topic name"), 1)
    with pytest.raises(BrokerProtocolError, match="put answered PUT_OK"):
        put_replies(answer(), 1)


@pytest.mark.parametrize(
    ("code", "remark", "status"),
    [
        (ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", PullStatus.OFFSET_OVERFLOW_ONE),
        (ResponseCode.PULL_NOT_FOUND, "NO_MESSAGE_IN_QUEUE", PullStatus.NO_MESSAGE_IN_QUEUE),
        (ResponseCode.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL", PullStatus.OFFSET_TOO_SMALL),
        (ResponseCode.PULL_OFFSET_MOVED, None, PullStatus.OFFSET_OVERFLOW_BADLY),
        (ResponseCode.PULL_NOT_FOUND, None, PullStatus.OFFSET_OVERFLOW_ONE),
        (ResponseCode.PULL_RETRY_IMMEDIATELY, "OFFSET_FOUND_NULL", PullStatus.OFFSET_FOUND_NULL),
        (ResponseCode.PULL_RETRY_IMMEDIATELY, None, PullStatus.NO_MATCHED_MESSAGE),
        (ResponseCode.TOPIC_NOT_EXIST, "topic not exist", PullStatus.TOPIC_NOT_EXIST),
    ],
)
def test_pull_statuses_come_from_the_remark_else_the_code(
    code: ResponseCode, remark: str | None, status: PullStatus
) -> None:
    fields = {"nextBeginOffset": 4, "minOffset": 0, "maxOffset": 4, "suggestWhichBrokerId": 1}
    result = pull_result(answer(code, remark, fields))
    assert result.status is status and result.messages == ()
    if status is not PullStatus.TOPIC_NOT_EXIST:
        assert result.next_offset == 4 and result.suggested_broker_id == 1


def test_a_pulled_body_decodes_and_a_corrupt_one_raises() -> None:
    found = captured("PULL_MESSAGE__response_SUCCESS")
    (record,) = pull_result(found).messages
    assert record.body == b"Hello RocketMQ 0" and record.topic == "CapTopic"
    damaged = bytearray(found.body)
    damaged[bytes(damaged).index(b"Hello")] ^= 0xFF  # the message body: its CRC fails
    bad = answer(ResponseCode.SUCCESS, None, dict(found.fields), bytes(damaged))
    with pytest.raises(BrokerProtocolError, match="a pulled record is corrupt"):
        pull_result(bad)
    with pytest.raises(BrokerRequestError, match="pull: NO_PERMISSION"):
        pull_result(answer(ResponseCode.NO_PERMISSION, "read forbidden"))


def test_offset_and_membership_answers() -> None:
    assert query_offset_result(captured("QUERY_CONSUMER_OFFSET__response_SUCCESS")) == 0
    assert query_offset_result(answer(ResponseCode.QUERY_NOT_FOUND, "Not found")) is None
    assert query_offset_result(answer(fields={"offset": -1})) is None
    with pytest.raises(BrokerProtocolError, match="query offset answer"):
        query_offset_result(answer())
    assert max_offset_result(answer(fields={"offset": 12})) == 12
    members = consumer_list_result(captured("GET_CONSUMER_LIST_BY_GROUP__response_SUCCESS"))
    assert members == ("192.0.2.2@25292#697887028297@STREAM",)
    none = answer(ResponseCode.SYSTEM_ERROR, "no consumer for this group, G")
    assert consumer_list_result(none) == ()
    with pytest.raises(BrokerProtocolError, match="malformed consumer list"):
        consumer_list_result(answer(body=b"{not json"))
    with pytest.raises(BrokerProtocolError, match="nested too deep"):  # not a RecursionError
        consumer_list_result(answer(body=b"[" * 100_000))


def test_a_status_document_that_does_not_parse_is_a_protocol_error() -> None:
    with pytest.raises(BrokerProtocolError, match="malformed status document"):
        status_result(answer(body=json.dumps({"role": 7}).encode()))
