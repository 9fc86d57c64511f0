"""The broker port's pipeline codecs: frames to message objects and back."""

from __future__ import annotations

import logging
from typing import Any

from handlers import EncoderError, LengthFieldBasedFrameDecoder, LengthFieldPrepender
from hanet.channel import ChannelDuplexHandler, ChannelHandler, HandlerContext, WriteFuture

from ._codec import decode_request, decode_response, encode_request, encode_response
from ._messages import LENGTH_FIELD, ErrorCode, ErrorResponse, Request, Response

__all__ = ["BrokerClientCodec", "BrokerServerCodec", "broker_frame_codec"]

log = logging.getLogger("hanet.protocol")

_MAX_REASON = 512  # characters of an encoding failure sent back in an ERROR answer


class BrokerServerCodec(ChannelDuplexHandler):
    """Server side: frames in -> request objects; response objects out -> frames.

    Sits after a ``LengthFieldBasedFrameDecoder(max, 0, 4, 0, 4)`` and before a
    ``LengthFieldPrepender(4)``. A malformed frame raises :class:`CorruptedFrameError` into
    the pipeline (``exception_caught``). An answer that does not encode (a field too long or
    out of range) is replaced by an ERROR answer (SYSTEM_ERROR and the reason) to the same
    request, logged as a warning: the client is answered, never left to its timeout.
    Stateless and sharable.
    """

    sharable = True

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if isinstance(msg, bytes | bytearray | memoryview):
            ctx.fire_channel_read(decode_request(msg))
        else:
            ctx.fire_channel_read(msg)

    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        if isinstance(msg, Response):
            try:
                frame = encode_response(msg)
            except EncoderError as exc:
                reason = f"cannot encode the {type(msg).__name__}: {exc}"[:_MAX_REASON]
                log.warning("request %d: %s; answering ERROR instead", msg.request_id, reason)
                # Raises (fails the write) only if the request id itself does not fit.
                frame = encode_response(
                    ErrorResponse(msg.request_id, ErrorCode.SYSTEM_ERROR, reason)
                )
            ctx.write(frame, future)
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
        if isinstance(msg, Request):
            ctx.write(encode_request(msg), future)
        else:
            ctx.write(msg, future)


def broker_frame_codec(
    max_frame_length: int, codec: BrokerServerCodec | BrokerClientCodec
) -> list[tuple[str, ChannelHandler]]:
    """The named handlers of a broker port pipeline, in order, for either side.

    ``frame-decoder`` (u32 length prefix, stripped; a frame over ``max_frame_length`` closes the
    connection), ``frame-encoder`` (adds the prefix) and ``codec``.
    """
    return [
        (
            "frame-decoder",
            LengthFieldBasedFrameDecoder(max_frame_length, 0, LENGTH_FIELD, 0, LENGTH_FIELD),
        ),
        ("frame-encoder", LengthFieldPrepender(LENGTH_FIELD)),
        ("codec", codec),
    ]
