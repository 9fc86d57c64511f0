"""FixedLengthFrameDecoder: split a byte stream into frames of one fixed size."""

from __future__ import annotations

from typing import Any

from hanet.channel import HandlerContext

from ._byte_to_message import ByteCursor, ByteToMessageDecoder

__all__ = ["FixedLengthFrameDecoder"]


class FixedLengthFrameDecoder(ByteToMessageDecoder):
    """Emit every ``frame_length`` bytes as one ``bytes`` frame; a partial tail is dropped at
    close (Netty's semantics).

    Raises:
        ValueError: if ``frame_length`` is not positive.
    """

    def __init__(self, frame_length: int) -> None:
        super().__init__()
        if frame_length <= 0:
            raise ValueError(f"frame_length must be a positive integer: {frame_length}")
        self.frame_length = frame_length

    def decode(self, ctx: HandlerContext, buf: ByteCursor, out: list[Any]) -> None:
        size = self.frame_length
        data = buf.data
        pos = buf.pos
        end = len(data)
        with memoryview(data) as view:
            while end - pos >= size:
                out.append(view[pos : pos + size].tobytes())
                pos += size
                if self.single_decode:
                    break
        buf.pos = pos
