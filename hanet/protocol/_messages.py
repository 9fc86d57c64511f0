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
                    | i64 suggested_broker_id | u32 count
                    | count x blob record (RocketMQ commit log record bytes)
    STATUS    0x03  (empty)
    STATUS_OK 0x83  a UTF-8 JSON object (:class:`~hanet.protocol.BrokerStatus`)
    (0x04..0x09, 0x10..0x13 and their answers: consumer offsets, metadata sync, consumer
    group membership and the name server, in :mod:`hanet.protocol._cluster`)
    ERROR     0xFF  u16 code | str message [| str leader_address] (the request could not be
                    served; the leader's broker address follows with NOT_LEADER when known)

Put statuses are RocketMQ's ``PutMessageStatus`` in 5.x order (``PUT_OK`` = 0, ...,
``UNKNOWN_ERROR`` = 9); pull statuses are RocketMQ's ``GetMessageStatus`` names we use.

Bad input: a frame that does not decode (short, trailing bytes, bad UTF-8, an unknown opcode,
a count out of range) raises :class:`~handlers.CorruptedFrameError`; a frame over the maximum
length raises :class:`~handlers.TooLongFrameError` (the framing decoder). Either way the
connection closes with a logged reason; other connections are not affected.
"""

from __future__ import annotations

import enum

import attrs

from hanet.store import PutStatus, property_problem, topic_problem

from ._cluster import (
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
    RouteRequest,
    RouteResponse,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
    UnregisterConsumerRequest,
    UnregisterConsumerResponse,
)
from ._status import BrokerStatus

__all__ = [
    "AUTO_QUEUE",
    "DEFAULT_MAX_FRAME_LENGTH",
    "LENGTH_FIELD",
    "MAX_PULL_MESSAGES",
    "MAX_PUT_BATCH",
    "PUT_STATUS_WIRE_ORDER",
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
    "message_problem",
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
"""Bytes of the frame length prefix."""


class Opcode(enum.IntEnum):
    """Frame kinds; a response is its request's opcode | 0x80."""

    PUT = 0x01
    PULL = 0x02
    STATUS = 0x03
    COMMIT_OFFSET = 0x04
    QUERY_OFFSET = 0x05
    SYNC_METADATA = 0x06
    CONSUMER_HEARTBEAT = 0x07
    UNREGISTER_CONSUMER = 0x08
    GET_CONSUMER_LIST = 0x09
    REGISTER_BROKER = 0x10
    UNREGISTER_BROKER = 0x11
    GET_ROUTE = 0x12
    GET_CLUSTER = 0x13
    PUT_OK = 0x81
    PULL_OK = 0x82
    STATUS_OK = 0x83
    COMMIT_OFFSET_OK = 0x84
    QUERY_OFFSET_OK = 0x85
    SYNC_METADATA_OK = 0x86
    CONSUMER_HEARTBEAT_OK = 0x87
    UNREGISTER_CONSUMER_OK = 0x88
    GET_CONSUMER_LIST_OK = 0x89
    REGISTER_BROKER_OK = 0x90
    UNREGISTER_OK = 0x91
    GET_ROUTE_OK = 0x92
    GET_CLUSTER_OK = 0x93
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
    NO_MATCHED_LOGIC_QUEUE = 5
    """The topic exists but has no such queue (a queue id out of its range)."""
    TOPIC_NOT_EXIST = 6
    """No message of this topic was ever stored here (RocketMQ's TOPIC_NOT_EXIST)."""


class ErrorCode(enum.IntEnum):
    """Why a request got an ERROR response."""

    SYSTEM_ERROR = 1
    """The broker failed serving it (a corrupt record, a bug); the message says what."""
    NOT_AVAILABLE = 2
    """The broker is shutting down or not ready."""
    NOT_LEADER = 3
    """A DLedger follower or candidate: put to the leader (``leader_address`` when known;
    nothing was appended, retrying elsewhere is safe)."""
    LEADER_PENDING_FULL = 4
    """A DLedger leader with too many puts waiting for their quorum (nothing appended)."""
    WAIT_QUORUM_ACK_TIMEOUT = 5
    """A DLedger leader appended the messages but no quorum acknowledged them in time (or it
    lost leadership): the outcome is unknown, they may still be committed."""
    TOPIC_NOT_EXIST = 6
    """The name server knows no live broker holding the topic."""
    NOT_SUPPORTED = 7
    """This port does not serve the request (a name server request sent to a broker, or the
    reverse; RocketMQ's REQUEST_CODE_NOT_SUPPORTED)."""


# The wire value of each put status: RocketMQ 5.x's order, frozen here so that a change of
# the Python enum cannot shift the protocol.
PUT_STATUS_WIRE_ORDER: tuple[PutStatus, ...] = (
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


def message_problem(message: PutMessage, *, topic_characters: bool = True) -> str | None:
    """Why ``message`` may not be put whatever the broker's settings, or None.

    The topic (:func:`hanet.store.topic_problem`: 1 to
    :data:`~hanet.store.MAX_TOPIC_LENGTH` characters of ``[%|a-zA-Z0-9_-]``; with
    ``topic_characters=False`` only its length), the queue id (>= 0 or :data:`AUTO_QUEUE`),
    and tags, keys and properties (:func:`hanet.store.property_problem`: no ``\\x01`` /
    ``\\x02``, no empty name). The broker checks all of it and what depends on its settings
    (queue count, body and properties sizes); the client checks it before sending, but
    leaves the topic's characters to the broker (a MESSAGE_ILLEGAL answer). The reason is
    short whatever the message.
    """
    problem = topic_problem(message.topic, characters=topic_characters)
    if problem is not None:
        return problem
    if message.queue_id < AUTO_QUEUE:
        return f"bad queue id {message.queue_id}"
    if message.tags:
        problem = property_problem("TAGS", message.tags)
        if problem is not None:
            return problem
    if message.keys:
        problem = property_problem("KEYS", message.keys)
        if problem is not None:
            return problem
    for name, value in message.properties:
        problem = property_problem(name, value)
        if problem is not None:
            return problem
    return None


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


Request = (
    PutRequest
    | PullRequest
    | StatusRequest
    | CommitOffsetRequest
    | QueryOffsetRequest
    | MetadataRequest
    | ConsumerHeartbeatRequest
    | UnregisterConsumerRequest
    | ConsumerListRequest
    | RegisterBrokerRequest
    | UnregisterBrokerRequest
    | RouteRequest
    | ClusterRequest
)


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
    (``max_offset`` is the offset the next message will get). ``suggested_broker_id`` is the
    member of the broker name to pull from next (RocketMQ's ``suggestWhichBrokerId``: 0 the
    master, 1 and up a slave).
    """

    request_id: int
    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    records: tuple[bytes, ...] = ()
    suggested_broker_id: int = 0


@attrs.frozen
class StatusResponse:
    """STATUS_OK: the broker's status document."""

    request_id: int
    status: BrokerStatus


@attrs.frozen
class ErrorResponse:
    """ERROR: the request was well-formed but could not be served.

    ``leader_address``: with NOT_LEADER, the leader's broker port (``host:port``) when known.
    It is sent only when set, so frames without it (older brokers) still decode.
    """

    request_id: int
    code: ErrorCode
    message: str
    leader_address: str | None = None


Response = (
    PutResponse
    | PullResponse
    | StatusResponse
    | CommitOffsetResponse
    | QueryOffsetResponse
    | MetadataResponse
    | ConsumerHeartbeatResponse
    | UnregisterConsumerResponse
    | ConsumerListResponse
    | RegisterBrokerResponse
    | UnregisterBrokerResponse
    | RouteResponse
    | ClusterResponse
    | ErrorResponse
)
