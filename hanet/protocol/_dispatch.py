"""The server side of the remoting protocol: one dispatch table keyed by request code.

RocketMQ's ``NettyRemotingServer`` hands each request to the processor registered for its
code and writes back what the processor returns. :class:`RemotingDispatcher` does the same as a
pipeline handler, after :func:`~hanet.protocol.remoting_pipeline`'s handlers:

- a request whose code has a processor is handed to it; a returned command is the answer (not
  sent for a oneway request); ``None`` means the processor answers later itself (a put that
  waits for a slave, a long-polling pull) or that there is nothing to answer;
- a request with no processor is answered ``REQUEST_CODE_NOT_SUPPORTED`` (3) and the connection
  stays;
- a processor that raises :class:`~hanet.protocol.RemotingHeaderError` (a missing or malformed
  field) gets a ``SYSTEM_ERROR`` answer with the reason; any other exception is a bug of ours,
  logged with its traceback and answered ``SYSTEM_ERROR`` too, so one request cannot end a
  connection's other requests;
- a ``guard`` (the ACL) sees every request before its processor: an answer it returns is
  the request's answer and the processor is not called (a oneway request gets none);
- an answer (the peer answering a request this side sent) goes to ``on_response``;
- a frame that does not decode closes the connection, logged at WARNING with the peer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from hanet.channel import ChannelInboundHandler, HandlerContext, format_address
from hanet.handlers import DecoderError

from ._codes import ResponseCode
from ._remoting import FLAG_RESPONSE, RemotingCommand, RemotingHeaderError

__all__ = [
    "RemotingDispatcher",
    "RequestGuard",
    "RequestProcessor",
    "ResponseListener",
    "not_supported",
]

log = logging.getLogger("hanet.protocol")

RequestProcessor = Callable[[HandlerContext, RemotingCommand], RemotingCommand | None]
"""Serves one request: returns its answer, or None when it answers later (or never: oneway)."""

ResponseListener = Callable[[HandlerContext, RemotingCommand], None]
"""Takes an answer to a request this side sent on the connection."""

RequestGuard = Callable[[HandlerContext, RemotingCommand], RemotingCommand | None]
"""Sees a request before its processor: returns a refusal to answer instead, or None."""


def not_supported(request: RemotingCommand) -> RemotingCommand:
    """RocketMQ's answer to a request code the server has no processor for."""
    return request.response(
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"
    )


class RemotingDispatcher(ChannelInboundHandler):
    """Hands each request to the processor of its code and writes the answer back.

    Args:
        processors: request code -> processor. Shared, read-only: one table serves every
            connection of a port.
        port: the port's name in log lines ("the broker port", "the name server").
        on_response: takes answers to requests this side sent (None: they are logged at
            DEBUG and dropped).
        guard: checks each request before its processor (None: none; settable later).
    """

    sharable = True

    def __init__(
        self,
        processors: Mapping[int, RequestProcessor],
        *,
        port: str = "the broker port",
        on_response: ResponseListener | None = None,
        guard: RequestGuard | None = None,
    ) -> None:
        self.processors = processors
        self.port = port
        self.on_response = on_response
        self.guard = guard

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if not isinstance(msg, RemotingCommand):
            ctx.fire_channel_read(msg)
            return
        if msg.flag & FLAG_RESPONSE:  # msg.is_response, without the property's call
            if self.on_response is not None:
                self.on_response(ctx, msg)
            else:
                log.debug("%s: unexpected %s from %s", self.port, msg.describe(), _peer(ctx))
            return
        answer = self.serve(ctx, msg)
        if answer is not None and not msg.is_oneway:
            ctx.write_and_flush(answer)

    def serve(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand | None:
        """The answer to ``request`` (None: answered later, or nothing to answer)."""
        processor = self.processors.get(request.code)
        try:
            if self.guard is not None:
                refusal = self.guard(ctx, request)
                if refusal is not None:
                    return refusal
            if processor is None:
                log.debug("%s: request code %d not supported", self.port, request.code)
                return not_supported(request)
            return processor(ctx, request)
        except RemotingHeaderError as exc:
            log.info("%s: %s from %s: %s", self.port, request.describe(), _peer(ctx), exc)
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        except Exception as exc:  # a bug of ours: answer, log, keep the connection
            log.exception("%s: %s failed", self.port, request.describe())
            return request.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        if isinstance(exc, DecoderError):
            log.warning("%s: closing %s: %s", self.port, _peer(ctx), exc)
            ctx.close(f"malformed frame: {exc}")
        else:
            ctx.fire_exception_caught(exc)


def _peer(ctx: HandlerContext) -> str:
    return format_address(ctx.channel.remote_address)
