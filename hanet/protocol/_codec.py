"""Encode and decode the broker port's frames (sans-IO; the layout is in
:mod:`hanet.protocol._messages`).

Bad input: a frame that does not decode (short, trailing bytes, bad UTF-8, an unknown opcode,
a count out of range, a malformed status document) raises
:class:`~handlers.CorruptedFrameError`; a field that does not fit raises
:class:`~handlers.EncoderError`.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from handlers import CorruptedFrameError, EncoderError

from ._messages import (
    AUTO_QUEUE,
    MAX_PUT_BATCH,
    PUT_STATUS_WIRE_ORDER,
    ErrorCode,
    ErrorResponse,
    Opcode,
    PullRequest,
    PullResponse,
    PullStatus,
    PutMessage,
    PutReply,
    PutRequest,
    PutResponse,
    Request,
    Response,
    StatusRequest,
    StatusResponse,
)
from ._status import BrokerStatus

__all__ = ["decode_request", "decode_response", "encode_request", "encode_response"]

HEADER = struct.Struct(">BI")
_PUT_STATUS_CODE = {status: code for code, status in enumerate(PUT_STATUS_WIRE_ORDER)}


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
    """The frame body of a response, without the length field.

    Raises:
        EncoderError: a field does not fit (a string over 65535 bytes, a number out of range).
    """
    try:
        return _encode_response(response)
    except struct.error as exc:
        raise EncoderError(f"a field of the answer is out of range: {exc}") from exc


def _encode_response(response: Response) -> bytearray:
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
        out += json.dumps(response.status.to_json(), separators=(",", ":")).encode("utf-8")
        return out
    out = _start(Opcode.ERROR, response.request_id)
    out += _ERROR.pack(response.code)
    _put_str(out, response.message)
    if response.leader_address is not None:
        _put_str(out, response.leader_address)
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
            if code >= len(PUT_STATUS_WIRE_ORDER):
                raise r.fail(f"unknown put status {code}")
            msg_id = r.str()
            detail = r.str()
            replies.append(
                PutReply(
                    PUT_STATUS_WIRE_ORDER[code],
                    queue_id,
                    queue_offset,
                    wrote,
                    size,
                    stamp,
                    msg_id,
                    detail,
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
        return StatusResponse(request_id, BrokerStatus.from_json(status))
    if opcode == Opcode.ERROR:
        r = _Reader(frame, "ERROR")
        (code,) = r.unpack(_ERROR)
        message = r.str()
        leader = r.str() if r.pos < len(r.buf) else None
        r.end()
        try:
            error_code = ErrorCode(code)
        except ValueError:
            error_code = ErrorCode.SYSTEM_ERROR
        return ErrorResponse(request_id, error_code, message, leader)
    raise CorruptedFrameError(f"malformed frame: unknown response opcode 0x{opcode:02X}")
