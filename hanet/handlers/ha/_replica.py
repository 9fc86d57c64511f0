"""The slave side of HA: verify each frame's offset, replay it, report progress."""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import Any, Protocol

from hanet.channel import ChannelInboundHandler, HandlerContext

from .._idle import IdleState, IdleStateEvent
from .._simple import SimpleChannelInboundHandler
from ._codec import REPORT, TransferFrame

__all__ = [
    "CommitLogReplayHandler",
    "OffsetReporter",
    "OffsetVerifier",
    "ReplicaLog",
]

log = logging.getLogger("hanet.ha.slave")

# A commit log record's TOTALSIZE and MAGICCODE, and the magic of the blank record that fills
# the end of every file (protocol §3.2; the same value as
# ``hanet.store.lowlevel.BLANK_MAGIC``, which handlers may not import).
_PREFIX = struct.Struct(">iI")
BLANK_MAGIC = 0xCBD43194

BATCH_BYTES = 4 * 1024 * 1024
"""Frame bytes a :class:`CommitLogReplayHandler` lets wait for the end of a read at most."""


class ReplicaLog(Protocol):
    """What the slave's handlers need of a commit log (``hanet.store.CommitLogStore`` is one)."""

    @property
    def max_offset(self) -> int: ...

    @property
    def validated_offset(self) -> int: ...

    def append_raw(
        self, offset: int, data: bytes | bytearray | memoryview, *, dispatch: bool = True
    ) -> None: ...

    def truncate_to(self, offset: int) -> None: ...

    @property
    def dispatch_error(self) -> Exception | None: ...


class OffsetVerifier(ChannelInboundHandler):
    """Every frame's offset (heartbeats included) must equal the local max offset, unless the
    local log is empty (max offset 0: a new slave accepts any start). Otherwise the mismatch is
    logged with both values and the channel closed, so the slave reconnects and reports again.
    Once the channel is closing (this or a later handler refused a frame), the frames still
    decoded from the same read are dropped: none of them may reach the log.

    Within one read, the frames passed on before count as if already in the log (a
    :class:`CommitLogReplayHandler` applies a read's frames together when the read is
    complete): a frame must continue the one before it.
    """

    def __init__(self, replica: ReplicaLog) -> None:
        self.replica = replica
        self.frames = 0  # frames received (heartbeats included)
        self._next: int | None = None  # where the next frame of this read must start

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if isinstance(msg, TransferFrame):
            self.frames += 1
            if not ctx.channel.is_open:
                return  # closing after a bad frame: later frames of the same read are dropped
            expected = self._next
            local = self.replica.max_offset if expected is None else expected
            if msg.offset != local and (expected is not None or local != 0):
                # (an empty slave accepts any start)
                reason = (
                    "master pushed offset not equal the max phy offset in slave, "
                    f"SLAVE: {local} MASTER: {msg.offset}"
                )
                log.warning("%s: %s", ctx.channel, reason)
                ctx.close(reason)
                return
            self._next = msg.offset + len(msg.body)
        ctx.fire_channel_read(msg)

    def channel_read_complete(self, ctx: HandlerContext) -> None:
        self._next = None  # the next read is checked against the log again
        ctx.fire_channel_read_complete()


class CommitLogReplayHandler(SimpleChannelInboundHandler[TransferFrame]):
    """Append each transfer's body at its offset; the log validates the records before it
    keeps them. A record that fails validation (``append_raw`` then keeps only the records
    before it, and ``dispatch_error`` says why) is logged as an ERROR with its offset and
    reason and closes the channel: the slave reconnects reporting that offset (the master
    never inspects what it pushes). Frames are passed on after they were applied.

    The frames of one read are applied together when the read is complete
    (``channel_read_complete``; a heartbeat frame, or :data:`BATCH_BYTES` waiting, apply them
    earlier): one validation and one write for the lot instead of one per frame, which made
    a replicating slave's event loop about a quarter faster. Place an :class:`OffsetVerifier`
    before it: it checks that each frame continues the one before.

    When the channel becomes active, bytes of a partial record left past the validated offset
    by an earlier connection are dropped, so the offset reported is where the log ends.

    With ``file_size`` (the slave's commit log file size) it also checks that the master's
    files are the same size, as far as the stream shows: a master never sends a frame across
    its own file end, and ends every file with a blank record followed by zeros. So a frame
    across one of the slave's file ends, or such a blank tail that does not end a slave file,
    means the files differ (a ``--mapped-file-size`` mismatch, protocol §1.2). Nothing of that
    frame is kept, the reason is logged as an ERROR and passed to ``on_file_size_mismatch``
    (which should stop the slave: reconnecting cannot help), and the channel is closed.

    With ``defer_dispatch`` the records are appended with ``dispatch=False``: validated and
    copied only, their consume queue dispatch left to a later ``replica.dispatch()`` (the
    slave runs it after the report, see :class:`OffsetReporter`'s ``on_report``).
    """

    def __init__(
        self,
        replica: ReplicaLog,
        file_size: int | None = None,
        on_file_size_mismatch: Callable[[str], None] | None = None,
        *,
        defer_dispatch: bool = False,
    ) -> None:
        super().__init__()
        self.replica = replica
        self.file_size = file_size
        self.on_file_size_mismatch = on_file_size_mismatch
        self.defer_dispatch = defer_dispatch
        self._batch: list[TransferFrame] = []  # frames of this read, contiguous, not applied
        self._batch_bytes = 0
        self._joined = bytearray()  # where a batch of several frames is joined

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

    def channel_read0(self, ctx: HandlerContext, msg: TransferFrame) -> None:
        if not ctx.channel.is_open:
            return  # closing after a bad frame
        if msg.is_heartbeat:
            if self._apply(ctx):
                ctx.fire_channel_read(msg)
            return
        size = self.file_size
        if size is not None:
            file_end = msg.offset - msg.offset % size + size
            if msg.end_offset > file_end:
                if self._apply(ctx):  # the frames before it are fine
                    self._file_size_mismatch(
                        ctx,
                        f"the master sent [{msg.offset}, {msg.end_offset}) in one frame, across "
                        f"this slave's file end at {file_end}: a master never sends across its "
                        "own file end, so its files are larger",
                    )
                return
        batch = self._batch
        if batch and batch[-1].end_offset != msg.offset and not self._apply(ctx):
            return  # (an OffsetVerifier before this handler makes them contiguous)
        self._batch.append(msg)
        self._batch_bytes += len(msg.body)
        if self._batch_bytes >= BATCH_BYTES:
            self._apply(ctx)

    def channel_read_complete(self, ctx: HandlerContext) -> None:
        self._apply(ctx)
        ctx.fire_channel_read_complete()

    def channel_inactive(self, ctx: HandlerContext) -> None:
        # Frames of a read cut short by the close (a later frame refused, the peer gone) are
        # whole and continue the log: kept, as a decoder passes on what it decoded at the end.
        self._apply(ctx)
        ctx.fire_channel_inactive()

    def _drop_batch(self) -> None:
        self._batch = []
        self._batch_bytes = 0

    def _apply(self, ctx: HandlerContext) -> bool:
        """Append the waiting frames (in one call), then pass them on; False (and the channel
        closing) when not all of them were kept."""
        batch = self._batch
        if not batch:
            return True
        self._drop_batch()
        if len(batch) == 1:
            kept = self._append(ctx, batch[0])
        else:
            total = batch[-1].end_offset - batch[0].offset
            joined = self._joined
            if len(joined) < total:
                # Grown, never shrunk: a buffer allocated (and faulted in) per read costs
                # more than the copy into it.
                joined = self._joined = bytearray(max(total, 2 * len(joined)))
            with memoryview(joined) as whole, whole[:total] as view:
                position = 0
                for each in batch:
                    data = each.data
                    end = position + len(data)
                    whole[position:end] = data
                    position = end
                kept = self._append(ctx, TransferFrame(batch[0].offset, view), batch)
        if kept:
            ctx.fire_channel_reads(batch)
        return kept

    def _append(
        self, ctx: HandlerContext, frame: TransferFrame, joined: list[TransferFrame] | None = None
    ) -> bool:
        """Append one frame (or the ``joined`` frames, as one)."""
        replica = self.replica
        replica.append_raw(frame.offset, frame.data, dispatch=not self.defer_dispatch)
        if replica.max_offset == frame.end_offset:
            return True
        # Not all kept: a bad record.
        ends = None if joined is None else frozenset(each.end_offset for each in joined)
        problem = self._misplaced_blank(frame, ends)
        if problem is not None:
            if replica.max_offset > frame.offset:
                replica.truncate_to(frame.offset)  # keep nothing of these frames
            self._file_size_mismatch(ctx, problem)
            return False
        reason = (
            f"replicated data failed validation: {replica.dispatch_error}; "
            f"the commit log ends at {replica.max_offset}"
        )
        log.error("%s: %s", ctx.channel, reason)
        ctx.close(reason)
        return False

    def _misplaced_blank(self, msg: TransferFrame, ends: frozenset[int] | None) -> str | None:
        """After a refused append: why, when the refused record is a blank record that ends
        somewhere other than a slave file end (the master's file end: sizes differ). ``msg``
        may be several frames joined, ending at ``ends``: the master's file end is one of
        them (it sends no frame across it), so the stream is seen up to there."""
        size = self.file_size
        error = getattr(self.replica.dispatch_error, "offset", None)
        if size is None or not isinstance(error, int):
            return None
        index = error - msg.offset
        if not 0 <= index <= len(msg.body) - _PREFIX.size:
            return None
        total, magic = _PREFIX.unpack_from(msg.data, index)
        if magic != BLANK_MAGIC or total <= 0:
            return None
        end = error + total
        file_end = error - error % size + size
        if end == file_end:
            return None
        # A master's blank tail is the blank header then zeros up to its file end, and no frame
        # goes past that end. Anything else is a damaged record, not another file size (at
        # least 8 zero bytes, or all of the tail, must be in sight to tell).
        seen = msg.end_offset
        if seen > end and ends is not None and end in ends:
            seen = end  # the frames after the master's file end are its next file
        if seen > end or seen < min(end, error + 2 * _PREFIX.size):
            return None
        tail = msg.data[index + _PREFIX.size : seen - msg.offset]
        if any(tail):
            return None
        guess = end & -end  # the largest power of two dividing the master's file end
        likely = f"; they are probably {guess} bytes" if guess != size and guess >= 1024 else ""
        return (
            f"a master file ends at offset {end} (a blank end-of-file record of {total} bytes at "
            f"{error}), not at this slave's file end {file_end}{likely}"
        )

    def _file_size_mismatch(self, ctx: HandlerContext, problem: str) -> None:
        size = self.file_size
        reason = (
            f"commit log file size mismatch: this slave's files are {size} bytes, the master's "
            f"are not ({problem}); start the slave with the master's --mapped-file-size "
            "(mappedFileSizeCommitLog) on an empty store"
        )
        log.error("%s: %s", ctx.channel, reason)
        if self.on_file_size_mismatch is not None:
            self.on_file_size_mismatch(reason)
        ctx.close(reason)


class OffsetReporter(ChannelInboundHandler):
    """Report the local validated offset (the end of the last complete valid record, never
    bytes that could still turn out invalid) to the master: at once when the channel becomes active,
    after each read batch that applied data, and on every writer-idle event (the heartbeat).
    A reader-idle event (nothing from the master for the housekeeping interval) closes.

    Place an ``IdleStateHandler(reader_idle=20, writer_idle=5)`` first in the pipeline.

    ``on_report`` is called after every report was written (the slave wakes its consume queue
    dispatch with it: dispatch runs behind the report, off the ack path).
    """

    def __init__(self, replica: ReplicaLog, on_report: Callable[[], None] | None = None) -> None:
        self.replica = replica
        self.on_report = on_report
        self._applied = False
        self.reports = 0
        self.last_offset: int | None = None  # the offset of the last report sent

    def report(self, ctx: HandlerContext) -> None:
        """Write and flush one report of the current validated offset."""
        self.reports += 1
        self.last_offset = self.replica.validated_offset
        ctx.write_and_flush(REPORT.pack(self.last_offset))
        if self.on_report is not None:
            self.on_report()

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
