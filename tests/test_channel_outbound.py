"""The outbound buffer: flush boundaries, coalescing, water marks (docs/netty.md §5.5)."""

from __future__ import annotations

import pytest

from hanet import ChannelClosedError, WaterMarks, WriteFuture
from hanet.channel import OutboundBuffer, message_size


def make(low: int = 100, high: int = 200, overhead: int = 0) -> tuple[OutboundBuffer, list[bool]]:
    flips: list[bool] = []
    buf: OutboundBuffer

    def flipped() -> None:
        flips.append(buf.is_writable)

    buf = OutboundBuffer(WaterMarks(low, high, entry_overhead=overhead), flipped)
    return buf, flips


def writable(buf: OutboundBuffer) -> bool:
    """``buf.is_writable``, unnarrowed by mypy between checks."""
    return buf.is_writable


def has_flushed(buf: OutboundBuffer) -> bool:
    return buf.has_flushed


def test_water_mark_defaults_and_validation() -> None:
    assert WaterMarks() == WaterMarks(low=32 * 1024, high=64 * 1024, entry_overhead=96)
    WaterMarks(0, 0, 0)
    with pytest.raises(ValueError, match="entry_overhead"):
        WaterMarks(entry_overhead=-1)
    with pytest.raises(ValueError, match="cannot be less than low water mark"):
        WaterMarks(low=10, high=5)
    with pytest.raises(ValueError):
        WaterMarks(low=-1, high=5)


def test_message_size() -> None:
    assert message_size(b"abc") == 3
    assert message_size(bytearray(4)) == 4
    assert message_size(memoryview(b"12345678").cast("I")) == 8
    assert message_size("not bytes") == 0


def test_only_flushed_messages_are_taken() -> None:
    buf, _ = make()
    f1, f2 = WriteFuture(), WriteFuture()
    buf.add(b"a", f1)
    assert not has_flushed(buf)
    buf.add_flush()
    buf.add(b"b", f2)
    assert has_flushed(buf)
    taken = buf.take_bytes(1000)
    assert taken == (b"a", [f1], 1)
    assert not has_flushed(buf)
    assert buf.pending_bytes == 2  # 'a' counts until sent
    buf.sent(1)
    assert buf.pending_bytes == 1


def test_take_bytes_coalesces_up_to_the_limit() -> None:
    buf, _ = make(10_000, 20_000)
    futures = [WriteFuture() for _ in range(10)]
    for i, f in enumerate(futures):
        buf.add(bytes([65 + i]) * 100, f)
    buf.add_flush()
    data, taken, n = buf.take_bytes(350)
    assert n == 300 and data == b"A" * 100 + b"B" * 100 + b"C" * 100
    assert taken == futures[:3]
    data, taken, n = buf.take_bytes(10_000)
    assert n == 700 and taken == futures[3:]
    assert not has_flushed(buf)


def test_take_bytes_takes_at_least_one_message() -> None:
    buf, _ = make()
    buf.add(b"x" * 500, WriteFuture())
    buf.add(b"y", WriteFuture())
    buf.add_flush()
    assert buf.take_bytes(100)[2] == 500
    assert buf.take_bytes(100)[2] == 1


def test_writability_netty_numbers() -> None:
    """ChannelOutboundBufferTest.testWritability: low 128+96, high 256+96, 96 bytes per entry."""
    buf, flips = make(low=128 + 96, high=256 + 96, overhead=96)
    buf.add(b"x" * 128, WriteFuture())  # pending 224
    assert writable(buf) and flips == [] and buf.pending_bytes == 224
    buf.add(b"x" * 2, WriteFuture())  # pending 322
    assert writable(buf) and flips == []
    assert buf.bytes_before_unwritable == 352 - 322 + 1
    buf.add_flush()
    buf.add(b"x" * 127, WriteFuture())  # pending 545 > 352
    assert not writable(buf) and flips == [False]
    assert buf.bytes_before_unwritable == 0
    assert buf.bytes_before_writable == 545 - 224 + 1
    _, futures, n = buf.take_bytes(1000)  # the two flushed entries
    assert (n, len(futures)) == (130, 2)
    buf.sent(n, len(futures))  # pending 223 < 224
    assert writable(buf) and flips == [False, True]
    assert buf.pending_bytes == 127 + 96
    assert buf.queued_bytes == 127
    assert buf.bytes_before_writable == 0


def test_exactly_high_is_writable_exactly_low_is_not_yet() -> None:
    buf, flips = make(low=100, high=200)
    buf.add(b"x" * 200, WriteFuture())
    assert writable(buf)
    buf.add(b"x", WriteFuture())
    assert not writable(buf)
    buf.sent(101)  # pending 100: not below low
    assert not writable(buf)
    buf.sent(1)
    assert writable(buf) and flips == [False, True]


def test_tiny_writes_are_bounded_by_the_entry_overhead() -> None:
    buf, _ = make(low=32 * 1024, high=64 * 1024, overhead=96)
    n = 0
    while buf.is_writable:
        buf.add(b"", WriteFuture())
        n += 1
    assert n == 64 * 1024 // 96 + 1
    assert buf.queued_bytes == 0


def test_fail_all_fails_every_queued_write() -> None:
    buf, _ = make()
    futures = [WriteFuture() for _ in range(3)]
    buf.add(b"a", futures[0])
    buf.add_flush()
    buf.add(b"b", futures[1])
    buf.add("an object", futures[2])
    buf.fail_all(lambda: ChannelClosedError("closed"))
    assert all(isinstance(f.exception(), ChannelClosedError) for f in futures)
    assert buf.pending_bytes == 0
    assert not has_flushed(buf)


def test_take_all_flushed() -> None:
    buf, _ = make()
    f = WriteFuture()
    buf.add("obj", f)
    buf.add_flush()
    assert buf.take_all_flushed() == [("obj", f)]
    assert not has_flushed(buf)
