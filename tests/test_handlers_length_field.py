"""LengthFieldBasedFrameDecoder and LengthFieldPrepender against docs/netty.md's vectors."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hanet.handlers import (
    CorruptedFrameError,
    DecoderError,
    EncoderError,
    LengthFieldBasedFrameDecoder,
    LengthFieldPrepender,
    TooLongFrameError,
)
from hanet.testing import EmbeddedChannel

H = b"HELLO, WORLD"
B32 = bytes(range(32))


def drain(ch: EmbeddedChannel) -> list[Any]:
    out = []
    while (msg := ch.read_inbound()) is not None:
        out.append(msg)
    return out


def x(text: str) -> bytes:
    return bytes.fromhex(text)


@pytest.mark.parametrize(
    ("params", "data", "expected"),
    [
        ((0, 2, 0, 0), x("000c") + H, x("000c") + H),
        ((0, 2, 0, 2), x("000c") + H, H),
        ((0, 2, -2, 0), x("000e") + H, x("000e") + H),
        ((2, 3, 0, 0), x("cafe00000c") + H, x("cafe00000c") + H),
        ((0, 3, 2, 0), x("00000ccafe") + H, x("00000ccafe") + H),
        ((1, 2, 1, 3), x("ca000cfe") + H, x("fe") + H),
        ((1, 2, -3, 3), x("ca0010fe") + H, x("fe") + H),
    ],
    ids=["J1", "J2", "J3", "J4", "J5", "J6", "J7"],
)
def test_javadoc_examples(params: tuple[int, int, int, int], data: bytes, expected: bytes) -> None:
    ch = EmbeddedChannel(LengthFieldBasedFrameDecoder(1024, *params))
    assert ch.write_inbound(data)
    assert drain(ch) == [expected]
    assert not ch.finish()


def test_n1_discard_too_long_frame_in_one_read() -> None:
    ch = EmbeddedChannel(LengthFieldBasedFrameDecoder(16, 0, 4))
    with pytest.raises(TooLongFrameError, match="Adjusted frame length exceeds 16: 36 - discarded"):
        ch.write_inbound(x("00000020") + B32 + x("0000000161"))
    assert ch.read_inbound() is None
    assert ch.finish()
    assert drain(ch) == [x("0000000161")]


def test_n2_discard_too_long_frame_split() -> None:
    data = x("00000020") + B32 + x("0000000161")
    ch = EmbeddedChannel(LengthFieldBasedFrameDecoder(16, 0, 4))
    with pytest.raises(TooLongFrameError):
        ch.write_inbound(data[:14])
    assert ch.write_inbound(data[14:])
    assert drain(ch) == [x("0000000161")]
    assert not ch.finish()


def test_n3_fail_slow_recovery() -> None:
    ch = EmbeddedChannel(LengthFieldBasedFrameDecoder(5, 0, 4, 0, 4, fail_fast=False))
    for _ in range(2):
        assert not ch.write_inbound(x("00000002"))
        with pytest.raises(TooLongFrameError):
            ch.write_inbound(x("0000"))
        assert ch.write_inbound(x("0000000141"))
        assert drain(ch) == [b"A"]


def test_n4_fail_fast_recovery() -> None:
    ch = EmbeddedChannel(LengthFieldBasedFrameDecoder(5, 0, 4, 0, 4))
    for _ in range(2):
        with pytest.raises(TooLongFrameError):
            ch.write_inbound(x("00000002"))
        assert ch.write_inbound(x("00000000000141"))
        assert drain(ch) == [b"A"]


def run(params: tuple[Any, ...], reads: list[bytes], **kw: Any) -> list[Any]:
    """Feed reads one by one; results per read: list of frames, or the exception."""
    ch = EmbeddedChannel(LengthFieldBasedFrameDecoder(*params, **kw))
    results: list[Any] = []
    for data in reads:
        try:
            ch.write_inbound(data)
        except DecoderError as exc:
            results.append((drain(ch), exc))
        else:
            results.append(drain(ch))
    return results


def test_d1_single_byte_reads() -> None:
    reads = [bytes([b]) for b in x("0003414243000144")]
    assert run((100, 0, 2, 0, 2), reads) == [[], [], [], [], [b"ABC"], [], [], [b"D"]]


def test_d2_d3_d4_d5_d6() -> None:
    assert run((100, 0, 2, 0, 2), [x("0003414243000144000245")]) == [[b"ABC", b"D"]]
    assert run((100, 0, 4, 0, 0), [x("0300000041424302000000")], byteorder="little") == [
        [x("03000000414243")]
    ]
    assert run((100, 0, 1, 0, 1), [x("03616263")]) == [[b"abc"]]
    assert run((100, 0, 3, 0, 3), [x("000002abcd000001ef")]) == [[x("abcd"), x("ef")]]
    assert run((100, 0, 8, 0, 8), [x("0000000000000002abcd")]) == [[x("abcd")]]


def test_d7_to_d10_offsets_adjustments_empty_frames() -> None:
    assert run((100, 2, 2, 0, 4), [x("aabb0001ccddee0002"), x("ff11")]) == [[x("cc")], [x("ff11")]]
    assert run((100, 0, 2, -2, 2), [x("0005616263"), x("0002")]) == [[b"abc"], [b""]]
    assert run((100, 0, 2, 0, 0), [x("0000"), x("0000")]) == [[x("0000")], [x("0000")]]
    assert run((100, 0, 2, 0, 2), [x("00000000")]) == [[b"", b""]]


def test_d11_frame_of_exactly_max_accepted_then_too_long() -> None:
    [(frames, exc)] = run((6, 0, 2, 0, 0), [x("00044142434400054142434445")])
    assert frames == [x("000441424344")]
    assert isinstance(exc, TooLongFrameError)
    assert str(exc) == "Adjusted frame length exceeds 6: 7 - discarded"


@pytest.mark.parametrize("fail_fast", [True, False])
def test_d12_d13_whole_bad_frame_buffered_fails_at_once(fail_fast: bool) -> None:
    res = run((8, 0, 2, 0, 2), [x("000a") + bytes(range(1, 11)), x("0001ff")], fail_fast=fail_fast)
    assert isinstance(res[0][1], TooLongFrameError)
    assert res[1] == [x("ff")]


def test_d14_fail_slow_across_reads() -> None:
    reads = [x("000a0102"), x("030405"), x("060708"), x("090a0001ff"), b""]
    res = run((8, 0, 2, 0, 2), reads, fail_fast=False)
    assert res[:3] == [[], [], []]
    frames, exc = res[3]
    assert frames == [] and isinstance(exc, TooLongFrameError)
    assert "exceeds 8: 12" in str(exc)
    assert res[4] == [x("ff")]


def test_d15_fail_fast_across_reads() -> None:
    res = run((8, 0, 2, 0, 2), [x("000a0102"), x("030405"), x("060708"), x("090a0001ff")])
    assert isinstance(res[0][1], TooLongFrameError)
    assert res[1:] == [[], [], [x("ff")]]


def test_d16_d17_corrupted_lengths() -> None:
    res = run((100, 0, 8, 0, 0), [x("ffffffffffffffff"), x("000000000000000141")])
    assert isinstance(res[0][1], CorruptedFrameError)
    assert str(res[0][1]) == "negative pre-adjustment length field: -1"
    assert res[1] == [x("000000000000000141")]
    res = run((100, 0, 2, -2, 0), [x("0001"), x("0005aabbcc")])
    assert str(res[0][1]) == "Adjusted frame length (1) is less than lengthFieldEndOffset: 2"
    assert res[1] == [x("0005aabbcc")]


def test_d18_strip_larger_than_frame() -> None:
    res = run((100, 0, 1, 0, 3), [x("0241"), x("42"), x("0100")])
    assert res[:2] == [[], [b""]]
    assert str(res[2][1]) == "Adjusted frame length (2) is less than initialBytesToStrip: 3"


def test_d19_split_header_with_large_strip_skips_the_frame_unlike_netty() -> None:
    # Netty reports length 0 and stays stuck forever; we skip the frame and go on.
    res = run((100, 0, 1, 0, 3), [x("01"), x("aa"), x("0461626364")])
    assert res[0] == []
    assert str(res[1][1]) == "Adjusted frame length (2) is less than initialBytesToStrip: 3"
    assert res[2] == [b"cd"]


def test_d20_unsigned_four_byte_length() -> None:
    [(_, exc)] = run((100, 0, 4, 0, 0), [x("ffffffff00")])
    assert str(exc) == "Adjusted frame length exceeds 100: 4294967299 - discarded"


def test_d21_pending_discard_dies_with_the_channel() -> None:
    ch = EmbeddedChannel(LengthFieldBasedFrameDecoder(5, 0, 4, 0, 4, fail_fast=False))
    assert not ch.write_inbound(x("0000000901"))
    assert not ch.finish()


def test_d23_eight_byte_overflow_wraps_like_java() -> None:
    [(_, exc)] = run((100, 0, 8, 0, 0), [x("7fffffffffffffff")])
    assert str(exc) == (
        "Adjusted frame length (-9223372036854775801) is less than lengthFieldEndOffset: 8"
    )


@pytest.mark.parametrize(
    "args",
    [(0, 0, 1), (4, 2, 3), (10, -1, 2), (10, 0, 2, 0, -1), (100, 0, 5), (100, 0, 0)],
)
def test_d24_constructor_validation(args: tuple[int, ...]) -> None:
    with pytest.raises(ValueError):
        LengthFieldBasedFrameDecoder(args[0], args[1], args[2], *args[3:])  # type: ignore[arg-type]
    LengthFieldBasedFrameDecoder(5, 2, 3)


def test_last_partial_frame_dropped_at_close_and_frames_decoded() -> None:
    ch = EmbeddedChannel(LengthFieldBasedFrameDecoder(100, 0, 2, 0, 2))
    assert not ch.write_inbound(x("0003"))
    assert not ch.write_inbound(x("4142"))
    assert not ch.finish()


frames_st = st.lists(st.binary(max_size=40), max_size=12)


@settings(max_examples=150, deadline=None)
@given(frames=frames_st, data=st.data())
def test_any_split_gives_the_same_frames(frames: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(len(f).to_bytes(2, "big") + f for f in frames)
    cuts = sorted(data.draw(st.sets(st.integers(0, len(stream)), max_size=10)))
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    ch = EmbeddedChannel(LengthFieldBasedFrameDecoder(64, 0, 2, 0, 2))
    for piece in pieces:
        ch.write_inbound(piece)
    assert drain(ch) == frames


@settings(max_examples=300, deadline=None)
@given(
    frames=st.lists(st.binary(max_size=30), min_size=1, max_size=8),
    fail_fast=st.booleans(),
    data=st.data(),
)
def test_any_split_gives_the_same_frames_and_errors(
    frames: list[bytes], fail_fast: bool, data: st.DataObject
) -> None:
    """Frames longer than the max are discarded wherever the reads split; each raises once."""
    stream = b"".join(len(f).to_bytes(1, "big") + f for f in frames)
    cuts = sorted(data.draw(st.sets(st.integers(0, len(stream)), max_size=10)))
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    ch = EmbeddedChannel(LengthFieldBasedFrameDecoder(21, 0, 1, 0, 1, fail_fast=fail_fast))
    errors = 0
    # Each read stops at an error; the bytes after it wait for the next read (Netty's
    # behaviour), so empty reads follow until one passes without an error.
    extra = [b""] * (len(frames) + 1)
    for i, piece in enumerate([*pieces, *extra]):
        try:
            ch.write_inbound(piece)
        except TooLongFrameError:
            errors += 1
        else:
            if i >= len(pieces):
                break
    ch.finish()
    assert drain(ch) == [f for f in frames if len(f) + 1 <= 21]
    assert errors == sum(1 for f in frames if len(f) + 1 > 21)


def test_frames_before_an_error_are_delivered_first() -> None:
    seen: list[Any] = []
    from hanet import ChannelInboundHandler, HandlerContext

    class Recorder(ChannelInboundHandler):
        def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
            seen.append(msg)

        def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
            seen.append(type(exc))

    ch = EmbeddedChannel(LengthFieldBasedFrameDecoder(6, 0, 2, 0, 2), Recorder())
    ch.write_inbound(x("00014100ff") + b"z" * 300)
    assert seen == [b"A", TooLongFrameError]


# -- LengthFieldPrepender -------------------------------------------------------------------


def outbound(ch: EmbeddedChannel) -> list[Any]:
    out = []
    while (msg := ch.read_outbound()) is not None:
        out.append(msg)
    return out


@pytest.mark.parametrize(
    ("args", "payload", "header"),
    [
        ((2,), H, x("000c")),
        ((2, 0, True), H, x("000e")),
        ((4,), b"A", x("00000001")),
        ((4, 0, True), b"A", x("00000005")),
        ((4, -1), b"A", x("00000000")),
        ((1,), b"a" * 255, x("ff")),
        ((2,), b"", x("0000")),
        ((3,), b"a" * 0x10000, x("010000")),
        ((8,), b"AB", x("0000000000000002")),
    ],
    ids=["P1", "P2", "P3", "P4", "P5", "P8", "P9", "P10", "P11"],
)
def test_prepender_vectors(args: tuple[Any, ...], payload: bytes, header: bytes) -> None:
    ch = EmbeddedChannel(LengthFieldPrepender(*args))
    assert ch.write_outbound(payload)
    assert outbound(ch) == [header, payload]


def test_prepender_little_endian_and_errors() -> None:
    ch = EmbeddedChannel(LengthFieldPrepender(4, byteorder="little"))
    ch.write_outbound(b"A")
    assert outbound(ch) == [x("01000000"), b"A"]
    assert not ch.finish()
    with pytest.raises(EncoderError, match="length : -1"):
        EmbeddedChannel(LengthFieldPrepender(4, -2)).write_outbound(b"A")
    with pytest.raises(EncoderError, match="does not fit into a byte: 256"):
        EmbeddedChannel(LengthFieldPrepender(1)).write_outbound(b"a" * 256)
    with pytest.raises(ValueError, match="1, 2, 3, 4, or 8: 5"):
        LengthFieldPrepender(5)


@settings(max_examples=50, deadline=None)
@given(payloads=st.lists(st.binary(max_size=300), max_size=5), width=st.sampled_from([2, 3, 4, 8]))
def test_prepender_round_trips_through_the_decoder(payloads: list[bytes], width: int) -> None:
    enc = EmbeddedChannel(LengthFieldPrepender(width, 0, True))
    for p in payloads:
        enc.write_outbound(p)
    wire = b"".join(outbound(enc))
    dec = EmbeddedChannel(LengthFieldBasedFrameDecoder(1 << 16, 0, width, -width, width))
    dec.write_inbound(wire)
    assert drain(dec) == payloads
