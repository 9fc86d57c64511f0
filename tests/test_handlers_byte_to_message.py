"""ByteToMessageDecoder and FixedLengthFrameDecoder against docs/netty.md §4's facts."""

from __future__ import annotations

from typing import Any

import pytest

from hanet import ChannelConfig, ChannelInboundHandler, HandlerContext
from hanet.handlers import (
    ByteCursor,
    ByteToMessageDecoder,
    DecoderError,
    FixedLengthFrameDecoder,
    LengthFieldBasedFrameDecoder,
)
from hanet.testing import EmbeddedChannel


def drain(ch: EmbeddedChannel) -> list[Any]:
    out = []
    while (msg := ch.read_inbound()) is not None:
        out.append(msg)
    return out


class RemoveSelfAfterOneByte(ByteToMessageDecoder):
    def decode(self, ctx: HandlerContext, buf: ByteCursor, out: list[Any]) -> None:
        buf.pos += 1
        ctx.pipeline.remove(self)


def test_b1_remove_itself_passes_on_the_rest() -> None:
    ch = EmbeddedChannel(RemoveSelfAfterOneByte())
    assert ch.write_inbound(b"abc")
    assert drain(ch) == [b"bc"]


def test_b3_b4_internal_buffer() -> None:
    ch = EmbeddedChannel(RemoveSelfAfterOneByte())
    assert not ch.write_inbound(b"a")
    assert not ch.finish()
    ch = EmbeddedChannel(RemoveSelfAfterOneByte())
    assert ch.write_inbound(b"ab")
    assert ch.finish()
    assert drain(ch) == [b"b"]


class Marker:
    pass


def test_b7_removed_by_the_next_handler_while_decoding() -> None:
    class OneByte(ByteToMessageDecoder):
        def decode(self, ctx: HandlerContext, buf: ByteCursor, out: list[Any]) -> None:
            buf.pos += 1
            out.append(Marker())

    decoder = OneByte()

    class Remover(ChannelInboundHandler):
        def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
            if isinstance(msg, Marker):
                ctx.pipeline.remove(decoder)
            else:
                ctx.fire_channel_read(msg)

    ch = EmbeddedChannel(decoder, Remover())
    ch.write_inbound(b"abc")
    assert drain(ch) == [b"bc"]
    assert not ch.finish()


class EmitAll(ByteToMessageDecoder):
    def __init__(self, hold_last: bool = False) -> None:
        super().__init__()
        self.hold_last = hold_last
        self.last_calls = 0

    def decode(self, ctx: HandlerContext, buf: ByteCursor, out: list[Any]) -> None:
        end = len(buf.data) - (1 if self.hold_last else 0)
        if end > buf.pos:
            out.append(bytes(buf.data[buf.pos : end]))
            buf.pos = end

    def decode_last(self, ctx: HandlerContext, buf: ByteCursor, out: list[Any]) -> None:
        self.last_calls += 1
        if buf.readable:
            out.append(bytes(buf.data[buf.pos :]))
            buf.pos = len(buf.data)


def test_b8_b9_decode_last() -> None:
    data = bytes(range(256)) * 4
    ch = EmbeddedChannel(EmitAll())
    assert ch.write_inbound(data)
    assert drain(ch) == [data]
    assert not ch.finish()
    decoder = EmitAll(hold_last=True)
    ch = EmbeddedChannel(decoder)
    assert ch.write_inbound(data)
    assert drain(ch) == [data[:-1]]
    assert ch.finish()
    assert drain(ch) == [data[-1:]]
    assert decoder.last_calls == 1


def test_b6_read_then_read_complete_then_inactive_on_finish() -> None:
    events: list[str] = []

    class Last(ByteToMessageDecoder):
        def decode(self, ctx: HandlerContext, buf: ByteCursor, out: list[Any]) -> None:
            buf.pos = len(buf.data)

        def decode_last(self, ctx: HandlerContext, buf: ByteCursor, out: list[Any]) -> None:
            out.append("data")

    class Watch(ChannelInboundHandler):
        def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
            events.append(f"read {msg}")

        def channel_read_complete(self, ctx: HandlerContext) -> None:
            events.append(f"complete active={ctx.channel.is_active}")

        def channel_inactive(self, ctx: HandlerContext) -> None:
            events.append("inactive")

    ch = EmbeddedChannel(Last(), Watch())
    ch.write_inbound(b"x")
    events.clear()
    ch.finish()
    assert events == ["read data", "complete active=False", "inactive"]


def test_b11_order_preserved_when_removed_after_four() -> None:
    class Four(ByteToMessageDecoder):
        count = 0

        def decode(self, ctx: HandlerContext, buf: ByteCursor, out: list[Any]) -> None:
            out.append(buf.data[buf.pos])
            buf.pos += 1
            self.count += 1
            if self.count == 4:
                ctx.pipeline.remove(self)

    ch = EmbeddedChannel(Four())
    assert ch.write_inbound(bytes([1, 2, 3, 4, 5]))
    assert drain(ch) == [1, 2, 3, 4, b"\x05"]


def test_b13_does_not_over_read_with_auto_read_off() -> None:
    ch = EmbeddedChannel(FixedLengthFrameDecoder(3), config=ChannelConfig(auto_read=False))
    steps = [
        ([b"\x00\x01"], 1),
        ([b"\x02", b"\x03\x04\x05"], 1),
        ([b"\x06\x07\x08", b"\x09"], 1),
        ([b"\x0a\x0b", b"\x0c"], 1),
        ([b"\x0d"], 2),
        ([b"\x0e"], 2),
    ]
    for reads, expected in steps:
        ch.write_inbound(*reads)
        assert ch.read_requests == expected
    assert drain(ch) == [bytes(range(i, i + 3)) for i in range(0, 15, 3)]
    assert not ch.finish()


def test_decoded_without_consuming_is_an_error() -> None:
    class Bad(ByteToMessageDecoder):
        def decode(self, ctx: HandlerContext, buf: ByteCursor, out: list[Any]) -> None:
            out.append("x")

    ch = EmbeddedChannel(Bad())
    with pytest.raises(DecoderError, match="did not read anything but decoded a message"):
        ch.write_inbound(b"a")
    assert drain(ch) == ["x"]


def test_other_exceptions_are_wrapped_and_bytes_kept() -> None:
    class Boom(ByteToMessageDecoder):
        calls = 0

        def decode(self, ctx: HandlerContext, buf: ByteCursor, out: list[Any]) -> None:
            self.calls += 1
            if self.calls == 1:
                raise KeyError("boom")
            out.append(bytes(buf.data[buf.pos :]))
            buf.pos = len(buf.data)

    ch = EmbeddedChannel(Boom())
    with pytest.raises(DecoderError) as info:
        ch.write_inbound(b"ab")
    assert isinstance(info.value.__cause__, KeyError)
    assert ch.write_inbound(b"c")
    assert drain(ch) == [b"abc"]


def test_b16_reentrant_reads_are_queued() -> None:
    class Reenter(ByteToMessageDecoder):
        def decode(self, ctx: HandlerContext, buf: ByteCursor, out: list[Any]) -> None:
            n = buf.readable
            out.append(n)
            buf.pos = len(buf.data)
            if n == 4:
                ctx.channel.pipeline.fire_channel_read(bytes(8))

    ch = EmbeddedChannel(Reenter())
    ch.write_inbound(bytes(4))
    assert drain(ch) == [4, 8]


def test_non_bytes_pass_through_and_fixed_length() -> None:
    ch = EmbeddedChannel(FixedLengthFrameDecoder(3))
    ch.write_inbound("hello", b"abcdefg")
    assert drain(ch) == ["hello", b"abc", b"def"]
    assert not ch.finish()
    with pytest.raises(ValueError):
        FixedLengthFrameDecoder(0)


def test_single_decode() -> None:
    dec = FixedLengthFrameDecoder(1)
    dec.single_decode = True
    ch = EmbeddedChannel(dec)
    ch.write_inbound(b"abc")
    assert drain(ch) == [b"a"]
    ch.write_inbound(b"")
    assert drain(ch) == [b"b"]


def test_a_handler_added_during_a_batch_sees_the_rest_of_it() -> None:
    seen: list[tuple[str, bytes]] = []

    class Tag(ChannelInboundHandler):
        def __init__(self, name: str) -> None:
            self.name = name

        def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
            seen.append((self.name, msg))
            if self.name == "last" and msg == b"a":
                ctx.pipeline.add_before("last", Tag("inserted"), "inserted")
            elif self.name == "inserted":
                ctx.fire_channel_read(msg)

    ch = EmbeddedChannel(FixedLengthFrameDecoder(1))
    ch.pipeline.add_last(Tag("last"), "last")
    ch.write_inbound(b"abc")
    assert seen == [
        ("last", b"a"),
        ("inserted", b"b"),
        ("last", b"b"),
        ("inserted", b"c"),
        ("last", b"c"),
    ]


def test_a_read_reentering_while_frames_are_fired_is_queued_not_duplicated() -> None:
    # A handler after the decoder fires a read into the same pipeline while the decoder is
    # firing the frames of one read: the decoder finishes that read first, then decodes the
    # re-entered bytes, and no frame comes out twice.
    class Reinject(ChannelInboundHandler):
        def __init__(self) -> None:
            self.seen: list[bytes] = []

        def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
            self.seen.append(bytes(msg))
            if bytes(msg) == b"F1":
                ctx.pipeline.fire_channel_read(b"\x00\x01X")

    for views in (False, True):
        decoder = LengthFieldBasedFrameDecoder(1024, 0, 2, 0, 2, views=views)
        reinject = Reinject()
        ch = EmbeddedChannel(decoder, reinject)
        # F1 completed by the second read: fired before the rest of that read is decoded.
        ch.write_inbound(b"\x00\x02F")
        ch.write_inbound(b"1\x00\x02F2\x00\x02F3")
        assert reinject.seen == [b"F1", b"F2", b"F3", b"X"]  # was F1 F2 F3 X F2 F3
        assert decoder.actual_readable_bytes == 0
        # All in one read (fired as one batch, which the re-entered frame joins mid-way).
        reinject.seen.clear()
        ch.write_inbound(b"\x00\x02F1\x00\x02F2\x00\x02F3")
        assert sorted(reinject.seen) == [b"F1", b"F2", b"F3", b"X"]
        assert decoder.actual_readable_bytes == 0
