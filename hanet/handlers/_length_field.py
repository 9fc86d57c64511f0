"""Length-field framing: Netty's ``LengthFieldBasedFrameDecoder`` and ``LengthFieldPrepender``."""

from __future__ import annotations

import struct
from typing import Any, Literal

from hanet.channel import ChannelOutboundHandler, HandlerContext, WriteFuture

from ._byte_to_message import ByteCursor, ByteToMessageDecoder
from ._errors import CorruptedFrameError, EncoderError, TooLongFrameError

__all__ = ["LengthFieldBasedFrameDecoder", "LengthFieldPrepender"]

Byteorder = Literal["big", "little"]
_FIELD_LENGTHS = (1, 2, 3, 4, 8)
_INT64 = 1 << 64


def _field_struct(length: int, byteorder: Byteorder) -> struct.Struct | None:
    code = {1: "B", 2: "H", 4: "I", 8: "q"}.get(length)
    if code is None:
        return None  # 3 bytes: int.from_bytes
    return struct.Struct((">" if byteorder == "big" else "<") + code)


class LengthFieldBasedFrameDecoder(ByteToMessageDecoder):
    """Split a byte stream into frames by a length field in each frame's header.

    Netty's semantics exactly (see docs/netty.md §1): the frame length is ``field value +
    length_adjustment + length_field_offset + length_field_length`` bytes from the frame's first
    byte; 1, 2, 3 and 4-byte fields are unsigned, 8-byte fields signed; ``initial_bytes_to_strip``
    bytes are removed from the front of each frame.

    Frames come out as ``bytes``. Reads are decoded in place (``zero_copy``): only a frame that
    spans reads is cumulated, with just the bytes it needs of the read that completes it, and
    the rest of that read is again decoded in place. With ``views``, frames come out as
    read-only memoryviews instead (Netty's retained slices): a frame received within one read
    is then a view of the received bytes, no copy at all (a channel never overwrites bytes it
    handed out, so a view stays valid as long as it is kept, and keeps the read's buffer alive
    as long); a frame that spans reads is a view of its one copy.

    Bad input: a negative or too-short length skips the header and raises
    :class:`CorruptedFrameError`; a frame longer than ``max_frame_length`` (a frame of exactly
    that length is accepted) is discarded, across as many reads as it takes, and raises one
    :class:`TooLongFrameError`: as soon as its header is seen with ``fail_fast``, after its last
    byte was discarded without. Frames decoded before an error are delivered first.

    Deliberate difference from Netty: when ``initial_bytes_to_strip`` exceeds a frame's length
    and the frame's header arrived in an earlier read than its end, Netty reports length 0,
    skips nothing and throws on every later read (the decoder is stuck). Here that frame is
    skipped, the real length is reported, and decoding goes on.

    Raises:
        ValueError: for a bad argument, including a length field width not in 1, 2, 3, 4, 8.
    """

    zero_copy = True

    def __init__(
        self,
        max_frame_length: int,
        length_field_offset: int,
        length_field_length: int,
        length_adjustment: int = 0,
        initial_bytes_to_strip: int = 0,
        fail_fast: bool = True,
        byteorder: Byteorder = "big",
        *,
        views: bool = False,
    ) -> None:
        super().__init__()
        if byteorder not in ("big", "little"):
            raise ValueError(f"byteorder must be 'big' or 'little': {byteorder!r}")
        if max_frame_length <= 0:
            raise ValueError(f"max_frame_length : {max_frame_length} (expected: > 0)")
        if length_field_offset < 0:
            raise ValueError(f"length_field_offset : {length_field_offset} (expected: >= 0)")
        if initial_bytes_to_strip < 0:
            raise ValueError(f"initial_bytes_to_strip : {initial_bytes_to_strip} (expected: >= 0)")
        if length_field_length not in _FIELD_LENGTHS:
            raise ValueError(
                f"unsupported length_field_length: {length_field_length} "
                "(expected: 1, 2, 3, 4, or 8)"
            )
        if length_field_offset > max_frame_length - length_field_length:
            raise ValueError(
                f"max_frame_length ({max_frame_length}) must be equal to or greater than "
                f"length_field_offset ({length_field_offset}) + length_field_length "
                f"({length_field_length})."
            )
        self.max_frame_length = max_frame_length
        self.length_field_offset = length_field_offset
        self.length_field_length = length_field_length
        self.length_adjustment = length_adjustment
        self.initial_bytes_to_strip = initial_bytes_to_strip
        self.fail_fast = fail_fast
        self.byteorder: Byteorder = byteorder
        self.views = views
        self._end_offset = length_field_offset + length_field_length
        self._struct = _field_struct(length_field_length, byteorder)
        self._frame_length = -1
        self._discarding = False
        self._bytes_to_discard = 0
        self._too_long_frame_length = 0

    def bytes_wanted(self, buf: ByteCursor) -> int:
        """The bytes the cumulated partial frame (or its header, or a frame being discarded)
        still needs."""
        if self._discarding:
            return self._bytes_to_discard
        if self._frame_length >= 0:
            return self._frame_length - buf.readable
        return self._end_offset - buf.readable

    def _unadjusted_length(self, data: bytearray | memoryview, pos: int) -> int:
        if self._struct is not None:
            value: int = self._struct.unpack_from(data, pos)[0]
            return value
        return int.from_bytes(data[pos : pos + 3], self.byteorder)

    def decode(self, ctx: HandlerContext, buf: ByteCursor, out: list[Any]) -> None:
        data = buf.data
        n = len(data)
        pos = buf.pos
        end_offset = self._end_offset
        field_pos = self.length_field_offset
        adjustment = self.length_adjustment
        strip = self.initial_bytes_to_strip
        max_length = self.max_frame_length
        unpack_from = self._struct.unpack_from if self._struct is not None else None
        single = self.single_decode
        borrowed = type(data) is memoryview  # received bytes, decoded in place
        views = self.views
        view = data if type(data) is memoryview else memoryview(data)
        try:
            while True:
                frame_length = self._frame_length
                if frame_length < 0:
                    if self._discarding:
                        skip = min(self._bytes_to_discard, n - pos)
                        pos += skip
                        buf.pos = pos
                        self._bytes_to_discard -= skip
                        self._fail_if_necessary(first=False)
                        if self._discarding:
                            return
                    if n - pos < end_offset:
                        return
                    if unpack_from is not None:
                        value: int = unpack_from(data, pos + field_pos)[0]
                    else:
                        value = self._unadjusted_length(data, pos + field_pos)
                    if value < 0:
                        buf.pos = pos + end_offset
                        raise CorruptedFrameError(f"negative pre-adjustment length field: {value}")
                    frame_length = value + adjustment + end_offset
                    if self.length_field_length == 8 and not -(1 << 63) <= frame_length < 1 << 63:
                        # Java's long arithmetic wraps, so does the check below (netty.md 1.6-c)
                        frame_length = (frame_length + (1 << 63)) % _INT64 - (1 << 63)
                    if frame_length < end_offset:
                        buf.pos = pos + end_offset
                        raise CorruptedFrameError(
                            f"Adjusted frame length ({frame_length}) is less than "
                            f"lengthFieldEndOffset: {end_offset}"
                        )
                    if frame_length > max_length:
                        discard = frame_length - (n - pos)
                        self._too_long_frame_length = frame_length
                        if discard < 0:
                            pos += frame_length
                        else:
                            self._discarding = True
                            self._bytes_to_discard = discard
                            pos = n
                        buf.pos = pos
                        self._fail_if_necessary(first=True)
                        return
                    self._frame_length = frame_length
                if n - pos < frame_length:
                    return
                self._frame_length = -1
                if strip > frame_length:
                    buf.pos = pos + frame_length
                    raise CorruptedFrameError(
                        f"Adjusted frame length ({frame_length}) is less than "
                        f"initialBytesToStrip: {strip}"
                    )
                if not views:
                    out.append(view[pos + strip : pos + frame_length].tobytes())
                elif borrowed:
                    out.append(view[pos + strip : pos + frame_length])
                else:  # no slice of the cumulation may outlive this call (it is resized)
                    out.append(memoryview(view[pos + strip : pos + frame_length].tobytes()))
                pos += frame_length
                buf.pos = pos
                if single:
                    return
        finally:
            if not borrowed:
                view.release()

    def _fail_if_necessary(self, *, first: bool) -> None:
        if self._bytes_to_discard == 0:
            too_long = self._too_long_frame_length
            self._too_long_frame_length = 0
            self._discarding = False
            if not self.fail_fast or first:
                self._fail(too_long)
        elif self.fail_fast and first:
            self._fail(self._too_long_frame_length)

    def _fail(self, frame_length: int) -> None:
        raise TooLongFrameError(
            f"Adjusted frame length exceeds {self.max_frame_length}: {frame_length} - discarded"
        )


class LengthFieldPrepender(ChannelOutboundHandler):
    """Prepend a length field to each bytes-like message written (Netty's semantics).

    The field holds ``len(msg) + length_adjustment`` (plus the field's own width when
    ``length_includes_length_field_length``). The header and the payload are written as two
    messages; the payload's future is the write's future. Other messages pass through.

    Bad input: a length that is negative or does not fit the field fails the write with
    :class:`EncoderError`.

    Raises:
        ValueError: for a field width not in 1, 2, 3, 4, 8 or a bad byteorder.
    """

    sharable = True

    def __init__(
        self,
        length_field_length: int,
        length_adjustment: int = 0,
        length_includes_length_field_length: bool = False,
        byteorder: Byteorder = "big",
    ) -> None:
        if length_field_length not in _FIELD_LENGTHS:
            raise ValueError(
                f"length_field_length must be either 1, 2, 3, 4, or 8: {length_field_length}"
            )
        if byteorder not in ("big", "little"):
            raise ValueError(f"byteorder must be 'big' or 'little': {byteorder!r}")
        self.length_field_length = length_field_length
        self.length_adjustment = length_adjustment
        self.length_includes_length_field_length = length_includes_length_field_length
        self.byteorder: Byteorder = byteorder
        self._extra = length_adjustment + (
            length_field_length if length_includes_length_field_length else 0
        )
        self._limit = 1 << (8 * length_field_length) if length_field_length < 4 else None

    def encode_header(self, payload_length: int) -> bytes:
        """The length field for a payload of ``payload_length`` bytes."""
        length = payload_length + self._extra
        if length < 0:
            raise EncoderError(f"length : {length} (expected: >= 0)")
        if self._limit is not None and length >= self._limit:
            kind = {1: "a byte", 2: "a short integer", 3: "a medium integer"}
            raise EncoderError(
                f"length does not fit into {kind[self.length_field_length]}: {length}"
            )
        return length.to_bytes(self.length_field_length, self.byteorder, signed=False)

    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        if not isinstance(msg, bytes | bytearray | memoryview):
            ctx.write(msg, future)
            return
        size = msg.nbytes if isinstance(msg, memoryview) else len(msg)
        header = self.encode_header(size)
        ctx.write(header)
        ctx.write(msg, future)
