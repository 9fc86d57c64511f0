"""The broker client's frames against RocketMQ 4.9.8's captured ones: what it sends has the
header keys (and body JSON keys) a Java client sends, and it reads the Java broker's captured
answers. A loopback server records each request and answers it with the captured answer."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from hanet.boot import serve
from hanet.channel import HandlerContext, StreamChannel
from hanet.client import (
    BrokerClient,
    BrokerConnectionError,
    BrokerRequestError,
    PullStatus,
    PutMessage,
)
from hanet.protocol import (
    RemotingCommand,
    RemotingDispatcher,
    RequestCode,
    ResponseCode,
    decode_command,
    remoting_pipeline,
)
from hanet.store import PutStatus

JAVA = Path(__file__).parent / "fixtures" / "remoting" / "java"
RUN = "02-broker-produce-consume"

OPTIONAL_KEYS = {"ReqT", "bname", "n", "l"}
"""Keys a Java client adds that a hanet client may leave out: the capture's RPC hook marker,
the broker name (4.9.8 fills it only for static topics), the max reconsume times."""


def captured(kind: str) -> RemotingCommand:
    """The captured frame ``RUN__kind.bin``, decoded."""
    return decode_command((JAVA / f"{RUN}__{kind}.bin").read_bytes()[4:])


def answer_like(request: RemotingCommand, kind: str) -> RemotingCommand:
    """The captured answer ``kind``, re-addressed to ``request``."""
    answer = captured(kind)
    return request.response(answer.code, answer.remark, answer.ext_fields, answer.body)


def json_keys(value: Any) -> Any:
    """The keys of a JSON document, recursively (lists: the keys of their first item)."""
    if isinstance(value, dict):
        return {key: json_keys(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_keys(value[0])] if value else []
    return None


class Recorder:
    """Answers each request with ``answers[code]`` (a captured answer's kind, or a function);
    records what came in."""

    def __init__(self, answers: Mapping[RequestCode, Any]) -> None:
        self.answers = answers
        self.requests: list[RemotingCommand] = []

    def processors(self) -> dict[int, Any]:
        def serve_one(ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand | None:
            self.requests.append(request)
            answer = self.answers[RequestCode(request.code)]
            if callable(answer):
                result: RemotingCommand | None = answer(request)
                return result
            return answer_like(request, answer)

        return dict.fromkeys(self.answers, serve_one)


@asynccontextmanager
async def broker(
    answers: Mapping[RequestCode, Any],
) -> AsyncIterator[tuple[BrokerClient, Recorder]]:
    recorder = Recorder(answers)

    def init(channel: StreamChannel) -> None:
        for name, handler in remoting_pipeline():
            channel.pipeline.add_last(handler, name)
        channel.pipeline.add_last(RemotingDispatcher(recorder.processors(), port="test"))

    async with trio.open_nursery() as nursery:
        server = await nursery.start(partial(serve, init, 0, host="127.0.0.1"))
        port = int(server.addresses[0][1])
        async with BrokerClient.connect("127.0.0.1", port, request_timeout=5) as client:
            yield client, recorder
        nursery.cancel_scope.cancel()


def assert_same_keys(ours: RemotingCommand, java: RemotingCommand) -> None:
    mine, theirs = set(ours.fields), set(java.fields)
    assert mine <= theirs, f"keys a Java client never sends: {mine - theirs}"
    assert theirs - mine <= OPTIONAL_KEYS, f"keys missing: {theirs - mine - OPTIONAL_KEYS}"


async def test_a_put_is_a_send_message_v2_like_javas_and_reads_its_answer() -> None:
    answers = {RequestCode.SEND_MESSAGE_V2: "SEND_MESSAGE_V2__response_SUCCESS"}
    async with broker(answers) as (client, recorder):
        reply = await client.put("CapTopic", b"Hello RocketMQ 0", tags="TagA", keys="KEY0")
    assert reply.status is PutStatus.PUT_OK
    assert (reply.queue_id, reply.queue_offset) == (3, 0)
    assert reply.msg_id == "7F00000100002A9F00000000000002CD"
    assert reply.wrote_offset == 0x2CD and reply.stored
    (sent,) = recorder.requests
    java = captured("SEND_MESSAGE_V2__request")
    assert sent.code == java.code == RequestCode.SEND_MESSAGE_V2
    assert_same_keys(sent, java)
    fields = sent.fields
    assert fields["b"] == "CapTopic" and fields["c"] == "TBW102" and fields["e"] == "-1"
    assert (fields["k"], fields["m"]) == ("false", "false")
    properties = dict(item.split("\x01") for item in fields["i"].split("\x02"))
    java_properties = dict(item.split("\x01") for item in java.fields["i"].split("\x02"))
    assert {"KEYS", "UNIQ_KEY", "WAIT", "TAGS"} <= set(java_properties)
    assert properties["TAGS"] == "TagA" and properties["KEYS"] == "KEY0"
    assert properties["WAIT"] == "true" and len(properties["UNIQ_KEY"]) == 32
    assert bytes(sent.body) == b"Hello RocketMQ 0"


async def test_a_batch_of_one_queue_is_one_send_batch_message() -> None:
    def answer(request: RemotingCommand) -> RemotingCommand:
        return request.response(
            fields={
                "msgId": ",".join(["7F00000100002A9F0000000000000010"] * 3),
                "queueId": 1,
                "queueOffset": 7,
            },
        )

    async with broker({RequestCode.SEND_BATCH_MESSAGE: answer}) as (client, recorder):
        replies = await client.put_batch([PutMessage("T", b"m%d" % i, 1) for i in range(3)])
    assert [r.queue_offset for r in replies] == [7, 8, 9]
    assert all(r.ok and r.queue_id == 1 for r in replies)
    (sent,) = recorder.requests
    assert sent.fields["m"] == "true" and sent.fields["e"] == "1"
    # RocketMQ's MessageDecoder.encodeMessages: size, magic, CRC, flag, body, properties.
    body = bytes(sent.body)
    pos = 0
    for i in range(3):
        size = int.from_bytes(body[pos : pos + 4])
        length = int.from_bytes(body[pos + 16 : pos + 20])
        assert body[pos + 20 : pos + 20 + length] == b"m%d" % i
        pos += size
    assert pos == len(body)


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (ResponseCode.FLUSH_SLAVE_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT),
        (ResponseCode.SLAVE_NOT_AVAILABLE, PutStatus.SLAVE_NOT_AVAILABLE),
        (ResponseCode.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_DISK_TIMEOUT),
    ],
)
async def test_a_send_stored_without_its_guarantee_is_a_status(
    code: ResponseCode, status: PutStatus
) -> None:
    def answer(request: RemotingCommand) -> RemotingCommand:
        fields = {"msgId": "7F00000100002A9F0000000000000040", "queueId": 0, "queueOffset": 5}
        return request.response(code, None, fields)

    async with broker({RequestCode.SEND_MESSAGE_V2: answer}) as (client, _):
        reply = await client.put("T", b"x")
    assert reply.status is status and reply.stored and reply.queue_offset == 5


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (ResponseCode.SERVICE_NOT_AVAILABLE, PutStatus.SERVICE_NOT_AVAILABLE),
        (ResponseCode.MESSAGE_ILLEGAL, PutStatus.MESSAGE_ILLEGAL),
        (ResponseCode.SYSTEM_BUSY, PutStatus.OS_PAGE_CACHE_BUSY),
    ],
)
async def test_a_refused_send_is_a_status_with_the_remark(
    code: ResponseCode, status: PutStatus
) -> None:
    def answer(request: RemotingCommand) -> RemotingCommand:
        return request.response(code, "the broker[x] sending message is forbidden")

    async with broker({RequestCode.SEND_MESSAGE_V2: answer}) as (client, _):
        reply = await client.put("T", b"x")
    assert reply.status is status and not reply.stored and "forbidden" in reply.detail


@pytest.mark.parametrize(
    ("remark", "status", "detail"),
    [
        (
            "CREATE_MAPPED_FILE_FAILED: consume queue T/2: ENOSPC",
            "CREATE_MAPPED_FILE_FAILED",
            "consume queue T/2: ENOSPC",
        ),
        ("UNKNOWN_ERROR", "UNKNOWN_ERROR", "UNKNOWN_ERROR"),
        (
            "create mapped file failed, server is busy or broken.",
            "CREATE_MAPPED_FILE_FAILED",
            "create mapped file failed, server is busy or broken.",
        ),
        (
            "[PC_SYNCHRONIZED]broker busy, start flow control for a while",
            "OS_PAGE_CACHE_BUSY",
            "[PC_SYNCHRONIZED]broker busy, start flow control for a while",
        ),
    ],
)
async def test_a_system_error_naming_a_put_status_is_that_status(
    remark: str, status: str, detail: str
) -> None:
    """hanet's broker starts the remark with the status; RocketMQ's says it in words."""

    def answer(request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SYSTEM_ERROR, remark)

    async with broker({RequestCode.SEND_MESSAGE_V2: answer}) as (client, _):
        reply = await client.put("T", b"x")
    assert reply.status is PutStatus(status) and reply.detail == detail and not reply.stored


async def test_a_send_error_raises_with_the_response_code() -> None:
    def answer(request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.NO_PERMISSION, "no write permission")

    async with broker({RequestCode.SEND_MESSAGE_V2: answer}) as (client, _):
        with pytest.raises(BrokerRequestError, match="NO_PERMISSION") as raised:
            await client.put("T", b"x")
    assert raised.value.code is ResponseCode.NO_PERMISSION

    def bad_topic(request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SYSTEM_ERROR, "The specified topic is illegal")

    async with broker({RequestCode.SEND_MESSAGE_V2: bad_topic}) as (client, _):
        with pytest.raises(BrokerRequestError, match="SYSTEM_ERROR: The specified topic"):
            await client.put("T", b"x")


async def test_a_pull_is_a_pull_message_like_javas_and_decodes_the_stored_records() -> None:
    answers = {RequestCode.PULL_MESSAGE: "PULL_MESSAGE__response_SUCCESS"}
    async with broker(answers) as (client, recorder):
        result = await client.pull("CapTopic", 1, 0, 10, group="cap_lite_cg", commit_offset=0)
    assert result.status is PullStatus.FOUND
    assert (result.next_offset, result.min_offset, result.max_offset) == (1, 0, 1)
    assert result.suggested_broker_id == 0
    (record,) = result.messages
    assert record.body == b"Hello RocketMQ 0" and record.topic == "CapTopic"
    assert record.properties["TAGS"] == "TagA"
    (sent,) = recorder.requests
    java = captured("PULL_MESSAGE__request")
    assert_same_keys(sent, java)
    assert sent.fields["subscription"] == "*" and sent.fields["expressionType"] == "TAG"
    assert int(sent.fields["sysFlag"]) == 0x4 | 0x1  # subscription + commit offset


async def test_membership_requests_are_like_javas() -> None:
    answers = {
        RequestCode.HEART_BEAT: "HEART_BEAT__response_SUCCESS",
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: "GET_CONSUMER_LIST_BY_GROUP__response_SUCCESS",
        RequestCode.UNREGISTER_CLIENT: "UNREGISTER_CLIENT__response_SUCCESS",
        RequestCode.QUERY_CONSUMER_OFFSET: "QUERY_CONSUMER_OFFSET__response_SUCCESS",
        RequestCode.UPDATE_CONSUMER_OFFSET: lambda request: request.response(),
    }
    async with broker(answers) as (client, recorder):
        await client.consumer_heartbeat("cap_lite_cg", "c1", ("CapTopic",))
        members = await client.consumer_list("cap_lite_cg")
        assert await client.query_offset("cap_lite_cg", "CapTopic", 1) == 0
        await client.commit_offset("cap_lite_cg", "CapTopic", 1, 1)
        await client.unregister_consumer("cap_lite_cg", "c1")
    assert members == ("192.0.2.2@25292#697887028297@STREAM",)
    heartbeat, listing, query, commit, unregister = recorder.requests
    java_heartbeat = captured("HEART_BEAT__request")
    assert json_keys(json.loads(bytes(heartbeat.body))) == json_keys(
        json.loads(bytes(java_heartbeat.body))
    ) | {"producerDataSet": []}
    document = json.loads(bytes(heartbeat.body))
    assert document["clientID"] == "c1"
    (consumer,) = document["consumerDataSet"]
    assert consumer["groupName"] == "cap_lite_cg" and consumer["messageModel"] == "CLUSTERING"
    assert consumer["subscriptionDataSet"][0]["subString"] == "*"
    assert_same_keys(listing, captured("GET_CONSUMER_LIST_BY_GROUP__request"))
    assert_same_keys(query, captured("QUERY_CONSUMER_OFFSET__request"))
    assert_same_keys(commit, captured("UPDATE_CONSUMER_OFFSET__oneway"))
    assert unregister.fields == {"clientID": "c1", "consumerGroup": "cap_lite_cg"}


async def test_an_unknown_group_and_a_missing_offset_are_answers() -> None:
    answers = {
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: lambda request: request.response(
            ResponseCode.SYSTEM_ERROR, "no consumer for this group, G"
        ),
        RequestCode.QUERY_CONSUMER_OFFSET: lambda request: request.response(
            ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group ..."
        ),
    }
    async with broker(answers) as (client, _):
        assert await client.consumer_list("G") == ()
        assert await client.query_offset("G", "T", 0) is None


async def test_a_rocketmq_broker_has_no_status_and_a_closed_port_is_a_connection_error() -> None:
    async with broker({RequestCode.HEART_BEAT: "HEART_BEAT__response_SUCCESS"}) as (client, _):
        with pytest.raises(BrokerRequestError, match="REQUEST_CODE_NOT_SUPPORTED") as raised:
            await client.status()
        assert raised.value.code is ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        port = client.address[1]
    with pytest.raises(BrokerConnectionError, match="cannot connect"):
        async with BrokerClient.connect("127.0.0.1", port, connect_timeout=2):
            pass  # pragma: no cover


async def test_a_port_closing_at_the_first_request_gets_a_hint() -> None:
    """An HA port reads a remoting frame as an offset report out of range and closes: the
    error says which port was likely meant."""

    async def close_at_once(stream: trio.SocketStream) -> None:
        await stream.receive_some(1)
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, close_at_once, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        async with BrokerClient.connect("127.0.0.1", port) as client:
            with pytest.raises(BrokerConnectionError, match="not an HA port"):
                await client.status()
        nursery.cancel_scope.cancel()
