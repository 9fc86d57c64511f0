"""A RocketMQ 4.9.8 slave that stopped in the middle of a record (RocketMQ's master cuts its
frames every 32 KiB, not at records) resumes from a hanet master that took over: the master
serves any offset inside a valid record, as RocketMQ's master does, and refuses only an offset
outside its log or inside a damaged record."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

from hanet.ha import BrokerConfig, HAMaster
from hanet.store import CommitLogStore, Message, StoreConfig
from hanet.testing import receive_exactly

FILE = 1 << 20
ROCKETMQ_FRAME = 32 * 1024  # RocketMQ's haTransferBatchSize
REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")
CONFIG = BrokerConfig(mapped_file_size_commit_log=FILE, full_sync=True)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CommitLogStore]:
    with CommitLogStore.open(tmp_path / "m", StoreConfig(mapped_file_size=FILE)) as store:
        for i in range(400):
            assert store.put(Message("TopicTest", b"%04d" % i * 75, queue_id=i % 4)).ok
        yield store


async def session(master: HAMaster, offset: int, wanted: int) -> tuple[bytes, str]:
    """A slave that reports ``offset`` and reads ``wanted`` bytes (or until closed)."""
    received = b""
    async with trio.open_nursery() as nursery:
        stream, master_end = trio.testing.memory_stream_pair()
        nursery.start_soon(master.handle_stream, master_end)
        await stream.send_all(REPORT.pack(offset))
        with contextlib.suppress(EOFError), trio.fail_after(30):
            while len(received) < wanted:
                frame_offset, size = HEADER.unpack(await receive_exactly(stream, HEADER.size))
                assert frame_offset == offset + len(received)
                received += await receive_exactly(stream, size)
        nursery.cancel_scope.cancel()
    closed = master.status().closed
    state = closed[-1].state if closed else ""
    return received, state


def log_bytes(store: CommitLogStore, start: int, end: int) -> bytes:
    out = b""
    while start + len(out) < end:
        out += store.read(start + len(out), end - start - len(out))
    return out


async def test_a_slave_cut_mid_record_resumes_there(
    autojump_clock: trio.testing.MockClock, store: CommitLogStore
) -> None:
    master = HAMaster(store, CONFIG)
    # What a RocketMQ slave holds after the first frames of a RocketMQ master: a multiple of
    # 32 KiB, inside a record here.
    cut = 2 * ROCKETMQ_FRAME
    first = store.consume_queue_entry("TopicTest", 0, 0)
    assert first is not None
    starts = {
        entry[0]
        for q in range(4)
        for i in range(100)
        if (entry := store.consume_queue_entry("TopicTest", q, i)) is not None
    }
    assert cut not in starts  # really inside a record
    received, _ = await session(master, cut, store.max_offset - cut)
    assert received == log_bytes(store, cut, store.max_offset)
    assert all("cannot be served" not in c.state for c in master.status().closed)


async def test_an_offset_inside_damaged_data_is_refused_naming_it(
    autojump_clock: trio.testing.MockClock, store: CommitLogStore
) -> None:
    entry = store.consume_queue_entry("TopicTest", 1, 50)
    assert entry is not None
    bad = entry[0]
    path = store.root / "commitlog" / f"{0:020d}"
    with path.open("r+b") as f:  # a flipped byte in the record's topic
        f.seek(bad + entry[1] - 40)
        byte = f.read(1)[0]
        f.seek(bad + entry[1] - 40)
        f.write(bytes([byte ^ 0x08]))
    master = HAMaster(store, CONFIG)
    received, state = await session(master, bad + 100, 1)
    assert received == b""
    assert f"request offset {bad + 100} cannot be served" in state
    assert f"the record at {bad} around it is damaged" in state
    # inside the valid record after it: served (only the damaged record is refused)
    after = bad + entry[1] + 5
    received, _ = await session(master, after, 10)
    assert received[:10] == log_bytes(store, after, after + 10)
    # outside the log
    received, state = await session(master, store.max_offset + 5, 1)
    assert received == b"" and "outside the master's" in state
