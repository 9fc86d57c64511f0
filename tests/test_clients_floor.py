"""``bench/clients.py --floor``: the C++ client's sends against bare responders
(``bench/_floor.py``), name server and broker in one process, that store nothing. First their
answers to the C++ client's own captured frames, then a short run of the bench."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from bench_support import run_bench
from interop_support import cpp_client_unavailable_reason

from hanet.protocol import (
    FLAG_RESPONSE,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    TopicRouteData,
    decode_command,
    encode_command,
)
from hanet.testing import cli_flags

FIXTURE = Path(__file__).parent / "fixtures" / "remoting" / "clients" / "cpp.hex"
ADDRESS = "127.0.0.1:10911"


def _floor() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "bench" / "_floor.py"
    spec = importlib.util.spec_from_file_location("floor_bench", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


floor = _floor()


def _cpp_frames() -> list[bytes]:
    lines = FIXTURE.read_text().splitlines()
    return [bytes.fromhex(line) for line in lines if line.strip() and not line.startswith("#")]


def _answer(frames: list[bytes]) -> tuple[list[RemotingCommand], int, Any]:
    responder = floor.Responder(ADDRESS)
    buffer = bytearray(b"".join(frames))
    answers, used = responder.answers(buffer, len(buffer))
    return [decode_command(a[4:]) for a in answers], used, responder


def test_the_cpp_clients_requests_are_each_answered_success_with_their_opaque() -> None:
    frames = _cpp_frames()
    requests = [decode_command(frame[4:]) for frame in frames]
    answers, used, responder = _answer(frames)
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


def test_a_route_names_the_responder_itself_as_every_topics_master() -> None:
    frames = _cpp_frames()
    requests = [decode_command(frame[4:]) for frame in frames]
    answers, _, _ = _answer(frames)
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


def test_sends_count_their_queue_offsets_whatever_their_header_kind() -> None:
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
    answers, _, responder = _answer(frames)
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


@pytest.mark.slow
def test_the_bench_sends_to_both_responders_beside_the_broker() -> None:
    reason = cpp_client_unavailable_reason()
    if reason is not None:
        pytest.skip(f"C++ client unavailable: {reason}")
    flags = cli_flags(clients="cpp", seconds=1, file_size="4M")
    result = run_bench("clients.py", [*flags, "--floor"])
    (entry,) = result["floor"]
    for name in ("trio", "epoll"):
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
