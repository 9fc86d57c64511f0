"""One broker port connection's state (:class:`BrokerConnection`): the peer, the sends
waiting for their answers (answered in order by one task), back-pressure, and the consumers
heard on it."""

from __future__ import annotations

import logging
import socket
from collections import deque
from typing import TYPE_CHECKING, Any

import attrs
import trio

from hanet.channel import ChannelInboundHandler, HandlerContext, StreamChannel, format_address
from hanet.handlers import DecoderError
from hanet.protocol import RemotingCommand, RequestCode
from hanet.store import PutResult, PutStatus

if TYPE_CHECKING:
    from ._port import BrokerPort

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "LOCALHOST",
    "BrokerConnection",
    "WaitingSend",
    "connection_of",
    "packed_host",
]

_SEND_CODES = frozenset(
    {RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE}
)

log = logging.getLogger("hanet.broker")

DEFAULT_MAX_IN_FLIGHT = 1024
"""Puts of one connection waiting for their answer before the broker stops reading it."""

LOCALHOST = (b"\x7f\x00\x00\x01", 0)


def packed_host(address: object) -> tuple[bytes, int]:
    """A peer address as the store's born host (packed IPv4/IPv6 address, port)."""
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = address[0], address[1]
        for family in (socket.AF_INET, socket.AF_INET6):
            try:
                return socket.inet_pton(family, str(host)), int(port)
            except OSError:
                continue
    return LOCALHOST


@attrs.define
class WaitingSend:
    """A send stored and waiting for its answer (SYNC_FLUSH / SYNC_MASTER)."""

    request: RemotingCommand
    results: list[PutResult]
    queue_id: int
    end_offset: int
    stored_at: float


class BrokerConnection(ChannelInboundHandler):
    """One broker port connection's state: the peer, the sends waiting for their answers
    (answered in order by one task), back-pressure, and the consumers heard on it (they
    leave their groups when it closes)."""

    def __init__(self, port: BrokerPort, channel: StreamChannel) -> None:
        self.port = port
        self.channel = channel
        peer = channel.remote_address
        self.peer = format_address(peer) if peer else str(channel)
        self.born = packed_host(peer)
        self.waiting: deque[WaitingSend] = deque()
        self.in_flight = 0
        self._settling = False
        self._paused = False
        self._requests = 0
        self.pending_sends: list[Any] = []
        """Sends of the current read admitted and not stored yet (the port's ``Sends``)."""
        self.clock: trio.abc.Clock | None = None
        """The trio run's clock once a send asked for it (``clock.current_time()`` is
        ``trio.current_time()`` with one call, not four)."""

    def channel_active(self, ctx: HandlerContext) -> None:
        log.info("client %s connected", self.peer)
        self.port.backend.connection_event("opened")
        ctx.fire_channel_active()

    def channel_inactive(self, ctx: HandlerContext) -> None:
        reason = self.channel.close_reason or "closed"
        log.info("client %s closed (%s)", self.peer, reason)
        if self.pending_sends:  # a read cut short: what it admitted is stored all the same
            self.port.sends.flush_pending(self)
        self.port.backend.connection_event(_event_of(reason))
        self.port.connection_closed(self)
        ctx.fire_channel_inactive()

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        self._requests += 1
        if self.pending_sends and getattr(msg, "code", None) not in _SEND_CODES:
            self.port.sends.flush_pending(self)  # the sends before it are stored first
        ctx.fire_channel_read(msg)

    def channel_read_complete(self, ctx: HandlerContext) -> None:
        if self.pending_sends:
            self.port.sends.flush_pending(self)
        ctx.flush()
        ctx.fire_channel_read_complete()

    def channel_writability_changed(self, ctx: HandlerContext) -> None:
        self.update_reading()
        ctx.fire_channel_writability_changed()

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        if self.pending_sends:  # the sends of the read before the failure: stored, answered
            self.port.sends.flush_pending(self)
            ctx.flush()
        if isinstance(exc, DecoderError):
            hint = ""
            if self._requests == 0:
                hint = " (not a remoting request: an HA slave pointed at the broker port?)"
            log.warning("client %s: closing: %s%s", self.peer, exc, hint)
            ctx.close(f"malformed frame: {exc}")
        else:
            log.error("client %s: closing after an internal error: %r", self.peer, exc)
            ctx.close(f"{type(exc).__name__}: {exc}")

    def update_reading(self) -> None:
        """Pause reading while too many sends wait or the client does not read its answers."""
        channel = self.channel
        if not channel.is_open:
            return
        waiting = len(self.waiting) + self.in_flight
        pause = waiting >= self.port.backend.max_in_flight or not channel.is_writable
        if pause != self._paused:
            self._paused = pause
            channel.auto_read = not pause

    def wait_for(self, ctx: HandlerContext, waiting: WaitingSend) -> None:
        """Queue a stored send for its answer after :meth:`BrokerBackend.settle`."""
        self.waiting.append(waiting)
        self.update_reading()
        if not self._settling:
            self._settling = True
            ctx.spawn(self._settle_all, ctx)

    async def _settle_all(self, ctx: HandlerContext) -> None:
        backend = self.port.backend
        waiting = self.waiting
        try:
            while waiting:
                head = waiting[0]
                status = await backend.settle(head.end_offset, head.stored_at)
                waiting.popleft()
                self._answer(ctx, head, status)
                settled = backend.settled_offset()
                while waiting and waiting[0].end_offset <= settled:
                    self._answer(ctx, waiting.popleft(), PutStatus.PUT_OK)
                ctx.flush()
                self.update_reading()
        finally:
            self._settling = False

    def _answer(self, ctx: HandlerContext, done: WaitingSend, status: PutStatus) -> None:
        self.port.answer_send(
            ctx, done.request, done.results, done.queue_id, status, done.stored_at
        )


def connection_of(ctx: HandlerContext) -> BrokerConnection:
    prev = ctx.prev  # the dispatcher's context: the connection handler comes right before it
    if prev is not None and type(prev.handler) is BrokerConnection:
        return prev.handler
    handler = ctx.pipeline.get("connection")
    if not isinstance(handler, BrokerConnection):
        raise RuntimeError("the broker port's pipeline has no connection handler")
    return handler


def _event_of(reason: str) -> str:
    """A short, bounded label for why a connection closed (metrics)."""
    lowered = reason.lower()
    for word in ("peer closed", "malformed", "decoder", "corrupt", "too long", "timeout", "lost"):
        if word in lowered:
            return "closed: " + word
    return "closed: other"
