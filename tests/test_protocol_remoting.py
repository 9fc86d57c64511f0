"""RocketMQ's remoting protocol: the command codec against RocketMQ 4.9.8's own frames, the
pipeline codec and dispatch on an EmbeddedChannel, and a connection over loopback TCP."""

from __future__ import annotations

import json
import struct
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from hanet.boot import serve
from hanet.channel import HandlerContext, StreamChannel
from hanet.client import RemotingConnection, RemotingResponseError, RemotingTimeoutError
from hanet.protocol import (
    LanguageCode,
    RemotingCodec,
    RemotingCommand,
    RemotingCommandError,
    RemotingDispatcher,
    RemotingHeaderError,
    RequestCode,
    ResponseCode,
    SerializeType,
    decode_command,
    encode_command,
    java_hashmap_order,
    remoting_pipeline,
)
from hanet.testing import EmbeddedChannel

FIXTURES = Path(__file__).parent / "fixtures" / "remoting"
FRAMES = sorted((FIXTURES / "java").glob("*.bin"))


def test_every_captured_frame_is_there() -> None:
    assert len(FRAMES) >= 70


@pytest.mark.parametrize("path", FRAMES, ids=lambda p: p.stem)
def test_captured_frame_decodes_and_reencodes_to_the_same_bytes(path: Path) -> None:
    data = path.read_bytes()
    (length,) = struct.unpack_from(">I", data)
    assert length == len(data) - 4
    cmd = decode_command(data[4:])
    assert encode_command(cmd) == data
    facts = json.loads(path.with_suffix(".json").read_text())
    header = facts["header"]
    assert cmd.code == header["code"]
    assert cmd.opaque == header["opaque"]
    assert cmd.flag == header["flag"]
    assert cmd.version == header["version"]
    assert LanguageCode(cmd.language).name == header["language"]
    assert dict(cmd.fields) == header.get("extFields", {})
    assert cmd.serialize_type == facts["serializeType"]
    assert len(cmd.body) == facts["bodyLength"]


def test_client_frames_with_numbers_and_booleans_read_as_java_strings() -> None:
    lines = (FIXTURES / "clients" / "alions.jsonl").read_text().splitlines()
    send = next(json.loads(line) for line in lines if json.loads(line)["code"] == 310)
    header = dict(send["hdr"])
    header.pop("_serializeType")
    raw = json.dumps(header).encode()
    frame = struct.pack(">I", len(raw)) + raw + send["body"].encode()
    cmd = decode_command(frame)
    assert cmd.code == RequestCode.SEND_MESSAGE_V2
    assert cmd.fields["d"] == "4" and cmd.fields["k"] == "false"
    assert bytes(cmd.body) == send["body"].encode()


def test_unknown_keys_and_language_names_are_tolerated() -> None:
    raw = b'{"code":34,"language":"KOTLIN","opaque":7,"flag":0,"version":1,"x":[1]}'
    cmd = decode_command(struct.pack(">I", len(raw)) + raw)
    assert cmd.language == LanguageCode.OTHER
    assert cmd.opaque == 7 and cmd.ext_fields is None


def test_an_answer_echoes_opaque_and_serialize_type() -> None:
    request = RemotingCommand.request(
        RequestCode.GET_MAX_OFFSET,
        {"topic": "T", "queueId": 1},
        opaque=41,
        serialize_type=SerializeType.ROCKETMQ,
    )
    answer = request.response(fields={"offset": 12})
    assert answer.is_response and not request.is_response
    assert answer.opaque == 41 and answer.serialize_type is SerializeType.ROCKETMQ
    again = decode_command(encode_command(answer)[4:])
    assert again == answer
    assert again.fields == {"offset": "12"}


def test_java_hashmap_order_matches_a_captured_header() -> None:
    # The ROCKETMQ run writes PULL_MESSAGE's fields in their declared order (insertion order);
    # the JSON run writes the same keys in the order of the HashMap they were put into.
    java = FIXTURES / "java"
    binary = java / "verify-ROCKETMQ-serialize-20261125-164623__PULL_MESSAGE__request.bin"
    text = java / "verify-20261125-164539__PULL_MESSAGE__request.bin"
    declared = list(decode_command(binary.read_bytes()[4:]).fields)
    written = list(decode_command(text.read_bytes()[4:]).fields)
    assert java_hashmap_order(declared) == written


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (b"\x00\x00", "no header length"),
        (b"\x00\x00\x00\x10{}", "header length"),
        (b"\x02\x00\x00\x02{}", "unknown serialize type 2"),
        (b"\x00\x00\x00\x02[]", "not an object"),
        (b"\x00\x00\x00\x02{}", "no code"),
        (b'\x00\x00\x00\x0c{"code":"x"}', "not an integer"),
        (b"\x00\x00\x00\x05{code", "does not parse"),
        (b"\x01\x00\x00\x04\x00\x01\x00\x00", "too short"),
    ],
)
def test_malformed_frames_are_refused_with_a_reason(frame: bytes, reason: str) -> None:
    with pytest.raises(RemotingCommandError, match=reason):
        decode_command(frame)


def test_a_json_header_nested_too_deep_is_refused_not_raised_past_the_codec() -> None:
    header = b'{"code":1,"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(RemotingCommandError, match="does not parse"):
        decode_command(struct.pack(">I", len(header)) + header)


def test_binary_header_lengths_are_checked() -> None:
    good = encode_command(
        RemotingCommand.request(34, {"k": "v"}, serialize_type=SerializeType.ROCKETMQ)
    )[4:]
    truncated = bytearray(good)
    truncated[-1:] = b""
    struct.pack_into(">I", truncated, 0, (1 << 24) | (len(truncated) - 4))
    with pytest.raises(RemotingCommandError):
        decode_command(bytes(truncated))


_text = st.text(max_size=20)


@given(
    code=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(0, 3),
    remark=st.none() | st.text(min_size=1, max_size=30),
    fields=st.none() | st.dictionaries(st.text(min_size=1, max_size=10), _text, max_size=20),
    body=st.binary(max_size=64),
    kind=st.sampled_from(SerializeType),
)
def test_any_command_round_trips(
    code: int,
    opaque: int,
    flag: int,
    remark: str | None,
    fields: dict[str, str] | None,
    body: bytes,
    kind: SerializeType,
) -> None:
    if kind is SerializeType.ROCKETMQ and fields == {}:
        fields = None  # the binary layout cannot tell "no ext fields" from "none at all"
    cmd = RemotingCommand(
        code,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=fields,
        body=body,
        serialize_type=kind,
    )
    again = decode_command(encode_command(cmd)[4:])
    assert again.code == code and again.opaque == opaque and again.flag == flag
    assert again.remark == remark
    assert dict(again.fields) == (fields or {})
    assert bytes(again.body) == body


def _echo(ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
    if "fail" in request.fields:
        raise RemotingHeaderError("the header has no topic")
    return request.response(fields={"echo": request.fields.get("v", "")}, body=request.body)


def _dispatching() -> EmbeddedChannel:
    return EmbeddedChannel(
        RemotingCodec(), RemotingDispatcher({RequestCode.HEART_BEAT: _echo}, port="test")
    )


def _answer(channel: EmbeddedChannel) -> RemotingCommand:
    out = bytearray()
    while (chunk := channel.read_outbound()) is not None:
        out += chunk
    return decode_command(bytes(out)[4:])


def test_dispatch_answers_with_the_processor_and_unknown_codes_not_supported() -> None:
    channel = _dispatching()
    request = RemotingCommand.request(RequestCode.HEART_BEAT, {"v": "1"}, b"hi", opaque=5)
    channel.write_inbound(encode_command(request)[4:])
    answer = _answer(channel)
    assert answer.opaque == 5 and answer.is_response and answer.fields == {"echo": "1"}
    assert bytes(answer.body) == b"hi"
    channel.write_inbound(encode_command(RemotingCommand.request(9999, opaque=6))[4:])
    answer = _answer(channel)
    assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert answer.remark == " request type 9999 not supported"
    assert channel.is_active


def test_dispatch_answers_a_bad_header_system_error_and_keeps_the_connection() -> None:
    channel = _dispatching()
    request = RemotingCommand.request(RequestCode.HEART_BEAT, {"fail": "1"}, opaque=8)
    channel.write_inbound(encode_command(request)[4:])
    answer = _answer(channel)
    assert answer.code == ResponseCode.SYSTEM_ERROR and answer.remark == "the header has no topic"
    assert channel.is_active


def test_a_oneway_request_is_served_and_not_answered() -> None:
    channel = _dispatching()
    request = RemotingCommand.request(RequestCode.HEART_BEAT, {"v": "1"}, oneway=True)
    channel.write_inbound(encode_command(request)[4:])
    assert channel.read_outbound() is None


def test_a_malformed_frame_closes_only_that_connection(caplog: pytest.LogCaptureFixture) -> None:
    channel = _dispatching()
    channel.write_inbound(b"\x00\x00\x00\x05{code")
    assert not channel.is_active
    assert "malformed" in caplog.text or "does not parse" in caplog.text


def test_an_answer_too_big_is_replaced_by_system_error() -> None:
    channel = EmbeddedChannel(RemotingCodec())
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, opaque=3)
    channel.write_outbound(request.response(body=bytes(17 * 1024 * 1024)))
    answer = _answer(channel)
    assert answer.code == ResponseCode.SYSTEM_ERROR and answer.opaque == 3
    assert "over" in (answer.remark or "")


async def _server(nursery: trio.Nursery, processors: dict[int, Any]) -> int:
    def init(channel: StreamChannel) -> None:
        for name, handler in remoting_pipeline():
            channel.pipeline.add_last(handler, name)
        channel.pipeline.add_last(RemotingDispatcher(processors, port="test"))

    server = await nursery.start(partial(serve, init, 0, host="127.0.0.1"))
    return int(server.addresses[0][1])


async def test_a_connection_pipelines_requests_over_loopback() -> None:
    async with trio.open_nursery() as nursery:
        port = await _server(nursery, {RequestCode.HEART_BEAT: _echo})
        async with RemotingConnection.connect("127.0.0.1", port) as conn:
            answers: dict[int, str] = {}

            async def one(i: int) -> None:
                request = RemotingCommand.request(RequestCode.HEART_BEAT, {"v": i})
                answers[i] = (await conn.invoke_checked(request)).fields["echo"]

            async with trio.open_nursery() as calls:
                for i in range(50):
                    calls.start_soon(one, i)
            assert answers == {i: str(i) for i in range(50)}
            with pytest.raises(RemotingResponseError, match="REQUEST_CODE_NOT_SUPPORTED"):
                await conn.invoke_checked(RemotingCommand.request(RequestCode.PULL_MESSAGE))
            await conn.invoke_oneway(RemotingCommand.request(RequestCode.HEART_BEAT))
        nursery.cancel_scope.cancel()


async def test_a_request_with_no_answer_times_out() -> None:
    def silent(ctx: HandlerContext, request: RemotingCommand) -> None:
        return None

    async with trio.open_nursery() as nursery:
        port = await _server(nursery, {RequestCode.HEART_BEAT: silent})
        async with RemotingConnection.connect("127.0.0.1", port) as conn:
            with pytest.raises(RemotingTimeoutError, match="HEART_BEAT"):
                await conn.invoke(RemotingCommand.request(RequestCode.HEART_BEAT), within=0.2)
        nursery.cancel_scope.cancel()


# -- the JSON header's fast paths give what the field-by-field way gave ------------------------


def _reference_json_header(cmd: RemotingCommand) -> bytes:
    """The header as written field by field (what the encoder did before its fast path)."""

    def text(value: str) -> str:
        return json.dumps(value, ensure_ascii=False)

    parts = [f'{{"code":{int(cmd.code)}']
    if cmd.ext_fields is not None:
        fields = cmd.ext_fields
        items = ",".join(f"{text(k)}:{text(fields[k])}" for k in java_hashmap_order(fields))
        parts.append(f',"extFields":{{{items}}}')
    language = cmd.language
    name = language.name if isinstance(language, LanguageCode) else LanguageCode.OTHER.name
    parts.append(f',"flag":{cmd.flag},"language":"{name}","opaque":{cmd.opaque}')
    if cmd.remark is not None:
        parts.append(f',"remark":{text(cmd.remark)}')
    parts.append(f',"serializeTypeCurrentRPC":"JSON","version":{cmd.version}}}')
    return "".join(parts).encode()


@given(
    st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=20) | st.none(),
    st.none() | st.text(max_size=20),
    st.integers(-(1 << 31), (1 << 31) - 1),
    st.sampled_from([*LanguageCode, 99]),
)
def test_json_header_is_what_the_field_by_field_encoding_wrote(
    fields: dict[str, str] | None, remark: str | None, opaque: int, language: Any
) -> None:
    cmd = RemotingCommand(7, language=language, opaque=opaque, remark=remark, ext_fields=fields)
    try:
        expected = _reference_json_header(cmd)
    except UnicodeEncodeError:  # a lone surrogate: neither way encodes it
        with pytest.raises(UnicodeEncodeError):
            encode_command(cmd)
        return
    frame = encode_command(cmd)
    (header_len,) = struct.unpack_from(">I", frame, 4)
    assert frame[8 : 8 + (header_len & 0xFFFFFF)] == expected
    assert encode_command(cmd) == frame  # the remembered key order gives the same bytes


def test_json_headers_that_are_not_plain_utf8_decode_the_long_way() -> None:
    header = b'{"code":11,"extFields":{"a":"\\u00e9"},"flag":0,"opaque":3}'
    for data in (b"\xef\xbb\xbf" + header, header.decode().encode("utf-16")):
        frame = struct.pack(">I", len(data)) + data
        cmd = decode_command(frame)
        assert (cmd.code, cmd.opaque, cmd.fields) == (11, 3, {"a": "\u00e9"})
    bad = b'{"code":11,"opaque":"\xff"}'
    with pytest.raises(RemotingCommandError, match="does not parse"):
        decode_command(struct.pack(">I", len(bad)) + bad)


def test_ext_field_values_that_are_not_strings_still_read_as_java_sent_them() -> None:
    cmd = RemotingCommand(1, ext_fields={"n": 5, "b": True, "f": 1.5, "s": "x", "none": None})
    assert cmd.fields == {"n": "5", "b": "true", "f": "1.5", "s": "x"}
    source = {"s": "x"}
    copied = RemotingCommand(1, ext_fields=source)
    source["s"] = "changed"
    assert copied.fields == {"s": "x"}
