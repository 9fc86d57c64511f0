"""What the HA tests share: small commit log stores (master and slave fixtures), puts, the
bytes of a commit log, and a connector that hands a slave memory streams to a master."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

from hanet.ha import HAMaster
from hanet.store import CommitLogStore, Message, PutStatus, StoreConfig, StoreRole
from hanet.testing import receive_exactly

FILE = 8192
"""The HA tests' commit log file size: a few records a file."""


def open_store(path: Path, role: StoreRole = StoreRole.MASTER, size: int = FILE) -> CommitLogStore:
    return CommitLogStore.open(path, StoreConfig(mapped_file_size=size, role=role))


@pytest.fixture
def master_store(tmp_path: Path) -> Iterator[CommitLogStore]:
    """A master's store of :data:`FILE`-byte files in ``tmp_path/master``."""
    store = open_store(tmp_path / "master")
    yield store
    store.close()


@pytest.fixture
def slave_store(tmp_path: Path) -> Iterator[CommitLogStore]:
    """A slave's store of :data:`FILE`-byte files in ``tmp_path/slave``."""
    store = open_store(tmp_path / "slave", StoreRole.SLAVE)
    yield store
    store.close()


def put(
    store: CommitLogStore,
    n: int,
    size: int = 100,
    topic: str = "T",
    *,
    queues: int = 1,
    fill: int = 0,
) -> int:
    """Put ``n`` messages of ``size`` bytes (message ``i`` filled with ``(i + fill) % 251``,
    on queue ``i % queues``); returns the store's max offset."""
    for i in range(n):
        body = bytes([(i + fill) % 251]) * size
        result = store.put(Message(topic=topic, body=body, queue_id=i % queues))
        assert result.status is PutStatus.PUT_OK
    return store.max_offset


def commit_log_bytes(
    store: CommitLogStore, start: int | None = None, end: int | None = None
) -> bytes:
    """The commit log's bytes from ``start`` (its min offset) to ``end`` (its max offset)."""
    offset = store.min_offset if start is None else max(start, store.min_offset)
    end = store.max_offset if end is None else end
    out = bytearray()
    while offset < end:
        chunk = store.read(offset, min(1 << 20, end - offset))
        assert chunk, f"nothing to read at {offset}"
        out += chunk
        offset += len(chunk)
    return bytes(out)


class Link:
    """A connector whose streams lead to ``master`` (over memory streams)."""

    def __init__(self, nursery: trio.Nursery, master: HAMaster) -> None:
        self.nursery = nursery
        self.master = master
        self.connects = 0

    async def __call__(self) -> trio.abc.Stream:
        self.connects += 1
        slave_end, master_end = trio.testing.memory_stream_pair()
        self.nursery.start_soon(self.master.handle_stream, master_end)
        return slave_end


HA_HEADER = struct.Struct(">qi")
"""The header of a master's transfer: the offset of the data that follows, and its size."""


async def read_frame(stream: trio.abc.ReceiveStream) -> tuple[int, bytes]:
    """One transfer from a master: ``(offset, data)`` (empty data: a heartbeat)."""
    offset, size = HA_HEADER.unpack(await receive_exactly(stream, HA_HEADER.size))
    return offset, await receive_exactly(stream, size)
