"""StringDecoder and StringEncoder against Netty's StringDecoderTest / StringEncoderTest."""

from __future__ import annotations

import pytest

from hanet.handlers import EncoderError, LineBasedFrameDecoder, StringDecoder, StringEncoder
from hanet.testing import EmbeddedChannel


def test_decode() -> None:
    ch = EmbeddedChannel(StringDecoder())
    assert ch.write_inbound(b"abc123")
    assert ch.read_inbound() == "abc123"
    assert ch.read_inbound() is None
    assert not ch.finish()


def test_encode() -> None:
    ch = EmbeddedChannel(StringEncoder())
    assert ch.write_outbound("Test")
    assert ch.finish()
    assert ch.read_outbound() == b"Test"
    assert ch.read_outbound() is None
    assert not ch.finish()


def test_encodings_and_pass_through() -> None:
    ch = EmbeddedChannel(StringDecoder("latin-1"), StringEncoder("utf-16-be"))
    ch.write_inbound(b"caf\xe9", memoryview(b"ok"), 42)
    assert [ch.read_inbound() for _ in range(3)] == ["café", "ok", 42]
    ch.write_outbound("é", b"raw")
    assert [ch.read_outbound() for _ in range(2)] == [b"\x00\xe9", b"raw"]


def test_malformed_input_is_replaced_as_java_does() -> None:
    ch = EmbeddedChannel(StringDecoder(), StringEncoder("ascii"))
    ch.write_inbound(b"a\xffb")
    assert ch.read_inbound() == "a\ufffdb"
    ch.write_outbound("é")
    assert ch.read_outbound() == b"?"


def test_empty_string_fails_the_write_as_in_netty() -> None:
    """MessageToMessageEncoder's rule: an encoder must produce at least one message."""
    ch = EmbeddedChannel(StringEncoder())
    future = ch.write_one_outbound("")
    assert isinstance(future.exception(), EncoderError)
    assert str(future.exception()) == "StringEncoder must produce at least one message."
    with pytest.raises(EncoderError):
        ch.write_outbound("")
    assert ch.read_outbound() is None


def test_lines_to_strings() -> None:
    ch = EmbeddedChannel(LineBasedFrameDecoder(80), StringDecoder())
    ch.write_inbound("héllo\r\nwörld\n".encode())
    assert [ch.read_inbound(), ch.read_inbound()] == ["héllo", "wörld"]


def test_unknown_encoding() -> None:
    with pytest.raises(LookupError):
        StringDecoder("no-such-codec")
