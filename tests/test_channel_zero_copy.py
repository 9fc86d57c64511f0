"""Zero copy where it is free: TCP reads into a shared arena, frames decoded in place,
read-only buffers sent without a snapshot, views of the mapped commit log."""

from __future__ import annotations

import functools
import random
from pathlib import Path
from typing import Any

import trio
import trio.testing
from channel_support import tcp_pair

from hanet import ChannelInboundHandler, HandlerContext, StreamChannel, run_channel
from hanet.channel import EmbeddedChannel, ReadOnlyBuffer
from hanet.handlers import LengthFieldBasedFrameDecoder
from hanet.store import CommitLogStore, Message, StoreConfig


class Keeper(ChannelInboundHandler):
    """Keeps every message it reads, as it got it."""

    def __init__(self) -> None:
        self.kept: list[Any] = []

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        self.kept.append(msg)


async def receive_all(payload: bytes, *handlers: Any, chunks: list[int]) -> None:
    """Send ``payload`` over TCP in writes of the given sizes (cycled) to a channel with
    ``handlers``; return once the channel saw the peer close."""
    client, server = await tcp_pair()

    def init(channel: StreamChannel) -> None:
        for handler in handlers:
            channel.pipeline.add_last(handler)

    async with trio.open_nursery() as nursery:
        channel: StreamChannel = await nursery.start(functools.partial(run_channel, server, init))
        pos = i = 0
        async with client:
            while pos < len(payload):
                n = chunks[i % len(chunks)]
                await client.send_all(payload[pos : pos + n])
                pos += n
                i += 1
                if i % 7 == 0:
                    await trio.sleep(0.001)  # let reads end at odd places
        await channel.wait_closed()


async def test_tcp_reads_are_read_only_views_that_stay_valid() -> None:
    payload = random.Random(1).randbytes(3 * 1024 * 1024 + 17)
    keeper = Keeper()
    await receive_all(payload, keeper, chunks=[100_000, 1, 300_000, 4096])
    assert len(keeper.kept) > 1
    for msg in keeper.kept:
        assert type(msg) is memoryview and msg.readonly
    # Every view kept from the first read on still shows what was received: the arena never
    # writes a byte twice (a full chunk is left to its views).
    assert b"".join(keeper.kept) == payload


async def test_frames_within_a_read_are_views_and_spanning_ones_are_copies() -> None:
    rng = random.Random(2)
    bodies = [rng.randbytes(rng.choice([0, 1, 50, 3000, 40_000])) for _ in range(400)]
    payload = b"".join(len(b).to_bytes(4, "big") + b for b in bodies)
    keeper = Keeper()
    await receive_all(
        payload,
        LengthFieldBasedFrameDecoder(1 << 20, 0, 4, 0, 4, views=True),
        keeper,
        chunks=[65_536, 777, 200_000],
    )
    assert keeper.kept == bodies  # kept views are all still right at the end
    assert all(type(f) is memoryview and f.readonly for f in keeper.kept)
    in_place = [f for f in keeper.kept if type(f.obj) is bytearray]  # views of the arena
    assert len(in_place) > len(keeper.kept) // 2


def test_the_read_completing_a_frame_is_decoded_in_place_after_it() -> None:
    decoder = LengthFieldBasedFrameDecoder(1024, 0, 2, 0, 2, views=True)
    ch = EmbeddedChannel(decoder)
    ch.write_inbound(b"\x00\x05abc")  # a partial frame: cumulated (copied)
    second = b"de\x00\x02fg\x00\x03hij\x00\x09xy"
    ch.write_inbound(second)
    frames = [ch.read_inbound() for _ in range(3)]
    assert frames == [b"abcde", b"fg", b"hij"]
    assert type(frames[0].obj) is bytes and frames[0].obj != second  # the spanning copy
    assert frames[1].obj is second and frames[2].obj is second  # views of the read itself
    assert decoder.actual_readable_bytes == 4  # the next partial frame waits, copied
    assert ch.read_inbound() is None


async def test_frames_are_bytes_by_default() -> None:
    bodies = [b"a" * 10, b"", b"b" * 70_000]
    keeper = Keeper()
    payload = b"".join(len(b).to_bytes(4, "big") + b for b in bodies)
    await receive_all(
        payload, LengthFieldBasedFrameDecoder(1 << 20, 0, 4, 0, 4), keeper, chunks=[5]
    )
    assert keeper.kept == bodies and all(type(f) is bytes for f in keeper.kept)


def test_a_mutable_read_is_copied() -> None:
    ch = EmbeddedChannel(LengthFieldBasedFrameDecoder(1024, 0, 1, 0, 1, views=True))
    data = bytearray(b"\x02ab")
    ch.write_inbound(data)
    data[1:3] = b"zz"  # its sender reuses it
    assert ch.read_inbound() == b"ab"


async def test_read_only_buffer_is_sent_without_a_snapshot() -> None:
    client, server = trio.testing.memory_stream_pair()
    backing = bytearray(b"0123456789")
    async with trio.open_nursery() as nursery:
        channel: StreamChannel = await nursery.start(
            functools.partial(run_channel, server, lambda channel: None)
        )
        channel.pipeline.write(memoryview(backing)[:5])  # snapshotted at write time
        channel.pipeline.write(ReadOnlyBuffer(memoryview(backing)[5:]))  # queued as it is
        backing[:] = b"abcdefghij"  # (breaking the promise, to see which was copied)
        channel.pipeline.flush()
        received = b""
        while len(received) < 10:
            received += await client.receive_some()
        assert received == b"01234fghij"
        await channel.close()


async def test_pending_read_only_buffers_are_released_when_the_channel_closes() -> None:
    client, server = trio.testing.memory_stream_pair()
    backing = bytearray(100)
    async with trio.open_nursery() as nursery:
        channel: StreamChannel = await nursery.start(
            functools.partial(run_channel, server, lambda channel: None)
        )
        future = channel.pipeline.write(ReadOnlyBuffer(memoryview(backing)[:10]))  # never flushed
        assert channel.statistics().queued_bytes == 10
        await channel.close()
    assert future.done()
    backing.extend(b"x")  # no view of it is left (a BufferError otherwise)
    await client.aclose()


def test_store_read_view_is_read_only_and_survives_close(tmp_path: Path) -> None:
    store = CommitLogStore.open(tmp_path, StoreConfig(mapped_file_size=64 * 1024))
    store.put(Message(topic="T", body=b"x" * 100))
    copy = store.read(0, 1 << 20)
    view = store.read_view(0, 1 << 20)
    assert view.readonly and view == copy and len(copy) == store.max_offset
    assert len(store.read_view(store.max_offset, 10)) == 0
    store.close()  # a view still alive: the mapping stays until it goes
    assert view == copy
    view.release()


async def test_concurrent_small_reads_share_the_arena_chunk() -> None:
    # Many channels reading small messages at once: each read takes just the bytes it got, so
    # they fill one chunk between them (a read that left a hole behind another channel's
    # would make the arena start a fresh 1 MiB chunk again and again: 46 chunks here).
    pairs = [await tcp_pair() for _ in range(8)]
    keepers = [Keeper() for _ in pairs]
    async with trio.open_nursery() as nursery:
        channels: list[StreamChannel] = []
        for (_, server), keeper in zip(pairs, keepers, strict=True):

            def init(channel: StreamChannel, keeper: Keeper = keeper) -> None:
                channel.pipeline.add_last(keeper)

            channels.append(await nursery.start(functools.partial(run_channel, server, init)))
        for _ in range(50):
            for client, _ in pairs:
                await client.send_all(b"x" * 100)
            await trio.sleep(0.0005)
        for client, _ in pairs:
            await client.aclose()
        for channel in channels:
            await channel.wait_closed()
    views = [view for keeper in keepers for view in keeper.kept]
    assert b"".join(views) == b"x" * (8 * 50 * 100)
    chunks = {id(view.obj) for view in views}  # the views keep their chunks alive
    assert len(chunks) <= 2


class SometimesKeeper(ChannelInboundHandler):
    """Keeps a random few of the views it reads (some as sub-views), drops the rest, and
    remembers what every kept view showed when it came in."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.kept: list[tuple[memoryview, bytes]] = []
        self.received: list[bytes] = []

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        data = bytes(msg)
        self.received.append(data)
        if self.rng.random() < 0.05:
            view = memoryview(msg)[len(msg) // 3 :] if self.rng.random() < 0.5 else msg
            self.kept.append((view, bytes(view)))


async def test_chunks_are_reused_only_once_no_view_of_them_is_left(
    monkeypatch: Any,
) -> None:
    # The arena takes a full chunk again once nothing refers to it (no fresh 1 MiB buffer per
    # MiB received) and never while a view of it (or of a view of it) lives: the kept views
    # still show what they showed when they came in.
    made = _counting_chunks(monkeypatch)
    payload = random.Random(3).randbytes(24 * 1024 * 1024)
    keeper = SometimesKeeper(4)
    await receive_all(payload, keeper, chunks=[100_000, 300_000, 4096, 65_536])
    assert b"".join(keeper.received) == payload
    assert keeper.kept
    for view, seen in keeper.kept:
        assert bytes(view) == seen
    # 24 MiB went through 1 MiB chunks: without reuse that is one new chunk per MiB at least.
    # With it, the chunks still pinned by kept views, plus a few in turn.
    pinned = len({id(view.obj) for view, _ in keeper.kept})
    assert pinned < 12
    assert len(made) <= pinned + 6, (len(made), pinned)


class FrameKeeper(ChannelInboundHandler):
    """Keeps the first frames it reads (views of the arena) and what they showed then."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.kept: list[tuple[memoryview, bytes]] = []
        self.count = 0

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        self.count += 1
        if len(self.kept) < self.keep:
            self.kept.append((msg, bytes(msg)))


def _counting_chunks(monkeypatch: Any) -> list[int]:
    made: list[int] = []

    def counting_bytearray(*args: Any) -> bytearray:
        buffer = bytearray(*args)
        if len(buffer) >= 1 << 20:
            made.append(len(buffer))
        return buffer

    monkeypatch.setattr("hanet.channel._arena.bytearray", counting_bytearray, raising=False)
    return made


async def _frames_through(monkeypatch: Any, reuse: bool) -> tuple[FrameKeeper, list[int]]:
    # 16 MiB of 2 KiB frames, each different; the handler keeps the first 20 (decoded in place).
    monkeypatch.setattr("hanet.channel._arena._REUSE_CHUNKS", reuse)
    made = _counting_chunks(monkeypatch)
    rng = random.Random(5)
    bodies = [rng.randbytes(2044) for _ in range(8192)]
    payload = b"".join(len(b).to_bytes(4, "big") + b for b in bodies)
    keeper = FrameKeeper(20)
    await receive_all(
        payload,
        LengthFieldBasedFrameDecoder(1 << 20, 0, 4, 0, 4, views=True),
        keeper,
        chunks=[65_536, 200_000],
    )
    assert keeper.count == len(bodies)
    assert [seen for _, seen in keeper.kept] == bodies[:20]
    assert any(type(frame.obj) is bytearray for frame, _ in keeper.kept)  # in the arena
    return keeper, made


async def test_a_frame_kept_by_a_handler_survives_the_reuse_of_chunks(monkeypatch: Any) -> None:
    # The chunks other frames went through are taken again (few fresh ones for 16 MiB), and
    # never the one the kept frames are views of: they still show their bytes.
    keeper, made = await _frames_through(monkeypatch, reuse=True)
    assert len(made) < 10, made
    for frame, seen in keeper.kept:
        assert bytes(frame) == seen


async def test_chunks_are_never_reused_off_cpython(monkeypatch: Any) -> None:
    # Without exact reference counts (any interpreter but CPython) no chunk is taken again:
    # a fresh chunk for every MiB received.
    keeper, made = await _frames_through(monkeypatch, reuse=False)
    assert len(made) >= 16, made
    for frame, seen in keeper.kept:
        assert bytes(frame) == seen
