"""The remoting protocol's pipeline codec: frames to :class:`RemotingCommand` and back.

RocketMQ's own remoting server is this Netty pipeline: a length-field frame decoder, the
command decoder and encoder, an idle handler, the connection manager and the dispatch. Here:

    frame-decoder  LengthFieldBasedFrameDecoder(16 MiB, 0, 4, 0, 4)
    codec          RemotingCodec      frame -> RemotingCommand; RemotingCommand -> bytes
    ...            the side's own handlers (RemotingDispatcher on a server)
"""

from __future__ import annotations

import logging
from typing import Any

from hanet.channel import ChannelDuplexHandler, ChannelHandler, HandlerContext, WriteFuture
from hanet.handlers import EncoderError, LengthFieldBasedFrameDecoder

from ._codes import ResponseCode
from ._remoting import MAX_FRAME_LENGTH, RemotingCommand, decode_command, encode_header

__all__ = ["RemotingCodec", "remoting_pipeline"]

log = logging.getLogger("hanet.protocol")

_MAX_REASON = 512  # characters of an encoding failure sent back in a SYSTEM_ERROR answer


class RemotingCodec(ChannelDuplexHandler):
    """Frames in -> :class:`RemotingCommand`; commands out -> frames.

    Sits after a ``LengthFieldBasedFrameDecoder(max, 0, 4, 0, 4)``. A frame that does not
    decode raises :class:`~hanet.protocol.RemotingCommandError` into the pipeline (the
    connection is closed with the reason logged). An answer that does not encode (a field out
    of range, a frame over 16 MiB) is replaced by a SYSTEM_ERROR answer with the reason, so the
    requester is answered rather than left to its timeout; a request that does not encode
    fails its write. A command's body is written as its own buffer, not copied into the header's.
    Stateless and sharable.
    """

    sharable = True

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if isinstance(msg, bytes | bytearray | memoryview):
            ctx.fire_channel_read(decode_command(msg))
        else:
            ctx.fire_channel_read(msg)

    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        if not isinstance(msg, RemotingCommand):
            ctx.write(msg, future)
            return
        try:
            head = encode_header(msg)
        except ValueError as exc:
            if not msg.is_response:
                raise EncoderError(f"cannot encode {msg.describe()}: {exc}") from exc
            reason = f"cannot encode the answer: {exc}"[:_MAX_REASON]
            log.warning("%s: %s; answering SYSTEM_ERROR instead", msg.describe(), reason)
            msg = RemotingCommand(
                ResponseCode.SYSTEM_ERROR,
                opaque=msg.opaque,
                flag=msg.flag,
                remark=reason,
                serialize_type=msg.serialize_type,
            )
            head = encode_header(msg)
        if len(msg.body):
            ctx.write(head)
            ctx.write(msg.body, future)
        else:
            ctx.write(head, future)


def remoting_pipeline(
    max_frame_length: int = MAX_FRAME_LENGTH,
) -> list[tuple[str, ChannelHandler]]:
    """The named handlers that turn a connection into remoting commands, in order.

    ``frame-decoder`` (a frame over ``max_frame_length`` closes the connection) and ``codec``.
    """
    return [
        ("frame-decoder", LengthFieldBasedFrameDecoder(max_frame_length, 0, 4, 0, 4)),
        ("codec", RemotingCodec()),
    ]
