"""StreamChannel: the async driver of a pipeline over any trio ``Stream``."""

from __future__ import annotations

import errno
import logging
import math
import os
import socket
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ._address import format_address
from ._arena import ReceiveArena
from ._channel import Channel, ChannelConfig
from ._errors import ChannelClosedError
from ._outbound import FileRegion, release_regions

__all__ = ["StreamChannel"]

log = logging.getLogger("hanet.channel")

_IOV_MAX = 1024  # buffers per sendmsg (Linux's IOV_MAX)
_ARENA: trio.lowlevel.RunVar[ReceiveArena] = trio.lowlevel.RunVar("hanet_receive_arena")


def _arena() -> ReceiveArena:
    try:
        return _ARENA.get()
    except LookupError:
        arena = ReceiveArena()
        _ARENA.set(arena)
        return arena


async def _send_parts(sock: trio.socket.SocketType, parts: list[Any], nbytes: int) -> None:
    """Send ``parts``: runs of bytes with gathering writes, each :class:`FileRegion` with
    ``sendfile`` from its file (the bytes before a region are sent with ``MSG_MORE``, so a header
    and the region that follows it leave in the same segments)."""
    run: list[Any] = []
    run_bytes = 0
    for part in parts:
        if type(part) is FileRegion:
            if run:
                await _sendmsg_all(sock, run, run_bytes, _MSG_MORE)
                run = []
                run_bytes = 0
            await _sendfile_all(sock, part)
        else:
            run.append(part)
            run_bytes += len(part) if type(part) is not memoryview else part.nbytes
    if run or not parts:
        await _sendmsg_all(sock, run, run_bytes)


_MSG_MORE = getattr(socket, "MSG_MORE", 0)


def _read_regions(parts: list[Any]) -> bytes:
    """``parts`` joined, each :class:`FileRegion` read (for a stream sendfile cannot reach); a
    region its file cannot fill loses the connection, as with sendfile."""
    try:
        return b"".join(p.read() if type(p) is FileRegion else p for p in parts)
    except (OSError, EOFError) as exc:
        raise trio.BrokenResourceError(str(exc)) from exc


async def _sendfile_all(sock: trio.socket.SocketType, region: FileRegion) -> None:
    """Send a file region with ``os.sendfile``, waiting whenever the socket is full."""
    out = sock.fileno()
    offset = region.position
    left = region.count
    try:
        while left:
            try:
                sent = os.sendfile(out, region.fd, offset, left)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(sock)
                continue
            if not sent:
                raise trio.BrokenResourceError(
                    f"file region [{region.position}, {region.position + region.count}) goes "
                    f"past the end of its file (at {offset})"
                )
            offset += sent
            left -= sent
            await trio.lowlevel.checkpoint()
    except OSError as exc:
        if exc.errno == errno.EBADF and sock.fileno() == -1:
            raise trio.ClosedResourceError("the socket was closed") from exc
        raise trio.BrokenResourceError(f"sendfile failed: {exc}") from exc


async def _sendmsg_all(
    sock: trio.socket.SocketType, parts: list[Any], nbytes: int, flags: int = 0
) -> None:
    """Send every byte of ``parts`` with as few ``sendmsg`` calls as the kernel allows.

    OS errors become trio's stream errors, as ``SocketStream.send_all`` translates them.
    """
    if not nbytes:
        await trio.lowlevel.checkpoint()
        return
    try:
        while True:
            sent = await sock.sendmsg(parts, (), flags)
            nbytes -= sent
            if nbytes <= 0:
                return
            parts = _cut(parts, sent)  # a partial send: the rest
    except OSError as exc:
        raise _stream_error(exc) from exc


def _stream_error(exc: OSError) -> trio.ClosedResourceError | trio.BrokenResourceError:
    """trio's stream error for a socket's ``exc``, as ``SocketStream`` translates them."""
    if exc.errno == errno.EBADF:
        return trio.ClosedResourceError("the socket was closed")
    return trio.BrokenResourceError(f"socket connection broken: {exc}")


def _cut(parts: list[Any], sent: int) -> list[Any]:
    """What is left of ``parts`` once their first ``sent`` bytes left (a part cut in two
    becomes a view of its rest)."""
    i = 0
    while sent >= len(parts[i]):
        sent -= len(parts[i])
        i += 1
    parts = parts[i:]
    if sent:
        parts[0] = memoryview(parts[0])[sent:]
    return parts


def _read_into(fd: int, read_size: int, arena: ReceiveArena) -> tuple[memoryview | None, bool]:
    """Receive up to ``read_size`` bytes into the run's ``arena`` from a socket (its number
    ``fd``, -1 once closed) that was reported readable: a read-only view of them and whether
    they filled the room (an empty view: the peer closed), or None when the read would wait
    after all.

    The room is reserved, read into and given back with no await in between: another
    channel's read cannot reserve after this one's and leave a hole, and no reservation is
    held while a connection is quiet. OS errors become trio's stream errors, as
    ``SocketStream.receive_some`` translates them. (The reader awaits the socket itself
    before calling this, not through a coroutine of its own: one frame less to create and
    resume each read.)
    """
    start, end = arena.reserve(read_size)
    chunk = arena.chunk
    try:
        # The socket is non-blocking (trio made it so): a read that would wait raises.
        n = os.readv(fd, [arena.writable[start:end]])
    except BlockingIOError:
        arena.give_back(chunk, end, start)
        return None, False
    except OSError as exc:
        arena.give_back(chunk, end, start)
        if exc.errno == errno.EBADF:
            raise trio.ClosedResourceError("the socket was closed") from exc
        raise trio.BrokenResourceError(f"socket connection broken: {exc}") from exc
    arena.give_back(chunk, end, start + n)
    return arena.readonly[start : start + n], start + n == end


# An event that is already set: setting it again does nothing, so it stands in for a wake-up
# event until a task that waits makes its own.
_SET = trio.Event()
_SET.set()


def _socket_of(stream: trio.abc.Stream) -> Any:
    while True:
        sock = getattr(stream, "socket", None)
        if sock is not None:
            return sock
        inner = getattr(stream, "transport_stream", None)
        if inner is None:
            return None
        stream = inner


class StreamChannel(Channel):
    """A channel over a trio stream (a TCP ``SocketStream``, an ``SSLStream``, a memory stream).

    :meth:`run` drives it: its task reads and feeds received bytes into the pipeline, a writer
    task drains the outbound buffer with ``send_all`` (coalescing what was flushed together),
    and a timer task serves handlers' timers, in the channel's own nursery. On plain TCP, what
    the handlers flush while the reader's task runs them (a read and its read-complete) is
    written by that task once the read is complete, in one gathering write, when the writer is
    idle: no task is woken for the usual answer to a request. A flush made outside the
    channel's read (by another task: a loop's round, another connection's read) is written the
    same way at once, in the flushing task, when the writer is idle, as Netty writes at once on
    a flush made on the channel's event loop: its write futures are done (their callbacks have
    run) when the flush returns. Whatever the socket does not take at once is left to the
    writer task, which sends it before anything flushed later.
    ``channel_active`` fires when :meth:`run` starts and ``channel_inactive`` exactly once when
    it ends, however it ends (peer EOF, an error, ``close``, cancellation from outside).
    Nothing of the channel outlives :meth:`run`.
    """

    def __init__(self, stream: trio.abc.Stream, config: ChannelConfig | None = None) -> None:
        super().__init__(config)
        self.stream = stream
        self._nursery: trio.Nursery | None = None
        self._pending_spawns: list[Callable[[], Awaitable[object]]] = []
        self._closed = trio.Event()
        # Each task makes its own wake-up event when it waits.
        self._writer_wakeup = _SET
        self._reader_wakeup = _SET
        self._timer_wakeup = _SET
        # The writer and timer tasks start on first use: a channel that never writes or sets
        # a timer costs no task for them (a task costs ~25 us to start and cancel).
        self._writer_started = False
        self._timer_started = False
        self._read_requested = False
        # A close with flushed bytes still to send lets the writer finish them first
        # ("draining"); a lost connection has nothing to drain into.
        self._draining = False
        self._sending = False
        # On TCP, flushes while the reader's task runs the pipeline wait for the read's end
        # (the reader writes them itself), and flushes made while a direct write completes its
        # futures (their callbacks) join that write (Netty's flush0 is not re-entered either);
        # a partial direct write leaves its rest to the writer:
        # (parts left, their bytes, the write's futures, the write's bytes).
        self._in_read = False
        # The socket a direct write goes to: a plain TCP stream's (as the reader's), else None.
        self._direct: Any = stream.socket if type(stream) is trio.SocketStream else None
        self._rest: tuple[list[Any], int, list[Any], int] | None = None
        # The outbound buffer's flushed deque (the same for its life): a flush tests it
        # without the property's call.
        self._flushed_queue = self._outbound.flushed
        self._reader_scope: trio.CancelScope | None = None
        self._timers.on_earlier = self._wake_timers
        self._writable_event: trio.Event | None = None
        sock = _socket_of(stream)
        self._remote: object = None
        self._local: object = None
        if sock is not None:
            try:
                self._remote = sock.getpeername()
                self._local = sock.getsockname()
            except OSError:
                pass

    @property
    def remote_address(self) -> object:
        return self._remote

    @property
    def local_address(self) -> object:
        return self._local

    def now(self) -> float:
        return trio.current_time()

    def spawn(self, async_fn: Callable[[], Awaitable[object]]) -> None:
        if self._nursery is None:
            if not self._open:
                return
            self._pending_spawns.append(async_fn)
        else:
            self._nursery.start_soon(async_fn)

    # -- life cycle -----------------------------------------------------------------------

    async def run(self, *, on_active: Callable[[], None] | None = None) -> None:
        """Drive the channel until it closes; returns once ``channel_inactive`` has fired.

        The calling task is the reader; the writer, timer and spawned tasks run in the
        channel's own nursery. ``on_active`` is called right after ``channel_active``.
        Cancelling the caller closes the channel the same way; an exception that escapes the
        channel's tasks (a bug, not bad input) closes it too and propagates. A channel closed
        before it ran fires neither ``channel_active`` nor ``channel_inactive``.
        """
        if self._closed.is_set():
            await self._close_stream()
            return
        try:
            async with trio.open_nursery() as nursery:
                if self._open:
                    self._nursery = nursery
                    self._active = True
                    for fn in self._pending_spawns:
                        nursery.start_soon(fn)
                    self._pending_spawns.clear()
                    if self._outbound.has_flushed:
                        self._start_writer()
                    if self._timers.next_deadline() != math.inf:
                        self._start_timers()
                    self.pipeline.fire_channel_active()
                    if on_active is not None:
                        on_active()
                    if self._open:
                        with trio.CancelScope() as self._reader_scope:
                            await self._reader()
                if not self._draining:
                    nursery.cancel_scope.cancel()
        finally:
            self._shutdown()
            await self._close_stream()

    async def _close_stream(self) -> None:
        stream = self.stream
        if type(stream) is trio.SocketStream:
            # What SocketStream.aclose does, without its checkpoint: in a cancelled run that
            # checkpoint would raise a Cancelled only to be swallowed (~50 us per connection).
            stream.socket.close()
        else:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)

    def _shutdown(self) -> None:
        self._open = False
        self._nursery = None
        was_active = self._active
        self._active = False
        self._timers.clear()
        if self._rest is not None:  # a direct write's rest the writer never took up
            for future in self._rest[2]:
                future.set_exception(ChannelClosedError(f"{self} closed"))
            self._rest = None
        self._outbound.fail_all(lambda: ChannelClosedError(f"{self} closed"))
        if self._writable_event is not None:
            self._writable_event.set()
        if was_active:
            self.pipeline.fire_channel_inactive()
        self.pipeline._destroy()
        self._closed.set()
        self._close_future.set_result()
        log.debug("%s: closed (%s)", self, self._close_reason or "closed")

    async def close(self, reason: str | None = None) -> None:
        """Close the channel and wait until it is closed (its stream too). Idempotent."""
        self.close_nowait(reason)
        if self._nursery is None and not self._closed.is_set():
            # Never ran: nothing to cancel; release what it holds now.
            self._open = False
            self._shutdown()
            await self._close_stream()
        await self._closed.wait()

    async def wait_closed(self) -> None:
        """Wait until the channel has closed."""
        await self._closed.wait()

    async def wait_writable(self) -> None:
        """Wait while the channel is not writable; raises ChannelClosedError if it closes."""
        while self._outbound.is_writable is False:
            if not self._open:
                break
            if self._writable_event is None:
                self._writable_event = trio.Event()
            await self._writable_event.wait()
        if not self._open:
            raise ChannelClosedError(f"{self} is closed")
        await trio.lowlevel.checkpoint()

    async def write_and_flush(self, msg: Any) -> None:
        """Write ``msg`` through the pipeline and wait until its bytes reached the kernel.

        Waits first while the channel is not writable (back-pressure). Raises
        :class:`ChannelClosedError` if the channel closes before the write completes.
        """
        await self.wait_writable()
        await self.pipeline.write_and_flush(msg)

    # -- transport -------------------------------------------------------------------------

    def _transport_flush(self) -> None:
        if not self._open:
            return  # a flush after the close flushes nothing: unflushed writes fail with it
        self._outbound.add_flush()
        flushed = self._flushed_queue
        if self._in_read or not flushed:
            return
        sock = self._direct
        if sock is not None and not self._sending and self._nursery is not None:
            # Outside the read, on plain TCP, the writer idle (no rest of a write left to it:
            # that is _sending): write now, in this task, as the reader does at a read's end.
            self._in_read = True
            try:
                self._write_now(sock.fileno(), flushed)
            finally:
                self._in_read = False
            if not (flushed and self._open):
                return  # all written, or closed (a draining close woke the writer itself)
        self._wake_writer()

    def _wake_writer(self) -> None:
        if self._writer_started:
            self._writer_wakeup.set()
        elif self._nursery is not None:
            self._start_writer()

    def _start_writer(self) -> None:
        assert self._nursery is not None
        self._writer_started = True
        self._nursery.start_soon(self._writer)

    def _start_timers(self) -> None:
        assert self._nursery is not None
        self._timer_started = True
        self._nursery.start_soon(self._timer_task)

    def _transport_read(self) -> None:
        self._read_requested = True
        self._reader_wakeup.set()

    def _transport_reads_released(self) -> None:
        self._reader_wakeup.set()

    def _transport_close(self) -> None:
        self._close(drain=True)

    def _close(self, *, drain: bool) -> None:
        if not self._open:
            return
        self._open = False
        nursery = self._nursery
        if nursery is None:
            return
        if not (drain and (self._sending or self._outbound.has_flushed)):
            nursery.cancel_scope.cancel()
            return
        # What was flushed before the close still leaves, as in Netty, where a write and
        # flush has reached the socket before a close that follows it runs: reading and
        # timers stop now, the writer sends what is flushed (for at most close_timeout),
        # then the channel closes. Writes after the close fail at once.
        self._draining = True
        self._timers.clear()
        if self._reader_scope is not None:
            self._reader_scope.cancel()
        nursery.cancel_scope.deadline = min(
            nursery.cancel_scope.deadline, trio.current_time() + self.config.close_timeout
        )
        self._wake_writer()

    def _writability_flipped(self) -> None:
        if self._outbound.is_writable and self._writable_event is not None:
            self._writable_event.set()
            self._writable_event = None
        super()._writability_flipped()

    def _wake_timers(self) -> None:
        if self._timer_started:
            self._timer_wakeup.set()
        elif self._nursery is not None:
            self._start_timers()

    # -- tasks ---------------------------------------------------------------------------

    async def _reader(self) -> None:
        stream = self.stream
        pipeline = self.pipeline
        read_size = self.config.read_size
        # A TCP socket receives into the run's arena (no copy of the bytes afterwards; views
        # of them go down the pipeline); any other stream (TLS, memory) gets receive_some.
        sock = stream.socket if type(stream) is trio.SocketStream else None
        ready = False  # whether the last read filled its room (more bytes are likely waiting)
        arena = _arena() if sock is not None else None  # the run's: fetched once, not a read
        flushed = self._outbound.flushed  # (non-empty: has_flushed, without a call a read)
        checkpoint = trio.lowlevel.checkpoint
        wait_readable = trio.lowlevel.wait_readable
        # The socket's number, passed to trio's wait, the read and the write as an int (no
        # fileno() call each); taken again after every await, where another task may have
        # closed the socket (it is then -1 and the read fails as closed: the number may have
        # been given to a new descriptor since). A close during trio's wait itself wakes it
        # with ClosedResourceError.
        fd = sock.fileno() if sock is not None else -1
        while True:
            if not (self._auto_read or self._read_requested) or self._read_holds:
                self._reader_wakeup = trio.Event()
                await self._reader_wakeup.wait()
                if sock is not None:
                    fd = sock.fileno()
                continue
            self._read_requested = False
            data: bytes | bytearray | memoryview
            try:
                if sock is None or arena is None:
                    data = await stream.receive_some(read_size)
                else:
                    # Unless bytes are likely waiting (the last read filled its room), wait
                    # until the socket is readable first, so that an idle connection holds no
                    # room in the arena.
                    if ready:
                        await checkpoint()
                    else:
                        await wait_readable(fd)
                    fd = sock.fileno()
                    view, ready = _read_into(fd, read_size, arena)
                    while view is None:
                        await wait_readable(fd)
                        fd = sock.fileno()
                        view, ready = _read_into(fd, read_size, arena)
                    data = view
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self._lost(f"connection lost: {exc.__cause__ or exc!r}")
                return
            if not self._open:
                # Closed while this read was under way: a socket read with bytes ready does
                # not yield, so the close has not cancelled us yet. Drop them, as Netty does.
                return
            if not data:
                self._lost("peer closed the connection")
                return
            self._reads += 1
            self._bytes_read += len(data)
            if sock is None:
                pipeline.fire_channel_read(data)
                pipeline.fire_channel_read_complete()
                continue
            self._in_read = True
            try:
                pipeline.fire_channel_read(data)
                pipeline.fire_channel_read_complete()
                if flushed and self._open:
                    self._write_now(fd, flushed)
            finally:
                self._in_read = False
            if flushed and self._open:  # left to the writer
                self._wake_writer()

    async def _writer(self) -> None:
        stream = self.stream
        outbound = self._outbound
        coalesce = self.config.write_coalesce
        # A TCP socket gets gathering writes (sendmsg): the messages flushed together leave in
        # one system call without being joined first, as Netty's gathering writes. Any other
        # stream gets them joined into one send_all.
        sock = stream.socket if type(stream) is trio.SocketStream else None
        if sock is not None and not hasattr(sock, "sendmsg"):  # pragma: no cover - Windows
            sock = None
        while True:
            if self._rest is not None:
                await self._send_rest(sock)
                continue
            if not outbound.has_flushed:
                if self._draining:
                    self._drained()
                    return
                self._writer_wakeup = trio.Event()
                await self._writer_wakeup.wait()
                continue
            parts, futures, nbytes = outbound.take(coalesce, _IOV_MAX)
            self._sending = True
            try:
                if outbound.regions_taken:
                    # file regions: sendfile on plain TCP, their bytes on any other stream
                    try:
                        if sock is not None:
                            await _send_parts(sock, parts, nbytes)
                        else:
                            await stream.send_all(_read_regions(parts))
                    finally:
                        release_regions(parts)
                elif sock is not None:
                    await _sendmsg_all(sock, parts, nbytes)
                else:
                    await stream.send_all(parts[0] if len(parts) == 1 else b"".join(parts))
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self._send_failed(futures, exc)
                return
            except BaseException:
                for future in futures:
                    future.set_exception(ChannelClosedError(f"{self} closed"))
                raise
            finally:
                self._sending = False
            self._sent(futures, nbytes)

    async def _send_rest(self, sock: trio.socket.SocketType | None) -> None:
        """Send the rest of a write begun directly (:meth:`_write_now`)."""
        assert self._rest is not None and sock is not None
        parts, left, futures, nbytes = self._rest
        self._rest = None  # the writer's now, as a write it took itself
        try:
            await _sendmsg_all(sock, parts, left)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._send_failed(futures, exc)
            return
        except BaseException:
            for future in futures:
                future.set_exception(ChannelClosedError(f"{self} closed"))
            raise
        finally:
            self._sending = False
        self._sent(futures, nbytes)

    def _write_now(self, fd: int, flushed: deque[Any]) -> None:
        """Write what is flushed in the calling task (the reader's at the end of a read, or
        the one that flushed outside it), with ``_in_read`` set by the caller: gathering
        writes (``writev``) while the socket takes everything, a flush the completed writes'
        callbacks make included; a write it takes in part leaves its rest to the writer task
        (which sends it first). Nothing is written while the writer is sending (it keeps the
        order) or when a file region is queued (sendfile is the writer's). The caller wakes
        the writer for whatever is left flushed."""
        outbound = self._outbound  # (its flushed deque: the reader's, kept for its life)
        coalesce = self.config.write_coalesce
        while flushed and self._open and not self._sending:
            if outbound._regions_queued > 0:  # has_regions, without the property's call
                return
            parts, futures, nbytes = outbound.take(coalesce, _IOV_MAX)
            try:
                sent = os.writev(fd, parts)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                error = _stream_error(exc)
                error.__cause__ = exc
                self._send_failed(futures, error)
                return
            if sent < nbytes:
                self._rest = (_cut(parts, sent), nbytes - sent, futures, nbytes)
                self._sending = True
                self._wake_writer()
                return
            self._sent(futures, nbytes)

    def _sent(self, futures: list[Any], nbytes: int) -> None:
        """A write of ``nbytes`` left for the kernel: count it, complete its futures."""
        self._sends += 1
        self._messages_written += len(futures)
        self._bytes_written += nbytes
        self._outbound.sent(nbytes, len(futures))
        for future in futures:
            future._finish(None)  # set_result(), one call less a write

    def _send_failed(self, futures: list[Any], exc: BaseException) -> None:
        """A write could not be sent: the connection is lost, its futures fail."""
        closed = ChannelClosedError(f"{self}: connection lost while sending")
        closed.__cause__ = exc
        for future in futures:
            future.set_exception(closed)
        self._lost(f"connection lost while sending: {exc.__cause__ or exc!r}")

    async def _timer_task(self) -> None:
        timers = self._timers
        while True:
            self._timer_wakeup = trio.Event()
            deadline = timers.next_deadline()
            with trio.move_on_at(deadline):
                await self._timer_wakeup.wait()
            self._run_due_timers()

    def _drained(self) -> None:
        """A draining close has sent everything flushed before it: close for good."""
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def _lost(self, reason: str) -> None:
        self._set_close_reason(reason)
        log.debug("%s: %s", self, reason)
        if self._draining:
            self._drained()
        else:
            self._close(drain=False)

    def __str__(self) -> str:
        if self._remote is None:
            return f"channel #{self.id}"
        return f"channel #{self.id} ({format_address(self._remote)})"
