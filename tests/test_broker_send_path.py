"""The broker port's send path in process: the stored answer's template is the codec's bytes,
and a read of many sends (stored in one put) is answered in order, each with its own opaque,
offsets and id, refusals in their place, and a request after them in the same read sees
them stored."""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import trio
from hypothesis import given
from hypothesis import strategies as st

from hanet.broker import Broker, send_answer, stored_answer
from hanet.channel import ChannelInboundHandler, HandlerContext
from hanet.ha import BrokerConfig
from hanet.protocol import (
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SendMessageResponseHeader,
    decode_command,
    encode_command,
)
from hanet.store import PutResult, PutStatus
from hanet.testing import EmbeddedChannel

_I32 = st.integers(-(2**31), 2**31 - 1)
FILE = 1 << 20  # each commit log file is reserved whole on the disk
_HEX = "0123456789ABCDEF"


@given(
    opaque=_I32,
    queue_id=st.integers(0, 2**31 - 1),
    queue_offset=st.integers(0, 2**63 - 1),
    msg_id=st.text(alphabet=_HEX, min_size=32, max_size=40),
)
def test_the_stored_answer_is_the_codecs_bytes(
    opaque: int, queue_id: int, queue_offset: int, msg_id: str
) -> None:
    request = RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=opaque)
    result = PutResult(PutStatus.PUT_OK, 4096, 1200, queue_offset, msg_id, 1, "")
    expected = encode_command(send_answer(request, [result], queue_id))
    assert stored_answer(opaque, msg_id, queue_id, queue_offset) == expected


def _send_frame(opaque: int, queue_id: int, *, oneway: bool = False) -> bytes:
    fields = {
        "a": "group",
        "b": "PathTopic",
        "c": "TBW102",
        "d": 4,
        "e": queue_id,
        "f": 0,
        "g": 1_700_000_000_000,
        "h": 0,
        "i": f"TAGS\x01A\x02KEYS\x01k{opaque}\x02UNIQ_KEY\x01{opaque:032X}\x02WAIT\x01true\x02",
        "j": 0,
        "k": False,
    }
    header = {
        "code": 310,
        "language": "JAVA",
        "opaque": opaque,
        "flag": 2 if oneway else 0,
        "version": 121,
        "extFields": fields,
    }
    text = json.dumps(header).encode()
    body = b"x" * 100
    return struct.pack(">II", 4 + len(text) + len(body), len(text)) + text + body


@asynccontextmanager
async def _running_broker(tmp_path: Path) -> AsyncIterator[tuple[Broker, EmbeddedChannel]]:
    """A running broker (1 MiB commit log files) and an ``EmbeddedChannel`` with its broker
    port's pipeline."""
    config = BrokerConfig(
        store_path_root_dir=tmp_path,
        listen_port=0,
        ha_listen_port=0,
        mapped_file_size_commit_log=FILE,
    )
    async with trio.open_nursery() as nursery:
        broker = Broker(config)
        await nursery.start(broker.run)
        channel = EmbeddedChannel()
        broker.port.initialize(cast(Any, channel))
        yield broker, channel
        nursery.cancel_scope.cancel()


def _outbound(channel: EmbeddedChannel) -> bytes:
    """Every byte the channel has written, taken from it."""
    out = b""
    while (chunk := channel.read_outbound()) is not None:
        out += bytes(chunk)
    return out


def _answers(data: bytes) -> list[RemotingCommand]:
    answers = []
    while data:
        (length,) = struct.unpack_from(">I", data)
        answers.append(decode_command(data[4 : 4 + length]))
        data = data[4 + length :]
    return answers


async def test_a_read_of_sends_is_answered_in_order(tmp_path: Path) -> None:
    async with _running_broker(tmp_path) as (broker, channel):
        frames = [_send_frame(n, n % 2, oneway=n == 5) for n in range(1, 11)]
        frames.insert(3, encode_command(RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=99)))
        channel.write_inbound(b"".join(frames))
        out = _outbound(channel)
        answers = _answers(out)
        # the oneway send is not answered; the one without a header is, with an error
        assert [a.opaque for a in answers] == [1, 2, 3, 99, 4, 6, 7, 8, 9, 10]
        assert answers[3].code != ResponseCode.SUCCESS
        stored = [a for a in answers if a.opaque != 99]
        assert all(a.code == ResponseCode.SUCCESS and a.remark is None for a in stored)
        headers = [SendMessageResponseHeader.from_fields(a.fields) for a in stored]
        assert [(h.queue_id, h.queue_offset) for h in headers] == [
            (1, 0),
            (0, 0),
            (1, 1),
            (0, 1),  # 4
            (0, 2),  # 6 (5 went to queue 1 unanswered)
            (1, 3),
            (0, 3),
            (1, 4),
            (0, 4),
        ]
        assert len({h.msg_id for h in headers}) == len(headers)
        # the index finds each message by its unique key and its key
        for answer, header in zip(stored, headers, strict=True):
            offset = int(header.msg_id[-16:], 16)
            for key in (f"{answer.opaque:032X}", f"k{answer.opaque}"):
                found, _, _ = broker.store.query_index("PathTopic", key, 32, 0, 2**62)
                assert offset in found


async def test_each_send_of_a_read_is_counted_in_the_metrics(tmp_path: Path) -> None:
    # The common answers of a read are counted with one call: the same figures as one each.
    async with _running_broker(tmp_path) as (broker, channel):
        frames = [_send_frame(n, n % 2, oneway=n == 5) for n in range(1, 11)]
        frames.insert(3, encode_command(RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=99)))
        channel.write_inbound(b"".join(frames))
        channel.write_inbound(_send_frame(11, 0))
        text = broker.metrics.exposition().decode()
    counts = {
        line.split(" ")[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(("hanet_puts_total", "hanet_put_latency_seconds_count"))
    }
    # 11 stored (the oneway one too), the one without a header refused before the store
    assert counts == {
        'hanet_puts_total{status="PUT_OK"}': 11.0,
        "hanet_put_latency_seconds_count": 11.0,
    }


async def test_sends_are_answered_with_a_handler_before_the_dispatcher(tmp_path: Path) -> None:
    # The dispatcher finds its connection through the pipeline when another handler sits
    # between them (the usual place, right before it, is only the quick way).
    seen: list[int] = []

    class Between(ChannelInboundHandler):
        def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
            seen.append(msg.opaque)
            ctx.fire_channel_read(msg)

    async with _running_broker(tmp_path) as (_broker, channel):
        channel.pipeline.add_before("dispatch", Between(), "between")
        channel.write_inbound(b"".join(_send_frame(n, n % 2) for n in range(1, 4)))
        out = _outbound(channel)
    answers = _answers(out)
    assert seen == [1, 2, 3]
    assert [(a.opaque, a.code) for a in answers] == [(n, ResponseCode.SUCCESS) for n in (1, 2, 3)]


def _max_offset_frame(opaque: int, queue_id: int) -> bytes:
    request = RemotingCommand(
        RequestCode.GET_MAX_OFFSET,
        opaque=opaque,
        ext_fields={"topic": "PathTopic", "queueId": str(queue_id)},
    )
    return encode_command(request)


async def _serve(tmp_path: Path, frames: list[bytes], *, guard: bool = False) -> list[Any]:
    async with _running_broker(tmp_path) as (broker, channel):
        if guard:
            broker.port.set_guard(lambda ctx, request: None)
        channel.write_inbound(_send_frame(0, 0))  # the topic, created by a first send
        channel.write_inbound(b"".join(frames))
        out = _outbound(channel)
    return _answers(out)[1:]


async def test_a_request_after_sends_of_the_same_read_sees_them(tmp_path: Path) -> None:
    frames = [_send_frame(n, 1) for n in range(1, 4)]
    frames.append(_send_frame(4, 9))  # queue 9 of 4: refused in its place
    frames.append(_max_offset_frame(5, 1))
    frames.append(_send_frame(6, 1))
    answers = await _serve(tmp_path, frames)
    assert [a.opaque for a in answers] == [1, 2, 3, 4, 5, 6]
    assert [a.code for a in answers[:3]] == [ResponseCode.SUCCESS] * 3
    assert answers[3].code == ResponseCode.SYSTEM_ERROR and "queueId[9]" in (
        answers[3].remark or ""
    )
    assert answers[4].fields["offset"] == "3"
    assert SendMessageResponseHeader.from_fields(answers[5].fields).queue_offset == 3


async def test_with_a_guard_each_send_is_stored_at_once(tmp_path: Path) -> None:
    answers = await _serve(tmp_path, [_send_frame(n, 2) for n in range(1, 5)], guard=True)
    assert [a.opaque for a in answers] == [1, 2, 3, 4]
    offsets = [SendMessageResponseHeader.from_fields(a.fields).queue_offset for a in answers]
    assert offsets == [0, 1, 2, 3]


async def test_sends_before_a_malformed_frame_are_stored_and_answered(tmp_path: Path) -> None:
    async with _running_broker(tmp_path) as (broker, channel):
        too_long = struct.pack(">I", 0x7FFFFFFF) + b"\x00" * 8  # over the frame limit
        channel.write_inbound(_send_frame(1, 3) + _send_frame(2, 3) + too_long)
        out = _outbound(channel)
        answers = _answers(out)
        ok = ResponseCode.SUCCESS
        assert [(a.opaque, a.code) for a in answers] == [(1, ok), (2, ok)]
        assert not channel.is_open
        assert broker.store.max_queue_offset("PathTopic", 3) == 2


async def test_requests_before_a_malformed_frame_are_answered(tmp_path: Path) -> None:
    """A request answered in the same read as a frame that closes the connection (here a
    GET_MAX_OFFSET after a send, with no send waiting when the bad frame comes) still gets its
    answer before the close."""
    async with _running_broker(tmp_path) as (_broker, channel):
        too_long = struct.pack(">I", 0x7FFFFFFF) + b"\x00" * 8  # over the frame limit
        channel.write_inbound(_send_frame(1, 3) + _max_offset_frame(7, 3) + too_long)
        out = _outbound(channel)
        answers = _answers(out)
        assert [(a.opaque, a.code) for a in answers] == [
            (1, ResponseCode.SUCCESS),
            (7, ResponseCode.SUCCESS),
        ]
        assert answers[1].fields["offset"] == "1"  # it saw the send before it
        assert not channel.is_open


async def test_a_refusal_among_a_reads_sends_keeps_its_place_in_one_put(tmp_path: Path) -> None:
    async with _running_broker(tmp_path) as (broker, channel):
        channel.write_inbound(_send_frame(0, 0))  # the topic, created by a first send
        channel.read_outbound()
        batches: list[int] = []
        put_batch = broker.store.put_batch

        def counted(messages: Any) -> Any:
            batches.append(len(messages))
            return put_batch(messages)

        broker.store.put_batch = counted  # type: ignore[method-assign]
        no_header = encode_command(RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=98))
        frames = [_send_frame(1, 2), _send_frame(2, 9), no_header, _send_frame(3, 2)]
        channel.write_inbound(b"".join(frames))
        out = _outbound(channel)
        answers = _answers(out)
        assert [a.opaque for a in answers] == [1, 2, 98, 3]
        assert [a.code == ResponseCode.SUCCESS for a in answers] == [True, False, False, True]
        assert batches == [2]  # the sends around the refusals: one put
        offsets = [SendMessageResponseHeader.from_fields(answers[i].fields) for i in (0, 3)]
        assert [h.queue_offset for h in offsets] == [0, 1]
