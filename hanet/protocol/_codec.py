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

from ._cluster import (
    BrokerMetadata,
    BrokerRegistration,
    ClusterInfo,
    ClusterRequest,
    ClusterResponse,
    CommitOffsetRequest,
    CommitOffsetResponse,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResponse,
    ConsumerListRequest,
    ConsumerListResponse,
    MetadataRequest,
    MetadataResponse,
    QueryOffsetRequest,
    QueryOffsetResponse,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
    RouteBroker,
    RouteRequest,
    RouteResponse,
    TopicRoute,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
    UnregisterConsumerRequest,
    UnregisterConsumerResponse,
)
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
_PULL_HEAD = struct.Struct(">BqqqqI")  # status, next, min, max, suggested broker, count
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_OFFSET = struct.Struct(">iq")  # queue_id, offset
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
    if isinstance(request, StatusRequest):
        return _start(Opcode.STATUS, request.request_id)
    try:
        return _encode_cluster_request(request)
    except struct.error as exc:
        raise EncoderError(f"a field of the request is out of range: {exc}") from exc


def _encode_cluster_request(request: Request) -> bytearray:
    if isinstance(request, CommitOffsetRequest):
        out = _start(Opcode.COMMIT_OFFSET, request.request_id)
        _put_str(out, request.group)
        _put_str(out, request.topic)
        out += _OFFSET.pack(request.queue_id, request.offset)
        return out
    if isinstance(request, QueryOffsetRequest):
        out = _start(Opcode.QUERY_OFFSET, request.request_id)
        _put_str(out, request.group)
        _put_str(out, request.topic)
        out += _I32.pack(request.queue_id)
        return out
    if isinstance(request, MetadataRequest):
        return _start(Opcode.SYNC_METADATA, request.request_id)
    if isinstance(request, ConsumerHeartbeatRequest | UnregisterConsumerRequest):
        opcode = (
            Opcode.CONSUMER_HEARTBEAT
            if isinstance(request, ConsumerHeartbeatRequest)
            else Opcode.UNREGISTER_CONSUMER
        )
        out = _start(opcode, request.request_id)
        _put_str(out, request.group)
        _put_str(out, request.client_id)
        return out
    if isinstance(request, ConsumerListRequest):
        out = _start(Opcode.GET_CONSUMER_LIST, request.request_id)
        _put_str(out, request.group)
        return out
    if isinstance(request, RegisterBrokerRequest):
        r = request.registration
        out = _start(Opcode.REGISTER_BROKER, request.request_id)
        _put_str(out, r.cluster)
        _put_str(out, r.broker_name)
        out += _I64.pack(r.broker_id)
        _put_str(out, r.role)
        _put_str(out, r.broker_address)
        _put_str(out, r.ha_address)
        out += _U32.pack(len(r.topics))
        for topic, queues in r.topics:
            _put_str(out, topic)
            out += _I32.pack(queues)
        return out
    if isinstance(request, UnregisterBrokerRequest):
        out = _start(Opcode.UNREGISTER_BROKER, request.request_id)
        _put_str(out, request.cluster)
        _put_str(out, request.broker_name)
        out += _I64.pack(request.broker_id)
        _put_str(out, request.broker_address)
        return out
    if isinstance(request, RouteRequest):
        out = _start(Opcode.GET_ROUTE, request.request_id)
        _put_str(out, request.topic)
        return out
    if isinstance(request, ClusterRequest):
        return _start(Opcode.GET_CLUSTER, request.request_id)
    raise EncoderError(f"not a request: {type(request).__name__}")


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
            response.suggested_broker_id,
            len(response.records),
        )
        for record in response.records:
            _put_blob(out, record)
        return out
    if isinstance(response, StatusResponse):
        out = _start(Opcode.STATUS_OK, response.request_id)
        out += json.dumps(response.status.to_json(), separators=(",", ":")).encode("utf-8")
        return out
    if not isinstance(response, ErrorResponse):
        return _encode_cluster_response(response)
    out = _start(Opcode.ERROR, response.request_id)
    out += _ERROR.pack(response.code)
    _put_str(out, response.message)
    if response.leader_address is not None:
        _put_str(out, response.leader_address)
    return out


def _encode_cluster_response(response: Response) -> bytearray:
    if isinstance(response, CommitOffsetResponse):
        return _start(Opcode.COMMIT_OFFSET_OK, response.request_id)
    if isinstance(response, QueryOffsetResponse):
        out = _start(Opcode.QUERY_OFFSET_OK, response.request_id)
        out += _I64.pack(response.offset)
        return out
    if isinstance(response, MetadataResponse):
        out = _start(Opcode.SYNC_METADATA_OK, response.request_id)
        out += _json(response.metadata.to_json())
        return out
    if isinstance(response, ConsumerHeartbeatResponse):
        return _start(Opcode.CONSUMER_HEARTBEAT_OK, response.request_id)
    if isinstance(response, UnregisterConsumerResponse):
        return _start(Opcode.UNREGISTER_CONSUMER_OK, response.request_id)
    if isinstance(response, ConsumerListResponse):
        out = _start(Opcode.GET_CONSUMER_LIST_OK, response.request_id)
        if len(response.client_ids) > 0xFFFF:
            raise EncoderError(f"{len(response.client_ids)} client ids do not fit a u16 count")
        out += _U16.pack(len(response.client_ids))
        for client_id in response.client_ids:
            _put_str(out, client_id)
        return out
    if isinstance(response, RegisterBrokerResponse):
        out = _start(Opcode.REGISTER_BROKER_OK, response.request_id)
        _put_str(out, response.master_address or "")
        _put_str(out, response.master_ha_address or "")
        return out
    if isinstance(response, UnregisterBrokerResponse):
        return _start(Opcode.UNREGISTER_OK, response.request_id)
    if isinstance(response, RouteResponse):
        route = response.route
        out = _start(Opcode.GET_ROUTE_OK, response.request_id)
        _put_str(out, route.topic)
        out += _U16.pack(len(route.brokers))
        for broker in route.brokers:
            _put_str(out, broker.broker_name)
            out += _I32.pack(broker.queues)
            out += _U16.pack(len(broker.addresses))
            for broker_id, address in broker.addresses:
                out += _I64.pack(broker_id)
                _put_str(out, address)
        return out
    if isinstance(response, ClusterResponse):
        out = _start(Opcode.GET_CLUSTER_OK, response.request_id)
        out += _json(response.cluster.to_json())
        return out
    raise EncoderError(f"not a response: {type(response).__name__}")


def _json(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode("utf-8")


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

    def json_object(self) -> dict[str, Any]:
        """The rest of the frame as a UTF-8 JSON object."""
        try:
            document = json.loads(self.take(len(self.buf) - self.pos).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise self.fail(f"not a JSON object ({exc})") from None
        if not isinstance(document, dict):
            raise self.fail("not a JSON object")
        return document

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
    return _decode_cluster_request(frame, opcode, request_id)


def _decode_cluster_request(
    frame: bytes | bytearray | memoryview, opcode: int, rid: int
) -> Request:
    if opcode == Opcode.COMMIT_OFFSET:
        r = _Reader(frame, "COMMIT_OFFSET")
        group, topic = r.str(), r.str()
        queue_id, offset = r.unpack(_OFFSET)
        r.end()
        if queue_id < 0 or offset < 0:
            raise r.fail(f"queue {queue_id}, offset {offset}")
        return CommitOffsetRequest(rid, group, topic, queue_id, offset)
    if opcode == Opcode.QUERY_OFFSET:
        r = _Reader(frame, "QUERY_OFFSET")
        group, topic = r.str(), r.str()
        (queue_id,) = r.unpack(_I32)
        r.end()
        if queue_id < 0:
            raise r.fail(f"queue {queue_id}")
        return QueryOffsetRequest(rid, group, topic, queue_id)
    if opcode == Opcode.SYNC_METADATA:
        _Reader(frame, "SYNC_METADATA").end()
        return MetadataRequest(rid)
    if opcode == Opcode.CONSUMER_HEARTBEAT:
        r = _Reader(frame, "CONSUMER_HEARTBEAT")
        group, client_id = r.str(), r.str()
        r.end()
        return ConsumerHeartbeatRequest(rid, group, client_id)
    if opcode == Opcode.UNREGISTER_CONSUMER:
        r = _Reader(frame, "UNREGISTER_CONSUMER")
        group, client_id = r.str(), r.str()
        r.end()
        return UnregisterConsumerRequest(rid, group, client_id)
    if opcode == Opcode.GET_CONSUMER_LIST:
        r = _Reader(frame, "GET_CONSUMER_LIST")
        group = r.str()
        r.end()
        return ConsumerListRequest(rid, group)
    if opcode == Opcode.REGISTER_BROKER:
        r = _Reader(frame, "REGISTER_BROKER")
        cluster, name = r.str(), r.str()
        (broker_id,) = r.unpack(_I64)
        role, address, ha_address = r.str(), r.str(), r.str()
        (count,) = r.unpack(_U32)
        if count > len(frame):  # each topic takes at least 6 bytes: a cheap bound first
            raise r.fail(f"{count} topics in {len(frame)} bytes")
        topics = []
        for _ in range(count):
            topic = r.str()
            (queues,) = r.unpack(_I32)
            if queues < 0:
                raise r.fail(f"topic {topic!r} with {queues} queues")
            topics.append((topic, queues))
        r.end()
        if broker_id < 0:
            raise r.fail(f"broker id {broker_id}")
        registration = BrokerRegistration(
            cluster, name, broker_id, role, address, ha_address, tuple(topics)
        )
        return RegisterBrokerRequest(rid, registration)
    if opcode == Opcode.UNREGISTER_BROKER:
        r = _Reader(frame, "UNREGISTER_BROKER")
        cluster, name = r.str(), r.str()
        (broker_id,) = r.unpack(_I64)
        address = r.str()
        r.end()
        return UnregisterBrokerRequest(rid, cluster, name, broker_id, address)
    if opcode == Opcode.GET_ROUTE:
        r = _Reader(frame, "GET_ROUTE")
        topic = r.str()
        r.end()
        return RouteRequest(rid, topic)
    if opcode == Opcode.GET_CLUSTER:
        _Reader(frame, "GET_CLUSTER").end()
        return ClusterRequest(rid)
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
        code, next_offset, low, high, suggested, count = r.unpack(_PULL_HEAD)
        try:
            status = PullStatus(code)
        except ValueError:
            raise r.fail(f"unknown pull status {code}") from None
        records = tuple(r.blob() for _ in range(count))
        r.end()
        return PullResponse(request_id, status, next_offset, low, high, records, suggested)
    if opcode == Opcode.STATUS_OK:
        r = _Reader(frame, "STATUS_OK")
        return StatusResponse(request_id, BrokerStatus.from_json(r.json_object()))
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
    return _decode_cluster_response(frame, opcode, request_id)


def _decode_cluster_response(
    frame: bytes | bytearray | memoryview, opcode: int, rid: int
) -> Response:
    if opcode == Opcode.COMMIT_OFFSET_OK:
        _Reader(frame, "COMMIT_OFFSET_OK").end()
        return CommitOffsetResponse(rid)
    if opcode == Opcode.QUERY_OFFSET_OK:
        r = _Reader(frame, "QUERY_OFFSET_OK")
        (offset,) = r.unpack(_I64)
        r.end()
        return QueryOffsetResponse(rid, offset)
    if opcode == Opcode.SYNC_METADATA_OK:
        r = _Reader(frame, "SYNC_METADATA_OK")
        document = r.json_object()
        try:
            return MetadataResponse(rid, BrokerMetadata.from_json(document))
        except ValueError as exc:
            raise r.fail(str(exc)) from None
    if opcode == Opcode.CONSUMER_HEARTBEAT_OK:
        _Reader(frame, "CONSUMER_HEARTBEAT_OK").end()
        return ConsumerHeartbeatResponse(rid)
    if opcode == Opcode.UNREGISTER_CONSUMER_OK:
        _Reader(frame, "UNREGISTER_CONSUMER_OK").end()
        return UnregisterConsumerResponse(rid)
    if opcode == Opcode.GET_CONSUMER_LIST_OK:
        r = _Reader(frame, "GET_CONSUMER_LIST_OK")
        (count,) = r.unpack(_U16)
        client_ids = tuple(r.str() for _ in range(count))
        r.end()
        return ConsumerListResponse(rid, client_ids)
    if opcode == Opcode.REGISTER_BROKER_OK:
        r = _Reader(frame, "REGISTER_BROKER_OK")
        master, master_ha = r.str(), r.str()
        r.end()
        return RegisterBrokerResponse(rid, master or None, master_ha or None)
    if opcode == Opcode.UNREGISTER_OK:
        _Reader(frame, "UNREGISTER_OK").end()
        return UnregisterBrokerResponse(rid)
    if opcode == Opcode.GET_ROUTE_OK:
        r = _Reader(frame, "GET_ROUTE_OK")
        topic = r.str()
        (count,) = r.unpack(_U16)
        brokers = []
        for _ in range(count):
            name = r.str()
            (queues,) = r.unpack(_I32)
            (members,) = r.unpack(_U16)
            addresses = []
            for _ in range(members):
                (broker_id,) = r.unpack(_I64)
                addresses.append((broker_id, r.str()))
            brokers.append(RouteBroker(name, queues, tuple(addresses)))
        r.end()
        return RouteResponse(rid, TopicRoute(topic, tuple(brokers)))
    if opcode == Opcode.GET_CLUSTER_OK:
        r = _Reader(frame, "GET_CLUSTER_OK")
        document = r.json_object()
        try:
            return ClusterResponse(rid, ClusterInfo.from_json(document))
        except ValueError as exc:
            raise r.fail(str(exc)) from None
    raise CorruptedFrameError(f"malformed frame: unknown response opcode 0x{opcode:02X}")
