"""DelimiterBasedFrameDecoder against Netty's two DelimiterBasedFrameDecoderTest classes."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hanet.channel import ChannelInboundHandler, HandlerContext
from hanet.handlers import DelimiterBasedFrameDecoder, Delimiters, TooLongFrameError
from hanet.testing import EmbeddedChannel


def drain(ch: EmbeddedChannel) -> list[Any]:
    out = []
    while (msg := ch.read_inbound()) is not None:
        out.append(msg)
    return out


LINES = Delimiters.line_delimiter()


def test_multiple_lines_stripped_delimiters() -> None:
    ch = EmbeddedChannel(DelimiterBasedFrameDecoder(8192, *LINES, strip_delimiter=True))
    ch.write_inbound(b"TestLine\r\ng\r\n")
    assert drain(ch) == [b"TestLine", b"g"]
    assert not ch.finish()


def test_incomplete_lines_stripped_delimiters() -> None:
    ch = EmbeddedChannel(DelimiterBasedFrameDecoder(8192, *LINES))
    ch.write_inbound(b"Test")
    assert ch.read_inbound() is None
    ch.write_inbound(b"Line\r\ng\r\n")
    assert drain(ch) == [b"TestLine", b"g"]
    assert not ch.finish()


def test_multiple_lines() -> None:
    ch = EmbeddedChannel(DelimiterBasedFrameDecoder(8192, *LINES, strip_delimiter=False))
    ch.write_inbound(b"TestLine\r\ng\r\n")
    assert drain(ch) == [b"TestLine\r\n", b"g\r\n"]
    assert not ch.finish()


def test_incomplete_lines() -> None:
    ch = EmbeddedChannel(DelimiterBasedFrameDecoder(8192, *LINES, strip_delimiter=False))
    ch.write_inbound(b"Test")
    assert ch.read_inbound() is None
    ch.write_inbound(b"Line\r\ng\r\n")
    assert drain(ch) == [b"TestLine\r\n", b"g\r\n"]
    assert not ch.finish()


def test_decode() -> None:
    ch = EmbeddedChannel(DelimiterBasedFrameDecoder(8192, *LINES))
    ch.write_inbound(b"first\r\nsecond\nthird")
    assert drain(ch) == [b"first", b"second"]
    assert not ch.finish()


def test_fail_slow_too_long_frame_recovery() -> None:
    ch = EmbeddedChannel(
        DelimiterBasedFrameDecoder(1, *Delimiters.nul_delimiter(), fail_fast=False)
    )
    for _ in range(2):
        assert not ch.write_inbound(bytes([1, 2]))
        with pytest.raises(TooLongFrameError, match="frame length exceeds 1: 2 - discarded"):
            ch.write_inbound(bytes([0]))
        ch.write_inbound(b"A\x00")
        assert drain(ch) == [b"A"]


def test_fail_fast_too_long_frame_recovery() -> None:
    ch = EmbeddedChannel(DelimiterBasedFrameDecoder(1, *Delimiters.nul_delimiter()))
    for _ in range(2):
        with pytest.raises(TooLongFrameError, match="frame length exceeds 1: 2 - discarded"):
            ch.write_inbound(bytes([1, 2]))
        ch.write_inbound(b"\x00A\x00")
        assert drain(ch) == [b"A"]


def test_shortest_frame_wins() -> None:
    """The Javadoc's example: ``ABC\\nDEF\\r\\n`` splits at ``\\n`` first, with the line
    delimiters given to a subclass too (which does not take the line-based shortcut)."""

    class Sub(DelimiterBasedFrameDecoder):
        pass

    for decoder in (DelimiterBasedFrameDecoder(64, *LINES), Sub(64, *LINES)):
        ch = EmbeddedChannel(decoder)
        ch.write_inbound(b"ABC\nDEF\r\n")
        assert drain(ch) == [b"ABC", b"DEF"]


def test_line_delimiters_fire_errors_as_the_line_decoder() -> None:
    """Netty's special case: ``\\r\\n`` + ``\\n`` on this very class decode as
    LineBasedFrameDecoder, whose too-long error is fired and decoding goes on."""
    seen: list[BaseException] = []

    class Catch(ChannelInboundHandler):
        def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
            seen.append(exc)

    ch = EmbeddedChannel(DelimiterBasedFrameDecoder(4, *LINES), Catch())
    ch.write_inbound(b"toolong\nok\n")
    assert drain(ch) == [b"ok"]
    assert [str(e) for e in seen] == ["frame length (7) exceeds the allowed maximum (4)"]

    other = EmbeddedChannel(DelimiterBasedFrameDecoder(4, b"\n"))
    with pytest.raises(TooLongFrameError, match="exceeds 4: 7 - discarded"):
        other.write_inbound(b"toolong\nok\n")
    assert drain(other) == []
    other.write_inbound(b"")
    assert drain(other) == [b"ok"]


def test_multi_byte_delimiter_split_across_reads() -> None:
    ch = EmbeddedChannel(DelimiterBasedFrameDecoder(64, b"||", strip_delimiter=False))
    for part in (b"ab|", b"|cd", b"|", b"|"):
        ch.write_inbound(part)
    assert drain(ch) == [b"ab||", b"cd||"]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_frame_length"):
        DelimiterBasedFrameDecoder(0, b"\n")
    with pytest.raises(ValueError, match="delimiters is empty"):
        DelimiterBasedFrameDecoder(8)
    with pytest.raises(ValueError, match="empty delimiter"):
        DelimiterBasedFrameDecoder(8, b"\n", b"")


@settings(max_examples=200, deadline=None)
@given(
    frames=st.lists(st.binary(max_size=10).map(lambda b: b.replace(b"|", b"")), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=120), max_size=6),
)
def test_any_split_of_the_stream_gives_the_same_frames(
    frames: list[bytes], cuts: list[int]
) -> None:
    data = b"".join(frame + b"||" for frame in frames)
    ch = EmbeddedChannel(DelimiterBasedFrameDecoder(64, b"||", b"\x00\x01"))
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    for start, end in itertools.pairwise(bounds):
        ch.write_inbound(data[start:end])
    expected: list[bytes] = []
    for frame in frames:  # a frame may hold the other delimiter: it splits there too
        expected.extend(frame.split(b"\x00\x01"))
    assert drain(ch) == expected
