"""The HA master: accepts slaves, pushes commit log bytes, counts their acknowledgements."""

from __future__ import annotations

import logging
from collections import deque
from functools import partial
from typing import Any

import trio

from handlers import IdleState, IdleStateEvent, IdleStateHandler
from handlers.ha import OffsetReport, OffsetReportDecoder, TransferFrame, TransferFrameEncoder
from hanet.boot import run_channel, serve
from hanet.channel import (
    ChannelConfig,
    ChannelInboundHandler,
    HandlerContext,
    StreamChannel,
    WaterMarks,
    format_address,
)
from hanet.store import CommitLogStore, PutStatus

from ._config import BrokerConfig
from ._status import MasterStatus, SlaveConnectionStatus
from ._sync import ReplicaWaiters

__all__ = ["HAMaster"]

log = logging.getLogger("hanet.ha.master")

# Larger water marks than the channel default: a burst of 32 KiB frames then leaves in
# coalesced 256 KiB sends instead of two frames at a time.
HA_CHANNEL_CONFIG = ChannelConfig(water_marks=WaterMarks(low=512 * 1024, high=1024 * 1024))
_RECENTLY_CLOSED = 16


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
        self._started = trio.current_time()

    # -- inbound: reports ---------------------------------------------------------------

    def channel_active(self, ctx: HandlerContext) -> None:
        log.info("slave %s connected", self.address)
        self.master._connections.add(self)
        ctx.fire_channel_active()

    def channel_inactive(self, ctx: HandlerContext) -> None:
        self.master._connections.discard(self)
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
        else:
            self._refuse(ctx, f"request offset {offset} is outside the master's [{low}, {high}]")
            return
        self.ack_offset = offset
        self.next_offset = start
        self.state = "transferring"
        log.info("slave %s requests offset %d; transfer starts at %d", self.address, offset, start)
        self.master._ack_changed()
        ctx.spawn(self._transfer, ctx)

    def _refuse(self, ctx: HandlerContext, reason: str) -> None:
        log.warning("slave %s: %s; closing", self.address, reason)
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
        while True:
            sent = 0
            while channel.is_writable and self.next_offset < store.max_offset:
                body = store.read(self.next_offset, batch)
                if not body:
                    break
                ctx.write(TransferFrame(self.next_offset, body))
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

    def status(self) -> SlaveConnectionStatus:
        elapsed = max(trio.current_time() - self._started, 1e-9)
        max_offset = self.master.store.max_offset
        return SlaveConnectionStatus(
            address=self.address,
            state=self.state,
            request_offset=self.request_offset,
            ack_offset=self.ack_offset,
            next_offset=self.next_offset,
            lag_bytes=max(max_offset - max(self.ack_offset, 0), 0),
            bytes_sent=self.bytes_sent,
            bytes_per_second=self.bytes_sent / elapsed,
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
        self._closed: deque[SlaveConnectionStatus] = deque(maxlen=_RECENTLY_CLOSED)
        self._waiters = ReplicaWaiters()
        self._new_data = trio.Event()
        self.address: tuple[str, int] | None = None
        store.add_listener(self._on_new_data)

    def _on_new_data(self, max_offset: int) -> None:
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
        async with trio.open_nursery() as nursery:
            server = await nursery.start(
                partial(
                    serve,
                    self.initialize,
                    self.config.ha_listen_port,
                    host=self.config.ha_listen_host,
                    config=HA_CHANNEL_CONFIG,
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
            c for c in self._connections if c.ack_offset >= 0 and max_offset - c.ack_offset < limit
        ]

    def _ack_changed(self) -> None:
        needed = self.config.in_sync_replicas - 1
        if needed <= 0:
            return
        acks = sorted((c.ack_offset for c in self._connections if c.ack_offset >= 0), reverse=True)
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
