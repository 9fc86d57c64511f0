"""The classic RocketMQ HA wire format: 8-byte offset reports, 12-byte transfer headers."""

from __future__ import annotations

import struct
from typing import Any

import attrs

from hanet.channel import (
    ChannelOutboundHandler,
    FileRegion,
    HandlerContext,
    ReadOnlyBuffer,
    WriteFuture,
)

from .._byte_to_message import ByteCursor, ByteToMessageDecoder
from .._errors import CorruptedFrameError
from .._length_field import LengthFieldBasedFrameDecoder
from .._message_to_message import MessageToMessageDecoder

__all__ = [
    "HEADER_SIZE",
    "REPORT_SIZE",
    "OffsetReport",
    "OffsetReportDecoder",
    "TransferFrame",
    "TransferFrameDecoder",
    "TransferFrameEncoder",
    "transfer_frame_decoder",
]

REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")
REPORT_SIZE = REPORT.size  # 8
HEADER_SIZE = HEADER.size  # 12


@attrs.frozen
class OffsetReport:
    """Slave to master: the slave's max physical offset (its request, then its acks)."""

    offset: int


@attrs.frozen
class TransferFrame:
    """Master to slave: commit log bytes at a physical offset; an empty body is a heartbeat.

    A :class:`~hanet.channel.ReadOnlyBuffer` body (bytes that stay as they are until sent, such
    as a view of a master's mapped commit log) is written by :class:`TransferFrameEncoder`
    without a copy; a :class:`~hanet.channel.FileRegion` body is sent from its file."""

    offset: int
    body: bytes | memoryview | ReadOnlyBuffer | FileRegion = b""

    @property
    def data(self) -> bytes | memoryview:
        """The body's bytes (the view of a :class:`~hanet.channel.ReadOnlyBuffer` body, the
        bytes of a :class:`~hanet.channel.FileRegion`)."""
        body = self.body
        if isinstance(body, ReadOnlyBuffer):
            return body.view
        if isinstance(body, FileRegion):
            return body.read()
        return body

    @property
    def is_heartbeat(self) -> bool:
        return len(self.body) == 0

    @property
    def end_offset(self) -> int:
        return self.offset + len(self.body)


class OffsetReportDecoder(ByteToMessageDecoder):
    """Decode 8-byte big-endian reports; of what one read holds, only the last complete report
    counts (as RocketMQ's master: ``pos - pos % 8``); a trailing partial one waits.

    Bad input: a negative offset is a :class:`CorruptedFrameError`.
    """

    def decode(self, ctx: HandlerContext, buf: ByteCursor, out: list[Any]) -> None:
        count = buf.readable // REPORT_SIZE
        if not count:
            return
        last = buf.pos + (count - 1) * REPORT_SIZE
        (offset,) = REPORT.unpack_from(buf.data, last)
        buf.pos += count * REPORT_SIZE
        if offset < 0:
            raise CorruptedFrameError(f"negative offset report: {offset}")
        out.append(OffsetReport(offset))


class TransferFrameDecoder(MessageToMessageDecoder[bytes | bytearray | memoryview]):
    """Turn a whole frame (header + body, from :func:`transfer_frame_decoder`) into a
    :class:`TransferFrame`; the body is a zero-copy view of the frame. Other messages pass
    through."""

    sharable = True

    def decode(
        self, ctx: HandlerContext, msg: bytes | bytearray | memoryview, out: list[Any]
    ) -> None:
        offset, size = HEADER.unpack_from(msg, 0)
        if offset < 0:
            raise CorruptedFrameError(f"negative transfer offset: {offset}")
        body = memoryview(msg)[HEADER_SIZE : HEADER_SIZE + size] if size else b""
        out.append(TransferFrame(offset, body))


def transfer_frame_decoder(batch_size: int = 32 * 1024) -> LengthFieldBasedFrameDecoder:
    """The frame decoder for transfers: body length at offset 8, 4 bytes, nothing stripped,
    at most ``HEADER_SIZE + batch_size`` bytes a frame (a longer one closes the connection).

    Frames are read-only views (``views=True``): a frame received within one read is a view of
    the channel's receive buffer, so the body is copied once, into the mapped file."""
    return LengthFieldBasedFrameDecoder(HEADER_SIZE + batch_size, 8, 4, views=True)


class TransferFrameEncoder(ChannelOutboundHandler):
    """Write a :class:`TransferFrame` as its 12-byte header then its body (two messages, so
    the body is not copied by the encoder; the outbound buffer sends them together). A
    :class:`~hanet.channel.ReadOnlyBuffer` or :class:`~hanet.channel.FileRegion` body is passed
    on as it is: the channel sends it without its snapshot copy, or from its file."""

    sharable = True

    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        if not isinstance(msg, TransferFrame):
            ctx.write(msg, future)
            return
        size = len(msg.body)
        header = HEADER.pack(msg.offset, size)
        if size:
            ctx.write(header)
            ctx.write(msg.body, future)
        else:
            ctx.write(header, future)
