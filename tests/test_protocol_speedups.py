"""The native JSON header codec (``hanet/protocol/_speedups.c``) against the pure-Python
reference (``decode_json_header_py``, ``encode_json_header_py``): what the native decoder
accepts decodes to the same command, what it hands back (None) the reference decides; the
encoder writes the same bytes. The codec tests also pass with ``HANET_NO_EXTENSIONS=1`` (the
reference alone)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hanet.protocol import (
    NATIVE_HEADERS,
    LanguageCode,
    RemotingCommand,
    RemotingCommandError,
    SerializeType,
    decode_command,
    decode_json_header_py,
    encode_header,
    encode_json_header_py,
    native_header_codec,
)

ROOT = Path(__file__).resolve().parents[1]

speedups: Any = native_header_codec

native = pytest.mark.skipif(speedups is None, reason="the C extension is not built")

ALIONS_SEND = (
    b'{"code":310,"language":"JAVA","opaque":2,"flag":0,"version":121,"extFields":{"a":"demo-p'
    b'roducer-group","b":"DemoTopic","c":"TBW102","d":4,"e":0,"f":0,"g":1795624595700,"h":0,"i'
    b'":"TAGS\\u0001TagA\\u0002KEYS\\u0001key0\\u0002","j":0,"k":false}}'
)


def test_the_native_codec_is_selected_when_built() -> None:
    wanted = speedups is not None and not os.environ.get("HANET_NO_EXTENSIONS")
    assert wanted == NATIVE_HEADERS


def _reference(data: bytes) -> RemotingCommand | None:
    try:
        return decode_json_header_py(data)
    except RemotingCommandError:
        return None


def _language(value: str | int) -> LanguageCode:
    """A header's language as the reference reads it (an unknown one: OTHER)."""
    if isinstance(value, str):
        return LanguageCode.__members__.get(value, LanguageCode.OTHER)
    try:
        return LanguageCode(value)
    except ValueError:
        return LanguageCode.OTHER


def _same(native_result: Any, cmd: RemotingCommand) -> None:
    code, language, version, opaque, flag, remark, ext = native_result
    assert (code, version, opaque, flag, remark) == (
        cmd.code,
        cmd.version,
        cmd.opaque,
        cmd.flag,
        cmd.remark,
    )
    assert _language(language) == cmd.language
    assert ext == (None if cmd.ext_fields is None else dict(cmd.ext_fields))
    assert ext is None or list(ext) == list(cmd.ext_fields or {})


@native
def test_a_client_send_header_decodes_natively_as_the_reference_does() -> None:
    assert speedups is not None
    result = speedups.decode_json_header(ALIONS_SEND)
    assert result is not None
    reference = _reference(ALIONS_SEND)
    assert reference is not None
    _same(result, reference)
    assert result[6] == {
        "a": "demo-producer-group",
        "b": "DemoTopic",
        "c": "TBW102",
        "d": "4",
        "e": "0",
        "f": "0",
        "g": "1795624595700",
        "h": "0",
        "i": "TAGS\x01TagA\x02KEYS\x01key0\x02",
        "j": "0",
        "k": "false",
    }


_scalar = (
    st.integers(-(2**40), 2**40)
    | st.sampled_from([0, -0, 2**31 - 1, -(2**31), 2**31, 10**19, 10**30])
    | st.booleans()
    | st.none()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(["", "\ud800", 'a"b\\c\n\t\x01\x7f', "\u00e9\u4e2d\U0001f600"])
)
_value = (
    _scalar
    | st.lists(_scalar, max_size=1)
    | st.dictionaries(st.text(max_size=2), _scalar, max_size=1)
)
_ext = st.none() | st.dictionaries(st.text(max_size=4), _value, max_size=5) | _scalar
_known = st.sampled_from(["code", "language", "version", "opaque", "flag", "remark", "extFields"])


@st.composite
def _headers(draw: st.DrawFn) -> bytes:
    """JSON header text: mostly plain ones, with every kind of oddity sometimes."""
    pairs: list[tuple[str, Any]] = []
    if draw(st.booleans()):
        pairs.append(("code", draw(st.integers(-(2**15), 2**15))))
    for _ in range(draw(st.integers(0, 5))):
        key = draw(_known | st.text(max_size=5))
        value = draw(_ext) if key == "extFields" else draw(_scalar)
        if key == "language" and draw(st.booleans()):
            value = draw(st.sampled_from([m.name for m in LanguageCode] + ["COBOL"]))
        pairs.append((key, value))
    ascii_only = draw(st.booleans())
    sep = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")]))
    items = [
        json.dumps(k, ensure_ascii=ascii_only) + sep[1] + json.dumps(v, ensure_ascii=ascii_only)
        for k, v in pairs
    ]
    text = "{" + sep[0].join(items) + "}"
    if draw(st.booleans()):
        text = draw(st.sampled_from([" ", "\n", ""])) + text + draw(st.sampled_from([" ", "x"]))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate written as itself
        return text.encode("utf-8", "surrogatepass")


@native
@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_headers())
def test_the_native_decoder_agrees_with_the_reference(data: bytes) -> None:
    assert speedups is not None
    result = speedups.decode_json_header(data)
    reference = _reference(data)
    if result is None:
        return  # the reference decides (and names what is wrong)
    assert reference is not None, "the native decoder accepted what the reference refuses"
    _same(result, reference)


@native
@pytest.mark.parametrize(
    "data",
    [
        b'{"code":1.5}',
        b'{"code":01}',
        b'{"code":2147483648}',
        b'{"code":1,"extFields":{"a":[1]}}',
        b'{"code":1,"extFields":{"a":"\\ud83d\\ude00"}}',
        b'{"code":1,"remark":"\xff"}',
        b'{"code":1,"language":null}',
        b'{"code":1,"extFields":{"a":1e3}}',
        b'{"code":1,"a":"\x01"}',
        b'{"opaque":1}',
        b'{"code":1}x',
        b'\xef\xbb\xbf{"code":1}',
        b"[]",
    ],
)
def test_headers_out_of_the_plain_shape_go_the_python_way(data: bytes) -> None:
    assert speedups is not None
    assert speedups.decode_json_header(data) is None


@native
def test_null_ext_values_are_left_out_where_the_key_first_stood() -> None:
    assert speedups is not None
    data = b'{"code":1,"extFields":{"a":"1","b":"2","a":null,"a":3,"c":null}}'
    result = speedups.decode_json_header(data)
    reference = _reference(data)
    assert result is not None and reference is not None
    _same(result, reference)
    assert list(result[6] or {}) == ["a", "b"]


@native
@given(
    st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=20) | st.none(),
    st.none() | st.text(max_size=20),
    st.integers(-(1 << 31), (1 << 31) - 1),
    st.sampled_from([*LanguageCode, 99]),
    st.integers(-(2**15), 2**15 - 1),
    st.integers(-(2**70), 2**70),
)
def test_the_native_encoder_writes_the_reference_bytes(
    fields: dict[str, str] | None,
    remark: str | None,
    opaque: int,
    language: Any,
    code: int,
    version: int,
) -> None:
    cmd = RemotingCommand(
        code, language=language, version=version, opaque=opaque, remark=remark, ext_fields=fields
    )
    try:
        expected = encode_json_header_py(cmd)
    except UnicodeEncodeError:
        with pytest.raises(UnicodeEncodeError):
            encode_header(cmd)
        return
    assert encode_header(cmd)[8:] == expected


def test_the_codec_tests_pass_without_the_extension() -> None:
    """``HANET_NO_EXTENSIONS=1``: the pure-Python reference alone, same behaviour."""
    tests = [
        "tests/test_protocol_remoting.py",
        "tests/test_protocol_speedups.py::test_the_native_codec_is_selected_when_built",
    ]
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "HANET_NO_EXTENSIONS": "1"},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def test_a_decoded_send_reads_as_the_same_command_both_ways() -> None:
    """The whole frame through decode_command: the native result is a RemotingCommand like
    any other (equal to the reference's)."""
    frame = len(ALIONS_SEND).to_bytes(4, "big") + ALIONS_SEND + b"body"
    cmd = decode_command(frame)
    reference = decode_json_header_py(ALIONS_SEND, b"body")
    assert cmd.serialize_type is SerializeType.JSON
    assert (cmd.code, cmd.language, cmd.opaque, cmd.version, cmd.flag, cmd.remark) == (
        reference.code,
        reference.language,
        reference.opaque,
        reference.version,
        reference.flag,
        reference.remark,
    )
    assert dict(cmd.fields) == dict(reference.fields)
    assert bytes(cmd.body) == b"body"


_LANGUAGES = dict(LanguageCode.__members__)


def _native_command(data: bytes, body: bytes = b"") -> RemotingCommand | None:
    assert speedups is not None
    command: RemotingCommand | None = speedups.json_command(
        data, body, RemotingCommand, _LANGUAGES, LanguageCode.OTHER, SerializeType.JSON
    )
    return command


def _same_command(command: RemotingCommand, reference: RemotingCommand) -> None:
    """Field by field (the body's bytes), the ext fields in the same order."""
    assert type(command) is RemotingCommand
    assert command == reference
    assert command.language is reference.language
    assert list(command.ext_fields or {}) == list(reference.ext_fields or {})
    assert bytes(command.body) == bytes(reference.body)
    assert command.serialize_type is SerializeType.JSON


@native
@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_headers(), st.binary(max_size=8))
def test_the_native_command_is_the_reference_command(data: bytes, body: bytes) -> None:
    """json_command builds what the reference decodes from a header the native decoder takes
    with a language name; anything else (None) is left to the Python path."""
    command = _native_command(data, body)
    plain = speedups.decode_json_header(data)
    if command is None:
        assert plain is None or not isinstance(plain[1], str)
        return
    reference = _reference(data)
    assert reference is not None, "json_command accepted what the reference refuses"
    _same_command(command, attrs.evolve(reference, body=body))


@native
def test_the_native_command_of_a_client_send() -> None:
    command = _native_command(ALIONS_SEND, b"body")
    reference = decode_json_header_py(ALIONS_SEND, b"body")
    assert command is not None
    _same_command(command, reference)
    assert command.language is LanguageCode.JAVA
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        command.code = 1  # type: ignore[misc]
    unknown = _native_command(b'{"code":1,"language":"COBOL"}')
    assert unknown is not None and unknown.language is LanguageCode.OTHER
    assert _native_command(b'{"code":1,"language":0}') is None  # a number: the Python path
    assert _native_command(b'{"code":1.5}') is None


@native
def test_the_native_command_refuses_wrong_arguments() -> None:
    assert speedups is not None
    with pytest.raises(TypeError):
        speedups.json_command(ALIONS_SEND, b"", RemotingCommand, _LANGUAGES, None)
    with pytest.raises(TypeError):
        speedups.json_command(ALIONS_SEND, b"", "cls", _LANGUAGES, None, None)
    with pytest.raises(TypeError):
        speedups.json_command(ALIONS_SEND, b"", RemotingCommand, [], None, None)
    with pytest.raises(TypeError):
        speedups.json_command(42, b"", RemotingCommand, _LANGUAGES, None, None)
    with pytest.raises(TypeError):  # not made by object.__new__
        speedups.json_command(ALIONS_SEND, b"", int, _LANGUAGES, None, None)
