"""MessageToByteEncoder and ByteToMessageCodec: messages of one type encoded into bytes
(Netty's semantics)."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from hanet.channel import ChannelOutboundHandler, HandlerContext, WriteFuture

from ._byte_to_message import ByteToMessageDecoder
from ._errors import EncoderError
from ._matcher import MessageTypes, message_types

__all__ = ["ByteToMessageCodec", "MessageToByteEncoder"]

I = TypeVar("I")  # noqa: E741 - Netty's name for the encoded message type


class _BytesEncoding(ChannelOutboundHandler, Generic[I]):
    """The encoding half both classes share: accepted messages are encoded into a fresh
    ``bytearray`` and written as ``bytes`` with their future; others pass on untouched."""

    _outbound_types: MessageTypes

    def accept_outbound_message(self, msg: object) -> bool:
        """Whether :meth:`encode` handles ``msg`` (else it is passed on)."""
        return isinstance(msg, self._outbound_types)

    def encode(self, ctx: HandlerContext, msg: I, out: bytearray) -> None:
        """Append the bytes of ``msg`` to ``out``."""
        raise NotImplementedError

    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        if not self.accept_outbound_message(msg):
            ctx.write(msg, future)
            return
        out = bytearray()
        try:
            self.encode(ctx, msg, out)
        except EncoderError:
            raise
        except Exception as exc:
            raise EncoderError(f"{type(self).__name__}.encode(): {exc!r}") from exc
        # An empty output is still written (Netty writes an empty buffer with the promise), so
        # the future completes with the flush like any other write.
        ctx.write(bytes(out), future)


class MessageToByteEncoder(_BytesEncoding[I]):
    """Encode each accepted outbound message into bytes (Netty's ``MessageToByteEncoder<I>``).

    The accepted type is the class's type argument (``class IntEncoder(
    MessageToByteEncoder[int])``), or ``outbound_type``, or what :meth:`accept_outbound_message`
    says; anything else is passed on untouched with its future. :meth:`encode` appends to a
    fresh ``bytearray``; its content is written as ``bytes`` with the message's future (also
    when empty: Netty writes an empty buffer, and the future completes with the flush). An
    exception in ``encode`` fails the write's future with :class:`EncoderError` (an
    ``EncoderError`` as it is, anything else wrapped) and writes nothing.
    """

    def __init__(self, outbound_type: MessageTypes | None = None) -> None:
        self._outbound_types: MessageTypes = (
            outbound_type
            if outbound_type is not None
            else message_types(type(self), MessageToByteEncoder)
        )


class ByteToMessageCodec(ByteToMessageDecoder, _BytesEncoding[I]):
    """A :class:`ByteToMessageDecoder` and a :class:`MessageToByteEncoder` of ``I`` in one
    handler (Netty's ``ByteToMessageCodec<I>``): implement ``decode(ctx, buf, out)`` as for the
    decoder and ``encode(ctx, msg, out: bytearray)`` as for the encoder. Like every byte
    decoder it keeps state per channel, so it may not be sharable.

    Raises:
        TypeError: if the class is marked ``sharable`` (Netty: ``IllegalStateException``).
    """

    def __init__(self, outbound_type: MessageTypes | None = None) -> None:
        if type(self).sharable:
            raise TypeError(f"{type(self).__name__}: a ByteToMessageCodec cannot be sharable")
        super().__init__()
        self._outbound_types: MessageTypes = (
            outbound_type
            if outbound_type is not None
            else message_types(type(self), ByteToMessageCodec)
        )
