"""RocketMQ's ``RemotingCommand``: one request or answer of the remoting protocol, sans-IO.

A frame on the wire (every number big-endian)::

    u32 length                      # of everything after this field
    u8  serialize type | u24 header length
    header                          # JSON, or RocketMQ's binary ROCKETMQ layout
    body                            # the rest (length - 4 - header length bytes)

The JSON header is an object with ``code``, ``language`` (a name such as ``"JAVA"``),
``version``, ``opaque``, ``flag``, ``remark`` and ``extFields`` (string to string); RocketMQ
4.9.8 writes its keys in alphabetical order, the ext fields in the iteration order of a Java
``HashMap``, and adds ``"serializeTypeCurrentRPC":"JSON"``. Other clients send ext field values
as numbers or booleans too; they are read as the strings Java would have sent.

The ``ROCKETMQ`` header: ``i16 code | u8 language | i16 version | i32 opaque | i32 flag |
u32 remark length | remark | u32 ext length | (u16 key length | key | u32 value length |
value)*``, strings in UTF-8. Java writes a few headers' fields in their declared order
(``FastCodesHeader``) before the ``HashMap`` ones, so this layout keeps the fields in the order
they were given (decoded, or inserted by a processor).

``flag`` bit 0 marks an answer, bit 1 a oneway request (no answer is sent). An answer echoes its
request's ``opaque`` and serialize type.

The JSON header of each command is read and written by the optional C extension
``_speedups.c`` when it is built (:data:`NATIVE_HEADERS`): it takes the plain headers clients
send and hands anything else to the Python code here, which stays the reference
(``HANET_NO_EXTENSIONS=1`` runs it alone).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import attrs

from hanet.errors import HanetError
from hanet.handlers import CorruptedFrameError

from ._codes import LanguageCode, ResponseCode, SerializeType

__all__ = [
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "MAX_FRAME_LENGTH",
    "NATIVE_HEADERS",
    "ROCKETMQ_VERSION",
    "RemotingCommand",
    "RemotingCommandError",
    "RemotingHeaderError",
    "decode_command",
    "decode_json_header_py",
    "encode_command",
    "encode_header",
    "encode_json_header_py",
    "java_hashmap_order",
    "native_header_codec",
]

MAX_FRAME_LENGTH = 16 * 1024 * 1024
"""The largest frame (after its length field), as RocketMQ's ``frameMaxLength`` default."""

ROCKETMQ_VERSION = 409
"""``version`` of RocketMQ 4.9.8 (``MQVersion.Version.V4_9_8``), what hanet sends."""

FLAG_RESPONSE = 1
FLAG_ONEWAY = 2

_MAX_HEADER = (1 << 24) - 1
_I32 = (-(1 << 31), (1 << 31) - 1)

_PREFIX = struct.Struct(">II")
_FIXED = struct.Struct(">hBhii")  # code, language, version, opaque, flag
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


def _load_speedups() -> Any:
    try:
        from . import _speedups  # noqa: PLC0415 - optional: built by pip install -e .
    except ImportError:
        return None
    return _speedups


_SPEEDUPS = _load_speedups()

NATIVE_HEADERS = _SPEEDUPS is not None and not os.environ.get("HANET_NO_EXTENSIONS")
"""Whether the JSON headers go through the C extension (built, and ``HANET_NO_EXTENSIONS``
unset)."""

native_header_codec: Any = _SPEEDUPS
"""The C extension (``decode_json_header``, ``encode_json_header``), or None when it is not
built; reachable with ``HANET_NO_EXTENSIONS`` set too, so tests can compare it with the
Python reference (:func:`decode_json_header_py`, :func:`encode_json_header_py`)."""


class RemotingCommandError(CorruptedFrameError):
    """A frame that is not a remoting command (the connection that sent it is closed)."""


class RemotingHeaderError(HanetError, ValueError):
    """A well-formed command whose custom header (ext fields) or body does not make the
    request it names: a missing or malformed field. Answered SYSTEM_ERROR with the reason, as
    RocketMQ answers a header it cannot decode; the connection stays."""


_LANGUAGES: dict[str, LanguageCode] = dict(LanguageCode.__members__)


def _language(value: object) -> LanguageCode | int:
    if isinstance(value, str):
        return _LANGUAGES.get(value, LanguageCode.OTHER)
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return LanguageCode(value)
        except ValueError:
            return LanguageCode.OTHER
    raise RemotingCommandError(f"header language is {value!r}, not a name or a number")


def _ext_value(key: str, value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if not value.is_integer() else str(int(value))
    if value is None:
        return None
    raise RemotingCommandError(f"ext field {key!r} is {type(value).__name__}, not a value")


def _fields(value: Mapping[str, object] | None) -> dict[str, str] | None:
    if value is None:
        return None
    copy = dict(value)
    for v in copy.values():
        if type(v) is not str:  # a number, a boolean or None: as Java would have sent it
            break
    else:
        return cast(dict[str, str], copy)
    out: dict[str, str] = {}
    for k, v in value.items():
        text = _ext_value(k, v)
        if text is not None:
            out[k] = text
    return out


@attrs.frozen
class RemotingCommand:
    """One request or answer of the remoting protocol.

    Attributes:
        code: a :class:`~hanet.protocol.RequestCode` in a request, a
            :class:`~hanet.protocol.ResponseCode` in an answer (kept as a plain int: unknown
            codes pass through).
        language: who wrote it (:class:`~hanet.protocol.LanguageCode`).
        version: the writer's RocketMQ version number (409 for 4.9.8).
        opaque: the request id an answer echoes.
        flag: bit 0 answer, bit 1 oneway.
        remark: free text (an error's reason), or None.
        ext_fields: the custom header, string to string (None: no ``extFields`` at all).
        body: the bytes after the header.
        serialize_type: how the header is (to be) serialized.
    """

    code: int
    language: LanguageCode | int = LanguageCode.JAVA
    version: int = ROCKETMQ_VERSION
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: Mapping[str, str] | None = attrs.field(default=None, converter=_fields)
    body: bytes | bytearray | memoryview = b""
    serialize_type: SerializeType = SerializeType.JSON

    @classmethod
    def request(
        cls,
        code: int,
        fields: Mapping[str, object] | None = None,
        body: bytes | bytearray | memoryview = b"",
        *,
        oneway: bool = False,
        opaque: int = 0,
        serialize_type: SerializeType = SerializeType.JSON,
    ) -> RemotingCommand:
        """A request; ``fields`` values are turned into strings as Java's header codec does."""
        return cls(
            code,
            opaque=opaque,
            flag=FLAG_ONEWAY if oneway else 0,
            ext_fields=fields,
            body=body,
            serialize_type=serialize_type,
        )

    @property
    def is_response(self) -> bool:
        """True for an answer."""
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        """True for a request that wants no answer."""
        return bool(self.flag & FLAG_ONEWAY)

    @property
    def fields(self) -> Mapping[str, str]:
        """The ext fields, empty when there are none."""
        return self.ext_fields or {}

    def response(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        fields: Mapping[str, object] | None = None,
        body: bytes | bytearray | memoryview = b"",
    ) -> RemotingCommand:
        """The answer to this request: same opaque and serialize type, the response flag set."""
        # As RemotingCommand(...) with these values (the fields converted the same way).
        return _trusted(
            int(code),
            LanguageCode.JAVA,
            ROCKETMQ_VERSION,
            self.opaque,
            FLAG_RESPONSE,
            remark,
            _fields(fields),
            body,
            self.serialize_type,
        )

    def with_opaque(self, opaque: int) -> RemotingCommand:
        """This command with another request id."""
        return attrs.evolve(self, opaque=opaque)

    def describe(self) -> str:
        """A short description for logs: kind, code and opaque."""
        kind = "answer" if self.is_response else "oneway" if self.is_oneway else "request"
        return f"{kind} code={self.code} opaque={self.opaque}"


_new = object.__new__
_set = object.__setattr__


def _trusted(
    code: int,
    language: LanguageCode | int,
    version: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext_fields: dict[str, str] | None,
    body: bytes | bytearray | memoryview,
    serialize_type: SerializeType,
) -> RemotingCommand:
    """A command from values already checked (a decoded header: ext fields all strings),
    without the converter's copy."""
    cmd: RemotingCommand = _new(RemotingCommand)
    _set(cmd, "code", code)
    _set(cmd, "language", language)
    _set(cmd, "version", version)
    _set(cmd, "opaque", opaque)
    _set(cmd, "flag", flag)
    _set(cmd, "remark", remark)
    _set(cmd, "ext_fields", ext_fields)
    _set(cmd, "body", body)
    _set(cmd, "serialize_type", serialize_type)
    return cmd


def _java_hash(text: str) -> int:
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h


def java_hashmap_order(keys: Iterable[str]) -> list[str]:
    """``keys`` in the order a Java ``HashMap`` filled in this order iterates them.

    RocketMQ puts a request's custom header fields into a new ``HashMap`` and serializes it in
    iteration order: by bucket (the spread hash masked by the table size), then insertion order.
    """
    keys = list(keys)
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = _java_hash(key)
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(keys, key=bucket)


_MAX_ORDERS = 1024
_orders: dict[tuple[str, ...], tuple[str, ...]] = {}


def _hashmap_order(fields: Mapping[str, str]) -> tuple[str, ...]:
    """:func:`java_hashmap_order` of ``fields``' keys, remembered for the key sets seen
    (a processor answers with the same keys every time; bounded)."""
    keys = tuple(fields)
    order = _orders.get(keys)
    if order is None:
        order = tuple(java_hashmap_order(keys))
        if len(_orders) < _MAX_ORDERS:
            _orders[keys] = order
    return order


# Compact, UTF-8 text left as it is: what the header's strings look like on the wire.
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


_LANGUAGE_NAMES = {member: member.name for member in LanguageCode}


def _json_header(cmd: RemotingCommand) -> bytes:
    if _native_encode is not None:
        fields = cmd.ext_fields
        language = cmd.language
        try:
            return _native_encode(
                int(cmd.code),
                None if fields is None else [(k, fields[k]) for k in _hashmap_order(fields)],
                int(cmd.flag),
                _LANGUAGE_NAMES[language] if type(language) is LanguageCode else "OTHER",
                int(cmd.opaque),
                cmd.remark,
                int(cmd.version),
            )
        except OverflowError:  # a number past 64 bits: the Python encoder writes it
            pass
    return encode_json_header_py(cmd)


def encode_json_header_py(cmd: RemotingCommand) -> bytes:
    """The JSON header of ``cmd`` as 4.9.8 writes it: the pure-Python reference of the native
    encoder (the same bytes)."""
    # One C-encoded dict, its keys in the order 4.9.8 writes them (alphabetical; the ext
    # fields in HashMap order).
    header: dict[str, object] = {"code": int(cmd.code)}
    fields = cmd.ext_fields
    if fields is not None:
        header["extFields"] = {k: fields[k] for k in _hashmap_order(fields)}
    language = cmd.language
    header["flag"] = int(cmd.flag)
    header["language"] = (
        language.name if isinstance(language, LanguageCode) else LanguageCode.OTHER.name
    )
    header["opaque"] = int(cmd.opaque)
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = int(cmd.version)
    return _JSON.encode(header).encode()


def _binary_header(cmd: RemotingCommand) -> bytes:
    out = bytearray(_FIXED.pack(cmd.code, int(cmd.language), cmd.version, cmd.opaque, cmd.flag))
    remark = cmd.remark.encode() if cmd.remark else b""
    out += _U32.pack(len(remark)) + remark
    ext = bytearray()
    fields = cmd.ext_fields or {}
    for key, value in fields.items():
        k, v = key.encode(), value.encode()
        ext += _U16.pack(len(k)) + k + _U32.pack(len(v)) + v
    out += _U32.pack(len(ext)) + ext
    return bytes(out)


def encode_header(cmd: RemotingCommand) -> bytes:
    """The frame's head: length, serialize type and header length, header (the body follows).

    Raises:
        ValueError: a number out of its field's range, or a header or frame too long.
    """
    for name in ("opaque", "flag"):
        value = getattr(cmd, name)
        if not _I32[0] <= value <= _I32[1]:
            raise ValueError(f"{name} {value} does not fit a signed 32-bit field")
    if cmd.serialize_type is SerializeType.ROCKETMQ:
        try:
            header = _binary_header(cmd)
        except struct.error as exc:
            raise ValueError(f"cannot encode the ROCKETMQ header: {exc}") from exc
    else:
        header = _json_header(cmd)
    if len(header) > _MAX_HEADER:
        raise ValueError(f"header of {len(header)} bytes is over {_MAX_HEADER}")
    length = 4 + len(header) + len(cmd.body)
    if length > MAX_FRAME_LENGTH:
        raise ValueError(f"frame of {length} bytes is over {MAX_FRAME_LENGTH}")
    return _PREFIX.pack(length, (int(cmd.serialize_type) << 24) | len(header)) + header


def encode_command(cmd: RemotingCommand) -> bytes:
    """The whole frame, its length field included."""
    return encode_header(cmd) + bytes(cmd.body)


def _int(header: Mapping[str, Any], key: str, default: int) -> int:
    value = header.get(key, default)
    if type(value) is int and _I32[0] <= value <= _I32[1]:
        return value
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise RemotingCommandError(f"header {key} is {value!r}, not an integer")
    if not _I32[0] <= value <= _I32[1]:
        raise RemotingCommandError(f"header {key} {value} does not fit 32 bits")
    return value


_JSON_DECODE = json.JSONDecoder().decode
_Plain = tuple[int, str | int, int, int, int, str | None, dict[str, str] | None]
_native_decode: Callable[[memoryview], _Plain | None] | None = (
    _SPEEDUPS.decode_json_header if NATIVE_HEADERS else None
)
_native_encode: (
    Callable[[int, list[tuple[str, str]] | None, int, str, int, str | None, int], bytes] | None
) = _SPEEDUPS.encode_json_header if NATIVE_HEADERS else None


_native_command: Callable[..., RemotingCommand | None] | None = (
    getattr(_SPEEDUPS, "json_command", None) if NATIVE_HEADERS else None
)


def _decode_json(data: memoryview, body: memoryview) -> RemotingCommand:
    if _native_command is not None:
        # the command of a plain header with a language name, built natively as _trusted
        command = _native_command(
            data, body, RemotingCommand, _LANGUAGES, LanguageCode.OTHER, SerializeType.JSON
        )
        if command is not None:
            return command
    return _decode_json_rest(data, body)


def _decode_json_rest(data: memoryview, body: memoryview) -> RemotingCommand:
    """:func:`_decode_json` past its native command (a header it does not build)."""
    if _native_decode is not None:
        plain = _native_decode(data)
        if plain is not None:  # a plain header (numbers in range, ext fields as strings)
            code, language, version, opaque, flag, remark, ext = plain
            return _trusted(
                code,
                _language(language),
                version,
                opaque,
                flag,
                remark,
                ext,
                body,
                SerializeType.JSON,
            )
    return decode_json_header_py(data, body)


def decode_json_header_py(
    data: bytes | bytearray | memoryview, body: bytes | bytearray | memoryview = b""
) -> RemotingCommand:
    """The command of a JSON header (and ``body``): the pure-Python reference of the
    native decoder, which hands it every header it does not take itself.

    Raises:
        RemotingCommandError: the header is not a remoting command's.
    """
    try:
        try:
            header = _JSON_DECODE(str(data, "utf-8"))
        except ValueError:  # not UTF-8 (UnicodeDecodeError), a BOM, not JSON: the long way
            header = json.loads(bytes(data))
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise RemotingCommandError(f"JSON header does not parse: {exc}") from None
    if not isinstance(header, dict):
        raise RemotingCommandError("JSON header is not an object")
    ext = header.get("extFields")
    if ext is not None and not isinstance(ext, dict):
        raise RemotingCommandError("header extFields is not an object")
    remark = header.get("remark")
    if remark is not None and not isinstance(remark, str):
        raise RemotingCommandError("header remark is not a string")
    if "code" not in header:
        raise RemotingCommandError("JSON header has no code")
    return RemotingCommand(
        _int(header, "code", 0),
        language=_language(header.get("language", "JAVA")),
        version=_int(header, "version", 0),
        opaque=_int(header, "opaque", 0),
        flag=_int(header, "flag", 0),
        remark=remark,
        ext_fields=ext,
        body=body,
        serialize_type=SerializeType.JSON,
    )


def _utf8(data: memoryview, what: str) -> str:
    try:
        return str(data, "utf-8")
    except UnicodeDecodeError:
        raise RemotingCommandError(f"{what} is not UTF-8") from None


def _decode_binary(data: memoryview, body: memoryview) -> RemotingCommand:
    end = len(data)
    if end < _FIXED.size + 8:
        raise RemotingCommandError(f"ROCKETMQ header of {end} bytes is too short")
    code, language, version, opaque, flag = _FIXED.unpack_from(data, 0)
    pos = _FIXED.size
    (remark_len,) = _U32.unpack_from(data, pos)
    pos += 4
    if remark_len > end - pos - 4:
        raise RemotingCommandError(f"remark length {remark_len} runs past the header")
    remark = _utf8(data[pos : pos + remark_len], "remark") if remark_len else None
    pos += remark_len
    (ext_len,) = _U32.unpack_from(data, pos)
    pos += 4
    if ext_len != end - pos:
        raise RemotingCommandError(f"ext fields length {ext_len} does not end the header")
    fields: dict[str, str] | None = {} if ext_len else None
    while pos < end:
        if end - pos < 2:
            raise RemotingCommandError("ext field key length runs past the header")
        (klen,) = _U16.unpack_from(data, pos)
        pos += 2
        if end - pos < klen + 4:
            raise RemotingCommandError("ext field runs past the header")
        key = _utf8(data[pos : pos + klen], "ext field key")
        pos += klen
        (vlen,) = _U32.unpack_from(data, pos)
        pos += 4
        if end - pos < vlen:
            raise RemotingCommandError(f"ext field {key!r} value runs past the header")
        assert fields is not None
        fields[key] = _utf8(data[pos : pos + vlen], f"ext field {key!r}")
        pos += vlen
    return RemotingCommand(
        code,
        language=_language(language),
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=fields,
        body=body,
        serialize_type=SerializeType.ROCKETMQ,
    )


_JSON_TYPE = SerializeType.JSON
_OTHER_LANGUAGE = LanguageCode.OTHER


def decode_command(frame: bytes | bytearray | memoryview) -> RemotingCommand:
    """A command from a frame without its length field (what the frame decoder passes on).

    The body is a view of ``frame`` (no copy): keep the frame alive while the body is used.

    Raises:
        RemotingCommandError: the frame is not a remoting command.
    """
    view = memoryview(frame).cast("B")
    if len(view) < 4:
        raise RemotingCommandError(f"frame of {len(view)} bytes has no header length")
    (mark,) = _U32.unpack_from(view, 0)
    kind, header_len = mark >> 24, mark & _MAX_HEADER
    if header_len > len(view) - 4:
        raise RemotingCommandError(
            f"header length {header_len} is over the frame's {len(view) - 4} bytes"
        )
    header, body = view[4 : 4 + header_len], view[4 + header_len :]
    if kind == _JSON_TYPE:
        if _native_command is not None:  # _decode_json's first step, inlined (once a frame)
            command = _native_command(
                header, body, RemotingCommand, _LANGUAGES, _OTHER_LANGUAGE, _JSON_TYPE
            )
            if command is not None:
                return command
        return _decode_json_rest(header, body)
    if kind == SerializeType.ROCKETMQ:
        return _decode_binary(header, body)
    raise RemotingCommandError(f"unknown serialize type {kind}")
