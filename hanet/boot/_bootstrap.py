"""Bootstraps: serve connections, connect to a server, run a channel over any stream."""

from __future__ import annotations

import logging
import math
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import trio

from hanet.channel import ChannelConfig, StreamChannel, format_address

from ._security import AllowList, open_tls_stream, secure_stream

__all__ = [
    "ChannelInitializer",
    "Connector",
    "Server",
    "ServerStatistics",
    "connect",
    "run_channel",
    "serve",
    "tcp_connector",
]

log = logging.getLogger("hanet.bootstrap")

ChannelInitializer = Callable[[StreamChannel], None]
"""Builds a new channel's pipeline (adds its handlers); called before ``channel_active``."""

Connector = Callable[[], Awaitable[trio.abc.Stream]]
"""Opens a new stream to the peer (a TCP connection, a memory stream in tests, ...)."""


def tcp_connector(
    host: str, port: int, *, tls: ssl.SSLContext | None = None, server_hostname: str | None = None
) -> Connector:
    """A connector that opens a TCP connection to ``host:port``, with a TLS handshake when
    ``tls`` is given (:class:`~hanet.boot.TlsHandshakeError` when it fails)."""

    async def open_stream() -> trio.abc.Stream:
        if tls is not None:
            return await open_tls_stream(host, port, tls, server_hostname)
        return await trio.open_tcp_stream(host, port)

    return open_stream


async def run_channel(
    stream: trio.abc.Stream,
    initializer: ChannelInitializer,
    *,
    config: ChannelConfig | None = None,
    task_status: trio.TaskStatus[StreamChannel] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a channel over ``stream`` until it closes, reporting the channel when it is active.

    An exception from the initializer closes the stream and propagates.
    """
    channel = StreamChannel(stream, config)
    try:
        initializer(channel)
    except BaseException:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(stream)
        raise
    started = False

    def report() -> None:
        nonlocal started
        started = True
        task_status.started(channel)

    await channel.run(on_active=report)
    if not started:  # closed before it became active
        task_status.started(channel)


async def connect(
    host: str,
    port: int,
    initializer: ChannelInitializer,
    *,
    config: ChannelConfig | None = None,
    task_status: trio.TaskStatus[StreamChannel] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Connect to ``host:port`` and run the channel until it closes.

    Use ``channel = await nursery.start(connect, host, port, init)`` to get the connected
    channel; connection errors (``OSError``) are raised from ``start``.
    """
    stream = await trio.open_tcp_stream(host, port)
    await run_channel(stream, initializer, config=config, task_status=task_status)


@attrs.frozen
class ServerStatistics:
    """A snapshot of a server's counters."""

    connections_accepted: int
    connections_open: int
    connections_failed: int
    connections_refused: int
    bytes_read: int
    bytes_written: int


@attrs.define(eq=False)
class Server:
    """A running server: its bound addresses, open channels and counters."""

    addresses: list[tuple[str, int]]
    _channels: set[StreamChannel] = attrs.field(factory=set)
    _accepted: int = 0
    _failed: int = 0
    _refused: int = 0
    _closed_bytes_read: int = 0
    _closed_bytes_written: int = 0

    @property
    def port(self) -> int:
        """The first bound port."""
        return self.addresses[0][1]

    @property
    def channels(self) -> frozenset[StreamChannel]:
        """The open channels."""
        return frozenset(self._channels)

    def statistics(self) -> ServerStatistics:
        open_read = sum(c.statistics().bytes_read for c in self._channels)
        open_written = sum(c.statistics().bytes_written for c in self._channels)
        return ServerStatistics(
            connections_accepted=self._accepted,
            connections_open=len(self._channels),
            connections_failed=self._failed,
            connections_refused=self._refused,
            bytes_read=self._closed_bytes_read + open_read,
            bytes_written=self._closed_bytes_written + open_written,
        )

    async def _handle(
        self, stream: trio.abc.Stream, initializer: ChannelInitializer, config: ChannelConfig | None
    ) -> None:
        self._accepted += 1
        channel = StreamChannel(stream, config)
        self._channels.add(channel)
        try:
            initializer(channel)
            await channel.run()
        except Exception as exc:
            # A connection's failure stays in the connection.
            self._failed += 1
            log.warning("%s: connection failed: %r", channel, exc, exc_info=exc)
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)
        finally:
            self._channels.discard(channel)
            stats = channel.statistics()
            self._closed_bytes_read += stats.bytes_read
            self._closed_bytes_written += stats.bytes_written


async def serve(
    initializer: ChannelInitializer,
    port: int,
    *,
    host: str | None = None,
    config: ChannelConfig | None = None,
    backlog: int | None = None,
    tls: ssl.SSLContext | None = None,
    allow: AllowList | None = None,
    name: str = "server",
    task_status: trio.TaskStatus[Server] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept TCP connections on ``host:port`` forever, one channel per connection.

    Reports a :class:`Server` (with the bound addresses; port 0 picks a free one) through
    ``task_status``. Each connection's pipeline is built by ``initializer``; a connection that
    fails is logged and closed, and the server goes on. Cancel the surrounding scope to stop;
    every open channel closes with it. With ``allow``, other addresses are closed at accept;
    with ``tls``, each connection completes a TLS handshake (mutual when the context requires
    client certificates) before its channel exists: a refused peer never reaches the pipeline
    (see :func:`~hanet.boot.secure_stream`; ``name`` says which port in the log).
    """
    listeners = await trio.open_tcp_listeners(port, host=host, backlog=backlog)
    await serve_listeners(
        initializer,
        listeners,
        config=config,
        tls=tls,
        allow=allow,
        name=name,
        task_status=task_status,
    )


async def serve_listeners(
    initializer: ChannelInitializer,
    listeners: Sequence[trio.abc.Listener[trio.abc.Stream]],
    *,
    config: ChannelConfig | None = None,
    tls: ssl.SSLContext | None = None,
    allow: AllowList | None = None,
    name: str = "server",
    task_status: trio.TaskStatus[Server] = trio.TASK_STATUS_IGNORED,
) -> None:
    """As :func:`serve`, on listeners the caller opened (TCP or memory listeners)."""
    addresses: list[tuple[str, int]] = []
    for listener in listeners:
        sock = _listener_socket(listener)
        if sock is not None:
            bound = sock.getsockname()
            addresses.append((bound[0], bound[1]))
    server = Server(addresses)
    if addresses:
        log.info("listening on %s", ", ".join(format_address(a) for a in addresses))

    async def handler(stream: trio.abc.Stream) -> None:
        if tls is not None or allow:
            secured = await secure_stream(stream, tls=tls, allow=allow, what=name)
            if secured is None:
                server._refused += 1
                return
            stream = secured
        await server._handle(stream, initializer, config)

    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(_accept_loop, listener, handler, nursery)
        task_status.started(server)
        await trio.sleep(math.inf)


def _listener_socket(listener: object) -> Any:
    """The socket under a listener (a TLS listener wraps a TCP one), or None."""
    while listener is not None:
        sock = getattr(listener, "socket", None)
        if sock is not None:
            return sock
        listener = getattr(listener, "transport_listener", None)
    return None


async def _accept_loop(
    listener: trio.abc.Listener[trio.abc.Stream],
    handler: Callable[[trio.abc.Stream], Awaitable[None]],
    nursery: trio.Nursery,
) -> None:
    async with listener:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                # EMFILE and friends: back off instead of spinning (as trio.serve_listeners).
                log.error("accept failed: %s; retrying in 0.1 s", exc)
                await trio.sleep(0.1)
                continue
            nursery.start_soon(handler, stream)
