"""The slave's handlers on an EmbeddedChannel: the frames of one read are checked frame by
frame (each must continue the one before) and applied to the log together when the read is
complete, then passed on; nothing of a batch that fails validation is passed on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hanet.channel import EmbeddedChannel
from hanet.handlers.ha import CommitLogReplayHandler, OffsetVerifier, TransferFrame
from hanet.store import CommitLogStore, Message, StoreConfig, StoreRole

FILE = 64 * 1024


@pytest.fixture
def log(tmp_path: Path) -> Iterator[bytes]:
    """A master's commit log: 40 records of a few hundred bytes, from offset 0."""
    master = CommitLogStore.open(tmp_path / "master", StoreConfig(mapped_file_size=FILE))
    for i in range(40):
        master.put(Message(topic="T", body=bytes([i]) * (100 + 17 * i), queue_id=i % 3))
    data = master.read(0, master.max_offset)
    master.close()
    yield data


@pytest.fixture
def slave(tmp_path: Path) -> Iterator[CommitLogStore]:
    store = CommitLogStore.open(
        tmp_path / "slave", StoreConfig(mapped_file_size=FILE, role=StoreRole.SLAVE)
    )
    yield store
    store.close()


def frames(data: bytes, size: int, start: int = 0) -> list[TransferFrame]:
    """``data`` (the log from ``start``) cut into frames of ``size`` bytes: records straddle."""
    return [
        TransferFrame(start + i, memoryview(data)[i : i + size]) for i in range(0, len(data), size)
    ]


def channel(store: CommitLogStore) -> EmbeddedChannel:
    return EmbeddedChannel(OffsetVerifier(store), CommitLogReplayHandler(store, file_size=FILE))


def test_a_reads_frames_are_applied_together_when_it_is_complete(
    log: bytes, slave: CommitLogStore
) -> None:
    ch = channel(slave)
    pieces = frames(log, 1000)
    for frame in pieces[:5]:
        ch.write_one_inbound(frame)  # one read, not complete yet
    assert slave.max_offset == 0  # nothing applied before the read completes...
    assert ch.read_inbound() is None  # ...nor passed on
    ch.flush_inbound()
    assert slave.max_offset == 5000
    assert [ch.read_inbound() for _ in range(5)] == pieces[:5]  # passed on after, in order
    ch.write_inbound(*pieces[5:])  # the rest in one more read
    assert slave.max_offset == slave.validated_offset == len(log)
    assert slave.read(0, len(log)) == log
    assert ch.is_open


def test_a_frame_that_does_not_continue_the_one_before_in_the_same_read_closes(
    log: bytes, slave: CommitLogStore
) -> None:
    ch = channel(slave)
    pieces = frames(log, 1000)
    ch.write_one_inbound(pieces[0])
    ch.write_one_inbound(pieces[2])  # in the same read, pieces[1] missing
    assert not ch.is_open
    assert ch.close_reason is not None
    assert "SLAVE: 1000 MASTER: 2000" in ch.close_reason
    assert slave.max_offset == 1000  # the frame before the gap is kept (it was whole)
    assert ch.read_inbound() == pieces[0]
    assert ch.read_inbound() is None


def test_a_bad_record_in_a_batch_keeps_the_records_before_it_and_passes_nothing_on(
    log: bytes, slave: CommitLogStore
) -> None:
    damaged = bytearray(log)
    damaged[2500] ^= 0xFF  # inside a record's body (records are 200..800 bytes here)
    ch = channel(slave)
    pieces = frames(bytes(damaged), 1000)
    ch.write_inbound(*pieces[:4])
    assert not ch.is_open
    assert ch.close_reason is not None and "failed validation" in ch.close_reason
    bad = slave.dispatch_error
    assert bad is not None
    assert slave.max_offset == slave.validated_offset < 2500  # the records before it, only
    assert slave.read(0, slave.max_offset) == log[: slave.max_offset]
    assert ch.read_inbound() is None  # none of the read's frames was passed on


def test_a_heartbeat_applies_the_frames_before_it(log: bytes, slave: CommitLogStore) -> None:
    ch = channel(slave)
    pieces = frames(log, 700)
    ch.write_one_inbound(pieces[0])
    ch.write_one_inbound(pieces[1])
    ch.write_one_inbound(TransferFrame(1400))  # a heartbeat at the end of the batch
    assert slave.max_offset == 1400
    assert [ch.read_inbound() for _ in range(3)] == [*pieces[:2], TransferFrame(1400)]
