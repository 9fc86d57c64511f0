"""MessageToMessageDecoder, MessageToMessageEncoder, MessageToMessageCodec: one message in,
any number out, for the messages of one type (Netty's semantics)."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from hanet.channel import (
    ChannelDuplexHandler,
    ChannelInboundHandler,
    ChannelOutboundHandler,
    HandlerContext,
    WriteFuture,
    combine_futures,
)

from ._errors import DecoderError, EncoderError
from ._matcher import MessageTypes, message_types

__all__ = [
    "MessageToMessageCodec",
    "MessageToMessageDecoder",
    "MessageToMessageEncoder",
    "write_encoded",
]

I = TypeVar("I")  # noqa: E741 - Netty's name for the inbound message type
O = TypeVar("O")  # noqa: E741 - and for the outbound one


class MessageToMessageDecoder(ChannelInboundHandler, Generic[I]):
    """Decode each accepted inbound message into zero or more messages (Netty's
    ``MessageToMessageDecoder<I>``).

    The accepted type is the class's type argument (``class StringDecoder(
    MessageToMessageDecoder[bytes])`` accepts ``bytes``), or ``inbound_type`` when given, or
    whatever :meth:`accept_inbound_message` says; a message it does not accept is passed on
    untouched. What :meth:`decode` appended to ``out`` is fired on, one ``channel_read``
    each, even when decode raised; then the error goes to this handler's ``exception_caught``
    (by default passed on): a :class:`DecoderError` as it is, any other exception wrapped in
    one. With ``channel.auto_read`` off, a read batch in which decode ran without producing
    anything asks for one more read (non-sharable decoders only, as in Netty).
    """

    def __init__(self, inbound_type: MessageTypes | None = None) -> None:
        self._inbound_types: MessageTypes = (
            inbound_type
            if inbound_type is not None
            else message_types(type(self), MessageToMessageDecoder)
        )
        self._decode_called = False
        self._message_produced = False

    def accept_inbound_message(self, msg: object) -> bool:
        """Whether :meth:`decode` handles ``msg`` (else it is passed on)."""
        return isinstance(msg, self._inbound_types)

    def decode(self, ctx: HandlerContext, msg: I, out: list[Any]) -> None:
        """Append the messages ``msg`` decodes to (none is fine) to ``out``."""
        raise NotImplementedError

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        self._decode_called = True
        if not self.accept_inbound_message(msg):
            self._message_produced = True
            ctx.fire_channel_read(msg)
            return
        out: list[Any] = []
        try:
            self.decode(ctx, msg, out)
        except DecoderError:
            raise
        except Exception as exc:
            raise DecoderError(f"{type(self).__name__}.decode(): {exc!r}") from exc
        finally:
            if out:
                self._message_produced = True
                if len(out) == 1:
                    ctx.fire_channel_read(out[0])
                else:
                    ctx.fire_channel_reads(out)

    def channel_read_complete(self, ctx: HandlerContext) -> None:
        if not type(self).sharable:
            if self._decode_called and not self._message_produced and not ctx.channel.auto_read:
                ctx.read()
            self._decode_called = False
            self._message_produced = False
        ctx.fire_channel_read_complete()


def write_encoded(
    ctx: HandlerContext, out: list[Any], future: WriteFuture, encoder: object
) -> None:
    """Write an encoder's output for one message with that message's future.

    One message: written with the future itself. Several: each with a future of its own,
    combined into ``future`` (done when all are, failed with the first failure; Netty's
    ``PromiseCombiner``). None: the write fails with ``<Encoder> must produce at least one
    message.``, as in Netty.
    """
    if len(out) == 1:
        ctx.write(out[0], future)
    elif out:
        combine_futures([ctx.write(part) for part in out], future)
    else:
        raise EncoderError(f"{type(encoder).__name__} must produce at least one message.")


class MessageToMessageEncoder(ChannelOutboundHandler, Generic[O]):
    """Encode each accepted outbound message into one or more messages (Netty's
    ``MessageToMessageEncoder<I>``).

    The accepted type is found as for :class:`MessageToMessageDecoder` (``outbound_type`` or
    the class's type argument, or :meth:`accept_outbound_message`); anything else is passed on
    untouched with its future. An exception in :meth:`encode` fails the write's future with
    :class:`EncoderError` (an ``EncoderError`` as it is, anything else wrapped); nothing of the
    message is written then. Output: see :func:`write_encoded` (an empty output fails the
    write, as Netty's ``must produce at least one message``).
    """

    def __init__(self, outbound_type: MessageTypes | None = None) -> None:
        self._outbound_types: MessageTypes = (
            outbound_type
            if outbound_type is not None
            else message_types(type(self), MessageToMessageEncoder)
        )

    def accept_outbound_message(self, msg: object) -> bool:
        """Whether :meth:`encode` handles ``msg`` (else it is passed on)."""
        return isinstance(msg, self._outbound_types)

    def encode(self, ctx: HandlerContext, msg: O, out: list[Any]) -> None:
        """Append what ``msg`` encodes to (at least one message) to ``out``."""
        raise NotImplementedError

    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        if not self.accept_outbound_message(msg):
            ctx.write(msg, future)
            return
        out: list[Any] = []
        try:
            self.encode(ctx, msg, out)
        except EncoderError:
            raise
        except Exception as exc:
            raise EncoderError(f"{type(self).__name__}.encode(): {exc!r}") from exc
        write_encoded(ctx, out, future, self)


class MessageToMessageCodec(
    MessageToMessageDecoder[I], MessageToMessageEncoder[O], ChannelDuplexHandler, Generic[I, O]
):
    """A :class:`MessageToMessageDecoder` of ``I`` and a :class:`MessageToMessageEncoder` of
    ``O`` in one handler (Netty's ``MessageToMessageCodec<INBOUND_IN, OUTBOUND_IN>``):
    ``class JsonCodec(MessageToMessageCodec[bytes, dict])`` decodes bytes and encodes dicts;
    every other message passes through in either direction."""

    def __init__(
        self,
        inbound_type: MessageTypes | None = None,
        outbound_type: MessageTypes | None = None,
    ) -> None:
        MessageToMessageDecoder.__init__(
            self,
            inbound_type
            if inbound_type is not None
            else message_types(type(self), MessageToMessageCodec, 0),
        )
        MessageToMessageEncoder.__init__(
            self,
            outbound_type
            if outbound_type is not None
            else message_types(type(self), MessageToMessageCodec, 1),
        )
