"""LineBasedFrameDecoder: split a byte stream at ``\\n`` and ``\\r\\n`` (Netty's semantics)."""

from __future__ import annotations

from typing import Any

from hanet.channel import HandlerContext

from ._byte_to_message import ByteCursor, ByteToMessageDecoder
from ._errors import TooLongFrameError

__all__ = ["LineBasedFrameDecoder"]

_LF = 0x0A
_CR = 0x0D


class LineBasedFrameDecoder(ByteToMessageDecoder):
    """Emit each line as one ``bytes`` frame; a line ends at ``\\n`` or ``\\r\\n`` (a lone
    ``\\r`` is data). With ``strip_delimiter`` (the default) the line ending is cut off.

    Bytes are compared as bytes, so UTF-8 and ASCII text split correctly (UTF-8 never uses
    bytes below 0x80 inside a multi-byte character). Accepting a lone ``\\n`` is lenient: a
    protocol that requires ``\\r\\n`` (SMTP) should check the ending itself.

    Too-long lines (Netty's exact behaviour): a line longer than ``max_length`` (the ending
    not counted) is dropped with its ending, and a :class:`TooLongFrameError` ``frame length
    (<n>) exceeds the allowed maximum (<max>)`` is **fired** to the next handler's
    ``exception_caught`` (not raised: decoding goes on with the next line in the same read).
    When more than ``max_length`` bytes arrive with no line ending, they are discarded up to
    the next ending; with ``fail_fast`` the error (``frame length (over <n>) ...``) is fired at
    once, else when the ending arrives, with the whole line's length. A partial line left at
    close is dropped.

    Raises:
        ValueError: if ``max_length`` is not positive (Netty does not check it).
    """

    def __init__(
        self, max_length: int, strip_delimiter: bool = True, fail_fast: bool = False
    ) -> None:
        super().__init__()
        if max_length <= 0:
            raise ValueError(f"max_length must be a positive integer: {max_length}")
        self.max_length = max_length
        self.strip_delimiter = strip_delimiter
        self.fail_fast = fail_fast
        self._discarding = False
        self._discarded_bytes = 0
        self._offset = 0  # how far past buf.pos the last search got (no line ending there)

    def decode(self, ctx: HandlerContext, buf: ByteCursor, out: list[Any]) -> None:
        frame = self.decode_frame(ctx, buf)
        if frame is not None:
            out.append(frame)

    def decode_frame(self, ctx: HandlerContext, buf: ByteCursor) -> bytes | None:
        """Consume at most one line (or a stretch being discarded) from ``buf``; the line, or
        None."""
        data = buf.data
        pos = buf.pos
        eol = self._find_end_of_line(buf)
        if not self._discarding:
            if eol >= 0:
                length = eol - pos
                delim_length = 2 if data[eol] == _CR else 1
                if length > self.max_length:
                    buf.pos = eol + delim_length
                    self._fail(ctx, str(length))
                    return None
                end = eol if self.strip_delimiter else eol + delim_length
                frame = bytes(data[pos:end])
                buf.pos = eol + delim_length
                return frame
            length = len(data) - pos
            if length > self.max_length:
                self._discarded_bytes = length
                buf.pos = len(data)
                self._discarding = True
                self._offset = 0
                if self.fail_fast:
                    self._fail(ctx, f"over {length}")
            return None
        if eol >= 0:
            length = self._discarded_bytes + eol - pos
            delim_length = 2 if data[eol] == _CR else 1
            buf.pos = eol + delim_length
            self._discarded_bytes = 0
            self._discarding = False
            if not self.fail_fast:
                self._fail(ctx, str(length))
        else:
            self._discarded_bytes += len(data) - pos
            buf.pos = len(data)
            self._offset = 0
        return None

    def _find_end_of_line(self, buf: ByteCursor) -> int:
        """Index of the line ending (its ``\\r`` for ``\\r\\n``) in ``buf.data``, or -1; the
        search resumes where the last unsuccessful one stopped."""
        data = buf.data
        assert type(data) is bytearray, "zero_copy is not supported"
        total = len(data) - buf.pos
        i = data.find(b"\n", buf.pos + self._offset)
        if i >= 0:
            self._offset = 0
            if i > buf.pos and data[i - 1] == _CR:
                i -= 1
        else:
            self._offset = total
        return i

    def _fail(self, ctx: HandlerContext, length: str) -> None:
        ctx.fire_exception_caught(
            TooLongFrameError(
                f"frame length ({length}) exceeds the allowed maximum ({self.max_length})"
            )
        )
