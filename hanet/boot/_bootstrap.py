"""Bootstraps: serve connections, connect to a server, run a channel over any stream."""

from __future__ import annotations

import logging
import math
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import trio

from hanet.channel import (
    DEFAULT_HOLD_TIMEOUT,
    MEMORY_BUDGET,
    BudgetStatistics,
    ChannelConfig,
    MemoryBudget,
    StreamChannel,
    format_address,
)

from ._limits import (
    ACCEPT_BACKOFF,
    CAPACITY_ERRNOS,
    BurstLog,
    default_max_connections,
    partial_budget,
)
from ._security import AllowList, open_tls_stream, secure_stream

__all__ = [
    "ChannelInitializer",
    "Connector",
    "Server",
    "ServerStatistics",
    "connect",
    "run_channel",
    "serve",
    "serve_listeners",
    "serve_on",
    "tcp_connector",
]

log = logging.getLogger("hanet.bootstrap")

ChannelInitializer = Callable[[StreamChannel], None]
"""Builds a new channel's pipeline (adds its handlers); called before ``channel_active``."""

Connector = Callable[[], Awaitable[trio.abc.Stream]]
"""Opens a new stream to the peer (a TCP connection, a memory stream in tests, ...)."""


def tcp_connector(
    host: str,
    port: int,
    *,
    tls: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    local_address: str | None = None,
) -> Connector:
    """A connector that opens a TCP connection to ``host:port``, with a TLS handshake when
    ``tls`` is given (:class:`~hanet.boot.TlsHandshakeError` when it fails), from
    ``local_address`` (an IP address) when given."""

    async def open_stream() -> trio.abc.Stream:
        if tls is not None:
            return await open_tls_stream(
                host, port, tls, server_hostname, local_address=local_address
            )
        return await trio.open_tcp_stream(host, port, local_address=local_address)

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
    connections_over_limit: int = 0
    """Closed at accept because ``max_connections`` were open."""
    connections_idle_closed: int = 0
    """Closed because nothing was read from them for ``idle_timeout``."""
    accept_errors: int = 0
    """Accepts that failed for want of descriptors or memory (retried after a pause)."""
    partial_frames: BudgetStatistics | None = None
    """The budget of bytes held in unfinished frames (None: no budget)."""


@attrs.define(eq=False)
class Server:
    """A running server: its bound addresses, open channels, limits and counters.

    Attributes:
        addresses: the bound addresses.
        max_connections: connections (TLS handshakes included) held at most; one more is
            closed at accept.
        idle_timeout: seconds without a byte read after which a connection is closed (None:
            never).
        name: which port, in the log.
        budget: the bytes its connections may hold in unfinished frames (None: unbounded);
            each channel carries it in its ``attributes`` under ``MEMORY_BUDGET``.
    """

    addresses: list[tuple[str, int]]
    max_connections: int = attrs.field(factory=default_max_connections)
    idle_timeout: float | None = None
    name: str = "server"
    budget: MemoryBudget | None = None
    _channels: set[StreamChannel] = attrs.field(factory=set)
    _accepted: int = 0
    _failed: int = 0
    _refused: int = 0
    _over_limit: int = 0
    _idle_closed: int = 0
    _accept_errors: int = 0
    _live: int = 0
    _closed_bytes_read: int = 0
    _closed_bytes_written: int = 0
    _limit_burst: BurstLog = attrs.field(factory=lambda: BurstLog(log, logging.WARNING))
    _accept_burst: BurstLog = attrs.field(factory=lambda: BurstLog(log, logging.ERROR))

    def __attrs_post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError("max_connections must be >= 1")
        if self.idle_timeout is not None and not self.idle_timeout > 0:
            raise ValueError("idle_timeout must be > 0 (None: off)")

    @property
    def port(self) -> int:
        """The first bound port."""
        return self.addresses[0][1]

    @property
    def channels(self) -> frozenset[StreamChannel]:
        """The open channels."""
        return frozenset(self._channels)

    @property
    def connections(self) -> int:
        """Accepted connections not closed yet (TLS handshakes under way included)."""
        return self._live

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
            connections_over_limit=self._over_limit,
            connections_idle_closed=self._idle_closed,
            accept_errors=self._accept_errors,
            partial_frames=self.budget.statistics() if self.budget is not None else None,
        )

    def _admit(self, stream: trio.abc.Stream) -> bool:
        """At accept: True to serve ``stream``; False when the cap is reached (the caller
        closes it). One WARNING when a burst of refusals starts, one when it ends."""
        now = trio.current_time()
        if self._live >= self.max_connections:
            self._over_limit += 1
            self._limit_burst.event(
                now,
                "%s: refusing new connections: %d open, the cap (max_connections %d)",
                self.name,
                self._live,
                self.max_connections,
            )
            return False
        self._limit_burst.end(now, "%s: accepting connections again", self.name)
        self._live += 1
        return True

    def _watch_idle(self, channel: StreamChannel, timeout: float) -> None:
        """Close ``channel`` once nothing was read for ``timeout`` seconds (checked every
        quarter of it: closed between ``timeout`` and ``1.25 * timeout`` after the last read)."""
        every = timeout / 4
        last_read = channel.statistics().bytes_read
        quiet_since = channel.now()

        def check() -> None:
            nonlocal last_read, quiet_since
            read = channel.statistics().bytes_read
            now = channel.now()
            if read != last_read:
                last_read, quiet_since = read, now
            elif now - quiet_since >= timeout:
                self._idle_closed += 1
                log.info("%s: %s idle for %g s: closing it", self.name, channel, timeout)
                channel.close_nowait(f"idle for {timeout:g} s")
                return
            channel.schedule(every, check)

        channel.schedule(every, check)

    async def _handle(
        self, stream: trio.abc.Stream, initializer: ChannelInitializer, config: ChannelConfig | None
    ) -> None:
        self._accepted += 1
        channel = StreamChannel(stream, config)
        self._channels.add(channel)
        if self.budget is not None:
            channel.attributes[MEMORY_BUDGET] = self.budget
        try:
            initializer(channel)
            if self.idle_timeout is not None:
                self._watch_idle(channel, self.idle_timeout)
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
    max_connections: int | None = None,
    idle_timeout: float | None = None,
    max_partial_bytes: int | None = None,
    partial_hold_timeout: float = DEFAULT_HOLD_TIMEOUT,
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

    Bounds: at most ``max_connections`` connections at once (default
    :func:`~hanet.boot.default_max_connections`, derived from the descriptor limit); one more
    is closed as soon as it is accepted, with one WARNING per burst of them. With
    ``idle_timeout`` (seconds; None: off) a connection from which nothing was read for that
    long is closed (RocketMQ closes idle broker connections after 120 s,
    ``serverChannelMaxIdleTimeSeconds``). When accept fails for want of descriptors or memory
    (EMFILE, ENFILE, ENOBUFS, ENOMEM) the loop logs once, waits
    :data:`~hanet.boot.ACCEPT_BACKOFF` and accepts again: the service never ends for that; any
    other accept error propagates.

    Memory: the bytes all connections hold in unfinished frames (the cumulations of
    ``ByteToMessageDecoder`` and the decoders built on it) are capped at ``max_partial_bytes``
    (default :data:`~hanet.channel.DEFAULT_MAX_PARTIAL_BYTES`, 64 MiB; 0: no cap) by a
    :class:`~hanet.channel.MemoryBudget`: a connection that needs more stops reading until
    there is room, and while some wait, one whose unfinished frame held its bytes for
    ``partial_hold_timeout`` seconds is closed with a logged reason. A frame limit above the
    budget can then never be reached: keep ``max_partial_bytes`` above the largest frame.
    """
    listeners = await trio.open_tcp_listeners(port, host=host, backlog=backlog)
    await serve_on(
        initializer,
        listeners,
        config=config,
        tls=tls,
        allow=allow,
        name=name,
        max_connections=max_connections,
        idle_timeout=idle_timeout,
        max_partial_bytes=max_partial_bytes,
        partial_hold_timeout=partial_hold_timeout,
        task_status=task_status,
    )


async def serve_on(
    initializer: ChannelInitializer,
    listeners: Sequence[trio.abc.Listener[trio.abc.Stream]],
    *,
    config: ChannelConfig | None = None,
    tls: ssl.SSLContext | None = None,
    allow: AllowList | None = None,
    name: str = "server",
    max_connections: int | None = None,
    idle_timeout: float | None = None,
    max_partial_bytes: int | None = None,
    partial_hold_timeout: float = DEFAULT_HOLD_TIMEOUT,
    task_status: trio.TaskStatus[Server] = trio.TASK_STATUS_IGNORED,
) -> None:
    """As :func:`serve`, on listeners the caller opened (TCP or memory listeners); the
    connection cap, the idle timeout and the memory budget apply across all of them.

    (Named ``serve_listeners`` before: that is trio's name for a function taking a stream
    handler; ``serve_listeners`` stays an alias of this one, deprecated.)"""
    addresses: list[tuple[str, int]] = []
    for listener in listeners:
        sock = _listener_socket(listener)
        if sock is not None:
            bound = sock.getsockname()
            addresses.append((bound[0], bound[1]))
    server = Server(
        addresses,
        max_connections=default_max_connections() if max_connections is None else max_connections,
        idle_timeout=idle_timeout,
        name=name,
        budget=partial_budget(max_partial_bytes, partial_hold_timeout, name),
    )
    if addresses:
        log.info("listening on %s", ", ".join(format_address(a) for a in addresses))

    async def handler(stream: trio.abc.Stream) -> None:
        try:
            if tls is not None or allow:
                secured = await secure_stream(stream, tls=tls, allow=allow, what=name)
                if secured is None:
                    server._refused += 1
                    return
                stream = secured
            await server._handle(stream, initializer, config)
        finally:
            server._live -= 1

    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(_accept_loop, listener, server, handler, nursery)
        task_status.started(server)
        await trio.sleep(math.inf)


serve_listeners = serve_on
"""Deprecated alias of :func:`serve_on` (``trio.serve_listeners`` takes a stream handler, this
one a channel initializer); kept for code that imports it, to be removed later."""


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
    server: Server,
    handler: Callable[[trio.abc.Stream], Awaitable[None]],
    nursery: trio.Nursery,
) -> None:
    async with listener:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in CAPACITY_ERRNOS:
                    raise
                # Out of descriptors or memory: back off and accept again (trio's
                # serve_listeners does the same); the pending connections wait in the backlog.
                server._accept_errors += 1
                server._accept_burst.event(
                    trio.current_time(),
                    "%s: accept failed: %s; retrying every %g s",
                    server.name,
                    exc.strerror or exc,
                    ACCEPT_BACKOFF,
                )
                await trio.sleep(ACCEPT_BACKOFF)
                continue
            server._accept_burst.end(trio.current_time(), "%s: accepting again", server.name)
            if not server._admit(stream):
                await _close_now(stream)
                continue
            nursery.start_soon(handler, stream)


async def _close_now(stream: trio.abc.Stream) -> None:
    """Close a stream just accepted (a TCP socket without a checkpoint)."""
    if type(stream) is trio.SocketStream:
        stream.socket.close()
    else:
        await trio.aclose_forcefully(stream)
