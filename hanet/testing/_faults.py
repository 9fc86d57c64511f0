"""Faults between two peers: delay, throttle, cut, black-hole, flip a byte.

:func:`relay` copies bytes between two trio streams in both directions, applying the
:class:`Faults` of each direction as the bytes pass; :class:`FaultProxy` accepts TCP
connections on loopback and relays each to a target through the same faults. Faults are plain
mutable settings: change them while connections run (a test partitions a link with
:meth:`FaultProxy.partition`, heals it with :meth:`FaultProxy.heal`). Over memory streams and
the ``autojump_clock`` the same :func:`relay` gives deterministic, virtual-time faults.
"""

from __future__ import annotations

import logging

import attrs
import trio

from hanet.channel import format_address

__all__ = ["FaultProxy", "Faults", "RelayStatistics", "relay"]

log = logging.getLogger("hanet.testing.faults")

_CHUNK = 64 * 1024


@attrs.define(eq=False)
class Faults:
    """What happens to the bytes of one direction.

    Attributes:
        delay: seconds each chunk is held before it is forwarded (order is kept).
        bytes_per_second: forward at most this fast (None: as fast as the peers go).
        black_hole: read and drop everything, never close (a silent partition).
    """

    delay: float = 0.0
    bytes_per_second: float | None = None
    black_hole: bool = False
    _flips: dict[int, int] = attrs.field(factory=dict)

    def flip(self, offset: int, mask: int = 0xFF) -> None:
        """XOR the byte at ``offset`` of the direction's stream with ``mask``, once.

        Offsets count from the first byte of a connection; the first connection whose stream
        reaches ``offset`` takes the flip (a reconnect sees clean bytes).
        """
        if offset < 0 or not 0 < mask <= 0xFF:
            raise ValueError(f"bad flip: offset {offset}, mask {mask:#x}")
        self._flips[offset] = mask

    def clear(self) -> None:
        """No faults at all."""
        self.delay = 0.0
        self.bytes_per_second = None
        self.black_hole = False
        self._flips.clear()

    def _apply_flips(self, chunk: bytearray, position: int) -> int:
        end = position + len(chunk)
        hits = [offset for offset in self._flips if position <= offset < end]
        for offset in hits:
            chunk[offset - position] ^= self._flips.pop(offset)
        return len(hits)


@attrs.frozen
class RelayStatistics:
    """Bytes forwarded and dropped, flips applied, connections relayed."""

    connections: int
    forwarded: int
    dropped: int
    flipped: int


@attrs.define(eq=False)
class _Counters:
    connections: int = 0
    forwarded: int = 0
    dropped: int = 0
    flipped: int = 0

    def snapshot(self) -> RelayStatistics:
        return RelayStatistics(self.connections, self.forwarded, self.dropped, self.flipped)


async def _pump(
    source: trio.abc.ReceiveStream,
    sink: trio.abc.SendStream,
    faults: Faults,
    counters: _Counters,
) -> None:
    position = 0
    while True:
        try:
            data = await source.receive_some(_CHUNK)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        if not data:
            return
        if faults.black_hole:
            counters.dropped += len(data)
            position += len(data)
            continue
        chunk = bytearray(data)
        counters.flipped += faults._apply_flips(chunk, position)
        position += len(chunk)
        if faults.delay > 0:
            await trio.sleep(faults.delay)
        if faults.bytes_per_second:
            await trio.sleep(len(chunk) / faults.bytes_per_second)
        try:
            await sink.send_all(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        counters.forwarded += len(chunk)


async def relay(
    a: trio.abc.Stream,
    b: trio.abc.Stream,
    a_to_b: Faults,
    b_to_a: Faults,
    *,
    cancel_scope: trio.CancelScope | None = None,
    counters: _Counters | None = None,
) -> None:
    """Copy ``a``'s bytes to ``b`` and ``b``'s to ``a`` through the faults, until both ends
    have closed (one side closing closes the other: a relayed TCP connection ends whole) or
    the call is cancelled. Both streams are closed on return."""
    counters = counters if counters is not None else _Counters()
    counters.connections += 1
    with cancel_scope if cancel_scope is not None else trio.CancelScope():
        try:
            async with trio.open_nursery() as nursery:

                async def one_way(
                    src: trio.abc.Stream, dst: trio.abc.Stream, faults: Faults
                ) -> None:
                    await _pump(src, dst, faults, counters)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(one_way, a, b, a_to_b)
                nursery.start_soon(one_way, b, a, b_to_a)
        finally:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(a)
                await trio.aclose_forcefully(b)


@attrs.define(eq=False)
class FaultProxy:
    """A loopback TCP proxy to ``target`` with :class:`Faults` on each direction.

    Run :meth:`run` in a nursery (``address = await nursery.start(proxy.run)``) and point the
    client at the reported address. ``to_target`` holds the faults of what the client sends,
    ``to_client`` of what the target answers.
    """

    target: tuple[str, int]
    to_target: Faults = attrs.field(factory=Faults)
    to_client: Faults = attrs.field(factory=Faults)
    refuse: bool = False
    """Accept and close at once every new connection (the target looks down)."""
    _open: set[trio.CancelScope] = attrs.field(factory=set)
    _counters: _Counters = attrs.field(factory=_Counters)

    def statistics(self) -> RelayStatistics:
        """What the proxy has relayed since it started."""
        return self._counters.snapshot()

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def cut(self) -> None:
        """Close every open connection now (new ones are still accepted)."""
        for scope in list(self._open):
            scope.cancel()

    def partition(self) -> None:
        """Black-hole both directions: nothing passes, nothing closes."""
        self.to_target.black_hole = self.to_client.black_hole = True

    def heal(self) -> None:
        """Clear every fault of both directions and stop refusing."""
        self.to_target.clear()
        self.to_client.clear()
        self.refuse = False

    async def run(
        self,
        host: str = "127.0.0.1",
        *,
        task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on ``host`` (a free port) and relay every connection until cancelled."""
        listeners = await trio.open_tcp_listeners(0, host=host)
        name = listeners[0].socket.getsockname()
        address = (name[0], name[1])
        log.info("fault proxy %s -> %s", format_address(address), format_address(self.target))
        async with trio.open_nursery() as nursery:
            task_status.started(address)
            await trio.serve_listeners(self._handle, listeners, handler_nursery=nursery)

    async def _handle(self, client: trio.SocketStream) -> None:
        if self.refuse:
            await trio.aclose_forcefully(client)
            return
        try:
            upstream = await trio.open_tcp_stream(*self.target)
        except OSError:
            await trio.aclose_forcefully(client)
            return
        scope = trio.CancelScope()
        self._open.add(scope)
        try:
            await relay(
                client,
                upstream,
                self.to_target,
                self.to_client,
                cancel_scope=scope,
                counters=self._counters,
            )
        finally:
            self._open.discard(scope)
