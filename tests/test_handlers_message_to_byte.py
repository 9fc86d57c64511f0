"""MessageToByteEncoder and ByteToMessageCodec: Netty's MessageToByteEncoderTest and
ByteToMessageCodecTest."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from hanet.channel import HandlerContext
from hanet.handlers import ByteCursor, ByteToMessageCodec, EncoderError, MessageToByteEncoder
from hanet.testing import EmbeddedChannel


class StrEncoder(MessageToByteEncoder[str]):
    def encode(self, ctx: HandlerContext, msg: str, out: bytearray) -> None:
        out += msg.encode()


def test_accept_outbound_message() -> None:
    encoder = StrEncoder()
    assert encoder.accept_outbound_message("test")
    assert not encoder.accept_outbound_message(5)


def test_encoder_exception_is_passed_as_it_is() -> None:
    error = EncoderError("mine")

    class Raising(MessageToByteEncoder[str]):
        def encode(self, ctx: HandlerContext, msg: str, out: bytearray) -> None:
            raise error

    ch = EmbeddedChannel(Raising())
    with pytest.raises(EncoderError) as info:
        ch.write_outbound("test")
    assert info.value is error


def test_exception_is_wrapped() -> None:
    class Raising(MessageToByteEncoder[str]):
        def encode(self, ctx: HandlerContext, msg: str, out: bytearray) -> None:
            raise RuntimeError("x")

    ch = EmbeddedChannel(Raising())
    future = ch.write_one_outbound("test")
    assert isinstance(future.exception(), EncoderError)
    assert isinstance(future.exception().__cause__, RuntimeError)  # type: ignore[union-attr]
    assert ch.read_outbound() is None


def test_write() -> None:
    ch = EmbeddedChannel(StrEncoder())
    ch.write_outbound("test")
    assert ch.read_outbound() == b"test"
    msg = object()
    ch.write_outbound(msg)
    assert ch.read_outbound() is msg


def test_empty_output_writes_empty_bytes_and_completes_the_future() -> None:
    """Netty writes an empty buffer with the promise: nothing fails, the write completes with
    the flush."""
    ch = EmbeddedChannel(StrEncoder())
    future = ch.write_one_outbound("")
    assert not future.done()
    ch.flush_outbound()
    assert future.succeeded()
    assert ch.read_outbound() == b""


class IntCodec(ByteToMessageCodec[int]):
    def encode(self, ctx: HandlerContext, msg: int, out: bytearray) -> None:
        out += msg.to_bytes(4, "big")

    def decode(self, ctx: HandlerContext, buf: ByteCursor, out: list[Any]) -> None:
        if buf.readable >= 4:
            out.append(int.from_bytes(buf.data[buf.pos : buf.pos + 4], "big"))
            buf.pos += 4


def test_sharable_is_refused() -> None:
    class Shared(IntCodec):
        sharable: ClassVar[bool] = True

    with pytest.raises(TypeError, match="cannot be sharable"):
        Shared()


def test_forward_pending_data() -> None:
    codec = IntCodec()
    ch = EmbeddedChannel(codec)
    assert ch.write_inbound(b"\x00\x00\x00\x01" + b"0")
    ch.pipeline.remove(codec)
    assert ch.finish()
    assert ch.read_inbound() == 1
    assert ch.read_inbound() == b"0"
    assert ch.read_inbound() is None
    assert ch.read_outbound() is None


def test_codec_encodes_its_type_only() -> None:
    ch = EmbeddedChannel(IntCodec())
    ch.write_outbound(7, b"raw")
    assert [ch.read_outbound(), ch.read_outbound()] == [b"\x00\x00\x00\x07", b"raw"]
