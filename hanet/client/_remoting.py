"""The client side of the remoting protocol: RocketMQ's ``invokeSync`` / ``invokeOneway``.

:class:`RemotingConnection` is one connection to a remoting server (a broker port, a name
server, a RocketMQ broker or name server). Requests are pipelined: each gets the next
``opaque`` and its answer is matched by it, in any order. Requests the server sends this way
(RocketMQ's ``NOTIFY_CONSUMER_IDS_CHANGED``, say) go to the ``on_request`` callback.

With :class:`~hanet.protocol.Credentials` (``connect(credentials=...)``, or every connection
opened inside ``with signing(credentials):`` and the tasks started there) each request is
signed as RocketMQ's ``AclClientRPCHook`` signs it, for a broker or name server with ACL on.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import math
import ssl
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from typing import Any, Self

import attrs
import trio

from hanet.boot import Connector, run_channel, tcp_connector
from hanet.channel import ChannelInboundHandler, HandlerContext, StreamChannel
from hanet.errors import HanetError
from hanet.handlers import DecoderError, EncoderError
from hanet.protocol import (
    FLAG_ONEWAY,
    MAX_FRAME_LENGTH,
    Credentials,
    HanetRequestCode,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    remoting_pipeline,
    sign_request,
)

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "RemotingConnection",
    "RemotingConnectionError",
    "RemotingError",
    "RemotingProtocolError",
    "RemotingResponseError",
    "RemotingTimeoutError",
    "ServerRequestHandler",
    "signing",
]

log = logging.getLogger("hanet.client")

DEFAULT_MAX_IN_FLIGHT = 4096

ServerRequestHandler = Callable[[RemotingCommand], RemotingCommand | None]
"""Takes a request the server sent; returns its answer (ignored for a oneway request)."""


_CREDENTIALS: contextvars.ContextVar[Credentials | None] = contextvars.ContextVar(
    "hanet_client_credentials", default=None
)


@contextmanager
def signing(credentials: Credentials | None) -> Iterator[None]:
    """Sign the requests of every :class:`RemotingConnection` opened in this block, and in
    the tasks started from it, with ``credentials`` (None: unsigned). How hanet's verbs sign
    whatever clients they open (broker, name server, consumer)."""
    token = _CREDENTIALS.set(credentials)
    try:
        yield
    finally:
        _CREDENTIALS.reset(token)


class RemotingError(HanetError):
    """Base of the errors a remoting connection raises."""


class RemotingConnectionError(RemotingError, ConnectionError):
    """Could not connect, or the connection closed before the answer came."""


class RemotingTimeoutError(RemotingError, TimeoutError):
    """No answer within the request timeout (the request may still take effect)."""


class RemotingProtocolError(RemotingError):
    """The server sent a frame that is not a remoting command; the connection is closed."""


class RemotingResponseError(RemotingError):
    """An answer whose code says the request failed.

    Attributes:
        code: the answer's response code (an int; a :class:`~hanet.protocol.ResponseCode`
            when RocketMQ knows it).
        remark: the server's reason.
        response: the whole answer.
    """

    def __init__(self, response: RemotingCommand, what: str = "request") -> None:
        code = response.code
        try:
            name = ResponseCode(code).name
        except ValueError:
            name = str(code)
        text = f"{what} failed: {name}"
        if response.remark:
            text += f": {response.remark.strip()}"
        super().__init__(text)
        self.code = code
        self.remark = response.remark
        self.response = response


class _Pending:
    __slots__ = ("error", "event", "response")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.response: RemotingCommand | None = None
        self.error: RemotingError | None = None


class _Router(ChannelInboundHandler):
    """Hands each answer to the request waiting for its opaque; fails them all on close."""

    def __init__(self, on_request: ServerRequestHandler | None) -> None:
        self.pending: dict[int, _Pending] = {}
        self.closed_error: RemotingError | None = None
        self.answers = 0
        self.on_request = on_request

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        cmd: RemotingCommand = msg
        if not cmd.is_response:
            answer = None
            if self.on_request is not None:
                try:
                    answer = self.on_request(cmd)
                except Exception:  # a bug of the callback's: log, keep the connection
                    log.exception("serving the server's %s failed", cmd.describe())
                    answer = cmd.response(ResponseCode.SYSTEM_ERROR, "client failed")
            elif not cmd.is_oneway:
                answer = cmd.response(
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                    f" request type {cmd.code} not supported",
                )
            if answer is not None and not cmd.is_oneway:
                ctx.write_and_flush(answer)
            return
        self.answers += 1
        pending = self.pending.pop(cmd.opaque, None)
        if pending is None:
            log.debug("answer to request %d that no one waits for (timed out)", cmd.opaque)
            return
        pending.response = cmd
        pending.event.set()

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        if isinstance(exc, DecoderError):
            self.closed_error = RemotingProtocolError(f"malformed frame from the server: {exc}")
        ctx.close(f"{type(exc).__name__}: {exc}")

    def channel_inactive(self, ctx: HandlerContext) -> None:
        error = self.closed_error
        if error is None:
            reason = ctx.channel.close_reason or "closed"
            error = self.closed_error = RemotingConnectionError(f"connection closed: {reason}")
        for pending in self.pending.values():
            pending.error = error
            pending.event.set()
        self.pending.clear()
        ctx.fire_channel_inactive()


class RemotingConnection:
    """One connection speaking RocketMQ's remoting protocol. Open it with :meth:`connect`.

    Safe to share between tasks of one trio run: requests are pipelined, each matched to its
    answer by ``opaque``. At most ``max_in_flight`` requests wait for answers at once; more
    callers wait for a slot (back-pressure).
    """

    def __init__(
        self,
        channel: StreamChannel,
        router: _Router,
        address: tuple[str, int],
        *,
        request_timeout: float | None,
        max_in_flight: int,
        credentials: Credentials | None = None,
    ) -> None:
        self._channel = channel
        self.credentials = credentials
        """Signs every request (None: unsigned)."""
        self._router = router
        self.address = address
        self.request_timeout = request_timeout
        self._slots = trio.Semaphore(max_in_flight)
        self._ids = itertools.count(1)

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        connect_timeout: float = 10.0,
        request_timeout: float | None = 30.0,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_frame_length: int = MAX_FRAME_LENGTH,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        on_request: ServerRequestHandler | None = None,
        credentials: Credentials | None = None,
        connector: Connector | None = None,
    ) -> AsyncIterator[Self]:
        """Connect to ``host:port``; the connection closes when the block exits.

        An exception raised in the block propagates as it is (not in an exception group).

        Args:
            connect_timeout: seconds to connect before :class:`RemotingConnectionError`.
            request_timeout: seconds each request may wait for its answer (None: forever).
            max_in_flight: requests awaiting an answer at once.
            max_frame_length: largest frame accepted from the server.
            tls: talk TLS with this client context.
            server_hostname: the name to check in the server's certificate (default ``host``).
            on_request: serves requests the server sends (None: answered
                REQUEST_CODE_NOT_SUPPORTED, oneways dropped). Called in the connection's
                reader: it must not block.
            credentials: sign every request with these (default: those of the enclosing
                :func:`signing` block, if any).
            connector: opens the stream instead of TCP to ``host:port`` (``tls`` unused): a
                stream of one's own, e.g. a memory stream in a test.

        Raises:
            RemotingConnectionError: the connection could not be made.
        """
        try:
            with trio.fail_after(connect_timeout):
                if connector is None:
                    connector = tcp_connector(host, port, tls=tls, server_hostname=server_hostname)
                stream = await connector()
        except (OSError, trio.TooSlowError) as exc:
            detail = "timed out" if isinstance(exc, trio.TooSlowError) else str(exc)
            raise RemotingConnectionError(f"cannot connect to {host}:{port}: {detail}") from exc
        router = _Router(on_request)

        def initialize(channel: StreamChannel) -> None:
            pipeline = channel.pipeline
            for name, handler in remoting_pipeline(max_frame_length):
                pipeline.add_last(handler, name)
            pipeline.add_last(router, "router")

        error: BaseException | None = None
        async with trio.open_nursery() as nursery:
            channel: StreamChannel = await nursery.start(partial(run_channel, stream, initialize))
            client = cls(
                channel,
                router,
                (host, port),
                request_timeout=request_timeout,
                max_in_flight=max_in_flight,
                credentials=credentials or _CREDENTIALS.get(),
            )
            try:
                yield client
            except BaseException as exc:
                # Raised by the caller's block: re-raised as it is once the connection is
                # closed, not wrapped in the nursery's exception group.
                error = exc
            finally:
                channel.close_nowait("client closed")
        if error is not None:
            raise error

    @property
    def is_connected(self) -> bool:
        """False once the connection closed."""
        return self._channel.is_open

    @property
    def channel(self) -> StreamChannel:
        """The connection's channel."""
        return self._channel

    async def aclose(self) -> None:
        """Close the connection (requests in flight fail with RemotingConnectionError)."""
        await self._channel.close("client closed")

    async def invoke(
        self, request: RemotingCommand, *, within: float | None = None
    ) -> RemotingCommand:
        """Send ``request`` and return its answer, whatever its code (RocketMQ's
        ``invokeSync``). ``request``'s opaque is replaced by this connection's next one.

        Args:
            within: seconds to wait for the answer (default: the connection's
                ``request_timeout``).

        Raises:
            RemotingConnectionError: the connection closed before the answer.
            RemotingTimeoutError: no answer in time (the request may still take effect).
            RemotingProtocolError: the server sent a malformed frame.
            ValueError: the request does not encode (nothing was sent).
        """
        try:
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            await self._slots.acquire()
        try:
            return await self._request(request, within)
        finally:
            self._slots.release()

    async def invoke_checked(
        self, request: RemotingCommand, *, within: float | None = None, what: str = ""
    ) -> RemotingCommand:
        """:meth:`invoke`, raising :class:`RemotingResponseError` unless the answer is SUCCESS."""
        response = await self.invoke(request, within=within)
        if response.code != ResponseCode.SUCCESS:
            raise RemotingResponseError(response, what or _name(request.code))
        return response

    async def invoke_oneway(self, request: RemotingCommand) -> None:
        """Send ``request`` marked oneway; no answer is awaited (RocketMQ's ``invokeOneway``).

        Returns once the request is written to the channel (not when it was delivered).

        Raises:
            RemotingConnectionError: the connection is closed.
            ValueError: the request does not encode.
        """
        if self.credentials is not None:
            request = sign_request(request, self.credentials)
        oneway = attrs.evolve(
            request, opaque=next(self._ids) & 0x7FFFFFFF, flag=request.flag | FLAG_ONEWAY
        )
        if self._router.closed_error is not None:
            await trio.lowlevel.checkpoint()
            raise self._router.closed_error
        try:
            await self._channel.write_and_flush(oneway)
        except EncoderError as exc:
            raise ValueError(f"cannot encode the request: {exc}") from exc
        except HanetError as exc:
            raise self._router.closed_error or RemotingConnectionError(
                f"connection closed: {exc}"
            ) from exc

    async def _request(self, request: RemotingCommand, within: float | None) -> RemotingCommand:
        router = self._router
        if router.closed_error is not None:
            await trio.lowlevel.checkpoint()
            raise router.closed_error
        opaque = next(self._ids) & 0x7FFFFFFF
        pending = _Pending()
        router.pending[opaque] = pending
        if not self._channel.is_writable:
            try:
                await self._channel.wait_writable()
            except HanetError:
                router.pending.pop(opaque, None)
                error = router.closed_error or RemotingConnectionError("connection closed")
                raise error from None
        if self.credentials is not None:
            request = sign_request(request, self.credentials)
        future = self._channel.write_and_flush_nowait(request.with_opaque(opaque))
        if future.done() and future.exception() is not None:
            router.pending.pop(opaque, None)
            await trio.lowlevel.checkpoint()
            failure = future.exception()
            if isinstance(failure, EncoderError):
                raise ValueError(f"cannot encode the request: {failure}")
            reason = self._channel.close_reason or str(failure)
            error = router.closed_error or RemotingConnectionError(f"connection closed: {reason}")
            raise error from failure
        limit = self.request_timeout if within is None else within
        with trio.move_on_after(math.inf if limit is None else limit):
            await pending.event.wait()
        if not pending.event.is_set():
            router.pending.pop(opaque, None)
            raise RemotingTimeoutError(
                f"no answer to {_name(request.code)} within {limit:g} s from "
                f"{self.address[0]}:{self.address[1]}"
            )
        if pending.error is not None:
            raise pending.error
        response = pending.response
        assert response is not None
        return response


def _name(code: int) -> str:
    for codes in (RequestCode, HanetRequestCode):
        try:
            return codes(code).name
        except ValueError:
            continue
    return f"request {code}"
