"""The broker port's wire format, sans-IO: how producers and consumers talk to a broker.

- :mod:`~hanet.protocol._messages`: the frame layout, the request and response objects.
- :mod:`~hanet.protocol._codec`: :func:`encode_request` / :func:`decode_request` and the same
  for responses.
- :mod:`~hanet.protocol._status`: :class:`BrokerStatus`, the STATUS document, with its JSON.
- :mod:`~hanet.protocol._handlers`: :class:`BrokerServerCodec` and :class:`BrokerClientCodec`,
  the pipeline handlers both sides put behind a length-field frame decoder.

The broker (:mod:`hanet.broker`) and the client (:mod:`hanet.client`) both import this package
and nothing of each other.
"""

from ._codec import decode_request, decode_response, encode_request, encode_response
from ._handlers import BrokerClientCodec, BrokerServerCodec, broker_frame_codec
from ._messages import (
    AUTO_QUEUE,
    DEFAULT_MAX_FRAME_LENGTH,
    LENGTH_FIELD,
    MAX_PULL_MESSAGES,
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
    message_problem,
)
from ._status import BrokerStatus, DispatchError, DLedgerInfo, DLedgerPeer, MasterLink, SlaveInfo

__all__ = [
    "AUTO_QUEUE",
    "DEFAULT_MAX_FRAME_LENGTH",
    "LENGTH_FIELD",
    "MAX_PULL_MESSAGES",
    "MAX_PUT_BATCH",
    "PUT_STATUS_WIRE_ORDER",
    "BrokerClientCodec",
    "BrokerServerCodec",
    "BrokerStatus",
    "DLedgerInfo",
    "DLedgerPeer",
    "DispatchError",
    "ErrorCode",
    "ErrorResponse",
    "MasterLink",
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
    "SlaveInfo",
    "StatusRequest",
    "StatusResponse",
    "broker_frame_codec",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "message_problem",
]
