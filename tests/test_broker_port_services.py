"""The broker port's table with the services plugged into it by the Broker: long polling,
delayed messages, retries of failed consumes (CONSUMER_SEND_MSG_BACK) and queue locks, over
loopback TCP."""

from __future__ import annotations

from pathlib import Path

import trio
from broker_support import config, connect, pull, pull_request, running, send

from hanet.protocol import (
    ConsumerSendMsgBackRequestHeader,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageId,
    MessageQueue,
    RemotingCommand,
    RequestCode,
    ResponseCode,
)


async def test_a_suspended_pull_is_answered_when_a_message_arrives(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (_, addresses), connect(addresses.broker) as c:
        await send(c, "T", b"first", 0)
        answers: list[RemotingCommand] = []

        async def held() -> None:
            answers.append(await c.invoke(pull_request("T", 0, 1, suspend_ms=10_000)))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(held)
            await trio.sleep(0.2)
            assert answers == []  # held: nothing to answer yet
            started = trio.current_time()
            await send(c, "T", b"second", 0)
        assert trio.current_time() - started < 2
        (answer,) = answers
        assert answer.code == ResponseCode.SUCCESS
        # Without the suspend flag an empty pull is answered at once.
        assert (await pull(c, "T", 0, 2)).code == ResponseCode.PULL_NOT_FOUND


async def test_a_delayed_message_arrives_on_its_topic_when_due(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (broker, addresses), connect(addresses.broker) as c:
        sent = await send(c, "T", b"later", 0, properties={"DELAY": "1"})  # level 1: 1 s
        assert sent.code == ResponseCode.SUCCESS
        assert (await pull(c, "T", 0)).code != ResponseCode.SUCCESS
        with trio.fail_after(10):
            while not (found := await pull(c, "T", 0)).records:  # noqa: ASYNC110
                await trio.sleep(0.1)
        (record,) = found.records
        assert record.body == b"later" and record.properties["REAL_TOPIC"] == "T"
        delay = await c.invoke_checked(RemotingCommand.request(RequestCode.GET_ALL_DELAY_OFFSET))
        assert b"offsetTable" in bytes(delay.body)
        assert broker.schedule is not None


async def test_a_failed_consume_goes_to_the_retry_topic(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (broker, addresses), connect(addresses.broker) as c:
        sent = await send(c, "T", b"fails", 0)
        assert sent.header is not None
        offset = MessageId.parse(sent.header.msg_id).offset
        header = ConsumerSendMsgBackRequestHeader(offset, "g", -1)  # negative: the DLQ at once
        request = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header.to_fields())
        assert (await c.invoke(request)).code == ResponseCode.SUCCESS
        dlq = await pull(c, "%DLQ%g", 0)
        assert [r.body for r in dlq.records] == [b"fails"]
        assert "%DLQ%g" in broker.topic_table


async def test_queue_locks_on_the_broker_port(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (_, addresses), connect(addresses.broker) as c:
        mq = MessageQueue("T", "broker-a", 0)
        body = LockBatchRequestBody("g", "client-1", frozenset({mq})).to_json()
        answer = await c.invoke_checked(
            RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body)
        )
        assert LockBatchResponseBody.from_json(answer.body).lock_ok_mq_set == {mq}
        other = LockBatchRequestBody("g", "client-2", frozenset({mq})).to_json()
        answer = await c.invoke_checked(
            RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=other)
        )
        assert LockBatchResponseBody.from_json(answer.body).lock_ok_mq_set == frozenset()
