"""``bench/clients.py --floor``: the C++ client's sends against responders
(``bench/_floor.py``), name server and broker in one process, that store nothing: the bare
ones' raw frame path, and the ``hanet`` one's pipeline (``remoting_pipeline()`` and its
``FloorHandler``, driven in an ``EmbeddedChannel``). First their answers to the C++ client's
own captured frames, then a short run of the bench."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from bench_support import load_bench, run_bench
from interop_support import cpp_client_unavailable_reason

from hanet.channel import EmbeddedChannel
from hanet.protocol import (
    FLAG_RESPONSE,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    TopicRouteData,
    decode_command,
    encode_command,
    remoting_pipeline,
)
from hanet.testing import cli_flags

FIXTURE = Path(__file__).parent / "fixtures" / "remoting" / "clients" / "cpp.hex"
ADDRESS = "127.0.0.1:10911"


floor = load_bench("_floor.py", "floor_bench")


def _cpp_frames() -> list[bytes]:
    lines = FIXTURE.read_text().splitlines()
    return [bytes.fromhex(line) for line in lines if line.strip() and not line.startswith("#")]


PATHS = ("frames", "hanet")
"""How the responders are fed: whole frames into ``Responder.answers`` (the bare trio and epoll
servers), or bytes into the ``hanet`` responder's pipeline."""


def _hanet_channel(responder: Any) -> Any:
    handlers = [handler for _, handler in remoting_pipeline()]
    return EmbeddedChannel(*handlers, floor.FloorHandler(responder))


def _split(data: bytes) -> list[RemotingCommand]:
    commands, at = [], 0
    while at < len(data):
        total = int.from_bytes(data[at : at + 4], "big")
        commands.append(decode_command(data[at + 4 : at + 4 + total]))
        at += 4 + total
    return commands


def _flushed(channel: Any) -> bytes:
    return b"".join(bytes(channel.read_outbound()) for _ in range(len(channel.outbound_messages)))


def _answer(frames: list[bytes], path: str = "frames") -> tuple[list[RemotingCommand], int, Any]:
    responder = floor.Responder(ADDRESS)
    buffer = bytearray(b"".join(frames))
    if path == "hanet":
        channel = _hanet_channel(responder)
        channel.write_inbound(bytes(buffer))
        return _split(_flushed(channel)), len(buffer), responder
    answers, used = responder.answers(buffer, len(buffer))
    return [decode_command(a[4:]) for a in answers], used, responder


@pytest.mark.parametrize("path", PATHS)
def test_the_cpp_clients_requests_are_each_answered_success_with_their_opaque(path: str) -> None:
    frames = _cpp_frames()
    requests = [decode_command(frame[4:]) for frame in frames]
    answers, used, responder = _answer(frames, path)
    assert used == sum(map(len, frames)) and len(answers) == len(requests)
    for request, answer in zip(requests, answers, strict=True):
        assert answer.opaque == request.opaque and answer.flag & FLAG_RESPONSE
        assert answer.code == ResponseCode.SUCCESS
    sends = [
        a for r, a in zip(requests, answers, strict=True) if r.code == RequestCode.SEND_MESSAGE
    ]
    assert len(sends) == responder.sends == 3
    queue_ids = [r.fields["queueId"] for r in requests if r.code == RequestCode.SEND_MESSAGE]
    assert [a.fields["queueId"] for a in sends] == queue_ids
    assert all(a.fields["queueOffset"] == "0" for a in sends)  # one send a queue so far
    assert len({a.fields["msgId"] for a in sends}) == 3


@pytest.mark.parametrize("path", PATHS)
def test_a_route_names_the_responder_itself_as_every_topics_master(path: str) -> None:
    frames = _cpp_frames()
    requests = [decode_command(frame[4:]) for frame in frames]
    answers, _, _ = _answer(frames, path)
    routes = [
        a
        for r, a in zip(requests, answers, strict=True)
        if r.code == RequestCode.GET_ROUTEINFO_BY_TOPIC
    ]
    assert routes
    for answer in routes:
        route = TopicRouteData.decode(answer.body)
        assert [dict(b.broker_addrs) for b in route.broker_datas] == [{0: ADDRESS}]
        assert [(q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas] == [(8, 8)]


@pytest.mark.parametrize("path", PATHS)
def test_sends_count_their_queue_offsets_whatever_their_header_kind(path: str) -> None:
    """V1 and V2 (one-letter fields) in JSON and in RocketMQ's binary header: the same answer
    fields; queue offsets grow per queue."""
    frames = [
        encode_command(
            RemotingCommand.request(code, {key: "3"}, b"m", opaque=opaque, serialize_type=kind)
        )
        for opaque, (code, key, kind) in enumerate(
            [
                (RequestCode.SEND_MESSAGE, "queueId", SerializeType.JSON),
                (RequestCode.SEND_MESSAGE_V2, "e", SerializeType.JSON),
                (RequestCode.SEND_MESSAGE, "queueId", SerializeType.ROCKETMQ),
                (RequestCode.SEND_MESSAGE_V2, "e", SerializeType.ROCKETMQ),
            ],
            start=7,
        )
    ]
    answers, _, responder = _answer(frames, path)
    assert [a.opaque for a in answers] == [7, 8, 9, 10]
    assert [a.fields["queueId"] for a in answers] == ["3"] * 4
    assert [a.fields["queueOffset"] for a in answers] == ["0", "1", "2", "3"]
    assert [a.serialize_type for a in answers] == [SerializeType.JSON] * 2 + [
        SerializeType.ROCKETMQ
    ] * 2
    assert responder.sends == 4


def test_a_oneway_request_is_not_answered_and_a_cut_frame_waits() -> None:
    oneway = encode_command(RemotingCommand.request(RequestCode.HEART_BEAT, oneway=True))
    send = encode_command(RemotingCommand.request(RequestCode.SEND_MESSAGE, {"queueId": "0"}))
    responder = floor.Responder(ADDRESS)
    buffer = bytearray(oneway + send)
    answers, used = responder.answers(buffer, len(buffer) - 1)
    assert answers == [] and used == len(oneway)


def test_a_frame_length_out_of_range_is_refused() -> None:
    responder = floor.Responder(ADDRESS)
    buffer = bytearray((1 << 30).to_bytes(4, "big") + bytes(8))
    with pytest.raises(floor.FloorError, match="out of range"):
        responder.answers(buffer, len(buffer))


def test_the_hanet_responder_writes_a_reads_answers_and_flushes_them_when_it_completes() -> None:
    frames = _cpp_frames()
    responder = floor.Responder(ADDRESS)
    handler = floor.FloorHandler(responder)
    channel = EmbeddedChannel(*(h for _, h in remoting_pipeline()), handler)
    assert handler.connections == 1
    channel.write_one_inbound(b"".join(frames[:4]))
    assert not channel.outbound_messages  # written, not flushed yet
    channel.flush_inbound()
    assert [a.opaque for a in _split(_flushed(channel))] == [
        decode_command(f[4:]).opaque for f in frames[:4]
    ]


def test_the_hanet_responder_skips_a_oneway_request_and_waits_for_a_cut_frame() -> None:
    oneway = encode_command(RemotingCommand.request(RequestCode.HEART_BEAT, oneway=True))
    send = encode_command(RemotingCommand.request(RequestCode.SEND_MESSAGE, {"queueId": "0"}))
    responder = floor.Responder(ADDRESS)
    channel = _hanet_channel(responder)
    channel.write_inbound(oneway + send[:-1])
    assert _flushed(channel) == b"" and responder.sends == 0
    channel.write_inbound(send[-1:])
    (answer,) = _split(_flushed(channel))
    assert answer.code == ResponseCode.SUCCESS and answer.fields["queueOffset"] == "0"


_BAD_SEND = RemotingCommand.request(RequestCode.SEND_MESSAGE, {"queueId": "x"})


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ((1 << 30).to_bytes(4, "big") + bytes(8), "exceeds"),
        (encode_command(_BAD_SEND), "queue id is 'x'"),
    ],
)
def test_the_hanet_responder_closes_a_connection_whose_frame_it_cannot_read(
    bad: bytes, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    send = encode_command(RemotingCommand.request(RequestCode.SEND_MESSAGE, {"queueId": "0"}))
    responder = floor.Responder(ADDRESS)
    channel = _hanet_channel(responder)
    channel.write_inbound(send + bad)
    assert len(_split(_flushed(channel))) == 1  # the send before it is answered
    assert not channel.is_open and reason in (channel.close_reason or "")
    assert "floor: connection closed" in capsys.readouterr().err


@pytest.mark.slow
def test_the_bench_sends_to_every_responder_beside_the_broker() -> None:
    reason = cpp_client_unavailable_reason()
    if reason is not None:
        pytest.skip(f"C++ client unavailable: {reason}")
    flags = cli_flags(clients="cpp", seconds=1, file_size="4M")
    result = run_bench("clients.py", [*flags, "--floor"])
    (entry,) = result["floor"]
    for name in ("trio", "epoll", "hanet"):
        figures = entry[name]
        assert figures["sent"] > 0 and figures["failed"] == 0
        assert figures["answered_sends"] >= figures["sent"]
        assert figures["msgs_per_sec"] > 0 and figures["responder_cpu_us_per_msg"] is not None
        assert {"responder_user_us_per_msg", "responder_system_us_per_msg"} <= set(figures)
        assert entry["broker_over_floor"][name]["msgs_per_sec"] > 0
    (run,) = result["runs"]
    send = run["send"]
    assert send["sent"] > 0 and send["failed"] == 0
    assert send["broker_user_us_per_msg"] is not None
    assert send["broker_system_us_per_msg"] is not None
    assert entry["broker"]["broker_cpu_us_per_msg"] == send["broker_cpu_us_per_msg"]
