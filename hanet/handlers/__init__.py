"""Reusable handlers with Netty's semantics: frame codecs, codec base classes, string codecs,
idle detection, timeouts, logging.

Every handler is a synchronous, sans-IO callback object driven by a ``hanet`` pipeline; test
them with :class:`hanet.testing.EmbeddedChannel`.
"""

from ._byte_to_message import ByteCursor, ByteToMessageDecoder
from ._delimiter import DelimiterBasedFrameDecoder, Delimiters
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
from ._line_based import LineBasedFrameDecoder
from ._logging import LoggingHandler, hexdump
from ._message_to_byte import ByteToMessageCodec, MessageToByteEncoder
from ._message_to_message import (
    MessageToMessageCodec,
    MessageToMessageDecoder,
    MessageToMessageEncoder,
)
from ._simple import SimpleChannelInboundHandler
from ._string import StringDecoder, StringEncoder
from ._timeout import ReadTimeoutHandler, WriteTimeoutHandler

__all__ = [
    "ByteCursor",
    "ByteToMessageCodec",
    "ByteToMessageDecoder",
    "CorruptedFrameError",
    "DecoderError",
    "DelimiterBasedFrameDecoder",
    "Delimiters",
    "EncoderError",
    "FixedLengthFrameDecoder",
    "IdleState",
    "IdleStateEvent",
    "IdleStateHandler",
    "LengthFieldBasedFrameDecoder",
    "LengthFieldPrepender",
    "LineBasedFrameDecoder",
    "LoggingHandler",
    "MessageToByteEncoder",
    "MessageToMessageCodec",
    "MessageToMessageDecoder",
    "MessageToMessageEncoder",
    "ReadTimeoutError",
    "ReadTimeoutHandler",
    "SimpleChannelInboundHandler",
    "StringDecoder",
    "StringEncoder",
    "TooLongFrameError",
    "WriteTimeoutError",
    "WriteTimeoutHandler",
    "hexdump",
]
