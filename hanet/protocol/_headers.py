"""The custom headers (ext fields) of the broker port's requests and answers, typed.

RocketMQ 4.9.8 sends a request's custom header as the command's ext fields: every value a
string (other clients send numbers and booleans too; :class:`~hanet.protocol.RemotingCommand`
turns them into the strings Java would have sent). Each class here is one of RocketMQ's
``*RequestHeader`` / ``*ResponseHeader`` classes, with its field names on the wire:

- ``from_fields(fields)`` reads one from ext fields. A required field (``@CFNotNull`` in
  RocketMQ) that is missing, or a number or boolean that does not parse, raises
  :class:`~hanet.protocol.RemotingHeaderError` naming the field (the dispatcher answers
  SYSTEM_ERROR with it, as RocketMQ answers a header it cannot decode); unknown keys
  (``ReqT``, ``AccessKey``, ``Signature``, ...) are ignored.
- ``to_fields()`` gives the ext fields in RocketMQ's declared field order, absent (None)
  optional fields left out.

Numbers are checked against their Java type (``Integer``: signed 32 bits, ``Long``: 64).
Booleans are ``true`` / ``false`` as Java writes them; the C++ client writes ``0`` / ``1``,
which are read too.

SEND_MESSAGE (10) names the fields of :class:`SendMessageRequestHeader` in full;
SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) use the one-letter keys ``a`` .. ``n`` of
RocketMQ's ``SendMessageRequestHeaderV2`` (:meth:`SendMessageRequestHeader.from_v2_fields`,
:meth:`~SendMessageRequestHeader.to_v2_fields`, or :meth:`~SendMessageRequestHeader.decode`
by request code).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self, cast

import attrs

from ._codes import RequestCode
from ._remoting import NATIVE_HEADERS, RemotingHeaderError, native_header_codec

__all__ = [
    "ConsumerSendMsgBackRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "GetEarliestMsgStoretimeRequestHeader",
    "GetEarliestMsgStoretimeResponseHeader",
    "GetMaxOffsetRequestHeader",
    "GetMaxOffsetResponseHeader",
    "GetMinOffsetRequestHeader",
    "GetMinOffsetResponseHeader",
    "NotifyConsumerIdsChangedRequestHeader",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "PullSysFlag",
    "QueryConsumerOffsetRequestHeader",
    "QueryConsumerOffsetResponseHeader",
    "QueryMessageRequestHeader",
    "QueryMessageResponseHeader",
    "RemotingHeader",
    "SearchOffsetRequestHeader",
    "SearchOffsetResponseHeader",
    "SendMessageRequestHeader",
    "SendMessageResponseHeader",
    "UnregisterClientRequestHeader",
    "UpdateConsumerOffsetRequestHeader",
    "ViewMessageRequestHeader",
]


class _Kind(enum.Enum):
    STR = "a string"
    INT = "an Integer"
    LONG = "a Long"
    BOOL = "a boolean"


_RANGES = {_Kind.INT: (-(1 << 31), (1 << 31) - 1), _Kind.LONG: (-(1 << 63), (1 << 63) - 1)}
_TRUE = frozenset({"true", "1"})
_FALSE = frozenset({"false", "0", ""})


def _wire(name: str, kind: _Kind, *, required: bool = True, default: Any = attrs.NOTHING) -> Any:
    """An attrs field read from / written to the ext field ``name``."""
    if not required and default is attrs.NOTHING:
        default = False if kind is _Kind.BOOL else None
    return attrs.field(default=default, metadata={"wire": name, "kind": kind, "required": required})


def _parse(cls: type, name: str, kind: _Kind, text: str) -> Any:
    if kind is _Kind.STR:
        return text
    if kind is _Kind.BOOL:
        lowered = text.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise RemotingHeaderError(f"{cls.__name__}: field {name} is {text!r}, not a boolean")
    stripped = text.strip()
    digits = stripped[1:] if stripped[:1] in "+-" else stripped
    if not digits.isascii() or not digits.isdigit():
        raise RemotingHeaderError(
            f"{cls.__name__}: field {name} is {text[:40]!r}, not {kind.value}"
        )
    if len(digits.lstrip("0")) > 19:  # past any Long (and past int()'s digit limit)
        raise RemotingHeaderError(
            f"{cls.__name__}: field {name} {stripped[:24]}... is out of range"
        )
    value = int(stripped)
    low, high = _RANGES[kind]
    if not low <= value <= high:
        raise RemotingHeaderError(f"{cls.__name__}: field {name} {value} is out of range")
    return value


_KIND_CODES = {_Kind.STR: 0, _Kind.BOOL: 1, _Kind.INT: 2, _Kind.LONG: 2}


def _with_native(
    cls: type, keys: Mapping[str, str] | None, reader: Callable[[Mapping[str, str]], object]
) -> Callable[[Mapping[str, str]], object]:
    """``reader`` behind the extension's ``read_header`` (plain fields read in C, without
    ``__init__``: the generated one only stores them); anything else still goes to ``reader``,
    which names what is wrong. Just ``reader`` without the extension, or with one built before
    ``read_header`` existed (a stale build in a checkout: slower, never broken)."""
    native = getattr(native_header_codec, "read_header", None) if NATIVE_HEADERS else None
    if native is None or hasattr(cls, "__attrs_post_init__"):
        return reader
    spec = []
    for field in attrs.fields(cls):
        kind = field.metadata["kind"]
        factory = isinstance(field.default, attrs.Factory)  # type: ignore[arg-type]
        if factory or field.validator or field.converter:  # __init__ would do more than store
            return reader  # pragma: no cover - no header has one
        spec.append(
            (
                field.name,
                field.metadata["wire"] if keys is None else keys.get(field.metadata["wire"]),
                _KIND_CODES[kind],
                _RANGES[kind][1] if kind in _RANGES else 0,
                field.metadata["required"],
                None if field.default is attrs.NOTHING else field.default,
            )
        )
    native_spec = tuple(spec)

    def read(fields: Mapping[str, str]) -> object:
        header = native(cls, fields, native_spec)
        return reader(fields) if header is None else header

    return read


# Each header class's reader, with the wire names (True) or the V2 keys (False).
_readers: dict[tuple[type, bool], Callable[[Mapping[str, str]], object]] = {}


def _format(kind: _Kind, value: Any) -> str:
    if kind is _Kind.BOOL:
        return "true" if value else "false"
    return str(value)


class RemotingHeader:
    """Base of the typed headers: reading from and writing to ext fields by the attrs fields'
    ``wire`` metadata, in declaration order (RocketMQ's)."""

    _specs: ClassVar[dict[type, tuple[tuple[str, str, _Kind, bool], ...]]] = {}

    @classmethod
    def _spec(cls) -> tuple[tuple[str, str, _Kind, bool], ...]:
        spec = RemotingHeader._specs.get(cls)
        if spec is None:
            spec = tuple(
                (f.name, f.metadata["wire"], f.metadata["kind"], f.metadata["required"])
                for f in attrs.fields(cls)  # type: ignore[arg-type]
            )
            RemotingHeader._specs[cls] = spec
        return spec

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> Self:
        """The header from a command's ext fields.

        Raises:
            RemotingHeaderError: a required field is missing, or a value does not parse.
        """
        return cls._read(fields, None)

    @classmethod
    def _read(cls, fields: Mapping[str, str], keys: Mapping[str, str] | None) -> Self:
        reader = _readers.get((cls, keys is None))
        if reader is None or (keys is not None and keys is not _V2_KEYS):
            reader = cls._reader(keys)
        return cast(Self, reader(fields))

    @classmethod
    def _reader(cls, keys: Mapping[str, str] | None) -> Callable[[Mapping[str, str]], object]:
        """A function reading this class from ext fields with ``keys`` (None: the wire
        names), generated as attrs generates ``__init__``: one straight-line step per field
        in declaration order (so the first bad field is the one named), plain digits parsed
        at once, anything else through :func:`_parse`'s checks."""
        name = cls.__name__
        lines = ["def read(fields):", "    get = fields.get", "    values = {}"]
        for attr, wire, kind, required in cls._spec():
            key = wire if keys is None else keys.get(wire)
            shown = wire if key is None or key == wire else f"{key} ({wire})"
            if key is None:
                if required:
                    lines.append(f"    raise _missing({shown!r})")
                continue
            lines.append(f"    text = get({key!r})")
            if required:
                lines.append(f"    if text is None: raise _missing({shown!r})")
                pad = "    "
            else:
                lines.append("    if text is not None:")
                pad = "        "
            parse = f"_parse(cls, {shown!r}, _Kind.{kind.name}, text)"
            if kind is _Kind.STR:
                lines.append(f"{pad}values[{attr!r}] = text")
            elif kind is _Kind.BOOL:
                lines.append(f'{pad}if text == "true": values[{attr!r}] = True')
                lines.append(f'{pad}elif text == "false": values[{attr!r}] = False')
                lines.append(f"{pad}else: values[{attr!r}] = {parse}")
            else:  # plain digits (the usual case): _parse's checks, the short way
                lines.append(f"{pad}if text.isdigit() and text.isascii() and len(text) < 20:")
                lines.append(f"{pad}    value = int(text)")
                lines.append(f"{pad}    if value > {_RANGES[kind][1]}:")
                lines.append(f"{pad}        raise _out_of_range({shown!r}, value)")
                lines.append(f"{pad}    values[{attr!r}] = value")
                lines.append(f"{pad}else: values[{attr!r}] = {parse}")
        lines.append("    return cls(**values)")

        def missing(shown: str) -> RemotingHeaderError:
            return RemotingHeaderError(f"{name}: field {shown} is missing")

        def out_of_range(shown: str, value: int) -> RemotingHeaderError:
            return RemotingHeaderError(f"{name}: field {shown} {value} is out of range")

        namespace: dict[str, Any] = {
            "cls": cls,
            "_Kind": _Kind,
            "_parse": _parse,
            "_missing": missing,
            "_out_of_range": out_of_range,
        }
        exec(compile("\n".join(lines), f"<{name} reader>", "exec"), namespace)
        reader: Callable[[Mapping[str, str]], object] = namespace["read"]
        reader = _with_native(cls, keys, reader)
        if keys is None or keys is _V2_KEYS:  # the two key maps in use: remember theirs
            _readers[(cls, keys is None)] = reader
        return reader

    def to_fields(self) -> dict[str, str]:
        """The ext fields, in RocketMQ's declared order (None fields left out)."""
        out: dict[str, str] = {}
        for attr, wire, kind, _required in self._spec():
            value = getattr(self, attr)
            if value is not None:
                out[wire] = value if type(value) is str else _format(kind, value)
        return out


class PullSysFlag(enum.IntFlag):
    """The ``sysFlag`` bits of a PULL_MESSAGE (RocketMQ's ``PullSysFlag``)."""

    COMMIT_OFFSET = 0x1
    """The pull carries the group's commit offset of the queue (``commitOffset``)."""
    SUSPEND = 0x2
    """Hold the pull up to ``suspendTimeoutMillis`` when nothing is found (long polling)."""
    SUBSCRIPTION = 0x4
    """The pull carries its subscription expression (``subscription``)."""
    CLASS_FILTER = 0x8
    LITE_PULL = 0x10


# -- sending --------------------------------------------------------------------------------


_V2_KEYS = {
    "producerGroup": "a",
    "topic": "b",
    "defaultTopic": "c",
    "defaultTopicQueueNums": "d",
    "queueId": "e",
    "sysFlag": "f",
    "bornTimestamp": "g",
    "flag": "h",
    "properties": "i",
    "reconsumeTimes": "j",
    "unitMode": "k",
    "maxReconsumeTimes": "l",
    "batch": "m",
    "bname": "n",
}


@attrs.frozen
class SendMessageRequestHeader(RemotingHeader):
    """SEND_MESSAGE (10) in full names; SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320)
    with the V2 keys ``a`` .. ``n`` (:meth:`from_v2_fields`, :meth:`to_v2_fields`)."""

    producer_group: str = _wire("producerGroup", _Kind.STR)
    topic: str = _wire("topic", _Kind.STR)
    default_topic: str = _wire("defaultTopic", _Kind.STR)
    default_topic_queue_nums: int = _wire("defaultTopicQueueNums", _Kind.INT)
    queue_id: int = _wire("queueId", _Kind.INT)
    sys_flag: int = _wire("sysFlag", _Kind.INT)
    born_timestamp: int = _wire("bornTimestamp", _Kind.LONG)
    flag: int = _wire("flag", _Kind.INT)
    properties: str | None = _wire("properties", _Kind.STR, required=False)
    reconsume_times: int | None = _wire("reconsumeTimes", _Kind.INT, required=False)
    unit_mode: bool = _wire("unitMode", _Kind.BOOL, required=False)
    batch: bool = _wire("batch", _Kind.BOOL, required=False)
    max_reconsume_times: int | None = _wire("maxReconsumeTimes", _Kind.INT, required=False)
    bname: str | None = _wire("bname", _Kind.STR, required=False)

    V2_KEYS: ClassVar[Mapping[str, str]] = _V2_KEYS
    """Full field name -> the V2 header's one-letter key."""

    @classmethod
    def from_v2_fields(cls, fields: Mapping[str, str]) -> Self:
        """The header from a SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE's short keys.

        Raises:
            RemotingHeaderError: a required field (``a`` .. ``h``) is missing or a value does
                not parse (the error names both the key and the field).
        """
        return cls._read(fields, _V2_KEYS)

    def to_v2_fields(self) -> dict[str, str]:
        """The ext fields with the V2 keys, ``a`` to ``n`` in order."""
        return {_V2_KEYS[wire]: value for wire, value in self.to_fields().items()}

    @classmethod
    def decode(cls, code: int, fields: Mapping[str, str]) -> Self:
        """The header of a send request by its code: V2 keys for SEND_MESSAGE_V2 and
        SEND_BATCH_MESSAGE, full names otherwise.

        Raises:
            RemotingHeaderError: as :meth:`from_fields`.
        """
        # (the readers make this class: no typing.cast, a Python call a send)
        if code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            reader = _readers.get((cls, False))  # from_v2_fields's, once it has run
            if reader is not None:
                return reader(fields)  # type: ignore[return-value]
            return cls.from_v2_fields(fields)
        reader = _readers.get((cls, True))  # from_fields's, once it has run (SEND_MESSAGE)
        if reader is not None:
            return reader(fields)  # type: ignore[return-value]
        return cls.from_fields(fields)

    def encode(self, code: int) -> dict[str, str]:
        """The ext fields for a send request of ``code`` (see :meth:`decode`)."""
        if code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            return self.to_v2_fields()
        return self.to_fields()


@attrs.frozen
class SendMessageResponseHeader(RemotingHeader):
    """The answer to a send: the offset message id, the queue and the queue offset."""

    msg_id: str = _wire("msgId", _Kind.STR)
    queue_id: int = _wire("queueId", _Kind.INT)
    queue_offset: int = _wire("queueOffset", _Kind.LONG)
    transaction_id: str | None = _wire("transactionId", _Kind.STR, required=False)


@attrs.frozen
class ConsumerSendMsgBackRequestHeader(RemotingHeader):
    """CONSUMER_SEND_MSG_BACK (36): a message the consumer failed to consume, by its commit
    log ``offset``, to be retried after ``delay_level`` (or sent to the DLQ)."""

    offset: int = _wire("offset", _Kind.LONG)
    group: str = _wire("group", _Kind.STR)
    delay_level: int = _wire("delayLevel", _Kind.INT)
    origin_msg_id: str | None = _wire("originMsgId", _Kind.STR, required=False)
    origin_topic: str | None = _wire("originTopic", _Kind.STR, required=False)
    unit_mode: bool = _wire("unitMode", _Kind.BOOL, required=False)
    max_reconsume_times: int | None = _wire("maxReconsumeTimes", _Kind.INT, required=False)
    bname: str | None = _wire("bname", _Kind.STR, required=False)


# -- pulling --------------------------------------------------------------------------------


@attrs.frozen
class PullMessageRequestHeader(RemotingHeader):
    """PULL_MESSAGE (11): up to ``max_msg_nums`` messages of a queue from ``queue_offset``;
    ``sys_flag`` bits in :class:`PullSysFlag`."""

    consumer_group: str = _wire("consumerGroup", _Kind.STR)
    topic: str = _wire("topic", _Kind.STR)
    queue_id: int = _wire("queueId", _Kind.INT)
    queue_offset: int = _wire("queueOffset", _Kind.LONG)
    max_msg_nums: int = _wire("maxMsgNums", _Kind.INT)
    sys_flag: int = _wire("sysFlag", _Kind.INT)
    commit_offset: int = _wire("commitOffset", _Kind.LONG)
    suspend_timeout_millis: int = _wire("suspendTimeoutMillis", _Kind.LONG)
    subscription: str | None = _wire("subscription", _Kind.STR, required=False)
    sub_version: int = _wire("subVersion", _Kind.LONG, default=0)
    expression_type: str | None = _wire("expressionType", _Kind.STR, required=False)
    bname: str | None = _wire("bname", _Kind.STR, required=False)

    @property
    def has_commit_offset(self) -> bool:
        """The pull carries a commit offset (``sysFlag`` bit 0x1)."""
        return bool(self.sys_flag & PullSysFlag.COMMIT_OFFSET)

    @property
    def suspend(self) -> bool:
        """The pull may be held while nothing is found (``sysFlag`` bit 0x2)."""
        return bool(self.sys_flag & PullSysFlag.SUSPEND)


@attrs.frozen
class PullMessageResponseHeader(RemotingHeader):
    """The answer to a pull: which member to pull from next, the next offset, the queue's
    bounds."""

    suggest_which_broker_id: int = _wire("suggestWhichBrokerId", _Kind.LONG)
    next_begin_offset: int = _wire("nextBeginOffset", _Kind.LONG)
    min_offset: int = _wire("minOffset", _Kind.LONG)
    max_offset: int = _wire("maxOffset", _Kind.LONG)


# -- consumer offsets -----------------------------------------------------------------------


@attrs.frozen
class QueryConsumerOffsetRequestHeader(RemotingHeader):
    """QUERY_CONSUMER_OFFSET (14): a group's committed offset of a queue."""

    consumer_group: str = _wire("consumerGroup", _Kind.STR)
    topic: str = _wire("topic", _Kind.STR)
    queue_id: int = _wire("queueId", _Kind.INT)
    bname: str | None = _wire("bname", _Kind.STR, required=False)


@attrs.frozen
class QueryConsumerOffsetResponseHeader(RemotingHeader):
    """The committed offset (the next one the group reads)."""

    offset: int = _wire("offset", _Kind.LONG)


@attrs.frozen
class UpdateConsumerOffsetRequestHeader(RemotingHeader):
    """UPDATE_CONSUMER_OFFSET (15, often oneway): commit a group's offset of a queue (its
    answer has no header)."""

    consumer_group: str = _wire("consumerGroup", _Kind.STR)
    topic: str = _wire("topic", _Kind.STR)
    queue_id: int = _wire("queueId", _Kind.INT)
    commit_offset: int = _wire("commitOffset", _Kind.LONG)
    bname: str | None = _wire("bname", _Kind.STR, required=False)


# -- queue offsets --------------------------------------------------------------------------


@attrs.frozen
class GetMaxOffsetRequestHeader(RemotingHeader):
    """GET_MAX_OFFSET (30): the queue offset after a queue's last message."""

    topic: str = _wire("topic", _Kind.STR)
    queue_id: int = _wire("queueId", _Kind.INT)
    bname: str | None = _wire("bname", _Kind.STR, required=False)


@attrs.frozen
class GetMaxOffsetResponseHeader(RemotingHeader):
    """The answer to GET_MAX_OFFSET."""

    offset: int = _wire("offset", _Kind.LONG)


@attrs.frozen
class GetMinOffsetRequestHeader(RemotingHeader):
    """GET_MIN_OFFSET (31): the queue offset of a queue's first message still held."""

    topic: str = _wire("topic", _Kind.STR)
    queue_id: int = _wire("queueId", _Kind.INT)
    bname: str | None = _wire("bname", _Kind.STR, required=False)


@attrs.frozen
class GetMinOffsetResponseHeader(RemotingHeader):
    """The answer to GET_MIN_OFFSET."""

    offset: int = _wire("offset", _Kind.LONG)


@attrs.frozen
class SearchOffsetRequestHeader(RemotingHeader):
    """SEARCH_OFFSET_BY_TIMESTAMP (29): the queue offset of the first message stored at or
    after ``timestamp`` (ms)."""

    topic: str = _wire("topic", _Kind.STR)
    queue_id: int = _wire("queueId", _Kind.INT)
    timestamp: int = _wire("timestamp", _Kind.LONG)
    bname: str | None = _wire("bname", _Kind.STR, required=False)


@attrs.frozen
class SearchOffsetResponseHeader(RemotingHeader):
    """The answer to SEARCH_OFFSET_BY_TIMESTAMP."""

    offset: int = _wire("offset", _Kind.LONG)


@attrs.frozen
class GetEarliestMsgStoretimeRequestHeader(RemotingHeader):
    """GET_EARLIEST_MSG_STORETIME (32): when a queue's first message still held was stored."""

    topic: str = _wire("topic", _Kind.STR)
    queue_id: int = _wire("queueId", _Kind.INT)
    bname: str | None = _wire("bname", _Kind.STR, required=False)


@attrs.frozen
class GetEarliestMsgStoretimeResponseHeader(RemotingHeader):
    """The answer to GET_EARLIEST_MSG_STORETIME (ms since the epoch)."""

    timestamp: int = _wire("timestamp", _Kind.LONG)


@attrs.frozen
class ViewMessageRequestHeader(RemotingHeader):
    """VIEW_MESSAGE_BY_ID (33): the record at commit log ``offset`` (decoded from an offset
    message id); the answer's body is the record as stored."""

    offset: int = _wire("offset", _Kind.LONG)


@attrs.frozen
class QueryMessageRequestHeader(RemotingHeader):
    """QUERY_MESSAGE (12): the messages of ``topic`` whose key (``KEYS`` or, with the ext
    field ``_UNIQUE_KEY_QUERY=true``, ``UNIQ_KEY``) is ``key``, stored between the two
    timestamps (ms); at most ``maxNum``. The answer's body is the records as stored."""

    topic: str = _wire("topic", _Kind.STR)
    key: str = _wire("key", _Kind.STR)
    max_num: int = _wire("maxNum", _Kind.INT)
    begin_timestamp: int = _wire("beginTimestamp", _Kind.LONG)
    end_timestamp: int = _wire("endTimestamp", _Kind.LONG)


@attrs.frozen
class QueryMessageResponseHeader(RemotingHeader):
    """The answer to QUERY_MESSAGE: how far the index is built (the newest index file's end
    timestamp and end offset)."""

    index_last_update_timestamp: int = _wire("indexLastUpdateTimestamp", _Kind.LONG)
    index_last_update_phyoffset: int = _wire("indexLastUpdatePhyoffset", _Kind.LONG)


# -- clients --------------------------------------------------------------------------------


@attrs.frozen
class UnregisterClientRequestHeader(RemotingHeader):
    """UNREGISTER_CLIENT (35): a client leaves its producer and/or consumer group."""

    client_id: str = _wire("clientID", _Kind.STR)
    producer_group: str | None = _wire("producerGroup", _Kind.STR, required=False)
    consumer_group: str | None = _wire("consumerGroup", _Kind.STR, required=False)


@attrs.frozen
class GetConsumerListByGroupRequestHeader(RemotingHeader):
    """GET_CONSUMER_LIST_BY_GROUP (38): the client ids of a group's live members (the answer's
    body is a :class:`~hanet.protocol.ConsumerListBody`)."""

    consumer_group: str = _wire("consumerGroup", _Kind.STR)


@attrs.frozen
class NotifyConsumerIdsChangedRequestHeader(RemotingHeader):
    """NOTIFY_CONSUMER_IDS_CHANGED (40, oneway, broker to client): a group's members
    changed; rebalance now."""

    consumer_group: str = _wire("consumerGroup", _Kind.STR)
