"""DelimiterBasedFrameDecoder: split a byte stream at one or more delimiters (Netty's
semantics), and the usual delimiters."""

from __future__ import annotations

from typing import Any

from hanet.channel import HandlerContext

from ._byte_to_message import ByteCursor, ByteToMessageDecoder
from ._errors import TooLongFrameError
from ._line_based import LineBasedFrameDecoder

__all__ = ["DelimiterBasedFrameDecoder", "Delimiters"]


class Delimiters:
    """Frequently used delimiters (Netty's ``Delimiters``), to unpack into
    :class:`DelimiterBasedFrameDecoder`: ``DelimiterBasedFrameDecoder(8192,
    *Delimiters.line_delimiter())``."""

    @staticmethod
    def nul_delimiter() -> tuple[bytes, ...]:
        """``NUL`` (0x00), as Flash XML sockets use."""
        return (b"\x00",)

    @staticmethod
    def line_delimiter() -> tuple[bytes, ...]:
        """``\\r\\n`` and ``\\n``, for text lines."""
        return (b"\r\n", b"\n")


def _is_line_based(delimiters: tuple[bytes, ...]) -> bool:
    """Whether the delimiters are exactly ``\\r\\n`` and ``\\n`` (in either order)."""
    return len(delimiters) == 2 and set(delimiters) == {b"\r\n", b"\n"}


class DelimiterBasedFrameDecoder(ByteToMessageDecoder):
    """Emit the bytes before each delimiter as one ``bytes`` frame (Netty's
    ``DelimiterBasedFrameDecoder``); with ``strip_delimiter`` (the default) the delimiter is
    cut off, else kept at the end of the frame.

    When several delimiters are found, the one giving the shortest frame wins (``ABC\\nDEF\\r\\n``
    with the line delimiters gives ``ABC`` and ``DEF``). Exactly ``\\r\\n`` and ``\\n`` as the
    delimiters make an instance of this class (not of a subclass) decode as a
    :class:`LineBasedFrameDecoder` does, fired errors included (Netty's special case).

    Too-long frames: a frame longer than ``max_frame_length`` whose delimiter has arrived is
    skipped with it and :class:`TooLongFrameError` ``frame length exceeds <max>: <n> -
    discarded`` is raised (ending that read's decoding; the bytes after it wait for the next
    read). More than ``max_frame_length`` bytes without a delimiter are discarded up to the
    next delimiter; with ``fail_fast`` (the default) the error is raised at once, else when
    the delimiter arrives, with the frame's full length. A partial frame left at close is
    dropped.

    Raises:
        ValueError: if ``max_frame_length`` is not positive, no delimiter is given or one is
            empty.
    """

    def __init__(
        self,
        max_frame_length: int,
        *delimiters: bytes,
        strip_delimiter: bool = True,
        fail_fast: bool = True,
    ) -> None:
        super().__init__()
        if max_frame_length <= 0:
            raise ValueError(f"max_frame_length must be a positive integer: {max_frame_length}")
        if not delimiters:
            raise ValueError("delimiters is empty")
        self.max_frame_length = max_frame_length
        self.strip_delimiter = strip_delimiter
        self.fail_fast = fail_fast
        self._line_based: LineBasedFrameDecoder | None = None
        delims = tuple(bytes(d) for d in delimiters)
        if _is_line_based(delims) and type(self) is DelimiterBasedFrameDecoder:
            self._line_based = LineBasedFrameDecoder(max_frame_length, strip_delimiter, fail_fast)
        elif any(not d for d in delims):
            raise ValueError("empty delimiter")
        self.delimiters = delims
        self._discarding = False
        self._too_long_frame_length = 0

    def decode(self, ctx: HandlerContext, buf: ByteCursor, out: list[Any]) -> None:
        frame = self.decode_frame(ctx, buf)
        if frame is not None:
            out.append(frame)

    def decode_frame(self, ctx: HandlerContext, buf: ByteCursor) -> bytes | None:
        """Consume at most one frame (or a stretch being discarded) from ``buf``; the frame, or
        None."""
        if self._line_based is not None:
            return self._line_based.decode_frame(ctx, buf)
        data = buf.data
        assert type(data) is bytearray, "zero_copy is not supported"
        pos = buf.pos
        min_length = -1
        min_delim = b""
        for delim in self.delimiters:
            i = data.find(delim, pos)
            if i >= 0 and (min_length < 0 or i - pos < min_length):
                min_length = i - pos
                min_delim = delim
        if min_length >= 0:
            delim_length = len(min_delim)
            if self._discarding:
                # The end of a too-long frame: back to normal.
                self._discarding = False
                buf.pos = pos + min_length + delim_length
                too_long, self._too_long_frame_length = self._too_long_frame_length, 0
                if not self.fail_fast:
                    self._fail(too_long)
                return None
            if min_length > self.max_frame_length:
                buf.pos = pos + min_length + delim_length
                self._fail(min_length)
            end = pos + min_length + (0 if self.strip_delimiter else delim_length)
            frame = bytes(data[pos:end])
            buf.pos = pos + min_length + delim_length
            return frame
        readable = len(data) - pos
        if not self._discarding:
            if readable > self.max_frame_length:
                self._too_long_frame_length = readable
                buf.pos = len(data)
                self._discarding = True
                if self.fail_fast:
                    self._fail(readable)
        else:
            self._too_long_frame_length += readable
            buf.pos = len(data)
        return None

    def _fail(self, frame_length: int) -> None:
        raise TooLongFrameError(
            f"frame length exceeds {self.max_frame_length}: {frame_length} - discarded"
        )
