"""Reusable handlers with Netty's semantics: frame codecs, idle detection, timeouts, logging.

Every handler is a synchronous, sans-IO callback object driven by a ``hanet`` pipeline; test
them with :class:`hanet.testing.EmbeddedChannel`.
"""

from ._byte_to_message import ByteCursor, ByteToMessageDecoder
from ._errors import (
    CorruptedFrameError,
    DecoderError,
    EncoderError,
    ReadTimeoutError,
    TooLongFrameError,
    WriteTimeoutError,
)
from ._fixed_length import FixedLengthFrameDecoder
from ._idle import IdleState, IdleStateEvent, IdleStateHandler
from ._length_field import LengthFieldBasedFrameDecoder, LengthFieldPrepender
from ._logging import LoggingHandler, hexdump
from ._timeout import ReadTimeoutHandler, WriteTimeoutHandler

__all__ = [
    "ByteCursor",
    "ByteToMessageDecoder",
    "CorruptedFrameError",
    "DecoderError",
    "EncoderError",
    "FixedLengthFrameDecoder",
    "IdleState",
    "IdleStateEvent",
    "IdleStateHandler",
    "LengthFieldBasedFrameDecoder",
    "LengthFieldPrepender",
    "LoggingHandler",
    "ReadTimeoutError",
    "ReadTimeoutHandler",
    "TooLongFrameError",
    "WriteTimeoutError",
    "WriteTimeoutHandler",
    "hexdump",
]
