"""LineBasedFrameDecoder against Netty's LineBasedFrameDecoderTest vectors."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hanet.handlers import LineBasedFrameDecoder, TooLongFrameError
from hanet.testing import EmbeddedChannel


def drain(ch: EmbeddedChannel) -> list[Any]:
    out = []
    while (msg := ch.read_inbound()) is not None:
        out.append(msg)
    return out


def test_decode_with_strip() -> None:
    ch = EmbeddedChannel(LineBasedFrameDecoder(8192, True, False))
    ch.write_inbound(b"first\r\nsecond\nthird")
    assert drain(ch) == [b"first", b"second"]
    assert not ch.finish()  # the partial "third" is dropped at close


def test_decode_without_strip() -> None:
    ch = EmbeddedChannel(LineBasedFrameDecoder(8192, False, False))
    ch.write_inbound(b"first\r\nsecond\nthird")
    assert drain(ch) == [b"first\r\n", b"second\n"]
    assert not ch.finish()


def test_too_long_line_1() -> None:
    """The error is fired, not raised: the next line of the same read is still decoded."""
    ch = EmbeddedChannel(LineBasedFrameDecoder(16, False, False))
    with pytest.raises(TooLongFrameError, match=r"frame length \(20\) exceeds the allowed"):
        ch.write_inbound(b"12345678901234567890\r\nfirst\nsecond")
    assert drain(ch) == [b"first\n"]
    assert not ch.finish()


def test_too_long_line_2() -> None:
    ch = EmbeddedChannel(LineBasedFrameDecoder(16, False, False))
    assert not ch.write_inbound(b"12345678901234567")
    with pytest.raises(TooLongFrameError, match=r"\(20\) exceeds the allowed maximum \(16\)"):
        ch.write_inbound(b"890\r\nfirst\r\n")
    assert drain(ch) == [b"first\r\n"]
    assert not ch.finish()


def test_too_long_line_with_fail_fast() -> None:
    ch = EmbeddedChannel(LineBasedFrameDecoder(16, False, True))
    with pytest.raises(TooLongFrameError, match=r"frame length \(over 17\)"):
        ch.write_inbound(b"12345678901234567")
    assert not ch.write_inbound(b"890")
    assert ch.write_inbound(b"123\r\nfirst\r\n")
    assert drain(ch) == [b"first\r\n"]
    assert not ch.finish()


def test_decode_splits_correctly() -> None:
    ch = EmbeddedChannel(LineBasedFrameDecoder(8192, False, False))
    assert ch.write_inbound(b"line\r\n.\r\n")
    assert drain(ch) == [b"line\r\n", b".\r\n"]
    assert not ch.finish()


def test_fragmented_decode() -> None:
    ch = EmbeddedChannel(LineBasedFrameDecoder(8192, False, False))
    assert not ch.write_inbound(b"huu")
    assert ch.read_inbound() is None
    assert not ch.write_inbound(b"haa\r")
    assert ch.read_inbound() is None
    assert ch.write_inbound(b"\nhuuhaa\r\n")
    assert drain(ch) == [b"huuhaa\r\n", b"huuhaa\r\n"]
    assert not ch.finish()


def test_empty_line() -> None:
    ch = EmbeddedChannel(LineBasedFrameDecoder(8192, True, False))
    assert ch.write_inbound(b"\nabcna\r\n")
    assert drain(ch) == [b"", b"abcna"]
    assert not ch.finish()


def test_not_fail_fast() -> None:
    ch = EmbeddedChannel(LineBasedFrameDecoder(2, False, False))
    assert not ch.write_inbound(bytes([0, 1, 2]))
    assert not ch.write_inbound(bytes([3, 4]))
    with pytest.raises(TooLongFrameError, match=r"\(5\) exceeds the allowed maximum \(2\)"):
        ch.write_inbound(b"\n")
    assert not ch.write_inbound(b"5")
    assert ch.write_inbound(b"\n")
    assert drain(ch) == [b"5\n"]
    assert not ch.finish()


def test_one_byte_reads_match_one_read() -> None:
    data = b"a\r\nbc\n\r\n\rd\r\r\nlast"
    whole = EmbeddedChannel(LineBasedFrameDecoder(64))
    whole.write_inbound(data)
    split = EmbeddedChannel(LineBasedFrameDecoder(64))
    for i in range(len(data)):
        split.write_inbound(data[i : i + 1])
    assert drain(whole) == drain(split) == [b"a", b"bc", b"", b"\rd\r"]


def test_non_bytes_pass_through_and_bad_arguments() -> None:
    ch = EmbeddedChannel(LineBasedFrameDecoder(8))
    assert ch.write_inbound("text")
    assert ch.read_inbound() == "text"
    with pytest.raises(ValueError, match="max_length"):
        LineBasedFrameDecoder(0)


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")), max_size=8),
    endings=st.lists(st.sampled_from([b"\n", b"\r\n"]), min_size=8, max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=6),
    strip=st.booleans(),
)
def test_any_split_of_the_stream_gives_the_same_lines(
    lines: list[bytes], endings: list[bytes], cuts: list[int], strip: bool
) -> None:
    data = b"".join(line + end for line, end in zip(lines, endings, strict=False))
    ch = EmbeddedChannel(LineBasedFrameDecoder(64, strip_delimiter=strip))
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    for start, end in itertools.pairwise(bounds):
        ch.write_inbound(data[start:end])
    expected = [
        (line.removesuffix(b"\r") if end == b"\n" else line) if strip else line + end
        for line, end in zip(lines, endings, strict=False)
    ]
    assert drain(ch) == expected
