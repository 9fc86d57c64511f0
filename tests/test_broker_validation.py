"""What the broker refuses before anything is written: topics, queue ids, properties, sizes.

Found by attacking a running master: a 300-character topic was appended and then wedged the
consume queue dispatch (``File name too long``), a 65,535-byte topic got no answer, a put to
queue 2**31-1 created a consume queue file, ``\\x01``/``\\x02`` in tags made properties of their
own, and a response that failed to encode was never answered.
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path
from typing import Any

import broker_support
import pytest
import trio
from broker_support import FILE, running

from handlers import LengthFieldBasedFrameDecoder, LengthFieldPrepender
from hanet.broker import BrokerAddresses
from hanet.client import BrokerClient, InvalidMessageError, PullStatus, PutMessage, PutStatus
from hanet.ha import BrokerConfig
from hanet.protocol import (
    AUTO_QUEUE,
    BrokerServerCodec,
    ErrorCode,
    ErrorResponse,
    PullRequest,
    PullResponse,
    PutReply,
    PutRequest,
    PutResponse,
    Response,
    decode_response,
    encode_request,
)
from hanet.store import MAX_TOPIC_LENGTH, StoreConfig
from hanet.testing import EmbeddedChannel

QUEUES = 4


def config(root: Path, **changes: Any) -> BrokerConfig:
    return broker_support.config(root, default_topic_queue_nums=QUEUES, **changes)


def client(addresses: BrokerAddresses) -> Any:
    assert addresses.broker is not None
    return BrokerClient.connect(*addresses.broker, request_timeout=5)


async def raw_call(addresses: BrokerAddresses, request: PutRequest | PullRequest) -> Response:
    """Send one request as bytes (past the client's own checks); return the decoded answer."""
    assert addresses.broker is not None
    body = bytes(encode_request(request))
    stream = await trio.open_tcp_stream(*addresses.broker)
    async with stream:
        await stream.send_all(struct.pack(">I", len(body)) + body)
        received = b""
        with trio.fail_after(5):
            while len(received) < 4 or len(received) < 4 + struct.unpack(">I", received[:4])[0]:
                chunk = await stream.receive_some()
                assert chunk, "the broker closed the connection without an answer"
                received += chunk
    return decode_response(received[4:])


async def raw_put(addresses: BrokerAddresses, *messages: PutMessage) -> list[PutReply]:
    response = await raw_call(addresses, PutRequest(7, messages))
    assert isinstance(response, PutResponse), response
    assert response.request_id == 7
    return list(response.replies)


def consume_queue_dirs(root: Path) -> set[str]:
    base = root / "consumequeue"
    return {p.name for p in base.iterdir()} if base.exists() else set()


def consume_queue_files(root: Path) -> set[str]:
    base = root / "consumequeue"
    return {str(p.relative_to(base)) for p in base.rglob("*")} if base.exists() else set()


def illegal(reply: PutReply, *words: str) -> bool:
    return (
        reply.status is PutStatus.MESSAGE_ILLEGAL
        and not reply.stored
        and all(w in reply.detail for w in words)
    )


# -- topics -------------------------------------------------------------------------------------


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
    async with running(config(tmp_path)) as (broker, addresses):
        (reply,) = await raw_put(addresses, PutMessage(topic, b"x", 0))
        assert illegal(reply, "topic")
        assert len(reply.detail) < 1024
        assert broker.store.max_offset == 0
        assert consume_queue_dirs(tmp_path) == set()


async def test_the_longest_topic_is_accepted(tmp_path: Path) -> None:
    topic = "%|aZ09_-" + "t" * (MAX_TOPIC_LENGTH - 8)
    async with running(config(tmp_path)) as (_, addresses), client(addresses) as c:
        reply = await c.put(topic, b"x", queue_id=0)
        assert reply.ok
        pulled = await c.pull(topic, 0)
        assert [m.topic for m in pulled.messages] == [topic]


async def test_a_batch_refuses_only_its_bad_messages(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (broker, addresses):
        replies = await raw_put(
            addresses,
            PutMessage("good", b"1", 0),
            PutMessage("T" * 300, b"2", 0),
            PutMessage("good", b"3", 2**31 - 1),
            PutMessage("good", b"4", 0, tags="a\x02b"),
            PutMessage("good", b"5", AUTO_QUEUE),
        )
        assert [r.status for r in replies] == [
            PutStatus.PUT_OK,
            PutStatus.MESSAGE_ILLEGAL,
            PutStatus.MESSAGE_ILLEGAL,
            PutStatus.MESSAGE_ILLEGAL,
            PutStatus.PUT_OK,
        ]
        # a refused message takes no turn of the round robin
        assert (replies[0].queue_offset, replies[4].queue_id) == (0, 0)
        assert replies[4].queue_offset == 1
        assert broker.store.max_offset == replies[4].wrote_offset + replies[4].wrote_size
        assert consume_queue_files(tmp_path) == {"good", "good/0", "good/0/" + "0" * 20}


async def test_body_over_the_stores_max_message_size(tmp_path: Path) -> None:
    store_config = StoreConfig(mapped_file_size=FILE, max_message_size=1000)
    async with running(config(tmp_path), store_config=store_config) as (broker, addresses):
        big, fits = await raw_put(
            addresses, PutMessage("T", b"x" * 1001, 0), PutMessage("T", b"x" * 1000, 0)
        )
        assert illegal(big, "1001", "1000")
        assert fits.ok
        assert broker.store.max_offset == fits.wrote_size


async def test_properties_over_the_size_limit_are_refused(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (broker, addresses):
        big = PutMessage("T", b"x", 0, properties=(("p", "v" * 40_000),))
        (reply,) = await raw_put(addresses, big)
        assert reply.status is PutStatus.PROPERTIES_SIZE_EXCEEDED and not reply.stored
        assert "32767" in reply.detail
        assert broker.store.max_offset == 0


# -- queue ids ------------------------------------------------------------------------------------


@pytest.mark.parametrize("queue_id", [QUEUES, 1_000_000, 2**31 - 1])
async def test_queue_ids_out_of_range_are_refused(tmp_path: Path, queue_id: int) -> None:
    async with running(config(tmp_path)) as (broker, addresses):
        (reply,) = await raw_put(addresses, PutMessage("T", b"x", queue_id))
        assert illegal(reply, "queue", str(queue_id), str(QUEUES))
        assert broker.store.max_offset == 0
        assert consume_queue_dirs(tmp_path) == set()
        (last,) = await raw_put(addresses, PutMessage("T", b"x", QUEUES - 1))
        assert last.ok and last.queue_id == QUEUES - 1


@pytest.mark.parametrize("queue_id", [QUEUES, 1_000_000, 2**31 - 1])
async def test_pull_of_a_queue_out_of_range_creates_nothing(tmp_path: Path, queue_id: int) -> None:
    async with running(config(tmp_path)) as (_, addresses), client(addresses) as c:
        assert (await c.put("T", b"x", queue_id=0)).ok
        before = consume_queue_files(tmp_path)
        pulled = await c.pull("T", queue_id)
        assert (pulled.status, pulled.next_offset, pulled.messages) == (
            PullStatus.NO_MATCHED_LOGIC_QUEUE,
            0,
            (),
        )
        weird = await raw_call(addresses, PullRequest(3, "T" * 300, queue_id, 0))
        assert isinstance(weird, PullResponse)
        assert weird.status is PullStatus.TOPIC_NOT_EXIST
        assert consume_queue_files(tmp_path) == before


async def test_after_rejected_puts_a_normal_put_succeeds(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (broker, addresses):
        (first,) = await raw_put(addresses, PutMessage("T", b"first", 0))
        assert first.ok
        offset = broker.store.max_offset
        dirs = consume_queue_dirs(tmp_path)
        (long_topic,) = await raw_put(addresses, PutMessage("T" * 300, b"x", 0))
        (far_queue,) = await raw_put(addresses, PutMessage("T", b"x", 2**31 - 1))
        assert illegal(long_topic, "topic") and illegal(far_queue, "queue")
        assert broker.store.max_offset == offset
        assert consume_queue_dirs(tmp_path) == dirs
        async with client(addresses) as c:
            reply = await c.put("T", b"normal", queue_id=0)
            assert reply.ok and reply.wrote_offset == offset and reply.queue_offset == 1
            await trio.sleep(0.05)
            status = await c.status()
            assert status.dispatch_error is None
            assert status.dispatched_offset == status.max_offset == broker.store.max_offset
        assert consume_queue_dirs(tmp_path) == dirs


# -- property injection ---------------------------------------------------------------------


INJECTIONS = [
    {"tags": "TagA\x02UNIQ_KEY\x01forged"},
    {"tags": "a\x01b"},
    {"keys": "k1\x02DELAY\x013"},
    {"properties": (("p\x01", "v"),)},
    {"properties": (("p", "v\x02DELAY\x013"),)},
    {"properties": (("", "v"),)},
]


@pytest.mark.parametrize("fields", INJECTIONS)
async def test_the_broker_refuses_property_injection(
    tmp_path: Path, fields: dict[str, Any]
) -> None:
    async with running(config(tmp_path)) as (broker, addresses):
        (reply,) = await raw_put(addresses, PutMessage("T", b"x", 0, **fields))
        assert illegal(reply)
        assert broker.store.max_offset == 0


@pytest.mark.parametrize("fields", INJECTIONS)
async def test_the_client_refuses_property_injection_before_sending(
    tmp_path: Path, fields: dict[str, Any]
) -> None:
    async with running(config(tmp_path)) as (broker, addresses), client(addresses) as c:
        with pytest.raises(InvalidMessageError):
            await c.put_batch([PutMessage("T", b"ok", 0), PutMessage("T", b"x", 0, **fields)])
        put_fields = dict(fields)
        if "properties" in put_fields:
            put_fields["properties"] = dict(put_fields["properties"])
        with pytest.raises(ValueError, match="message"):
            await c.put("T", b"x", **put_fields)
        assert broker.store.max_offset == 0
        assert (await c.status()).puts == 0
        assert (await c.put("T", b"fine")).ok


@pytest.mark.parametrize(
    ("topic", "queue_id", "match"),
    [
        ("T" * 128, 0, "127"),
        ("T" * 65_535, 0, "127"),
        ("", 0, "topic"),
        ("T", -2, "queue"),
    ],
)
async def test_the_client_checks_topics_and_queue_ids(
    tmp_path: Path, topic: str, queue_id: int, match: str
) -> None:
    async with running(config(tmp_path)) as (_, addresses), client(addresses) as c:
        with pytest.raises(InvalidMessageError, match=match):
            await c.put(topic, b"x", queue_id=queue_id)
        assert (await c.status()).puts == 0


async def test_the_client_leaves_the_topic_characters_to_the_broker(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (_, addresses), client(addresses) as c:
        reply = await c.put("bad topic", b"x")
        assert illegal(reply, "topic", "characters")


# -- answers that fail to encode ----------------------------------------------------------------


def test_an_answer_that_does_not_encode_becomes_an_error_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "hanet.protocol")
    channel = EmbeddedChannel(
        LengthFieldBasedFrameDecoder(1 << 20, 0, 4, 0, 4),
        LengthFieldPrepender(4),
        BrokerServerCodec(),
    )
    unencodable = PutResponse(9, (PutReply(PutStatus.MESSAGE_ILLEGAL, detail="d" * 70_000),))
    channel.write_outbound(unencodable)
    frame = b"".join(bytes(m) for m in channel.outbound_messages)
    assert frame, "no answer was written"
    answer = decode_response(frame[4:])
    assert isinstance(answer, ErrorResponse)
    assert answer.request_id == 9 and answer.code is ErrorCode.SYSTEM_ERROR
    assert "encode" in answer.message and len(answer.message) < 1024
    assert any(
        r.levelno == logging.WARNING and "request 9" in r.getMessage() for r in caplog.records
    )
