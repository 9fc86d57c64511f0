"""MessageToMessageDecoder / Encoder / Codec: Netty's MessageToMessageEncoderTest and
MessageToMessageDecoderTest, and the pass-through, error and future rules."""

from __future__ import annotations

from typing import Any

import pytest

from hanet.channel import ChannelConfig, ChannelOutboundHandler, HandlerContext, WriteFuture
from hanet.handlers import (
    DecoderError,
    EncoderError,
    MessageToMessageCodec,
    MessageToMessageDecoder,
    MessageToMessageEncoder,
)
from hanet.testing import EmbeddedChannel


class Boom(MessageToMessageEncoder[object]):
    def encode(self, ctx: HandlerContext, msg: object, out: list[Any]) -> None:
        raise Exception("boom")


def test_exception_becomes_encoder_error() -> None:
    """Netty issue #1656."""
    ch = EmbeddedChannel(Boom())
    with pytest.raises(EncoderError, match="boom") as info:
        ch.write_outbound(object())
    assert type(info.value.__cause__) is Exception


def test_intermediate_write_failures() -> None:
    """Two outputs, the first failed further down: the write's future fails with that very
    exception, the second output is still written (Netty PR #8454)."""
    first_error = Exception("first")

    class Two(MessageToMessageEncoder[object]):
        def encode(self, ctx: HandlerContext, msg: object, out: list[Any]) -> None:
            out.append(object())
            out.append(msg)

    class FailFirst(ChannelOutboundHandler):
        written = False

        def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
            if self.written:
                ctx.write(msg, future)
            else:
                self.written = True
                future.set_exception(first_error)

    ch = EmbeddedChannel(FailFirst(), Two())
    msg = object()
    write = ch.write_and_flush_nowait(msg)
    assert write.exception() is first_error
    assert ch.read_outbound() is msg
    assert not ch.finish()


def test_several_outputs_complete_the_future_when_all_are_written() -> None:
    class Split(MessageToMessageEncoder[bytes]):
        def encode(self, ctx: HandlerContext, msg: bytes, out: list[Any]) -> None:
            out.extend(msg[i : i + 1] for i in range(len(msg)))

    ch = EmbeddedChannel(Split())
    future = ch.write_one_outbound(b"abc")
    assert not future.done()
    ch.flush_outbound()
    assert future.succeeded()
    assert list(ch.outbound_messages) == [b"a", b"b", b"c"]


def test_not_accepted_messages_pass_through_with_their_future() -> None:
    class Upper(MessageToMessageEncoder[str]):
        def encode(self, ctx: HandlerContext, msg: str, out: list[Any]) -> None:
            out.append(msg.upper().encode())

    ch = EmbeddedChannel(Upper())
    raw = b"raw"
    future = ch.write_one_outbound(raw)
    ch.write_outbound("up")
    assert future.succeeded()
    assert ch.read_outbound() is raw
    assert ch.read_outbound() == b"UP"


def test_read_if_not_auto_read_when_not_sharable() -> None:
    """Netty's testReadIfNotAutoReadWhenNotSharable: a read batch in which decode produced
    nothing asks for one more read; one that produced a message does not."""

    class SkipFirst(MessageToMessageDecoder[str]):
        count = 0

        def decode(self, ctx: HandlerContext, msg: str, out: list[Any]) -> None:
            self.count += 1
            if self.count > 1:
                out.append(msg)

    ch = EmbeddedChannel(SkipFirst(), config=ChannelConfig(auto_read=False))
    assert not ch.write_inbound("something")
    assert ch.read_requests == 1
    assert ch.write_inbound("something")
    assert ch.read_requests == 1
    assert ch.finish()


def test_decoder_errors_and_outputs_before_them() -> None:
    class Half(MessageToMessageDecoder[bytes]):
        def decode(self, ctx: HandlerContext, msg: bytes, out: list[Any]) -> None:
            out.append(msg[:1])
            raise ValueError("bad")

    ch = EmbeddedChannel(Half())
    with pytest.raises(DecoderError, match="bad"):
        ch.write_inbound(b"xy")
    assert ch.read_inbound() == b"x"  # delivered before the error
    ch.write_inbound(7)
    assert ch.read_inbound() == 7


class IntCodec(MessageToMessageCodec[bytes, int]):
    def decode(self, ctx: HandlerContext, msg: bytes, out: list[Any]) -> None:
        out.append(int.from_bytes(msg, "big"))

    def encode(self, ctx: HandlerContext, msg: int, out: list[Any]) -> None:
        out.append(msg.to_bytes(4, "big"))


def test_codec_both_ways_and_pass_through() -> None:
    ch = EmbeddedChannel(IntCodec())
    ch.write_inbound(b"\x00\x01", "text")
    assert [ch.read_inbound(), ch.read_inbound()] == [1, "text"]
    ch.write_outbound(258, "text")
    assert [ch.read_outbound(), ch.read_outbound()] == [b"\x00\x00\x01\x02", "text"]


def test_type_parameters_are_found_through_generic_subclasses() -> None:
    class Plain(IntCodec):
        pass

    codec = Plain()
    assert codec.accept_inbound_message(b"") and not codec.accept_inbound_message(1)
    assert codec.accept_outbound_message(1) and not codec.accept_outbound_message(b"")

    class Untyped(MessageToMessageDecoder):  # type: ignore[type-arg]
        pass

    assert Untyped().accept_inbound_message(object())
    explicit = Untyped(inbound_type=(int, str))
    assert explicit.accept_inbound_message("s") and not explicit.accept_inbound_message(b"")
