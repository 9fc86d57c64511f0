"""What the broker refuses before anything is written: topics, queue ids, properties, sizes,
batches (every message checked before any is stored).

Found by attacking a running master: a 300-character topic was appended and then wedged the
consume queue dispatch (``File name too long``), a 65,535-byte topic got no answer, a put to
queue 2**31-1 created a consume queue file, and a response that failed to encode was never
answered.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import broker_support
import pytest
from broker_support import FILE, connect, pull, running, send, send_request, status

from hanet.ha import BrokerConfig
from hanet.protocol import (
    BatchMessage,
    RemotingCodec,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    decode_command,
    encode_batch,
)
from hanet.store import StoreConfig
from hanet.store.lowlevel import MAX_TOPIC_LENGTH
from hanet.testing import EmbeddedChannel

QUEUES = 4


def config(root: Path, **changes: Any) -> BrokerConfig:
    return broker_support.config(root, default_topic_queue_nums=QUEUES, **changes)


def consume_queue_dirs(root: Path) -> set[str]:
    base = root / "consumequeue"
    return {p.name for p in base.iterdir()} if base.exists() else set()


def consume_queue_files(root: Path) -> set[str]:
    base = root / "consumequeue"
    return {str(p.relative_to(base)) for p in base.rglob("*")} if base.exists() else set()


def test_the_topic_limit_is_rocketmqs() -> None:
    assert MAX_TOPIC_LENGTH == 127


@pytest.mark.parametrize(
    "topic",
    [
        "T" * (MAX_TOPIC_LENGTH + 1),
        "T" * 300,
        "T" * 65_535,
        "",
        "bad topic",
        "bad/topic",
        "caf\u00e9",
        "a\x01b",
        "T\n",
    ],
)
async def test_bad_topics_are_refused_and_nothing_is_written(tmp_path: Path, topic: str) -> None:
    async with running(config(tmp_path)) as (broker, addresses), connect(addresses.broker) as c:
        sent = await send(c, topic, b"x", 0)
        assert sent.code == ResponseCode.SYSTEM_ERROR and sent.header is None
        assert "topic" in str(sent.remark) and len(str(sent.remark)) < 1024
        assert broker.store.max_offset == 0
        assert consume_queue_dirs(tmp_path) == set()
        assert topic not in broker.topic_table


async def test_the_longest_topic_is_accepted(tmp_path: Path) -> None:
    topic = "%|aZ09_-" + "t" * (MAX_TOPIC_LENGTH - 8)
    async with running(config(tmp_path)) as (_, addresses), connect(addresses.broker) as c:
        assert (await send(c, topic, b"x", 0)).code == ResponseCode.SUCCESS
        pulled = await pull(c, topic, 0)
        assert [m.topic for m in pulled.records] == [topic]


async def test_a_batch_is_stored_whole_or_not_at_all(tmp_path: Path) -> None:
    store_config = StoreConfig(mapped_file_size=FILE, max_message_size=1000)
    async with (
        running(config(tmp_path), store_config=store_config) as (broker, addresses),
        connect(addresses.broker) as c,
    ):
        batch = [BatchMessage(b"1"), BatchMessage(b"x" * 1001), BatchMessage(b"3")]
        answer = await c.invoke(send_request("T", encode_batch(batch), 0, code=320))
        assert answer.code == ResponseCode.MESSAGE_ILLEGAL
        assert "message 1 of the batch" in str(answer.remark) and "1001" in str(answer.remark)
        assert broker.store.max_offset == 0
        torn = encode_batch([BatchMessage(b"ok")])[:-1]
        answer = await c.invoke(send_request("T", torn, 0, code=320))
        assert answer.code == ResponseCode.MESSAGE_ILLEGAL and "batch message 0" in str(
            answer.remark
        )
        empty = await c.invoke(send_request("T", b"", 0, code=320))
        assert empty.code == ResponseCode.MESSAGE_ILLEGAL
        assert broker.store.max_offset == 0


async def test_body_over_the_stores_max_message_size(tmp_path: Path) -> None:
    store_config = StoreConfig(mapped_file_size=FILE, max_message_size=1000)
    async with (
        running(config(tmp_path), store_config=store_config) as (broker, addresses),
        connect(addresses.broker) as c,
    ):
        big = await send(c, "T", b"x" * 1001, 0)
        assert big.code == ResponseCode.MESSAGE_ILLEGAL
        assert "1001" in str(big.remark) and "1000" in str(big.remark)
        assert broker.store.max_offset == 0
        assert (await send(c, "T", b"x" * 1000, 0)).code == ResponseCode.SUCCESS


async def test_properties_over_the_size_limit_are_refused(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (broker, addresses), connect(addresses.broker) as c:
        big = await send(c, "T", b"x", 0, properties={"p": "v" * 40_000})
        assert big.code == ResponseCode.MESSAGE_ILLEGAL and "32767" in str(big.remark)
        assert broker.store.max_offset == 0


@pytest.mark.parametrize("queue_id", [QUEUES, 1000, 2**31 - 1])
async def test_queue_ids_out_of_range_are_refused(tmp_path: Path, queue_id: int) -> None:
    async with running(config(tmp_path)) as (broker, addresses), connect(addresses.broker) as c:
        refused = await send(c, "T", b"x", queue_id)
        assert refused.code == ResponseCode.SYSTEM_ERROR
        assert f"queueId[{queue_id}]" in str(refused.remark) and str(QUEUES) in str(refused.remark)
        assert broker.store.max_offset == 0
        assert consume_queue_dirs(tmp_path) == set()
        assert (await send(c, "T", b"x", QUEUES - 1)).code == ResponseCode.SUCCESS


@pytest.mark.parametrize("queue_id", [QUEUES, 1000, -1])
async def test_pull_of_a_queue_out_of_range_creates_nothing(tmp_path: Path, queue_id: int) -> None:
    async with running(config(tmp_path)) as (_, addresses), connect(addresses.broker) as c:
        assert (await send(c, "T", b"x", 0)).code == ResponseCode.SUCCESS
        before = consume_queue_files(tmp_path)
        pulled = await pull(c, "T", queue_id)
        assert pulled.code == ResponseCode.SYSTEM_ERROR and pulled.records == []
        assert consume_queue_files(tmp_path) == before


async def test_after_rejected_sends_a_normal_send_succeeds(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (broker, addresses), connect(addresses.broker) as c:
        assert (await send(c, "T", b"first", 0)).code == ResponseCode.SUCCESS
        offset = broker.store.max_offset
        dirs = consume_queue_dirs(tmp_path)
        assert (await send(c, "T" * 300, b"x", 0)).code == ResponseCode.SYSTEM_ERROR
        assert (await send(c, "T", b"x", 99)).code == ResponseCode.SYSTEM_ERROR
        assert broker.store.max_offset == offset
        assert (await send(c, "T", b"second", 0)).code == ResponseCode.SUCCESS
        doc = await status(c)
        assert doc.dispatch_error is None
        assert doc.dispatched_offset == doc.max_offset == broker.store.max_offset
        assert consume_queue_dirs(tmp_path) == dirs


async def test_a_oneway_refusal_is_not_answered_and_the_connection_stays(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (broker, addresses), connect(addresses.broker) as c:
        bad = send_request("bad topic")
        await c.invoke_oneway(RemotingCommand.request(bad.code, bad.fields, oneway=True))
        assert (await send(c, "T", b"x", 0)).code == ResponseCode.SUCCESS
        assert broker.store.queues() == [("T", 0)]


# -- answers that fail to encode ----------------------------------------------------------------


def test_an_answer_that_does_not_encode_becomes_an_error_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "hanet.protocol")
    channel = EmbeddedChannel(RemotingCodec())
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, opaque=9)
    channel.write_outbound(request.response(fields={"x": "y"}, body=b"z" * (17 << 20)))
    out = b"".join(bytes(channel.read_outbound()) for _ in range(1))
    answer = decode_command(out[4:])
    assert answer.code == ResponseCode.SYSTEM_ERROR and answer.opaque == 9
    assert "cannot encode the answer" in str(answer.remark)
