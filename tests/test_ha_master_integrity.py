"""The HA master never spreads bad data: it validates what it pushes, refuses requests in the
middle of a record, and counts only complete reports as a sign of life (virtual time)."""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing
from ha_support import FILE, commit_log_bytes, open_store, put, read_frame

from hanet.ha import BrokerConfig, HAMaster, HASlave
from hanet.store import CommitLogStore, StopReason, StoreRole, scan_records
from hanet.store.lowlevel import file_name
from hanet.testing import wait_until

REPORT = struct.Struct(">q")
CONFIG = BrokerConfig(mapped_file_size_commit_log=FILE, full_sync=True)


def flip_body_byte(store: CommitLogStore, offset: int) -> None:
    """Flip the last body byte of the record at ``offset`` on disk (the mapping sees it)."""
    record = store.read_record(offset)
    tail = 2 + len(record.topic.encode()) + 2 + len(record.properties_raw)
    position = offset + record.size - tail - 1
    path = store.root / "commitlog" / file_name(position - position % FILE)
    with path.open("r+b") as f:
        f.seek(position % FILE)
        byte = f.read(1)
        f.seek(position % FILE)
        f.write(bytes([byte[0] ^ 0xFF]))
        f.flush()
        os.fsync(f.fileno())


async def read_until_eof(stream: trio.abc.Stream) -> list[tuple[int, bytes]]:
    """Read frames (acknowledging each) until the master closes; heartbeats are dropped."""
    frames: list[tuple[int, bytes]] = []
    try:
        with trio.fail_after(60):
            while True:
                offset, body = await read_frame(stream)
                if body:
                    frames.append((offset, body))
                    with contextlib.suppress(trio.BrokenResourceError):
                        await stream.send_all(REPORT.pack(offset + len(body)))
    except EOFError:
        pass
    return frames


Peer = tuple[HAMaster, trio.abc.Stream]


SMALL_BATCH = BrokerConfig(
    mapped_file_size_commit_log=FILE, full_sync=True, ha_transfer_batch_size=1000
)


@pytest.fixture
async def peer(master_store: CommitLogStore, request: pytest.FixtureRequest) -> AsyncIterator[Peer]:
    """A master on ``master_store`` (``CONFIG``, or the indirect parameter) and a raw peer."""
    master = HAMaster(master_store, getattr(request, "param", CONFIG))
    async with trio.open_nursery() as nursery:
        stream, master_end = trio.testing.memory_stream_pair()
        nursery.start_soon(master.handle_stream, master_end)
        yield master, stream
        nursery.cancel_scope.cancel()


def check_frames(frames: list[tuple[int, bytes]], start: int) -> int:
    """Frames are contiguous from ``start`` and never cross a file; returns their end."""
    offset = start
    for frame_offset, body in frames:
        assert frame_offset == offset
        assert frame_offset // FILE == (frame_offset + len(body) - 1) // FILE
        offset += len(body)
    return offset


# -- 1. a corrupt record is never pushed -------------------------------------------------------


@pytest.mark.parametrize("peer", [CONFIG, SMALL_BATCH], indirect=True, ids=["32k", "1000"])
async def test_a_flipped_body_byte_stops_the_transfer_before_the_record(
    autojump_clock: trio.testing.MockClock,
    master_store: CommitLogStore,
    caplog: pytest.LogCaptureFixture,
    peer: Peer,
) -> None:
    master, stream = peer
    put(master_store, 200)  # several files of ~170-byte records
    entry = master_store.consume_queue_entry("T", 0, 70)
    assert entry is not None
    bad = entry[0]
    assert bad > FILE  # an old record, in the second file
    flip_body_byte(master_store, bad)
    await stream.send_all(REPORT.pack(0))
    frames = await read_until_eof(stream)
    end = check_frames(frames, 0)
    assert end == bad  # everything before the bad record, nothing of it or after it
    assert b"".join(body for _, body in frames) == commit_log_bytes(master_store, 0, bad)
    reason = f"corrupt record at offset {bad}: body CRC mismatch"
    closed = master.status().closed
    assert len(closed) == 1 and reason in closed[0].state
    assert any(r.levelno == logging.ERROR and reason in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("peer", [SMALL_BATCH], indirect=True)
async def test_a_record_larger_than_a_batch_is_validated_whole(
    autojump_clock: trio.testing.MockClock, master_store: CommitLogStore, peer: Peer
) -> None:
    master, stream = peer
    put(master_store, 3)
    big = master_store.max_offset
    put(master_store, 1, size=3000)  # three batches and a bit
    good_end = put(master_store, 2, size=2500)
    await stream.send_all(REPORT.pack(0))
    frames: list[tuple[int, bytes]] = []
    while check_frames(frames, 0) < good_end:
        offset, body = await read_frame(stream)
        frames.append((offset, body))
        await stream.send_all(REPORT.pack(offset + len(body)))
    assert max(len(body) for _, body in frames) == 1000
    assert b"".join(body for _, body in frames) == commit_log_bytes(master_store, 0, good_end)
    # now a big record goes bad: not one byte of it leaves
    bad = master_store.max_offset
    put(master_store, 1, size=3000)
    flip_body_byte(master_store, bad)
    put(master_store, 1)
    frames = await read_until_eof(stream)
    assert frames == []
    assert f"corrupt record at offset {bad}" in master.status().closed[0].state
    assert big < bad


async def test_a_slave_of_a_corrupt_master_keeps_only_valid_records(
    autojump_clock: trio.testing.MockClock, master_store: CommitLogStore, tmp_path: Path
) -> None:
    put(master_store, 200)
    entry = master_store.consume_queue_entry("T", 0, 120)
    assert entry is not None
    bad = entry[0]
    flip_body_byte(master_store, bad)
    master = HAMaster(master_store, CONFIG)
    slave_store = open_store(tmp_path / "slave", StoreRole.SLAVE)
    try:
        async with trio.open_nursery() as nursery:

            async def connect() -> trio.abc.Stream:
                slave_end, master_end = trio.testing.memory_stream_pair()
                nursery.start_soon(master.handle_stream, master_end)
                return slave_end

            await nursery.start(HASlave(slave_store, CONFIG, connector=connect).run)
            await wait_until(
                lambda: len(master.status().closed) >= 2, seconds=60
            )  # reconnected, refused
            nursery.cancel_scope.cancel()
        assert slave_store.max_offset == bad
        assert slave_store.dispatch_error is None
        assert commit_log_bytes(slave_store, 0, bad) == commit_log_bytes(master_store, 0, bad)
        assert all(str(bad) in s.state for s in master.status().closed)
    finally:
        slave_store.close()


# -- 2. a request in the middle of a record is refused ------------------------------------------


async def test_a_request_inside_a_valid_record_is_served_from_there(
    autojump_clock: trio.testing.MockClock,
    master_store: CommitLogStore,
    peer: Peer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A RocketMQ slave cut off mid-frame asks for an offset inside a record: served from
    there, as RocketMQ's master does, once the record around it checks out."""
    master, stream = peer
    caplog.set_level(logging.INFO, "hanet.ha.master")
    put(master_store, 200)
    await stream.send_all(REPORT.pack(7))
    frame_offset, body = await read_frame(stream)
    assert frame_offset == 7
    assert body == commit_log_bytes(master_store, 7, 7 + len(body))
    assert master.status().slaves[0].state == "transferring"
    assert "offset 7 is inside the valid record at 0" in caplog.text


async def test_a_request_inside_a_damaged_record_is_refused_and_shown(
    autojump_clock: trio.testing.MockClock,
    master_store: CommitLogStore,
    peer: Peer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    master, stream = peer
    put(master_store, 200)
    entry = master_store.consume_queue_entry("T", 0, 30)
    assert entry is not None
    flip_body_byte(master_store, entry[0])
    await stream.send_all(REPORT.pack(entry[0] + 9))
    with pytest.raises(EOFError):
        await read_frame(stream)
    state = master.status().closed[0].state
    assert f"request offset {entry[0] + 9} cannot be served" in state
    assert f"the record at {entry[0]} around it is damaged: body CRC mismatch" in state
    assert f"request offset {entry[0] + 9} cannot be served" in caplog.text


async def test_a_request_inside_a_record_of_a_full_file_reads_no_file_tail(
    autojump_clock: trio.testing.MockClock,
    master_store: CommitLogStore,
    peer: Peer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An 8-byte report inside a record of a full older file is served after a scan of the
    record headers before it, without copying the rest of the file."""
    _, stream = peer
    put(master_store, 200)
    entry = master_store.consume_queue_entry("T", 0, 3)
    assert entry is not None and entry[0] + FILE < master_store.max_offset
    sizes: list[int] = []
    read = master_store.read

    def counting_read(offset: int, size: int) -> bytes:
        sizes.append(size)
        return read(offset, size)

    monkeypatch.setattr(master_store, "read", counting_read)
    await stream.send_all(REPORT.pack(entry[0] + 5))
    frame_offset, _ = await read_frame(stream)
    assert frame_offset == entry[0] + 5
    assert sizes == []


@pytest.mark.parametrize("where", ["record", "file start", "data end", "blank tail"])
async def test_a_request_at_a_boundary_is_served(
    autojump_clock: trio.testing.MockClock, master_store: CommitLogStore, peer: Peer, where: str
) -> None:
    master, stream = peer
    end = put(master_store, 200)
    entry = master_store.consume_queue_entry("T", 0, 40)
    assert entry is not None
    scanner = scan_records(master_store.read(FILE, FILE), base_offset=FILE)
    for _ in scanner:
        pass
    assert scanner.stop is not None and scanner.stop.reason is StopReason.BLANK
    in_tail = scanner.stop.offset + 9  # a slave may stop inside a tail shipped in pieces
    offset = {"record": entry[0], "file start": 2 * FILE, "data end": end, "blank tail": in_tail}
    await stream.send_all(REPORT.pack(offset[where]))
    frame_offset, body = await read_frame(stream)
    assert frame_offset == offset[where]
    if where == "blank tail":
        assert body == bytes(2 * FILE - in_tail)
    assert master.status().slaves[0].state == "transferring"


# -- 3. only complete reports keep a connection alive -------------------------------------------


@pytest.mark.parametrize("first_report", [False, True])
async def test_a_byte_every_15_s_does_not_keep_the_connection_alive(
    autojump_clock: trio.testing.MockClock,
    master_store: CommitLogStore,
    peer: Peer,
    first_report: bool,
) -> None:
    master, stream = peer
    start = trio.current_time()
    if first_report:
        await stream.send_all(REPORT.pack(0))
    closed_at: list[float] = []

    async def drain() -> None:
        try:
            while await stream.receive_some(65536):
                pass
        except trio.BrokenResourceError:
            pass
        closed_at.append(trio.current_time() - start)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain)
        with trio.move_on_after(120):
            while not closed_at:
                try:
                    await stream.send_all(b"\x00")
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    break
                with trio.move_on_after(15):
                    await wait_until(lambda: closed_at, seconds=60)
        nursery.cancel_scope.cancel()
    assert closed_at and 20 <= closed_at[0] < 21
    assert "housekeeping" in master.status().closed[0].state


@pytest.mark.parametrize("piece", [1000, 2000, 1500])
async def test_a_slave_cut_inside_a_large_record_resumes_where_it_stopped(
    autojump_clock: trio.testing.MockClock, master_store: CommitLogStore, piece: int
) -> None:
    """At a piece boundary (a hanet slave) or anywhere else (a RocketMQ slave's frames are
    cut every 32 KiB, not at pieces of a record)."""
    put(master_store, 3)
    big = master_store.max_offset
    end = put(master_store, 1, size=3000)  # sent as pieces of 1000 bytes from ``big`` on
    master = HAMaster(master_store, SMALL_BATCH)
    async with trio.open_nursery() as nursery:
        stream, master_end = trio.testing.memory_stream_pair()
        nursery.start_soon(master.handle_stream, master_end)
        await stream.send_all(REPORT.pack(big + piece))
        frames: list[tuple[int, bytes]] = []
        while check_frames(frames, big + piece) < end:
            frames.append(await read_frame(stream))
        assert frames[0][0] == big + piece
        assert b"".join(b for _, b in frames) == commit_log_bytes(master_store, big + piece, end)
        nursery.cancel_scope.cancel()
