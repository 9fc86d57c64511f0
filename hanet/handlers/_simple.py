"""SimpleChannelInboundHandler: handle the inbound messages of one type, pass the rest on."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from hanet.channel import ChannelInboundHandler, HandlerContext

from ._matcher import MessageTypes, message_types

__all__ = ["SimpleChannelInboundHandler"]

I = TypeVar("I")  # noqa: E741 - Netty's name for the handled message type


class SimpleChannelInboundHandler(ChannelInboundHandler, Generic[I]):
    """Netty's ``SimpleChannelInboundHandler<I>``: :meth:`channel_read0` receives each inbound
    message of the accepted type; any other message is passed on to the next handler.

    The accepted type is the class's type argument (``class Chat(
    SimpleChannelInboundHandler[str])``), or ``inbound_type``, or what
    :meth:`accept_inbound_message` says. A handled message is consumed: it is not passed on
    (Netty also releases it; hanet's messages need no release, so there is no ``auto_release``).
    An exception in ``channel_read0`` goes to this handler's ``exception_caught``.
    """

    def __init__(self, inbound_type: MessageTypes | None = None) -> None:
        self._inbound_types: MessageTypes = (
            inbound_type
            if inbound_type is not None
            else message_types(type(self), SimpleChannelInboundHandler)
        )

    def accept_inbound_message(self, msg: object) -> bool:
        """Whether :meth:`channel_read0` handles ``msg`` (else it is passed on)."""
        return isinstance(msg, self._inbound_types)

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if self.accept_inbound_message(msg):
            self.channel_read0(ctx, msg)
        else:
            ctx.fire_channel_read(msg)

    def channel_read0(self, ctx: HandlerContext, msg: I) -> None:
        """Handle one message of the accepted type."""
        raise NotImplementedError
