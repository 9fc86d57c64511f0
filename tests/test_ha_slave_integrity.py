"""The HA slave never keeps, reports or acknowledges replicated bytes that fail validation.

A fake master (memory streams, virtual time) serves a commit log with one corrupt record; the
slave must truncate back to the last valid record end, close, reconnect reporting exactly that
offset, and end byte-identical to the master once correct data is served.
"""

from __future__ import annotations

import logging
import random
import struct

import pytest
import trio
import trio.testing
from ha_support import FILE, commit_log_bytes

from hanet.ha import BrokerConfig, HASlave
from hanet.store import CommitLogStore, Message
from hanet.store.lowlevel import BLANK_MAGIC
from hanet.testing import wait_until

REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")
CONFIG = BrokerConfig(mapped_file_size_commit_log=FILE)
PHYSICAL_OFFSET_FIELD = 28  # TOTALSIZE, MAGIC, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET


def corrupt(kind: str, data: bytearray, at: int, size: int) -> None:
    """Damage the record of ``size`` bytes at ``at`` in ``data`` (a commit log from 0)."""
    if kind == "body":
        data[at + size - 10] ^= 0x01  # the body ends 4 bytes before the record (topic "T")
    elif kind == "random":
        data[at : at + size] = random.Random(7).randbytes(size)
    elif kind == "zeros":
        data[at : at + size] = bytes(size)
    elif kind == "physical_offset":
        struct.pack_into(">q", data, at + PHYSICAL_OFFSET_FIELD, at + 1)
    elif kind == "total_size":
        struct.pack_into(">i", data, at, size - 8)
    elif kind == "magic":
        struct.pack_into(">I", data, at + 4, 0xDEADBEEF)
    elif kind == "blank":
        struct.pack_into(">iI", data, at, size, BLANK_MAGIC)
    else:  # pragma: no cover
        raise AssertionError(kind)


class FakeMaster:
    """Hands the slave memory streams and keeps the master ends."""

    def __init__(self) -> None:
        self.peers: list[trio.abc.Stream] = []

    async def __call__(self) -> trio.abc.Stream:
        slave_end, master_end = trio.testing.memory_stream_pair()
        self.peers.append(master_end)
        return slave_end


class Reports:
    """Reads every report of one connection in the background."""

    def __init__(self) -> None:
        self.values: list[int] = []
        self.closed = trio.Event()

    async def run(self, peer: trio.abc.ReceiveStream) -> None:
        buffer = b""
        while True:
            try:
                chunk = await peer.receive_some()
            except trio.ClosedResourceError:  # the test closed this end
                chunk = b""
            if not chunk:
                self.closed.set()
                return
            buffer += chunk
            while len(buffer) >= 8:
                self.values.append(REPORT.unpack(buffer[:8])[0])
                buffer = buffer[8:]


KINDS = ["body", "random", "zeros", "physical_offset", "total_size", "magic", "blank"]


@pytest.mark.parametrize("frame_size", [1 << 20, 150])
@pytest.mark.parametrize("kind", KINDS)
async def test_corrupt_record_is_never_kept_nor_reported(
    autojump_clock: trio.testing.MockClock,
    master_store: CommitLogStore,
    slave_store: CommitLogStore,
    caplog: pytest.LogCaptureFixture,
    kind: str,
    frame_size: int,
) -> None:
    caplog.set_level(logging.INFO)
    for i in range(6):
        assert master_store.put(Message(topic="T", body=bytes([i]) * 100)).ok
    end = master_store.max_offset
    good = master_store.read(0, end)
    entry = master_store.consume_queue_entry("T", 0, 3)
    assert entry is not None
    bad_at, bad_size = entry[0], entry[1]
    damaged = bytearray(good)
    corrupt(kind, damaged, bad_at, bad_size)

    async with trio.open_nursery() as nursery:
        fake = FakeMaster()
        await nursery.start(HASlave(slave_store, CONFIG, connector=fake).run)
        await wait_until(lambda: fake.peers, seconds=60)
        first = Reports()
        nursery.start_soon(first.run, fake.peers[0])
        await wait_until(lambda: first.values, seconds=60)
        assert first.values == [0]
        peer = fake.peers[0]
        for offset in range(0, end, frame_size):
            body = bytes(damaged[offset : offset + frame_size])
            try:
                await peer.send_all(HEADER.pack(offset, len(body)) + body)
            except trio.BrokenResourceError:
                break
            await trio.sleep(0.01)
        await first.closed.wait()
        assert max(first.values) <= bad_at, first.values
        assert slave_store.max_offset == bad_at
        assert commit_log_bytes(slave_store) == good[:bad_at]
        assert f"offset {bad_at}" in caplog.text
        assert "replicated data failed validation" in caplog.text
        assert any(r.levelno == logging.ERROR for r in caplog.records)

        # The reconnection reports the last valid end; correct data then completes the copy.
        await wait_until(lambda: len(fake.peers) == 2, seconds=60)
        second = Reports()
        nursery.start_soon(second.run, fake.peers[1])
        await wait_until(lambda: second.values, seconds=60)
        assert second.values[0] == bad_at
        await fake.peers[1].send_all(HEADER.pack(bad_at, end - bad_at) + good[bad_at:])
        await wait_until(lambda: second.values[-1] == end, seconds=60)
        assert max(first.values + second.values) <= end
        nursery.cancel_scope.cancel()
    assert commit_log_bytes(slave_store) == good
    assert slave_store.dispatch_error is None
    assert slave_store.max_queue_offset("T", 0) == 6


async def test_partial_record_is_not_reported_and_dropped_on_reconnect(
    autojump_clock: trio.testing.MockClock,
    master_store: CommitLogStore,
    slave_store: CommitLogStore,
) -> None:
    for i in range(3):
        assert master_store.put(Message(topic="T", body=bytes([i]) * 100)).ok
    end = master_store.max_offset
    good = master_store.read(0, end)
    entry = master_store.consume_queue_entry("T", 0, 2)
    assert entry is not None
    async with trio.open_nursery() as nursery:
        fake = FakeMaster()
        await nursery.start(HASlave(slave_store, CONFIG, connector=fake).run)
        await wait_until(lambda: fake.peers, seconds=60)
        reports = Reports()
        nursery.start_soon(reports.run, fake.peers[0])
        cut = entry[0] + 50  # in the middle of the last record
        await fake.peers[0].send_all(HEADER.pack(0, cut) + good[:cut])
        await wait_until(lambda: len(reports.values) >= 2, seconds=60)
        assert reports.values[-1] == entry[0]
        await fake.peers[0].aclose()  # the master goes away mid-record
        await wait_until(lambda: len(fake.peers) == 2, seconds=60)
        again = Reports()
        nursery.start_soon(again.run, fake.peers[1])
        await wait_until(lambda: again.values, seconds=60)
        assert again.values[0] == entry[0]
        assert slave_store.max_offset == entry[0]
        await fake.peers[1].send_all(HEADER.pack(entry[0], end - entry[0]) + good[entry[0] :])
        await wait_until(lambda: again.values[-1] == end, seconds=60)
        nursery.cancel_scope.cancel()
    assert commit_log_bytes(slave_store) == good


async def test_dispatch_runs_behind_the_report_in_batches(
    autojump_clock: trio.testing.MockClock,
    master_store: CommitLogStore,
    slave_store: CommitLogStore,
) -> None:
    """The slave validates, copies and reports each read; the consume queues follow after the
    report, and listeners (consumers' wake-ups) hear of the records once they are dispatched."""
    for i in range(40):
        assert master_store.put(Message(topic=f"T{i % 2}", body=bytes([i]) * 90)).ok
    end = master_store.max_offset
    good = master_store.read(0, end)
    heard: list[tuple[int, int, int]] = []
    slave_store.add_listener(
        lambda offset: heard.append(
            (offset, slave_store.dispatched_offset, slave_store.max_queue_offset("T0", 0))
        )
    )
    async with trio.open_nursery() as nursery:
        fake = FakeMaster()
        slave = HASlave(slave_store, CONFIG, connector=fake)
        await nursery.start(slave.run)
        await wait_until(lambda: fake.peers, seconds=60)
        reports = Reports()
        nursery.start_soon(reports.run, fake.peers[0])
        await wait_until(lambda: reports.values, seconds=60)
        for offset in range(0, end, 1000):
            body = good[offset : offset + 1000]
            await fake.peers[0].send_all(HEADER.pack(offset, len(body)) + body)
            await trio.sleep(0.01)
        await wait_until(lambda: reports.values[-1] == end, seconds=60)
        await wait_until(lambda: slave_store.dispatched_offset == end, seconds=60)
        nursery.cancel_scope.cancel()
    assert slave_store.dispatch_error is None
    assert slave_store.max_queue_offset("T0", 0) == slave_store.max_queue_offset("T1", 0) == 20
    for q in range(20):
        assert slave_store.consume_queue_entry("T1", 0, q) == master_store.consume_queue_entry(
            "T1", 0, q
        )
    assert heard and heard[-1] == (end, end, 20)
    # Every listener call came after a dispatch: the records it announces are in the queues.
    assert all(dispatched >= offset - 1000 for offset, dispatched, _ in heard)
    assert slave_store.statistics().dispatched_offset == end


async def test_the_dispatcher_dispatches_what_is_left_when_the_slave_stops(
    autojump_clock: trio.testing.MockClock,
    master_store: CommitLogStore,
    slave_store: CommitLogStore,
) -> None:
    for i in range(10):
        assert master_store.put(Message(topic="T", body=bytes([i]) * 90)).ok
    end = master_store.max_offset
    good = master_store.read(0, end)
    async with trio.open_nursery() as nursery:
        fake = FakeMaster()
        await nursery.start(HASlave(slave_store, CONFIG, connector=fake).run)
        await wait_until(lambda: fake.peers, seconds=60)
        await fake.peers[0].send_all(HEADER.pack(0, end) + good)
        await wait_until(lambda: slave_store.max_offset == end, seconds=60)
        nursery.cancel_scope.cancel()  # maybe before the dispatcher ran: it finishes on exit
    assert slave_store.dispatched_offset == end
    assert slave_store.max_queue_offset("T", 0) == 10
