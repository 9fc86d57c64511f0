"""FileRegion: file bytes sent with sendfile on plain TCP, read on any other stream, recorded by
EmbeddedChannel; the region's descriptor is closed once sent or failed, whatever happens."""

from __future__ import annotations

import functools
import os
import random
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
import trustme
from channel_support import tcp_pair

from hanet import ChannelInboundHandler, HandlerContext, StreamChannel, run_channel
from hanet.channel import (
    ChannelClosedError,
    ChannelConfig,
    EmbeddedChannel,
    FileRegion,
    WaterMarks,
    WriteFuture,
)

DATA = random.Random(7).randbytes(6 * 1024 * 1024 + 13)


@pytest.fixture
def data_fd(tmp_path: Path) -> Any:
    path = tmp_path / "data"
    path.write_bytes(DATA)
    fd = os.open(path, os.O_RDONLY)
    yield fd
    os.close(fd)


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


async def receive_until_eof(stream: trio.abc.ReceiveStream, slow: bool = False) -> bytes:
    out = bytearray()
    while chunk := await stream.receive_some(16 * 1024 if slow else 256 * 1024):
        out += chunk
        if slow and len(out) < 512 * 1024:
            await trio.sleep(0.001)  # a slow reader: the sender's socket fills, sendfile waits
    return bytes(out)


Write = Callable[[StreamChannel], Awaitable[None]]


async def send_through_channel(
    server: trio.abc.Stream, receiver: trio.abc.ReceiveStream, write: Write, *, slow: bool = False
) -> bytes:
    """Run a channel over ``server``, let ``write`` write to it and close it; return what
    ``receiver`` got up to end of file."""
    got: list[bytes] = []

    async def receive() -> None:
        got.append(await receive_until_eof(receiver, slow))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(receive)
        channel: StreamChannel = await nursery.start(
            functools.partial(run_channel, server, lambda ch: None)
        )
        await write(channel)
        await channel.close()
    return got[0]


async def test_a_region_between_bytes_goes_out_by_sendfile_on_tcp(data_fd: int) -> None:
    client, server = await tcp_pair()
    region = FileRegion.of(data_fd, 1000, len(DATA) - 2000)
    head = b"header:" + (len(DATA) - 2000).to_bytes(4, "big")

    async def write(channel: StreamChannel) -> None:
        channel.pipeline.write(head)
        channel.pipeline.write(region)
        await channel.pipeline.write_and_flush(b"trailer")

    async with client:
        got = await send_through_channel(server, client, write, slow=True)
    assert got == head + DATA[1000:-1000] + b"trailer"
    assert region.released and not is_open(region.fd)
    assert is_open(data_fd)  # the caller's descriptor is its own


async def test_regions_go_out_in_order_with_many_small_ones(data_fd: int) -> None:
    client, server = await tcp_pair()
    rng = random.Random(3)
    spans = [(rng.randrange(len(DATA) - 5000), rng.randrange(5000)) for _ in range(300)]
    expected = bytearray()

    async def write(channel: StreamChannel) -> None:
        for i, (pos, count) in enumerate(spans):
            channel.pipeline.write(i.to_bytes(2, "big"))
            channel.pipeline.write(FileRegion.of(data_fd, pos, count))
            expected.extend(i.to_bytes(2, "big") + DATA[pos : pos + count])
            if i % 10 == 0:
                channel.pipeline.flush()
        await channel.pipeline.write_and_flush(b"")

    async with client:
        got = await send_through_channel(server, client, write)
    assert got == bytes(expected)


async def test_a_region_is_read_on_a_stream_that_is_not_a_socket(data_fd: int) -> None:
    left, right = trio.testing.memory_stream_pair()
    region = FileRegion.of(data_fd, 5, 70_000)

    async def write(channel: StreamChannel) -> None:
        await channel.pipeline.write_and_flush(region)

    got = await send_through_channel(left, right, write)
    assert got == DATA[5:70_005]
    assert region.released


async def test_a_region_with_a_view_sends_the_view_where_sendfile_cannot() -> None:
    left, right = trio.testing.memory_stream_pair()
    r, w = os.pipe()  # no pread on a pipe: only the view can be sent
    view = memoryview(b"from the mapping")
    region = FileRegion.of(r, 0, len(view), view)
    os.close(r)
    os.close(w)

    async def write(channel: StreamChannel) -> None:
        await channel.pipeline.write_and_flush(region)

    assert await send_through_channel(left, right, write) == b"from the mapping"
    assert region.released and region.view is None


async def test_a_region_over_tls_is_sent_as_its_bytes(data_fd: int) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    client_tcp, server_tcp = await tcp_pair()
    server = trio.SSLStream(server_tcp, server_ctx, server_side=True)
    client = trio.SSLStream(
        client_tcp, client_ctx, server_hostname="localhost", https_compatible=True
    )
    region = FileRegion.of(data_fd, 0, 300_000)

    async def write(channel: StreamChannel) -> None:
        await channel.pipeline.write_and_flush(region)

    async with client:
        got = await send_through_channel(server, client, write)
    assert got == DATA[:300_000]
    assert region.released


async def test_a_region_past_the_end_of_its_file_fails_its_write_and_closes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "short"
    path.write_bytes(b"x" * 100)
    fd = os.open(path, os.O_RDONLY)
    region = FileRegion.of(fd, 50, 100)  # 50 bytes short
    os.close(fd)
    client, server = await tcp_pair()
    errors: list[BaseException] = []

    async def write(channel: StreamChannel) -> None:
        try:
            await channel.pipeline.write_and_flush(region)
        except ChannelClosedError as exc:
            errors.append(exc)
        await channel.wait_closed()

    async with client:
        got = await send_through_channel(server, client, write)
    assert got == b"x" * 50  # what the file had, then the connection ended
    assert len(errors) == 1 and "past the end" in str(errors[0].__cause__)
    assert region.released


async def test_a_region_past_the_end_of_its_file_on_a_memory_stream_fails_only_its_channel(
    tmp_path: Path,
) -> None:
    """Where the region is read rather than sent with sendfile, a short file fails the write
    and closes that connection, as sendfile's end of file does; nothing escapes the channel."""
    path = tmp_path / "short"
    path.write_bytes(b"x" * 100)
    fd = os.open(path, os.O_RDONLY)
    region = FileRegion.of(fd, 50, 100)  # 50 bytes short
    os.close(fd)
    left, right = trio.testing.memory_stream_pair()
    errors: list[BaseException] = []

    async def write(channel: StreamChannel) -> None:
        try:
            await channel.pipeline.write_and_flush(region)
        except ChannelClosedError as exc:
            errors.append(exc)
        await channel.wait_closed()

    assert await send_through_channel(left, right, write) == b""
    assert len(errors) == 1 and "past the end" in str(errors[0].__cause__)
    assert region.released


async def test_regions_queued_when_the_channel_closes_are_released(data_fd: int) -> None:
    left, _right = trio.testing.memory_stream_pair()
    regions = [FileRegion.of(data_fd, 0, 10) for _ in range(3)]
    failed: list[WriteFuture] = []
    async with trio.open_nursery() as nursery:
        channel: StreamChannel = await nursery.start(
            functools.partial(run_channel, left, lambda ch: None)
        )
        for region in regions[:2]:
            failed.append(channel.pipeline.write(region))  # written, never flushed
        await channel.close()
        failed.append(channel.pipeline.write(regions[2]))  # written after the close
    assert all(region.released for region in regions)
    assert all(isinstance(f.exception(), ChannelClosedError) for f in failed)


def test_a_region_written_with_a_future_already_done_is_released(data_fd: int) -> None:
    channel = EmbeddedChannel()
    future = WriteFuture()
    future.set_exception(ChannelClosedError("given up"))
    region = FileRegion.of(data_fd, 0, 10)
    assert channel.pipeline.write(region, future) is future
    assert region.released


def test_embedded_channel_records_a_regions_bytes_and_releases_it(data_fd: int) -> None:
    channel = EmbeddedChannel()
    region = FileRegion.of(data_fd, 10, 20)
    channel.write_outbound(b"a", region)
    assert channel.read_outbound() == b"a"
    assert channel.read_outbound() == DATA[10:30]
    assert region.released


def test_a_region_counts_its_bytes_against_the_water_marks(data_fd: int) -> None:
    config = ChannelConfig(water_marks=WaterMarks(low=1000, high=2000, entry_overhead=0))
    channel = EmbeddedChannel(config=config)
    seen: list[bool] = []

    class Watch(ChannelInboundHandler):
        def channel_writability_changed(self, ctx: HandlerContext) -> None:
            seen.append(ctx.channel.is_writable)

    channel.pipeline.add_last(Watch())
    region = FileRegion.of(data_fd, 0, 2001)
    channel.pipeline.write(region)
    assert seen == [False] and channel.bytes_before_writable == 1002
    channel.pipeline.flush()
    assert seen == [False, True]
    region.release()


def test_a_region_is_checked_when_made(data_fd: int) -> None:
    with pytest.raises(ValueError, match="position must be >= 0"):
        FileRegion.of(data_fd, -1, 10)
    with pytest.raises(ValueError, match="count must be >= 0"):
        FileRegion.of(data_fd, 0, -10)
    with pytest.raises(ValueError, match="the view has 3 bytes, the region 4"):
        FileRegion.of(data_fd, 0, 4, memoryview(b"abc"))
