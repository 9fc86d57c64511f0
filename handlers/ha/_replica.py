"""The slave side of HA: verify each frame's offset, replay it, report progress."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from hanet.channel import ChannelInboundHandler, HandlerContext

from .._idle import IdleState, IdleStateEvent
from ._codec import REPORT, TransferFrame

__all__ = [
    "CommitLogReplayHandler",
    "OffsetReporter",
    "OffsetVerifier",
    "ReplicaLog",
]

log = logging.getLogger("hanet.ha.slave")


class ReplicaLog(Protocol):
    """What the slave's handlers need of a commit log (``hanet.store.CommitLogStore`` is one)."""

    @property
    def max_offset(self) -> int: ...

    @property
    def validated_offset(self) -> int: ...

    def append_raw(self, offset: int, data: bytes | bytearray | memoryview) -> None: ...

    def truncate_to(self, offset: int) -> None: ...

    @property
    def dispatch_error(self) -> Exception | None: ...


class OffsetVerifier(ChannelInboundHandler):
    """Every frame's offset (heartbeats included) must equal the local max offset, unless the
    local log is empty (max offset 0: a new slave accepts any start). Otherwise the mismatch is
    logged with both values and the channel closed, so the slave reconnects and reports again.
    Once the channel is closing (this or a later handler refused a frame), the frames still
    decoded from the same read are dropped: none of them may reach the log.
    """

    def __init__(self, replica: ReplicaLog) -> None:
        self.replica = replica

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if isinstance(msg, TransferFrame):
            if not ctx.channel.is_open:
                return  # closing after a bad frame: later frames of the same read are dropped
            local = self.replica.max_offset
            if local not in (0, msg.offset):  # an empty slave accepts any start
                reason = (
                    "master pushed offset not equal the max phy offset in slave, "
                    f"SLAVE: {local} MASTER: {msg.offset}"
                )
                log.warning("%s: %s", ctx.channel, reason)
                ctx.close(reason)
                return
        ctx.fire_channel_read(msg)


class CommitLogReplayHandler(ChannelInboundHandler):
    """Append each transfer's body at its offset; the log validates the records before it
    keeps them. A record that fails validation (``append_raw`` then keeps only the records
    before it, and ``dispatch_error`` says why) is logged as an ERROR with its offset and
    reason and closes the channel: the slave reconnects reporting that offset (the master
    never inspects what it pushes). Frames are passed on after they were applied.

    When the channel becomes active, bytes of a partial record left past the validated offset
    by an earlier connection are dropped, so the offset reported is where the log ends.
    """

    def __init__(self, replica: ReplicaLog) -> None:
        self.replica = replica

    def channel_active(self, ctx: HandlerContext) -> None:
        replica = self.replica
        valid = replica.validated_offset
        if replica.max_offset > valid:
            log.info(
                "%s: dropping %d bytes of a partial record past offset %d",
                ctx.channel,
                replica.max_offset - valid,
                valid,
            )
            replica.truncate_to(valid)
        ctx.fire_channel_active()

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if isinstance(msg, TransferFrame) and not msg.is_heartbeat:
            if not ctx.channel.is_open:
                return  # closing after a bad frame
            replica = self.replica
            replica.append_raw(msg.offset, msg.body)
            if replica.max_offset != msg.offset + len(msg.body):  # not all kept: a bad record
                reason = (
                    f"replicated data failed validation: {replica.dispatch_error}; "
                    f"the commit log ends at {replica.max_offset}"
                )
                log.error("%s: %s", ctx.channel, reason)
                ctx.close(reason)
                return
        ctx.fire_channel_read(msg)


class OffsetReporter(ChannelInboundHandler):
    """Report the local validated offset (the end of the last complete valid record, never
    bytes that could still turn out invalid) to the master: at once when the channel becomes active,
    after each read batch that applied data, and on every writer-idle event (the heartbeat).
    A reader-idle event (nothing from the master for the housekeeping interval) closes.

    Place an ``IdleStateHandler(reader_idle=20, writer_idle=5)`` first in the pipeline.
    """

    def __init__(self, replica: ReplicaLog) -> None:
        self.replica = replica
        self._applied = False
        self.reports = 0

    def report(self, ctx: HandlerContext) -> None:
        """Write and flush one report of the current validated offset."""
        self.reports += 1
        ctx.write_and_flush(REPORT.pack(self.replica.validated_offset))

    def channel_active(self, ctx: HandlerContext) -> None:
        self.report(ctx)
        ctx.fire_channel_active()

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if isinstance(msg, TransferFrame) and not msg.is_heartbeat:
            self._applied = True
        ctx.fire_channel_read(msg)

    def channel_read_complete(self, ctx: HandlerContext) -> None:
        if self._applied:
            self._applied = False
            self.report(ctx)
        ctx.fire_channel_read_complete()

    def user_event_triggered(self, ctx: HandlerContext, event: object) -> None:
        if isinstance(event, IdleStateEvent):
            if event.state is IdleState.WRITER_IDLE:
                self.report(ctx)
                return
            if event.state is IdleState.READER_IDLE:
                reason = "housekeeping: nothing received from the master"
                log.warning("%s: %s, closing", ctx.channel, reason)
                ctx.close(reason)
                return
        ctx.fire_user_event_triggered(event)
