"""The name server: a :class:`Registry` served on the broker port's framing.

Each connection's pipeline::

    LengthFieldBasedFrameDecoder(max_frame, 0, 4, 0, 4) -> LengthFieldPrepender(4)
      -> BrokerServerCodec -> the name server's request handler

REGISTER_BROKER, UNREGISTER_BROKER, GET_ROUTE and GET_CLUSTER are served; any other request of
the broker port protocol (PUT, PULL, STATUS, ...) answers ERROR ``NOT_SUPPORTED``, a refused
registration ERROR ``SYSTEM_ERROR`` with the reason, and the connection stays open. A frame that
does not decode (or is over ``max_frame_length``) closes its connection, with the reason
logged; other connections go on. A client that does not read its answers is not read either
until it does (the answers waiting stay bounded). Every ``scan_interval`` seconds (10) the
registrations not renewed for ``expire_after`` seconds (120) are dropped.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import trio

from handlers import DecoderError
from hanet.boot import AllowList, serve_listeners
from hanet.channel import ChannelInboundHandler, HandlerContext, StreamChannel, format_address
from hanet.protocol import (
    DEFAULT_MAX_FRAME_LENGTH,
    BrokerServerCodec,
    ClusterRequest,
    ClusterResponse,
    ErrorCode,
    ErrorResponse,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
    Request,
    Response,
    RouteRequest,
    RouteResponse,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
    broker_frame_codec,
)

from ._registry import DEFAULT_EXPIRE_AFTER, RegistrationError, Registry

__all__ = ["DEFAULT_PORT", "SCAN_INTERVAL", "NameServer"]

log = logging.getLogger("hanet.namesrv")

DEFAULT_PORT = 9876
"""The name server's port (RocketMQ's)."""

SCAN_INTERVAL = 10.0
"""Seconds between two scans for expired registrations (RocketMQ's)."""


class NameServer:
    """A name server: brokers register with it, clients look routes up (run it with
    :meth:`run`).

    Args:
        listen: ``(host, port)`` to serve (port 0: any free one).
        expire_after: seconds a registration lives without renewal.
        scan_interval: seconds between two scans for expired registrations.
        max_frame_length: largest request frame accepted.
        tls: serve TLS with this context (None: plain TCP).
        allow: accept connections from these networks only (None: everyone).
        clock: seconds since the epoch (default: the wall clock at :meth:`run`'s start moved
            on by trio's clock, so a test's virtual clock drives expiry).
    """

    def __init__(
        self,
        listen: tuple[str, int] = ("127.0.0.1", DEFAULT_PORT),
        *,
        expire_after: float = DEFAULT_EXPIRE_AFTER,
        scan_interval: float = SCAN_INTERVAL,
        max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
        tls: ssl.SSLContext | None = None,
        allow: AllowList | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if scan_interval <= 0:
            raise ValueError(f"scan_interval must be > 0, got {scan_interval}")
        self.listen = listen
        self.registry = Registry(expire_after=expire_after)
        """The live brokers (read it in-process; the server changes it)."""
        self.scan_interval = scan_interval
        self.max_frame_length = max_frame_length
        self.tls = tls
        self.allow = allow
        self._clock = clock
        self._epoch: float | None = None
        self.address: tuple[str, int] | None = None
        """Where :meth:`run` listens, once it started."""

    def now(self) -> float:
        """The time registrations are stamped with (seconds since the epoch)."""
        if self._clock is not None:
            return self._clock()
        if self._epoch is None:
            return time.time()
        return self._epoch + trio.current_time()

    async def run(
        self, *, task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until cancelled; reports the bound ``(host, port)``.

        Raises:
            OSError: the port cannot be bound.
        """
        host, port = self.listen
        listeners = await trio.open_tcp_listeners(port, host=host)
        self._epoch = time.time() - trio.current_time()
        name = listeners[0].socket.getsockname()
        self.address = (name[0], name[1])
        async with trio.open_nursery() as nursery:
            await nursery.start(
                partial(
                    serve_listeners,
                    self._initialize,
                    listeners,
                    tls=self.tls,
                    allow=self.allow,
                    name="name server",
                )
            )
            nursery.start_soon(self._scan)
            log.info(
                "name server on %s (registrations expire after %g s)",
                format_address(self.address),
                self.registry.expire_after,
            )
            task_status.started(self.address)

    async def _scan(self) -> None:
        while True:
            await trio.sleep(self.scan_interval)
            self.registry.expire(self.now())

    def _initialize(self, channel: StreamChannel) -> None:
        pipeline = channel.pipeline
        for name, handler in broker_frame_codec(self.max_frame_length, BrokerServerCodec()):
            pipeline.add_last(handler, name)
        pipeline.add_last(_RequestHandler(self, channel), "requests")

    def handle(self, request: Request) -> Response:
        """The answer to one request (what a connection writes back; usable in-process)."""
        rid = request.request_id
        registry = self.registry
        if isinstance(request, RegisterBrokerRequest):
            try:
                answer = registry.register(request.registration, self.now())
            except RegistrationError as exc:
                r = request.registration
                log.warning(
                    "registration of %r/%r/%d at %r refused: %s",
                    r.cluster,
                    r.broker_name,
                    r.broker_id,
                    r.broker_address,
                    exc,
                )
                return ErrorResponse(rid, ErrorCode.SYSTEM_ERROR, f"registration refused: {exc}")
            return RegisterBrokerResponse(rid, answer.master_address, answer.master_ha_address)
        if isinstance(request, UnregisterBrokerRequest):
            registry.unregister(
                request.cluster, request.broker_name, request.broker_id, request.broker_address
            )
            return UnregisterBrokerResponse(rid)
        if isinstance(request, RouteRequest):
            route = registry.route(request.topic)
            if route is None:
                message = f"no live broker holds topic {request.topic!r}"
                return ErrorResponse(rid, ErrorCode.TOPIC_NOT_EXIST, message)
            return RouteResponse(rid, route)
        if isinstance(request, ClusterRequest):
            return ClusterResponse(rid, registry.cluster())
        what = type(request).__name__.removesuffix("Request")
        message = f"a name server does not serve {what} requests"
        return ErrorResponse(rid, ErrorCode.NOT_SUPPORTED, message)


class _RequestHandler(ChannelInboundHandler):
    """One connection: each request answered at once, by id; a malformed frame closes it."""

    def __init__(self, server: NameServer, channel: StreamChannel) -> None:
        self.server = server
        peer = channel.remote_address
        self.peer = format_address(peer) if peer else str(channel)
        self.channel = channel
        self._requests = 0

    def channel_active(self, ctx: HandlerContext) -> None:
        log.debug("client %s connected", self.peer)
        ctx.fire_channel_active()

    def channel_inactive(self, ctx: HandlerContext) -> None:
        log.debug("client %s closed (%s)", self.peer, self.channel.close_reason or "closed")
        ctx.fire_channel_inactive()

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        self._requests += 1
        ctx.write(self.server.handle(msg))

    def channel_read_complete(self, ctx: HandlerContext) -> None:
        ctx.flush()  # answers given while reading leave together
        ctx.fire_channel_read_complete()

    def channel_writability_changed(self, ctx: HandlerContext) -> None:
        # A client that sends requests without reading the answers: stop reading its
        # requests while the answers wait (the outbound buffer stays bounded).
        channel = self.channel
        if channel.is_open:
            channel.auto_read = channel.is_writable
        ctx.fire_channel_writability_changed()

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        if isinstance(exc, DecoderError):
            hint = ""
            if self._requests == 0:
                hint = " (not a broker port protocol client?)"
            log.warning("client %s: closing: %s%s", self.peer, exc, hint)
        else:
            log.error(
                "client %s: closing after an internal error: %r", self.peer, exc, exc_info=exc
            )
        ctx.close(f"{type(exc).__name__}: {exc}")
