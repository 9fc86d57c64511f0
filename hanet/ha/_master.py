"""The HA master: accepts slaves, pushes commit log bytes, counts their acknowledgements.

Which bytes may be pushed, from where, is :class:`~hanet.ha.PushValidator`'s call
(``_push.py``, no IO); this module runs the connections and the transfer tasks."""

from __future__ import annotations

import logging
from collections import deque
from functools import partial
from typing import Any

import trio

from hanet.boot import AllowList, certificate_names, run_channel, serve
from hanet.channel import (
    ChannelConfig,
    ChannelInboundHandler,
    FileRegion,
    HandlerContext,
    ReadOnlyBuffer,
    StreamChannel,
    WaterMarks,
    WriteFuture,
    format_address,
)
from hanet.handlers import IdleState, IdleStateEvent, IdleStateHandler
from hanet.handlers.ha import OffsetReport, OffsetReportDecoder, TransferFrame, TransferFrameEncoder
from hanet.status import SlaveInfo
from hanet.store import (
    CommitLogStore,
    CorruptRecordError,
    PutStatus,
)

from ._config import BrokerConfig
from ._push import PushValidator
from ._status import MasterStatus
from ._sync import ReplicaWaiters

__all__ = ["HAMaster"]

log = logging.getLogger("hanet.ha.master")

# Larger water marks than the channel default: a burst of 32 KiB frames then leaves in
# coalesced 256 KiB sends instead of two frames at a time.
HA_CHANNEL_CONFIG = ChannelConfig(water_marks=WaterMarks(low=512 * 1024, high=1024 * 1024))
_RECENTLY_CLOSED = 16
_RATE_WINDOW = 5.0  # seconds the "speed" of a slave is measured over
# A diverged slave reconnects every few seconds: its ERROR is repeated at most this often.
_DIVERGENCE_LOG_INTERVAL = 60.0
_EMPTY = memoryview(b"")


class _SlaveConnection(ChannelInboundHandler):
    """One slave: its request and ack offsets, and the task that pushes data to it."""

    def __init__(self, master: HAMaster, channel: StreamChannel) -> None:
        self.master = master
        self.channel = channel
        peer = channel.remote_address
        self.address = format_address(peer) if peer else f"channel #{channel.id}"
        self.request_offset = -1
        self.ack_offset = -1
        self.next_offset = -1
        self.bytes_sent = 0
        self.state = "waiting for the first report"
        # What may be pushed (validated whole records, a file's blank tail); _pending holds
        # validated bytes read at next_offset and not sent yet (a view of the mapped commit log).
        self._push = PushValidator(master.store, self.address)
        self._pending = _EMPTY
        # sendfile needs the socket itself: plain TCP (TLS encrypts in user space)
        self._sendfile = master.config.ha_sendfile and type(channel.stream) is trio.SocketStream
        self._started = trio.current_time()
        self._rate_samples: deque[tuple[float, int]] = deque([(self._started, 0)])
        names = certificate_names(channel.stream)
        self.identity = names[0] if names else None
        self.replica = master.config.is_replica(names)
        """Whether this slave's acks count toward ``in_sync_replicas`` (mutual TLS with a
        replica pattern: only certificates that name a replica)."""

    # -- inbound: reports ---------------------------------------------------------------

    def channel_active(self, ctx: HandlerContext) -> None:
        log.info("slave %s connected", self.address)
        self.master._connections.add(self)
        ctx.fire_channel_active()

    def channel_inactive(self, ctx: HandlerContext) -> None:
        self.master._connections.discard(self)
        self._pending = _EMPTY  # a view of the mapped commit log: do not keep it alive
        reason = self.channel.close_reason or "closed"
        self.state = f"closed: {reason}"
        self.master._closed.append(self.status())
        log.info("slave %s closed (%s)", self.address, reason)
        self.master._ack_changed()
        ctx.fire_channel_inactive()

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if not isinstance(msg, OffsetReport):
            ctx.fire_channel_read(msg)
            return
        store = self.master.store
        offset = msg.offset
        if self.request_offset < 0:
            self._first_report(ctx, offset)
            return
        if offset > store.max_offset:
            self._refuse(ctx, f"ack {offset} is beyond the master's max offset {store.max_offset}")
            return
        if offset > self.ack_offset:
            self.ack_offset = offset
            self.master._ack_changed()

    def _first_report(self, ctx: HandlerContext, offset: int) -> None:
        store = self.master.store
        self.request_offset = offset
        low, high = store.min_offset, store.max_offset
        if offset == 0:
            if self.master.config.full_sync:
                start = low
            else:
                start = high - high % store.config.mapped_file_size
        elif low <= offset <= high:
            start = offset
            problem = self._push.check_boundary(offset, self.master.config.ha_transfer_batch_size)
            if problem is not None:
                self._refuse(ctx, f"request offset {offset} cannot be served: {problem}")
                return
        else:
            self._refuse_diverged(ctx, offset, low, high)
            return
        self.ack_offset = offset
        self.next_offset = start
        self._push.valid_end = max(self._push.valid_end, start)
        self._pending = _EMPTY
        self.state = "transferring"
        log.info("slave %s requests offset %d; transfer starts at %d", self.address, offset, start)
        self.master._ack_changed()
        ctx.spawn(self._transfer, ctx)

    def _refuse(self, ctx: HandlerContext, reason: str) -> None:
        log.warning("slave %s: %s; closing", self.address, reason)
        ctx.close(reason)

    def _refuse_diverged(self, ctx: HandlerContext, offset: int, low: int, high: int) -> None:
        """Refuse a first report outside ``[low, high]``: a slave that can never follow.

        Ahead (``offset > high``): the master lost or truncated data the slave still holds.
        Behind (``offset < low``): the master no longer has the data the slave needs next.
        The wire protocol has no error message, so the connection is closed without a frame
        (the slave notices it from that); the master's log and status are the authoritative
        word. The ERROR is logged once a minute per slave host and offset (the slave reconnects
        every few seconds), repeats at WARNING.
        """
        where = f"request offset {offset} is outside the master's [{low}, {high}]"
        if offset > high:
            advice = (
                f"the master's log ends at {high}, this slave's at {offset}: the slave is ahead "
                f"by {offset - high} bytes: it holds data this master lost (acknowledged "
                "messages, possibly); keep that copy: make the slave the master, or restart this "
                "master with `hanet master --repair-from SLAVE_BROKER_PORT` (it takes the lost "
                f"tail back from the slave, checked). Only if those bytes "
                f"were never acknowledged: `hanet slave --truncate-to {high}` (if the master took "
                "no puts since it lost its tail) or `hanet slave --resync` throw them away to "
                "follow this master"
            )
        else:
            advice = (
                f"the master's log starts at {low}, this slave's ends at {offset}: the slave is "
                f"behind the master's oldest data by {low - offset} bytes; run "
                "`hanet slave --resync` to start over"
            )
        reason = f"diverged: {where}: {advice}"
        self.master._log_divergence(self.address, offset, reason)
        ctx.close(reason)

    def user_event_triggered(self, ctx: HandlerContext, event: object) -> None:
        if isinstance(event, IdleStateEvent) and event.state is IdleState.READER_IDLE:
            idle = self.master.config.ha_housekeeping_interval
            ctx.close(f"housekeeping: no report for {idle:g} s")
            return
        ctx.fire_user_event_triggered(event)

    # -- outbound: the transfer task ---------------------------------------------------------

    async def _transfer(self, ctx: HandlerContext) -> None:
        master = self.master
        store = master.store
        config = master.config
        batch = config.ha_transfer_batch_size
        cap = config.ha_max_bytes_per_second
        channel = self.channel
        last_sent = trio.current_time()
        last_write: WriteFuture | None = None
        while True:
            sent = 0
            while channel.is_writable and self.next_offset < store.max_offset:
                try:
                    body = self._next_body(batch)
                except CorruptRecordError as exc:
                    await self._stop_at_corrupt_record(ctx, exc, last_write)
                    return
                if not body:
                    break
                last_write = ctx.write(TransferFrame(self.next_offset, self._payload(body)))
                self.next_offset += len(body)
                sent += len(body)
                if cap is not None:
                    break  # one frame at a time, paced below
            if sent:
                ctx.flush()
                self.bytes_sent += sent
                last_sent = trio.current_time()
                if cap is not None:
                    await trio.sleep(sent / cap)
                else:
                    await trio.lowlevel.checkpoint()
                continue
            if not channel.is_writable:
                await channel.wait_writable()
                continue
            new_data = master._new_data
            with trio.move_on_at(last_sent + config.ha_send_heartbeat_interval):
                await new_data.wait()
                continue
            ctx.write_and_flush(TransferFrame(self.next_offset, b""))
            last_sent = trio.current_time()

    def _payload(self, body: memoryview) -> ReadOnlyBuffer | FileRegion:
        """What carries ``body`` (validated bytes at :attr:`next_offset`): on plain TCP a
        region of its commit log file, sent with ``sendfile`` (``ha_sendfile``); else the view
        of the mapping itself, sent without a copy (bytes written on a master never change)."""
        if self._sendfile:
            try:
                fd, position = self.master.store.file_position(self.next_offset)
            except ValueError:  # its file closed meanwhile (retention): the view still reads
                return ReadOnlyBuffer(body)
            return FileRegion.of(fd, position, body.nbytes, body)
        return ReadOnlyBuffer(body)

    def _next_body(self, batch: int) -> memoryview:
        """At most ``batch`` validated bytes at :attr:`next_offset` (empty: none yet)."""
        if not self._pending:
            self._pending = self._push.validate(self.next_offset, batch)
        body = self._pending[:batch]
        self._pending = self._pending[batch:]
        return body

    async def _stop_at_corrupt_record(
        self, ctx: HandlerContext, exc: CorruptRecordError, last_write: WriteFuture | None
    ) -> None:
        """Never push a bad record: let the valid bytes already written go out, then close.
        The bad bytes are marked damaged in the store (named in status, refused, repairable
        from a slave that holds them)."""
        reason = f"corrupt record at offset {exc.offset}: {exc.reason}"
        damaged = self.master.store.mark_damaged(exc.offset, exc.reason)
        if damaged is not None and str(damaged) not in reason:
            reason += f" (damaged range {damaged})"
        log.error(
            "slave %s: %s; the master's commit log is damaged there, transfer stopped at %d",
            self.address,
            reason,
            self.next_offset,
        )
        self.state = f"stopping: {reason}"
        ctx.flush()
        if last_write is not None:
            with trio.move_on_after(self.master.config.ha_housekeeping_interval):
                try:
                    await last_write
                except Exception:  # closed meanwhile: nothing more to do
                    pass
        ctx.close(reason)

    def recent_rate(self) -> float:
        """Bytes per second pushed over about the last :data:`_RATE_WINDOW` seconds."""
        now = trio.current_time()
        samples = self._rate_samples
        samples.append((now, self.bytes_sent))
        while len(samples) > 2 and samples[1][0] <= now - _RATE_WINDOW:
            samples.popleft()
        then, sent = samples[0]
        return (self.bytes_sent - sent) / max(now - then, 1e-9)

    def status(self) -> SlaveInfo:
        max_offset = self.master.store.max_offset
        return SlaveInfo(
            address=self.address,
            state=self.state,
            request_offset=self.request_offset,
            ack_offset=self.ack_offset,
            next_offset=self.next_offset,
            lag_bytes=max(max_offset - max(self.ack_offset, 0), 0),
            bytes_sent=self.bytes_sent,
            bytes_per_second=self.recent_rate(),
            identity=self.identity,
            replica=self.replica,
        )


class HAMaster:
    """Serve slaves from a commit log store (RocketMQ's ``HAService`` on the master).

    Puts wake every transfer task at once through a store listener (no polling). A SYNC put
    waits with :meth:`wait_for_replicas`. Each slave connection is a channel whose pipeline is
    ``OffsetReportDecoder`` -> ``IdleStateHandler(reader_idle=housekeeping)`` -> the ack handler,
    with ``TransferFrameEncoder`` for the frames pushed; the idle handler sits after the decoder so
    that only complete reports count as life. A connection's failure closes only it.
    """

    def __init__(self, store: CommitLogStore, config: BrokerConfig) -> None:
        self.store = store
        self.config = config
        self._connections: set[_SlaveConnection] = set()
        self._closed: deque[SlaveInfo] = deque(maxlen=_RECENTLY_CLOSED)
        self._waiters = ReplicaWaiters()
        self._new_data = trio.Event()
        self.address: tuple[str, int] | None = None
        # (slave host, request offset) -> when its divergence was last logged at ERROR
        self._divergence_logged: dict[tuple[str, int], float] = {}
        store.add_listener(self._on_new_data)

    def _log_divergence(self, address: str, offset: int, reason: str) -> None:
        """ERROR once per :data:`_DIVERGENCE_LOG_INTERVAL` per slave host and request offset
        (the port changes on every reconnect), WARNING for the repeats in between."""
        host = address.rpartition(":")[0] if ":" in address else "(no address)"
        key = (host, offset)
        now = trio.current_time()
        last = self._divergence_logged.get(key)
        if last is None or now - last >= _DIVERGENCE_LOG_INTERVAL:
            self._divergence_logged[key] = now
            if len(self._divergence_logged) > 1024:  # forget the oldest
                oldest = min(self._divergence_logged, key=self._divergence_logged.__getitem__)
                del self._divergence_logged[oldest]
            log.error("slave %s: %s; closing", address, reason)
        else:
            log.warning("slave %s (again): %s; closing", address, reason)

    def _on_new_data(self, max_offset: int) -> None:
        # A sender takes the event and waits on it at once (no checkpoint in between): with
        # nobody waiting, the unset event is as good as a new one (one less per put). Senders
        # run only for connected slaves: with none, nothing is asked of the event.
        if self._connections and self._new_data.statistics().tasks_waiting:
            self._new_data.set()
            self._new_data = trio.Event()

    def initialize(self, channel: StreamChannel) -> None:
        """Build a slave connection's pipeline (the channel initializer)."""
        pipeline = channel.pipeline
        pipeline.add_last(TransferFrameEncoder(), "transfer-encoder")
        pipeline.add_last(OffsetReportDecoder(), "report-decoder")
        # After the decoder: only a complete report counts as a read. Bytes that never make a
        # report (one byte every 15 s) do not keep the connection alive.
        pipeline.add_last(
            IdleStateHandler(reader_idle=self.config.ha_housekeeping_interval), "housekeeping"
        )
        pipeline.add_last(_SlaveConnection(self, channel), "slave")

    async def serve(
        self, *, task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Accept slaves on ``config.ha_listen_host:ha_listen_port`` until cancelled; reports
        the bound address (port 0 picks a free port)."""
        allow = self.config.ha_allow
        async with trio.open_nursery() as nursery:
            server = await nursery.start(
                partial(
                    serve,
                    self.initialize,
                    self.config.ha_listen_port,
                    host=self.config.ha_listen_host,
                    config=HA_CHANNEL_CONFIG,
                    tls=self.config.server_tls(),
                    allow=AllowList.parse(allow) if allow else None,
                    name="HA port",
                    max_partial_bytes=self.config.max_partial_bytes,
                )
            )
            self.address = server.addresses[0]
            log.info("HA master listening on %s", format_address(self.address))
            task_status.started(self.address)

    async def handle_stream(self, stream: trio.abc.Stream) -> None:
        """Run one slave connection over ``stream`` until it closes (tests use memory
        streams)."""
        await run_channel(stream, self.initialize, config=HA_CHANNEL_CONFIG)

    # -- acknowledgements ----------------------------------------------------------------------

    def _healthy(self) -> list[_SlaveConnection]:
        max_offset = self.store.max_offset
        limit = self.config.ha_slave_fallbehind_max
        return [
            c
            for c in self._connections
            if c.replica and c.ack_offset >= 0 and max_offset - c.ack_offset < limit
        ]

    def _ack_changed(self) -> None:
        needed = self.config.in_sync_replicas - 1
        if needed <= 0:
            return
        acks = sorted(
            (c.ack_offset for c in self._connections if c.replica and c.ack_offset >= 0),
            reverse=True,
        )
        if len(acks) >= needed:
            self._waiters.advance(acks[needed - 1])

    async def wait_for_replicas(self, end_offset: int) -> PutStatus:
        """SYNC_MASTER: wait until ``in_sync_replicas - 1`` slaves acknowledged ``end_offset``.

        PUT_OK when they did; SLAVE_NOT_AVAILABLE at once when fewer healthy slaves (connected,
        within ``ha_slave_fallbehind_max``) than needed are connected; FLUSH_SLAVE_TIMEOUT after
        ``slave_timeout``. The message stays stored on the master in every case.
        """
        needed = self.config.in_sync_replicas - 1
        if needed <= 0:
            await trio.lowlevel.checkpoint()
            return PutStatus.PUT_OK
        if len(self._healthy()) < needed:
            await trio.lowlevel.checkpoint()
            return PutStatus.SLAVE_NOT_AVAILABLE
        with trio.move_on_after(self.config.slave_timeout):
            await self._waiters.wait(end_offset)
            return PutStatus.PUT_OK
        return PutStatus.FLUSH_SLAVE_TIMEOUT

    def status(self) -> MasterStatus:
        """Offsets and per-slave state (connected ones, then recently closed ones)."""
        return MasterStatus(
            min_offset=self.store.min_offset,
            max_offset=self.store.max_offset,
            replicated_offset=self._waiters.replicated_offset,
            slaves=tuple(sorted((c.status() for c in self._connections), key=lambda s: s.address)),
            closed=tuple(self._closed),
        )
