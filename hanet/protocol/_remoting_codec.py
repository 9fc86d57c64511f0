"""The remoting protocol's pipeline codec: frames to :class:`RemotingCommand` and back.

RocketMQ's own remoting server is this Netty pipeline: a length-field frame decoder, the
command decoder and encoder, an idle handler, the connection manager and the dispatch. Here
the frame decoder and the command decoder are one stage (one handler a read passes, not two):

    frame-decoder  RemotingFrameDecoder  bytes -> RemotingCommand (LengthFieldBasedFrameDecoder
                                         (16 MiB, 0, 4, 0, 4)'s frames, each decoded)
    codec          RemotingEncoder       RemotingCommand -> bytes
    ...            the side's own handlers (RemotingDispatcher on a server)

:class:`RemotingCodec` is both directions of a frame in one handler, for a pipeline whose own
frame decoder passes it frames.
"""

from __future__ import annotations

import logging
from typing import Any

from hanet.channel import (
    ChannelDuplexHandler,
    ChannelHandler,
    ChannelOutboundHandler,
    HandlerContext,
    WriteFuture,
)
from hanet.handlers import ByteCursor, EncoderError, LengthFieldBasedFrameDecoder

from ._codes import ResponseCode
from ._remoting import (
    MAX_FRAME_LENGTH,
    RemotingCommand,
    RemotingCommandError,
    decode_command,
    encode_header,
)

__all__ = ["RemotingCodec", "RemotingEncoder", "RemotingFrameDecoder", "remoting_pipeline"]

log = logging.getLogger("hanet.protocol")

_MAX_REASON = 512  # characters of an encoding failure sent back in a SYSTEM_ERROR answer


class RemotingFrameDecoder(LengthFieldBasedFrameDecoder):
    """Bytes in -> :class:`RemotingCommand`: ``LengthFieldBasedFrameDecoder(max, 0, 4, 0, 4)``
    and :class:`RemotingCodec`'s decoding in one handler.

    Each frame the length-field decoder cuts (its bounds and errors: a frame over
    ``max_frame_length`` raises :class:`~hanet.handlers.TooLongFrameError`) is decoded where it
    is cut, so a request passes one handler instead of two on its way to the dispatch. A frame
    that is not a command raises :class:`~hanet.protocol.RemotingCommandError` (the connection
    is closed with the reason logged): the commands of the read before it are delivered
    first, the frames after it in the same read are dropped with the connection.
    """

    def __init__(self, max_frame_length: int = MAX_FRAME_LENGTH) -> None:
        super().__init__(max_frame_length, 0, 4, 0, 4)

    def decode(self, ctx: HandlerContext, buf: ByteCursor, out: list[Any]) -> None:
        start = len(out)
        try:
            super().decode(ctx, buf, out)
        finally:  # (also the frames cut before a too long one: delivered as commands)
            for i in range(start, len(out)):
                try:
                    out[i] = decode_command(out[i])
                except RemotingCommandError:
                    del out[i:]
                    raise


class RemotingEncoder(ChannelOutboundHandler):
    """Commands out -> frames (:class:`RemotingCodec`'s outbound half, after a
    :class:`RemotingFrameDecoder`). An answer that does not encode (a field out of range, a
    frame over 16 MiB) is replaced by a SYSTEM_ERROR answer with the reason, so the requester
    is answered rather than left to its timeout; a request that does not encode fails its
    write. A command's body is written as its own buffer, not copied into the header's. Any
    other message passes on. Stateless and sharable.
    """

    sharable = True

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


class RemotingCodec(RemotingEncoder, ChannelDuplexHandler):
    """Frames in -> :class:`RemotingCommand`; commands out -> frames.

    Sits after a ``LengthFieldBasedFrameDecoder(max, 0, 4, 0, 4)``. A frame that does not
    decode raises :class:`~hanet.protocol.RemotingCommandError` into the pipeline (the
    connection is closed with the reason logged). Writes as :class:`RemotingEncoder`.
    Stateless and sharable.
    """

    sharable = True

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if isinstance(msg, bytes | bytearray | memoryview):
            ctx.fire_channel_read(decode_command(msg))
        else:
            ctx.fire_channel_read(msg)


def remoting_pipeline(
    max_frame_length: int = MAX_FRAME_LENGTH,
) -> list[tuple[str, ChannelHandler]]:
    """The named handlers that turn a connection into remoting commands, in order.

    ``frame-decoder`` (:class:`RemotingFrameDecoder`: a frame over ``max_frame_length`` or
    one that is not a command closes the connection) and ``codec`` (:class:`RemotingEncoder`).
    """
    return [
        ("frame-decoder", RemotingFrameDecoder(max_frame_length)),
        ("codec", RemotingEncoder()),
    ]
