"""The broker port protocol: how producers and consumers talk to a broker (sans-IO codec).

Our own small request/response protocol on the broker's ``--listen`` port (RocketMQ's remoting
protocol is out of scope). Every frame is length-prefixed; requests carry an id the response
repeats, so a client pipelines many requests over one connection and responses may come back
in any order (a SYNC_MASTER put answers when its slaves acknowledged, a pull at once).

Everything is big-endian. ``str`` = ``u16`` byte length + UTF-8; ``blob`` = ``u32`` length +
bytes::

    frame     = u32 length (of what follows, <= max_frame_length) | u8 opcode | u32 request_id
                | payload
    PUT       0x01  u16 count (1..MAX_PUT_BATCH) | count x message
              message = str topic | i32 queue_id (-1: the broker picks) | i32 flag | str tags
                        | str keys | u16 n | n x (str name | str value) | blob body
    PUT_OK    0x81  u16 count | count x (u8 status | i32 queue_id | i64 queue_offset
                    | i64 wrote_offset | i32 wrote_size | i64 store_timestamp | str msg_id
                    | str detail)
    PULL      0x02  str topic | i32 queue_id | i64 queue_offset | i32 max_messages (>= 1)
    PULL_OK   0x82  u8 pull status | i64 next_offset | i64 min_offset | i64 max_offset
                    | u32 count | count x blob record (RocketMQ commit log record bytes)
    STATUS    0x03  (empty)
    STATUS_OK 0x83  a UTF-8 JSON object (see :mod:`hanet.ha._broker`)
    ERROR     0xFF  u16 code | str message (the request could not be served)

Put statuses are RocketMQ's ``PutMessageStatus`` in 5.x order (``PUT_OK`` = 0, ...,
``UNKNOWN_ERROR`` = 9); pull statuses are RocketMQ's ``GetMessageStatus`` names we use.

Bad input: a frame that does not decode (short, trailing bytes, bad UTF-8, an unknown opcode,
a count out of range) raises :class:`~handlers.CorruptedFrameError`; a frame over the maximum
length raises :class:`~handlers.TooLongFrameError` (the framing decoder). Either way the
connection closes with a logged reason; other connections are not affected.
"""

from __future__ import annotations

import enum
import json
import struct
from collections.abc import Mapping
from typing import Any

import attrs

from handlers import CorruptedFrameError, EncoderError
from hanet import ChannelDuplexHandler, HandlerContext, WriteFuture
from hanet.store import PutStatus

__all__ = [
    "AUTO_QUEUE",
    "DEFAULT_MAX_FRAME_LENGTH",
    "MAX_PULL_MESSAGES",
    "MAX_PUT_BATCH",
    "BrokerClientCodec",
    "BrokerServerCodec",
    "ErrorCode",
    "ErrorResponse",
    "Opcode",
    "PullRequest",
    "PullResponse",
    "PullStatus",
    "PutMessage",
    "PutReply",
    "PutRequest",
    "PutResponse",
    "Request",
    "Response",
    "StatusRequest",
    "StatusResponse",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
]

AUTO_QUEUE = -1
"""``queue_id`` of a put that lets the broker pick the queue (round robin per topic)."""
DEFAULT_MAX_FRAME_LENGTH = 8 * 1024 * 1024
"""Largest frame either side accepts (8 MiB: a 4 MiB message and room to spare)."""
MAX_PUT_BATCH = 1024
"""Most messages in one PUT request."""
MAX_PULL_MESSAGES = 1024
"""Most messages one PULL answers (a request asking for more gets this many)."""

LENGTH_FIELD = 4
HEADER = struct.Struct(">BI")


class Opcode(enum.IntEnum):
    """Frame kinds; a response is its request's opcode | 0x80."""

    PUT = 0x01
    PULL = 0x02
    STATUS = 0x03
    PUT_OK = 0x81
    PULL_OK = 0x82
    STATUS_OK = 0x83
    ERROR = 0xFF


class PullStatus(enum.IntEnum):
    """RocketMQ's ``GetMessageStatus`` values a pull answers with."""

    FOUND = 0
    NO_MESSAGE_IN_QUEUE = 1
    """The queue holds nothing (unknown or empty); next offset 0."""
    OFFSET_OVERFLOW_ONE = 2
    """The offset is the queue's end: nothing new yet; next offset = the same offset."""
    OFFSET_OVERFLOW_BADLY = 3
    """The offset is past the queue's end; next offset = the end."""
    OFFSET_TOO_SMALL = 4
    """The offset is before the queue's first message; next offset = that first message."""


class ErrorCode(enum.IntEnum):
    """Why a request got an ERROR response."""

    SYSTEM_ERROR = 1
    """The broker failed serving it (a corrupt record, a bug); the message says what."""
    NOT_AVAILABLE = 2
    """The broker is shutting down or not ready."""


# The wire value of each put status: RocketMQ 5.x's order, frozen here so that a change of
# the Python enum cannot shift the protocol.
_PUT_STATUSES: tuple[PutStatus, ...] = (
    PutStatus.PUT_OK,
    PutStatus.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE,
    PutStatus.SERVICE_NOT_AVAILABLE,
    PutStatus.CREATE_MAPPED_FILE_FAILED,
    PutStatus.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED,
    PutStatus.OS_PAGE_CACHE_BUSY,
    PutStatus.UNKNOWN_ERROR,
)
_PUT_STATUS_CODE = {status: code for code, status in enumerate(_PUT_STATUSES)}


@attrs.frozen
class PutMessage:
    """One message of a PUT request.

    Attributes:
        topic: the topic (the store checks it: ``[%|a-zA-Z0-9_-]+``).
        body: the payload.
        queue_id: the queue, or :data:`AUTO_QUEUE` to let the broker pick one.
        tags: the ``TAGS`` property ("" for none).
        keys: the ``KEYS`` property, space separated ("" for none).
        properties: more user properties as ``(name, value)`` pairs, written after TAGS and
            KEYS.
        flag: the producer's flag.
    """

    topic: str
    body: bytes
    queue_id: int = AUTO_QUEUE
    tags: str = ""
    keys: str = ""
    properties: tuple[tuple[str, str], ...] = ()
    flag: int = 0


@attrs.frozen
class PutRequest:
    """PUT: store one or more messages (one store batch, one answer)."""

    request_id: int
    messages: tuple[PutMessage, ...]


@attrs.frozen
class PullRequest:
    """PULL: up to ``max_messages`` messages of a queue from ``queue_offset`` on."""

    request_id: int
    topic: str
    queue_id: int
    queue_offset: int
    max_messages: int = 32


@attrs.frozen
class StatusRequest:
    """STATUS: the broker's role, offsets and replication state."""

    request_id: int


Request = PutRequest | PullRequest | StatusRequest


@attrs.frozen
class PutReply:
    """The answer for one message of a PUT.

    Attributes:
        status: RocketMQ's status. Under SYNC_MASTER, FLUSH_SLAVE_TIMEOUT and
            SLAVE_NOT_AVAILABLE mean the message *is* stored on the master but not (yet)
            acknowledged by enough slaves; FLUSH_DISK_TIMEOUT likewise for the local fsync.
        queue_id: the queue it went to (-1 when refused).
        queue_offset: its index in that queue (-1 when refused).
        wrote_offset: its physical offset in the commit log (-1 when refused).
        wrote_size: its record size in bytes.
        store_timestamp: when the broker stored it (ms since the epoch).
        msg_id: RocketMQ's offset message id ("" when refused).
        detail: why it was refused, for humans.
    """

    status: PutStatus
    queue_id: int = -1
    queue_offset: int = -1
    wrote_offset: int = -1
    wrote_size: int = 0
    store_timestamp: int = 0
    msg_id: str = ""
    detail: str = ""

    @property
    def ok(self) -> bool:
        """Whether the status is PUT_OK."""
        return self.status is PutStatus.PUT_OK

    @property
    def stored(self) -> bool:
        """Whether the broker wrote the message (PUT_OK or a timeout after writing it)."""
        return self.wrote_offset >= 0


@attrs.frozen
class PutResponse:
    """PUT_OK: one reply per message, in request order."""

    request_id: int
    replies: tuple[PutReply, ...]


@attrs.frozen
class PullResponse:
    """PULL_OK: the records found and where to pull next.

    ``records`` are RocketMQ commit log records exactly as stored (decode them with
    :func:`hanet.store.decode_record`). ``min_offset``/``max_offset`` are the queue's bounds
    (``max_offset`` is the offset the next message will get).
    """

    request_id: int
    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    records: tuple[bytes, ...] = ()


@attrs.frozen
class StatusResponse:
    """STATUS_OK: a JSON object (its schema is the broker's :meth:`Broker.status`)."""

    request_id: int
    status: Mapping[str, Any] = attrs.field(hash=False)


@attrs.frozen
class ErrorResponse:
    """ERROR: the request was well-formed but could not be served."""

    request_id: int
    code: ErrorCode
    message: str


Response = PutResponse | PullResponse | StatusResponse | ErrorResponse

# -- encoding ---------------------------------------------------------------------------------

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_MSG_HEAD = struct.Struct(">ii")  # queue_id, flag
_REPLY = struct.Struct(">Biqqiq")  # status, queue_id, queue_offset, wrote_offset, size, stamp
_PULL = struct.Struct(">iqi")  # queue_id, queue_offset, max_messages
_PULL_HEAD = struct.Struct(">BqqqI")  # status, next, min, max, count
_ERROR = struct.Struct(">H")


def _put_str(out: bytearray, text: str) -> None:
    raw = text.encode("utf-8")
    if len(raw) > 0xFFFF:
        raise EncoderError(f"string of {len(raw)} bytes does not fit a u16 length")
    out += _U16.pack(len(raw))
    out += raw


def _put_blob(out: bytearray, data: bytes) -> None:
    out += _U32.pack(len(data))
    out += data


def _start(opcode: Opcode, request_id: int) -> bytearray:
    if not 0 <= request_id <= 0xFFFFFFFF:
        raise EncoderError(f"request id out of range: {request_id}")
    return bytearray(HEADER.pack(opcode, request_id))


def encode_request(request: Request) -> bytearray:
    """The frame body (opcode, request id, payload) of a request, without the length field.

    Raises:
        EncoderError: a field does not fit (a string over 65535 bytes, too many messages).
    """
    if isinstance(request, PutRequest):
        count = len(request.messages)
        if not 1 <= count <= MAX_PUT_BATCH:
            raise EncoderError(f"a PUT carries 1 to {MAX_PUT_BATCH} messages, not {count}")
        out = _start(Opcode.PUT, request.request_id)
        out += _U16.pack(count)
        for m in request.messages:
            _put_str(out, m.topic)
            try:
                out += _MSG_HEAD.pack(m.queue_id, m.flag)
            except struct.error as exc:
                raise EncoderError(f"queue id or flag out of range: {exc}") from exc
            _put_str(out, m.tags)
            _put_str(out, m.keys)
            out += _U16.pack(len(m.properties))
            for name, value in m.properties:
                _put_str(out, name)
                _put_str(out, value)
            _put_blob(out, m.body)
        return out
    if isinstance(request, PullRequest):
        out = _start(Opcode.PULL, request.request_id)
        _put_str(out, request.topic)
        try:
            out += _PULL.pack(request.queue_id, request.queue_offset, request.max_messages)
        except struct.error as exc:
            raise EncoderError(f"pull field out of range: {exc}") from exc
        return out
    return _start(Opcode.STATUS, request.request_id)


def encode_response(response: Response) -> bytearray:
    """The frame body of a response, without the length field."""
    if isinstance(response, PutResponse):
        out = _start(Opcode.PUT_OK, response.request_id)
        out += _U16.pack(len(response.replies))
        for r in response.replies:
            out += _REPLY.pack(
                _PUT_STATUS_CODE[r.status],
                r.queue_id,
                r.queue_offset,
                r.wrote_offset,
                r.wrote_size,
                r.store_timestamp,
            )
            _put_str(out, r.msg_id)
            _put_str(out, r.detail)
        return out
    if isinstance(response, PullResponse):
        out = _start(Opcode.PULL_OK, response.request_id)
        out += _PULL_HEAD.pack(
            response.status,
            response.next_offset,
            response.min_offset,
            response.max_offset,
            len(response.records),
        )
        for record in response.records:
            _put_blob(out, record)
        return out
    if isinstance(response, StatusResponse):
        out = _start(Opcode.STATUS_OK, response.request_id)
        out += json.dumps(response.status, separators=(",", ":")).encode("utf-8")
        return out
    out = _start(Opcode.ERROR, response.request_id)
    out += _ERROR.pack(response.code)
    _put_str(out, response.message)
    return out


# -- decoding ---------------------------------------------------------------------------------


class _Reader:
    """A cursor over one frame; every short read is a :class:`CorruptedFrameError`."""

    __slots__ = ("buf", "pos", "what")

    def __init__(self, buf: bytes | bytearray | memoryview, what: str) -> None:
        self.buf = memoryview(buf)
        self.pos = HEADER.size
        self.what = what

    def fail(self, reason: str) -> CorruptedFrameError:
        return CorruptedFrameError(f"malformed {self.what} frame: {reason}")

    def unpack(self, fmt: struct.Struct) -> tuple[Any, ...]:
        end = self.pos + fmt.size
        if end > len(self.buf):
            raise self.fail(f"{len(self.buf)} bytes, truncated at byte {self.pos}")
        values = fmt.unpack_from(self.buf, self.pos)
        self.pos = end
        return values

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.buf):
            raise self.fail(f"{len(self.buf)} bytes, {n} more needed at byte {self.pos}")
        data = self.buf[self.pos : end].tobytes()
        self.pos = end
        return data

    def str(self) -> str:
        (n,) = self.unpack(_U16)
        raw = self.take(n)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"a string is not UTF-8 ({exc.reason})") from None

    def blob(self) -> bytes:
        (n,) = self.unpack(_U32)
        return self.take(n)

    def end(self) -> None:
        if self.pos != len(self.buf):
            raise self.fail(f"{len(self.buf) - self.pos} trailing bytes")


def _header(frame: bytes | bytearray | memoryview) -> tuple[int, int]:
    if len(frame) < HEADER.size:
        raise CorruptedFrameError(f"malformed frame: {len(frame)} bytes, no opcode and id")
    opcode, request_id = HEADER.unpack_from(frame)
    return opcode, request_id


def decode_request(frame: bytes | bytearray | memoryview) -> Request:
    """Decode a request frame body (after the length field).

    Raises:
        CorruptedFrameError: it is not a well-formed request.
    """
    opcode, request_id = _header(frame)
    if opcode == Opcode.PUT:
        r = _Reader(frame, "PUT")
        (count,) = r.unpack(_U16)
        if not 1 <= count <= MAX_PUT_BATCH:
            raise r.fail(f"{count} messages (1 to {MAX_PUT_BATCH} allowed)")
        messages = []
        for _ in range(count):
            topic = r.str()
            queue_id, flag = r.unpack(_MSG_HEAD)
            if queue_id < AUTO_QUEUE:
                raise r.fail(f"queue id {queue_id}")
            tags = r.str()
            keys = r.str()
            (n,) = r.unpack(_U16)
            properties = tuple((r.str(), r.str()) for _ in range(n))
            body = r.blob()
            messages.append(PutMessage(topic, body, queue_id, tags, keys, properties, flag))
        r.end()
        return PutRequest(request_id, tuple(messages))
    if opcode == Opcode.PULL:
        r = _Reader(frame, "PULL")
        topic = r.str()
        queue_id, queue_offset, max_messages = r.unpack(_PULL)
        r.end()
        if queue_id < 0 or queue_offset < 0 or max_messages < 1:
            raise r.fail(f"queue {queue_id}, offset {queue_offset}, max {max_messages}")
        return PullRequest(request_id, topic, queue_id, queue_offset, max_messages)
    if opcode == Opcode.STATUS:
        _Reader(frame, "STATUS").end()
        return StatusRequest(request_id)
    raise CorruptedFrameError(f"malformed frame: unknown request opcode 0x{opcode:02X}")


def decode_response(frame: bytes | bytearray | memoryview) -> Response:
    """Decode a response frame body (after the length field).

    Raises:
        CorruptedFrameError: it is not a well-formed response.
    """
    opcode, request_id = _header(frame)
    if opcode == Opcode.PUT_OK:
        r = _Reader(frame, "PUT_OK")
        (count,) = r.unpack(_U16)
        replies = []
        for _ in range(count):
            code, queue_id, queue_offset, wrote, size, stamp = r.unpack(_REPLY)
            if code >= len(_PUT_STATUSES):
                raise r.fail(f"unknown put status {code}")
            msg_id = r.str()
            detail = r.str()
            replies.append(
                PutReply(
                    _PUT_STATUSES[code], queue_id, queue_offset, wrote, size, stamp, msg_id, detail
                )
            )
        r.end()
        return PutResponse(request_id, tuple(replies))
    if opcode == Opcode.PULL_OK:
        r = _Reader(frame, "PULL_OK")
        code, next_offset, low, high, count = r.unpack(_PULL_HEAD)
        try:
            status = PullStatus(code)
        except ValueError:
            raise r.fail(f"unknown pull status {code}") from None
        records = tuple(r.blob() for _ in range(count))
        r.end()
        return PullResponse(request_id, status, next_offset, low, high, records)
    if opcode == Opcode.STATUS_OK:
        r = _Reader(frame, "STATUS_OK")
        try:
            status = json.loads(r.take(len(frame) - r.pos).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise r.fail(f"not a JSON object ({exc})") from None
        if not isinstance(status, dict):
            raise r.fail("not a JSON object")
        return StatusResponse(request_id, status)
    if opcode == Opcode.ERROR:
        r = _Reader(frame, "ERROR")
        (code,) = r.unpack(_ERROR)
        message = r.str()
        r.end()
        try:
            error_code = ErrorCode(code)
        except ValueError:
            error_code = ErrorCode.SYSTEM_ERROR
        return ErrorResponse(request_id, error_code, message)
    raise CorruptedFrameError(f"malformed frame: unknown response opcode 0x{opcode:02X}")


# -- pipeline handlers ------------------------------------------------------------------------


class BrokerServerCodec(ChannelDuplexHandler):
    """Server side: frames in -> request objects; response objects out -> frames.

    Sits after a ``LengthFieldBasedFrameDecoder(max, 0, 4, 0, 4)`` and before a
    ``LengthFieldPrepender(4)``. A malformed frame raises :class:`CorruptedFrameError` into
    the pipeline (``exception_caught``). Stateless and sharable.
    """

    sharable = True

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if isinstance(msg, bytes | bytearray | memoryview):
            ctx.fire_channel_read(decode_request(msg))
        else:
            ctx.fire_channel_read(msg)

    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        if isinstance(msg, PutResponse | PullResponse | StatusResponse | ErrorResponse):
            ctx.write(encode_response(msg), future)
        else:
            ctx.write(msg, future)


class BrokerClientCodec(ChannelDuplexHandler):
    """Client side: frames in -> response objects; request objects out -> frames."""

    sharable = True

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if isinstance(msg, bytes | bytearray | memoryview):
            ctx.fire_channel_read(decode_response(msg))
        else:
            ctx.fire_channel_read(msg)

    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        if isinstance(msg, PutRequest | PullRequest | StatusRequest):
            ctx.write(encode_request(msg), future)
        else:
            ctx.write(msg, future)
